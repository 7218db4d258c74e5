"""Follow-ups on a paper (issue 55, point 4): when an item's page, read again later, shows a code release or a
venue, the bot replies once in the thread of the item's post in each channel where it was posted, never as a
new top-level post, and a later poll never repeats it, whatever Slack answered. Whole polls over loopback (the
feed, the research index and the item's page on a local server; real slack_sdk traffic to
tests/fakes/slack_api.py), on both stores."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from msgspec.structs import replace

from bot import blocks, item_pages, poller
from bot.deliver import Deliverer
from bot.feed import make_client
from bot.models import Item, Validators
from bot.route import ingest
from bot.slackweb import make_client as slack_client
from bot.store import Store
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE, item_page
from tests.fakes.slack_api import FakeSlack
from tests.test_backfill import FEED, NEWEST, feed_without_newest

HTML = "text/html; charset=utf-8"
TEAM = "T0001"
PATH = NEWEST.removeprefix("https://machinelearning.apple.com")
PAPER = "https://arxiv.org/abs/2606.01234"
CODE = "https://github.com/apple/ml-afm3"
T0 = datetime(2026, 6, 10, 9, 0, tzinfo=UTC)
BEFORE = item_page("AFM 3", "<p>Our third generation of foundation models.</p>", publication=PAPER)
AFTER = item_page("AFM 3", "<p>This paper was accepted at ICML 2026.</p><p>Our third generation of "
                  f"foundation models.</p><p>Code is available at {CODE}.</p>", publication=PAPER)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def site() -> Iterator[FeedServer]:
    with FeedServer() as fake:
        fake.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
        fake.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML))
        fake.route(PATH, Reply(body=BEFORE, content_type=HTML))
        yield fake


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def deliverer(slack: FakeSlack, **options: Any) -> Deliverer:
    web = slack_client("xoxb-test", slack.url, backoff=0.01)
    return Deliverer(lambda team_id: web, **{"pace": 0.0, "backoff": 0.01, **options})


def top_level(slack: FakeSlack, channel: str) -> list[dict[str, Any]]:
    return [m for m in slack.posts(channel) if m.get("thread_ts") in (None, m["ts"])]


def kind(message: dict[str, Any]) -> str:
    return str((message.get("metadata") or {}).get("event_type"))


def test_a_code_release_and_a_venue_found_later_are_replied_once_in_each_posts_thread(
    site: FeedServer, client: httpx.Client, store: Store, slack_api: FakeSlack
) -> None:
    clock = Clock()
    enrich = item_pages.enricher(site.url("/research"), pace=0, now=clock)
    deliver = deliverer(slack_api)
    feed_url = site.url("/rss.xml")
    assert poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver).baseline
    for channel in ("C1", "C2"):
        store.subscribe(TEAM, channel, "U1")
    new = poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver)
    assert (new.new, new.delivered) == (1, 2)
    posts = {channel: top_level(slack_api, channel) for channel in ("C1", "C2")}
    for [post] in posts.values():
        first = post["blocks"][0]["text"]["text"]
        assert f"<{PAPER}|Paper>" in first and "Code" not in first, "the post says what the page said then"
    assert len(site.requests_to(PATH)) == 1

    site.route(PATH, Reply(body=AFTER, content_type=HTML))  # a week later the page names its code and venue
    clock.now = T0 + timedelta(days=8)
    later = poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver)
    assert later.new == 0 and later.delivered == 4 and len(site.requests_to(PATH)) == 2
    for channel, [post] in posts.items():
        assert top_level(slack_api, channel) == [post], "never a new top-level post"
        replies = slack_api.thread(channel, post["ts"])
        assert [kind(m) for m in replies] == [blocks.FOLLOWUP_EVENT_TYPE] * 2
        texts = sorted(m["text"] for m in replies)
        assert texts[0].startswith(f"Code released: {CODE}") and texts[1].startswith("Published at ICML 2026")
        assert {m["metadata"]["event_payload"]["followup_id"] for m in replies} == {
            f"code:{NEWEST}", f"venue:{NEWEST}"}

    clock.now = T0 + timedelta(days=16)  # read again: nothing new on the page, nothing posted
    again = poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver)
    assert again.delivered == 0 and len(site.requests_to(PATH)) == 3
    assert len(slack_api.posts()) == 6
    followups = [d for d in store.deliveries(item_id=NEWEST) if d.followup]
    assert sorted((d.channel_id, d.followup, d.state) for d in followups) == [
        ("C1", "code", "sent"), ("C1", "venue", "sent"), ("C2", "code", "sent"), ("C2", "venue", "sent")]


def test_the_first_read_of_a_page_is_no_follow_up(site: FeedServer, client: httpx.Client, store: Store,
                                                  slack_api: FakeSlack) -> None:
    """An item posted before its page was first read (the page failed then) gets no reply when the page is
    read: only a finding after a read is news."""
    site.route(PATH, [Reply(status=404, body=b"not yet", content_type="text/plain"),
                      Reply(body=AFTER, content_type=HTML)])
    clock = Clock()
    enrich = item_pages.enricher(site.url("/research"), pace=0, now=clock)
    deliver = deliverer(slack_api)
    feed_url = site.url("/rss.xml")
    poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver)
    store.subscribe(TEAM, "C1", "U1")
    assert poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver).delivered == 1
    clock.now = T0 + timedelta(hours=2)
    assert poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver).delivered == 0
    found = store.get_item(NEWEST)
    assert found is not None and found.code_url == CODE and found.venue == "ICML 2026"
    assert len(slack_api.posts("C1")) == 1


def test_a_reply_whose_fate_slack_left_unknown_is_found_not_posted_twice(
    store: Store, slack_api: FakeSlack
) -> None:
    """Slack posts the reply, then answers 500: the row stays claimed, is reconciled by its metadata in the
    thread (conversations.replies) and settled as sent; no second reply, now or at the next poll."""
    post = _posted(store, slack_api, "C1")
    store.record_page(NEWEST, venue=None, paper_url=PAPER, code_url=None, at=T0)
    assert store.record_page(NEWEST, venue=None, paper_url=PAPER, code_url=CODE, at=T0) == (True, ["code"])
    slack_api.fault("chat.postMessage", status=500, after=True)
    report = deliverer(slack_api)(store)
    assert report.delivered == 1
    assert len(slack_api.thread("C1", post["ts"])) == 1
    assert slack_api.calls_to("conversations.replies")
    assert deliverer(slack_api)(store).delivered == 0 and len(slack_api.posts("C1")) == 2
    [row] = [d for d in store.deliveries(item_id=NEWEST) if d.followup]
    [reply] = slack_api.thread("C1", post["ts"])
    assert row.state == "sent" and row.thread_ts == post["ts"] and row.ts == reply["ts"]


def test_an_item_of_a_burst_is_followed_up_in_the_bursts_thread(store: Store, slack_api: FakeSlack) -> None:
    items = [Item(id=f"https://machinelearning.apple.com/research/b{n}", guid=f"b{n}", title=f"B{n}",
                  link=f"https://machinelearning.apple.com/research/b{n}", summary="x", published=T0,
                  kind="research") for n in range(4)]
    ingest(store, "https://ml.example/rss.xml", items[:1], Validators())
    store.subscribe(TEAM, "C1", "U1")
    ingest(store, "https://ml.example/rss.xml", items, Validators())
    assert deliverer(slack_api, burst_threshold=2)(store).delivered == 3
    [burst] = slack_api.batch_posts("C1")
    target = items[2].id
    store.record_page(target, venue=None, paper_url=None, code_url=None, at=T0)
    store.record_page(target, venue="NeurIPS 2026 workshop", paper_url=None, code_url=None, at=T0)
    assert deliverer(slack_api, burst_threshold=2)(store).delivered == 1
    reply = slack_api.thread("C1", burst["ts"])[-1]
    assert kind(reply) == blocks.FOLLOWUP_EVENT_TYPE and reply["text"].startswith("Published at NeurIPS 2026")
    assert len(slack_api.batch_posts("C1")) == 1


def test_channels_that_never_got_the_post_get_no_follow_up(store: Store, slack_api: FakeSlack) -> None:
    """A follow's direct message, a channel whose post failed and a channel subscribed since hold no post of
    the item's to reply under: only C1 is followed up."""
    store.follow(TEAM, "U7", ["afm"])
    store.subscribe(TEAM, "C3", "U1")
    slack_api.fault("chat.postMessage", channel="C3", error="restricted_action", times=None)
    _posted(store, slack_api, "C1", delivered=2)
    assert {(d.channel_id, d.target, d.state) for d in store.deliveries(item_id=NEWEST)} == {
        ("C1", "channel", "sent"), ("C3", "channel", "failed"), ("U7", "person", "sent")}
    store.subscribe(TEAM, "C9", "U1")  # after the post
    store.record_page(NEWEST, venue=None, paper_url=None, code_url=None, at=T0)
    store.record_page(NEWEST, venue="ICML 2026", paper_url=None, code_url=CODE, at=T0)
    followups = [d for d in store.deliveries(item_id=NEWEST) if d.followup]
    assert sorted((d.channel_id, d.followup) for d in followups) == [("C1", "code"), ("C1", "venue")]
    store.record_page(NEWEST, venue="ICLR 2027", paper_url=None, code_url=CODE + "-v2", at=T0)
    assert len([d for d in store.deliveries(item_id=NEWEST) if d.followup]) == 2, "one of each kind, ever"


def _posted(store: Store, slack: FakeSlack, channel: str, delivered: int = 1) -> dict[str, Any]:
    """NEWEST posted in `channel` (after a baseline poll), as a top-level message."""
    newest = Item(id=NEWEST, guid="newest", title="AFM 3", link=NEWEST, summary="x", published=T0,
                  kind="research")
    ingest(store, "https://ml.example/rss.xml", [], Validators())
    other = Item(id=NEWEST + "-old", guid="old", title="Old", link=NEWEST + "-old", summary="x",
                 published=T0 - timedelta(days=1), kind="research")
    ingest(store, "https://ml.example/rss.xml", [other], Validators())
    store.subscribe(TEAM, channel, "U1")
    ingest(store, "https://ml.example/rss.xml", [other, newest], Validators())
    assert deliverer(slack)(store).delivered == delivered
    [post] = top_level(slack, channel)
    return post


def test_the_shell_prints_a_follow_up_under_the_items_title(store: Store) -> None:
    """The local shell's channel: the post, then, once the page shows the code, the follow-up printed as a
    reply to that item, once."""
    import io

    from bot.shell import SHELL_CHANNEL_ID, SHELL_TEAM_ID, Console, ShellDeliverer

    newest = Item(id=NEWEST, guid="newest", title="AFM 3", link=NEWEST, summary="x", published=T0,
                  kind="research")
    other = replace(newest, id=NEWEST + "-old", guid="old", link=NEWEST + "-old")
    ingest(store, "https://ml.example/rss.xml", [other], Validators())  # the baseline poll
    store.subscribe(SHELL_TEAM_ID, SHELL_CHANNEL_ID, "USHELL")
    ingest(store, "https://ml.example/rss.xml", [other, newest], Validators())
    out = io.StringIO()
    shell = ShellDeliverer(Console(out))
    assert shell(store).delivered == 1
    store.record_page(NEWEST, venue=None, paper_url=None, code_url=None, at=T0)
    store.record_page(NEWEST, venue=None, paper_url=None, code_url=CODE, at=T0)
    assert shell(store).delivered == 1 and shell(store).delivered == 0
    text = out.getvalue()
    assert "In the thread of “AFM 3”" in text and f"Code released: github.com/apple/ml-afm3 ({CODE})" in text
