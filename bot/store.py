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
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from bot.feed import Item, Validators, kind_of
from bot.match import matched_keywords

migrations = Migrations("mlresearch")
# bm25 column weights of items_fts: title, summary, authors_text (m003_authors_fts).
BM25_WEIGHTS = "5.0, 1.0, 0.5"
# A typed prefix falls back to an indexed stem no shorter than this (see Store._indexed_stem).
MIN_STEM_CHARS = 4
# Prefix lengths indexed by items_fts (m004_fts_prefix_index).
FTS_PREFIXES = "3 4 5 6"
# From this many stored items on, search leaves near-zero-IDF phrases out of scoring (_ranked_search).
PRUNE_MIN_ROWS = 2_000


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


@migrations()
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


@migrations()
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
    for row in list(db.query("SELECT pk, authors FROM items WHERE authors IS NOT NULL AND authors != '[]'")):
        try:
            names = json.loads(row["authors"] or "[]")
        except ValueError:
            names = []
        text = authors_text([str(n) for n in names]) if isinstance(names, list) else None
        db.execute("UPDATE items SET authors_text = ? WHERE pk = ?", [text, row["pk"]])
    items.disable_fts()
    items.enable_fts(
        ["title", "summary", "authors_text"], tokenize="porter unicode61", create_triggers=True, replace=True
    )


@migrations()
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


@migrations()
def m005_installations(db: Database) -> None:
    """Multi-workspace installs (Bolt's OAuth flow): one row per installation, the whole
    slack_sdk Installation as JSON; OAuth state values with their expiry."""
    db["installations"].create(
        {"key": str, "team_id": str, "enterprise_id": str, "data": str, "installed_at": str, "updated_at": str},
        pk="key",
    )
    db["installations"].create_index(["team_id"])
    db["oauth_states"].create({"state": str, "expires_at": str}, pk="state")


# --- the store -----------------------------------------------------------------------------------------


class Store:
    """The SQLite store. `path` is the database file; `Store.from_url("sqlite:///x.db")` builds one."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._keeper: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: str) -> Store:
        from bot.config import sqlite_path

        return cls(sqlite_path(url))

    # connections ------------------------------------------------------------------------------------

    @contextmanager
    def connect(self, *, readonly: bool = False) -> Iterator[Database]:
        """A fresh connection for one unit of work, closed afterwards. `readonly` never creates or changes the
        database (a missing file is a StoreError)."""
        try:
            if readonly:
                uri = f"file:{quote(str(self.path.absolute()))}?mode=ro"
                conn = sqlite3.connect(
                    uri, uri=True, timeout=30, isolation_level=None, check_same_thread=False
                )
            else:
                if self.path.parent and not self.path.parent.exists():
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(
                    str(self.path), timeout=30, isolation_level=None, check_same_thread=False
                )
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            if not readonly:
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
        self._keep_wal_open()

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
        """Release the idle connection (the store stays usable: units of work open their own)."""
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.close()

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

    def feed_state(self, url: str, *, readonly: bool = False) -> FeedState:
        """The feed's stored state (an empty state for a feed never polled; with `readonly`, also for a
        database that does not exist or has no tables yet)."""
        if readonly and not self.path.exists():
            return FeedState(url=url)
        with self.connect(readonly=readonly) as db:
            if readonly and not db["feed_state"].exists():
                return FeedState(url=url)
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
        """What `ingest` would treat as new, and whether it would be the baseline poll. Read-only: a missing
        database is not created, an existing one is not migrated or written."""
        if not self.path.exists():
            return list(items), True
        with self.connect(readonly=True) as db:
            if not (db["meta"].exists() and db["items"].exists() and db["aliases"].exists()):
                return list(items), True
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
            if baseline and items:
                # An empty feed is no baseline: the first poll that sees items records them as seen.
                _set_meta(db, "baseline_at", now or "")
            _touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, etag = ?, "
                "last_modified = ? WHERE url = ?",
                [now, now, validators.etag, validators.last_modified, url],
            )
        return Ingested(new=new, updated=updated, baseline=baseline, queued=queued)

    def add_items(self, items: Iterable[Item], at: datetime | None = None) -> tuple[int, int]:
        """Merge items into the archive without queueing deliveries (imports, tests).
        Returns (added, updated)."""
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
                        "INSERT OR IGNORE INTO aliases (guid, item_id) VALUES (?, ?)",
                        [item.guid, known or item.id],
                    )
        return added, updated

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
            for done, item in enumerate(items, 1):
                known = _known_id(db, item)
                if known is None:
                    if insert:
                        _insert_item(db, item, now, enriched_at=now)
                        added += 1
                elif _enrich_item(db, known, item, now):
                    enriched += 1
                if progress is not None and done % 500 == 0:
                    progress(f"merged {done:,} of {len(items):,} posts …")
        return added, enriched

    def preview_index(self, items: Sequence[Item]) -> tuple[int, int]:
        """What `merge_index` would do, read-only (a missing database is not created): (added, enriched)."""
        if not self.path.exists():
            return len(items), 0
        added = enriched = 0
        with self.connect(readonly=True) as db:
            if not db["items"].exists():
                return len(items), 0
            for item in items:
                known = _known_id(db, item)
                if known is None:
                    added += 1
                elif _enrichment(db, known, item, None):
                    enriched += 1
        return added, enriched

    def get_meta(self, key: str) -> str | None:
        with self.connect() as db:
            return _meta(db, key)

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as db:
            _set_meta(db, key, value)

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
                r["id"]: _row_item(r)
                for r in db.query(f"SELECT * FROM items WHERE id IN ({marks})", list(item_ids))
            }

    def latest(self, limit: int = 5, kind: str | None = None) -> list[Item]:
        with self.connect() as db:
            where, params = ("WHERE kind = ?", [kind]) if kind else ("", [])
            sql = f"SELECT * FROM items {where} ORDER BY published DESC, pk DESC LIMIT ?"
            return [_row_item(r) for r in db.query(sql, [*params, limit])]

    def search(
        self, terms: Sequence[str], *, prefix_last: bool, limit: int, filters: SearchFilters
    ) -> list[SearchHit]:
        """Ranked full-text search: any term may match (OR), BM25 with the title weighted 5x over the
        summary, porter stemming, a prefix match on the last term when `prefix_last`, newest first among
        equal scores. Authors are searched too (weighted half the summary); `filters.authors` keeps only
        items by every named author, and with no terms lists that author's items newest first."""
        stem = self._indexed_stem(terms[-1]) if prefix_last and terms else None
        if not filters.authors:
            phrases = fts5_phrases(terms, prefix_last=prefix_last, last_stem=stem)
            if not phrases:
                return []
            with self.connect() as db:
                return _ranked_search(db, phrases, limit, filters)
        expression = fts5_expression(terms, prefix_last=prefix_last, last_stem=stem)
        ranked = bool(expression)
        if filters.authors:
            # author:"Name" filters (issue 6): every named author must match, in authors_text only.
            by_author = author_expression(filters.authors)
            if not by_author:
                return []
            expression = f"({expression}) AND {by_author}" if expression else by_author
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
            f"SELECT items.*, bm25(items_fts, {BM25_WEIGHTS}) AS rank FROM items_fts "
            "JOIN items ON items.pk = items_fts.rowid "
            f"WHERE {' AND '.join(clauses)} "
            f"ORDER BY {'rank, ' if ranked else ''}items.published DESC, items.pk DESC LIMIT :limit"
        )
        with self.connect() as db:
            return [SearchHit(_row_item(r), round(-float(r["rank"]), 6)) for r in db.query(sql, params)]

    def _indexed_stem(self, prefix: str) -> str | None:
        """For a prefix typed as the last word: the longest shorter start of it that is itself an indexed
        (Porter-stemmed) word. "normalizin" never prefixes the stem "normal" of "normalizing", so the
        prefix alone would miss it; "normal" (found here) does not."""
        word = re.sub(r"[^\w]", "", prefix, flags=re.UNICODE)
        if len(word) <= MIN_STEM_CHARS:
            return None
        with self.connect() as db:
            for end in range(len(word) - 1, MIN_STEM_CHARS - 1, -1):
                candidate = word[:end]
                found = db.execute(
                    "SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT 1", [f'"{candidate}"']
                ).fetchone()
                if found:
                    return candidate
        return None

    # subscriptions ----------------------------------------------------------------------------------

    def subscribe(
        self, team_id: str, channel_id: str, user_id: str | None, keywords: Sequence[str] = ()
    ) -> tuple[Subscription, bool]:
        """Subscribe a channel, or update its keywords (and resume it) if it is subscribed. Returns
        (subscription, created)."""
        now = iso(utcnow())
        with self._write() as db:
            existing = list(
                db.query(
                    "SELECT 1 FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id]
                )
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
                for r in db.query(
                    f"SELECT * FROM subscriptions {where} ORDER BY created_at, channel_id", params
                )
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
            db.execute(
                "DELETE FROM deliveries WHERE team_id = ? AND state IN ('pending', 'posting')", [team_id]
            )
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM installations WHERE team_id = ?", [team_id])

    # installations and OAuth state (multi-workspace mode) ------------------------------------------

    def save_installation(self, team_id: str | None, enterprise_id: str | None, data: dict[str, Any]) -> None:
        """Insert or replace the installation of a workspace (or org), as JSON."""
        now = iso(utcnow())
        with self._write() as db:
            db.execute(
                "INSERT INTO installations (key, team_id, enterprise_id, data, installed_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET data = excluded.data, "
                "updated_at = excluded.updated_at",
                [_installation_key(team_id, enterprise_id), team_id, enterprise_id, json.dumps(data), now, now],
            )

    def find_installation(self, team_id: str | None, enterprise_id: str | None) -> dict[str, Any] | None:
        with self.connect() as db:
            row = db.execute(
                "SELECT data FROM installations WHERE key = ?", [_installation_key(team_id, enterprise_id)]
            ).fetchone()
            return json.loads(row[0]) if row else None

    def delete_installation(self, team_id: str | None, enterprise_id: str | None) -> None:
        with self._write() as db:
            db.execute("DELETE FROM installations WHERE key = ?", [_installation_key(team_id, enterprise_id)])

    def installed_teams(self) -> list[str]:
        with self.connect() as db:
            return [r[0] for r in db.execute("SELECT team_id FROM installations WHERE team_id IS NOT NULL")]

    def issue_oauth_state(self, state: str, expires_at: datetime) -> None:
        with self._write() as db:
            db.execute("INSERT INTO oauth_states (state, expires_at) VALUES (?, ?)", [state, iso(expires_at)])

    def consume_oauth_state(self, state: str, now: datetime | None = None) -> bool:
        """True once for a state issued and not expired; the state is deleted either way."""
        with self._write() as db:
            row = db.execute("SELECT expires_at FROM oauth_states WHERE state = ?", [state]).fetchone()
            db.execute("DELETE FROM oauth_states WHERE state = ?", [state])
            expires = from_iso(row[0]) if row else None
            return expires is not None and expires > (now or utcnow())

    # the delivery ledger ----------------------------------------------------------------------------

    def open_deliveries(self) -> list[Delivery]:
        """Every delivery not yet sent or failed, oldest first."""
        with self.connect() as db:
            return [
                _row_delivery(r)
                for r in db.query(
                    "SELECT * FROM deliveries WHERE state IN ('pending', 'posting') ORDER BY id"
                )
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
            return [
                _row_delivery(r) for r in db.query(f"SELECT * FROM deliveries {where} ORDER BY id", params)
            ]

    def claim(self, delivery_id: int, expected_state: str = "pending") -> bool:
        """Mark a delivery as being posted (its fate is unknown until mark_sent / mark_failed). Only one
        caller can claim a pending row."""
        now = iso(utcnow())
        with self._write() as db:
            cursor = db.execute(
                "UPDATE deliveries SET state = 'posting', attempts = attempts + 1, claimed_at = ?, "
                "updated_at = ? WHERE id = ? AND state = ?",
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
            return {
                r["state"]: r["n"]
                for r in db.query("SELECT state, count(*) AS n FROM deliveries GROUP BY state")
            }


# --- helpers (all take an open connection) -------------------------------------------------------------


def fts5_phrases(terms: Sequence[str], *, prefix_last: bool, last_stem: str | None = None) -> list[str]:
    """The FTS5 phrases of a query, each a quoted string (never a syntax error). With `prefix_last` the last
    term is a prefix, and `last_stem` (an indexed stem it starts with) an alternative to it."""
    cleaned = [re.sub(r"[^\w]", "", t, flags=re.UNICODE) for t in terms]
    cleaned = [t for t in cleaned if t]
    if not cleaned:
        return []
    parts = [f'"{t}"' for t in cleaned]
    if prefix_last:
        parts[-1] = parts[-1] + "*"
        stem = re.sub(r"[^\w]", "", last_stem or "", flags=re.UNICODE)
        if stem and stem != cleaned[-1]:
            parts.append(f'"{stem}"')
    return parts


def fts5_expression(terms: Sequence[str], *, prefix_last: bool, last_stem: str | None = None) -> str:
    """An FTS5 MATCH expression that can never be a syntax error: the phrases of `fts5_phrases`, OR-ed."""
    return " OR ".join(fts5_phrases(terms, prefix_last=prefix_last, last_stem=last_stem))


def _fts_row_count(db: Database) -> int:
    """Rows in items_fts, read from FTS5's own totals record (no scan); count(*) if it cannot be read."""
    row = db.execute("SELECT block FROM items_fts_data WHERE id = 1").fetchone()
    if row and row[0]:
        value = 0
        for position, byte in enumerate(bytes(row[0])[:9]):  # an SQLite varint
            if position == 8:
                return (value << 8) | byte
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                return value
    return int(db.execute("SELECT count(*) FROM items").fetchone()[0])


def _ranked_search(
    db: Database, phrases: Sequence[str], limit: int, filters: SearchFilters
) -> list[SearchHit]:
    """BM25 over the phrases, fast on a large archive.

    FTS5's bm25 clamps the IDF of a phrase found in at least half the rows to 1e-6, so such a phrase adds
    at most ~2e-6 to any score: it cannot change the ranking of items that match a rarer phrase. On a large
    archive those near-zero phrases are left out of the scoring query (which then touches only the rows of
    the rarer phrases), and items matching only them fill any remaining places with score 0, newest first
    (their true scores are equal to within 1e-5). A small archive is scored exactly."""
    total = _fts_row_count(db)
    rare: list[str] = list(phrases)
    common: list[str] = []
    if total >= PRUNE_MIN_ROWS:
        half = (total + 1) // 2
        rare, common = [], []
        for phrase in phrases:
            hits = db.execute(
                "SELECT count(*) FROM (SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT ?)",
                [phrase, half],
            ).fetchone()[0]
            (common if 2 * hits >= total else rare).append(phrase)
    clauses: list[str] = []
    params: dict[str, Any] = {"limit": limit}
    if filters.since:
        clauses.append("items.published >= :since")
        params["since"] = filters.since.isoformat()
    if filters.kind:
        clauses.append("items.kind = :kind")
        params["kind"] = filters.kind
    where = "".join(f" AND {c}" for c in clauses)
    results: list[SearchHit] = []
    if rare:
        params["q"] = " OR ".join(rare)
        if clauses:
            sql = (
                f"SELECT items.*, bm25(items_fts, {BM25_WEIGHTS}) AS rank FROM items_fts "
                f"JOIN items ON items.pk = items_fts.rowid WHERE items_fts MATCH :q{where} "
                "ORDER BY rank, items.published DESC, items.pk DESC LIMIT :limit"
            )
        else:
            # Rank inside FTS5 alone (rowid and score), then read only the best rows; the pool leaves room
            # for ties on the score, which are ordered newest first.
            params["pool"] = limit * 4 + 20
            sql = (
                "SELECT items.*, ranked.rank FROM (SELECT rowid AS hit, "
                f"bm25(items_fts, {BM25_WEIGHTS}) AS rank "
                "FROM items_fts WHERE items_fts MATCH :q ORDER BY rank LIMIT :pool) AS ranked "
                "JOIN items ON items.pk = ranked.hit "
                "ORDER BY ranked.rank, items.published DESC, items.pk DESC LIMIT :limit"
            )
        results = [SearchHit(_row_item(r), round(-float(r["rank"]), 6)) for r in db.query(sql, params)]
    if common and len(results) < limit:
        seen = {hit.item.id for hit in results}
        params["c"] = " OR ".join(common)
        params["limit"] = limit - len(results) + len(seen)
        sql = (
            "SELECT items.* FROM items WHERE EXISTS (SELECT 1 FROM items_fts WHERE items_fts MATCH :c "
            f"AND items_fts.rowid = items.pk){where} "
            "ORDER BY items.published DESC, items.pk DESC LIMIT :limit"
        )
        for r in db.query(sql, params):
            if r["id"] not in seen and len(results) < limit:
                results.append(SearchHit(_row_item(r), 0.0))
    return results


def authors_text(authors: Sequence[str]) -> str | None:
    """The names as one space-joined text for the FTS index (None for no authors)."""
    text = " ".join(" ".join(a.split()) for a in authors if a and a.strip())
    return text or None


def author_expression(names: Sequence[str]) -> str:
    """An FTS5 expression matching items by every given author: each name a phrase in authors_text (words
    only, so never a syntax error). Empty when no name has a word in it."""
    phrases = []
    for name in names:
        words = re.findall(r"\w+", name, flags=re.UNICODE)
        if words:
            phrases.append('authors_text : "' + " ".join(words) + '"')
    return " AND ".join(phrases)


def _installation_key(team_id: str | None, enterprise_id: str | None) -> str:
    return f"{enterprise_id or '-'}:{team_id or '-'}"


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


def _insert_item(db: Database, item: Item, now: str | None, *, enriched_at: str | None = None) -> None:
    db.execute(
        "INSERT INTO items (id, guid, title, link, summary, published, kind, authors, first_seen, "
        "updated_at, authors_text, enriched_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            authors_text(item.authors),
            enriched_at,
        ],
    )


def _update_item(db: Database, item_id: str, item: Item, now: str | None) -> bool:
    """Apply an edit to a known item (title, summary, date). True if anything changed. The summary of an
    item enriched from the research index (`enriched_at`) is the full abstract: the feed's cut one never
    replaces it."""
    cursor = db.execute(
        "UPDATE items SET title = ?, summary = CASE WHEN enriched_at IS NULL THEN ? ELSE summary END, "
        "published = ?, updated_at = ? "
        "WHERE id = ? AND (title IS NOT ? OR (enriched_at IS NULL AND summary IS NOT ?) "
        "OR published IS NOT ?)",
        [
            item.title,
            item.summary,
            iso(item.published),
            now,
            item_id,
            item.title,
            item.summary,
            iso(item.published),
        ],
    )
    return cursor.rowcount > 0


def _enrichment(db: Database, item_id: str, item: Item, now: str | None) -> dict[str, Any]:
    """What the research index adds to a known item: its full abstract (when the stored one is empty, cut
    with "…", or shorter) and its authors. Empty when nothing would change."""
    row = db.execute("SELECT summary, authors FROM items WHERE id = ?", [item_id]).fetchone()
    if row is None:
        return {}
    summary, authors = row[0] or "", row[1] or "[]"
    changes: dict[str, Any] = {}
    cut = summary.rstrip().endswith(("…", "..."))
    if item.summary and item.summary != summary and (not summary or cut or len(item.summary) > len(summary)):
        changes["summary"] = item.summary
        changes["enriched_at"] = now
    if item.authors and json.dumps(list(item.authors)) != authors:
        changes["authors"] = json.dumps(list(item.authors))
        changes["authors_text"] = authors_text(item.authors)
    return changes


def _enrich_item(db: Database, item_id: str, item: Item, now: str | None) -> bool:
    """Apply `_enrichment`; True if anything changed."""
    changes = _enrichment(db, item_id, item, now)
    if not changes:
        return False
    changes["updated_at"] = now
    assignments = ", ".join(f"{column} = ?" for column in changes)
    db.execute(f"UPDATE items SET {assignments} WHERE id = ?", [*changes.values(), item_id])
    return True


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
            "SELECT * FROM subscriptions WHERE paused = 0 "
            "AND team_id NOT IN (SELECT team_id FROM workspaces) ORDER BY created_at, channel_id"
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
            "INSERT OR IGNORE INTO deliveries (item_id, team_id, channel_id, state, matched, attempts, "
            "created_at, updated_at) VALUES (?, ?, ?, 'pending', ?, 0, ?, ?)",
            [item.id, sub.team_id, sub.channel_id, json.dumps(matched), now, now],
        )
        queued += cursor.rowcount
    return queued


def _subscription(db: Database, team_id: str, channel_id: str) -> Subscription | None:
    rows = list(
        db.query("SELECT * FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id])
    )
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
