"""The status reply's parts, and `status` on the command line and in Slack."""

from __future__ import annotations

import json
import socket
from datetime import timedelta
from pathlib import Path

from bot import status
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.store import MIGRATIONS, open_store, utcnow
from tests.fakes.archive import RSS
from tests.test_cli import run
from tests.test_newcomer import one_line_error


def test_when_reads_naturally() -> None:
    now = utcnow()
    assert status.when(None) == "never"
    assert status.when(now - timedelta(seconds=30), now).endswith("(just now)")
    assert status.when(now - timedelta(minutes=10), now).endswith("(10 min ago)")
    assert status.when(now - timedelta(hours=5), now).endswith("(5 h ago)")
    assert status.when(now - timedelta(days=3), now).endswith("(3 days ago)")


# --- `status` changes no database and says the same on both stores (issue 54) -----------------------------


def test_status_on_a_fresh_database_changes_nothing_and_says_so_on_both_stores(
    database_url: str, tmp_path: Path
) -> None:
    """Until 2026-12-06 `status` created the tables of a fresh PostgreSQL database (the first `migrate` then
    said "already up to date") while it refused a fresh SQLite one: now both refuse in one line, and the
    database is as it was."""
    for args in (["status"], ["status", "--json"]):
        line = one_line_error(run(tmp_path, *args, DATABASE_URL=database_url), 1)
        assert line.startswith("mlresearch-bot: no archive ") and "yet: run `mlresearch-bot poll`" in line
    untouched = open_store(database_url)
    assert not untouched.exists() and untouched.applied_migrations() == []
    migrated = run(tmp_path, "migrate", DATABASE_URL=database_url)
    assert migrated.returncode == 0 and "applied" in migrated.stdout and "up to date" not in migrated.stdout


def test_status_shows_the_health_of_the_feed_it_is_told_to_read(database_url: str, tmp_path: Path) -> None:
    """A feed is OK only once it answered: after polling a file feed, `status` with FEED_URL set to another
    (here, a port nobody listens on) said "Feed: OK · last poll …" for a feed never reached (until
    2026-12-06). The command line and Slack's /mlresearch status alike."""
    assert run(tmp_path, "poll", DATABASE_URL=database_url, FEED_URL=str(RSS)).returncode == 0
    elsewhere = f"http://127.0.0.1:{closed_port()}/rss.xml"
    text = run(tmp_path, "status", DATABASE_URL=database_url, FEED_URL=elsewhere)
    assert (text.returncode, text.stderr) == (0, "")
    assert text.stdout.startswith("Feed: not polled yet\nArchive: 10 items")
    listed = run(tmp_path, "status", "--json", DATABASE_URL=database_url, FEED_URL=elsewhere)
    assert json.loads(listed.stdout)["feed"] is None
    store = open_store(database_url)
    reply = handle(Invocation("status", "T1", "C1", "U1"), Services(store, Settings(feed_url=elsewhere)))
    assert reply.text.startswith("Status: Feed: not polled yet · Archive: 10 items")
    polled = run(tmp_path, "status", DATABASE_URL=database_url, FEED_URL=str(RSS))
    assert polled.stdout.startswith("Feed: OK · last poll ")
    reply = handle(Invocation("status", "T1", "C1", "U1"), Services(store, Settings(feed_url=str(RSS))))
    assert reply.text.startswith("Status: Feed: OK · last poll ")


def test_status_changes_no_database_whose_schema_is_behind(database_url: str, tmp_path: Path) -> None:
    """A database an earlier release left is not upgraded by `status`: one line naming `migrate`."""
    store = open_store(database_url)
    store.migrate(stop_before=MIGRATIONS[-1])
    line = one_line_error(run(tmp_path, "status", DATABASE_URL=database_url), 1)
    assert "run `mlresearch-bot migrate` first" in line
    assert MIGRATIONS[-1] not in store.applied_migrations()


def closed_port() -> int:
    with socket.socket() as probe:  # a port nobody listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
