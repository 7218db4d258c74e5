"""Feed state and meta: each feed's validators, errors and baseline poll, and the store's key/value meta
(a part of `Store`)."""

from __future__ import annotations

from datetime import datetime

from bot.models import FeedState, Validators
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import iso, row_feed_state, utcnow


class FeedStateMixin(StoreBase):
    """Each feed's state (validators, errors, baseline poll) and the store's meta."""

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
            touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, "
                "etag = coalesce(?, etag), last_modified = coalesce(?, last_modified) WHERE url = ?",
                [now, now, validators.etag, validators.last_modified, url],
            )

    def record_failure(self, url: str, error: str, at: datetime | None = None) -> None:
        now = iso(at or utcnow())
        with self._write() as db:
            touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, error_streak = coalesce(error_streak, 0) + 1, "
                "last_error = ?, last_error_at = ? WHERE url = ?",
                [now, error[:500], now, url],
            )

    def is_baselined(self, url: str | None = None) -> bool:
        """Whether the feed at `url` has had its baseline poll (without `url`: whether any feed has)."""
        with self.connect() as db:
            if url is not None:
                return baselined(db, url)
            return bool(db.one("SELECT count(*) FROM feed_state WHERE baseline_at IS NOT NULL")[0])

    def get_meta(self, key: str) -> str | None:
        with self.connect() as db:
            return _meta(db, key)

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as db:
            _set_meta(db, key, value)


def _meta(db: Conn, key: str) -> str | None:
    row = db.one("SELECT value FROM meta WHERE key = ?", [key])
    return row[0] if row else None


def _set_meta(db: Conn, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def baselined(db: Conn, url: str) -> bool:
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


def touch_feed(db: Conn, url: str) -> None:
    db.execute("INSERT INTO feed_state (url, error_streak) VALUES (?, 0) ON CONFLICT DO NOTHING", [url])


def _feed_state(db: Conn, url: str) -> FeedState:
    rows = db.rows("SELECT * FROM feed_state WHERE url = ?", [url])
    return row_feed_state(url, rows[0] if rows else None)
