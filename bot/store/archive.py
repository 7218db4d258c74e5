"""The archive: items and their aliases, ingesting a feed's fetch (new items, edits, the feed's baseline
poll, writing the deliveries `bot.route` decided), merging the research index, and reading items back (a
part of `Store`). Search is not the archive's: the engine (bot.search.engine) is built from `each_item` and,
when `change_marker` moves, refreshed from `changed_items`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from bot.errors import RoutesStale
from bot.models import Ingested, Item, Routes, Validators
from bot.store.base import BULK_MERGE, StoreBase
from bot.store.conn import Conn
from bot.store.demo import META_DEMO, drop_demo
from bot.store.digests import queue_digest_items
from bot.store.feed_state import _meta, baselined, touch_feed
from bot.store.ledger import queue_routes
from bot.store.merge import Batch, Known, enrichment, marks
from bot.store.models import iso, row_item, utcnow
from bot.store.subscriptions import audience

ITEM_PAGE = 1000  # rows read at a time by each_item
ITEM_COLUMNS = (
    "items.pk, items.id, items.guid, items.title, items.link, items.summary, items.published, "
    "items.kind, items.authors, items.venue, items.paper_url, items.code_url"
)


class ArchiveMixin(StoreBase):
    """Items and aliases: ingest and preview, merging the research index, reading items back."""

    def preview(self, url: str, items: Sequence[Item]) -> tuple[list[Item], bool]:
        """What `ingest` would treat as new, and whether it would be the feed's baseline poll. Read-only: a
        missing database is not created, an existing one is not migrated or written."""
        if not self.exists():
            return list(items), True
        with self.connect(readonly=True) as db:
            if not self._has_tables(db, ["meta", "feed_state", "items", "aliases"]) or _meta(db, META_DEMO):
                return list(items), True  # nothing yet, or the demo (which a real poll replaces)
            baseline = not baselined(db, url)
            known = Known.load(db, items)
            return [item for item in items if known.id_of(item) is None], baseline

    def ingest(
        self, url: str, items: Sequence[Item], validators: Validators, at: datetime | None = None, *,
        routes: Routes,
    ) -> Ingested:
        """Store a successful fetch of the feed at `url` in one transaction: new items, edits, aliases, feed
        state, and the deliveries `routes` holds for the items that are new (`bot.route` decided them from
        a read made before; no model runs here). Each feed's first successful poll is its baseline: its
        items are recorded as seen and nothing is queued (so a feed added later, or a changed FEED_URL,
        never floods the channels); so is the poll that replaces the demo archive (`bot.store.demo`: its
        items go first, in this transaction). Raises RoutesStale, writing nothing, when `routes` no longer
        holds: an item is new that was not routed, or a subscription or follow changed since they were
        read."""
        now = iso(at or utcnow())
        with self._write() as db:
            baseline = drop_demo(db) or not baselined(db, url)
            new, updated = _merge(db, items, now)
            queued = 0
            if not baseline and new:
                unrouted = sum(item.id not in routes.items for item in new)
                if unrouted or audience(db).version() != routes.audience:
                    raise RoutesStale(
                        f"routing is out of date ({unrouted} new item{'' if unrouted == 1 else 's'}"
                        f" not routed"
                        f"{'' if unrouted else ', or subscriptions or follows changed'})"
                    )
                new_ids = {item.id for item in new}
                # Routed items found already archived here (another process took them first) are left out.
                mine = [r for r in routes.routes if r.item_id in new_ids]
                queued = queue_routes(db, mine, now)
                queue_digest_items(db, mine, now)
            touch_feed(db, url)
            db.execute(
                "UPDATE feed_state SET last_poll = ?, last_success = ?, error_streak = 0, etag = ?, "
                "last_modified = ?, baseline_at = coalesce(baseline_at, ?) WHERE url = ?",
                # An empty feed is no baseline: the first poll that sees items records them as seen.
                [now, now, validators.etag, validators.last_modified, (now or "") if items else None, url],
            )
        return Ingested(new=new, updated=updated, baseline=baseline, queued=queued)

    def queue_after_ingest(self, routes: Routes, at: datetime | None = None) -> int:
        """Queue routes decided after their items were ingested (`bot.route.by_authors`: authors the research
        index filled in) in one transaction, as ingest queues its own: RoutesStale, writing nothing, when a
        subscription or follow changed since `routes` were read. A route to where the item is queued (or was
        posted) already is no second one. Returns how many deliveries and digest items were queued."""
        now = iso(at or utcnow())
        with self._write() as db:
            if audience(db).version() != routes.audience:
                raise RoutesStale("routing is out of date (subscriptions or follows changed)")
            wanted = sorted({r.item_id for r in routes.routes})
            sql = f"SELECT id FROM items WHERE id IN ({marks(len(wanted))})"
            held = {r["id"] for r in db.rows(sql, wanted)} if wanted else set()
            mine = [r for r in routes.routes if r.item_id in held]
            return queue_routes(db, mine, now) + queue_digest_items(db, mine, now)

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
        `insert`, never queued for delivery, and this never counts as the baseline poll. Inserting replaces
        the demo archive (`bot.store.demo`: its items go first, in this transaction). Returns
        (added, enriched)."""
        now = iso(at or utcnow())
        added = enriched = 0
        with self._write() as db:
            if insert:
                drop_demo(db)
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
            if not self._has_tables(db, ["meta", "items", "aliases"]) or _meta(db, META_DEMO):
                return len(items), 0  # nothing yet, or the demo (which a backfill replaces)
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
        """Every item of the archive as a row (`row_item` makes it an Item), by id."""
        return list(self.each_item())

    def each_item(self, page: int = ITEM_PAGE) -> Iterator[dict[str, Any]]:
        """Every item of the archive as a row, by id, read `page` rows at a time (each page a unit of work of
        its own): what the search index is built from, without holding the whole archive in memory."""
        after = ""
        while True:
            with self.connect() as db:
                rows = db.rows(f"SELECT {ITEM_COLUMNS} FROM items WHERE id > ? ORDER BY id LIMIT ?",
                               [after, page])
            yield from rows
            if len(rows) < page:
                return
            after = rows[-1]["id"]

    def item_by_link(self, link: str) -> Item | None:
        """The item whose id or link is `link` (a canonical link, as items hold them)."""
        with self.connect() as db:
            rows = db.rows(f"SELECT {ITEM_COLUMNS} FROM items WHERE id = ? OR link = ? ORDER BY pk LIMIT 1",
                           [link, link])
        return row_item(rows[0]) if rows else None

    def change_marker(self) -> int:
        """A counter every insert, update or delete of items moves (triggers, whatever process writes): the
        search index is refreshed when it differs from the one it was built at."""
        with self.connect() as db:
            return int(db.one("SELECT n FROM search_generation")[0])

    def changed_items(self, since: int) -> tuple[list[dict[str, Any]], int]:
        """The rows (as `all_items`) inserted or updated after the change marker was `since` (each row is
        stamped with the marker its last write moved it to), and how many items the archive holds (deletes
        leave no row: a count below what the reader expects is one)."""
        with self.connect() as db:
            # In no order: sorting by id would make the planner walk the id index instead of items_changed.
            rows = db.rows(f"SELECT {ITEM_COLUMNS} FROM items WHERE changed > ?", [since])
            return rows, int(db.one("SELECT count(*) FROM items")[0])


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
