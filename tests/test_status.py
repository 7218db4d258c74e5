"""The status reply's parts."""

from __future__ import annotations

from datetime import timedelta

from bot import status
from bot.store import utcnow


def test_when_reads_naturally() -> None:
    now = utcnow()
    assert status.when(None) == "never"
    assert status.when(now - timedelta(seconds=30), now).endswith("(just now)")
    assert status.when(now - timedelta(minutes=10), now).endswith("(10 min ago)")
    assert status.when(now - timedelta(hours=5), now).endswith("(5 h ago)")
    assert status.when(now - timedelta(days=3), now).endswith("(3 days ago)")
