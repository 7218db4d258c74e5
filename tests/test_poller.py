"""bot.poller.poll_once over the local feed server: first run, 304, failures, identity, edits, ordering."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bot import feed, poller
from bot.models import DeliveryReport
from bot.poller import poll_once
from bot.store import SQLiteStore, Store
from tests.fakes.feed_server import Reply

DATA = Path(__file__).parent / "data"
RSS = (DATA / "apple_ml_rss.xml").read_bytes()
ARCHIVE = (DATA / "apple_ml_archive.xml").read_bytes()


@pytest.fixture
def store(tmp_path):
    s = SQLiteStore(tmp_path / "poll.db")
    s.migrate()
    return s


@pytest.fixture
def client():
    with feed.make_client(total_timeout=3.0, connect_timeout=1.0) as c:
        yield c


def test_the_first_poll_is_the_baseline_and_delivers_nothing(feed_server, store, client):
    url = feed_server.feed("/rss.xml", RSS, etag='"v1"')
    store.subscribe("T1", "C1", "U1")
    calls = []
    result = poll_once(store, client, url, deliver=lambda s: calls.append(s) or DeliveryReport())
    assert (result.fetched, result.baseline, result.delivered, result.not_modified) == (10, True, 0, False)
    assert result.error is None
    assert store.count_items() == 10
    assert store.open_deliveries() == []


def test_as_json_has_the_contract_keys_and_what_was_left_to_others(feed_server, store, client):
    result = poll_once(store, client, feed_server.feed("/rss.xml", RSS))
    assert set(result.as_json()) == {"fetched", "new", "delivered", "failed", "not_modified",
                                     "left_to_others"}


def test_an_unchanged_feed_costs_one_conditional_get_no_parse_no_item_write(
    feed_server, store, client, monkeypatch
):
    url = feed_server.feed("/rss.xml", RSS, etag='"v1"', last_modified="Mon, 08 Jun 2026 00:00:00 GMT")
    poll_once(store, client, url)
    before = store.feed_state(url)

    def no_parse(content: bytes) -> list:
        raise AssertionError("a 304 must not be parsed")

    monkeypatch.setattr(poller, "parse", no_parse)
    monkeypatch.setattr(store, "ingest", lambda *a, **k: pytest.fail("a 304 must not ingest"))
    result = poll_once(store, client, url)
    assert result.not_modified is True
    assert (result.fetched, result.new) == (0, 0)
    second = feed_server.requests_to("/rss.xml")[1]
    assert second.header("If-None-Match") == '"v1"'
    assert second.header("If-Modified-Since") == "Mon, 08 Jun 2026 00:00:00 GMT"
    after = store.feed_state(url)
    assert after.etag == before.etag and after.last_poll is not None and after.last_poll >= before.last_poll


def test_new_items_are_the_ones_never_stored_oldest_first(feed_server, store, client):
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=ARCHIVE, etag='"v2"')])
    url = feed_server.url("/rss.xml")
    poll_once(store, client, url)
    result = poll_once(store, client, url)
    assert (result.fetched, result.new, result.baseline) == (16, 6, False)
    dates = [i.published for i in result.new_items]
    assert dates == sorted(dates)
    assert result.new_items[0].link.endswith("/robust-autonomy-self-play")


def test_new_items_are_queued_for_subscribers_and_delivered(feed_server, store, client):
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=ARCHIVE, etag='"v2"')])
    url = feed_server.url("/rss.xml")
    store.subscribe("T1", "C1", "U1")
    poll_once(store, client, url)
    seen: list[int] = []

    def deliver(s: Store) -> DeliveryReport:
        seen.append(len(s.open_deliveries()))
        return DeliveryReport(delivered=len(s.open_deliveries()))

    result = poll_once(store, client, url, deliver=deliver)
    assert seen == [6] and result.delivered == 6


def same_day_feed(order: list[str]) -> bytes:
    items = "".join(
        f"<item><guid>{s}</guid><title>{s}</title><link>https://machinelearning.apple.com/research/{s}</link>"
        "<description>d</description><pubDate>Fri, 12 Jun 2026 00:00:00 GMT</pubDate></item>"
        for s in order
    )
    return RSS.replace(b"<language>en</language>", b"<language>en</language>" + items.encode())


def test_same_day_new_items_keep_the_reversed_feed_order(feed_server, store, client):
    feed_server.route(
        "/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=same_day_feed(["c", "b", "a"]), etag='"v2"')]
    )
    url = feed_server.url("/rss.xml")
    poll_once(store, client, url)
    result = poll_once(store, client, url)
    assert [i.link.rsplit("/", 1)[1] for i in result.new_items] == ["a", "b", "c"]


def test_guid_churn_tracking_parameters_reordering_and_dates_never_make_known_items_new(
    feed_server, store, client
):
    churned = (
        RSS.replace(b"<guid>", b"<guid>v2-")
        .replace(b"</link>", b"?utm_source=rss&amp;utm_medium=feed#top</link>")
        .replace(
            b"https://machinelearning.apple.com/research/", b"http://MACHINELEARNING.apple.com/research/"
        )
        .replace(b"00:00:00 GMT", b"09:00:00 GMT")
    )
    head, _, rest = churned.partition(b"<item>")
    items = [b"<item>" + part for part in rest.split(b"<item>")]
    items[-1], tail = items[-1].split(b"</channel>")[0], b"</channel></rss>"
    reordered = head + b"".join(reversed(items)) + tail
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=reordered, etag='"v2"')])
    url = feed_server.url("/rss.xml")
    poll_once(store, client, url)
    result = poll_once(store, client, url)
    assert result.error is None
    assert (result.fetched, result.new) == (10, 0)
    assert store.count_items() == 10


def test_an_edit_updates_the_stored_text(feed_server, store, client):
    edited = RSS.replace(b"<title>Velox: Learning", b"<title>Velox (v2): Learning")
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=edited, etag='"v2"')])
    url = feed_server.url("/rss.xml")
    poll_once(store, client, url)
    result = poll_once(store, client, url)
    assert (result.new, result.updated) == (0, 1)
    velox = store.get_item("https://machinelearning.apple.com/research/velox")
    assert velox is not None and velox.title.startswith("Velox (v2)")


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=500, body=b"boom", content_type="text/plain"),
        Reply(status=404),
        Reply(body=RSS[: len(RSS) // 2]),
        Reply(body=b"<!DOCTYPE html><html><body>Maintenance</body></html>", content_type="text/html"),
        Reply(body=b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa">]><rss version="2.0"></rss>'),
    ],
    ids=["500", "404", "broken-xml", "html-page", "entity"],
)
def test_a_failed_poll_stores_nothing_and_counts_the_error_streak(feed_server, store, client, reply):
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), reply])
    url = feed_server.url("/rss.xml")
    poll_once(store, client, url)
    before = store.feed_state(url)
    failed = poll_once(store, client, url)
    assert failed.error and "\n" not in failed.error
    assert (failed.fetched, failed.new) == (0, 0)
    state = store.feed_state(url)
    assert state.error_streak == 1 and state.last_error == failed.error
    assert state.etag == before.etag == '"v1"'
    assert store.count_items() == 10


def test_a_failure_on_an_empty_store_marks_nothing_seen(feed_server, store, client):
    feed_server.route("/rss.xml", [Reply(status=500), Reply(body=RSS)])
    url = feed_server.url("/rss.xml")
    assert poll_once(store, client, url).error
    assert store.count_items() == 0 and not store.is_baselined()
    ok = poll_once(store, client, url)
    assert ok.baseline and store.feed_state(url).error_streak == 0


def test_the_error_streak_grows_and_resets(feed_server, store, client):
    feed_server.route("/rss.xml", [Reply(status=503), Reply(status=503), Reply(status=503), Reply(body=RSS)])
    url = feed_server.url("/rss.xml")
    for streak in (1, 2, 3):
        poll_once(store, client, url)
        assert store.feed_state(url).error_streak == streak
    poll_once(store, client, url)
    assert store.feed_state(url).error_streak == 0
    assert store.feed_state(url).ok


def test_a_timeout_is_a_failed_poll(feed_server, store):
    url = feed_server.route("/rss.xml", Reply(body=RSS, delay=5))
    start = time.monotonic()
    with feed.make_client(total_timeout=0.3) as short:
        result = poll_once(store, short, url)
    assert result.error and "timed out" in result.error
    assert time.monotonic() - start < 2
    assert store.feed_state(url).error_streak == 1


def test_dry_run_preview_writes_nothing(feed_server, tmp_path, client):
    url = feed_server.feed("/rss.xml", RSS)
    absent = SQLiteStore(tmp_path / "absent" / "x.db")
    new, baseline, fetched = poller.preview(absent, client, url)
    assert (len(new), baseline, fetched) == (10, True, 10)
    assert not (tmp_path / "absent").exists()
