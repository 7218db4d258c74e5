"""The archive and the bot's state, in SQLite through sqlite-utils.

Tables: items (+ items_fts, FTS5 porter, kept current by triggers), aliases (guid -> item), feed_state,
meta, subscriptions, workspaces, deliveries (the ledger). Schema changes are sqlite-utils migrations.

Every public method opens its own connection (`Store.connect`) and closes it: one connection per unit of work,
so the store is safe to share between Bolt's listener threads and the poller. Writes that must happen together
run in one `BEGIN IMMEDIATE` transaction (`_write`).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.feed import Item, Validators, kind_of
from bot.match import matched_keywords

migrations = Migrations("mlresearch")


class StoreError(Exception):
    """The store could not be opened or written."""


class LockTimeout(StoreError):
    """Another process holds the poll lock."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else None


def from_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
class FeedState:
    url: str
    etag: str | None = None
    last_modified: str | None = None
    last_poll: datetime | None = None
    last_success: datetime | None = None
    error_streak: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None

    @property
    def validators(self) -> Validators:
        return Validators(self.etag, self.last_modified)

    @property
    def ok(self) -> bool:
        return self.last_success is not None and self.error_streak == 0


@dataclass(frozen=True)
class Ingested:
    """What one successful poll changed: the new items (oldest first), how many known items were edited,
    whether this was the baseline (first) poll, and how many deliveries were queued."""

    new: list[Item]
    updated: int
    baseline: bool
    queued: int


@dataclass(frozen=True)
class Subscription:
    team_id: str
    channel_id: str
    user_id: str | None
    created_at: datetime
    keywords: tuple[str, ...] = ()
    paused: bool = False
    paused_reason: str | None = None


@dataclass(frozen=True)
class Delivery:
    id: int
    item_id: str
    team_id: str
    channel_id: str
    state: str  # pending | posting | sent | failed
    matched: tuple[str, ...] = ()
    attempts: int = 0
    ts: str | None = None
    error: str | None = None
    claimed_at: datetime | None = None


@dataclass(frozen=True)
class SearchHit:
    item: Item
    score: float


@dataclass(frozen=True)
class SearchFilters:
    since: date | None = None
    kind: str | None = None
    authors: tuple[str, ...] = field(default=())


# --- migrations ----------------------------------------------------------------------------------------


@migrations()
def m001_items(db: Database) -> None:
    db["items"].create(
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
    db["items"].create_index(["id"], unique=True)
    db["items"].create_index(["published"])
    db["items"].enable_fts(["title", "summary"], tokenize="porter unicode61", create_triggers=True)
    db["aliases"].create({"guid": str, "item_id": str}, pk="guid")
    db["feed_state"].create(
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
    db["meta"].create({"key": str, "value": str}, pk="key")


@migrations()
def m002_delivery(db: Database) -> None:
    db["subscriptions"].create(
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
    db["workspaces"].create({"team_id": str, "disabled_reason": str, "disabled_at": str}, pk="team_id")
    db["deliveries"].create(
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
    db["deliveries"].create_index(["item_id", "team_id", "channel_id"], unique=True)
    db["deliveries"].create_index(["state"])


# --- the store -----------------------------------------------------------------------------------------


class Store:
    """The SQLite store. `path` is the database file; `Store.from_url("sqlite:///x.db")` builds one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @classmethod
    def from_url(cls, url: str) -> Store:
        from bot.config import sqlite_path

        return cls(sqlite_path(url))

    # connections ------------------------------------------------------------------------------------

    @contextmanager
    def connect(self) -> Iterator[Database]:
        """A fresh connection for one unit of work, closed afterwards."""
        try:
            if self.path.parent and not self.path.parent.exists():
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            yield Database(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"database {self.path}: {exc}") from exc
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[Database]:
        """One write transaction (BEGIN IMMEDIATE ... COMMIT), rolled back on any error."""
        with self.connect() as db:
            db.conn.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.conn.execute("ROLLBACK")
                raise
            db.conn.execute("COMMIT")

    def migrate(self) -> None:
        """Create or upgrade the schema (idempotent; safe to run at every start)."""
        with self.connect() as db:
            if db.journal_mode != "wal":
                db.enable_wal()
            with self._migration_lock():
                migrations.apply(db)

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        with self._flock(self.path.with_name(self.path.name + ".migrate.lock"), timeout=60):
            yield

    @contextmanager
    def poll_lock(self, timeout: float = 0) -> Iterator[None]:
        """Held by the one process that polls and delivers; released by the OS if that process dies."""
        with self._flock(self.path.with_name(self.path.name + ".poll.lock"), timeout=timeout):
            yield

    @contextmanager
    def _flock(self, path: Path, timeout: float) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
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

    # feed state -------------------------------------------------------------------------------------

    def feed_state(self, url: str) -> FeedState:
        with self.connect() as db:
            return _feed_state(db, url)

    def latest_feed_state(self) -> FeedState | None:
        """The most recently polled feed's state (for status and /healthz)."""
        with self.connect() as db:
            rows = list(db.query("SELECT url FROM feed_state ORDER BY last_poll DESC LIMIT 1"))
            return _feed_state(db, rows[0]["url"]) if rows else None

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

    def is_baselined(self) -> bool:
        with self.connect() as db:
            return _meta(db, "baseline_at") is not None

    # ingest -----------------------------------------------------------------------------------------

    def preview(self, items: Sequence[Item]) -> tuple[list[Item], bool]:
        """What `ingest` would treat as new (read-only), and whether it would be the baseline poll."""
        with self.connect() as db:
            baseline = _meta(db, "baseline_at") is None
            return [item for item in items if _known_id(db, item) is None], baseline

    def ingest(
        self, url: str, items: Sequence[Item], validators: Validators, at: datetime | None = None
    ) -> Ingested:
        """Store a successful fetch in one transaction: new items, edits, aliases, feed state, and a pending
        delivery for every (new item, matching subscription). The first successful poll of a store is the
        baseline: its items are recorded as seen and nothing is queued."""
        now = iso(at or utcnow())
        new: list[Item] = []
        updated = 0
        queued = 0
        with self._write() as db:
            baseline = _meta(db, "baseline_at") is None
            subs = [] if baseline else _active_subscriptions(db)
            for item in items:
                known = _known_id(db, item)
                if known is None:
                    _insert_item(db, item, now)
                    new.append(item)
                    if not baseline:
                        queued += _queue(db, item, subs, now)
                elif _update_item(db, known, item, now):
                    updated += 1
                if item.guid:
                    db.execute(
                        "INSERT OR IGNORE INTO aliases (guid, item_id) VALUES (?, ?)",
                        [item.guid, known or item.id],
                    )
            if baseline:
                _set_meta(db, "baseline_at", now or "")
            _touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, etag = ?, "
                "last_modified = ? WHERE url = ?",
                [now, now, validators.etag, validators.last_modified, url],
            )
        return Ingested(new=new, updated=updated, baseline=baseline, queued=queued)

    def add_items(self, items: Iterable[Item], at: datetime | None = None) -> tuple[int, int]:
        """Merge items into the archive without queueing deliveries (imports, tests). Returns (added, updated)."""
        now = iso(at or utcnow())
        added = updated = 0
        with self._write() as db:
            for item in items:
                known = _known_id(db, item)
                if known is None:
                    _insert_item(db, item, now)
                    added += 1
                elif _update_item(db, known, item, now):
                    updated += 1
                if item.guid:
                    db.execute(
                        "INSERT OR IGNORE INTO aliases (guid, item_id) VALUES (?, ?)", [item.guid, known or item.id]
                    )
        return added, updated

    # items ------------------------------------------------------------------------------------------

    def count_items(self) -> int:
        with self.connect() as db:
            return int(db.execute("SELECT count(*) FROM items").fetchone()[0])

    def get_item(self, item_id: str) -> Item | None:
        with self.connect() as db:
            rows = list(db.query("SELECT * FROM items WHERE id = ?", [item_id]))
            return _row_item(rows[0]) if rows else None

    def get_items(self, item_ids: Sequence[str]) -> dict[str, Item]:
        with self.connect() as db:
            marks = ",".join("?" for _ in item_ids)
            return {
                r["id"]: _row_item(r) for r in db.query(f"SELECT * FROM items WHERE id IN ({marks})", list(item_ids))
            }

    def latest(self, limit: int = 5, kind: str | None = None) -> list[Item]:
        with self.connect() as db:
            where, params = ("WHERE kind = ?", [kind]) if kind else ("", [])
            sql = f"SELECT * FROM items {where} ORDER BY published DESC, pk DESC LIMIT ?"
            return [_row_item(r) for r in db.query(sql, [*params, limit])]

    def search(self, terms: Sequence[str], *, prefix_last: bool, limit: int, filters: SearchFilters) -> list[SearchHit]:
        """Ranked full-text search: any term may match (OR), BM25 with the title weighted 5x over the summary,
        porter stemming, a prefix match on the last term when `prefix_last`, newest first among equal scores."""
        expression = fts5_expression(terms, prefix_last=prefix_last)
        if not expression:
            return []
        clauses = ["items_fts MATCH :q"]
        params: dict[str, Any] = {"q": expression, "limit": limit}
        if filters.since:
            clauses.append("items.published >= :since")
            params["since"] = filters.since.isoformat()
        if filters.kind:
            clauses.append("items.kind = :kind")
            params["kind"] = filters.kind
        sql = (
            "SELECT items.*, bm25(items_fts, 5.0, 1.0) AS rank FROM items_fts "
            "JOIN items ON items.pk = items_fts.rowid "
            f"WHERE {' AND '.join(clauses)} "
            "ORDER BY rank, items.published DESC, items.pk DESC LIMIT :limit"
        )
        with self.connect() as db:
            return [SearchHit(_row_item(r), round(-float(r["rank"]), 6)) for r in db.query(sql, params)]

    # subscriptions ----------------------------------------------------------------------------------

    def subscribe(
        self, team_id: str, channel_id: str, user_id: str | None, keywords: Sequence[str] = ()
    ) -> tuple[Subscription, bool]:
        """Subscribe a channel, or update its keywords (and resume it) if it is subscribed. Returns
        (subscription, created)."""
        now = iso(utcnow())
        with self._write() as db:
            existing = list(
                db.query("SELECT 1 FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id])
            )
            if existing:
                db.execute(
                    "UPDATE subscriptions SET keywords = ?, paused = 0, paused_reason = NULL "
                    "WHERE team_id = ? AND channel_id = ?",
                    [json.dumps(list(keywords)), team_id, channel_id],
                )
            else:
                db.execute(
                    "INSERT INTO subscriptions (team_id, channel_id, user_id, created_at, keywords, paused) "
                    "VALUES (?, ?, ?, ?, ?, 0)",
                    [team_id, channel_id, user_id, now, json.dumps(list(keywords))],
                )
            sub = _subscription(db, team_id, channel_id)
        assert sub is not None
        return sub, not existing

    def unsubscribe(self, team_id: str, channel_id: str) -> bool:
        """Remove a channel's subscription and its undelivered items. False if it was not subscribed."""
        with self._write() as db:
            cursor = db.execute(
                "DELETE FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id]
            )
            db.execute(
                "UPDATE deliveries SET state = 'failed', error = 'unsubscribed', updated_at = ? "
                "WHERE team_id = ? AND channel_id = ? AND state = 'pending'",
                [iso(utcnow()), team_id, channel_id],
            )
            return cursor.rowcount > 0

    def get_subscription(self, team_id: str, channel_id: str) -> Subscription | None:
        with self.connect() as db:
            return _subscription(db, team_id, channel_id)

    def subscriptions(self, team_id: str | None = None) -> list[Subscription]:
        with self.connect() as db:
            where, params = ("WHERE team_id = ?", [team_id]) if team_id else ("", [])
            return [
                _row_subscription(r)
                for r in db.query(f"SELECT * FROM subscriptions {where} ORDER BY created_at, channel_id", params)
            ]

    def count_subscriptions(self) -> int:
        with self.connect() as db:
            return int(db.execute("SELECT count(*) FROM subscriptions").fetchone()[0])

    def pause_subscription(self, team_id: str, channel_id: str, reason: str) -> None:
        """Pause a channel (it no longer receives items) and fail its undelivered items with the reason."""
        now = iso(utcnow())
        with self._write() as db:
            db.execute(
                "UPDATE subscriptions SET paused = 1, paused_reason = ? WHERE team_id = ? AND channel_id = ?",
                [reason, team_id, channel_id],
            )
            db.execute(
                "UPDATE deliveries SET state = 'failed', error = ?, updated_at = ? "
                "WHERE team_id = ? AND channel_id = ? AND state IN ('pending', 'posting')",
                [f"paused: {reason}", now, team_id, channel_id],
            )

    # workspaces -------------------------------------------------------------------------------------

    def disable_workspace(self, team_id: str, reason: str) -> None:
        """Stop delivering to a workspace whose token no longer works (invalid_auth, token_revoked...)."""
        now = iso(utcnow())
        with self._write() as db:
            db.execute(
                "INSERT INTO workspaces (team_id, disabled_reason, disabled_at) VALUES (?, ?, ?) "
                "ON CONFLICT(team_id) DO UPDATE SET disabled_reason = excluded.disabled_reason, "
                "disabled_at = excluded.disabled_at",
                [team_id, reason, now],
            )

    def enable_workspace(self, team_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])

    def workspace_disabled(self, team_id: str) -> str | None:
        with self.connect() as db:
            row = db.execute("SELECT disabled_reason FROM workspaces WHERE team_id = ?", [team_id]).fetchone()
            return row[0] if row else None

    def forget_workspace(self, team_id: str) -> None:
        """Uninstall: drop the workspace's subscriptions and undelivered items."""
        with self._write() as db:
            db.execute("DELETE FROM subscriptions WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM deliveries WHERE team_id = ? AND state IN ('pending', 'posting')", [team_id])
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])

    # the delivery ledger ----------------------------------------------------------------------------

    def open_deliveries(self) -> list[Delivery]:
        """Every delivery not yet sent or failed, oldest first."""
        with self.connect() as db:
            return [
                _row_delivery(r)
                for r in db.query("SELECT * FROM deliveries WHERE state IN ('pending', 'posting') ORDER BY id")
            ]

    def deliveries(self, *, item_id: str | None = None, channel_id: str | None = None) -> list[Delivery]:
        clauses, params = [], []
        if item_id:
            clauses.append("item_id = ?")
            params.append(item_id)
        if channel_id:
            clauses.append("channel_id = ?")
            params.append(channel_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.connect() as db:
            return [_row_delivery(r) for r in db.query(f"SELECT * FROM deliveries {where} ORDER BY id", params)]

    def claim(self, delivery_id: int, expected_state: str = "pending") -> bool:
        """Mark a delivery as being posted (its fate is unknown until mark_sent / mark_failed). Only one
        caller can claim a pending row."""
        now = iso(utcnow())
        with self._write() as db:
            cursor = db.execute(
                "UPDATE deliveries SET state = 'posting', attempts = attempts + 1, claimed_at = ?, updated_at = ? "
                "WHERE id = ? AND state = ?",
                [now, now, delivery_id, expected_state],
            )
            return cursor.rowcount == 1

    def mark_sent(self, delivery_id: int, ts: str | None) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET state = 'sent', ts = ?, error = NULL, updated_at = ? WHERE id = ?",
                [ts, iso(utcnow()), delivery_id],
            )

    def mark_failed(self, delivery_id: int, reason: str) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET state = 'failed', error = ?, updated_at = ? WHERE id = ?",
                [reason[:500], iso(utcnow()), delivery_id],
            )

    def release(self, delivery_id: int, reason: str) -> None:
        """Put a delivery back to pending (a transient failure: retried at the next poll)."""
        with self._write() as db:
            db.execute(
                "UPDATE deliveries SET state = 'pending', error = ?, updated_at = ? WHERE id = ?",
                [reason[:500], iso(utcnow()), delivery_id],
            )

    def delivery_counts(self) -> dict[str, int]:
        with self.connect() as db:
            return {r["state"]: r["n"] for r in db.query("SELECT state, count(*) AS n FROM deliveries GROUP BY state")}


# --- helpers (all take an open connection) -------------------------------------------------------------


def fts5_expression(terms: Sequence[str], *, prefix_last: bool) -> str:
    """An FTS5 MATCH expression that can never be a syntax error: every term a quoted string, OR-ed."""
    cleaned = [re.sub(r"[^\w]", "", t, flags=re.UNICODE) for t in terms]
    cleaned = [t for t in cleaned if t]
    if not cleaned:
        return ""
    parts = [f'"{t}"' for t in cleaned]
    if prefix_last:
        parts[-1] = parts[-1] + "*"
    return " OR ".join(parts)


def _meta(db: Database, key: str) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
    return row[0] if row else None


def _set_meta(db: Database, key: str, value: str) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [key, value],
    )


def _touch_feed(db: Database, url: str) -> None:
    db.execute("INSERT OR IGNORE INTO feed_state (url, error_streak) VALUES (?, 0)", [url])


def _feed_state(db: Database, url: str) -> FeedState:
    rows = list(db.query("SELECT * FROM feed_state WHERE url = ?", [url]))
    if not rows:
        return FeedState(url=url)
    r = rows[0]
    return FeedState(
        url=url,
        etag=r["etag"],
        last_modified=r["last_modified"],
        last_poll=from_iso(r["last_poll"]),
        last_success=from_iso(r["last_success"]),
        error_streak=r["error_streak"] or 0,
        last_error=r["last_error"],
        last_error_at=from_iso(r["last_error_at"]),
    )


def _known_id(db: Database, item: Item) -> str | None:
    row = db.execute("SELECT id FROM items WHERE id = ?", [item.id]).fetchone()
    if row:
        return str(row[0])
    if item.guid:
        row = db.execute("SELECT item_id FROM aliases WHERE guid = ?", [item.guid]).fetchone()
        if row:
            return str(row[0])
    return None


def _insert_item(db: Database, item: Item, now: str | None) -> None:
    db.execute(
        "INSERT INTO items (id, guid, title, link, summary, published, kind, authors, first_seen, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            item.id,
            item.guid,
            item.title,
            item.link,
            item.summary,
            iso(item.published),
            item.kind,
            json.dumps(list(item.authors)),
            now,
            now,
        ],
    )


def _update_item(db: Database, item_id: str, item: Item, now: str | None) -> bool:
    """Apply an edit to a known item (title, summary, date). True if anything changed."""
    cursor = db.execute(
        "UPDATE items SET title = ?, summary = ?, published = ?, updated_at = ? "
        "WHERE id = ? AND (title IS NOT ? OR summary IS NOT ? OR published IS NOT ?)",
        [item.title, item.summary, iso(item.published), now, item_id, item.title, item.summary, iso(item.published)],
    )
    return cursor.rowcount > 0


def _row_item(r: dict[str, Any]) -> Item:
    published = from_iso(r["published"])
    assert published is not None
    return Item(
        id=r["id"],
        guid=r["guid"],
        title=r["title"],
        link=r["link"],
        summary=r["summary"] or "",
        published=published,
        kind="update" if r["kind"] == "update" else kind_of(r["link"]),
        authors=tuple(json.loads(r["authors"] or "[]")),
    )


def _active_subscriptions(db: Database) -> list[Subscription]:
    return [
        _row_subscription(r)
        for r in db.query(
            "SELECT * FROM subscriptions WHERE paused = 0 AND team_id NOT IN (SELECT team_id FROM workspaces) "
            "ORDER BY created_at, channel_id"
        )
    ]


def _queue(db: Database, item: Item, subs: Sequence[Subscription], now: str | None) -> int:
    queued = 0
    for sub in subs:
        matched: list[str] = []
        if sub.keywords:
            matched = matched_keywords(item.title, item.summary, sub.keywords)
            if not matched:
                continue
        cursor = db.execute(
            "INSERT OR IGNORE INTO deliveries (item_id, team_id, channel_id, state, matched, attempts, created_at, "
            "updated_at) VALUES (?, ?, ?, 'pending', ?, 0, ?, ?)",
            [item.id, sub.team_id, sub.channel_id, json.dumps(matched), now, now],
        )
        queued += cursor.rowcount
    return queued


def _subscription(db: Database, team_id: str, channel_id: str) -> Subscription | None:
    rows = list(db.query("SELECT * FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id]))
    return _row_subscription(rows[0]) if rows else None


def _row_subscription(r: dict[str, Any]) -> Subscription:
    created = from_iso(r["created_at"])
    assert created is not None
    return Subscription(
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        user_id=r["user_id"],
        created_at=created,
        keywords=tuple(json.loads(r["keywords"] or "[]")),
        paused=bool(r["paused"]),
        paused_reason=r["paused_reason"],
    )


def _row_delivery(r: dict[str, Any]) -> Delivery:
    return Delivery(
        id=r["id"],
        item_id=r["item_id"],
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        state=r["state"],
        matched=tuple(json.loads(r["matched"] or "[]")),
        attempts=r["attempts"] or 0,
        ts=r["ts"],
        error=r["error"],
        claimed_at=from_iso(r["claimed_at"]),
    )
