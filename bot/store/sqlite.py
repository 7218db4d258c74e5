"""The SQLite backend: one file (plus its WAL), sqlite-utils migrations, a flock poll lock. A new database
file (and its WAL and lock files) is created readable by its owner only (0o600). The embedded default: no
server, one host. (Search is bot.search.index, the same for both stores; search_generation, bumped by
triggers on items, tells it when to refresh, and items.changed which rows to re-read.)
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Self
from urllib.parse import quote

from bot.errors import LockTimeout, StoreError
from bot.store.agent import AGENT_SCHEMA
from bot.store.base import MIGRATIONS
from bot.store.conn import Conn
from bot.store.conversations import ANSWERED_EVENTS
from bot.store.digests import DIGEST_SCHEMA
from bot.store.feed_state import copy_global_baseline
from bot.store.follows import FOLLOWS_DDL
from bot.store.ledger import BATCHES_DDL
from bot.store.merge import backfill_authors_text
from bot.store.pages import PAGES_DDL
from bot.store.store import Store
from bot.store.trending import TRENDING_DDL, backfill_vote_items, sqlite_marks_ddl
from bot.store.vectors import VECTORS_TABLE
from bot.store.workers import WORKERS_DDL

if TYPE_CHECKING:  # sqlite-utils is imported when a migration has to run: `serve` starts without it
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

MIGRATION_SET = "mlresearch"
# Prefix lengths indexed by items_fts (m004_fts_prefix_index; the table is gone since m007).
FTS_PREFIXES = "3 4 5 6"


# --- migrations (sqlite-utils; registered in migration_set) --------------------------------------------


def m001_items(db: Database) -> None:
    db.table("items").create(
        {
            "pk": int,
            "id": str,
            "guid": str,
            "title": str,
            "link": str,
            "summary": str,
            "published": str,
            "kind": str,
            "authors": str,
            "first_seen": str,
            "updated_at": str,
        },
        pk="pk",
        not_null={"id", "title", "link", "published", "kind"},
    )
    db.table("items").create_index(["id"], unique=True)
    db.table("items").create_index(["published"])
    db.table("items").enable_fts(["title", "summary"], tokenize="porter unicode61", create_triggers=True)
    db.table("aliases").create({"guid": str, "item_id": str}, pk="guid")
    db.table("feed_state").create(
        {
            "url": str,
            "etag": str,
            "last_modified": str,
            "last_poll": str,
            "last_success": str,
            "error_streak": int,
            "last_error": str,
            "last_error_at": str,
        },
        pk="url",
    )
    db.table("meta").create({"key": str, "value": str}, pk="key")


def m002_delivery(db: Database) -> None:
    db.table("subscriptions").create(
        {
            "team_id": str,
            "channel_id": str,
            "user_id": str,
            "created_at": str,
            "keywords": str,
            "paused": int,
            "paused_reason": str,
        },
        pk=("team_id", "channel_id"),
    )
    db.table("workspaces").create({"team_id": str, "disabled_reason": str, "disabled_at": str}, pk="team_id")
    db.table("deliveries").create(
        {
            "id": int,
            "item_id": str,
            "team_id": str,
            "channel_id": str,
            "state": str,
            "matched": str,
            "attempts": int,
            "ts": str,
            "error": str,
            "created_at": str,
            "updated_at": str,
            "claimed_at": str,
        },
        pk="id",
    )
    db.table("deliveries").create_index(["item_id", "team_id", "channel_id"], unique=True)
    db.table("deliveries").create_index(["state"])


def m003_authors_fts(db: Database) -> None:
    """Authors become searchable (issue 6): items.authors_text holds the names space-joined and joins title
    and summary in items_fts (triggers rebuilt); items.enriched_at marks items whose full abstract came from
    the research index, so the feed's cut abstract never replaces it."""
    items = db.table("items")
    columns = items.columns_dict
    if "authors_text" not in columns:
        items.add_column("authors_text", str)
    if "enriched_at" not in columns:
        items.add_column("enriched_at", str)
    backfill_authors_text(Conn(db.conn, pyformat=False))
    items.disable_fts()
    items.enable_fts(
        ["title", "summary", "authors_text"], tokenize="porter unicode61", create_triggers=True, replace=True
    )


def m004_fts_prefix_index(db: Database) -> None:
    """Prefix indexes (3 to 6 characters) on items_fts: search matches the last word typed as a prefix, and
    without them FTS5 merges the doclist of every word with that prefix on each query (a 3-letter prefix
    cost ~150 ms at 100,000 items; with them ~1 ms). Same columns, tokenizer, content table and triggers
    (the triggers name items_fts, which is recreated under the same name)."""
    columns = [r[1] for r in db.execute("PRAGMA table_info(items_fts)").fetchall()]
    names = ", ".join(f'"{c}"' for c in columns)
    db.execute("DROP TABLE items_fts")
    db.execute(
        f"CREATE VIRTUAL TABLE items_fts USING FTS5 ({names}, tokenize='porter unicode61', content='items', "
        f"prefix='{FTS_PREFIXES}')"
    )
    db.execute("INSERT INTO items_fts (items_fts) VALUES ('rebuild')")


def m005_installations(db: Database) -> None:
    """Multi-workspace installs (Bolt's OAuth flow): one row per installation, the whole
    slack_sdk Installation as JSON; OAuth state values with their expiry."""
    db.table("installations").create(
        {
            "key": str,
            "team_id": str,
            "enterprise_id": str,
            "data": str,
            "installed_at": str,
            "updated_at": str,
        },
        pk="key",
    )
    db.table("installations").create_index(["team_id"])
    db.table("oauth_states").create({"state": str, "expires_at": str}, pk="state")


def m006_search_generation(db: Database) -> None:
    """A counter of changes to items, bumped by triggers whatever connection or process makes them (the search
    index is rebuilt when it moves)."""
    db.execute("CREATE TABLE search_generation (n INTEGER NOT NULL)")
    db.execute("INSERT INTO search_generation (n) VALUES (0)")
    for event in ("INSERT", "UPDATE", "DELETE"):
        db.execute(
            f"CREATE TRIGGER items_generation_{event.lower()} AFTER {event} ON items "
            "BEGIN UPDATE search_generation SET n = n + 1; END"
        )


def m007_one_search_engine(db: Database) -> None:
    """Search moved to one engine in the process (bot.search.index): the FTS5 table and the triggers that kept
    it current go; search_generation (m006) stays, as the index's change marker."""
    for trigger in ("items_ai", "items_ad", "items_au"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    db.execute("DROP TABLE IF EXISTS items_fts")


def m008_feed_baseline(db: Database) -> None:
    """The first-run baseline is per feed (issue 12): feed_state.baseline_at, taken over from the global
    meta.baseline_at by every feed already polled (bot.store.feed_state.copy_global_baseline)."""
    db.execute("ALTER TABLE feed_state ADD COLUMN baseline_at TEXT")
    copy_global_baseline(Conn(db.conn, pyformat=False))


def m009_item_changes(db: Database) -> None:
    """Each item row carries the change marker of its last insert or update (`changed`; existing rows get
    the current one), so the search index re-reads only the rows changed since it was built
    (bot.store.archive.changed_items). The insert and update triggers bump the marker, then stamp the row
    (recursive triggers are off: the stamp fires no trigger)."""
    for event in ("insert", "update"):
        db.execute(f"DROP TRIGGER items_generation_{event}")
    db.execute("ALTER TABLE items ADD COLUMN changed INTEGER NOT NULL DEFAULT 0")
    db.execute("UPDATE items SET changed = (SELECT n FROM search_generation)")
    db.execute("CREATE INDEX items_changed ON items (changed)")
    for event in ("INSERT", "UPDATE"):
        db.execute(
            f"CREATE TRIGGER items_generation_{event.lower()} AFTER {event} ON items BEGIN "
            "UPDATE search_generation SET n = n + 1; "
            "UPDATE items SET changed = (SELECT n FROM search_generation) WHERE pk = NEW.pk; END"
        )


def m010_bursts(db: Database) -> None:
    """Bursts (issue 13): the batches table (a burst's top-level message, in the ledger like an item's), and
    deliveries.poll / deliveries.batch_id (bot.store.ledger.BATCHES_DDL)."""
    for sql in BATCHES_DDL:
        db.execute(sql)


def m011_digests(db: Database) -> None:
    """Digest subscriptions (issue 13): a subscription's digest schedule (bot.digest), the items waiting for
    a channel's next digest (queued at ingest), and the digest ledger, a row per (channel, period)."""
    for sql in DIGEST_SCHEMA:
        db.execute(sql.replace("{id}", "INTEGER PRIMARY KEY").replace("{ref}", "INTEGER"))


def m012_follows_saved(db: Database) -> None:
    """Personal follows and reading lists (issue 13): bot.store.follows.FOLLOWS_DDL."""
    for sql in FOLLOWS_DDL:
        db.execute(sql)


def m013_answered_events(db: Database) -> None:
    """Questions asked in Slack (issue 13): one row per message answered, claimed before the answer
    (bot.store.conversations), with the question as understood for the thread's follow-ups."""
    for sql in ANSWERED_EVENTS:
        db.execute(sql)


def m014_item_vectors(db: Database) -> None:
    """Each item's vector for search by meaning, per embedding model (bot.store.vectors)."""
    db.execute(VECTORS_TABLE.format(blob="BLOB"))


def m017_agent(db: Database) -> None:
    """The agent messaging experience (issue 20): greetings, what people look at, the items each answer
    showed, feedback on answers (bot.store.agent.AGENT_SCHEMA)."""
    for sql in AGENT_SCHEMA:
        db.execute(sql)


def m019_workers(db: Database) -> None:
    """Worker heartbeats, channel claims, shared workspace holds (bot.store.workers; issue 22). A SQLite
    deployment runs no worker, but holds the same schema."""
    for sql in WORKERS_DDL:
        db.execute(sql.format(float="REAL"))


def m020_item_pages(db: Database) -> None:
    """Code, paper and venue beside every item (issue 55): items.venue, paper_url, code_url; item_pages (each
    item page's reads); follow-ups in the delivery ledger (deliveries.thread_ts, unique per target):
    bot.store.pages.PAGES_DDL."""
    for sql in PAGES_DDL:
        db.execute(sql)


def m021_related_opens(db: Database) -> None:
    """What the team is reading (issue 55): a counter per (workspace, day, item) of opens through Related,
    each vote's items one a line (filled in for the votes already cast), and indexes that count a
    workspace's opens, saves and votes in a window (bot.store.trending)."""
    for sql in TRENDING_DDL:
        db.execute(sql)
    backfill_vote_items(Conn(db.conn, pyformat=False))


def m022_trending_marks(db: Database) -> None:
    """A mark per workspace, moved by triggers whenever a save, a vote or a Related counter of it changes:
    what tells a process that its kept trending counts still hold (bot.store.trending)."""
    for sql in sqlite_marks_ddl():
        db.execute(sql)


# --- the store -----------------------------------------------------------------------------------------


@cache
def migration_set() -> Migrations:
    """The schema's sqlite-utils migrations, in order (the names in bot.store.base.MIGRATIONS)."""
    from sqlite_utils.migrations import Migrations

    migrations = Migrations(MIGRATION_SET)
    steps = (m001_items, m002_delivery, m003_authors_fts, m004_fts_prefix_index, m005_installations,
             m006_search_generation, m007_one_search_engine, m008_feed_baseline, m009_item_changes,
             m010_bursts, m011_digests, m012_follows_saved, m013_answered_events, m014_item_vectors,
             m017_agent, m019_workers, m020_item_pages, m021_related_opens, m022_trending_marks)
    for step in steps:
        migrations()(step)
    return migrations


class SQLiteStore(Store):
    """The SQLite store; `path` is the database file."""

    backend = "sqlite"
    _errors = (sqlite3.DatabaseError,)

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = Path(path)
        self._keeper: sqlite3.Connection | None = None
        self._threads = threading.local()

    def describe(self) -> str:
        return f"database {self.path}"

    def exists(self) -> bool:
        return self.path.exists()

    def _open(self, readonly: bool) -> Conn:
        try:
            if readonly:
                uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False
                )
            else:
                if not self.path.absolute().parent.is_dir():  # never made here (see bot.store.open_store)
                    raise StoreError(f"cannot open database {self.path}: its folder does not exist")
                _create_private(self.path)
                conn = sqlite3.connect(
                    str(self.path), timeout=30, isolation_level=None, check_same_thread=False
                )
            conn.execute("PRAGMA busy_timeout = 30000")
            if not readonly:
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute("PRAGMA synchronous = NORMAL")
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        return Conn(conn, pyformat=False, readonly=readonly)

    def _begin(self, db: Conn) -> None:
        db.execute("BEGIN IMMEDIATE")

    def thread_view(self) -> Self:
        """A `session` of this store kept for the life of the calling thread (a request or lazy listener
        thread): one connection serves every unit of work the thread does, where each would open and close
        its own (two per search). The session ends, closing its connection, when the thread does (its
        thread-local context manager is collected then). A session's view is its own thread view."""
        if self._pin is not None:
            return self
        local = self._threads
        view: Self | None = getattr(local, "view", None)
        if view is None:
            session = self.session()
            view = local.view = session.__enter__()
            local.session = session  # kept with the view: collected (and so ended) with the thread
        return view

    def _has_tables(self, db: Conn, names: Sequence[str]) -> bool:
        marks = ", ".join("?" * len(names))
        sql = f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
        return bool(db.one(sql, list(names))[0] == len(names))

    def migrate(self, *, stop_before: str | None = None) -> list[str]:
        with self.connect() as conn:
            if stop_before is None and self._up_to_date(conn):
                self._keep_wal_open()
                return []
            from sqlite_utils import Database

            db = Database(conn.raw)
            if db.journal_mode != "wal":
                db.enable_wal()
            with self._flock(self.path.with_name(self.path.name + ".migrate.lock"), timeout=60):
                pending = [m.name for m in migration_set().pending(db)]
                if stop_before in pending:
                    pending = pending[: pending.index(stop_before)]
                migration_set().apply(db, stop_before=stop_before)
        self._keep_wal_open()
        return pending

    def applied_migrations(self) -> list[str]:
        if not self.exists():
            return []
        with self.connect(readonly=True) as conn:
            from sqlite_utils import Database

            return [m.name for m in migration_set().applied(Database(conn.raw))]

    def _up_to_date(self, conn: Conn) -> bool:
        """WAL on and every migration recorded: nothing for sqlite-utils to do (read without loading it)."""
        if conn.one("PRAGMA journal_mode")[0] != "wal" or not self._has_tables(conn, ["_sqlite_migrations"]):
            return False
        applied = conn.raw.execute(
            "SELECT name FROM _sqlite_migrations WHERE migration_set = ?", [MIGRATION_SET]
        ).fetchall()
        return set(MIGRATIONS) <= {row[0] for row in applied}

    def _keep_wal_open(self) -> None:
        """Hold one idle connection for the store's lifetime. Without it every unit of work closes the last
        connection, and SQLite checkpoints the WAL into the database (with an fsync) and deletes it at each
        close: ~0.6 ms per unit of work, most of a poll's store time. It holds no lock and is never used for
        work; checkpoints still happen as the WAL grows (wal_autocheckpoint)."""
        if self._keeper is not None:
            return
        try:
            keeper = sqlite3.connect(str(self.path), check_same_thread=False)
            keeper.execute("SELECT count(*) FROM sqlite_master").fetchone()  # attach to the WAL index
        except sqlite3.Error:
            return
        self._keeper = keeper

    def close(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()

    def database_identity(self) -> str:
        return f"sqlite:{self.path.resolve()}"

    @contextmanager
    def poll_lock(self, timeout: float = 0, *, name: str = "poll") -> Iterator[None]:
        with self._flock(self.path.with_name(f"{self.path.name}.{name}.lock"), timeout=timeout):
            yield

    @contextmanager
    def _flock(self, path: Path, timeout: float) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout("another mlresearch-bot process is polling this database") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def _create_private(path: Path) -> None:
    """Create the database file readable and writable by its owner only (0o600) if it does not exist yet;
    SQLite gives its -wal and -shm files the same mode. An existing file is left as it is."""
    if path.exists():
        return
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
