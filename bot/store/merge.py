"""Merging a batch of items into the archive, the same on every backend.

`Known` reads what the archive holds about a batch in a few queries (its items by id, its guids' aliases),
then answers identity questions from memory and is kept current as the batch is merged; the writes go out
with `executemany`. So merging N items costs a handful of round trips, not several per item: what makes a
100,000-item import or backfill quick on PostgreSQL, where every statement crosses the network.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from bot.models import Item
from bot.store.conn import Conn
from bot.store.models import authors_text, iso

CHUNK = 500  # ids per IN (...) lookup
ITEM_INSERT = (
    "INSERT INTO items (id, guid, title, link, summary, published, kind, authors, first_seen, updated_at, "
    "authors_text, enriched_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
ITEM_EDIT = (
    "UPDATE items SET title = ?, summary = CASE WHEN enriched_at IS NULL THEN ? ELSE summary END, "
    "published = ?, updated_at = ? WHERE id = ?"
)
ALIAS_INSERT = "INSERT INTO aliases (guid, item_id) VALUES (?, ?) ON CONFLICT DO NOTHING"
STORED_COLUMNS = "id, title, summary, published, enriched_at, authors"


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))


class Known:
    """The stored state of a batch's items: `rows` (id -> the columns merging compares) and `aliases`
    (guid -> item id)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.aliases: dict[str, str] = {}

    @classmethod
    def load(cls, db: Conn, items: Sequence[Item], *, aliases: bool = True) -> Known:
        known = cls()
        guids = sorted({i.guid for i in items if i.guid}) if aliases else []
        for chunk in chunks(guids):
            for r in db.rows(f"SELECT guid, item_id FROM aliases WHERE guid IN ({marks(len(chunk))})", chunk):
                known.aliases[r["guid"]] = r["item_id"]
        ids = sorted({i.id for i in items} | set(known.aliases.values()))
        for chunk in chunks(ids):
            sql = f"SELECT {STORED_COLUMNS} FROM items WHERE id IN ({marks(len(chunk))})"
            for r in db.rows(sql, chunk):
                known.rows[r["id"]] = r
        return known

    def id_of(self, item: Item) -> str | None:
        """The stored item this one is (same canonical link, or its guid is a known alias), or None."""
        if item.id in self.rows:
            return item.id
        if item.guid and item.guid in self.aliases:
            return self.aliases[item.guid]
        return None


class Batch:
    """The writes of one merge, applied in order by `flush`: inserts, then edits, then aliases."""

    def __init__(self, known: Known) -> None:
        self.known = known
        self.inserts: list[list[Any]] = []
        self.edits: list[list[Any]] = []
        self.changes: list[tuple[str, list[Any]]] = []
        self.aliases: list[list[Any]] = []

    def insert(self, item: Item, now: str | None, *, enriched_at: str | None = None) -> None:
        authors = json.dumps(list(item.authors))
        published = iso(item.published)
        self.inserts.append(
            [
                item.id,
                item.guid,
                item.title,
                item.link,
                item.summary,
                published,
                item.kind,
                authors,
                now,
                now,
                authors_text(item.authors),
                enriched_at,
            ]
        )
        self.known.rows[item.id] = {
            "id": item.id,
            "title": item.title,
            "summary": item.summary,
            "published": published,
            "enriched_at": enriched_at,
            "authors": authors,
        }

    def edit(self, item_id: str, item: Item, now: str | None) -> bool:
        """Apply a feed edit to a known item (title, summary, date). True if anything changed. The summary of
        an item enriched from the research index (`enriched_at`) is the full abstract: the feed's cut one
        never replaces it."""
        stored = self.known.rows[item_id]
        published = iso(item.published)
        summary = item.summary if stored["enriched_at"] is None else stored["summary"]
        if (item.title, summary, published) == (stored["title"], stored["summary"], stored["published"]):
            return False
        self.edits.append([item.title, item.summary, published, now, item_id])
        stored.update(title=item.title, summary=summary, published=published)
        return True

    def enrich(self, item_id: str, item: Item, now: str | None) -> bool:
        """Apply what the research index adds (see `enrichment`); True if anything changed."""
        stored = self.known.rows[item_id]
        changes = enrichment(stored, item, now)
        if not changes:
            return False
        stored.update({k: v for k, v in changes.items() if k in stored})
        changes["updated_at"] = now
        assignments = ", ".join(f"{column} = ?" for column in changes)
        self.changes.append((f"UPDATE items SET {assignments} WHERE id = ?", [*changes.values(), item_id]))
        return True

    def alias(self, guid: str | None, item_id: str) -> None:
        if guid and guid not in self.known.aliases:
            self.known.aliases[guid] = item_id
            self.aliases.append([guid, item_id])

    def flush(self, db: Conn) -> None:
        db.executemany(ITEM_INSERT, self.inserts)
        db.executemany(ITEM_EDIT, self.edits)
        for sql, params in self.changes:
            db.execute(sql, params)
        db.executemany(ALIAS_INSERT, self.aliases)
        self.inserts, self.edits, self.changes, self.aliases = [], [], [], []


def enrichment(stored: dict[str, Any], item: Item, now: str | None) -> dict[str, Any]:
    """What the research index adds to a known item: its full abstract (when the stored one is empty, cut
    with "…", or shorter) and its authors. Empty when nothing would change."""
    summary, authors = stored["summary"] or "", stored["authors"] or "[]"
    changes: dict[str, Any] = {}
    cut = summary.rstrip().endswith(("…", "..."))
    if item.summary and item.summary != summary and (not summary or cut or len(item.summary) > len(summary)):
        changes["summary"] = item.summary
        changes["enriched_at"] = now
    if item.authors and json.dumps(list(item.authors)) != authors:
        changes["authors"] = json.dumps(list(item.authors))
        changes["authors_text"] = authors_text(item.authors)
    return changes


def backfill_authors_text(db: Conn) -> None:
    """Migration m003 on either backend: fill items.authors_text from the JSON authors list."""
    rows = db.rows("SELECT pk, authors FROM items WHERE authors IS NOT NULL AND authors != '[]'")
    updates: list[Iterable[Any]] = []
    for row in rows:
        try:
            names = json.loads(row["authors"] or "[]")
        except ValueError:
            names = []
        text = authors_text([str(n) for n in names]) if isinstance(names, list) else None
        updates.append([text, row["pk"]])
    db.executemany("UPDATE items SET authors_text = ? WHERE pk = ?", updates)
