"""Items' vectors for search by meaning (a part of `Store`): one row per item and embedding model, the vector
as float32 bytes and a digest of the text it was computed from (an item whose title or abstract changed gets
a new one). The search layer computes them (bot.search.vectors); the store only keeps them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from bot.store.base import StoreBase

VECTORS_TABLE = (
    "CREATE TABLE item_vectors (item_id TEXT NOT NULL, model TEXT NOT NULL, digest TEXT NOT NULL, "
    "vector {blob} NOT NULL, PRIMARY KEY (model, item_id))"
)


class VectorsMixin(StoreBase):
    """Items' vectors, per model."""

    def item_vectors(self, model: str, ids: Sequence[str] | None = None) -> dict[str, tuple[str, bytes]]:
        """item id -> (digest, float32 bytes) of `model`'s vectors (all, or those of `ids`)."""
        with self.connect() as db:
            if ids is None:
                rows = db.execute("SELECT item_id, digest, vector FROM item_vectors WHERE model = ?", [model])
                return {r[0]: (r[1], bytes(r[2])) for r in rows.fetchall()}
            found: dict[str, tuple[str, bytes]] = {}
            chunk = list(ids)
            for start in range(0, len(chunk), 500):
                part = chunk[start : start + 500]
                marks = ", ".join("?" * len(part))
                rows = db.execute(f"SELECT item_id, digest, vector FROM item_vectors WHERE model = ? "
                                  f"AND item_id IN ({marks})", [model, *part])
                found.update({r[0]: (r[1], bytes(r[2])) for r in rows.fetchall()})
            return found

    def each_item_vector(self, model: str, ids: Sequence[str] | None = None,
                         chunk: int = 1000) -> Iterator[tuple[str, str, bytes]]:
        """(item id, digest, float32 bytes) of `model`'s vectors (all, by item id, or those of `ids`), read
        `chunk` at a time (a process loading 20,000 vectors never holds them twice)."""
        if ids is not None:
            wanted = list(ids)
            for start in range(0, len(wanted), 500):
                part = self.item_vectors(model, wanted[start : start + 500])
                yield from ((item_id, d, v) for item_id, (d, v) in part.items())
            return
        after = ""
        while True:  # a page per query: a driver may hold a query's whole answer until it is closed
            with self.connect() as db:
                rows = db.execute("SELECT item_id, digest, vector FROM item_vectors WHERE model = ? AND "
                                  "item_id > ? ORDER BY item_id LIMIT ?", [model, after, chunk]).fetchall()
            for row in rows:
                yield row[0], row[1], bytes(row[2])
            if len(rows) < chunk:
                return
            after = rows[-1][0]

    def put_item_vectors(self, model: str, vectors: Sequence[tuple[str, str, bytes]]) -> int:
        """Store (item id, digest, float32 bytes) rows of `model`, replacing older ones."""
        with self._write() as db:
            return db.executemany(
                "INSERT INTO item_vectors (item_id, model, digest, vector) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (model, item_id) DO UPDATE SET digest = excluded.digest, "
                "vector = excluded.vector",
                [(item_id, model, digest, vector) for item_id, digest, vector in vectors],
            )

    def drop_item_vectors(self, keep_model: str) -> int:
        """Forget the vectors of every model but `keep_model` (after the archive was embedded with it)."""
        with self._write() as db:
            return int(db.execute("DELETE FROM item_vectors WHERE model <> ?", [keep_model]).rowcount)
