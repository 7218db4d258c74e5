"""Per-phrase bm25 scores kept in memory between SQLite searches, for as long as the archive is unchanged.

FTS5's bm25 of an OR query is a sum over its phrases, each phrase's term depending on that phrase and the
row alone (its IDF, its weighted frequency in the row, the row's length against the average). So the score
of any query is the sum, in phrase order, of what a one-phrase query gives each row: `PhraseScores` keeps
those per-phrase maps, and a search whose phrases are all held adds up a few terms per candidate row (see
`candidate_sums`) in place of asking FTS5 to score every matching row again (~3 µs a row).
The sum is formed as FTS5 forms it (0.0, then each phrase's term in query order), so the scores are the same
doubles.

Everything is tied to the archive's generation (`search_generation.n`, bumped by triggers on every insert,
update or delete of an item, from any process): a lookup under another generation finds nothing, and the
first one under a newer generation drops the lot. Bounded: at most MAX_ENTRIES rows in all (~90 bytes
each, ~22 MB); the least recently used phrases go first.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_ENTRIES = 250_000
MAX_FACTS = 10_000
MAX_ROWS = 2_000  # rows read for results (an item: ~1-3 KB)


@dataclass(frozen=True)
class Held:
    """What is kept of one phrase: how many rows match it (counted up to a bound), and unless only the count
    is kept, rowid -> the phrase's term of that row's score, the largest term, and the rowids best first."""

    count: int
    scores: Mapping[int, float] | None = None
    peak: float = 0.0
    ranked: tuple[int, ...] = ()

    @classmethod
    def of(cls, count: int, scores: Mapping[int, float] | None) -> Held:
        if scores is None:
            return cls(count)
        ranked = tuple(sorted(scores, key=scores.__getitem__, reverse=True))
        return cls(count, scores, scores[ranked[0]] if ranked else 0.0, ranked)


class PhraseScores:
    """phrase -> what is `Held` of it, small facts about the index (its row count, the indexed stem of a
    typed prefix), and the rows results showed, by rowid; one lock, shared by every thread and session of a
    store."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._generation: int | None = None
        self._phrases: dict[str, Held] = {}
        self._facts: dict[Hashable, Any] = {}
        self._rows: dict[int, Any] = {}
        self._entries = 0

    def phrase(self, generation: int, phrase: str) -> Held | None:
        with self._lock:
            if not self._current(generation):
                return None
            found = self._phrases.pop(phrase, None)
            if found is not None:
                self._phrases[phrase] = found  # most recently used last
            return found

    def keep_phrase(self, generation: int, phrase: str, held: Held) -> None:
        size = _size(held)
        with self._lock:
            if not self._current(generation) or size > self.max_entries:
                return
            old = self._phrases.pop(phrase, None)
            if old is not None:
                self._entries -= _size(old)
            while self._phrases and self._entries + size > self.max_entries:
                least_recent = next(iter(self._phrases))
                self._entries -= _size(self._phrases.pop(least_recent))
            self._phrases[phrase] = held
            self._entries += size

    def fact(self, generation: int, key: Hashable) -> tuple[Any] | None:
        """(value,) as kept under `key` for this generation, or None."""
        with self._lock:
            if self._current(generation) and key in self._facts:
                return (self._facts[key],)
            return None

    def keep_fact(self, generation: int, key: Hashable, value: Any) -> None:
        with self._lock:
            if self._current(generation):
                if len(self._facts) >= MAX_FACTS:
                    self._facts.clear()
                self._facts[key] = value

    def rows(self, generation: int, rowids: list[int]) -> dict[int, Any]:
        """Those of `rowids` whose rows are kept for this generation."""
        with self._lock:
            if not self._current(generation):
                return {}
            kept = self._rows
            return {rowid: kept[rowid] for rowid in rowids if rowid in kept}

    def keep_rows(self, generation: int, rows: dict[int, Any]) -> None:
        with self._lock:
            if self._current(generation):
                if len(self._rows) + len(rows) > MAX_ROWS:
                    self._rows.clear()
                self._rows.update(rows)

    @property
    def entries(self) -> int:
        return self._entries

    def _current(self, generation: int) -> bool:
        """Whether what is held belongs to `generation`; a newer generation empties it first."""
        if self._generation is not None and generation < self._generation:
            return False  # a reader that began before the latest change: neither served nor kept
        if self._generation != generation:
            self._generation = generation
            self._phrases.clear()
            self._facts.clear()
            self._rows.clear()
            self._entries = 0
        return True


def _size(held: Held) -> int:
    return len(held.scores) if held.scores is not None else 0


def candidate_sums(phrases: Sequence[Held], limit: int) -> Mapping[int, float]:
    """Every row that can be among the `limit` best, with its score: its phrases' terms added in phrase
    order from 0.0, as FTS5's bm25 adds them (so the same doubles).

    A phrase no row matches is left out (it adds 0.0); one phrase alone gives its best rows from its ranking
    (`_best_of`). Then the rows matching every phrase, alone when they are enough (`_rows_of_every_phrase`).
    Otherwise, as in bot.store.sqlite's `_ranked_search`, only the rows of the rarest phrases are scored, each
    in full; a row matching none of them scores at most the other phrases' largest terms added up (in the
    same order, rounding is monotonic), so once the limit-th best score is above that bound, no such row can
    enter the results or tie with them. Otherwise the next rarest phrase joins (at worst all do: every
    matching row is scored). A big phrase is then only looked up, row by row, never walked. When the phrases
    are of a size, walking them all costs less than looking each up for the rarest one's rows (a walked row
    costs about half a looked-up one), and every row is scored."""
    phrases = [p for p in phrases if p.scores]  # a phrase no row matches adds 0.0: it changes no score
    if len(phrases) <= 1:
        return _best_of(phrases[0], limit) if phrases else {}
    maps = [p.scores or {} for p in phrases]
    order = sorted(range(len(maps)), key=lambda i: len(maps[i]))
    in_every = _rows_of_every_phrase(phrases, maps, order, limit)
    if in_every is not None:
        return in_every
    if sum(map(len, maps)) <= 2 * len(maps[order[0]]) * len(maps):
        return _summed(maps)
    for taken in range(1, len(maps) + 1):
        rare = set(order[:taken])
        sums = dict.fromkeys(set().union(*(maps[i].keys() for i in rare)), 0.0)
        for scores in maps:
            get = scores.get
            sums = {rowid: score + get(rowid, 0.0) for rowid, score in sums.items()}
        if taken == len(maps):
            return sums
        if len(sums) >= limit and heapq.nlargest(limit, sums.values())[-1] > _peaks_without(phrases, rare):
            return sums
    return {}


def _best_of(phrase: Held, limit: int) -> Mapping[int, float]:
    """A one-phrase query: its `limit` best rows and any tied with the last (their term is their score)."""
    scores, ranked = phrase.scores or {}, phrase.ranked
    if len(ranked) <= limit:
        return scores
    floor, end = scores[ranked[limit - 1]], limit
    while end < len(ranked) and scores[ranked[end]] == floor:
        end += 1
    return {rowid: scores[rowid] for rowid in ranked[:end]}


def _rows_of_every_phrase(
    phrases: Sequence[Held], maps: Sequence[Mapping[int, float]], order: Sequence[int], limit: int
) -> dict[int, float] | None:
    """The rows matching every phrase, each with its full score, when the limit-th best of them beats what
    any other row can score (a row missing phrase j scores at most the other phrases' largest terms added
    up, in order); None otherwise. A query's best rows usually match all its words, and finding them is a
    set intersection (at C speed, over the rarest phrase's rows at most), so most multi-word searches
    add up a few dozen terms where `_summed` would add every matching row's."""
    common = maps[order[0]].keys() & maps[order[1]].keys()
    for i in order[2:]:
        common &= maps[i].keys()
    if len(common) < limit:
        return None
    sums = {}
    for rowid in common:
        total = 0.0
        for scores in maps:
            total += scores[rowid]
        sums[rowid] = total
    bound = max(_peaks_without(phrases, {missing}) for missing in range(len(phrases)))
    return sums if heapq.nlargest(limit, sums.values())[-1] > bound else None


def _peaks_without(phrases: Sequence[Held], left_out: Container[int]) -> float:
    """The most a row matching none of the phrases at `left_out` can score: the other phrases' largest
    terms added up in phrase order from 0.0 (rounding is monotonic, so no such row's sum exceeds it)."""
    bound = 0.0
    for i, phrase in enumerate(phrases):
        bound += 0.0 if i in left_out else phrase.peak
    return bound


def _summed(maps: Sequence[Mapping[int, float]]) -> dict[int, float]:
    """Every row of every map, its terms added in map order from 0.0 (0.0 + term is term)."""
    sums = dict(maps[0])
    for scores in maps[1:]:
        get = sums.get
        for rowid, term in scores.items():
            sums[rowid] = get(rowid, 0.0) + term
    return sums
