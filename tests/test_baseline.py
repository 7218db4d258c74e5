"""The first-run baseline is per feed (issue 12): each feed's first successful poll records its items as seen
and posts nothing, so a second feed (or a changed FEED_URL) never floods the channels, and a database
baselined before m008 keeps its baseline. On both stores (tests/conftest.py)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

from bot import feed
from bot.feed import parse
from bot.models import Validators
from bot.poller import poll_once
from bot.route import ingest
from bot.store import Store, open_store
from tests.fakes.feed_server import Reply

DATA = Path(__file__).parent / "data"
RSS_XML = (DATA / "apple_ml_rss.xml").read_bytes()
ARCHIVE_XML = (DATA / "apple_ml_archive.xml").read_bytes()
RSS = parse(RSS_XML)
ARCHIVE = parse(ARCHIVE_XML)  # RSS and six items more
EXTRA = [item for item in ARCHIVE if item.id not in {i.id for i in RSS}]
A = "https://machinelearning.apple.com/rss.xml"
B = "https://example.org/other-feed.xml"


def test_a_second_feeds_first_poll_posts_nothing_and_the_first_feed_still_posts(store: Store) -> None:
    store.subscribe("T1", "C1", "U1")
    assert ingest(store, A, RSS[:5], Validators()).baseline
    second = ingest(store, B, [*RSS[5:], *EXTRA[:3]], Validators())
    assert second.baseline and len(second.new) == 8 and second.queued == 0
    assert store.open_deliveries() == []
    assert store.is_baselined(A) and store.is_baselined(B) and not store.is_baselined("https://x.test/feed")

    later_a = ingest(store, A, [*RSS[:5], EXTRA[3]], Validators())
    assert not later_a.baseline and later_a.queued == 1
    later_b = ingest(store, B, [*RSS[5:], *EXTRA[:3], EXTRA[4]], Validators())
    assert not later_b.baseline and later_b.queued == 1
    assert [d.item_id for d in store.open_deliveries()] == [EXTRA[3].id, EXTRA[4].id]


def test_an_empty_first_poll_of_a_second_feed_is_not_its_baseline(store: Store) -> None:
    store.subscribe("T1", "C1", "U1")
    ingest(store, A, RSS, Validators())
    ingest(store, B, [], Validators())
    assert not store.is_baselined(B)
    first = ingest(store, B, EXTRA, Validators())
    assert first.baseline and first.queued == 0


def test_a_new_feed_is_previewed_as_its_baseline(store: Store) -> None:
    ingest(store, A, RSS, Validators())
    assert store.preview(A, ARCHIVE) == (EXTRA, False)
    assert store.preview(B, ARCHIVE) == (EXTRA, True)


def test_concurrent_first_polls_of_a_second_feed_queue_nothing(store: Store, database_url: str) -> None:
    store.subscribe("T1", "C1", "U1")
    ingest(store, A, RSS, Validators())
    stores = [open_store(database_url) for _ in range(3)]
    barrier = threading.Barrier(len(stores))
    results = []

    def poll(s: Store) -> None:
        barrier.wait()
        results.append(ingest(s, B, ARCHIVE, Validators()))

    threads = [threading.Thread(target=poll, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.baseline for r in results) == [False, False, True]
    assert sum(r.queued for r in results) == 0 and store.open_deliveries() == []


def test_a_database_baselined_before_m008_keeps_its_baseline(database_url: str) -> None:
    old = open_store(database_url)
    old.migrate(stop_before="m008_feed_baseline")
    assert "m008_feed_baseline" not in old.applied_migrations()
    # What the release before m008 left: the store-wide key, the polled feed, a feed that only ever failed.
    old.add_items(RSS)
    polled = "2026-06-08T00:00:00Z"
    with old.connect() as db:
        db.execute("INSERT INTO feed_state (url, last_poll, last_success, error_streak) VALUES (?, ?, ?, 0)",
                   [A, polled, polled])
    old.set_meta("baseline_at", polled)
    old.record_failure(B, "boom")
    # A dry run reads the old schema as it is, and already says what m008 will make of it.
    assert old.preview(A, ARCHIVE) == (EXTRA, False)
    assert old.preview(B, ARCHIVE) == (EXTRA, True)

    store = open_store(database_url)
    assert store.migrate()[0] == "m008_feed_baseline"  # and every later one
    assert store.get_meta("baseline_at") is None  # the global key is gone
    assert store.is_baselined(A) and not store.is_baselined(B)
    store.subscribe("T1", "C1", "U1")
    later = ingest(store, A, ARCHIVE, Validators(), at=datetime(2026, 6, 9, tzinfo=UTC))
    assert not later.baseline and later.queued == len(EXTRA)  # no re-baseline: the new items post
    with store.connect() as db:
        assert db.one("SELECT baseline_at FROM feed_state WHERE url = ?", [A])[0] == polled


def test_after_the_upgrade_a_changed_feed_url_posts_nothing_on_its_first_poll(database_url: str) -> None:
    old = open_store(database_url)
    old.migrate(stop_before="m008_feed_baseline")
    old.add_items(RSS)
    with old.connect() as db:
        db.execute("INSERT INTO feed_state (url, last_success, error_streak) VALUES (?, ?, 0)", [A, "2026"])
    old.set_meta("baseline_at", "2026")
    store = open_store(database_url)
    store.migrate()
    store.subscribe("T1", "C1", "U1")
    moved = ingest(store, B, ARCHIVE, Validators())  # FEED_URL now names another address
    assert moved.baseline and len(moved.new) == len(EXTRA) and moved.queued == 0
    assert store.open_deliveries() == []


def test_poll_once_baselines_each_feed_url_on_its_own(feed_server, store: Store) -> None:
    first = feed_server.feed("/rss.xml", RSS_XML)
    feed_server.route("/other.xml", [Reply(body=ARCHIVE_XML, etag=f'"{n}"') for n in (1, 2)])
    other = feed_server.url("/other.xml")
    store.subscribe("T1", "C1", "U1")
    with feed.make_client(total_timeout=3.0, connect_timeout=1.0) as client:
        assert poll_once(store, client, first).baseline
        result = poll_once(store, client, other)
        assert (result.baseline, result.new, result.delivered) == (True, 6, 0)
        again = poll_once(store, client, other)
        assert (again.baseline, again.new) == (False, 0)
    assert store.open_deliveries() == []
