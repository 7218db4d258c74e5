"""Hybrid ranking: who earns a place among the results, and in what order, when search by meaning is on.
Imported with the embedding model (numpy's boundary), never at start-up.

    rank(model, snapshot, vectors, query, expansions, words, keyword, limit, store) -> Ranked(hits, total)

Who earns a place:
- an item that matches the words (bot.search.keywords: every quoted phrase, and both of two loose words or
  two thirds of more, each word by its stems, its correction or a glossary form; or fewer of four or more
  that weigh enough, bot.search.rarity: the rarest word some item holds and others, together 40% of the
  query's words' weight, each weighed by how few items hold it), however far its meaning;
- unless the query quotes a phrase, or none of its words is in the archive, an item close in meaning alone
  (marked `by_meaning`): its cosine similarity to the query stands MEANING_Z standard deviations above the
  mean over the items the filters allow (WORDS_MATCHED_Z more when some items match the words; only SOME_Z
  when it holds some of the words), is at least MEANING_FLOOR, and at least NEAR_TOP (NEAR_TOP_ALONE when no
  item matches the words) of the nearest item's; of those, only the MOST_BY_MEANING best
  (MOST_BY_MEANING_MATCHED when some items match the words). With the bundled model and no cap, three in
  four shown that way were judged irrelevant on the tuning set (bench_quality): more is padding. When some
  items match the words, these similarities are to the query moved toward what the words found (the mean
  meaning of the FEEDBACK best keyword hits, at FEEDBACK_WEIGHT: Rocchio's pseudo-relevance feedback), so an
  item close in meaning alone must be near that too: the one post holding "MobileCLIP" was followed by one
  on device-directed speech (on the tuning set, shown precision 0.715 -> 0.741 and nDCG@10 0.785 -> 0.784;
  one more pass over the vectors, ~0.3 ms at 20,000 items). The keyword hits themselves are ordered by the
  query's own similarity. When the
  query names what no item holds (two of its words are in no item, or one of a query of at most ABSENT_OF
  words: "3d printing", "forecasting stock prices", "pid controller tuning"), the floor is MISSING_FLOOR:
  the archive is most likely not about it, and the nearest items are the best of a bad lot (of the tuning
  set's 32 queries about what no post covers, 29 got results before it, 6 with it; bench_quality). One
  word in three is a third of what the query names: with ABSENT_OF at 2, "pid controller tuning" showed a
  post on voice triggers (ABSENT_OF 2 -> 3, on the tuning set: nDCG@10 0.784 -> 0.788, shown precision
  0.741 -> 0.748; a question holding "eval", not yet in the glossary, lost a result by meaning; 4 cost
  questions 0.729 -> 0.687).
Nothing else: a reply may hold one result, or none, and `total` says how many earned a place.

The order: items that match the words first (TIER), each by KEYWORD_WEIGHT x its keyword score (BM25) as a
share of the best keyword hit's, plus the rest x how far its similarity stands out (z-score / Z_FULL,
clipped to [0, 1]): a measure of this query against this archive, not against the nearest item, so a rare
word's one item keeps its lead. Then items close in meaning alone, by the same measure plus SOME_WEIGHT x
their keyword score for any of the words (a share of the best such score), so of two items as close, the one
holding some of the words comes first. Equal scores are ordered as keyword search orders them
(`engine.listed`: newest first, then as `latest` lists a day's items).

The constants were tuned on tests/data/judged_queries.json only (155 queries; the 65 written on 2026-12-04
by people who saw no ranking are why the caps and SOME_* exist, the 32 about what no post covers why
MISSING_FLOOR does); tests/data/heldout_queries.json measures what users get (benchmarks/bench_quality.py
prints both).
"""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING

import numpy as np
import tantivy
from msgspec import Struct
from msgspec.structs import replace

from bot.models import SearchHit
from bot.search import glossary
from bot.search.embed import unit
from bot.search.engine import Snapshot, hits_of, ids_of, keyword_scores, listed
from bot.search.keywords import Words, combined, filter_clauses, without_query
from bot.search.query import Query
from bot.store import Store

if TYPE_CHECKING:
    from bot.search.embed import Embedder
    from bot.search.vectors import Vectors

KEYWORD_WEIGHT = 0.5
KEYWORD_CANDIDATES = 50  # best by keywords considered
CANDIDATES = 50  # nearest by meaning considered
MEANING_Z = 2.0  # a match by meaning alone stands this many standard deviations above the mean similarity
MEANING_FLOOR = 0.15  # ... and has at least this cosine similarity
MISSING_FLOOR = 0.45  # ... or this, when the query names what no item holds (_names_the_absent)
ABSENT_OF = 3  # ... as a query of this many words or fewer does when one of them is in no item
WORDS_MATCHED_Z = 0.5  # ... more when some items match the words
NEAR_TOP = 0.85  # ... and at least this share of the nearest item's
NEAR_TOP_ALONE = 0.7  # ... when no item matches the words
Z_FULL = 5.0  # a similarity this many standard deviations above the mean counts in full
TIER = 1.0  # added to a match of the words: they rank above matches by meaning alone
SOME_WEIGHT = 0.1  # a match by meaning alone that holds some of the words gains this x its share of them
SOME_Z = 1.0  # ... and needs to stand only this many standard deviations above the mean
MOST_BY_MEANING = 2  # matches by meaning alone kept at most (the closest)
MOST_BY_MEANING_MATCHED = 1  # ... when some items match the words
FEEDBACK = 3  # ... and it is as close to the query moved toward this many best keyword hits' meaning
FEEDBACK_WEIGHT = 0.3  # ... by this much (their mean vector's weight beside the query's unit vector)


class Ranked(Struct, frozen=True):
    hits: list[SearchHit]
    total: int  # how many items earned a place (the hits are the best of them)


def rank(model: Embedder, snapshot: Snapshot, vectors: Vectors, query: Query,
         expansions: list[glossary.Expansion], words: Words, keyword: tantivy.Query, limit: int, store: Store
         ) -> Ranked:
    """The best `limit` hits for `query` (whose keyword part, filters included, is `keyword`), by the blend
    above. A keyword hit without a row in `vectors` (not embedded yet) counts no meaning."""
    kept = glossary.spelled_out(words.words, expansions)  # an abbreviation means its long forms, below
    text = [" ".join(kept) if kept or words.words else query.text or " ".join(query.terms)]
    text += [" ".join(e.shown) for e in expansions]
    qvec = model.embed([" ".join(text)])[0]
    allowed = _allowed(snapshot, vectors, query)
    sims, mean, spread = _similarities(vectors, qvec, allowed)
    keyword_hits, matched = keyword_scores(snapshot, keyword, KEYWORD_CANDIDATES)
    best_keyword = keyword_hits[0][0] if keyword_hits else 0.0
    at = [vectors.position.get(item_id, -1) for _, item_id in keyword_hits]  # -1: no vector (yet)
    scores: dict[str, float] = {}
    for (score, item_id), n in zip(keyword_hits, at, strict=True):
        meaning = _standing(float(sims[n]), mean, spread) if 0 <= n < len(sims) else 0.0
        share = score / best_keyword if best_keyword > 0 else 0.0
        scores[item_id] = TIER + KEYWORD_WEIGHT * share + (1 - KEYWORD_WEIGHT) * meaning
    admits = bool(words.known) and not query.phrases  # else nothing is close in meaning to any of the words
    feedback = [v for _, item_id in keyword_hits[:FEEDBACK] if (v := vectors.vector(item_id)) is not None] \
        if admits else []
    if feedback:  # a match by meaning alone must be near what the words found, too
        sims, mean, spread = _similarities(vectors, _fed_back(qvec, feedback), allowed)
    nearest = np.argpartition(-sims, CANDIDATES)[:CANDIDATES] if len(sims) > CANDIDATES else \
        np.arange(len(sims))
    nearest = nearest[np.isfinite(sims[nearest])]
    by_meaning: set[str] = set()
    top = max(sims[nearest].tolist(), default=0.0)
    least = MEANING_Z + (WORDS_MATCHED_Z if keyword_hits else 0.0)
    near = NEAR_TOP if keyword_hits else NEAR_TOP_ALONE
    if not admits:  # no word is in the archive: nothing to be close in meaning to; a quoted phrase: only the
        nearest = nearest[:0]  # items holding it
    floor = MISSING_FLOOR if _names_the_absent(words) else MEANING_FLOOR
    some: dict[str, float] = {}
    if words.some is not None and len(nearest):
        filtered = combined([(tantivy.Occur.Must, words.some), *filter_clauses(query, snapshot)])
        partial, _ = keyword_scores(snapshot, filtered, KEYWORD_CANDIDATES)
        best_partial = partial[0][0] if partial else 0.0
        some = {item_id: score / best_partial for score, item_id in partial if best_partial > 0}
    for n, similarity in zip(nearest.tolist(), sims[nearest].tolist(), strict=True):
        item_id = vectors.ids[n]
        share = some.get(item_id, 0.0)
        if item_id in scores or similarity < max(floor, near * top) \
                or (similarity - mean) / spread < (min(least, SOME_Z) if share else least):
            continue
        scores[item_id] = (1 - KEYWORD_WEIGHT) * _standing(similarity, mean, spread) + SOME_WEIGHT * share
        by_meaning.add(item_id)
    entries = snapshot.entries
    closest = listed(snapshot, ((round(scores[i], 6), entries[i].published, i)
                                for i in by_meaning if i in entries))
    for _, _, item_id in closest[MOST_BY_MEANING_MATCHED if keyword_hits else MOST_BY_MEANING:]:
        del scores[item_id]
        by_meaning.discard(item_id)
    ranked = listed(snapshot, ((round(score, 6), entries[i].published, i) for i, score in scores.items()
                               if i in entries))
    hits = [replace(hit, by_meaning=True) if hit.item.id in by_meaning else hit
            for hit in hits_of(store, ranked[:limit])]
    return Ranked(hits, max(matched, len(keyword_hits)) + len(by_meaning))


def _similarities(vectors: Vectors, qvec: np.ndarray, allowed: np.ndarray | None
                  ) -> tuple[np.ndarray, float, float]:
    """Every item's similarity to `qvec` (-inf where the filters do not allow it), with the mean and standard
    deviation of those allowed."""
    sims = vectors.similarities(qvec)
    if allowed is not None:
        sims = np.where(allowed, sims, -np.inf)
    finite = sims[np.isfinite(sims)]
    mean = float(finite.mean()) if len(finite) else 0.0
    spread = max(float(finite.std()), 1e-6) if len(finite) > 1 else 1.0
    return sims, mean, spread


def _fed_back(qvec: np.ndarray, feedback: list[np.ndarray]) -> np.ndarray:
    """The query's unit vector moved FEEDBACK_WEIGHT toward the mean of the best keyword hits' (Rocchio's
    pseudo-relevance feedback), as a unit vector."""
    rows = unit(np.vstack([qvec, *feedback]))
    return unit((rows[0] + FEEDBACK_WEIGHT * rows[1:].mean(axis=0))[np.newaxis])[0]


def _names_the_absent(words: Words) -> bool:
    """Whether the query names something no item is about: two of its words are in no item, or one of a query
    of at most ABSENT_OF words ("3d printing", "pid controller tuning"). Then only an item this close in
    meaning (MISSING_FLOOR) is shown."""
    return len(words.missing) >= 2 or (bool(words.missing) and len(words.words) <= ABSENT_OF)


def _standing(similarity: float, mean: float, spread: float) -> float:
    """How far `similarity` stands out from the archive's, in [0, 1]."""
    return min(1.0, max(0.0, (similarity - mean) / spread / Z_FULL))


def _allowed(snapshot: Snapshot, vectors: Vectors, query: Query) -> np.ndarray | None:
    """The items the query's filters allow and its words typed after a minus do not rule out, as a boolean
    array in `vectors.ids` order (None: all)."""
    filters = query.filters
    if not (filters.since or filters.until or filters.kind or filters.authors or filters.venues or filters.has
            or query.without):
        return None
    mask = np.ones(len(vectors.ids), dtype=bool)
    if filters.since:
        mask &= vectors.published >= datetime.combine(filters.since, time(), tzinfo=UTC).timestamp()
    if filters.until:  # the last day included, as `filters`
        after = datetime.combine(filters.until + timedelta(days=1), time(), tzinfo=UTC)
        mask &= vectors.published < after.timestamp()
    if filters.kind:
        mask &= vectors.kinds == filters.kind
    if filters.authors or filters.venues or filters.has:
        chosen = Query((), False, replace(filters, since=None, until=None, kind=None))
        clauses = filter_clauses(chosen, snapshot)
        mask &= _held(snapshot, vectors, combined(clauses))
    left_out = without_query(query)
    if left_out is not None:  # an item holding a word typed after a minus is no match by meaning either
        mask &= ~_held(snapshot, vectors, left_out)
    return mask


def _held(snapshot: Snapshot, vectors: Vectors, query: tantivy.Query) -> np.ndarray:
    """Whether each item matches `query`, as a boolean array in `vectors.ids` order."""
    found = snapshot.searcher.search(query, len(snapshot.entries) or 1, count=False).hits
    ids = set(ids_of(snapshot, [address for _, address in found]))
    return np.array([item_id in ids for item_id in vectors.ids], dtype=bool)
