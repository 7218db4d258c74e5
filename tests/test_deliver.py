"""Fan-out to Slack: the ledger, the error policy, concurrency, pacing and crash safety, with real slack_sdk
traffic over loopback to tests/fakes/slack_api.py. Posting one message (reconciling, a single post's faults)
is tests/test_posting.py's."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot import blocks, deliver
from bot.config import Settings
from bot.deliver import Deliverer
from bot.feed import parse
from bot.models import Item, Validators
from bot.route import ingest
from bot.slackweb import make_client
from bot.store import SQLiteStore, Store
from tests.fakes.slack_api import FakeSlack

DATA = Path(__file__).parent / "data"
FEED = "https://machinelearning.apple.com/rss.xml"
TEAM = "T0001"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
NEW = [i for i in parse((DATA / "apple_ml_archive.xml").read_bytes()) if i.id not in {r.id for r in RSS}]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return past_baseline(tmp_path)


def past_baseline(tmp_path: Path) -> Store:
    """A store past its baseline poll (the current feed is known; nothing queued)."""
    s = SQLiteStore(tmp_path / "bot.db")
    s.migrate()
    ingest(s, FEED, RSS, Validators())
    return s


def queue(store: Store, channels: Sequence[str], n: int = len(NEW), team: str = TEAM) -> list[Item]:
    """Subscribe `channels`, then let a poll find `n` new items (oldest first): n pending rows per channel."""
    for channel in channels:
        store.subscribe(team, channel, "U1")
    return ingest(store, FEED, [*RSS, *NEW[:n]], Validators()).new


def deliverer(slack: FakeSlack, **options: Any) -> Deliverer:
    client = make_client("xoxb-test", slack.url, backoff=0.01)
    options = {"pace": 0.0, "backoff": 0.01, **options}
    return Deliverer(lambda team_id: client, **options)


def assert_exactly_once(slack: FakeSlack, channels: Sequence[str], items: Sequence[Item]) -> None:
    expected = {(c, i.id): 1 for c in channels for i in items}
    assert dict(slack.item_posts()) == expected


def posted_items(slack: FakeSlack, channel: str) -> list[str]:
    return [m["metadata"]["event_payload"]["item_id"] for m in slack.posts(channel)]


# --- the happy path ------------------------------------------------------------------------------------


def test_every_channel_gets_every_new_item_once_oldest_first(store: Store, slack_api: FakeSlack) -> None:
    channels = ["C1", "C2", "C3"]
    items = queue(store, channels)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (18, 0)
    assert_exactly_once(slack_api, channels, items)
    for channel in channels:
        assert posted_items(slack_api, channel) == [i.id for i in items]
    rows = store.deliveries()
    assert {r.state for r in rows} == {"sent"}
    assert {r.ts for r in rows} == {m["ts"] for m in slack_api.posts()}
    assert store.open_deliveries() == []
    assert deliverer(slack_api)(store) == deliver.DeliveryReport(0, 0)
    assert len(slack_api.calls_to("chat.postMessage")) == 18


def test_the_post_is_block_kit_with_fallback_text_metadata_and_no_unfurls(
    store: Store, slack_api: FakeSlack
) -> None:
    [item] = queue(store, ["C1"], n=1)
    deliverer(slack_api)(store)
    [call] = slack_api.calls_to("chat.postMessage")
    assert call.token == "xoxb-test"
    assert call.params["unfurl_links"] is False and call.params["unfurl_media"] is False
    metadata = call.params["metadata"]  # the contract's event, and the paper's card (tests/test_entities.py)
    assert (metadata["event_type"], metadata["event_payload"]) == ("mlresearch_item", {"item_id": item.id})
    assert [card["url"] for card in metadata["entities"]] == [item.link]
    assert item.link in call.params["text"] and item.title in call.params["text"]
    assert call.params["blocks"] == blocks.item_message(item)["blocks"]


def test_keyword_subscription_gets_only_matching_items_and_says_which_matched(
    store: Store, slack_api: FakeSlack
) -> None:
    store.subscribe(TEAM, "CKEY", "U1", ["flow", "forget"])  # stemmed: "Flows", "Forgetting"
    new = queue(store, ["CALL"])
    deliverer(slack_api)(store)
    assert len(slack_api.posts("CALL")) == len(new)
    titles = [m["text"] for m in slack_api.posts("CKEY")]
    assert len(titles) == 2
    assert any("Normalizing Flows" in t for t in titles) and any("Forgetting" in t for t in titles)
    contexts = [json.dumps(m["blocks"][-1]) for m in slack_api.posts("CKEY")]
    assert any("Matched your keywords: flow" in c for c in contexts)
    assert any("Matched your keywords: forget" in c for c in contexts)


def test_feed_text_arrives_inert(store: Store, slack_api: FakeSlack) -> None:
    store.subscribe(TEAM, "C1", "U1")
    evil = Item(
        id="https://machinelearning.apple.com/research/evil", guid=None,
        title="<!channel> <@U123> <https://evil.example|click>",
        link="https://machinelearning.apple.com/research/evil",
        summary="<!here> & <!subteam^S1> " + "word " * 5000, published=datetime(2026, 7, 1, tzinfo=UTC),
        kind="research",
    )
    ingest(store, FEED, [*RSS, evil], Validators())
    assert deliverer(slack_api)(store).delivered == 1
    [post] = slack_api.posts("C1")
    wire = post["text"] + json.dumps(post["blocks"])
    for live in ("<!channel>", "<@U123>", "<https://evil.example", "<!here>", "<!subteam"):
        assert live not in wire
    assert "&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt;" in post["text"]


# --- Slack faults ----------------------------------------------------------------------------------------


def test_rate_limit_honours_retry_after(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1", "C2"], n=2)
    slack_api.fault("chat.postMessage", channel="C1", status=429, retry_after=1)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (4, 0)
    first, retry, *_ = slack_api.calls_to("chat.postMessage", "C1")
    assert first.status == 429 and retry.status == 200
    assert retry.at - first.at >= 1.0
    assert_exactly_once(slack_api, ["C1", "C2"], items)


def test_persistent_server_errors_defer_the_channel_to_the_next_poll(
    store: Store, slack_api: FakeSlack
) -> None:
    items = queue(store, ["C1", "C2"], n=3)
    slack_api.fault("chat.postMessage", channel="C1", status=500, times=None)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (3, 0)
    assert slack_api.posts("C1") == []
    assert [r.state for r in store.deliveries(channel_id="C1")] == ["posting", "pending", "pending"]
    slack_api.faults.clear()
    assert deliverer(slack_api)(store).delivered == 3
    assert posted_items(slack_api, "C1") == [i.id for i in items]
    assert_exactly_once(slack_api, ["C1", "C2"], items)


def test_exhausted_rate_limit_puts_the_row_back_for_the_next_poll(
    store: Store, slack_api: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = queue(store, ["C1"], n=2)
    monkeypatch.setattr("slack_sdk.http_retry.builtin_handlers.time.sleep", lambda s: None)
    slack_api.fault("chat.postMessage", channel="C1", status=429, retry_after=0, times=5)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (0, 0)
    assert [r.state for r in store.deliveries(channel_id="C1")] == ["pending", "pending"]
    assert store.deliveries(channel_id="C1")[0].error == "ratelimited"
    assert deliverer(slack_api)(store).delivered == 2
    assert posted_items(slack_api, "C1") == [i.id for i in items]


@pytest.mark.parametrize("error", ["channel_not_found", "is_archived", "not_in_channel"])
def test_channel_errors_pause_only_that_channel(store: Store, slack_api: FakeSlack, error: str) -> None:
    items = queue(store, ["C1", "C2", "C3"])
    slack_api.fault("chat.postMessage", channel="C2", error=error, times=None)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (12, 6)
    sub = store.get_subscription(TEAM, "C2")
    assert sub is not None and sub.paused and sub.paused_reason == error
    assert len(slack_api.calls_to("chat.postMessage", "C2")) == 1
    assert {r.state for r in store.deliveries(channel_id="C2")} == {"failed"}
    assert_exactly_once(slack_api, ["C1", "C3"], items)
    ingest(store, FEED, [*RSS, *NEW, _item("later")], Validators())
    assert {r.channel_id for r in store.open_deliveries()} == {"C1", "C3"}


@pytest.mark.parametrize("error", ["invalid_auth", "token_revoked", "account_inactive"])
def test_auth_errors_stop_that_workspace_only(
    store: Store, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeSlack() as bad, FakeSlack() as good:
        bad.fault("*", error=error, times=None)
        clients = {"TBAD": make_client("xoxb-bad", bad.url), "TGOOD": make_client("xoxb-good", good.url)}
        for channel in ("C1", "C2", "C3"):
            store.subscribe("TBAD", channel, "U1")
        items = queue(store, ["C9"], team="TGOOD")
        with caplog.at_level(logging.ERROR, logger="bot.deliver"):
            report = Deliverer(clients.__getitem__, pace=0, backoff=0.01)(store)
        assert (report.delivered, report.failed) == (6, 18)
        assert store.workspace_disabled("TBAD") == error
        assert len(bad.calls_to("chat.postMessage")) <= 3  # at most the first post of each channel
        assert_exactly_once(good, ["C9"], items)
        assert "event=workspace_disabled team=TBAD" in caplog.text and "xoxb-bad" not in caplog.text
        ingest(store, FEED, [*RSS, *NEW, _item("later")], Validators())
        assert {r.team_id for r in store.open_deliveries()} == {"TGOOD"}


# --- concurrency and pacing ------------------------------------------------------------------------------


def test_a_slow_channel_does_not_hold_up_the_others(store: Store, slack_api: FakeSlack) -> None:
    channels = ["CSLOW", "C1", "C2", "C3", "C4", "C5", "C6"]
    queue(store, channels, n=1)
    slack_api.channel_latency["CSLOW"] = 1.0
    slack_api.latency = 0.05
    started = time.monotonic()
    assert deliverer(slack_api, pool_size=3)(store).delivered == 7
    assert time.monotonic() - started < 1.6
    [slow] = slack_api.calls_to("chat.postMessage", "CSLOW")
    fast = [c for c in slack_api.calls_to("chat.postMessage") if c.channel != "CSLOW"]
    assert slow.done_at is not None
    assert all(c.done_at is not None and c.done_at < slow.done_at for c in fast)


def test_channels_are_served_concurrently_by_a_bounded_pool(store: Store, slack_api: FakeSlack) -> None:
    queue(store, [f"C{i}" for i in range(12)], n=1)
    slack_api.latency = 0.1
    deliverer(slack_api, pool_size=4)(store)
    calls = slack_api.calls_to("chat.postMessage")
    overlap = max(sum(1 for o in calls if o.at <= c.at < (o.done_at or 0)) for c in calls)
    assert overlap == 4


def test_posts_to_one_channel_are_paced(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1"], n=3)
    deliverer(slack_api, pace=0.25)(store)
    arrivals = [c.at for c in slack_api.calls_to("chat.postMessage", "C1")]
    assert all(b - a >= 0.24 for a, b in zip(arrivals, arrivals[1:], strict=False))
    assert posted_items(slack_api, "C1") == [i.id for i in items]


# --- what is left alone -------------------------------------------------------------------------------


def test_unsubscribed_channels_get_nothing(store: Store, slack_api: FakeSlack) -> None:
    queue(store, ["C1", "C2"], n=2)
    assert store.unsubscribe(TEAM, "C2")
    assert deliverer(slack_api)(store).delivered == 2
    assert slack_api.posts("C2") == []


def test_the_local_shells_channel_is_left_to_the_shell(store: Store, slack_api: FakeSlack) -> None:
    store.subscribe(deliver.LOCAL_TEAM_ID, "CSHELL", "USHELL")
    queue(store, ["C1"], n=2)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (2, 0)
    assert slack_api.posts("CSHELL") == []
    shell_rows = [r for r in store.deliveries() if r.team_id == deliver.LOCAL_TEAM_ID]
    assert [r.state for r in shell_rows] == ["pending", "pending"]


# --- wiring: settings, the CLI, and a kill -9 in the middle of fan-out --------------------------------------


def test_from_settings_uses_the_token_and_the_api_url(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.deliver"):
        assert deliver.from_settings(Settings()) is None  # no token: items stay queued, and the log says so
    assert "event=delivery_disabled" in caplog.text and "stay queued" in caplog.text
    built = deliver.from_settings(Settings(slack_bot_token="xoxb-from-env", slack_api_url=slack_api.url))
    assert built is not None
    queue(store, ["C1"], n=1)
    built.pace = 0
    assert built(store).delivered == 1
    assert {c.token for c in slack_api.calls} == {"xoxb-from-env"}


def feed_file(path: Path, items: Sequence[str]) -> Path:
    """An RSS file holding the archive's <item>s whose guid is in `items`, or all of them for ["*"]."""
    xml = (DATA / "apple_ml_archive.xml").read_text()
    entries = re.findall(r"<item>.*?</item>", xml, re.S)
    keep = [e for e in entries if items == ["*"] or any(f"<guid>{guid}</guid>" in e for guid in items)]
    head, tail = xml[: xml.index("<item>")], xml[xml.rindex("</item>") + len("</item>") :]
    path.write_text(head + "".join(keep) + tail)
    return path


def run_bot(env: dict[str, str], *args: str, **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bot", *args], env=env, text=True, stdout=subprocess.PIPE, **popen
    )


def bot_env(tmp_path: Path, slack: FakeSlack, feed: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "FEED_", "DATABASE_"))}
    env.update(SLACK_BOT_TOKEN="xoxb-test", SLACK_API_URL=slack.url, FEED_URL=str(feed), LOG_LEVEL="INFO",
               DATABASE_URL=f"sqlite:///{tmp_path / 'bot.db'}")
    return env


def test_poll_json_counts_delivered_and_failed(tmp_path: Path, slack_api: FakeSlack) -> None:
    rss_guids = [str(i.guid) for i in RSS]
    env = bot_env(tmp_path, slack_api, feed_file(tmp_path / "feed.xml", rss_guids))
    assert subprocess.run([sys.executable, "-m", "bot", "poll"], env=env, cwd=tmp_path,
                          capture_output=True).returncode == 0
    store = SQLiteStore(tmp_path / "bot.db")
    for channel in ("C1", "C2", "C3"):
        store.subscribe(TEAM, channel, "U1")
    slack_api.fault("chat.postMessage", channel="C3", error="is_archived", times=None)
    feed_file(tmp_path / "feed.xml", [*rss_guids, str(NEW[0].guid), str(NEW[1].guid)])  # the feed moves on
    done = subprocess.run([sys.executable, "-m", "bot", "poll", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"fetched": 12, "new": 2, "delivered": 4, "failed": 2,
                                       "not_modified": False, "left_to_others": 0}
    assert "event=subscription_paused team=T0001 channel=C3 reason=is_archived" in done.stderr


def test_kill_9_in_the_middle_of_fan_out_then_rerun_delivers_exactly_once(
    tmp_path: Path, slack_api: FakeSlack
) -> None:
    channels = [f"C{n:02d}" for n in range(30)]
    new_guids = [str(i.guid) for i in NEW[:2]]
    rss_guids = [str(i.guid) for i in RSS]
    env = bot_env(tmp_path, slack_api, feed_file(tmp_path / "feed.xml", rss_guids))
    assert subprocess.run([sys.executable, "-m", "bot", "poll"], env=env, cwd=tmp_path,
                          capture_output=True).returncode == 0
    store = SQLiteStore(tmp_path / "bot.db")
    for channel in channels:
        store.subscribe(TEAM, channel, "U1")
    feed_file(tmp_path / "feed.xml", rss_guids + new_guids)  # the feed moves on
    slack_api.latency = 0.2  # each post lands in the channel 0.2 s before the bot hears back

    victim = run_bot(env, "poll", cwd=tmp_path, stderr=subprocess.DEVNULL)
    try:
        assert slack_api.wait_for(lambda s: len(s.posts()) >= 12, timeout=30)
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.wait(timeout=10)
    assert victim.returncode == -signal.SIGKILL
    after_kill = store.deliveries()
    assert len(after_kill) == 60
    assert any(r.state == "posting" for r in after_kill)  # posted, but the bot died before hearing back
    sent_before = sum(r.state == "sent" for r in after_kill)
    assert len(slack_api.posts()) < 60

    slack_api.latency = 0.02
    rerun = run_bot(env, "poll", "--json", cwd=tmp_path, stderr=subprocess.PIPE)
    out, err = rerun.communicate(timeout=60)
    assert rerun.returncode == 0, err
    assert json.loads(out)["delivered"] == 60 - sent_before
    assert "event=delivery_reconciled" in err
    assert_exactly_once(slack_api, channels, NEW[:2])
    for channel in channels:
        assert posted_items(slack_api, channel) == [i.id for i in NEW[:2]]
    assert {r.state for r in store.deliveries()} == {"sent"}


def _item(slug: str) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(id=link, guid=slug, title=f"Item {slug}", link=link, summary="About it.",
                published=datetime(2026, 8, 1, tzinfo=UTC), kind="research")
