"""Related papers: the items nearest to one archive item, each with what it shares with it.

    item = find_item(index, "https://machinelearning.apple.com/research/hey-siri")  # or title words
    related(index, item, limit=5) -> [Related(item, score, shares="voice trigger, Siri, on-device"), ...]

Nearest by meaning (cosine similarity of the items' vectors) when the index has search by meaning; else (or
while it starts up) by keywords: the item's title searched as a query. "What they share" is the rarest words
(fewest items in the archive hold them) that both items' titles and abstracts use.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from bot.errors import BotError, NothingFound, SearchError
from bot.feed import canonical_link
from bot.models import Item
from bot.search.analysis import terms
from bot.search.engine import TEXT_FIELDS, Snapshot, items
from bot.search.index import STOPWORDS, SearchIndex
from bot.search.query import MAX_QUERY_CHARS, parse_query
from bot.store import Store

SHARED_WORDS = 3
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
_GENERAL = frozenset(_COMMON.split())
_WORD = re.compile(r"[^\W_][\w'-]*[^\W_]|[^\W_]")
_SLACK_LINK = re.compile(r"^<([^|>]+)(?:\|[^>]*)?>$")


@dataclass(frozen=True)
class Related:
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
        raise NothingFound(f"No item in the archive matches {text[:100]!r}; try other words of its title, or "
                           "its link.")
    return hits[0].item


def related(index: SearchIndex, item: Item, limit: int = 5, store: Store | None = None) -> list[Related]:
    """The `limit` items nearest to `item` (never itself), best first."""
    snapshot = index.current(store)
    nearest: list[tuple[str, float]] = []
    if index.meaning:
        try:
            vectors = index.vectors(snapshot, store, wait=not index._background)  # noqa: SLF001
        except BotError:
            vectors = None
        own = vectors.vector(item.id) if vectors is not None else None
        if vectors is not None and own is not None:
            import numpy as np

            sims = vectors.similarities(own)
            for n in np.argsort(-sims, kind="stable")[: limit + 1]:
                if vectors.ids[int(n)] != item.id:
                    nearest.append((vectors.ids[int(n)], round(float(sims[int(n)]), 6)))
    if not nearest:
        words = " ".join(w for w in re.findall(r"\w+", item.title) if w.lower() not in STOPWORDS)
        query = parse_query(words[:MAX_QUERY_CHARS] or item.title[:MAX_QUERY_CHARS])
        found = index.search(query, limit + 1, store)
        nearest = [(h.item.id, h.score) for h in found.hits if h.item.id != item.id]
    scores = dict(nearest[:limit])
    return [Related(other, scores[other.id], shares(snapshot, item, other))
            for other in items(store or index.store, list(scores))]


def shares(snapshot: Snapshot, one: Item, other: Item) -> str:
    """The words both items' titles and abstracts use most, weighted by how rare they are in the archive
    (as `other` writes them)."""
    from collections import Counter

    mine = Counter(terms(f"{one.title} {one.title} {one.summary}"))
    theirs: Counter[str] = Counter()
    surfaces: dict[str, str] = {}
    for word in _WORD.findall(f"{other.title} {other.title} {other.summary}"):
        found = terms(word)
        lowered = word.lower()
        if len(found) == 1 and found[0] in mine and lowered not in STOPWORDS and lowered not in _GENERAL \
                and len(word) > 2 and not word.isdigit():
            surfaces.setdefault(found[0], word)
            theirs[found[0]] += 1
    searcher = snapshot.searcher
    total = max(len(snapshot.entries), 1)

    def weight(term: str) -> float:
        docs = max(sum(searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS[:2]), 1)
        return min(mine[term], theirs[term]) * math.log(1 + total / docs)

    ranked = sorted(surfaces, key=lambda t: (-weight(t), t))
    return ", ".join(surfaces[t] for t in ranked[:SHARED_WORDS])
