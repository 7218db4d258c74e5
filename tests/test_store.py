"""bot.store: schema and migrations, identity and edits, the first-run baseline, feed state."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.feed import Validators, parse
from bot.store import Store

DATA = Path(__file__).parent / "data"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
ARCHIVE = parse((DATA / "apple_ml_archive.xml").read_bytes())
URL = "https://machinelearning.apple.com/rss.xml"


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "test.db")
    s.migrate()
    return s


def raw(store: Store, sql: str, *params):
    conn = sqlite3.connect(store.path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


# --- schema ---------------------------------------------------------------------------------------------


def test_migrate_creates_the_tables_in_wal_mode(store):
    names = {r[0] for r in raw(store, "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger')")}
    assert {"items", "items_fts", "aliases", "feed_state", "meta", "_sqlite_migrations"} <= names
    assert any(n.startswith("items_a") or "items_fts" in n for n in names if n not in {"items", "items_fts"})
    assert raw(store, "PRAGMA journal_mode")[0][0] == "wal"


def test_items_fts_is_fts5_with_porter_stemming_on_title_and_summary(store):
    sql = raw(store, "SELECT sql FROM sqlite_master WHERE name = 'items_fts'")[0][0]
    assert "FTS5" in sql.upper()
    assert "porter" in sql
    assert '"title"' in sql and '"summary"' in sql
    assert "prefix='3 4 5 6'" in sql  # prefix indexes: a typed prefix needs no doclist merge


def test_migrate_is_idempotent(store):
    store.migrate()
    store.migrate()
    assert store.count_items() == 0


def test_feed_state_has_the_issue_columns(store):
    columns = {r[1] for r in raw(store, "PRAGMA table_info(feed_state)")}
    assert {"etag", "last_modified", "last_poll", "last_success", "error_streak", "last_error"} <= columns


def fts_ids(store: Store, match: str) -> set[str]:
    return {
        r[0]
        for r in raw(
            store,
            "SELECT items.id FROM items_fts JOIN items ON items.pk = items_fts.rowid WHERE items_fts MATCH ?",
            match,
        )
    }


def test_triggers_keep_the_fts_index_current_on_insert_and_edit(store):
    store.add_items(RSS)
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    assert velox.id in fts_ids(store, '"velox"')
    store.add_items([replace(velox, title="Quokka: a renamed paper", summary="about marsupials")])
    assert velox.id in fts_ids(store, '"quokka"')
    assert velox.id in fts_ids(store, '"marsupial"')  # porter: marsupials -> marsupial
    assert velox.id not in fts_ids(store, '"velox"')


# --- the first run and identity -------------------------------------------------------------------------


def test_the_first_poll_records_every_item_as_seen_and_queues_nothing(store):
    store.subscribe("T1", "C1", "U1")
    result = store.ingest(URL, RSS, Validators('"v1"'))
    assert result.baseline is True
    assert len(result.new) == 10
    assert result.queued == 0
    assert store.count_items() == 10
    assert store.open_deliveries() == []
    assert store.is_baselined()


def test_after_the_baseline_an_item_is_new_exactly_when_its_identity_was_never_stored(store):
    store.subscribe("T1", "C1", "U1")
    store.ingest(URL, RSS, Validators())
    result = store.ingest(URL, ARCHIVE, Validators())
    assert result.baseline is False
    assert len(result.new) == 6
    assert {i.id for i in result.new} == {i.id for i in ARCHIVE} - {i.id for i in RSS}
    assert result.queued == 6
    assert [d.item_id for d in store.open_deliveries()] == [i.id for i in result.new]
    again = store.ingest(URL, ARCHIVE, Validators())
    assert again.new == [] and again.queued == 0


def test_an_empty_feed_is_not_the_baseline(store):
    first = store.ingest(URL, [], Validators())
    assert first.new == []
    assert not store.is_baselined()
    second = store.ingest(URL, RSS, Validators())
    assert second.baseline is True


def test_a_changed_guid_does_not_make_a_known_item_new(store):
    store.ingest(URL, RSS, Validators())
    churned = [replace(i, guid=f"{i.guid}-renamed") for i in RSS]
    result = store.ingest(URL, churned, Validators())
    assert result.new == [] and result.updated == 0
    assert len(raw(store, "SELECT * FROM aliases")) == 20  # both guids are remembered as aliases


def test_a_guid_alias_recognizes_an_item_whose_link_moved(store):
    store.ingest(URL, RSS, Validators())
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    moved = replace(
        velox,
        id="https://machinelearning.apple.com/research/velox-4d",
        link="https://machinelearning.apple.com/research/velox-4d",
    )
    result = store.ingest(URL, [moved], Validators())
    assert result.new == []
    assert store.count_items() == 10


def test_an_edit_updates_the_stored_text_and_is_not_new(store):
    store.ingest(URL, RSS, Validators())
    velox = next(i for i in RSS if i.link.endswith("/velox"))
    edited = replace(
        velox, title="Velox (revised)", summary="A new abstract…", published=datetime(2026, 5, 9, tzinfo=UTC)
    )
    result = store.ingest(URL, [edited], Validators())
    assert result.new == [] and result.updated == 1
    stored = store.get_item(velox.id)
    assert stored is not None
    assert (stored.title, stored.summary, stored.published) == (
        "Velox (revised)",
        "A new abstract…",
        datetime(2026, 5, 9, tzinfo=UTC),
    )


def test_an_unchanged_item_is_not_rewritten(store):
    store.ingest(URL, RSS, Validators(), at=datetime(2026, 6, 8, tzinfo=UTC))
    result = store.ingest(URL, list(reversed(RSS)), Validators(), at=datetime(2026, 6, 9, tzinfo=UTC))
    assert result.new == [] and result.updated == 0
    assert {r[0] for r in raw(store, "SELECT updated_at FROM items")} == {"2026-06-08T00:00:00Z"}


def test_items_read_back_equal_what_was_stored(store):
    store.ingest(URL, RSS, Validators())
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


# --- feed state -----------------------------------------------------------------------------------------


def test_validators_and_timestamps_are_stored_on_success(store):
    at = datetime(2026, 6, 8, 12, tzinfo=UTC)
    store.ingest(URL, RSS, Validators('"v1"', "Mon, 08 Jun 2026 00:00:00 GMT"), at=at)
    state = store.feed_state(URL)
    assert state.validators == Validators('"v1"', "Mon, 08 Jun 2026 00:00:00 GMT")
    assert state.last_poll == state.last_success == at
    assert state.error_streak == 0 and state.ok


def test_failures_count_a_streak_and_keep_the_last_error_until_a_success(store):
    store.ingest(URL, RSS, Validators('"v1"'))
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
    store.ingest(URL, RSS, Validators('"v1"'), at=datetime(2026, 6, 8, tzinfo=UTC))
    before = raw(store, "SELECT * FROM items ORDER BY pk")
    store.record_not_modified(URL, Validators('"v1"'), at=datetime(2026, 6, 9, tzinfo=UTC))
    assert raw(store, "SELECT * FROM items ORDER BY pk") == before
    assert store.feed_state(URL).last_poll == datetime(2026, 6, 9, tzinfo=UTC)


# --- read-only preview (poll --dry-run) -----------------------------------------------------------------


def test_preview_of_a_missing_database_creates_nothing(tmp_path):
    store = Store(tmp_path / "absent.db")
    new, baseline = store.preview(RSS)
    assert len(new) == 10 and baseline
    assert store.feed_state(URL, readonly=True).etag is None
    assert list(tmp_path.iterdir()) == []


def test_preview_reads_without_writing(store):
    store.ingest(URL, RSS, Validators())
    before = store.path.read_bytes()
    new, baseline = store.preview(ARCHIVE)
    assert len(new) == 6 and not baseline
    assert store.path.read_bytes() == before
    assert store.count_items() == 10


def test_units_of_work_see_each_other_and_close_releases_the_idle_connection(store, tmp_path):
    other = Store(store.path)
    store.ingest(URL, RSS, Validators('"v1"'))
    assert other.count_items() == 10
    store.close()
    store.close()
    assert store.count_items() == 10
    store.add_items(ARCHIVE)
    assert other.count_items() == 16
