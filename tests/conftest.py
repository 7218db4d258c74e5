"""Shared pytest fixtures. Fakes live in tests/fakes/ and run over loopback; no test reaches the internet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.slack_api import FakeSlack

# --- the local Slack Web API (tests/fakes/slack_api.py) --------------------------------------------------


@pytest.fixture
def slack_api() -> Iterator[FakeSlack]:
    """A FakeSlack on 127.0.0.1 (random port); `slack_api.url` is the SLACK_API_URL to use."""
    with FakeSlack() as fake:
        yield fake


# --- the local feed server (tests/fakes/feed_server.py) -------------------------------------------------

from tests.fakes.feed_server import feed_server  # noqa: E402, F401 - the `feed_server` fixture
