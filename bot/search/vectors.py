"""The archive's vectors in memory: one matrix (a row per item, unit length, held as int8 with a scale per
row), the index of search by meaning. One int8 product (SimSIMD's SIMD kernels) ranks the whole archive
(20,000 items x 256 dimensions is 5 MB, read in well under a millisecond); no vector database. Imported
lazily (numpy, SimSIMD, the model) by bot.search.meaning.

    vectors = sync(store, model, entries, marker, previous=None)   # loads stored vectors, embeds the missing
    vectors.similarities(model.embed(["text"])[0])             # cosine similarity of every item

Each item's vector is computed once per model and text (`index.item_text`, its `digest` stored beside it): a
process finds the vectors another computed in the store (bot.store.vectors), and embeds only the items that
have none for its model, or whose title or abstract changed since.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import numpy as np
import simsimd
from msgspec import Struct

from bot import memory
from bot.search.embed import Embedder
from bot.search.engine import Entry, digest, item_text
from bot.store import Store
from bot.store.models import from_iso

log = logging.getLogger("bot.search.vectors")

EMBED_BATCH = 256  # items embedded (and stored) at a time
Progress = Callable[[int, int], None]  # (done, total)


class Vectors(Struct, frozen=True):
    model: str
    marker: int
    ids: list[str]
    position: dict[str, int]
    digests: dict[str, str]
    matrix: np.ndarray  # (len(ids), dim) int8: each unit row quantized, row n scaled by scales[n]
    scales: np.ndarray  # (len(ids),) float32
    published: np.ndarray  # (len(ids),) float64 seconds since the epoch (-inf: unknown)
    kinds: np.ndarray  # (len(ids),) the kind as index.py gives it ("research" | "update")

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.scales.nbytes + self.published.nbytes + self.kinds.nbytes)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every item to a unit query vector, in `ids` order (to within 0.004: each
        row, and the query, is held as int8, its largest component as 127)."""
        if self.matrix.shape[0] == 0 or query.shape[0] != self.matrix.shape[1]:
            return np.zeros(len(self.ids), dtype=np.float32)
        largest = float(np.abs(query).max()) if query.size else 0.0
        if not (largest > 0 and np.isfinite(largest)):
            return np.zeros(len(self.ids), dtype=np.float32)
        scale = largest / 127
        quantized = np.round(query / scale).astype(np.int8)[None, :]
        # SimSIMD's int8 dot product (SIMD, one thread, the GIL let go): a third of the CPU of numpy's
        # einsum, which casts the rows to float32 a buffer at a time (bench_app's in-process search)
        dots = simsimd.cdist(quantized, self.matrix, metric="dot", threads=1, out_dtype="float32")
        return np.asarray(dots)[0] * (self.scales * np.float32(scale))

    def vector(self, item_id: str) -> np.ndarray | None:
        n = self.position.get(item_id)
        return None if n is None else self.matrix[n].astype(np.float32) * self.scales[n]


def sync(store: Store, model: Embedder, entries: Mapping[str, Entry], marker: int,
         previous: Vectors | None = None, progress: Progress | None = None, recompute: bool = False
         ) -> Vectors:
    """The vectors of every item of `entries` (the search index's at `marker`): the previous ones where the
    text is unchanged, else the store's, else computed now (the texts read from the store, and the vectors
    stored); all computed with `recompute`. The matrix is filled in place (stored vectors are read a chunk
    at a time): loading holds each vector once."""
    if previous is not None and (previous.model != model.name or recompute
                                 or not set(previous.ids) <= entries.keys()):
        previous = None
    wanted = {item_id: entry.digest for item_id, entry in entries.items()}
    ids = list(entries) if previous is None else \
        previous.ids + [item_id for item_id in entries if item_id not in previous.position]
    position = {item_id: n for n, item_id in enumerate(ids)}
    known = previous.digests if previous is not None else {}
    need = [item_id for item_id in ids if known.get(item_id) != wanted[item_id]]
    matrix = _Matrix(len(ids), previous)
    have: set[str] = set()
    if need and not recompute:
        needed = set(need)
        for item_id, found, blob in store.each_item_vector(model.name, None if previous is None else need):
            if item_id in needed and found == wanted[item_id] and matrix.put(position[item_id], blob):
                have.add(item_id)
    missing = [item_id for item_id in need if item_id not in have]
    for start in range(0, len(missing), EMBED_BATCH):
        read = store.get_items(missing[start : start + EMBED_BATCH])  # an item deleted since is left out
        batch = [(item_id, item_text(item.title, item.summary)) for item_id, item in read.items()]
        embedded = np.asarray(model.embed([text for _, text in batch]), dtype=np.float32)
        for item_id, text in batch:  # the digest of what was embedded (of a newer text than the snapshot's
            wanted[item_id] = digest(text)  # when the item changed since: the next refresh's, already done)
        store.put_item_vectors(model.name, [(item_id, wanted[item_id], embedded[n].tobytes())
                                            for n, (item_id, _) in enumerate(batch)])
        for n, (item_id, _) in enumerate(batch):
            matrix.put(position[item_id], embedded[n])
        if progress is not None:
            progress(min(start + EMBED_BATCH, len(missing)), len(missing))
    if missing:
        log.info("event=items_embedded model=%s count=%d", model.name, len(missing))
    published = np.array([_epoch(entries[i].published) for i in ids], dtype=np.float64)
    kinds = np.array([entries[i].kind for i in ids])
    if previous is None:
        memory.give_back()  # what reading the store's vectors left behind
    rows, scales = matrix.done()
    return Vectors(model.name, marker, ids, position, wanted, rows, scales, published, kinds)


class _Matrix:
    """The quantized rows of a matrix whose width is known at the first vector (or from the previous one):
    each float32 vector put is held as int8 (its largest component as 127) and a scale."""

    def __init__(self, size: int, previous: Vectors | None) -> None:
        self.size = size
        self.array: np.ndarray | None = None
        self.scales = np.zeros(size, dtype=np.float32)
        if previous is not None and previous.matrix.shape[1]:
            self.array = np.zeros((size, previous.matrix.shape[1]), dtype=np.int8)
            self.array[: previous.matrix.shape[0]] = previous.matrix
            self.scales[: previous.scales.shape[0]] = previous.scales

    def put(self, row: int, vector: bytes | np.ndarray) -> bool:
        values = np.frombuffer(vector, dtype=np.float32) if isinstance(vector, bytes) else vector
        if self.array is None:
            self.array = np.zeros((self.size, values.shape[0]), dtype=np.int8)
        if values.shape[0] != self.array.shape[1]:
            return False  # a vector of another width (stored under the same name): computed again
        largest = float(np.abs(values).max()) if values.size else 0.0
        scale = largest / 127 if largest > 0 and np.isfinite(largest) else 0.0
        if scale:
            self.array[row] = np.round(values / scale).astype(np.int8)
        self.scales[row] = scale
        return True

    def done(self) -> tuple[np.ndarray, np.ndarray]:
        rows = self.array if self.array is not None else np.zeros((self.size, 0), dtype=np.int8)
        return rows, self.scales


def _epoch(text: str | None) -> float:
    when = from_iso(text) if text else None
    return when.timestamp() if when is not None else float("-inf")
