"""The store's one interface, and every rule that does not depend on the database behind it.

`Store` holds the archive (items, aliases, feed state, meta), subscriptions, workspaces and installations,
and the delivery ledger, in SQL both backends speak (`?` placeholders, `ON CONFLICT`, `IS DISTINCT FROM`).
A backend (`SQLiteStore`, `PostgresStore`) supplies connections and transactions, migrations and the poll
lock; the hooks it must fill are the methods that raise NotImplementedError. Search is not the store's: the
engine (bot.search.index) is built from `all_items` and rebuilt when `change_marker` moves.

Every public method is one unit of work on its own connection (`connect`), so a store is safe to share
between Bolt's listener threads and the poller; writes that must happen together run in one transaction
(`_write`), and writers take turns (SQLite's BEGIN IMMEDIATE; a transaction-scoped advisory lock on
PostgreSQL), so the first-run, identity and exactly-once rules hold with any number of processes.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any, ClassVar

from bot.errors import StoreError
from bot.models import FeedState, Ingested, Item, Subscription, Validators
from bot.search.match import matched_keywords
from bot.store.accounts import AccountsMixin
from bot.store.conn import Conn
from bot.store.merge import Batch, Known, enrichment, marks
from bot.store.models import iso, row_feed_state, row_item, row_subscription, utcnow

# The schema's migrations, by name, in order: each backend applies exactly these (tests check it).
MIGRATIONS = (
    "m001_items",
    "m002_delivery",
    "m003_authors_fts",
    "m004_fts_prefix_index",
    "m005_installations",
    "m006_search_generation",
    "m007_one_search_engine",
    "m008_feed_baseline",
)
# A merge_index that adds or enriches this many items is followed by _after_bulk_merge.
BULK_MERGE = 200
ITEM_COLUMNS = (
    "items.pk, items.id, items.guid, items.title, items.link, items.summary, items.published, "
    "items.kind, items.authors"
)


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a database's messages may span several)."""
    return " ".join(str(exc).split())[:500]


class _Pin:
    """The one connection of a session, handed between threads by a lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.conn: Conn | None = None


class Store(AccountsMixin):
    """The store's interface (see the module docstring); build one with `bot.store.open_store(url)`."""

    backend: ClassVar[str] = ""
    _errors: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(self) -> None:
        self._pin: _Pin | None = None

    @classmethod
    def from_url(cls, url: str) -> Store:
        from bot.store import open_store

        return open_store(url)

    # what a backend supplies --------------------------------------------------------------------------

    def describe(self) -> str:
        """How error messages name the database."""
        raise NotImplementedError

    def exists(self) -> bool:
        """Whether the database exists and holds the schema (never creates anything)."""
        raise NotImplementedError

    def migrate(self, *, stop_before: str | None = None) -> list[str]:
        """Create or upgrade the schema (idempotent; safe to run at every start, from several processes).
        Returns the names of the migrations it applied (see MIGRATIONS). `stop_before` (a name in MIGRATIONS)
        leaves that migration and the ones after it pending: a database as an earlier release left it."""
        raise NotImplementedError

    def applied_migrations(self) -> list[str]:
        """The names of the migrations applied to the database, in order."""
        raise NotImplementedError

    def close(self) -> None:
        """Release idle connections (the store stays usable: units of work open their own)."""

    def poll_lock(self, timeout: float = 0) -> AbstractContextManager[None]:
        """Held by the one process that polls and delivers; released if that process dies. Raises
        LockTimeout when another holds it for longer than `timeout` seconds."""
        raise NotImplementedError

    def _open(self, readonly: bool) -> Conn:
        raise NotImplementedError

    def _release(self, db: Conn, reusable: bool) -> None:
        db.raw.close()

    def _usable(self, db: Conn) -> bool:
        """Whether an open connection kept for later (a session's) can still be used."""
        return True

    def _failure(self, db: Conn, exc: Exception) -> StoreError:
        """The StoreError for a database error in a unit of work on `db`, as one line (a backend also drops
        connections a lost server has ended)."""
        return StoreError(f"{self.describe()}: {one_line(exc)}")

    def _begin(self, db: Conn) -> None:
        """Start a write transaction, waiting for any other writer to finish."""
        raise NotImplementedError

    def _after_bulk_merge(self, db: Conn) -> None:
        """Called in the transaction of a merge that changed at least BULK_MERGE items (a backfill): bring
        the database's statistics back to shape (each backend knows how)."""

    def _has_tables(self, db: Conn, names: Sequence[str]) -> bool:
        raise NotImplementedError

    # connections ----------------------------------------------------------------------------------------

    @contextmanager
    def connect(self, *, readonly: bool = False) -> Iterator[Conn]:
        """A connection for one unit of work. `readonly` never creates or changes the database. Inside a
        `session` it is the session's one connection."""
        pin = self._pin
        if pin is not None:
            with pin.lock:  # the session's database exists, so a read-only unit of work may share it
                if pin.conn is not None and not self._usable(pin.conn):
                    self._release(pin.conn, False)  # ended by the server: the session goes on with a new one
                    pin.conn = None
                if pin.conn is None:
                    pin.conn = self._open(False)
                try:
                    yield pin.conn
                except self._errors as exc:
                    raise self._failure(pin.conn, exc) from exc
            return
        db = self._open(readonly)
        reusable = False
        try:
            yield db
            reusable = True
        except self._errors as exc:
            raise self._failure(db, exc) from exc
        finally:
            self._release(db, reusable)

    @contextmanager
    def _write(self) -> Iterator[Conn]:
        """One write transaction, rolled back on any error."""
        with self.connect() as db:
            self._begin(db)
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @contextmanager
    def session(self) -> Iterator[Store]:
        """A view of this store whose units of work share one connection until the block ends, handed
        between threads by a lock (a delivery run: opening a connection costs as much as ~100 ledger
        writes, and threads contending inside SQLite sleep in its busy handler). Other users of this
        store are unaffected."""
        view = copy.copy(self)
        view._pin = pin = _Pin()
        try:
            yield view
        finally:
            with pin.lock:
                if pin.conn is not None:
                    self._release(pin.conn, True)
                pin.conn = None

    def thread_view(self) -> Store:
        """The view of this store that the calling thread should use for its units of work (a listener
        thread answering requests): the store itself, unless the backend gains by keeping one connection per
        thread (SQLite)."""
        return self

    # feed state -----------------------------------------------------------------------------------------

    def feed_state(self, url: str, *, readonly: bool = False) -> FeedState:
        """The feed's stored state (an empty state for a feed never polled; with `readonly`, also for a
        database that does not exist or has no tables yet)."""
        if readonly and not self.exists():
            return FeedState(url=url)
        with self.connect(readonly=readonly) as db:
            if readonly and not self._has_tables(db, ["feed_state"]):
                return FeedState(url=url)
            return _feed_state(db, url)

    def latest_feed_state(self) -> FeedState | None:
        """The most recently polled feed's state (for status and /healthz)."""
        with self.connect() as db:
            row = db.one("SELECT url FROM feed_state ORDER BY last_poll DESC LIMIT 1")
            return _feed_state(db, row[0]) if row else None

    def record_not_modified(self, url: str, validators: Validators, at: datetime | None = None) -> None:
        now = iso(at or utcnow())
        with self._write() as db:
            _touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, "
                "etag = coalesce(?, etag), last_modified = coalesce(?, last_modified) WHERE url = ?",
                [now, now, validators.etag, validators.last_modified, url],
            )

    def record_failure(self, url: str, error: str, at: datetime | None = None) -> None:
        now = iso(at or utcnow())
        with self._write() as db:
            _touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, error_streak = coalesce(error_streak, 0) + 1, "
                "last_error = ?, last_error_at = ? WHERE url = ?",
                [now, error[:500], now, url],
            )

    def is_baselined(self, url: str | None = None) -> bool:
        """Whether the feed at `url` has had its baseline poll (without `url`: whether any feed has)."""
        with self.connect() as db:
            if url is not None:
                return _baselined(db, url)
            return bool(db.one("SELECT count(*) FROM feed_state WHERE baseline_at IS NOT NULL")[0])

    def get_meta(self, key: str) -> str | None:
        with self.connect() as db:
            return _meta(db, key)

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as db:
            _set_meta(db, key, value)

    # ingest ---------------------------------------------------------------------------------------------

    def preview(self, url: str, items: Sequence[Item]) -> tuple[list[Item], bool]:
        """What `ingest` would treat as new, and whether it would be the feed's baseline poll. Read-only: a
        missing database is not created, an existing one is not migrated or written."""
        if not self.exists():
            return list(items), True
        with self.connect(readonly=True) as db:
            if not self._has_tables(db, ["meta", "feed_state", "items", "aliases"]):
                return list(items), True
            baseline = not _baselined(db, url)
            known = Known.load(db, items)
            return [item for item in items if known.id_of(item) is None], baseline

    def ingest(
        self, url: str, items: Sequence[Item], validators: Validators, at: datetime | None = None
    ) -> Ingested:
        """Store a successful fetch of the feed at `url` in one transaction: new items, edits, aliases, feed
        state, and a pending delivery for every (new item, matching subscription). Each feed's first
        successful poll is its baseline: its items are recorded as seen and nothing is queued (so a feed
        added later, or a changed FEED_URL, never floods the channels)."""
        now = iso(at or utcnow())
        with self._write() as db:
            baseline = not _baselined(db, url)
            new, updated = _merge(db, items, now)
            queued = 0 if baseline else _queue(db, new, _active_subscriptions(db), now)
            _touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, etag = ?, "
                "last_modified = ?, baseline_at = coalesce(baseline_at, ?) WHERE url = ?",
                # An empty feed is no baseline: the first poll that sees items records them as seen.
                [now, now, validators.etag, validators.last_modified, (now or "") if items else None, url],
            )
        return Ingested(new=new, updated=updated, baseline=baseline, queued=queued)

    def add_items(self, items: Iterable[Item], at: datetime | None = None) -> tuple[int, int]:
        """Merge items into the archive without queueing deliveries (imports, tests).
        Returns (added, updated)."""
        with self._write() as db:
            new, updated = _merge(db, list(items), iso(at or utcnow()))
        return len(new), updated

    def merge_index(
        self,
        items: Sequence[Item],
        *,
        insert: bool = True,
        at: datetime | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> tuple[int, int]:
        """Merge posts from the research index (issue 6) in one transaction. A post the archive knows (same
        canonical link, or its slug is a feed guid) is enriched: the full abstract replaces a shorter or cut
        one, and its authors are filled in; title and date stay the feed's. An unknown post is added when
        `insert`, never queued for delivery, and this never counts as the baseline poll. Returns
        (added, enriched)."""
        now = iso(at or utcnow())
        added = enriched = 0
        with self._write() as db:
            batch = Batch(Known.load(db, items))
            for done, item in enumerate(items, 1):
                known = batch.known.id_of(item)
                if known is None:
                    if insert:
                        batch.insert(item, now, enriched_at=now)
                        added += 1
                elif batch.enrich(known, item, now):
                    enriched += 1
                if progress is not None and done % 500 == 0:
                    progress(f"merged {done:,} of {len(items):,} posts …")
            batch.flush(db)
            if added + enriched >= BULK_MERGE:
                self._after_bulk_merge(db)
        return added, enriched

    def preview_index(self, items: Sequence[Item]) -> tuple[int, int]:
        """What `merge_index` would do, read-only (a missing database is not created): (added, enriched)."""
        if not self.exists():
            return len(items), 0
        added = enriched = 0
        with self.connect(readonly=True) as db:
            if not self._has_tables(db, ["items", "aliases"]):
                return len(items), 0
            known = Known.load(db, items)
            for item in items:
                item_id = known.id_of(item)
                if item_id is None:
                    added += 1
                elif enrichment(known.rows[item_id], item, None):
                    enriched += 1
        return added, enriched

    # items ----------------------------------------------------------------------------------------------

    def count_items(self) -> int:
        with self.connect() as db:
            return int(db.one("SELECT count(*) FROM items")[0])

    def get_item(self, item_id: str) -> Item | None:
        return self.get_items([item_id]).get(item_id)

    def get_items(self, item_ids: Sequence[str]) -> dict[str, Item]:
        if not item_ids:
            return {}
        with self.connect() as db:
            sql = f"SELECT {ITEM_COLUMNS} FROM items WHERE id IN ({marks(len(item_ids))})"
            return {r["id"]: row_item(r) for r in db.rows(sql, list(item_ids))}

    def latest(self, limit: int = 5, kind: str | None = None) -> list[Item]:
        where, params = ("WHERE kind = ?", [kind]) if kind else ("", [])
        sql = f"SELECT {ITEM_COLUMNS} FROM items {where} ORDER BY published DESC, pk DESC LIMIT ?"
        with self.connect() as db:
            return [row_item(r) for r in db.rows(sql, [*params, limit])]

    def all_items(self) -> list[dict[str, Any]]:
        """Every item of the archive as a row (`row_item` makes it an Item), by id: what the search index is
        built from (it converts only the rows a search returns)."""
        with self.connect() as db:
            return db.rows(f"SELECT {ITEM_COLUMNS} FROM items ORDER BY items.id")

    def change_marker(self) -> int:
        """A counter every insert, update or delete of items moves (triggers, whatever process writes): the
        search index is rebuilt when it differs from the one it was built at."""
        with self.connect() as db:
            return int(db.one("SELECT n FROM search_generation")[0])


# --- helpers (all take an open connection) -------------------------------------------------------------


def _merge(db: Conn, items: Sequence[Item], now: str | None) -> tuple[list[Item], int]:
    """Merge feed items: insert the unknown, apply edits to the known, remember every guid as an alias.
    Returns (new items in feed order, how many known items changed)."""
    batch = Batch(Known.load(db, items))
    new: list[Item] = []
    updated = 0
    for item in items:
        known = batch.known.id_of(item)
        if known is None:
            batch.insert(item, now)
            new.append(item)
        elif batch.edit(known, item, now):
            updated += 1
        batch.alias(item.guid, known or item.id)
    batch.flush(db)
    return new, updated


def _meta(db: Conn, key: str) -> str | None:
    row = db.one("SELECT value FROM meta WHERE key = ?", [key])
    return row[0] if row else None


def _set_meta(db: Conn, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def _baselined(db: Conn, url: str) -> bool:
    """Whether the feed at `url` has had its baseline poll. On a database from before m008 (a dry run reads
    it as it is), what m008 will make of it: baselined if the store was and the feed was polled."""
    cursor = db.execute("SELECT * FROM feed_state WHERE url = ?", [url])
    names = [d[0] for d in cursor.description]
    row = cursor.fetchone()
    if row is None:
        return False
    state = dict(zip(names, row, strict=True))
    if "baseline_at" in state:
        return state["baseline_at"] is not None
    return state["last_success"] is not None and _meta(db, "baseline_at") is not None


def copy_global_baseline(db: Conn) -> None:
    """m008 on both backends: the store-wide baseline (meta.baseline_at) becomes the baseline of every feed
    polled successfully, so an existing install neither re-baselines nor floods; a feed never polled gets its
    own baseline on its first poll. The global key goes."""
    db.execute(
        "UPDATE feed_state SET baseline_at = (SELECT value FROM meta WHERE key = 'baseline_at') "
        "WHERE last_success IS NOT NULL"
    )
    db.execute("DELETE FROM meta WHERE key = 'baseline_at'")


def _touch_feed(db: Conn, url: str) -> None:
    db.execute("INSERT INTO feed_state (url, error_streak) VALUES (?, 0) ON CONFLICT DO NOTHING", [url])


def _feed_state(db: Conn, url: str) -> FeedState:
    rows = db.rows("SELECT * FROM feed_state WHERE url = ?", [url])
    return row_feed_state(url, rows[0] if rows else None)


def _active_subscriptions(db: Conn) -> list[Subscription]:
    return [
        row_subscription(r)
        for r in db.rows(
            "SELECT * FROM subscriptions WHERE paused = 0 "
            "AND team_id NOT IN (SELECT team_id FROM workspaces) ORDER BY created_at, channel_id"
        )
    ]


def _queue(db: Conn, items: Sequence[Item], subs: Sequence[Subscription], now: str | None) -> int:
    """A pending delivery for every (new item, matching subscription); the ledger's unique (item, team,
    channel) index makes a second one impossible. Returns how many were queued."""
    rows: list[list[Any]] = []
    for item in items:
        for sub in subs:
            matched: list[str] = []
            if sub.keywords:
                matched = matched_keywords(item.title, item.summary, sub.keywords)
                if not matched:
                    continue
            rows.append([item.id, sub.team_id, sub.channel_id, json.dumps(matched), now, now])
    return db.executemany(
        "INSERT INTO deliveries (item_id, team_id, channel_id, state, matched, attempts, created_at, "
        "updated_at) VALUES (?, ?, ?, 'pending', ?, 0, ?, ?) ON CONFLICT DO NOTHING",
        rows,
    )
