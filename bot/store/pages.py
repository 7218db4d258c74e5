"""Items' own pages (`bot.item_pages`): which to read next, what each said (an item's paper, code and venue),
and the follow-up replies a later finding queues in the delivery ledger (a part of `Store`).

    item_pages   a row per item whose page was tried: when it was last read (read_at), last tried, how many
                 times in a row it failed, and why
    deliveries   a follow-up is a ledger row like an item's post (target 'followup:code' or 'followup:venue',
                 thread_ts the thread of the item's post in that channel): claimed, posted, reconciled by its
                 metadata and settled exactly once by the same deliverer and workers; the unique index on
                 (item, team, channel, target) makes a second one of a kind impossible

The first page read of an item only records what it says (a post made before it simply lacked it); a later
read that finds a code link, or a venue, where none was stored queues one follow-up of that kind to every
channel where the item was posted (its post sent; a burst's item in the burst's thread). A value is never
replaced by nothing: a page that stops saying it changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from bot.models import FOLLOWUP_PREFIX, Item
from bot.store.archive import ITEM_COLUMNS
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.merge import chunks, marks
from bot.store.models import iso, row_item, utcnow

# m020_item_pages (both backends).
PAGES_DDL = (
    "ALTER TABLE items ADD COLUMN venue TEXT",
    "ALTER TABLE items ADD COLUMN paper_url TEXT",
    "ALTER TABLE items ADD COLUMN code_url TEXT",
    "CREATE TABLE item_pages (item_id TEXT PRIMARY KEY, read_at TEXT, tried_at TEXT, "
    "failures INTEGER NOT NULL DEFAULT 0, error TEXT)",
    "ALTER TABLE deliveries ADD COLUMN thread_ts TEXT",
    "DROP INDEX idx_deliveries_item_id_team_id_channel_id",
    "CREATE UNIQUE INDEX idx_deliveries_item_target ON deliveries (item_id, team_id, channel_id, target)",
)
RECHECK_AFTER = timedelta(days=7)  # a page read this long ago is read again ...
RECHECK_WITHIN = timedelta(days=180)  # ... while its item is younger than this
RETRY_AFTER = timedelta(hours=1)  # a page that failed is tried again after this long ...
MAX_FAILURES = 3  # ... until it has failed this many times in a row without ever being read
FIELDS = ("venue", "paper_url", "code_url")
JOINED = f"SELECT {ITEM_COLUMNS} FROM items LEFT JOIN item_pages p ON p.item_id = items.id"


class PagesMixin(StoreBase):
    """Items' pages: what to read next, what each said, the follow-ups a later finding queues."""

    def pages_due(self, item_ids: Sequence[str] = (), *, more: int | None, recheck: bool = True,
                  at: datetime | None = None) -> list[Item]:
        """The research items whose pages to read now, in order: those of `item_ids` never read (failed fewer
        than MAX_FAILURES times); then up to `more` others (None: no limit): with `recheck`, first items
        younger than RECHECK_WITHIN whose page was read more than RECHECK_AFTER ago (the longest ago first:
        how a later code release or venue is found, never starved by a backlog), then pages never read, newest
        first. A page that failed waits RETRY_AFTER, and one never read is left after MAX_FAILURES failures in
        a row."""
        now = at or utcnow()
        retry, stale, young = iso(now - RETRY_AFTER), iso(now - RECHECK_AFTER), iso(now - RECHECK_WITHIN)
        unread = "items.kind = 'research' AND p.read_at IS NULL AND coalesce(p.failures, 0) < ?"
        rested = "(p.tried_at IS NULL OR p.tried_at < ?)"
        due: dict[str, Item] = {}
        room = 2**62 if more is None else more
        with self.connect() as db:
            for chunk in chunks(list(dict.fromkeys(item_ids))):
                rows = db.rows(f"{JOINED} WHERE {unread} AND items.id IN ({marks(len(chunk))}) "
                               "ORDER BY items.published, items.pk", [MAX_FAILURES, *chunk])
                due.update((r["id"], row_item(r)) for r in rows)
            queries = [(f"{JOINED} WHERE {unread} AND {rested} ORDER BY items.published DESC, items.pk DESC "
                        "LIMIT ?", [MAX_FAILURES, retry])]
            if recheck:
                queries.insert(0, (f"{JOINED} WHERE items.kind = 'research' AND p.read_at < ? AND "
                                   f"items.published >= ? AND {rested} ORDER BY p.read_at, items.pk LIMIT ?",
                                   [stale, young, retry]))
            for sql, params in queries:
                if room <= 0:
                    break
                rows = db.rows(sql, [*params, room + len(due)])
                fresh = [row_item(r) for r in rows if r["id"] not in due][:room]
                due.update((i.id, i) for i in fresh)
                room -= len(fresh)
        return list(due.values())

    def record_page(self, item_id: str, *, venue: str | None, paper_url: str | None, code_url: str | None,
                    at: datetime | None = None) -> tuple[bool, list[str]]:
        """Store what an item's page said, in one transaction: each value it gave that differs from the
        stored one (a value is never replaced by None), the page as read now, and, when the page had been
        read before, a follow-up to every channel where the item was posted for a code link or a venue that
        was not stored. Returns whether the item changed and the follow-ups' kinds ("code", "venue")."""
        now = iso(at or utcnow()) or ""
        found = {"venue": venue, "paper_url": paper_url, "code_url": code_url}
        with self._write() as db:
            rows = db.rows(f"SELECT {', '.join(FIELDS)} FROM items WHERE id = ?", [item_id])
            if not rows:
                return False, []
            stored = rows[0]
            read_before = db.rows("SELECT read_at FROM item_pages WHERE item_id = ? AND read_at IS NOT NULL",
                                  [item_id])
            changes = {k: v for k, v in found.items() if v is not None and v != stored[k]}
            if changes:
                sets = ", ".join(f"{column} = ?" for column in changes)
                db.execute(f"UPDATE items SET {sets}, updated_at = ? WHERE id = ?",
                           [*changes.values(), now, item_id])
            db.execute(
                "INSERT INTO item_pages (item_id, read_at, tried_at, failures, error) "
                "VALUES (?, ?, ?, 0, NULL) ON CONFLICT (item_id) DO UPDATE SET read_at = excluded.read_at, "
                "tried_at = excluded.tried_at, failures = 0, error = NULL", [item_id, now, now],
            )
            kinds = [kind for kind, column in (("code", "code_url"), ("venue", "venue"))
                     if read_before and stored[column] is None and found[column] is not None]
            for kind in kinds:
                _queue_followups(db, item_id, kind, now)
        return bool(changes), kinds

    def page_failed(self, item_id: str, error: str, at: datetime | None = None) -> None:
        """Record that an item's page could not be read (when, and why): nothing about the item changes."""
        now = iso(at or utcnow())
        with self._write() as db:
            db.execute(
                "INSERT INTO item_pages (item_id, tried_at, failures, error) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (item_id) DO UPDATE SET tried_at = excluded.tried_at, "
                "failures = item_pages.failures + 1, error = excluded.error", [item_id, now, error[:500]],
            )

    def page_state(self, item_id: str) -> dict[str, object] | None:
        """What is recorded of an item's page: read_at, tried_at, failures, error; None when never tried."""
        with self.connect() as db:
            rows = db.rows("SELECT read_at, tried_at, failures, error FROM item_pages WHERE item_id = ?",
                           [item_id])
        return dict(rows[0]) if rows else None


def _queue_followups(db: Conn, item_id: str, kind: str, now: str) -> int:
    """A pending follow-up of `kind` in every channel where the item's post was sent, in the thread of that
    post (a burst's item: the burst's thread); none twice (the ledger's unique index)."""
    cursor = db.execute(
        "INSERT INTO deliveries (item_id, team_id, channel_id, target, state, matched, attempts, created_at, "
        "updated_at, thread_ts) SELECT d.item_id, d.team_id, d.channel_id, ?, 'pending', '[]', 0, ?, ?, "
        "coalesce(b.ts, d.ts) FROM deliveries d "
        "LEFT JOIN batches b ON b.id = d.batch_id AND b.state = 'sent' "
        "WHERE d.item_id = ? AND d.target = 'channel' AND d.state = 'sent' AND d.ts IS NOT NULL "
        "ORDER BY d.id ON CONFLICT DO NOTHING",
        [f"{FOLLOWUP_PREFIX}{kind}", now, now, item_id],
    )
    return int(getattr(cursor, "rowcount", 0) or 0)
