"""A parsed query (bot.search.query.Query) as tantivy's query, over the index of bot.search.engine.

    text, searched_for = text_query(snapshot, query, store, expansions)   # the scoring part
    clauses = filter_clauses(query)                                        # since:, until:, type:, author:

Any loose word may match (OR), a quoted phrase matches as a phrase, the last word typed without a space after
it also matches as a prefix (the most frequent MAX_PREFIX_TERMS indexed terms starting with it). A word of
MIN_FUZZY_CHARS or more letters that matches no indexed term is searched fuzzily (edit distance 1; 2 when its
stem has LONG_WORD_CHARS letters), and `searched_for` says what was searched for instead. The glossary's other
forms of a term the query names are OR-ed in at EXPANSION_BOOST. Filters select, they do not score. Queries
are built with tantivy.Query constructors only (never its query parser): any user string is safe.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime, time, timedelta

import tantivy

from bot.search import glossary
from bot.search.analysis import terms
from bot.search.engine import SCHEMA, TEXT_FIELDS, Snapshot, items
from bot.search.query import Query
from bot.store import Store

MIN_FUZZY_CHARS = 5
LONG_WORD_CHARS = 8
MIN_STEM_CHARS = 4  # a typed prefix falls back to an indexed start of it no shorter than this
MAX_PREFIX_TERMS = 32  # the indexed terms a typed prefix expands to (the most frequent)
FUZZY_SAMPLE = 20  # documents read to name the word a fuzzy match found
SHOULD = tantivy.Occur.Should
_WORDS = re.compile(r"[^\W_]+")
EXPANSION_BOOST = 0.5  # a glossary form the query did not use weighs this much of the words it did


def combined(clauses: list[tuple[tantivy.Occur, tantivy.Query]]) -> tantivy.Query:
    return clauses[0][1] if len(clauses) == 1 and clauses[0][0] == tantivy.Occur.Must else \
        tantivy.Query.boolean_query(clauses)


def _fields(query_for: dict[str, tantivy.Query]) -> tantivy.Query:
    """One query per text field, each boosted by its weight, any of them may match."""
    boosted = [tantivy.Query.boost_query(query_for[name], boost) for name, boost in TEXT_FIELDS]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in boosted])


def _term(word: str) -> tantivy.Query:
    return _fields({name: tantivy.Query.term_query(SCHEMA, name, word) for name, _ in TEXT_FIELDS})


def _phrase(words: list[str | tuple[int, str]], fields: tuple[str, ...]) -> tantivy.Query:
    queries = {
        name: tantivy.Query.phrase_query(SCHEMA, name, words) if len(words) > 1
        else tantivy.Query.term_query(SCHEMA, name, words[0])
        for name in fields
    }
    if len(fields) == 1:
        return queries[fields[0]]
    return _fields(queries)


def _known(searcher: tantivy.Searcher, term: str) -> bool:
    return any(searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS)


def _prefixed(searcher: tantivy.Searcher, typed: str) -> list[str]:
    """The indexed terms a prefix typed as the last word stands for: those starting with it (the most
    frequent MAX_PREFIX_TERMS), and the longest shorter start of it that is itself an indexed term
    ("normalizin" never prefixes "normal", the stem of "normalizing")."""
    found: Counter[str] = Counter()
    for name, _ in TEXT_FIELDS:
        for term, count in searcher.terms_with_prefix(name, typed, limit=MAX_PREFIX_TERMS):
            found[term] += count
    chosen = [term for term, _ in found.most_common(MAX_PREFIX_TERMS)]
    for end in range(len(typed) - 1, MIN_STEM_CHARS - 1, -1):
        if _known(searcher, typed[:end]):
            chosen.append(typed[:end])
            break
    return chosen


def text_query(
    snapshot: Snapshot, query: Query, store: Store, expansions: list[glossary.Expansion] | None = None
) -> tuple[tantivy.Query | None, str | None]:
    """The scoring part of a query (None when it has no words), and the query as searched when a word was
    corrected. The glossary's other forms of an abbreviation or long form the query names are OR-ed in, each
    as a phrase (an abbreviation also as its plural: "LLM" finds "LLMs")."""
    searcher = snapshot.searcher
    parts: list[tantivy.Query] = []
    shown: list[str] = []
    corrected = False
    in_phrases = {w for phrase in query.phrases for w in phrase}
    loose = [w for w in query.terms if w not in in_phrases]
    for n, word in enumerate(loose):
        stems = terms(word)
        if not stems:
            continue
        alternatives = list(dict.fromkeys(stems))
        if query.prefix_last and n == len(loose) - 1:
            alternatives += [t for t in _prefixed(searcher, word) if t not in alternatives]
        if any(_known(searcher, t) for t in alternatives) or len(word) < MIN_FUZZY_CHARS or len(stems) > 1:
            parts += [_term(t) for t in alternatives]
            shown.append(word)
            continue
        correction = _correct(snapshot, word, stems[0], store)
        if correction is None:
            shown.append(word)
            continue
        term, surface = correction
        parts.append(_term(term))
        shown.append(surface)
        corrected = True
    for phrase in query.phrases:
        words: list[str | tuple[int, str]] = [t for w in phrase for t in terms(w)]
        if words:
            parts.append(_phrase(words, tuple(name for name, _ in TEXT_FIELDS)))
            shown.append('"' + " ".join(phrase) + '"')
    for expansion in expansions or ():
        for form in expansion.adds:
            variants: list[list[str | tuple[int, str]]] = [list(form)]
            if len(form) == 1:
                variants.append([form[0] + "s"])
            for variant in variants:
                added = _phrase(variant, tuple(name for name, _ in TEXT_FIELDS))
                parts.append(tantivy.Query.boost_query(added, EXPANSION_BOOST))
    if not parts:
        return (None if not query.terms else tantivy.Query.boolean_query([])), None
    text = parts[0] if len(parts) == 1 else tantivy.Query.boolean_query([(SHOULD, p) for p in parts])
    return text, (" ".join(shown) if corrected else None)


def _correct(snapshot: Snapshot, word: str, stem: str, store: Store) -> tuple[str, str] | None:
    """For a word no indexed term matches: the nearest indexed term within the fuzzy distance (tantivy's
    fuzzy term query finds the documents; their words name the term: nearest, then most frequent), and the
    word as most often written there."""
    if word in snapshot.corrections:
        return snapshot.corrections[word]
    snapshot.corrections[word] = found = _nearest(snapshot, stem, store)
    return found


def _nearest(snapshot: Snapshot, stem: str, store: Store) -> tuple[str, str] | None:
    searcher = snapshot.searcher
    distance = 2 if len(stem) >= LONG_WORD_CHARS else 1
    letters = set(stem)
    fuzzy = _fields({name: tantivy.Query.fuzzy_term_query(SCHEMA, name, stem, distance=distance)
                     for name, _ in TEXT_FIELDS})
    surfaces: dict[str, Counter[str]] = {}
    sample = [str(searcher.doc(address).get_first("id"))
              for _, address in searcher.search(fuzzy, FUZZY_SAMPLE, count=False).hits]
    for item in items(store, sample):
        for surface in _WORDS.findall(f"{item.title} {item.summary} {' '.join(item.authors)}".lower()):
            found = terms(surface)
            if len(found) == 1 and abs(len(found[0]) - len(stem)) <= distance \
                    and len(letters.symmetric_difference(found[0])) <= 2 * distance:
                surfaces.setdefault(found[0], Counter())[surface] += 1
    near = [(edits(stem, t), -_frequency(searcher, t), t) for t in surfaces]
    near = [c for c in near if c[0] <= distance]
    if not near:
        return None
    term = min(near)[2]
    surface = min(surfaces[term].items(), key=lambda s: (-s[1], s[0]))[0]
    return term, surface


def _frequency(searcher: tantivy.Searcher, term: str) -> int:
    return sum(searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS)


def edits(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions costing one (as tantivy's fuzzy query counts them)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, previous2[j - 2] + 1)
            row.append(cost)
        previous2, previous = previous, row
    return previous[-1]


def filter_clauses(query: Query) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    filters = query.filters
    clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
    if filters.since or filters.until:
        start = datetime.combine(filters.since, time(), tzinfo=UTC) if filters.since else None
        # until: names the last day included: everything before the start of the day after it
        after = filters.until + timedelta(days=1) if filters.until else None
        end = datetime.combine(after, time(), tzinfo=UTC) if after else None
        span = tantivy.Query.range_query(SCHEMA, "published", tantivy.FieldType.Date, start, end,
                                         include_upper=end is None)
        clauses.append((tantivy.Occur.Must, span))
    if filters.kind:
        clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(SCHEMA, "kind", filters.kind)))
    for name in filters.authors:
        words: list[str | tuple[int, str]] = list(terms(name))
        if not words:
            return [(tantivy.Occur.Must, tantivy.Query.boolean_query([]))]
        clauses.append((tantivy.Occur.Must, _phrase(words, ("authors",))))
    # Filters select, they do not score.
    return [(occur, tantivy.Query.const_score_query(q, 0.0)) for occur, q in clauses]
