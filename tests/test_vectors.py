"""bot.search.vectors: the archive's vectors held as int8 rows with a scale each, ranking as float32 would."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bot.search.embed import StaticModel
from bot.search.engine import build
from bot.search.index import SearchIndex
from bot.store import SQLiteStore
from tests.test_search_parity import filled


def test_the_int8_rows_give_the_cosine_of_the_stored_float32_vectors(tmp_path: Path) -> None:
    store = filled(SQLiteStore(tmp_path / "corpus.db"))
    model = StaticModel.bundled()
    vectors = SearchIndex(store, model=StaticModel.bundled).vectors(build(store))
    assert vectors is not None and vectors.matrix.dtype == np.int8
    stored = {item_id: np.frombuffer(blob, dtype=np.float32) for item_id, _, blob in
              store.each_item_vector(model.name)}
    exact = np.stack([stored[item_id] for item_id in vectors.ids])
    for text in ("on-device speech recognition", "diffusion models for images", "private federated learning"):
        query = model.embed([text])[0]
        near, cosine = vectors.similarities(query), exact @ query
        assert np.abs(near - cosine).max() < 0.004  # rows and query each held as int8
        fifth = np.sort(cosine)[-5]  # the five nearest are the exact ones, but for near-ties at the edge
        assert all(cosine[n] > fifth - 0.004 for n in np.argsort(-near)[:5])
    first = vectors.ids[0]
    again = vectors.vector(first)
    assert again is not None and np.abs(again - stored[first]).max() < 0.002
    assert vectors.nbytes < exact.nbytes / 3  # a quarter of float32's, and a scale per row


def test_a_zero_or_non_finite_vector_is_held_as_a_zero_row() -> None:
    from bot.search.vectors import _Matrix

    matrix = _Matrix(3, None)
    assert matrix.put(0, np.array([0.6, -0.8], dtype=np.float32))
    assert matrix.put(1, np.zeros(2, dtype=np.float32))
    assert matrix.put(2, np.array([np.nan, 1.0], dtype=np.float32).tobytes())
    assert not matrix.put(0, np.zeros(3, dtype=np.float32))  # another width: computed again
    rows, scales = matrix.done()
    assert rows.dtype == np.int8 and list(rows[0]) == [95, -127]
    assert list(rows[1]) == list(rows[2]) == [0, 0] and scales[1] == scales[2] == 0


def test_a_zero_or_non_finite_query_is_near_nothing() -> None:
    from bot.search.vectors import Vectors, _Matrix

    matrix = _Matrix(2, None)
    matrix.put(0, np.array([0.6, -0.8], dtype=np.float32))
    matrix.put(1, np.array([-0.8, 0.6], dtype=np.float32))
    rows, scales = matrix.done()
    vectors = Vectors("m", 1, ["a", "b"], {"a": 0, "b": 1}, {}, rows, scales, np.zeros(2), np.zeros(2))
    near = vectors.similarities(np.array([0.6, -0.8], dtype=np.float32))
    assert near.dtype == np.float32 and abs(near[0] - 1.0) < 0.004 and abs(near[1] + 0.96) < 0.004
    for query in (np.zeros(2, dtype=np.float32), np.array([np.inf, 0.0], dtype=np.float32),
                  np.array([np.nan, 1.0], dtype=np.float32), np.zeros(3, dtype=np.float32)):
        assert list(vectors.similarities(query)) == [0.0, 0.0]
