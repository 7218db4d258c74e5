"""Several bot processes on one PostgreSQL database (issue 5): any number of `serve` processes answer, exactly
one polls and delivers at a time (elected through an advisory lock), and each subscribed channel gets each
new item exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.feed import parse
from bot.models import Validators
from bot.route import ingest
from bot.store import open_store
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, ServeProcess, clean_env
from tests.test_deliver import assert_exactly_once, feed_file

pytestmark = pytest.mark.postgres

DATA = Path(__file__).parent / "data"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
NEW = [i for i in parse((DATA / "apple_ml_archive.xml").read_bytes()) if i.id not in {r.id for r in RSS}]
TEAM = "T0FAKE"
CHANNELS = ["C1", "C2", "C3"]
ROOT = Path(__file__).resolve().parent.parent


def prepared(url: str, feed: Path) -> None:
    """A database past its baseline poll of `feed`, with three subscribed channels."""
    store = open_store(url)
    store.migrate()
    ingest(store, str(feed), RSS, Validators())
    for channel in CHANNELS:
        store.subscribe(TEAM, channel, "U1")
    store.close()


def bot_env(url: str, slack: FakeSlack, feed: Path, **extra: str) -> dict[str, str]:
    return clean_env(
        SLACK_BOT_TOKEN=TOKEN,
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_API_URL=slack.url,
        FEED_URL=str(feed),
        DATABASE_URL=url,
        LOG_LEVEL="INFO",
        **extra,
    )


def test_two_poll_processes_started_at_once_post_each_new_item_once(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    feed = feed_file(tmp_path / "feed.xml", [str(i.guid) for i in RSS])
    prepared(pg_schema_url, feed)
    feed_file(feed, [str(i.guid) for i in [*RSS, *NEW[:2]]])
    slack_api.latency = 0.1  # a delivery run long enough for the two processes to overlap
    env = bot_env(pg_schema_url, slack_api, feed)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "bot", "poll", "--json"],
            env=env,
            cwd=tmp_path,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    answers = []
    for run in runs:
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        answers.append(json.loads(out))
    assert sorted(a["delivered"] for a in answers) == [0, 6]  # one delivered, the other waited its turn
    assert_exactly_once(slack_api, CHANNELS, NEW[:2])


def test_two_serve_processes_on_one_database_post_each_new_item_once(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    feed = feed_file(tmp_path / "feed.xml", [str(i.guid) for i in RSS])
    prepared(pg_schema_url, feed)
    slack_api.latency = 0.05
    env = bot_env(pg_schema_url, slack_api, feed, POLL_INTERVAL="1")
    with ServeProcess(env, tmp_path) as first, ServeProcess(env, tmp_path) as second:
        feed_file(feed, [str(i.guid) for i in [*RSS, *NEW[:2]]])  # a new item arrives (two, in fact)
        assert slack_api.wait_for(lambda s: len(s.posts()) >= 6, timeout=30)
        time.sleep(3)  # several more poll cycles of both processes: nothing is posted again
        logs = first.output() + second.output()
    assert_exactly_once(slack_api, CHANNELS, NEW[:2])
    assert logs.count("event=poll ") >= 4  # both processes kept polling, taking turns
    assert "Traceback" not in logs
