"""Which items hold enough of a query's words, each word weighed by how much it tells: how few items hold it.

    enough(searcher, clauses, need) -> tantivy.Query | None   # who holds enough of the words (scoring 0)

An item holds enough of the words either way:
- by count (`keywords.required`): both of two words, two thirds (rounded up) of three or more;
- by weight: it holds the rarest of the words that some item holds and at least one other, and the words it
  holds weigh at least SHARE of all the query's words. A word weighs its inverse document frequency over the
  archive (BM25's: ln(1 + (N - n + 0.5) / (n + 0.5)), n of the N items hold it): a word one item of 72 holds
  weighs 3.9, one that 26 hold 1.0. A word no item holds weighs as much as one that one item holds: what the
  query names that the archive lacks still counts against every item, so a query about what no post covers
  still finds nothing ("actuarial models for pricing life insurance policies"), and one word alone is never
  enough by weight. With three words or fewer the two ways are one (two words are two thirds of three).
So the rarest word decides and common ones count little: "catastrophic forgetting when adapting language
models" (no item holds "catastrophic") lists the post on forgetting during fine-tuning, which holds
"forgetting" (the rarest) and "language models" (as "LLMs"): 42% of the query's weight, two words of four.
SHARE and the rarest word's part were chosen on the tuning set (benchmarks/bench_quality.py; docs/search.md
has the figures).

A word here is one clause of `keywords.text_query`: a word typed with its other forms (stems, prefix,
correction, glossary forms), or a term of the field written in several words, counted once (`_as_terms`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tantivy

SHARE = 0.4  # the share of the query's words' weight that the words an item holds must reach
MIN_HELD = 2  # ... holding at least this many of them (the rarest and another): one alone is enough by count
MAX_WAYS = 256  # the sets of words that reach the share, at most; a query with more is held by count only
SHOULD = tantivy.Occur.Should
MUST = tantivy.Occur.Must


def weight(held_by: int, items: int) -> float:
    """How much holding a word tells of an item, as BM25's inverse document frequency; a word no item holds
    weighs as much as one that one item holds."""
    held_by = max(held_by, 1)
    return math.log(1 + (items - held_by + 0.5) / (held_by + 0.5))


def enough(searcher: tantivy.Searcher, clauses: Sequence[tantivy.Query], need: int) -> tantivy.Query | None:
    """The items that hold `need` of `clauses`, or the rarest of them some item holds and others, weighing
    SHARE of them all (see the module docstring), as a query matching them that adds nothing to a score;
    None when those are the items holding `need` of them (no set of fewer words is enough by weight)."""
    if need <= MIN_HELD:  # three words or fewer: two words are enough by count
        return None
    items = searcher.num_docs
    held = [_held_by(searcher, clause) for clause in clauses]
    weighed = [tantivy.Query.boolean_query([(MUST, clauses[n]) for n in way])
               for way in ways([weight(n, items) for n in held], [n > 0 for n in held]) if len(way) < need]
    if not weighed:  # every set enough by weight is enough by count
        return None
    counted = tantivy.Query.boolean_query([(SHOULD, c) for c in clauses], need)
    either = tantivy.Query.boolean_query([(SHOULD, q) for q in (counted, *weighed)])
    return tantivy.Query.const_score_query(either, 0.0)


def _held_by(searcher: tantivy.Searcher, clause: tantivy.Query) -> int:
    """How many items match `clause` (tantivy's `SearchResult.count`)."""
    return int(getattr(searcher.search(clause, 1, count=True), "count", None) or 0)


def ways(weights: Sequence[float], held: Sequence[bool]) -> list[tuple[int, ...]]:
    """The smallest sets of words (their places in `weights`) that hold a rarest word some item holds
    (`held`; the heaviest, or one of those tied for it), at least MIN_HELD words in all, and SHARE of all the
    words' weight; none when there are more than MAX_WAYS."""
    goal = SHARE * sum(weights) - 1e-9
    known = sorted((n for n in range(len(weights)) if held[n]), key=lambda n: -weights[n])
    found: dict[tuple[int, ...], None] = {}

    def grow(chosen: tuple[int, ...], total: float, rest: list[int]) -> bool:
        if total >= goal and len(chosen) >= MIN_HELD:
            found[tuple(sorted(chosen))] = None
            return len(found) <= MAX_WAYS
        # heaviest first: a set stops growing once it is enough, so none of its words could go
        return all(grow((*chosen, n), total + weights[n], rest[at + 1 :]) for at, n in enumerate(rest))

    for rarest in (n for n in known if weights[n] == weights[known[0]]):
        if not grow((rarest,), weights[rarest], [n for n in known if n != rarest]):
            return []
    return list(found)
