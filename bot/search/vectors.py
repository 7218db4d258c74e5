"""The archive's vectors in memory: one float32 matrix (a row per item, unit length), the index of search by
meaning. A matrix product ranks the whole archive (20,000 items x 256 dimensions is ~20 MB and ~2 ms); no
vector database. Imported lazily (numpy, the model) by bot.search.index.

    vectors = sync(store, model, rows, marker, previous=None)   # loads stored vectors, embeds the missing
    vectors.similarities(model.embed(["text"])[0])             # cosine similarity of every item

Each item's vector is computed once per model and text (`item_text`, its `digest` stored beside it): a
process finds the vectors another computed in the store (bot.store.vectors), and embeds only the items that
have none for its model, or whose title or abstract changed since.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bot.search.embed import Embedder
from bot.store import Store
from bot.store.models import from_iso

log = logging.getLogger("bot.search.vectors")

EMBED_BATCH = 256  # items embedded (and stored) at a time
Progress = Callable[[int, int], None]  # (done, total)


def item_text(row: dict[str, Any]) -> str:
    """What an item's vector is computed from: its title and abstract."""
    return f"{row['title']}. {' '.join((row['summary'] or '').split())}"


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Vectors:
    model: str
    marker: int
    ids: list[str]
    position: dict[str, int]
    digests: dict[str, str]
    matrix: np.ndarray  # (len(ids), dim) float32, unit rows
    published: np.ndarray  # (len(ids),) float64 seconds since the epoch (-inf: unknown)
    kinds: np.ndarray  # (len(ids),) the kind as index.py gives it ("research" | "update")

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.published.nbytes + self.kinds.nbytes)

    def similarities(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every item to a unit query vector, in `ids` order."""
        if self.matrix.shape[0] == 0 or query.shape[0] != self.matrix.shape[1]:
            return np.zeros(len(self.ids), dtype=np.float32)
        return self.matrix @ query.astype(np.float32)

    def vector(self, item_id: str) -> np.ndarray | None:
        n = self.position.get(item_id)
        return None if n is None else self.matrix[n]


def sync(store: Store, model: Embedder, rows: dict[str, dict[str, Any]], marker: int,
         kind: Callable[..., str], previous: Vectors | None = None, progress: Progress | None = None,
         recompute: bool = False) -> Vectors:
    """The vectors of every row in `rows` (the search index's rows at `marker`): the previous ones where the
    text is unchanged, else the store's, else computed now (and stored); all computed with `recompute`."""
    if previous is not None and previous.model != model.name:
        previous = None
    texts = {item_id: item_text(row) for item_id, row in rows.items()}
    wanted = {item_id: digest(text) for item_id, text in texts.items()}
    known = previous.digests if previous is not None else {}
    need = [item_id for item_id, d in wanted.items() if known.get(item_id) != d]
    if recompute:
        stored = {}
    elif previous is None:
        stored = store.item_vectors(model.name)
    else:
        stored = store.item_vectors(model.name, need) if need else {}
    fresh: dict[str, np.ndarray] = {}
    for item_id in need:
        found = stored.get(item_id)
        if found is not None and found[0] == wanted[item_id]:
            fresh[item_id] = np.frombuffer(found[1], dtype=np.float32)
    missing = [item_id for item_id in need if item_id not in fresh]
    for start in range(0, len(missing), EMBED_BATCH):
        batch = missing[start : start + EMBED_BATCH]
        matrix = model.embed([texts[item_id] for item_id in batch])
        store.put_item_vectors(model.name, [(item_id, wanted[item_id], matrix[n].astype(np.float32).tobytes())
                                            for n, item_id in enumerate(batch)])
        fresh.update({item_id: matrix[n] for n, item_id in enumerate(batch)})
        if progress is not None:
            progress(start + len(batch), len(missing))
    if missing:
        log.info("event=items_embedded model=%s count=%d", model.name, len(missing))
    return _assemble(model.name, marker, rows, wanted, fresh, previous, kind)


def _assemble(model: str, marker: int, rows: dict[str, dict[str, Any]], wanted: dict[str, str],
              fresh: dict[str, np.ndarray], previous: Vectors | None, kind: Callable[..., str]) -> Vectors:
    dims = {v.shape[0] for v in fresh.values()} | ({previous.matrix.shape[1]} if previous is not None and
                                                      previous.ids else set())
    dim = max(dims) if dims else 0
    if previous is not None and set(previous.ids) <= set(rows) and previous.matrix.shape[1] == dim:
        ids = previous.ids + [item_id for item_id in rows if item_id not in previous.position]
        matrix = np.zeros((len(ids), dim), dtype=np.float32)
        matrix[: len(previous.ids)] = previous.matrix
    else:
        ids = list(rows)
        matrix = np.zeros((len(ids), dim), dtype=np.float32)
        previous = None
    position = {item_id: n for n, item_id in enumerate(ids)}
    for item_id, vector in fresh.items():
        if vector.shape[0] == dim:
            matrix[position[item_id]] = vector
    if previous is None:  # every row came from `fresh`
        pass
    published = np.array([_epoch(rows[i]["published"]) for i in ids], dtype=np.float64)
    kinds = np.array([kind(rows[i]) for i in ids])
    return Vectors(model, marker, ids, position, dict(wanted), matrix, published, kinds)


def _epoch(text: str | None) -> float:
    when = from_iso(text) if text else None
    return when.timestamp() if when is not None else float("-inf")
