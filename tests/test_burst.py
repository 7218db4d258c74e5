"""Bursts (issue 13): more than BURST_THRESHOLD new items of one poll for a channel are one top-level message
(metadata mlresearch_batch) with each item's usual message in its thread, exactly once under kill -9, rate
limits and restarts; at or below the threshold nothing changes. Real slack_sdk traffic over loopback to
tests/fakes/slack_api.py, on both stores."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from bot import blocks, deliver
from bot.config import Settings
from bot.deliver import Deliverer
from bot.errors import ConfigError
from bot.models import Item, Validators
from bot.route import ingest
from bot.slackweb import make_client
from bot.store import Store
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import clean_env

FEED = "https://machinelearning.apple.com/rss.xml"
TEAM = "T0001"
ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def make_item(n: int, kind: str = "research") -> Item:
    section = "updates" if kind == "update" else "research"
    link = f"https://machinelearning.apple.com/{section}/burst-{n:03d}"
    return Item(id=link, guid=f"burst-{n:03d}", title=f"Paper {n} on <b>speech</b> & @here", link=link,
                summary=f"Abstract {n}.", published=START + timedelta(days=n % 3), kind=kind)  # type: ignore[arg-type]


BASE = [make_item(n) for n in range(900, 903)]


def poll(store: Store, channels: Sequence[str], items: Sequence[Item]) -> list[Item]:
    """Subscribe `channels`, then one poll that finds `items` new (after the feed's baseline poll): the new
    items, oldest first."""
    if store.count_items() == 0:
        ingest(store, FEED, BASE, Validators())  # the baseline poll: nothing queued
    for channel in channels:
        if store.get_subscription(TEAM, channel) is None:
            store.subscribe(TEAM, channel, "U1")
    return ingest(store, FEED, [*BASE, *items], Validators()).new


def deliverer(slack: FakeSlack, threshold: int | None = 5, **options: Any) -> Deliverer:
    client = make_client("xoxb-test", slack.url, backoff=0.01)
    return Deliverer(lambda team_id: client, **{"pace": 0.0, "backoff": 0.01, "burst_threshold": threshold,
                                                 **options})


def item_id(message: dict[str, Any]) -> str:
    return str(message["metadata"]["event_payload"]["item_id"])


def assert_one_burst(slack: FakeSlack, channel: str, items: Sequence[Item]) -> dict[str, Any]:
    """The channel holds one burst message listing `items` and, in its thread, each item once, oldest first;
    nothing else."""
    [parent] = slack.batch_posts(channel)
    assert parent["metadata"]["event_payload"]["count"] == len(items)
    replies = slack.thread(channel, parent["ts"])
    assert [item_id(m) for m in replies] == [i.id for i in items]
    assert len(slack.posts(channel)) == len(items) + 1
    return parent


# --- the shape of a burst ---------------------------------------------------------------------------------


def test_a_30_item_burst_is_one_message_and_30_thread_replies(store: Store, slack_api: FakeSlack) -> None:
    new = [make_item(n, "update" if n % 5 == 0 else "research") for n in range(30)]
    items = poll(store, ["C1", "C2"], new)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (60, 0)
    for channel in ("C1", "C2"):
        parent = assert_one_burst(slack_api, channel, items)
        assert parent.get("thread_ts") is None  # top-level
        for reply in slack_api.thread(channel, parent["ts"]):
            assert reply["params"]["thread_ts"] == parent["ts"]
            assert reply["metadata"]["event_type"] == blocks.EVENT_TYPE
            assert reply["params"]["unfurl_links"] in (False, "0", "false", "False")
    assert {r.state for r in store.deliveries()} == {"sent"}
    assert {b.state for b in store.batches()} == {"sent"}
    assert len(store.batches()) == 2


def test_the_burst_message_says_how_many_from_when_and_lists_papers_and_updates_apart() -> None:
    items = [make_item(n) for n in range(4)] + [make_item(n, "update") for n in range(4, 6)]
    message = blocks.batch_message("b1", 6, items)
    text = json.dumps(message["blocks"])
    assert message["metadata"] == {"event_type": "mlresearch_batch", "event_payload": {"batch_id": "b1",
                                                                                         "count": 6}}
    assert message["parse"] == "none" and message["unfurl_links"] is False
    assert "6 new items (4 papers, 2 updates), published 2026-06-01 to 2026-06-03" in message["text"]
    assert text.index("*Papers*") < text.index(items[0].link) < text.index("*Updates*") < text.index(
        items[4].link)
    assert "<b>" not in text and "&lt;b&gt;" in text and "&amp;" in text  # feed text escaped
    for block in message["blocks"]:
        for obj in [block.get("text"), *block.get("elements", [])]:
            if isinstance(obj, dict) and obj.get("type") == "mrkdwn":
                assert obj["verbatim"] is True


def test_a_long_burst_message_stays_within_slacks_limits() -> None:
    items = [Item(id=f"https://machinelearning.apple.com/research/x{n}", guid=None, title="word " * 200,
                  link=f"https://machinelearning.apple.com/research/x{n}", summary="", published=START,
                  kind="research") for n in range(300)]
    message = blocks.batch_message("b1", 300, items)
    assert len(message["blocks"]) <= 50
    assert all(len(b["text"]["text"]) <= 3000 for b in message["blocks"] if "text" in b)
    assert "more. Each item is in this message's thread" in json.dumps(message["blocks"])


@pytest.mark.parametrize(("count", "bursts"), [(5, 0), (6, 1)])
def test_the_threshold_is_more_than_burst_threshold_items(
    store: Store, slack_api: FakeSlack, count: int, bursts: int
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(count)])
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_URL": slack_api.url})
    built = deliver.from_settings(settings)
    assert built is not None and built.burst_threshold == 5
    built.pace = 0
    assert built(store).delivered == count
    assert len(slack_api.batch_posts("C1")) == bursts
    if bursts:
        assert_one_burst(slack_api, "C1", items)
    else:
        assert [item_id(m) for m in slack_api.posts("C1")] == [i.id for i in items]
        assert all(m.get("thread_ts") is None for m in slack_api.posts("C1"))


def test_the_threshold_counts_the_items_each_channel_gets(store: Store, slack_api: FakeSlack) -> None:
    ingest(store, FEED, BASE, Validators())
    store.subscribe(TEAM, "C2", "U1", keywords=["vision"])  # matches 3 of the 8
    items = [make_item(n) for n in range(8)]
    items = [replace(i, title=f"{i.title} vision") if n < 3 else i for n, i in enumerate(items)]
    poll(store, ["C1"], items)
    deliverer(slack_api)(store)
    assert_one_burst(slack_api, "C1", items)
    assert slack_api.batch_posts("C2") == []
    assert [item_id(m) for m in slack_api.posts("C2")] == [i.id for i in items[:3]]


# --- decided once ---------------------------------------------------------------------------------------


def test_a_burst_is_decided_once_and_survives_a_restart_with_another_threshold(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(8)])
    slack_api.fault("chat.postMessage", channel="C1", status=500, times=None, skip=3)  # parent + 2 replies
    deliverer(slack_api)(store)
    assert len(slack_api.posts("C1")) == 3
    slack_api.faults.clear()
    deliverer(slack_api, threshold=100)(store)  # a restart with BURST_THRESHOLD=100: the burst stays one
    assert_one_burst(slack_api, "C1", items)


def test_items_queued_by_an_older_poll_never_join_a_new_burst(store: Store, slack_api: FakeSlack) -> None:
    older = poll(store, ["C1"], [make_item(n) for n in range(2)])  # not delivered yet (no token, say)
    newer = poll(store, ["C1"], [make_item(n) for n in range(10, 20)])
    deliverer(slack_api)(store)
    top = [m for m in slack_api.posts("C1") if m.get("thread_ts") is None]
    assert [item_id(m) for m in top[:2]] == [i.id for i in older]
    [parent] = slack_api.batch_posts("C1")
    assert [item_id(m) for m in slack_api.thread("C1", parent["ts"])] == [i.id for i in newer]
    assert parent["metadata"]["event_payload"]["count"] == 10
    assert sum(n for n in slack_api.item_posts().values()) == 12


def test_a_burst_whose_message_slack_refuses_posts_its_items_on_their_own(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(7)])
    slack_api.fault("chat.postMessage", channel="C1", error="msg_too_long", times=1)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (7, 0)
    assert slack_api.batch_posts("C1") == []
    assert [item_id(m) for m in slack_api.posts("C1")] == [i.id for i in items]
    assert [b.state for b in store.batches()] == ["failed"]


# --- rate limits ----------------------------------------------------------------------------------------


def test_a_rate_limit_in_the_middle_of_a_burst_waits_retry_after(store: Store, slack_api: FakeSlack) -> None:
    items = poll(store, ["C1", "C2"], [make_item(n) for n in range(12)])
    slack_api.fault("chat.postMessage", channel="C1", status=429, retry_after=1, skip=5)
    assert deliverer(slack_api)(store).delivered == 24
    calls = slack_api.calls_to("chat.postMessage", "C1")
    limited = next(n for n, c in enumerate(calls) if c.status == 429)
    assert limited == 5 and calls[limited + 1].at - calls[limited].at >= 1.0
    for channel in ("C1", "C2"):
        assert_one_burst(slack_api, channel, items)


def test_a_persistent_rate_limit_leaves_the_rest_of_the_burst_for_the_next_poll(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(9)])
    slack_api.fault("chat.postMessage", channel="C1", status=429, retry_after=0, times=5, skip=4)
    report = deliverer(slack_api)(store)
    assert report.delivered == 3
    assert [r.state for r in store.deliveries(channel_id="C1")] == ["sent"] * 3 + ["pending"] * 6
    assert store.deliveries(channel_id="C1")[3].error == "ratelimited"
    assert deliverer(slack_api)(store).delivered == 6
    assert_one_burst(slack_api, "C1", items)


def test_a_rate_limited_burst_message_is_posted_at_the_next_poll(store: Store, slack_api: FakeSlack) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(6)])
    slack_api.fault("chat.postMessage", channel="C1", status=429, retry_after=0, times=5)
    assert deliverer(slack_api)(store).delivered == 0
    assert [b.state for b in store.batches()] == ["pending"]
    assert deliverer(slack_api)(store).delivered == 6
    assert_one_burst(slack_api, "C1", items)


# --- crashes --------------------------------------------------------------------------------------------


def test_a_burst_message_that_landed_before_a_crash_is_found_not_posted_again(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(6)])
    slack_api.fault("chat.postMessage", channel="C1", status=500, after=True)  # landed; the bot hears 500
    assert deliverer(slack_api)(store).delivered == 6
    assert_one_burst(slack_api, "C1", items)
    assert len(slack_api.calls_to("conversations.history", "C1")) == 1


def test_a_reply_that_landed_before_a_crash_is_found_in_the_thread(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(6)])
    slack_api.fault("chat.postMessage", channel="C1", drop=True, after=True, skip=3)  # landed; no answer
    assert deliverer(slack_api)(store).delivered == 6
    assert_one_burst(slack_api, "C1", items)
    [replies] = slack_api.calls_to("conversations.replies", "C1")
    assert str(replies.params["include_all_metadata"]).lower() in ("1", "true")


def test_a_reply_of_unknown_fate_whose_burst_message_was_deleted_is_posted_again(
    store: Store, slack_api: FakeSlack
) -> None:
    items = poll(store, ["C1"], [make_item(n) for n in range(6)])
    slack_api.fault("chat.postMessage", channel="C1", status=500, times=None, skip=1)
    assert deliverer(slack_api)(store).delivered == 0  # the message posted; the first reply: fate unknown
    assert store.deliveries(item_id=items[0].id)[0].state == "posting"
    slack_api.faults.clear()
    [parent] = slack_api.batch_posts("C1")
    slack_api.messages["C1"].remove(parent)  # someone deletes the burst's message
    assert deliverer(slack_api)(store).delivered == 6
    assert [item_id(m) for m in slack_api.thread("C1", parent["ts"])] == [i.id for i in items]


DELIVER_SCRIPT = textwrap.dedent("""
    import sys
    from bot.deliver import Deliverer
    from bot.slackweb import make_client
    from bot.store import open_store

    client = make_client("xoxb-test", sys.argv[2])
    Deliverer(lambda team_id: client, pace=0, burst_threshold=5)(open_store(sys.argv[1]))
""")


@pytest.mark.parametrize("kill_after", [1, 14])
def test_kill_9_in_the_middle_of_a_burst_then_a_restart_posts_each_item_once_and_one_message(
    database_url: str, store: Store, slack_api: FakeSlack, kill_after: int
) -> None:
    channels = ["C1", "C2"]
    items = poll(store, channels, [make_item(n) for n in range(30)])
    slack_api.latency = 0.3  # each post lands in the channel 0.3 s before the bot hears back
    victim = subprocess.Popen([sys.executable, "-c", DELIVER_SCRIPT, database_url, slack_api.url], cwd=ROOT,
                              env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert slack_api.wait_for(lambda s: len(s.posts()) >= kill_after, timeout=30)
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.wait(timeout=10)
    assert victim.returncode == -signal.SIGKILL
    assert any(r.state == "posting" for r in [*store.deliveries(), *store.batches()])
    assert len(slack_api.posts()) < 62

    slack_api.latency = 0.0
    sent_before = sum(r.state == "sent" for r in store.deliveries())
    report = deliverer(slack_api)(store)  # the restart
    assert report.delivered == 60 - sent_before
    for channel in channels:
        assert_one_burst(slack_api, channel, items)
    assert {r.state for r in store.deliveries()} == {"sent"}
    assert {b.state for b in store.batches()} == {"sent"}


# --- configuration --------------------------------------------------------------------------------------


def test_burst_threshold_defaults_to_5_and_is_read_from_the_environment() -> None:
    assert Settings.from_env({}).burst_threshold == 5
    assert Settings.from_env({"BURST_THRESHOLD": " 12 "}).burst_threshold == 12


@pytest.mark.parametrize("value", ["ten", "-1", "0", "2.5", "5 items"])
def test_a_bad_burst_threshold_is_a_one_line_error_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"BURST_THRESHOLD": value})
    assert err.value.variable == "BURST_THRESHOLD"
    assert str(err.value).startswith("BURST_THRESHOLD") and "\n" not in str(err.value)


def test_a_bad_burst_threshold_stops_the_command_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bot", "poll", "--dry-run"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=60,
                          env=clean_env(BURST_THRESHOLD="many", FEED_URL=str(tmp_path / "feed.xml")))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "BURST_THRESHOLD" in lines[0] and "Traceback" not in done.stderr
