"""Related papers: the items close to one archive item, each with what it shares with it.

    item = find_item(index, "https://machinelearning.apple.com/research/hey-siri")  # or title words
    related(index, item, limit=5) -> [Related(item, score, shares="voice trigger, Siri, on-device"), ...]

Two rankings, fused: by words (how much of the item's vocabulary another item uses, each word weighted by
how rare it is in the archive: the cosine of their TF-IDF profiles) and, when the index has search by
meaning, by meaning (the cosine similarity of the items' vectors). The candidates are the CANDIDATES nearest
by meaning and the CANDIDATES best by words (a query of the item's rarest words, more like this); each
is ranked by both, and the two ranks are fused by reciprocal rank (FUSION_K): an item near in both comes
first. Words alone miss a paper on the same subject in other words; the bundled model's meaning alone misses
one that shares the item's rarest words. Without search by meaning (or while it loads): by words alone.
Only a close item is listed, so a list may hold one item, or none (which the reply says in a line): its
similarity stands RELATED_Z standard deviations above the mean of the other items' similarities to the item,
or NEAR_Z when it also shares the item's rarer words (a TF-IDF cosine of WORDS_FLOOR, which alone decides
without search by meaning). Until 2026-12-06 five were listed for every post however far they were: for the
one post on learned image compression, five posts on other subjects. Chosen on tests/data/related_judged.json
(one judge's reading of which of the 72 posts share a topic); benchmarks/bench_quality.py prints the share
judged related by it and by a second judge, and docs/search.md the figures.
"What they share" is the rarest words (fewest items in the archive hold them) that both items' titles and
abstracts use, never a word more than COMMON_SHARE of the abstracts (or of the titles) hold ("models": 47
of the 72 real posts).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import tantivy
from msgspec import Struct

from bot.errors import BotError, NothingFound, SearchError
from bot.feed import canonical_link
from bot.models import Item
from bot.search.analysis import terms
from bot.search.engine import TEXT_FIELDS, Snapshot, items, keyword_scores
from bot.search.index import STOPWORDS, SearchIndex
from bot.search.keywords import word_query
from bot.search.query import MAX_QUERY_CHARS, parse_query
from bot.search.words import PUBLISHER
from bot.store import Store

if TYPE_CHECKING:
    import numpy as np

    from bot.search.vectors import Vectors

SHARED_WORDS = 3
COMMON_SHARE = 1 / 3  # a word more than this share of the items hold says nothing of why two are alike
CANDIDATES = 20  # nearest by meaning, and best by words, each ranked by both
# An item is listed only when it is close: its similarity by meaning to the item stands RELATED_Z standard
# deviations above the mean of every other item's, or NEAR_Z when the two share the item's rarer words too
# (the cosine of their TF-IDF profiles is at least WORDS_FLOOR, which alone decides without search by
# meaning).
RELATED_Z = 2.5
NEAR_Z = 2.0
WORDS_FLOOR = 0.17
FEWEST_OTHERS = 8  # below this many other items, no similarity can stand RELATED_Z out: words alone decide
FUSION_K = 60  # reciprocal rank fusion: rank r counts 1 / (FUSION_K + r) (Cormack et al., SIGIR 2009)
MORE_LIKE_THIS_TERMS = 50  # the item's rarest words the query by words asks for
# Words too common in any English text to say what two papers share (beside search's STOPWORDS): what
# `shares` leaves out ("despite", "such", "they" came up as shared on the 72 real posts).
_COMMON = """
    also across although among another because been before being both but could despite did different during
    each either even ever every few first further given had having here however into itself just last least
    less like likely made make makes making many may might more most much must new no nor not now often once
    one only other others otherwise our over own per perhaps rather same several should since so some still
    such them then therefore they those though through thus too two under until up upon us use used uses using
    very via well were whether while whose will within without would yet
"""
# ... and the words any paper's abstract is written in, whatever its subject ("recent", "compared", "notion"
# and "existing" came up as what an image-captioning paper shares with the others).
_RESEARCH_PROSE = """
    ability able achieve achieved achieves address addresses allow allows approach approaches based believe
    better capture captures capturing certain challenge challenges challenging close compare compared
    comparison consider considered core demonstrate demonstrated demonstrates effective effectively
    efficiently enable enables enabling entering existing explore explores field finding findings
    furthermore gap give gives good highly important improve improved improvement improvements improves
    improving include includes including introduce introduced introduces investigate investigates key
    leverage leverages leveraging long moreover notion novel outperform outperforms paper particular
    particularly perform performance performs present presented presents problem problems propose proposed
    proposes provide provides providing range recent recently result results show showed shown shows
    significant significantly simple specifically step strong study studies various wide work works write
"""
# ... and the publisher's name ("Apple" was the word most often named as shared on the 72 real posts: 60 of
# 360 related items).
_GENERAL = frozenset(_COMMON.split()) | frozenset(_RESEARCH_PROSE.split()) | PUBLISHER
_WORD = re.compile(r"[^\W_][\w'-]*[^\W_]|[^\W_]")
_SLACK_LINK = re.compile(r"^<([^|>]+)(?:\|[^>]*)?>$")


class Related(Struct, frozen=True):
    item: Item
    score: float
    shares: str  # the words both items use, comma-separated ("" when none)


def find_item(index: SearchIndex, text: str, store: Store | None = None) -> Item:
    """The archive item a link (or an id) names, or the best hit for title words. SearchError (one line)
    for an empty text, a link that is not in the archive, or words that find nothing."""
    text = " ".join(text.split())
    found = _SLACK_LINK.match(text)
    if found:
        text = found.group(1)
    if not re.search(r"[^\W_]", text):
        raise SearchError("Give a link to an item in the archive, or words of its title.")
    link = canonical_link(text) if re.match(r"(?i)https?://", text) else None
    if link is not None:  # items hold canonical links (an id is one too)
        named = (store or index.store).item_by_link(link)
        if named is None:
            raise NothingFound(f"That link is not in the archive: {text[:100]}")
        return named
    # every word typed (a title's words, filler too) must be in the item: close in meaning is not named
    query = parse_query(text[:MAX_QUERY_CHARS], every_word=True)
    hits = [hit for hit in index.search(query, 1, store).hits if not hit.by_meaning]
    if not hits:
        raise NothingFound(f"No item in the archive matches “{text[:100]}”; try other words of its title, or "
                           "its link.")
    return hits[0].item


def related(index: SearchIndex, item: Item, limit: int = 5, store: Store | None = None) -> list[Related]:
    """The `limit` items nearest to `item` (never itself), best first. The score is the fused rank as a
    share of the best possible: 1.0 for an item first by words and by meaning."""
    store = store or index.store
    snapshot = index.current(store)
    idf = _Rarity(snapshot)
    mine = _profile(item, idf)
    sims = _similarities(index, snapshot, store, item)
    chosen = _best_by_words(snapshot, mine)
    if sims is not None:
        import numpy as np

        vectors, similarity = sims
        chosen += [vectors.ids[int(n)] for n in np.argsort(-similarity, kind="stable")[: CANDIDATES + 1]]
    others = [other for other in items(store, list(dict.fromkeys(chosen))) if other.id != item.id]
    if not others:
        return []
    lexical = {other.id: _cosine(mine, _profile(other, idf)) for other in others}
    fused = _fused([sorted(lexical, key=lambda i: (-lexical[i], i)), *_by_meaning(sims, others)])
    close = _close(sims, item, lexical)
    best = sorted((other for other in others if other.id in close),
                  key=lambda other: (-fused[other.id], -lexical[other.id], other.id))[:limit]
    return [Related(other, round(fused[other.id], 6), shares(snapshot, item, other, idf)) for other in best]


def topics_of(index: SearchIndex, item: Item, store: Store | None = None) -> list[str]:
    """Topics of the glossary that the item's title names whole and other items hold (`SearchIndex.suggest`):
    what to search when nothing is close to it ("Learning Iconic Scenes with Differential Privacy":
    differential privacy)."""
    return index.suggest(_WORD.findall(item.title), store, besides=item.id)


def _similarities(index: SearchIndex, snapshot: Snapshot, store: Store, item: Item
                  ) -> tuple[Vectors, np.ndarray] | None:
    """Every item's similarity by meaning to `item` (None without search by meaning, or while it starts, or
    while `item` has no vector yet). The items' own vectors: no model is asked, so an embeddings endpoint that
    is out costs nothing here."""
    if not index.meaning:
        return None
    try:
        vectors = index.usable_vectors(snapshot, store)
    except BotError:
        return None
    own = vectors.vector(item.id) if vectors is not None else None
    if vectors is None or own is None:
        return None
    return vectors, vectors.similarities(own)


def _close(sims: tuple[Vectors, np.ndarray] | None, item: Item, lexical: dict[str, float]) -> set[str]:
    """Which of the candidates (`lexical`: their words' cosine with the item) are close enough to list: their
    similarity by meaning stands RELATED_Z standard deviations above the mean of every other item's, or NEAR_Z
    with a words' cosine of WORDS_FLOOR; without vectors (no search by meaning, an item not embedded yet, or
    an archive of fewer than FEWEST_OTHERS other items), that cosine alone."""
    if sims is None or len(sims[1]) <= FEWEST_OTHERS:
        return {i for i, cosine in lexical.items() if cosine >= WORDS_FLOOR}
    import numpy as np

    vectors, similarity = sims
    rest = np.delete(similarity, vectors.position[item.id])
    mean, spread = float(rest.mean()), max(float(rest.std()), 1e-6)
    close = set()
    for other, cosine in lexical.items():
        n = vectors.position.get(other)
        standing = (float(similarity[n]) - mean) / spread if n is not None else None
        if (cosine >= WORDS_FLOOR) if standing is None else \
                standing >= RELATED_Z or (standing >= NEAR_Z and cosine >= WORDS_FLOOR):
            close.add(other)
    return close


def _by_meaning(sims: tuple[Vectors, np.ndarray] | None, others: list[Item]) -> list[list[str]]:
    """`others` from nearest to farthest by meaning, as one ranking (none without vectors). An item without
    a vector yet comes last."""
    if sims is None:
        return []
    vectors, similarity = sims
    at = {other.id: vectors.position.get(other.id) for other in others}
    far = float("inf")
    return [sorted(at, key=lambda i: (-float(similarity[at[i]]) if at[i] is not None else far, i))]


def _fused(rankings: list[list[str]]) -> dict[str, float]:
    """Reciprocal rank fusion of `rankings` (best first), as a share of an item first in every one."""
    fused: dict[str, float] = {}
    for ranking in rankings:
        for rank, item_id in enumerate(ranking):
            fused[item_id] = fused.get(item_id, 0.0) + 1 / (FUSION_K + rank)
    return {item_id: score * FUSION_K / len(rankings) for item_id, score in fused.items()}


def _best_by_words(snapshot: Snapshot, profile: dict[str, float]) -> list[str]:
    """The CANDIDATES items that best match an item's rarest words: its MORE_LIKE_THIS_TERMS heaviest terms,
    each weighted as in its profile. (tantivy's own more-like-this query picks among equally rare words
    differently from one run to the next, and so did the related items.)"""
    chosen = sorted(profile, key=lambda term: (-profile[term], term))[:MORE_LIKE_THIS_TERMS]
    if not chosen:
        return []
    weighted = [tantivy.Query.boost_query(word_query(term), profile[term]) for term in chosen]
    query = tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in weighted])
    return [item_id for _, item_id in keyword_scores(snapshot, query, CANDIDATES + 1)[0]]


class _Rarity:
    """How rare each term is in the archive's titles and abstracts, each term looked up once for one call:
    called, its inverse document frequency; `common`, whether more than COMMON_SHARE of the items hold it."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.searcher = snapshot.searcher
        self.total = max(len(snapshot.entries), 1)
        self._held: dict[str, tuple[int, int]] = {}

    def held(self, term: str) -> tuple[int, int]:
        """How many titles, and how many abstracts, hold `term`."""
        if term not in self._held:
            title, summary = (self.searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS[:2])
            self._held[term] = (title, summary)
        return self._held[term]

    def __call__(self, term: str) -> float:
        return math.log(1 + self.total / max(sum(self.held(term)), 1))

    def common(self, term: str) -> bool:
        """Whether more than COMMON_SHARE of the items hold `term` (in their titles, or in their abstracts:
        the larger of the two counts, so never more than truly hold it)."""
        return max(self.held(term)) > COMMON_SHARE * self.total


def _profile(item: Item, idf: Callable[[str], float]) -> dict[str, float]:
    """The item's TF-IDF profile (the title counts twice), of unit length."""
    counts = Counter(terms(f"{item.title} {item.title} {item.summary}"))
    weights = {term: (1 + math.log(n)) * idf(term) for term, n in counts.items()}
    norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
    return {term: w / norm for term, w in weights.items()}


def _cosine(one: dict[str, float], other: dict[str, float]) -> float:
    small, large = (one, other) if len(one) <= len(other) else (other, one)
    return sum(w * large.get(term, 0.0) for term, w in small.items())


def shares(snapshot: Snapshot, one: Item, other: Item, idf: _Rarity | None = None) -> str:
    """The words both items' titles and abstracts use most, weighted by how rare they are in the archive
    (`idf`: `related` passes the rarity it has already looked up), as `other` writes them: in lower case when
    it ever does (a title's or a sentence's capital is not the word's: "models", not "Models"; "Siri")."""
    mine = Counter(terms(f"{one.title} {one.title} {one.summary}"))
    theirs: Counter[str] = Counter()
    surfaces: dict[str, str] = {}
    for word in _WORD.findall(f"{other.title} {other.title} {other.summary}"):
        found = terms(word)
        lowered = word.lower()
        if len(found) == 1 and found[0] in mine and lowered not in STOPWORDS and lowered not in _GENERAL \
                and len(word) > 2 and not word.isdigit():
            known = surfaces.get(found[0])
            if known is None or (word == lowered and known != known.lower()):  # its first form in lower case
                surfaces[found[0]] = word
            theirs[found[0]] += 1
    rarity = idf or _Rarity(snapshot)
    surfaces = {term: word for term, word in surfaces.items() if not rarity.common(term)}

    def weight(term: str) -> float:
        return min(mine[term], theirs[term]) * rarity(term)

    ranked = sorted(surfaces, key=lambda t: (-weight(t), t))
    return ", ".join(surfaces[t] for t in ranked[:SHARED_WORDS])
