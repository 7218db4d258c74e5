"""Hybrid ranking: the keyword score (BM25, from bot.search.engine) blended with the similarity of meaning
(bot.search.vectors), for SearchIndex.search when search by meaning is on. Imported with the embedding model
(numpy's boundary), never at start-up.

    rank(model, snapshot, vectors, query, expansions, keyword, limit, store) -> [SearchHit, ...]

The blend: KEYWORD_WEIGHT x the keyword score as a share of the best keyword hit's, plus the rest x the cosine
similarity of the query's and the item's vectors, scaled between the CANDIDATES-th nearest item's and the
nearest's (among the items the query's filters allow); the KEYWORD_CANDIDATES best by keywords and the
CANDIDATES nearest in meaning compete. A blend, not reciprocal rank fusion, because it keeps how far ahead a
hit is: an exact title or a rare word beats everything in BM25, and stays first, where ranks alone would not.
Tuned on tests/data/judged_queries.json (benchmarks/bench_quality.py). Equal scores are ordered newest
first, then by id, as keyword search orders them.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING

import numpy as np
import tantivy

from bot.models import SearchHit
from bot.search import glossary
from bot.search.engine import Snapshot, hits_of, keyword_scores, ranked_hits
from bot.search.keywords import combined, filter_clauses
from bot.search.query import Query
from bot.store import Store

if TYPE_CHECKING:
    from bot.search.embed import Embedder
    from bot.search.vectors import Vectors

KEYWORD_WEIGHT = 0.4
CANDIDATES = 50  # nearest by meaning considered
KEYWORD_CANDIDATES = 20  # best by keywords considered (20 ranks the judged set as 50 does, cheaper)
NO_WORDS_FLOOR = 0.3  # with no keyword hit, matches by meaning alone need this cosine similarity


def rank(model: Embedder, snapshot: Snapshot, vectors: Vectors, query: Query,
         expansions: list[glossary.Expansion], keyword: tantivy.Query, limit: int, store: Store
         ) -> list[SearchHit]:
    """The best `limit` hits for `query` (whose keyword part is `keyword`), by the blend above; by keywords
    alone when nothing is near enough in meaning."""
    words = [query.text or " ".join(query.terms)] + [" ".join(e.shown) for e in expansions]
    qvec = model.embed([" ".join(words)])[0]
    sims = vectors.similarities(qvec)
    allowed = _allowed(snapshot, vectors, query)
    if allowed is not None:
        sims = np.where(allowed, sims, -np.inf)
    keyword_hits = keyword_scores(snapshot, keyword, KEYWORD_CANDIDATES)
    nearest = np.argpartition(-sims, CANDIDATES)[:CANDIDATES] if len(sims) > CANDIDATES else \
        np.arange(len(sims))
    nearest = nearest[np.isfinite(sims[nearest])]
    # (similarity, id) of the nearest, best first, as Python values (numpy scalars are slow one by one)
    order = sorted(zip(sims[nearest].tolist(), (vectors.ids[n] for n in nearest.tolist()), strict=True),
                   key=lambda near: (-near[0], near[1]))
    if not keyword_hits:  # none of the words is in the archive: only a clear match by meaning counts
        order = [near for near in order if near[0] >= NO_WORDS_FLOOR]
    if not order:
        return ranked_hits(snapshot, keyword, limit, store)
    top, floor = order[0][0], order[-1][0]
    span = max(top - floor, 1e-6)
    best_keyword = keyword_hits[0][0] if keyword_hits else 0.0
    at = [vectors.position.get(item_id, -1) for _, item_id in keyword_hits]
    similar = sims[[n if n >= 0 else 0 for n in at]].tolist() if at else []
    scores: dict[str, float] = {}
    for (score, item_id), n, similarity in zip(keyword_hits, at, similar, strict=True):
        meaning = 0.0 if n < 0 else max(0.0, (similarity - floor) / span)
        share = score / best_keyword if best_keyword > 0 else 0.0
        scores[item_id] = KEYWORD_WEIGHT * share + (1 - KEYWORD_WEIGHT) * meaning
    for similarity, item_id in order:
        if item_id not in scores:
            scores[item_id] = (1 - KEYWORD_WEIGHT) * (similarity - floor) / span
    entries = snapshot.entries
    ranked = sorted(((round(score, 6), entries[i].published, i) for i, score in scores.items()
                     if i in entries), key=lambda h: h[2])
    ranked.sort(key=lambda h: h[:2], reverse=True)
    return hits_of(store, ranked[:limit])


def _allowed(snapshot: Snapshot, vectors: Vectors, query: Query) -> np.ndarray | None:
    """The items the query's filters allow, as a boolean array in `vectors.ids` order (None: all)."""
    filters = query.filters
    if not (filters.since or filters.until or filters.kind or filters.authors):
        return None
    mask = np.ones(len(vectors.ids), dtype=bool)
    if filters.since:
        mask &= vectors.published >= datetime.combine(filters.since, time(), tzinfo=UTC).timestamp()
    if filters.until:  # the last day included, as `filters`
        after = datetime.combine(filters.until + timedelta(days=1), time(), tzinfo=UTC)
        mask &= vectors.published < after.timestamp()
    if filters.kind:
        mask &= vectors.kinds == filters.kind
    if filters.authors:
        clauses = filter_clauses(Query((), False, replace(filters, since=None, until=None, kind=None)))
        searcher = snapshot.searcher
        found = searcher.search(combined(clauses), len(snapshot.entries) or 1, count=False).hits
        ids = {str(searcher.doc(address).get_first("id")) for _, address in found}
        mask &= np.array([item_id in ids for item_id in vectors.ids], dtype=bool)
    return mask
