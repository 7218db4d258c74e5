"""The store's connection/session layer: what every part of the store stands on.

`StoreBase` opens units of work (`connect`), write transactions (`_write`), sessions (`session`,
`thread_view`), and declares the hooks a backend (`SQLiteStore`, `PostgresStore`) fills: connections and
transactions, migrations and the poll lock (the methods that raise NotImplementedError). The parts of the
store (`archive`, `feed_state`, `subscriptions`, `ledger`, `installations`) build on it; `bot.store.store`
composes them into `Store`.

Every public method is one unit of work on its own connection (`connect`), so a store is safe to share
between Bolt's listener threads and the poller; writes that must happen together run in one transaction
(`_write`), and writers take turns (SQLite's BEGIN IMMEDIATE; a transaction-scoped advisory lock on
PostgreSQL), so the first-run, identity and exactly-once rules hold with any number of processes.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import ClassVar, Self

from bot.errors import StoreError
from bot.store.conn import Conn

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
    "m009_item_changes",
    "m010_bursts",
    "m011_digests",
    "m012_follows_saved",
    "m013_answered_events",
    "m014_item_vectors",
    "m017_agent",
    "m019_workers",
    "m020_item_pages",
    "m021_related_opens",
    "m022_trending_marks",
)
# A merge_index that adds or enriches this many items is followed by _after_bulk_merge.
BULK_MERGE = 200


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a database's messages may span several)."""
    return " ".join(str(exc).split())[:500]


class _Pin:
    """The one connection of a session, handed between threads by a lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.conn: Conn | None = None


class StoreBase:
    """The connection/session layer every part of the store uses (see the module docstring)."""

    backend: ClassVar[str] = ""
    _errors: ClassVar[tuple[type[Exception], ...]] = ()

    def __init__(self) -> None:
        self._pin: _Pin | None = None

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

    def poll_lock(self, timeout: float = 0, *, name: str = "poll") -> AbstractContextManager[None]:
        """Held by the one process that polls and delivers; released if that process dies. Raises
        LockTimeout when another holds it for longer than `timeout` seconds. Another `name` is another lock
        of the same kind (workers post digests under "digest")."""
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

    def _row_write(self) -> AbstractContextManager[Conn]:
        """A unit of work of ONE statement that changes rows on its own terms (claiming or settling a ledger
        row: `UPDATE ... WHERE id = ? AND state = ?`): SQLite runs it as any write; PostgreSQL as the
        statement alone (autocommit), without the writers' turn, since its row locks already make it
        atomic, so workers claiming and settling never queue behind one another or behind an ingest."""
        return self._write()

    @contextmanager
    def session(self) -> Iterator[Self]:
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

    def thread_view(self) -> Self:
        """The view of this store that the calling thread should use for its units of work (a listener
        thread answering requests): the store itself, unless the backend gains by keeping one connection per
        thread (SQLite)."""
        return self
