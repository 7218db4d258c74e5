"""Backfill and enrichment from the research index (issue 6), over a local HTTP server: no internet."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bot import cli, poller
from bot import research_index as ri
from bot.feed import make_client
from bot.models import Item
from bot.store import SQLiteStore, Store
from bot.store.sqlite import migration_set
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE, index_page, post
from tests.fakes.slack_api import FakeSlack

DATA = Path(__file__).resolve().parent / "data"
FEED = (DATA / "apple_ml_rss.xml").read_bytes()
HTML = "text/html; charset=utf-8"
NEWEST = "https://machinelearning.apple.com/research/introducing-third-generation-of-apple-foundation-models"
UPDATES = {
    "https://machinelearning.apple.com/updates/apple-at-cvpr-2026",
    "https://machinelearning.apple.com/updates/ppml-2026",
}


def feed_without_newest() -> bytes:
    """The feed fixture as it stood before its newest item (the first <item>) was published."""
    without, n = re.subn(rb"<item>.*?</item>", b"", FEED, count=1, flags=re.DOTALL)
    assert n == 1 and NEWEST.encode() not in without
    return without


@pytest.fixture
def server() -> Iterator[FeedServer]:
    with FeedServer() as fake:
        fake.route("/rss.xml", Reply(body=FEED))
        fake.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML))
        yield fake


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


def by_link(store: Store) -> dict[str, Item]:
    items = store.latest(limit=1000)
    links = [i.link for i in items]
    assert len(links) == len(set(links)), "one item for each link"
    return {i.link: i for i in items}


# --- backfill ---


def test_backfill_then_poll_leaves_one_enriched_item_per_link_and_delivers_nothing(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    result = ri.backfill(store, client, server.url("/research"))
    assert result.as_json() == {"found": 14, "added": 14, "enriched": 0}
    assert not store.is_baselined(), "a backfill is not the baseline poll"
    store.subscribe("T1", "C1", "U1")
    polled = poller.poll_once(
        store, client, server.url("/rss.xml"), enrich=ri.enricher(server.url("/research"))
    )
    assert polled.error is None and polled.baseline and polled.new == 2  # the two /updates/ posts
    items = by_link(store)
    assert len(items) == 16
    research = [i for i in items.values() if i.kind == "research"]
    assert len(research) == 14
    for item in research:
        assert item.authors, item.link
        assert not item.summary.endswith("…"), item.link
    assert "[fixture continuation]" in items[NEWEST].summary
    assert {i.link for i in items.values() if i.kind == "update"} == UPDATES
    assert store.deliveries() == []
    # a later poll of the same feed text never puts the cut abstract back
    again = poller.poll_once(store, client, server.url("/rss.xml"))
    assert again.new == 0 and again.updated == 0
    assert "[fixture continuation]" in by_link(store)[NEWEST].summary
    assert store.deliveries() == []


def test_poll_then_backfill_enriches_the_feed_items_and_adds_the_older_ones(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    poller.poll_once(store, client, server.url("/rss.xml"))
    store.subscribe("T1", "C1", "U1")
    before = by_link(store)
    assert before[NEWEST].summary.endswith("…") and before[NEWEST].authors == ()
    result = ri.backfill(store, client, server.url("/research"))
    assert result.as_json() == {"found": 14, "added": 6, "enriched": 8}
    items = by_link(store)
    assert len(items) == 16
    assert items[NEWEST].summary.startswith(before[NEWEST].summary.rstrip("…"))
    assert items[NEWEST].authors == ("Ada Example", "Ben Sample")
    assert items[NEWEST].title == before[NEWEST].title and items[NEWEST].published == before[NEWEST].published
    assert store.deliveries() == [], "backfilled items are never delivered"
    assert ri.backfill(store, client, server.url("/research")).as_json() == {
        "found": 14,
        "added": 0,
        "enriched": 0,
    }
    later = poller.poll_once(store, client, server.url("/rss.xml"))
    assert later.new == 0 and store.deliveries() == []


def test_backfill_does_not_replace_a_longer_abstract_with_a_shorter_one(
    client: httpx.Client, store: Store
) -> None:
    long_text = "A complete abstract. " * 40
    store.add_items([ri.parse(index_page([post("x", "X", long_text, "2026-01-01")])).items[0]])
    with FeedServer() as fake:
        url = fake.route(
            "/research", Reply(body=index_page([post("x", "X", "Short.", "2026-01-01", authors=["A B"])]))
        )
        assert ri.backfill(store, client, url).as_json() == {"found": 1, "added": 0, "enriched": 1}
    (item,) = store.latest()
    assert item.summary == long_text.strip() and item.authors == ("A B",)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=500, body=b"<html><body>oops</body></html>", content_type=HTML),
        Reply(body=b"<html><body>maintenance</body></html>", content_type=HTML),
        Reply(body=b'<script id="__NEXT_DATA__">{not json</script>', content_type=HTML),
        Reply(body=index_page([{"title": "no slug"}]), content_type=HTML),
    ],
)
def test_a_broken_index_loses_nothing(
    server: FeedServer, client: httpx.Client, store: Store, reply: Reply
) -> None:
    poller.poll_once(store, client, server.url("/rss.xml"))
    before = by_link(store)
    url = server.route("/broken", reply)
    with pytest.raises(ri.IndexReadError):
        ri.backfill(store, client, url)
    assert by_link(store) == before
    assert store.get_meta(ri.META_BACKFILLED) is None


# --- backfill_if_sparse (for serve) ---


def test_backfill_if_sparse_runs_once_and_then_never(
    server: FeedServer, client: httpx.Client, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.research_index")
    result = ri.backfill_if_sparse(store, client, server.url("/research"))
    assert result is not None and result.added == 14
    assert "event=backfill found=14 added=14" in caplog.text
    assert ri.backfill_if_sparse(store, client, server.url("/research")) is None
    assert len(server.requests_to("/research")) == 1


def test_backfill_if_sparse_skips_a_full_archive(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    assert ri.backfill_if_sparse(store, client, server.url("/research"), threshold=0) is None
    assert server.requests_to("/research") == []


def test_backfill_if_sparse_logs_a_failure_and_retries_later(
    client: httpx.Client, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    with FeedServer() as fake:
        url = fake.route(
            "/research",
            [
                Reply(status=502, body=b"bad gateway"),
                Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML),
            ],
        )
        assert ri.backfill_if_sparse(store, client, url) is None
        assert "event=backfill_failed" in caplog.text and "HTTP 502" in caplog.text
        result = ri.backfill_if_sparse(store, client, url)
    assert result is not None and result.added == 14


def test_backfill_if_sparse_never_raises(tmp_path: Path, client: httpx.Client) -> None:
    broken = SQLiteStore(tmp_path / "not-a-dir" / "x.db")
    (tmp_path / "not-a-dir").write_text("a file where a directory should be")
    assert ri.backfill_if_sparse(broken, client, "http://127.0.0.1:9/research") is None


# --- enrichment on poll ---


def test_a_new_feed_item_is_enriched_and_still_delivered_once(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    feed_url = server.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
    enrich = ri.enricher(server.url("/research"))
    first = poller.poll_once(store, client, feed_url, enrich=enrich)
    assert first.baseline and server.requests_to("/research") == [], "the baseline poll is not enriched"
    store.subscribe("T1", "C1", "U1")
    second = poller.poll_once(store, client, feed_url, enrich=enrich)
    assert second.new == 1 and [i.link for i in second.new_items] == [NEWEST]
    assert second.new_items[0].summary.endswith("…"), "what is new is the feed's item"
    assert len(server.requests_to("/research")) == 1
    item = store.get_item(NEWEST)
    assert item is not None and "[fixture continuation]" in item.summary
    assert item.authors == ("Ada Example", "Ben Sample")
    assert [d.item_id for d in store.deliveries()] == [NEWEST]
    assert len(store.latest(limit=100)) == 10, "enrichment adds no items"
    third = poller.poll_once(store, client, feed_url, enrich=enrich)
    assert third.new == 0 and len(server.requests_to("/research")) == 1, "nothing new: no request"


def test_a_failed_enrichment_keeps_the_feed_text_and_retries(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    feed_url = server.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
    server.route(
        "/research",
        [
            Reply(status=500, body=b"<html>down</html>", content_type=HTML),
            Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML),
        ],
    )
    enrich = ri.enricher(server.url("/research"))
    poller.poll_once(store, client, feed_url, enrich=enrich)
    store.subscribe("T1", "C1", "U1")
    second = poller.poll_once(store, client, feed_url, enrich=enrich)
    assert second.error is None and second.new == 1
    item = store.get_item(NEWEST)
    assert item is not None and item.summary.endswith("…") and item.authors == ()
    assert [d.item_id for d in store.deliveries()] == [NEWEST]
    third = poller.poll_once(store, client, feed_url, enrich=enrich)  # nothing new, the retry succeeds
    assert third.new == 0 and len(server.requests_to("/research")) == 2
    item = store.get_item(NEWEST)
    assert item is not None and "[fixture continuation]" in item.summary
    poller.poll_once(store, client, feed_url, enrich=enrich)
    assert len(server.requests_to("/research")) == 2, "once enriched, no more requests"
    assert [d.item_id for d in store.deliveries()] == [NEWEST]


def test_enrichment_gives_up_after_a_few_attempts(client: httpx.Client, store: Store) -> None:
    with FeedServer() as fake:
        url = fake.route("/research", Reply(body=index_page([post("other", "Other", "x", "2026-01-01")])))
        assert ri.enrich(store, client, url, [NEWEST]) == 0
        for _ in range(5):
            ri.enrich(store, client, url, [])
        assert len(fake.requests_to("/research")) == ri.ENRICH_ATTEMPTS


def test_enrichment_skips_updates_posts(client: httpx.Client, store: Store) -> None:
    with FeedServer() as fake:
        url = fake.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML))
        assert ri.enrich(store, client, url, sorted(UPDATES)) is None
        assert fake.requests == []


def test_enrichment_never_raises(tmp_path: Path, client: httpx.Client) -> None:
    (tmp_path / "not-a-dir").write_text("x")
    broken = SQLiteStore(tmp_path / "not-a-dir" / "x.db")
    assert ri.enrich(broken, client, "http://127.0.0.1:9/research", [NEWEST]) is None


def test_poll_survives_an_enrich_step_that_raises(
    server: FeedServer, client: httpx.Client, store: Store
) -> None:
    def explode(*args: object) -> object:
        raise RuntimeError("boom")

    feed_url = server.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
    poller.poll_once(store, client, feed_url, enrich=explode)
    result = poller.poll_once(store, client, feed_url, enrich=explode)
    assert result.error is None and result.new == 1


# --- the store: migration and search over authors ---


def test_migration_indexes_authors_of_an_existing_archive(tmp_path: Path) -> None:
    from sqlite_utils import Database

    path = tmp_path / "old.db"
    db = Database(path)
    migration_set().apply(db, stop_before="m003_authors_fts")
    db.execute(
        "INSERT INTO items (id, guid, title, link, summary, published, kind, authors) VALUES "
        "('https://x.test/research/a', NULL, 'A title', 'https://x.test/research/a', 'text', "
        "'2026-01-01T00:00:00Z', 'research', '[\"Grace Hopper\", \"Alan Turing\"]')"
    )
    db.conn.commit()
    db.close()
    store = SQLiteStore(path)
    store.migrate()
    from bot.search.index import SearchIndex
    from bot.search.query import search

    index = SearchIndex(store)
    assert [h.item.title for h in search(index, "hopper").hits] == ["A title"]
    assert [h.item.title for h in search(index, 'author:"Alan Turing"').hits] == ["A title"]


# --- the command line ---


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: FeedServer) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in (
        "SLACK_BOT_TOKEN",
        "SLACK_APP_TOKEN",
        "SLACK_SIGNING_SECRET",
        "LOG_LEVEL",
        "SUMMARY_API_URL",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("FEED_URL", server.url("/rss.xml"))
    return tmp_path / "cli.db"


def test_cli_backfill_json_then_poll_delivers_nothing(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli.main(["backfill", "--json"]) == 0  # the index beside the feed: <feed origin>/research
    out, err = capsys.readouterr()
    assert json.loads(out) == {"found": 14, "added": 14, "enriched": 0}
    assert err == "", "no progress line when stderr is not a terminal"
    with FakeSlack() as slack:
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
        monkeypatch.setenv("SLACK_API_URL", slack.url)
        SQLiteStore(env).subscribe("T0FAKE", "C1", "U1")
        assert cli.main(["poll", "--json"]) == 0
        polled = json.loads(capsys.readouterr().out)
        assert polled["delivered"] == 0 and polled["new"] == 2
        assert slack.posts("C1") == []
    assert len(SQLiteStore(env).latest(limit=100)) == 16


def test_cli_poll_enriches_a_new_item_it_delivers(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
    assert cli.main(["poll", "--json"]) == 0
    with FakeSlack() as slack:
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-test")
        monkeypatch.setenv("SLACK_API_URL", slack.url)
        SQLiteStore(env).subscribe("T0FAKE", "C1", "U1")
        assert cli.main(["poll", "--json"]) == 0
        polled = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert polled["new"] == 1 and polled["delivered"] == 1
        assert len(slack.posts("C1")) == 1
    item = SQLiteStore(env).get_item(NEWEST)
    assert item is not None and "[fixture continuation]" in item.summary
    assert len(server.requests_to("/research")) == 1


def test_cli_backfill_dry_run_writes_nothing(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["backfill", "--dry-run", "--json", "--url", server.url("/research")]) == 0
    assert json.loads(capsys.readouterr().out) == {"found": 14, "added": 14, "enriched": 0, "dry_run": True}
    assert not env.exists()
    assert cli.main(["poll"]) == 0
    capsys.readouterr()
    assert cli.main(["backfill", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "6 would be added, 8 enriched; nothing written" in out
    assert len(SQLiteStore(env).latest(limit=100)) == 10


def test_cli_backfill_failure_is_one_line_exit_1(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.route("/gone", Reply(status=404, body=b"<html>Not Found</html>", content_type=HTML))
    assert cli.main(["backfill", "--url", url]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = [
        x for x in err.splitlines() if x.startswith("mlresearch-bot:")
    ]  # (the fake server may log too)
    assert "backfill failed" in line and "HTTP 404" in line


def test_cli_backfill_warns_about_skipped_posts(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = server.route(
        "/partial", Reply(body=index_page([post("ok", "Ok", "x", "2026-01-01"), {"title": "no slug"}]))
    )
    assert cli.main(["backfill", "--url", url]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "1 posts in the index: 1 added, 0 enriched"
    assert "warning: 1 of 2 posts" in err and "missing slug: 1" in err


def test_cli_backfill_shows_progress_on_a_terminal(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert cli.main(["backfill"]) == 0
    err = capsys.readouterr().err
    assert "backfill: reading" in err and "backfill: merging 14 posts" in err and err.endswith("\r\033[K")


def test_cli_search_shows_authors_shortened(
    env: Path, server: FeedServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["backfill"]) == 0
    capsys.readouterr()
    assert cli.main(["search", "balcaprl"]) == 0
    out = capsys.readouterr().out
    assert "D. Fixture, E. van Testen et al." in out
    assert cli.main(["search", 'author:"Ada Example"', "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and hits[0]["link"] == NEWEST


def test_a_large_backfill_leaves_the_archive_searchable(store: Store) -> None:
    """A merge of BULK_MERGE or more posts ends by tidying the search index (FTS5 optimize; ANALYZE on
    PostgreSQL) inside its transaction: every post is found afterwards, by words and by author."""
    from bot.search import query as search_module
    from bot.search.index import SearchIndex
    from bot.store.base import BULK_MERGE
    from tests.fakes.research_index import synthetic_posts

    page = index_page(synthetic_posts(BULK_MERGE + 10))
    index = ri.parse(page)
    assert store.merge_index(index.items) == (BULK_MERGE + 10, 0)
    assert store.count_items() == BULK_MERGE + 10
    sample = index.items[BULK_MERGE // 2]
    searchable = SearchIndex(store)
    hits = search_module.search(searchable, sample.title, limit=5).hits
    assert sample.id in [h.item.id for h in hits]
    by_author = search_module.search(searchable, f'author:"{sample.authors[0]}"', limit=50).hits
    assert sample.id in [h.item.id for h in by_author]


def test_cli_backfill_embeds_the_new_posts_quietly(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bot.search.embed import BUNDLED_NAME

    assert cli.main(["backfill", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["added"] == 14 and err == ""
    store = SQLiteStore(env)
    assert len(store.item_vectors(BUNDLED_NAME)) == store.count_items()
