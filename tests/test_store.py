"""bot.store: schema and migrations, identity and edits, the first-run baseline, feed state, the poll lock.

The tests taking `store` or `database_url` run on both backends (tests/conftest.py); the backend-specific
ones say so in their names."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from msgspec.structs import replace

from bot.errors import LockTimeout
from bot.feed import parse
from bot.models import Validators
from bot.route import ingest
from bot.search.index import SearchIndex
from bot.search.query import search
from bot.store import MIGRATIONS, SQLiteStore, Store, open_store

DATA = Path(__file__).parent / "data"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
ARCHIVE = parse((DATA / "apple_ml_archive.xml").read_bytes())
URL = "https://machinelearning.apple.com/rss.xml"


@pytest.fixture
def sqlite_store(tmp_path):
    s = SQLiteStore(tmp_path / "test.db")
    s.migrate()
    return s


def raw(store: Store, sql: str, *params):
    with store.connect() as db:
        return [tuple(r) for r in db.execute(sql, list(params)).fetchall()]


# --- schema ---------------------------------------------------------------------------------------------


def test_both_backends_apply_the_same_migrations(store):
    assert store.applied_migrations() == list(MIGRATIONS)
    assert store.migrate() == []  # idempotent
    assert store.applied_migrations() == list(MIGRATIONS)


def test_sqlite_migrate_creates_the_tables_in_wal_mode(sqlite_store):
    sql = "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')"
    names = {r[0] for r in raw(sqlite_store, sql)}
    assert {"items", "aliases", "feed_state", "meta", "_sqlite_migrations"} <= names
    assert raw(sqlite_store, "PRAGMA journal_mode")[0][0] == "wal"


def test_sqlite_full_text_tables_are_gone_and_the_change_marker_stays(sqlite_store):
    names = {r[0] for r in raw(sqlite_store, "SELECT name FROM sqlite_master")}
    assert "items_fts" not in names and not {"items_ai", "items_ad", "items_au"} & names
    assert {"search_generation", "items_generation_insert", "items_generation_update"} <= names


@pytest.mark.postgres
def test_postgres_search_column_is_gone_and_a_change_marker_replaces_it(pg_schema_url):
    store = open_store(pg_schema_url)
    store.migrate()
    tables = {r[0] for r in raw(store, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")}
    assert {"items", "aliases", "feed_state", "meta", "subscriptions", "deliveries", "installations",
            "_migrations", "search_generation"} <= tables
    columns = {r[0] for r in raw(store, "SELECT column_name FROM information_schema.columns "
                                        "WHERE table_schema = current_schema() AND table_name = 'items'")}
    assert "search" not in columns


def test_every_change_to_items_moves_the_change_marker(store):
    before = store.change_marker()
    store.add_items(RSS)
    added = store.change_marker()
    assert added != before
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    store.add_items([replace(velox, title="Quokka")])
    assert store.change_marker() != added
    edited = store.change_marker()
    store.subscribe("T1", "C1", "U1")
    assert store.change_marker() == edited  # only items move it


def test_changed_items_are_the_rows_written_after_a_marker(store):
    store.add_items(RSS)
    marker = store.change_marker()
    assert store.changed_items(marker) == ([], len(RSS))
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    store.add_items([replace(velox, title="Quokka")])
    edited = store.change_marker()
    rows, count = store.changed_items(marker)
    assert [(r["id"], r["title"]) for r in rows] == [(velox.id, "Quokka")] and count == len(RSS)
    assert rows == [r for r in store.all_items() if r["id"] == velox.id]
    store.add_items(ARCHIVE[:2])
    rows, count = store.changed_items(edited)
    assert {r["id"] for r in rows} == {i.id for i in ARCHIVE[:2]} - {i.id for i in RSS}
    assert count == store.count_items()
    assert store.changed_items(store.change_marker()) == ([], count)


def test_m009_stamps_existing_rows_with_the_current_marker(database_url):
    old = open_store(database_url)
    old.migrate(stop_before="m009_item_changes")
    old.add_items(RSS)
    marker = old.change_marker()
    assert marker > 0
    assert open_store(database_url).migrate() == list(MIGRATIONS[MIGRATIONS.index("m009_item_changes"):])
    assert {r[0] for r in raw(old, "SELECT changed FROM items")} == {marker}
    assert sorted(old.changed_items(marker - 1)[0], key=lambda r: r["id"]) == old.all_items()
    assert old.changed_items(marker) == ([], len(RSS))
    old.add_items([replace(RSS[0], title="Quokka")])
    assert [r["title"] for r in old.changed_items(marker)[0]] == ["Quokka"]


def test_migrate_is_idempotent(store):
    store.migrate()
    store.migrate()
    assert store.count_items() == 0


def test_feed_state_has_the_issue_columns(store):
    store.record_failure(URL, "boom")
    with store.connect() as db:
        columns = set(db.rows("SELECT * FROM feed_state")[0])
    assert {"etag", "last_modified", "last_poll", "last_success", "error_streak", "last_error"} <= columns


def found(store: Store, word: str) -> set[str]:
    return {h.item.id for h in search(SearchIndex(store), f"{word} ", limit=50).hits}


def test_the_search_index_stays_current_on_insert_and_edit(store):
    store.add_items(RSS)
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    assert velox.id in found(store, "velox")
    store.add_items([replace(velox, title="Quokka: a renamed paper", summary="about marsupials")])
    assert velox.id in found(store, "quokka")
    assert velox.id in found(store, "marsupial")  # stemming: marsupials -> marsupial
    assert velox.id not in found(store, "velox")


# --- the first run and identity -------------------------------------------------------------------------


def test_the_first_poll_records_every_item_as_seen_and_queues_nothing(store):
    store.subscribe("T1", "C1", "U1")
    result = ingest(store, URL, RSS, Validators('"v1"'))
    assert result.baseline is True
    assert len(result.new) == 10
    assert result.queued == 0
    assert store.count_items() == 10
    assert store.open_deliveries() == []
    assert store.is_baselined() and store.is_baselined(URL) and not store.is_baselined(URL + "?other")


def test_after_the_baseline_an_item_is_new_exactly_when_its_identity_was_never_stored(store):
    store.subscribe("T1", "C1", "U1")
    ingest(store, URL, RSS, Validators())
    result = ingest(store, URL, ARCHIVE, Validators())
    assert result.baseline is False
    assert len(result.new) == 6
    assert {i.id for i in result.new} == {i.id for i in ARCHIVE} - {i.id for i in RSS}
    assert result.queued == 6
    assert [d.item_id for d in store.open_deliveries()] == [i.id for i in result.new]
    again = ingest(store, URL, ARCHIVE, Validators())
    assert again.new == [] and again.queued == 0


def test_an_empty_feed_is_not_the_baseline(store):
    first = ingest(store, URL, [], Validators())
    assert first.new == []
    assert not store.is_baselined()
    second = ingest(store, URL, RSS, Validators())
    assert second.baseline is True


def test_a_changed_guid_does_not_make_a_known_item_new(store):
    ingest(store, URL, RSS, Validators())
    churned = [replace(i, guid=f"{i.guid}-renamed") for i in RSS]
    result = ingest(store, URL, churned, Validators())
    assert result.new == [] and result.updated == 0
    assert len(raw(store, "SELECT * FROM aliases")) == 20  # both guids are remembered as aliases


def test_a_guid_alias_recognizes_an_item_whose_link_moved(store):
    ingest(store, URL, RSS, Validators())
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    moved = replace(
        velox,
        id="https://machinelearning.apple.com/research/velox-4d",
        link="https://machinelearning.apple.com/research/velox-4d",
    )
    result = ingest(store, URL, [moved], Validators())
    assert result.new == []
    assert store.count_items() == 10


def test_an_edit_updates_the_stored_text_and_is_not_new(store):
    ingest(store, URL, RSS, Validators())
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    edited = replace(
        velox, title="Velox (revised)", summary="A new abstract…", published=datetime(2026, 5, 9, tzinfo=UTC)
    )
    result = ingest(store, URL, [edited], Validators())
    assert result.new == [] and result.updated == 1
    stored = store.get_item(velox.id)
    assert stored is not None
    assert (stored.title, stored.summary, stored.published) == (
        "Velox (revised)",
        "A new abstract…",
        datetime(2026, 5, 9, tzinfo=UTC),
    )


def test_an_unchanged_item_is_not_rewritten(store):
    ingest(store, URL, RSS, Validators(), at=datetime(2026, 6, 8, tzinfo=UTC))
    result = ingest(store, URL, list(reversed(RSS)), Validators(), at=datetime(2026, 6, 9, tzinfo=UTC))
    assert result.new == [] and result.updated == 0
    assert {r[0] for r in raw(store, "SELECT updated_at FROM items")} == {"2026-06-08T00:00:00Z"}


def test_items_read_back_equal_what_was_stored(store):
    ingest(store, URL, RSS, Validators())
    for item in RSS:
        back = store.get_item(item.id)
        assert back is not None
        assert (back.id, back.guid, back.title, back.link, back.summary, back.published, back.kind) == (
            item.id,
            item.guid,
            item.title,
            item.link,
            item.summary,
            item.published,
            item.kind,
        )



def test_each_item_reads_the_whole_archive_by_id_a_page_at_a_time(store):
    ingest(store, URL, RSS, Validators())
    paged = list(store.each_item(page=3))  # 10 items: pages of 3, 3, 3 and 1
    assert [row["id"] for row in paged] == sorted(item.id for item in RSS)
    assert paged == list(store.each_item(page=10)) == list(store.each_item(page=11)) == store.all_items()


def test_item_by_link_finds_an_item_by_its_id_or_its_link(store):
    ingest(store, URL, RSS, Validators())
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    assert store.item_by_link(velox.link) == store.get_item(velox.id)
    other = replace(velox, id="https://machinelearning.apple.com/research/velox-first",
                    guid="velox-first", link="https://machinelearning.apple.com/research/velox-since")
    store.add_items([other])
    for name in (other.id, other.link):
        found = store.item_by_link(name)
        assert found is not None and found.id == other.id
    assert store.item_by_link("https://machinelearning.apple.com/research/never-published") is None

# --- feed state -----------------------------------------------------------------------------------------


def test_validators_and_timestamps_are_stored_on_success(store):
    at = datetime(2026, 6, 8, 12, tzinfo=UTC)
    ingest(store, URL, RSS, Validators('"v1"', "Mon, 08 Jun 2026 00:00:00 GMT"), at=at)
    state = store.feed_state(URL)
    assert state.validators == Validators('"v1"', "Mon, 08 Jun 2026 00:00:00 GMT")
    assert state.last_poll == state.last_success == at
    assert state.error_streak == 0 and state.ok


def test_failures_count_a_streak_and_keep_the_last_error_until_a_success(store):
    ingest(store, URL, RSS, Validators('"v1"'))
    store.record_failure(URL, "https://x answered HTTP 500")
    store.record_failure(URL, "https://x timed out")
    state = store.feed_state(URL)
    assert state.error_streak == 2
    assert state.last_error == "https://x timed out"
    assert not state.ok
    assert state.validators.etag == '"v1"'  # a failure keeps the validators
    assert store.count_items() == 10
    store.record_not_modified(URL, Validators('"v1"'))
    assert store.feed_state(URL).error_streak == 0
    assert store.latest_feed_state() is not None


def test_a_304_only_touches_the_poll_timestamps(store):
    ingest(store, URL, RSS, Validators('"v1"'), at=datetime(2026, 6, 8, tzinfo=UTC))
    before = raw(store, "SELECT * FROM items ORDER BY pk")
    store.record_not_modified(URL, Validators('"v1"'), at=datetime(2026, 6, 9, tzinfo=UTC))
    assert raw(store, "SELECT * FROM items ORDER BY pk") == before
    assert store.feed_state(URL).last_poll == datetime(2026, 6, 9, tzinfo=UTC)


# --- read-only preview (poll --dry-run) -----------------------------------------------------------------


def test_preview_of_a_missing_database_creates_nothing(database_url):
    absent = open_store(database_url)  # never migrated: no file, or a schema without tables
    new, baseline = absent.preview(URL, RSS)
    assert len(new) == 10 and baseline
    assert absent.feed_state(URL, readonly=True).etag is None
    assert absent.preview_index(RSS) == (10, 0)
    assert not absent.exists()


def test_sqlite_preview_of_a_missing_file_leaves_the_directory_empty(tmp_path):
    store = SQLiteStore(tmp_path / "absent.db")
    assert store.preview(URL, RSS)[1]
    assert list(tmp_path.iterdir()) == []


def test_preview_reads_without_writing(store):
    ingest(store, URL, RSS, Validators())
    tables = ("items", "aliases", "feed_state", "meta", "deliveries")
    before = {t: raw(store, f"SELECT * FROM {t} ORDER BY 1") for t in tables}
    new, baseline = store.preview(URL, ARCHIVE)
    assert len(new) == 6 and not baseline
    assert {t: raw(store, f"SELECT * FROM {t} ORDER BY 1") for t in tables} == before


def test_sqlite_preview_leaves_the_file_unchanged(sqlite_store):
    ingest(sqlite_store, URL, RSS, Validators())
    before = sqlite_store.path.read_bytes()
    assert len(sqlite_store.preview(URL, ARCHIVE)[0]) == 6
    assert sqlite_store.path.read_bytes() == before


def test_units_of_work_see_each_other_and_close_releases_the_idle_connection(store, database_url):
    other = open_store(database_url)
    ingest(store, URL, RSS, Validators('"v1"'))
    assert other.count_items() == 10
    store.close()
    store.close()
    assert store.count_items() == 10
    store.add_items(ARCHIVE)
    assert other.count_items() == 16
    other.close()


# --- sessions, writers and the poll lock ----------------------------------------------------------------


def test_a_session_shares_one_connection_between_threads(store):
    store.subscribe("T1", "C1", "U1")
    ingest(store, URL, RSS, Validators())
    ingest(store, URL, ARCHIVE, Validators())
    rows = store.open_deliveries()
    with store.session() as run:
        opened = []
        with run.connect() as db:
            opened.append(db)
        threads = [threading.Thread(target=run.mark_sent, args=(r.id, f"{n}.0")) for n, r in enumerate(rows)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with run.connect() as db:
            assert db is opened[0]
        with store.connect() as db:  # the store itself is not pinned
            assert db is not opened[0]
    assert {d.state for d in store.deliveries()} == {"sent"}


def test_concurrent_ingests_queue_each_delivery_exactly_once(store, database_url):
    store.subscribe("T1", "C1", "U1")
    ingest(store, URL, RSS, Validators())
    stores = [open_store(database_url) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results = []

    def poll(s: Store) -> None:
        barrier.wait()
        results.append(ingest(s, URL, ARCHIVE, Validators()))

    threads = [threading.Thread(target=poll, args=(s,)) for s in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(len(r.new) for r in results) == [0, 0, 0, 6]  # writers take turns: one of them saw it new
    assert sum(r.queued for r in results) == 6
    known = {r.id for r in RSS}
    queued = sorted(d.item_id for d in store.open_deliveries())
    assert queued == sorted(i.id for i in ARCHIVE if i.id not in known)
    for s in stores:
        s.close()


def test_the_poll_lock_admits_one_holder_at_a_time(store, database_url):
    other = open_store(database_url)
    with store.poll_lock():
        started = time.monotonic()
        with pytest.raises(LockTimeout), other.poll_lock(timeout=0.3):
            pass
        assert time.monotonic() - started >= 0.25
    with other.poll_lock(timeout=0), pytest.raises(LockTimeout), store.poll_lock(timeout=0):
        pass
    with store.poll_lock(timeout=0):
        pass


HOLD_LOCK = """
import sys, time
from bot.store import open_store
with open_store(sys.argv[1]).poll_lock(timeout=5):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_dead_holder_releases_the_poll_lock(store, database_url, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, database_url], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parent.parent)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(LockTimeout), store.poll_lock(timeout=0):
            pass
    finally:
        holder.kill()  # SIGKILL: no clean-up runs; the server (or the OS) releases the lock
        holder.wait(10)
    with store.poll_lock(timeout=5):
        pass
