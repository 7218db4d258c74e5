"""`serve` on first run: a sparse archive is filled from the research index in the background, the feed's
baseline poll still posts nothing, and a broken index is logged and never stops serving."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from bot.config import Settings
from bot.server import start_poller
from bot.store import Store
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, ServeProcess, http

DATA = Path(__file__).resolve().parent / "data"


def wait_for_items(bot: ServeProcess, count: int, timeout: float = 15.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    health: dict[str, object] = {}
    while time.monotonic() < deadline:
        health = json.loads(http("GET", bot.base + "/healthz")[1])
        if int(str(health["items"])) >= count and health["last_poll"]:
            return health
        time.sleep(0.1)
    raise AssertionError(f"archive never reached {count} items: {health}\n{bot.output()}")


def test_serve_backfills_a_sparse_archive_and_posts_nothing(tmp_path: Path) -> None:
    with FeedServer() as site, FakeSlack() as slack:
        feed_url = site.feed("/rss.xml", (DATA / "apple_ml_rss.xml").read_bytes())
        site.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
               "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}", "FEED_URL": feed_url,
               "POLL_INTERVAL": "3600"}
        with ServeProcess(env, tmp_path) as bot:
            # 10 feed items, plus the 6 older posts only the index holds
            health = wait_for_items(bot, 16)
            assert health["items"] == 16
        assert len(site.requests_to("/research")) == 1
        assert [c for c in slack.calls if c.method == "chat.postMessage"] == []
        assert "event=backfill" in bot.output()


def test_serve_survives_a_broken_index(tmp_path: Path) -> None:
    with FeedServer() as site, FakeSlack() as slack:
        feed_url = site.feed("/rss.xml", (DATA / "apple_ml_rss.xml").read_bytes())
        site.route("/research", Reply(status=500, body=b"oops", content_type="text/html"))
        env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
               "DATABASE_URL": f"sqlite:///{tmp_path / 'bot.db'}", "FEED_URL": feed_url,
               "POLL_INTERVAL": "3600"}
        with ServeProcess(env, tmp_path) as bot:
            health = wait_for_items(bot, 10)
            assert health["feed_ok"] is True
            deadline = time.monotonic() + 10
            while "event=backfill_failed" not in bot.output() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert "event=backfill_failed" in bot.output()
            assert "retry=next_poll" in bot.output()
            assert "Traceback" not in bot.output()


def test_without_a_poller_a_failed_backfill_says_it_is_retried_at_the_next_start(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """With POLL_INTERVAL=0 there is no next poll: until 2026-12-06 the log said `poller_disabled` and then
    `backfill_failed … retry=next_poll`. Now it says what is true: the next start retries."""
    caplog.set_level(logging.INFO, logger="bot")
    with FeedServer() as site:
        feed_url = site.feed("/rss.xml", (DATA / "apple_ml_rss.xml").read_bytes())
        site.route("/research", Reply(status=500, body=b"oops", content_type="text/html"))
        assert start_poller(Settings(feed_url=feed_url, poll_interval=0), store) is None
        deadline = time.monotonic() + 30  # the backfill runs in its own thread; one request to a local server
        while "event=backfill_failed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "event=poller_disabled" in caplog.text
    assert "event=backfill_failed" in caplog.text and "retry=next_start" in caplog.text
    assert "next_poll" not in caplog.text
