"""The demo archive's place in the store (a part of `Store`): a database holds either the demo (the bundled
posts `bot.demo` loads, marked by `meta.demo_archive`) or a real archive, never both.

    load_demo(items)   -> ("loaded" | "already" | "refused", items in the archive)   (one transaction)
    demo_loaded_at()   -> when the demo was loaded, or None (a real archive, or an empty one)
    drop_demo(db)      -> inside a real write's transaction: the demo's items gone, True if there was one

The rule is kept where the writes are, in the same transaction: `ingest` (a poll) and `merge_index` (a
backfill) call `drop_demo` first, so the first real poll or backfill replaces the demo whatever process runs
it, and a demo is never loaded beside real items.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from bot.models import Item
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.feed_state import _meta, _set_meta
from bot.store.merge import Batch, Known
from bot.store.models import iso, utcnow

META_DEMO = "demo_archive"  # meta key: when the demo was loaded (ISO-8601); absent in a real archive


class DemoMixin(StoreBase):
    """Loading the demo archive, and whether the archive is one."""

    def load_demo(self, items: Sequence[Item], at: datetime | None = None) -> tuple[str, int]:
        """Put `items` in an archive that holds nothing, marked as the demo, in one transaction; never
        queued for delivery. "already": the demo is there (nothing changes); "refused": the archive holds
        real items (nothing changes). Returns that and how many items the archive holds."""
        now = iso(at or utcnow())
        with self._write() as db:
            held = int(db.one("SELECT count(*) FROM items")[0])
            if _meta(db, META_DEMO) is not None:
                return "already", held
            if held:
                return "refused", held
            batch = Batch(Known.load(db, items))
            for item in items:
                if batch.known.id_of(item) is None:
                    batch.insert(item, now)
            batch.flush(db)
            _set_meta(db, META_DEMO, now or "")
            return "loaded", int(db.one("SELECT count(*) FROM items")[0])

    def demo_loaded_at(self) -> str | None:
        """When the demo archive was loaded (ISO-8601), or None: the archive is real, or empty. A database
        that does not exist yet holds no demo (nothing is created)."""
        if not self.exists():
            return None
        with self.connect() as db:
            return _meta(db, META_DEMO)


def drop_demo(db: Conn) -> bool:
    """In a real write's transaction: the demo's items, their aliases and vectors deleted and the mark
    removed, when the archive is the demo (every item it holds is then the demo's). True if it was."""
    if _meta(db, META_DEMO) is None:
        return False
    db.execute("DELETE FROM item_vectors WHERE item_id IN (SELECT id FROM items)")
    db.execute("DELETE FROM aliases WHERE item_id IN (SELECT id FROM items)")
    db.execute("DELETE FROM items")
    db.execute("DELETE FROM meta WHERE key = ?", [META_DEMO])
    return True
