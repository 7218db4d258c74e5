"""Digest subscriptions (bot.digest, bot.store.digests): `subscribe digest:daily|weekly [at:HH:MM]` parsing
and the subscriber's time zone from users.info, the schedule across DST and week boundaries, one message per
period exactly once across restarts and crashes (reconciled from the channel's history by metadata), nothing
for an empty period, status. Both stores; Slack is tests/fakes/slack_api.py over loopback; the time is a
clock passed in."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from slack_sdk import WebClient

from bot import digest, home
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.deliver import Deliverer
from bot.digest import Digester, Schedule
from bot.feed import parse
from bot.models import Item, Subscription, Validators
from bot.pipeline import Pipeline
from bot.route import ingest
from bot.slackweb import make_client
from bot.store import Store, open_store
from tests.fakes.archive import make_item
from tests.fakes.slack_api import FakeSlack
from tests.test_backfill import FEED as FEED_XML
from tests.test_backfill import NEWEST, feed_without_newest

DATA = Path(__file__).parent / "data"
FEED = "https://machinelearning.apple.com/rss.xml"
TEAM, CHANNEL, USER = "T0001", "C1", "U1"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
NEW = [i for i in parse((DATA / "apple_ml_archive.xml").read_bytes()) if i.id not in {r.id for r in RSS}]
BERLIN = ZoneInfo("Europe/Berlin")
# Tuesday 1 December 2026, 11:00 in Berlin: the digest is set up; the week's digest is due Monday 7 December
# at 09:00 Berlin (08:00 UTC).
SET_UP = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
MONDAY = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
PERIOD = "weekly:2026-12-07T08:00:00Z"


@pytest.fixture
def base(store: Store) -> Store:
    """A store past its baseline poll (the current feed is known; nothing queued)."""
    ingest(store, FEED, RSS, Validators(), at=SET_UP - timedelta(days=1))
    return store


@pytest.fixture
def slack(slack_api: FakeSlack) -> FakeSlack:
    slack_api.users[USER] = {"name": "ada", "tz": "Europe/Berlin", "tz_offset": 3600}
    return slack_api


def client(slack: FakeSlack) -> WebClient:
    return make_client("xoxb-test", slack.url, backoff=0.01)


def digester(slack: FakeSlack, at: datetime) -> Digester:
    web = client(slack)
    return Digester(lambda team_id: web, clock=lambda: at)


def services(store: Store, slack: FakeSlack | None, now: datetime = SET_UP) -> Services:
    web = WebClient(token="xoxb-test", base_url=slack.url) if slack is not None else None
    return Services(store=store, settings=Settings(), slack=web, clock=lambda: now)


def ask(svc: Services, text: str) -> Reply:
    return handle(Invocation(text=text, team_id=TEAM, channel_id=CHANNEL, user_id=USER), svc)


def weekly(store: Store, keywords: tuple[str, ...] = ()) -> Subscription:
    store.subscribe(TEAM, CHANNEL, USER, keywords)
    sub = store.set_digest(TEAM, CHANNEL, "weekly", "09:00", "Europe/Berlin", now=SET_UP)
    assert sub is not None
    return sub


def arrive(store: Store, items: list[Item], at: datetime) -> list[Item]:
    """A poll at `at` finds `items` new."""
    known = [i for i in RSS]
    return ingest(store, FEED, [*known, *items], Validators(), at=at).new


def digests_posted(slack: FakeSlack, channel: str = CHANNEL) -> list[dict[str, Any]]:
    posts = slack.posts(channel)
    return [m for m in posts if (m.get("metadata") or {}).get("event_type") == "mlresearch_digest"]


def listed_links(message: dict[str, Any]) -> list[str]:
    text = "\n".join(b["text"]["text"] for b in message["blocks"] if b["type"] == "section")
    return [line.split("|")[0].removeprefix("• <") for line in text.splitlines() if line.startswith("• <")]


# --- /mlresearch subscribe digest:… ----------------------------------------------------------------------


def test_subscribe_digest_weekly_takes_the_subscribers_time_zone_from_slack(
    base: Store, slack: FakeSlack
) -> None:
    reply = ask(services(base, slack), "subscribe digest:weekly")
    sub = base.get_subscription(TEAM, CHANNEL)
    assert sub is not None
    assert (sub.digest, sub.digest_at, sub.digest_tz) == ("weekly", "09:00", "Europe/Berlin")
    assert sub.keywords == () and sub.digest_since == SET_UP
    assert [c.params["user"] for c in slack.calls_to("users.info")] == [USER]
    assert "weekly digest" in reply.text and "every Monday at 09:00 (Europe/Berlin)" in reply.text
    assert "The next one: Mon 7 Dec 2026, 09:00." in reply.text
    assert "UTC" not in reply.text


def test_subscribe_keeps_keywords_beside_digest_and_at(base: Store, slack: FakeSlack) -> None:
    reply = ask(services(base, slack), 'subscribe privacy "speech recognition" digest:daily at:7:30')
    sub = base.get_subscription(TEAM, CHANNEL)
    assert sub is not None and sub.keywords == ("privacy", "speech recognition")
    assert (sub.digest, sub.digest_at) == ("daily", "07:30")
    assert "every day at 07:30 (Europe/Berlin)" in reply.text and "`privacy`" in reply.text
    assert "The next one: Wed 2 Dec 2026, 07:30." in reply.text  # 07:30 Berlin on Tuesday has passed
    ask(services(base, slack), "subscribe AT:10:00 Digest:Weekly vision")
    sub = base.get_subscription(TEAM, CHANNEL)
    assert sub is not None and (sub.digest, sub.digest_at, sub.keywords) == ("weekly", "10:00", ("vision",))


@pytest.mark.parametrize("text", [
    "subscribe digest:monthly", "subscribe digest:", "subscribe digest:daily at:25:00",
    "subscribe digest:daily at:9", "subscribe digest:daily at:9am", "subscribe digest:daily digest:weekly",
    "subscribe at:10:00", "subscribe privacy at:10:00",
])
def test_bad_digest_words_get_one_line_of_usage_and_change_nothing(
    base: Store, slack: FakeSlack, text: str
) -> None:
    reply = ask(services(base, slack), text)
    assert len(reply.blocks) == 1 and "\n" not in reply.text
    assert "digest:daily|weekly" in reply.text and "nothing was changed" in reply.text
    assert base.get_subscription(TEAM, CHANNEL) is None
    assert slack.calls_to("users.info") == []


@pytest.mark.parametrize("who", ["unknown user", "no Slack client", "an unknown zone"])
def test_a_time_zone_that_cannot_be_read_is_utc_and_the_reply_says_so(
    base: Store, slack: FakeSlack, who: str
) -> None:
    if who == "unknown user":
        slack.users.clear()
    elif who == "an unknown zone":
        slack.users[USER] = {"tz": "Mars/Olympus_Mons"}
    svc = services(base, None if who == "no Slack client" else slack)
    reply = ask(svc, "subscribe digest:daily")
    sub = base.get_subscription(TEAM, CHANNEL)
    assert sub is not None and (sub.digest, sub.digest_tz) == ("daily", "UTC")
    assert "couldn't read your time zone from Slack, so the time is UTC" in reply.text
    assert "The next one: Wed 2 Dec 2026, 09:00." in reply.text


def test_a_plain_subscribe_turns_a_digest_channel_back_to_one_post_per_item(
    base: Store, slack: FakeSlack
) -> None:
    weekly(base)
    arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    assert base.open_deliveries() == [], "a digest channel gets no per-item rows"
    assert len(base.waiting_digest_items(TEAM, CHANNEL)) == 2
    reply = ask(services(base, slack), "subscribe")
    sub = base.get_subscription(TEAM, CHANNEL)
    assert sub is not None and sub.digest is None
    assert "no more digests" in reply.text and "The 2 items waiting for the digest" in reply.text
    assert sorted(d.item_id for d in base.open_deliveries()) == sorted(i.id for i in NEW[:2])
    assert base.waiting_digest_items(TEAM, CHANNEL) == []
    arrive(base, NEW[:3], SET_UP + timedelta(hours=2))
    assert len(base.open_deliveries()) == 3


def test_a_digest_held_back_by_slack_goes_out_at_the_next_poll_or_per_item_after_a_switch(
    base: Store, slack: FakeSlack
) -> None:
    weekly(base)
    arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    slack.fault("chat.postMessage", error="ratelimited")
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 0
    [row] = base.digests(TEAM, CHANNEL)
    assert (row.state, row.error) == ("pending", "ratelimited")
    arrive(base, NEW[:3], MONDAY + timedelta(minutes=7))  # the next period's
    reply = ask(services(base, slack), "subscribe")  # back to one post per item before the next poll
    assert "The 1 item waiting for the digest" in reply.text
    assert sorted(d.item_id for d in base.open_deliveries()) == sorted(i.id for i in NEW[:3])
    [row] = base.digests(TEAM, CHANNEL)
    assert (row.state, row.error) == ("failed", "per_item")
    assert digester(slack, MONDAY + timedelta(minutes=15))(base).delivered == 0
    assert digests_posted(slack) == []

    weekly(base)  # and a digest again: it starts empty, and a held-back digest is posted at the next poll
    arrive(base, NEW[3:5], MONDAY + timedelta(days=1))
    slack.fault("chat.postMessage", error="ratelimited")
    next_monday = MONDAY + timedelta(days=7, minutes=5)
    assert digester(slack, next_monday)(base).delivered == 0
    assert digester(slack, next_monday + timedelta(minutes=10))(base).delivered == 1
    assert sorted(listed_links(digests_posted(slack)[0])) == sorted(i.link for i in NEW[3:5])


def test_status_shows_the_mode_and_the_next_digest_in_the_subscribers_zone(
    base: Store, slack: FakeSlack
) -> None:
    weekly(base, ("privacy",))
    body = "\n".join(b["text"]["text"] for b in ask(services(base, slack), "status").blocks)
    assert ("*This channel:* subscribed to items matching `privacy` · as a weekly digest, Mondays at 09:00 "
            "(Europe/Berlin) · next digest: Mon 7 Dec 2026, 09:00") in body
    after = services(base, slack, now=MONDAY + timedelta(minutes=1))
    due = "next digest: Mon 7 Dec 2026, 09:00"
    assert due in ask(after, "status").blocks[0]["text"]["text"], "due, and not posted yet"
    digester(slack, MONDAY + timedelta(minutes=1))(base)
    assert "next digest: Mon 14 Dec 2026, 09:00" in ask(after, "status").blocks[0]["text"]["text"]
    ask(services(base, slack), "subscribe privacy")
    assert "digest" not in ask(services(base, slack), "status").blocks[0]["text"]["text"]


def test_the_app_home_says_which_channels_get_a_digest(base: Store) -> None:
    weekly(base)
    base.subscribe(TEAM, "C2", USER)
    text = str(home.home_view(base, TEAM))
    assert "<#C1>: every new item (no keyword filter) · as a weekly digest" in text
    assert "<#C2>: every new item" in text and text.count("as a weekly digest") == 1


# --- the schedule ------------------------------------------------------------------------------------------


def schedule(mode: str, at: str, tz: str) -> Schedule:
    sched = Schedule.of(Subscription(TEAM, CHANNEL, USER, SET_UP, digest=mode, digest_at=at, digest_tz=tz))
    assert sched is not None
    return sched


def local(moment: datetime, tz: ZoneInfo = BERLIN) -> str:
    return f"{moment.astimezone(tz):%a %Y-%m-%d %H:%M %Z}"


def test_a_daily_digest_keeps_its_local_hour_across_both_dst_changes() -> None:
    daily = schedule("daily", "09:00", "Europe/Berlin")
    spring = daily.next_after(datetime(2026, 3, 28, 8, 0, tzinfo=UTC))  # Saturday 09:00 CET has just passed
    assert spring == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)  # Sunday 09:00 CEST: an hour earlier in UTC
    assert local(spring) == "Sun 2026-03-29 09:00 CEST"
    autumn = daily.next_after(datetime(2026, 10, 24, 7, 0, tzinfo=UTC))
    assert autumn == datetime(2026, 10, 25, 8, 0, tzinfo=UTC) and local(autumn) == "Sun 2026-10-25 09:00 CET"
    before = datetime(2026, 10, 25, 7, 59, tzinfo=UTC)
    assert daily.last_due(before) == datetime(2026, 10, 24, 7, 0, tzinfo=UTC)


def test_a_digest_time_the_clocks_skip_or_repeat_still_goes_out_once_that_day() -> None:
    daily = schedule("daily", "02:30", "Europe/Berlin")  # 02:30 does not exist on 29 March, twice on 25 Oct
    skipped = daily.next_after(datetime(2026, 3, 28, 12, 0, tzinfo=UTC))
    assert local(skipped) == "Sun 2026-03-29 03:30 CEST"
    repeated = daily.next_after(datetime(2026, 10, 24, 12, 0, tzinfo=UTC))
    assert local(repeated) == "Sun 2026-10-25 02:30 CEST", "the first of the two 02:30s"
    assert daily.next_after(repeated) == datetime(2026, 10, 26, 1, 30, tzinfo=UTC), "not the second"


def test_a_weekly_digest_goes_out_on_the_subscribers_monday() -> None:
    berlin = schedule("weekly", "09:00", "Europe/Berlin")
    assert berlin.next_after(SET_UP) == MONDAY
    assert berlin.next_after(MONDAY) == MONDAY + timedelta(days=7)
    assert berlin.last_due(MONDAY - timedelta(seconds=1)) == MONDAY - timedelta(days=7)
    assert berlin.last_due(MONDAY) == MONDAY
    # Monday 09:00 in Auckland is Sunday evening in UTC; in Los Angeles, Monday afternoon.
    auckland = schedule("weekly", "09:00", "Pacific/Auckland").next_after(SET_UP)
    assert auckland == datetime(2026, 12, 6, 20, 0, tzinfo=UTC) and auckland.astimezone(
        ZoneInfo("Pacific/Auckland")).weekday() == 0
    la = schedule("weekly", "09:00", "America/Los_Angeles")
    assert la.next_after(SET_UP) == datetime(2026, 12, 7, 17, 0, tzinfo=UTC)
    # Across the change to summer time in the US (8 March 2026): still 09:00 local on the Monday after.
    assert la.next_after(datetime(2026, 3, 3, tzinfo=UTC)) == datetime(2026, 3, 9, 16, 0, tzinfo=UTC)
    # A year's end: from Tuesday 29 December 2026 to Monday 4 January 2027.
    assert berlin.next_after(datetime(2026, 12, 29, tzinfo=UTC)).date() == date(2027, 1, 4)


@pytest.mark.parametrize("text, expected", [("9:05", "09:05"), ("09:05", "09:05"), ("23:59", "23:59"),
                                            ("0:00", "00:00"), ("24:00", None), ("9:5", None), ("9", None),
                                            ("٩:٠٥", None), ("09:05pm", None)])
def test_at_reads_hours_and_minutes_only(text: str, expected: str | None) -> None:
    assert digest.parse_at(text) == expected


# --- one digest per channel per period, exactly once --------------------------------------------------------


def test_a_weekly_digest_goes_out_once_across_a_restart(
    base: Store, slack: FakeSlack, database_url: str
) -> None:
    weekly(base)
    tuesday = arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    friday = arrive(base, NEW[2:5], SET_UP + timedelta(days=3))
    monday_night = arrive(base, NEW[5:6], MONDAY + timedelta(hours=12))  # the next week's
    report = Deliverer(lambda team: client(slack), pace=0)(base)
    assert report.delivered == 0 and slack.posts() == [], "no per-item posts in a digest channel"

    assert digester(slack, MONDAY - timedelta(minutes=1))(base).delivered == 0, "not before Monday 09:00"
    assert slack.posts() == []
    assert digester(slack, MONDAY + timedelta(minutes=10))(base).delivered == 1
    [message] = digests_posted(slack)
    params = message["params"]
    assert params["metadata"] == {"event_type": "mlresearch_digest", "event_payload": {"period": PERIOD}}
    assert params["unfurl_links"] is False and params["unfurl_media"] is False and params["parse"] == "none"
    newest_first = sorted(tuesday + friday, key=lambda i: i.published, reverse=True)
    papers = [i.link for i in newest_first if i.kind == "research"]
    updates = [i.link for i in newest_first if i.kind == "update"]
    assert listed_links(message) == papers + updates, "grouped by type, newest first, the period's items only"
    assert monday_night[0].link not in str(message["blocks"])
    assert "Weekly digest: 5 new items" in params["text"]

    # Another process, after the period (a restart, or the other dyno elected to deliver): nothing again.
    again = open_store(database_url)
    for later in (MONDAY + timedelta(minutes=20), MONDAY + timedelta(days=3)):
        assert digester(slack, later)(again).delivered == 0
    assert len(digests_posted(slack)) == 1
    [row] = again.digests(TEAM, CHANNEL)
    assert (row.period, row.state, row.items, row.ts) == (PERIOD, "sent", 5, message["ts"])
    # The next Monday: the item of Monday night, alone.
    assert digester(slack, MONDAY + timedelta(days=7, minutes=5))(again).delivered == 1
    assert listed_links(digests_posted(slack)[-1]) == [monday_night[0].link]
    again.close()


def test_a_digester_that_missed_a_period_catches_up_in_one_digest_with_both_periods_items(
    base: Store, slack: FakeSlack
) -> None:
    """Items arrive in two weeks and the digester first runs on the second Monday (the first Monday's run
    never happened: an outage): one digest holds both weeks' items, none is left waiting, and no digest of
    the missed week is posted after it."""
    weekly(base)
    first_week = arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    second_week = arrive(base, NEW[2:4], MONDAY + timedelta(days=2))
    next_monday = MONDAY + timedelta(days=7)
    assert digester(slack, next_monday + timedelta(minutes=10))(base).delivered == 1
    [message] = digests_posted(slack)
    assert sorted(listed_links(message)) == sorted(i.link for i in first_week + second_week)
    assert "Weekly digest: 4 new items" in message["params"]["text"]
    # the span says from when its items are: the first arrived on Tuesday 1 December (12:00 in Berlin)
    assert "Tue 1 Dec 2026, 12:00 to Mon 14 Dec 2026, 09:00 (Europe/Berlin)" in str(message["blocks"])
    assert base.waiting_digest_items(TEAM, CHANNEL) == []
    [row] = base.digests(TEAM, CHANNEL)
    assert (row.period, row.state, row.items) == ("weekly:2026-12-14T08:00:00Z", "sent", 4)
    assert digester(slack, next_monday + timedelta(days=1))(base).delivered == 0
    assert len(digests_posted(slack)) == 1


def test_a_crash_after_the_post_is_reconciled_from_history_not_posted_again(
    base: Store, slack: FakeSlack, database_url: str
) -> None:
    weekly(base)
    arrive(base, NEW[:3], SET_UP + timedelta(hours=1))
    # The post lands, then the answer is lost (the process dies, or Slack answers 500): its fate is unknown.
    slack.fault("chat.postMessage", status=500, after=True)
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 0
    [landed] = digests_posted(slack)
    [row] = base.digests(TEAM, CHANNEL)
    assert row.state == "posting" and row.ts is None
    restarted = open_store(database_url)
    assert digester(slack, MONDAY + timedelta(minutes=15))(restarted).delivered == 1, "reconciled"
    assert len(digests_posted(slack)) == 1 and len(slack.calls_to("chat.postMessage")) == 1
    [row] = restarted.digests(TEAM, CHANNEL)
    assert (row.state, row.ts) == ("sent", landed["ts"])
    history = slack.calls_to("conversations.history", CHANNEL)
    assert history and all(str(c.params["include_all_metadata"]).lower() in ("1", "true") for c in history)
    restarted.close()


def test_history_the_app_may_not_read_posts_the_digest_again_and_stops_nothing(
    base: Store, slack: FakeSlack
) -> None:
    """missing_scope reading history (no channels:history) is not a workspace's missing chat:write."""
    weekly(base)
    arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    slack.fault("chat.postMessage", status=500, after=True)  # landed, but its fate is unknown
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 0
    slack.fault("conversations.history", error="missing_scope", times=None)
    assert digester(slack, MONDAY + timedelta(minutes=15))(base).delivered == 1, "posted again, at least once"
    assert len(digests_posted(slack)) == 2
    assert base.workspace_disabled(TEAM) is None
    [row] = base.digests(TEAM, CHANNEL)
    assert row.state == "sent"


def test_a_claimed_digest_that_never_landed_is_posted_after_the_restart(
    base: Store, slack: FakeSlack
) -> None:
    weekly(base)
    arrive(base, NEW[:1], SET_UP + timedelta(hours=1))
    slack.fault("chat.postMessage", drop=True)  # the connection broke before Slack took the post
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 0
    assert digests_posted(slack) == []
    assert digester(slack, MONDAY + timedelta(minutes=15))(base).delivered == 1
    assert len(digests_posted(slack)) == 1
    [row] = base.digests(TEAM, CHANNEL)
    assert (row.state, row.attempts) == ("sent", 2)


def test_a_period_that_brought_nothing_posts_nothing(base: Store, slack: FakeSlack) -> None:
    weekly(base, ("nothing-matches-this",))
    arrive(base, NEW, SET_UP + timedelta(hours=1))
    assert base.waiting_digest_items(TEAM, CHANNEL) == []
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 0
    assert slack.posts() == [] and slack.calls_to("chat.postMessage") == []
    [row] = base.digests(TEAM, CHANNEL)
    assert (row.state, row.items) == ("empty", 0)


def test_backfilled_history_is_never_in_a_digest(base: Store, slack: FakeSlack) -> None:
    weekly(base)
    added, _ = base.merge_index([make_item("old-paper", "An Old Paper", "x", day="2020-01-01")])
    assert added == 1 and base.waiting_digest_items(TEAM, CHANNEL) == []
    [new] = arrive(base, NEW[:1], SET_UP + timedelta(hours=1))
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 1
    assert listed_links(digests_posted(slack)[0]) == [new.link]


def test_keyword_digests_hold_only_matching_items_and_say_which_matched(
    base: Store, slack: FakeSlack
) -> None:
    weekly(base, ("flow", "forget"))
    arrive(base, NEW, SET_UP + timedelta(hours=1))
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 1
    [message] = digests_posted(slack)
    body = str(message["blocks"])
    assert len(listed_links(message)) == 2 and "Normalizing Flows" in body and "Forgetting" in body
    assert "· matched: flow" in body and "· matched: forget" in body


def test_items_before_the_digest_was_set_up_are_never_in_it(base: Store, slack: FakeSlack) -> None:
    store = base
    store.subscribe(TEAM, CHANNEL, USER)
    arrive(store, NEW[:2], SET_UP - timedelta(hours=2))  # per-item, before the switch
    sub = store.set_digest(TEAM, CHANNEL, "daily", "09:00", "UTC", now=SET_UP)
    assert sub is not None
    later = arrive(store, NEW[:4], SET_UP + timedelta(hours=1))
    assert [i.id for i in later] == [i.id for i in NEW[2:4]]
    assert digester(slack, datetime(2026, 12, 2, 9, 5, tzinfo=UTC))(store).delivered == 1
    assert sorted(listed_links(digests_posted(slack)[0])) == sorted(i.link for i in NEW[2:4])


def test_a_digest_is_inert_and_within_slacks_limits_however_many_items(base: Store, slack: FakeSlack) -> None:
    weekly(base)
    evil = make_item("evil", "<!channel> <@U123> <https://evil.example|click> & more", "x", day="2026-12-01")
    long = "long title " * 20
    many = [make_item(f"p{n:03d}", f"Paper {n} {long}", "x", day="2026-11-01") for n in range(80)]
    arrive(base, [evil, *many], SET_UP + timedelta(hours=1))
    assert digester(slack, MONDAY + timedelta(minutes=5))(base).delivered == 1
    [message] = digests_posted(slack)
    blocks = message["blocks"]
    assert len(blocks) <= 50 and blocks[0]["text"]["text"] == "Weekly digest: 81 new items"
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section"]
    assert all(len(t) <= 3000 for t in texts) and len(message["text"]) <= 3000
    assert all(e.get("verbatim") for b in blocks if b["type"] not in ("header", "divider")
               for e in ([b["text"]] if "text" in b else b["elements"]))
    assert "&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt; &amp; more" in texts[0]
    assert "<!channel>" not in str(message) and "<@U123>" not in str(message)
    assert len(listed_links(message)) == digest.MAX_LISTED
    assert blocks[-3]["elements"][0]["text"].startswith("… and 21 more")
    assert blocks[-1]["text"]["text"].startswith("*What the team is reading*")  # a weekly digest's end


# --- the digest step in the poll ---------------------------------------------------------------------------


@pytest.fixture
def feed_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "rss.xml"
    path.write_bytes(feed_without_newest())
    yield path


def test_the_poll_posts_a_due_digest_once_whichever_pipeline_holds_the_lock(
    store: Store, slack: FakeSlack, database_url: str, feed_file: Path
) -> None:
    settings = Settings(database_url=database_url, feed_url=str(feed_file), slack_bot_token="xoxb-test",
                        slack_api_url=slack.url)
    now = [SET_UP]
    clock: Callable[[], datetime] = lambda: now[0]  # noqa: E731
    web = client(slack)

    def pipeline(on: Store) -> Pipeline:
        return Pipeline.from_settings(settings, on, digest=Digester(lambda team: web, clock=clock))

    with pipeline(store) as first:
        assert first.poll_once(lock_timeout=5).baseline
        store.subscribe(TEAM, "CALL", USER)
        weekly(store)
        feed_file.write_bytes(FEED_XML)
        result = first.poll_once(lock_timeout=5)
        assert result.new == 1 and result.delivered == 1
        assert [m["metadata"]["event_payload"] for m in slack.posts()] == [{"item_id": NEWEST}]
        assert slack.posts(CHANNEL) == []

    now[0] = MONDAY + timedelta(minutes=3)
    stores = [open_store(database_url) for _ in range(2)]
    results: list[int] = []
    runs = [pipeline(s) for s in stores]
    threads = [threading.Thread(target=lambda p=p: results.append(p.poll_once(lock_timeout=30).delivered))
               for p in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(results) == [0, 1]
    [message] = digests_posted(slack)
    assert listed_links(message) == [NEWEST]
    for run, s in zip(runs, stores, strict=True):
        run.close()
        s.close()


def test_the_shell_prints_its_channels_digest_once(base: Store) -> None:
    from bot.shell import SHELL_CHANNEL_ID, SHELL_TEAM_ID, Console, ShellDigester

    base.subscribe(SHELL_TEAM_ID, SHELL_CHANNEL_ID, "USHELL")
    base.set_digest(SHELL_TEAM_ID, SHELL_CHANNEL_ID, "daily", "09:00", "UTC", now=SET_UP)
    arrive(base, NEW[:2], SET_UP + timedelta(hours=1))
    out = io.StringIO()
    printer = ShellDigester(Console(out), clock=lambda: datetime(2026, 12, 2, 9, 1, tzinfo=UTC))
    assert printer(base).delivered == 1
    text = out.getvalue()
    assert "== Daily digest: 2 new items ==" in text and all(i.title in text for i in NEW[:2])
    assert printer(base).delivered == 0 and out.getvalue() == text
