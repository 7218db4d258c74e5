"""A `poll` killed with SIGKILL in the middle of its delivery (issue 53, point 6): the next `poll` delivers
every post still open, each once, at once, and says how many, on both stores. On PostgreSQL a poll delivers
through channel claims; a claim dies with the database session of the process that made it, so a dead
poll's channels are the next poll's at once, not after their lease (30 s)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from bot.models import Validators
from bot.route import ingest
from bot.store import Store, open_store
from tests.fakes.slack_api import FakeSlack
from tests.test_deliver import assert_exactly_once, feed_file, posted_items
from tests.test_multiprocess import NEW, RSS, TEAM, bot_env


def subscribed(
    url: str, tmp_path: Path, slack: FakeSlack, channels: list[str], items: int
) -> tuple[Store, dict[str, str]]:
    """A database past its baseline poll with `channels` subscribed; the feed then brings `items` new ones."""
    feed = feed_file(tmp_path / "feed.xml", [str(i.guid) for i in RSS])
    store = open_store(url)
    store.migrate()
    ingest(store, str(feed), RSS, Validators())
    for channel in channels:
        store.subscribe(TEAM, channel, "U1")
    feed_file(feed, [str(i.guid) for i in [*RSS, *NEW[:items]]])  # the feed moves on
    return store, bot_env(url, slack, feed)


def poll(env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bot", "poll", "--json"], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_at(slack: FakeSlack, env: dict[str, str], cwd: Path, posts: int) -> bool:
    """Start a poll and SIGKILL it once Slack holds `posts` posts; False when it ended before that."""
    victim = poll(env, cwd)
    try:
        assert slack.wait_for(lambda s: len(s.posts()) >= posts or victim.poll() is not None, timeout=60)
        killed = victim.poll() is None
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.communicate(timeout=10)
    return killed


def next_poll(store: Store, env: dict[str, str], cwd: Path) -> str:
    """The poll after the kills exits 0 having delivered every post left open (a landed post whose answer
    the dead process never heard is found in its channel and counted, the others are posted), and left
    nothing to other processes. Its log."""
    open_rows = sum(d.state in ("pending", "posting") for d in store.deliveries())
    after = poll(env, cwd)
    out, err = after.communicate(timeout=120)
    assert after.returncode == 0, err
    answer = json.loads(out)
    assert (answer["delivered"], answer["failed"], answer["left_to_others"]) == (open_rows, 0, 0), err
    assert {d.state for d in store.deliveries()} == {"sent"}
    return err


def test_the_poll_after_a_kill_9_delivers_every_open_post_once(
    database_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    channels = [f"C{n:02d}" for n in range(40)]
    store, env = subscribed(database_url, tmp_path, slack_api, channels, 1)
    slack_api.latency = 0.2  # each post lands 0.2 s before the bot hears back: posts are in flight
    assert kill_at(slack_api, env, tmp_path, 15)
    left = store.deliveries()
    assert len(left) == 40 and any(d.state == "posting" for d in left)  # killed in the middle of a post
    assert sum(d.state == "sent" for d in left) < 40
    slack_api.latency = 0.02
    log = next_poll(store, env, tmp_path)
    assert "event=delivery_reconciled" in log
    assert_exactly_once(slack_api, channels, NEW[:1])


def test_five_kills_in_a_row_then_a_poll_deliver_all_90_posts_once(
    database_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    channels = [f"C{n:02d}" for n in range(45)]
    store, env = subscribed(database_url, tmp_path, slack_api, channels, 2)
    slack_api.latency = 0.2
    kills = 0
    for _ in range(5):
        kills += kill_at(slack_api, env, tmp_path, len(slack_api.posts()) + 6)
    assert kills >= 3  # the test is about polls that died
    assert len(slack_api.posts()) < 90
    slack_api.latency = 0.02
    next_poll(store, env, tmp_path)
    assert_exactly_once(slack_api, channels, NEW[:2])
    for channel in channels:
        assert posted_items(slack_api, channel) == [i.id for i in NEW[:2]]
