"""The SQLite backend: one file (plus its WAL), sqlite-utils migrations, FTS5 search, a flock poll lock.
A new database file (and its WAL and lock files) is created readable by its owner only (0o600).

items_fts is an FTS5 index over items (title, summary, authors_text; porter stemming; prefix indexes),
kept current by triggers. The embedded default: no server, one host.
"""

from __future__ import annotations

import fcntl
import heapq
import math
import os
import re
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from bot.store.base import ITEM_COLUMNS, MIGRATIONS, Conn, Store
from bot.store.merge import backfill_authors_text
from bot.store.models import LockTimeout, SearchFilters, SearchHit, SearchQuery, StoreError, row_item
from bot.store.scores import Held, PhraseScores, candidate_sums

if TYPE_CHECKING:  # sqlite-utils is imported when a migration has to run: `serve` starts without it
    from sqlite_utils import Database
    from sqlite_utils.migrations import Migrations

MIGRATION_SET = "mlresearch"
# bm25 column weights of items_fts: title, summary, authors_text (m003_authors_fts).
BM25_WEIGHTS = "5.0, 1.0, 0.5"
# Prefix lengths indexed by items_fts (m004_fts_prefix_index).
FTS_PREFIXES = "3 4 5 6"
# From this many stored items on, search leaves near-zero-IDF phrases out of scoring (_ranked_search).
PRUNE_MIN_ROWS = 2_000
# Phrases found in at most this share of the rows are scored first (_ranked_search).
RARE_FRACTION = 0.03
# A phrase found in at most this many rows has its scores held in memory between searches (_held_search):
# scoring them the first time takes ~3 µs a row (~0.2 s at 50,000), every later search only looks rows up.
# One in more than EAGER_ROWS rows is scored when it is searched a second time (a word searched once is
# searched as _ranked_search does, which scores fewer rows).
HELD_PHRASE_ROWS = 50_000
EAGER_ROWS = 2_000


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
    """A counter of changes to items, bumped by triggers whatever connection or process makes them: search
    keeps per-phrase scores in memory under it (bot.store.scores)."""
    db.execute("CREATE TABLE search_generation (n INTEGER NOT NULL)")
    db.execute("INSERT INTO search_generation (n) VALUES (0)")
    for event in ("INSERT", "UPDATE", "DELETE"):
        db.execute(
            f"CREATE TRIGGER items_generation_{event.lower()} AFTER {event} ON items "
            "BEGIN UPDATE search_generation SET n = n + 1; END"
        )


# --- the store -----------------------------------------------------------------------------------------


@cache
def migration_set() -> Migrations:
    """The schema's sqlite-utils migrations, in order (the names in bot.store.base.MIGRATIONS)."""
    from sqlite_utils.migrations import Migrations

    migrations = Migrations(MIGRATION_SET)
    steps = (m001_items, m002_delivery, m003_authors_fts, m004_fts_prefix_index, m005_installations,
             m006_search_generation)
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
        self._scores = PhraseScores()  # shared with every session of this store (copy.copy keeps it)

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
                if self.path.parent and not self.path.parent.exists():
                    self.path.parent.mkdir(parents=True, exist_ok=True)
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

    def _after_bulk_merge(self, db: Conn) -> None:
        # Merge FTS5's segments: thousands of inserts and updates leave many small ones, and search reads
        # them all (at 5,000 enriched items, p99 went from ~5 to ~11 ms; optimize takes ~0.1 s there).
        db.execute("INSERT INTO items_fts (items_fts) VALUES ('optimize')")

    def _has_tables(self, db: Conn, names: Sequence[str]) -> bool:
        marks = ", ".join("?" * len(names))
        sql = f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ({marks})"
        return bool(db.one(sql, list(names))[0] == len(names))

    def migrate(self) -> list[str]:
        with self.connect() as conn:
            if self._up_to_date(conn):
                self._keep_wal_open()
                return []
            from sqlite_utils import Database

            db = Database(conn.raw)
            if db.journal_mode != "wal":
                db.enable_wal()
            with self._flock(self.path.with_name(self.path.name + ".migrate.lock"), timeout=60):
                pending = [m.name for m in migration_set().pending(db)]
                migration_set().apply(db)
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

    @contextmanager
    def poll_lock(self, timeout: float = 0) -> Iterator[None]:
        with self._flock(self.path.with_name(self.path.name + ".poll.lock"), timeout=timeout):
            yield

    @contextmanager
    def _flock(self, path: Path, timeout: float) -> Iterator[None]:
        path.parent.mkdir(parents=True, exist_ok=True)
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

    # search ---------------------------------------------------------------------------------------------

    def _has_word(self, db: Conn, word: str) -> bool:
        return db.one("SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT 1", [f'"{word}"']) is not None

    def _held_stem(self, db: Conn, generation: int, prefix: str) -> str | None:
        """`_indexed_stem`, kept with the phrase scores until the archive changes (each answer costs a few
        index lookups)."""
        known = self._scores.fact(generation, ("stem", prefix))
        if known is not None:
            return str(known[0]) if known[0] is not None else None
        stem = self._indexed_stem(db, prefix)
        self._scores.keep_fact(generation, ("stem", prefix), stem)
        return stem

    def _search(self, db: Conn, query: SearchQuery) -> list[SearchHit]:
        # The generation is read first: every statement after it sees that state of the archive or a newer
        # one, so nothing older is ever kept under it (and a newer generation drops it all).
        generation = _generation(db)
        if query.prefix_last and query.terms:
            query = replace(query, stem=self._held_stem(db, generation, query.terms[-1]))
        filters, limit = query.filters, query.limit
        phrases = fts5_phrases(query.terms, prefix_last=query.prefix_last, last_stem=query.stem)
        if not filters.authors:
            if not phrases:
                return []
            if not (filters.since or filters.kind):
                hits = _held_search(db, self._scores, generation, phrases, limit)
                if hits is not None:
                    return hits
            return _ranked_search(db, phrases, limit, filters)
        # author:"Name" filters (issue 6): every named author must match, in authors_text only.
        by_author = author_expression(filters.authors)
        if not by_author:
            return []
        expression = f"({' OR '.join(phrases)}) AND {by_author}" if phrases else by_author
        clauses, params = _filters(filters)
        params.update(q=expression, limit=limit)
        sql = (
            f"SELECT {ITEM_COLUMNS}, bm25(items_fts, {BM25_WEIGHTS}) AS rank FROM items_fts "
            f"JOIN items ON items.pk = items_fts.rowid WHERE items_fts MATCH :q{clauses} "
            f"ORDER BY {'rank, ' if phrases else ''}items.published DESC, items.pk DESC LIMIT :limit"
        )
        return [SearchHit(row_item(r), round(-float(r["rank"]), 6)) for r in _rows(db, sql, params)]


def _create_private(path: Path) -> None:
    """Create the database file readable and writable by its owner only (0o600) if it does not exist yet;
    SQLite gives its -wal and -shm files the same mode. An existing file is left as it is."""
    if path.exists():
        return
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _rows(db: Conn, sql: str, params: dict[str, Any] | Sequence[Any]) -> list[dict[str, Any]]:
    cursor = db.raw.execute(sql, params)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _filters(filters: SearchFilters) -> tuple[str, dict[str, Any]]:
    clauses: list[str] = []
    params: dict[str, Any] = {}
    if filters.since:
        clauses.append("items.published >= :since")
        params["since"] = filters.since.isoformat()
    if filters.kind:
        clauses.append("items.kind = :kind")
        params["kind"] = filters.kind
    return "".join(f" AND {c}" for c in clauses), params


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


def author_expression(names: Sequence[str]) -> str:
    """An FTS5 expression matching items by every given author: each name a phrase in authors_text (words
    only, so never a syntax error). Empty when no name has a word in it."""
    phrases = []
    for name in names:
        words = re.findall(r"\w+", name, flags=re.UNICODE)
        if words:
            phrases.append('authors_text : "' + " ".join(words) + '"')
    return " AND ".join(phrases)


def _fts_row_count(db: Conn) -> int:
    """Rows in items_fts, read from FTS5's own totals record (no scan); count(*) if it cannot be read."""
    row = db.one("SELECT block FROM items_fts_data WHERE id = 1")
    if row and row[0]:
        value = 0
        for position, byte in enumerate(bytes(row[0])[:9]):  # an SQLite varint
            if position == 8:
                return (value << 8) | byte
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                return value
    return int(db.one("SELECT count(*) FROM items")[0])


def _ranked_search(db: Conn, phrases: Sequence[str], limit: int, filters: SearchFilters) -> list[SearchHit]:
    """BM25 over the phrases, exact, and fast on a large archive.

    FTS5's bm25 costs a few microseconds per matching row, so a query with a common word would score tens of
    thousands of rows. On a large archive it is pruned in two ways that keep the ranking exact:
    - a phrase found in at least half the rows has its IDF clamped to 1e-6 (it adds at most ~2e-6 to a
      score), so it is left out of scoring; items matching only such phrases fill the remaining places with
      score 0, newest first;
    - of the other phrases, only the rows of the rarest (the "rare" set) are scored, each with its full score
      (see `_scored_candidates`). One phrase adds at most IDF * (k1 + 1) to any score, so when the last of the
      best `limit` candidates scores above the sum of that bound over the phrases left out, no row matching
      only those can reach the results; otherwise the next rarest phrase joins the rare set and it is tried
      again (at worst every phrase is scored, which is the plain query). A small archive is scored plainly."""
    total = _fts_row_count(db)
    if total < PRUNE_MIN_ROWS:
        return _scored(db, list(phrases), limit, filters)
    hits = {phrase: _count_hits(db, phrase, (total + 1) // 2) for phrase in phrases}
    common = [p for p in phrases if 2 * hits[p] >= total]
    scored = sorted((p for p in phrases if 2 * hits[p] < total), key=lambda p: hits[p])
    results: list[SearchHit] = []
    rare = max(1, sum(1 for p in scored if hits[p] <= total * RARE_FRACTION))
    while rare <= len(scored):
        others = scored[rare:]
        if not others:
            results = _scored(db, scored, limit, filters)
            break
        results = _scored_candidates(db, scored[:rare], others, limit, filters)
        bound = sum(_max_contribution(hits[p], total) for p in others)
        if len(results) == limit and results[-1].score > bound:
            break
        rare += 1
    if common and len(results) < limit:
        results += _newest_matching(db, common, limit - len(results), {h.item.id for h in results}, filters)
    return results


def _generation(db: Conn) -> int:
    """The archive's change counter (m006_search_generation)."""
    return int(db.one("SELECT n FROM search_generation")[0])


def _held_search(
    db: Conn, held: PhraseScores, generation: int, phrases: Sequence[str], limit: int
) -> list[SearchHit] | None:
    """What `_ranked_search` answers without filters, from each phrase's scores held in memory (computed
    and kept on first use, see bot.store.scores): the scored phrases' terms are added up per row (only for
    rows that can make the results: `candidate_sums`), the best rows read, and ties ordered newest first.
    As there, on a large archive a phrase in half the rows or more only fills the places left (only its
    count is kept). None when a phrase to score has no scores held: it matches more than HELD_PHRASE_ROWS
    rows, or more than EAGER_ROWS and this is its first search. `generation` was read before any other
    statement of this unit of work."""
    kept = held.fact(generation, "rows")
    if kept is not None:
        total = int(kept[0])
    else:
        total = _fts_row_count(db)
        held.keep_fact(generation, "rows", total)

    def is_common(count: int) -> bool:
        return total >= PRUNE_MIN_ROWS and 2 * count >= total

    def worth_scoring(count: int) -> bool:
        return count <= HELD_PHRASE_ROWS and not is_common(count)

    found: dict[str, Held] = {}
    for phrase in dict.fromkeys(phrases):
        known = held.phrase(generation, phrase)
        if known is None:  # first search: counted, and scored now if that is cheap
            count = _count_hits(db, phrase, HELD_PHRASE_ROWS + 1)
            eager = count <= EAGER_ROWS and worth_scoring(count)
            known = Held.of(count, _phrase_scores(db, phrase) if eager else None)
            held.keep_phrase(generation, phrase, known)
        elif known.scores is None and worth_scoring(known.count):  # searched again: scored now
            known = Held.of(known.count, _phrase_scores(db, phrase))
            held.keep_phrase(generation, phrase, known)
        found[phrase] = known
    if any(p.scores is None and not is_common(p.count) for p in found.values()):
        return None
    common = [p for p in phrases if is_common(found[p].count)]
    scored = [found[p] for p in phrases if p not in common]
    results = _best(db, held, generation, candidate_sums(scored, limit), limit)
    if common and len(results) < limit:
        results += _newest_matching(db, common, limit - len(results), {h.item.id for h in results},
                                    SearchFilters())
    return results


def _phrase_scores(db: Conn, phrase: str) -> dict[int, float]:
    """rowid -> this phrase's term of the bm25 score, for every row matching it (bm25 is its negation)."""
    sql = f"SELECT rowid, bm25(items_fts, {BM25_WEIGHTS}) FROM items_fts WHERE items_fts MATCH ?"
    return {rowid: -rank for rowid, rank in db.raw.execute(sql, [phrase])}


def _best(
    db: Conn, held: PhraseScores, generation: int, scores: Mapping[int, float], limit: int
) -> list[SearchHit]:
    """The `limit` best-scoring rows, newest first among equal scores (rows tied with the last are read).
    Rows are read once per generation: the results of recurring searches recur."""
    if not scores:
        return []
    pks = list(scores)
    if len(pks) > limit:
        floor = heapq.nlargest(limit, scores.values())[-1]
        pks = [pk for pk, score in scores.items() if score >= floor]
    rows = held.rows(generation, pks)
    missing = [pk for pk in pks if pk not in rows]
    if missing:
        sql = f"SELECT {ITEM_COLUMNS} FROM items WHERE pk IN ({', '.join('?' * len(missing))})"
        read = {r["pk"]: (r["published"], row_item(r)) for r in _rows(db, sql, missing)}
        held.keep_rows(generation, read)
        rows.update(read)
    ranked = sorted(rows, key=lambda pk: (rows[pk][0], pk), reverse=True)  # newest first
    ranked.sort(key=scores.__getitem__, reverse=True)  # stable: ties stay newest first
    return [SearchHit(rows[pk][1], round(scores[pk], 6)) for pk in ranked[:limit]]


def _count_hits(db: Conn, phrase: str, cap: int) -> int:
    """Rows matching `phrase`, counted up to `cap` (reading rowids only: no scoring)."""
    sql = "SELECT count(*) FROM (SELECT 1 FROM items_fts WHERE items_fts MATCH ? LIMIT ?)"
    return int(db.one(sql, [phrase, cap])[0])


def _max_contribution(hits: int, total: int) -> float:
    """The most one phrase found in `hits` of `total` rows can add to an FTS5 bm25 score: its IDF (as FTS5
    computes it, floored at 1e-6) times k1 + 1 (k1 = 1.2), the limit of the term-frequency factor."""
    return max(math.log((total - hits + 0.5) / (hits + 0.5)), 1e-6) * 2.2


def _scored(db: Conn, phrases: Sequence[str], limit: int, filters: SearchFilters) -> list[SearchHit]:
    """The plain query: every row matching any phrase, scored by bm25, best first, newest first on ties."""
    where, params = _filters(filters)
    params.update(q=" OR ".join(phrases), limit=limit)
    if where:
        sql = (
            f"SELECT {ITEM_COLUMNS}, bm25(items_fts, {BM25_WEIGHTS}) AS rank FROM items_fts "
            f"JOIN items ON items.pk = items_fts.rowid WHERE items_fts MATCH :q{where} "
            "ORDER BY rank, items.published DESC, items.pk DESC LIMIT :limit"
        )
    else:
        # Rank inside FTS5 alone (rowid and score), then read only the best rows; the pool leaves room for
        # ties on the score, which are ordered newest first.
        params["pool"] = limit * 4 + 20
        sql = (
            f"SELECT {ITEM_COLUMNS}, ranked.rank FROM (SELECT rowid AS hit, "
            f"bm25(items_fts, {BM25_WEIGHTS}) AS rank "
            "FROM items_fts WHERE items_fts MATCH :q ORDER BY rank LIMIT :pool) AS ranked "
            "JOIN items ON items.pk = ranked.hit "
            "ORDER BY ranked.rank, items.published DESC, items.pk DESC LIMIT :limit"
        )
    return [SearchHit(row_item(r), round(-float(r["rank"]), 6)) for r in _rows(db, sql, params)]


def _scored_candidates(
    db: Conn, rare: Sequence[str], others: Sequence[str], limit: int, filters: SearchFilters
) -> list[SearchHit]:
    """The rows matching a rare phrase, each with its full score over rare + others, best first.

    bm25 scores every phrase of its expression: `R` scores the rows of R with s(R), and `(R) AND (O)` scores
    the rows of both with s(R) + s(O), their full score; the others' full score is s(R). Both touch only rows
    of R (the AND reaches the rows of O by seeking, not by reading them all)."""
    only = " OR ".join(rare)
    where, params = _filters(filters)
    params.update(only=only, both=f"({only}) AND ({' OR '.join(others)})", limit=limit)
    score = f"bm25(items_fts, {BM25_WEIGHTS})"
    # The joint scores are looked up per row of R (an automatic index on the CTE); coalesce computes s(R)
    # only for rows without one. (A LEFT JOIN of two materialized CTEs is planned as a nested scan.)
    sql = (
        f"WITH joint AS MATERIALIZED (SELECT rowid AS hit, {score} AS rank FROM items_fts "
        "WHERE items_fts MATCH :both), "
        "scores AS (SELECT items_fts.rowid AS hit, coalesce((SELECT joint.rank FROM joint "
        f"WHERE joint.hit = items_fts.rowid), {score}) AS rank FROM items_fts WHERE items_fts MATCH :only) "
    )
    if where:
        sql += (
            f"SELECT {ITEM_COLUMNS}, scores.rank FROM scores JOIN items ON items.pk = scores.hit "
            f"WHERE 1{where} ORDER BY scores.rank, items.published DESC, items.pk DESC LIMIT :limit"
        )
    else:  # as in _scored: the best rows first, then only those are read (with room for ties)
        params["pool"] = limit * 4 + 20
        sql += (
            f"SELECT {ITEM_COLUMNS}, ranked.rank FROM (SELECT * FROM scores ORDER BY rank LIMIT :pool) "
            "AS ranked JOIN items ON items.pk = ranked.hit "
            "ORDER BY ranked.rank, items.published DESC, items.pk DESC LIMIT :limit"
        )
    return [SearchHit(row_item(r), round(-float(r["rank"]), 6)) for r in _rows(db, sql, params)]


def _newest_matching(
    db: Conn, phrases: Sequence[str], count: int, seen: set[str], filters: SearchFilters
) -> list[SearchHit]:
    """Up to `count` items matching any of `phrases` and not in `seen`, newest first, with score 0."""
    where, params = _filters(filters)
    params.update(c=" OR ".join(phrases), limit=count + len(seen))
    sql = (
        f"SELECT {ITEM_COLUMNS} FROM items WHERE EXISTS (SELECT 1 FROM items_fts "
        f"WHERE items_fts MATCH :c AND items_fts.rowid = items.pk){where} "
        "ORDER BY items.published DESC, items.pk DESC LIMIT :limit"
    )
    rows = [r for r in _rows(db, sql, params) if r["id"] not in seen]
    return [SearchHit(row_item(r), 0.0) for r in rows[:count]]
