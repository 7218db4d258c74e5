"""A parsed query (bot.search.query.Query) as tantivy's query, over the index of bot.search.engine.

    query = whole_last(snapshot, query)                     # "vision pro": "pro" meant whole, not "proud"
    query, searched_for = spelled(snapshot, query, store)   # misspelt words as typed right
    as_spelled(snapshot, "image captoning", store)          # -> "image captioning" (a phrase, a keyword)
    words = text_query(snapshot, query, expansions)         # the scoring part (words.query)
    clauses = filter_clauses(query, snapshot)               # since:, until:, type:, author:

Any loose word may match (OR), a quoted phrase matches as a phrase, the last word typed without a space after
it also matches as a prefix (the most frequent MAX_PREFIX_TERMS indexed terms starting with it), unless it is
a word the archive holds (`whole_last`: "pro" is no "proud") and no star follows it. A word of
MIN_FUZZY_CHARS or more letters that matches no indexed term and is no common English word (`words.english`:
"apart" is not a typo of "part") is searched fuzzily (edit distance 1; 2 when its stem has LONG_WORD_CHARS
letters), never as a filler word ("barely" is not "are"): `spelled` puts the word found in its place
before anything else, and says what was searched for.
The glossary's other forms of a term the query names (and, for a long form, the abbreviations of narrower
terms: "language model" also LLM) are OR-ed in at EXPANSION_BOOST; two words typed next to
each other score PAIR_BOOST more where they stand together (a word between allowed). Filters select, they do
not score. Queries are built with tantivy.Query constructors only (never its query parser): any user string
is safe.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta

import tantivy
from msgspec import Struct

from bot.search import authors, glossary
from bot.search.analysis import KEPT_APART, KEPT_TERMS, terms
from bot.search.engine import SCHEMA, TEXT_FIELDS, Snapshot, authors_of, ids_of, items
from bot.search.query import Query, parse_query
from bot.search.rarity import enough
from bot.search.words import FILLER, edits, english, form_of
from bot.store import Store

MIN_FUZZY_CHARS = 5
LONG_WORD_CHARS = 8
MIN_STEM_CHARS = 4  # a typed prefix falls back to an indexed start of it no shorter than this
MAX_PREFIX_TERMS = 32  # the indexed terms a typed prefix expands to (the most frequent)
MAX_CORRECTIONS = 1024  # misspelt words whose correction a snapshot keeps
FUZZY_SAMPLE = 20  # documents read to name the word a fuzzy match found
SHOULD = tantivy.Occur.Should
_WORDS = re.compile(r"[^\W_]+")
EXPANSION_BOOST = 0.5  # a glossary form the query did not use weighs this much of the words it did
PAIR_BOOST = 1.0  # the weight of two words typed next to each other where an item holds them together
PAIR_SLOP = 1  # ... with at most this many words between them
VENUE_ALIASES = {"nips": "neurips"}  # venue:nips finds NeurIPS, as the conference was called until 2018


def combined(clauses: list[tuple[tantivy.Occur, tantivy.Query]]) -> tantivy.Query:
    return clauses[0][1] if len(clauses) == 1 and clauses[0][0] == tantivy.Occur.Must else \
        tantivy.Query.boolean_query(clauses)


def _fields(query_for: dict[str, tantivy.Query]) -> tantivy.Query:
    """One query per text field, each boosted by its weight, any of them may match."""
    boosted = [tantivy.Query.boost_query(query_for[name], boost) for name, boost in TEXT_FIELDS]
    return tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in boosted])


def word_query(word: str) -> tantivy.Query:
    """An indexed term in any text field, each field at its weight."""
    return _fields({name: tantivy.Query.term_query(SCHEMA, name, word) for name, _ in TEXT_FIELDS})


def _phrase(words: list[str | tuple[int, str]], fields: tuple[str, ...], slop: int = 0) -> tantivy.Query:
    queries = {
        name: tantivy.Query.phrase_query(SCHEMA, name, words, slop) if len(words) > 1
        else tantivy.Query.term_query(SCHEMA, name, words[0])
        for name in fields
    }
    if len(fields) == 1:
        return queries[fields[0]]
    return _fields(queries)


def _known(searcher: tantivy.Searcher, term: str) -> bool:
    return any(searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS)


def _starting(searcher: tantivy.Searcher, typed: str) -> bool:
    """Whether an indexed term starts with `typed`."""
    return any(searcher.terms_with_prefix(name, typed, limit=1) for name, _ in TEXT_FIELDS)


def _prefixed(searcher: tantivy.Searcher, typed: str, indexed: bool) -> list[str]:
    """The indexed terms a prefix typed as the last word stands for: those starting with it (the most
    frequent MAX_PREFIX_TERMS), and, when none does and the word as typed is not itself `indexed` (its term
    is not), the longest shorter start of it that is, when the word may be a form of it (`form_of`:
    "normalizin" never prefixes "normal", the stem of "normalizing"; but "ToolSandbox", a name one post holds,
    is no "tool", nor "MobileCLIP" "mobile", "blockchain", a word no post holds, "block", and "accessib", the
    start of "accessibl", no "access"). A word typed whole stands for no word the analysis keeps apart from it
    ("object" is never "objective")."""
    apart = KEPT_TERMS if indexed else frozenset()
    found: Counter[str] = Counter()
    for name, _ in TEXT_FIELDS:
        for term, count in searcher.terms_with_prefix(name, typed, limit=MAX_PREFIX_TERMS):
            if term not in apart:
                found[term] += count
    chosen = [term for term, _ in found.most_common(MAX_PREFIX_TERMS)]
    if indexed or chosen:
        return chosen
    for end in range(len(typed) - 1, MIN_STEM_CHARS - 1, -1):
        if _known(searcher, typed[:end]) and form_of(typed, typed[:end]):
            chosen.append(typed[:end])
            break
    return chosen


class Words(Struct, frozen=True):
    """A query's words as the engine searches them (`text_query`)."""

    query: tantivy.Query | None  # the scoring part, None when the query has no words
    words: tuple[str, ...]  # the words that decide the ranking, as searched (corrected): what meaning embeds
    required: int  # how many of the loose words (each with its other forms) an item must hold by count (it
    # may hold fewer that weigh enough: `rarity`)
    known: int = 0  # how many of the words some item holds (a made-up word is in none)
    missing: tuple[str, ...] = ()  # the words no item holds, as typed
    some: tantivy.Query | None = None  # any of the words (when more than one is needed): who holds some
    missing_terms: tuple[str, ...] = ()  # glossary terms typed whose words no item holds together

    @property
    def absent(self) -> tuple[str, ...]:
        """What a reply names as held by no item: the words, then the terms ("graph neural networks")."""
        return self.missing + self.missing_terms


def required(loose: int) -> int:
    """How many of `loose` words an item must hold to match them by count: all of one or two words, a clear
    majority (two thirds, rounded up) of more. An item holding the rarest of them and others that weigh
    enough matches them too (`rarity.enough`)."""
    return loose if loose <= 2 else -(-2 * loose // 3)


def _loose(query: Query) -> list[str]:
    """The words that decide the ranking and are in no quoted phrase, in the order typed."""
    in_phrases = {w for phrase in query.phrases for w in phrase}
    return [w for w in query.content if w not in in_phrases]


def spelled(snapshot: Snapshot, query: Query, store: Store) -> tuple[Query, str | None]:
    """`query` as if its misspelt words had been typed right, and what was searched for (None: nothing was
    misspelt). A loose word of MIN_FUZZY_CHARS or more letters that matches no indexed term (as itself, its
    plural or, typed last, a prefix) and is neither a common English word nor a word of the glossary is
    replaced by the nearest word the archive writes (`_correct`), so it ranks, finds its glossary forms and
    plain words, and is embedded as if typed right ("speech recogniton" is also searched as ASR)."""
    searcher = snapshot.searcher
    loose = _loose(query)
    fixed: dict[str, str] = {}
    for n, word in enumerate(loose):
        stems = terms(word)
        if len(stems) != 1 or len(word) < MIN_FUZZY_CHARS or _known(searcher, stems[0]) or english(word) \
                or stems[0] in glossary.vocabulary():
            continue
        last = query.prefix_last and n == len(loose) - 1 and word == query.terms[-1]
        others = [t for form in glossary.numbers(word) for t in terms(form)]
        if any(_known(searcher, t) for t in others) or last and _starting(searcher, word):
            continue  # the word, typed last, begins indexed terms: it may be typed in part
        correction = _correct(snapshot, word, stems[0], store)
        if correction is not None:
            fixed[word] = correction[1]
    if not fixed:
        return query, None
    text = query.text
    for wrong, right in fixed.items():
        text = re.sub(rf"(?<!\w){re.escape(wrong)}(?!\w)", right, text, flags=re.IGNORECASE)
    shown = [fixed.get(w, w) for w in loose if terms(w)]
    shown += ['"' + " ".join(phrase) + '"' for phrase in query.phrases if any(terms(w) for w in phrase)]
    shown += ["-" + (words[0] if len(words) == 1 else '"' + " ".join(words) + '"') for words in query.without]
    typed_right = dataclasses.replace(query, terms=tuple(dict.fromkeys(fixed.get(t, t) for t in query.terms)),
                          content=tuple(dict.fromkeys(fixed.get(t, t) for t in query.content)), text=text,
                          prefix_last=query.prefix_last and query.terms[-1] not in fixed)
    return typed_right, " ".join(shown)


def whole_last(snapshot: Snapshot, query: Query) -> Query:
    """`query` with its last word meant whole, not as the start of others, when the archive holds it (as
    typed or inflected: its stem) and no star follows it: "vision pro" is no "proud", "siri app" no
    "approach"; a start typed on purpose ("capt", "privac") is no word an item holds, and "pro*" asks for
    every word it starts."""
    if not query.last_is_prefix or query.starred:
        return query
    word = query.terms[-1]
    stems = terms(word)
    if len(stems) == 1 and _known(snapshot.searcher, stems[0]):
        return dataclasses.replace(query, prefix_last=False)
    return query


def as_spelled(snapshot: Snapshot, words: str, store: Store) -> str | None:
    """`words` (a keyword, or a quoted phrase's words: taken whole, never as a prefix) with the misspelt ones
    put right as `spelled` puts a query's ("image captoning" -> "image captioning"); None when none is."""
    typed_right, searched_for = spelled(snapshot, parse_query(f"{words} "), store)
    return typed_right.text if searched_for else None


def text_query(snapshot: Snapshot, query: Query, expansions: list[glossary.Expansion] | None = None) -> Words:
    """The scoring part of a query (its misspelt words put right by `spelled`): every quoted phrase, and
    `required` of its loose content words, or fewer that weigh enough (`rarity.enough`: the rarest and
    others; each word matched by its stems, the prefix it was typed as, or a glossary form standing for it:
    the glossary's other forms of an abbreviation or long form the query names, each a phrase, an
    abbreviation also in the other number, "LLM" finds "LLMs", and a long form's narrower abbreviations,
    "language model" finds "LLMs"), the words of a glossary term counted once (`_as_terms`)."""
    searcher = snapshot.searcher
    clauses: list[tantivy.Query] = []
    searched: list[str] = []
    missing: list[str] = []
    loose = _loose(query)
    forms = _glossary_forms(loose, expansions or [])
    paired: list[str | None] = []  # each loose word's one indexed term, in the order typed (None: none)
    for n, word in enumerate(loose):
        stems = terms(word)
        if not stems:
            continue
        first = _known(searcher, stems[0])
        paired.append(stems[0] if len(stems) == 1 and first else None)
        alternatives = list(dict.fromkeys(stems))
        if query.prefix_last and n == len(loose) - 1 and word == query.terms[-1]:
            alternatives += [t for t in _prefixed(searcher, word, first) if t not in alternatives]
        # "LLM" stands for "LLMs" too and back, which the stemmer keeps apart (no vowel before the s): at the
        # weight of a glossary form, as "large language model" finds "LLMs"
        plural = [t for form in glossary.numbers(word) for t in terms(form) if t not in alternatives]
        parts = [word_query(t) for t in alternatives]
        searched.append(word)
        if not (first or any(_known(searcher, t) for t in [*alternatives[1:], *plural])):
            missing.append(word)
        if forms.get(word) and word in missing:  # a glossary form may stand for it
            missing.remove(word)
        parts += forms.get(word, [])
        parts += [tantivy.Query.boost_query(word_query(t), EXPANSION_BOOST) for t in plural]
        either = [(SHOULD, p) for p in parts]
        clauses.append(parts[0] if len(parts) == 1 else tantivy.Query.boolean_query(either))
    known = len(clauses) - len(missing)  # counted before a term's words are joined: each word some item holds
    clauses, joined = _as_terms(searched, clauses, expansions or [])  # `searched`: one word a clause so far
    missing_terms = [said for said, clause in joined  # told, not a floor: its neighbours may be about it
                     if not set(said.split()) & set(missing) and not searcher.search(clause, 1).hits]
    musts: list[tantivy.Query] = []
    for phrase in query.phrases:
        words: list[str | tuple[int, str]] = [t for w in phrase for t in terms(w)]
        if words:
            musts.append(_phrase(words, tuple(name for name, _ in TEXT_FIELDS)))
            searched.append(" ".join(phrase))
    need = required(len(clauses))
    if not clauses and not musts:
        return Words(None if not query.terms else tantivy.Query.boolean_query([]), (), 0)
    weighed = enough(searcher, clauses, need)  # the items holding enough of the words by count or by weight
    if len(clauses) == 1 and not musts:
        text = clauses[0]
    elif weighed is None:  # only by count
        parts_of = [(tantivy.Occur.Must, m) for m in musts] + [(SHOULD, c) for c in clauses]
        text = tantivy.Query.boolean_query(parts_of, need if clauses else None)
    else:  # the score is the words', as by count
        parts_of = [(tantivy.Occur.Must, m) for m in [*musts, weighed]]
        text = tantivy.Query.boolean_query([*parts_of, *((SHOULD, c) for c in clauses)])
    pairs = [tantivy.Query.boost_query(_phrase([a, b], tuple(name for name, _ in TEXT_FIELDS), PAIR_SLOP),
                                       PAIR_BOOST)
             for a, b in zip(paired, paired[1:], strict=False) if a and b]
    if pairs:  # words found together score more than the same words apart
        text = tantivy.Query.boolean_query([(tantivy.Occur.Must, text), *((SHOULD, p) for p in pairs)])
    known += len(musts)
    some = None
    if len(clauses) + len(musts) > 1 and (need > 1 or musts):
        some = tantivy.Query.boolean_query([(SHOULD, c) for c in [*musts, *clauses]])
    return Words(text, tuple(searched), need, known, tuple(missing), some, tuple(missing_terms))


def _as_terms(owners: list[str], clauses: list[tantivy.Query], expansions: list[glossary.Expansion]
              ) -> tuple[list[tantivy.Query], list[tuple[str, tantivy.Query]]]:
    """`clauses` (one per word of `owners`) with the words of each term of the field the query writes in
    several words (an abbreviation's long form or its two-word name: "language model", "time to first token",
    "KV cache") joined in one clause that needs them all: a term is one word for the majority (`required`).
    "can language models tell when they are wrong?" needs "wrong" too, where "language models" alone was two
    words of three; "graph neural networks" is not matched by "neural networks" alone. Also each joined
    term, as typed, with its clause: a term no item holds is named as missing, as a word would be."""
    joined: list[list[int]] = []
    taken: set[int] = set()
    for expansion in expansions:
        if expansion.plain:  # everyday words: a plain form may span words that each say something
            continue
        said = set(terms(expansion.said))
        group = [n for n, word in enumerate(owners) if n not in taken and set(terms(word)) & said]
        if len(group) >= 2:
            joined.append(group)
            taken.update(group)
    whole = [tantivy.Query.boolean_query([(tantivy.Occur.Must, clauses[n]) for n in group])
             for group in joined]
    named = [(" ".join(owners[n] for n in group), term) for group, term in zip(joined, whole, strict=True)]
    return whole + [clause for n, clause in enumerate(clauses) if n not in taken], named


def _glossary_forms(
    loose: list[str], expansions: list[glossary.Expansion]
) -> dict[str, list[tantivy.Query]]:
    """The glossary forms (as phrase queries, at EXPANSION_BOOST) that stand for each loose word: every word
    of the form the query said ("speech" and "recognition" both stand for "ASR"), and of a long form said,
    the abbreviations of narrower terms too (`glossary.narrower`: "language models" for "LLMs")."""
    found: dict[str, list[tantivy.Query]] = {}
    for expansion in expansions:
        said = set(terms(expansion.said.lower()))
        said_words = {w.lower() for w in expansion.said.split()}
        owners = [w for w in loose if set(terms(w)) & said or w in said_words
                  or (w.endswith("s") and w[:-1] in said_words)]
        narrower = () if expansion.plain or expansion.said == expansion.entry.short \
            else tuple(tuple(terms(short)) for short in glossary.narrower(expansion.said))
        for form in (*expansion.adds, *narrower):
            variants: list[list[str | tuple[int, str]]] = [list(form)]
            if len(form) == 1:
                variants.append([form[0] + "s"])
            for variant in variants:
                added = tantivy.Query.boost_query(_phrase(variant, tuple(name for name, _ in TEXT_FIELDS)),
                                                  EXPANSION_BOOST)
                for word in owners:
                    found.setdefault(word, []).append(added)
    return found


def _correct(snapshot: Snapshot, word: str, stem: str, store: Store) -> tuple[str, str] | None:
    """For a word no indexed term matches: the nearest indexed term (`_nearest`) and the word as the archive
    writes it nearest the one typed, remembered per snapshot."""
    corrections = snapshot.corrections
    if word in corrections:
        return corrections[word]
    found = _nearest(snapshot, word, stem, store)
    while len(corrections) >= MAX_CORRECTIONS:  # the oldest first: a stream of random words holds no memory
        corrections.pop(next(iter(corrections)), None)
    corrections[word] = found
    return found


def _nearest(snapshot: Snapshot, word: str, stem: str, store: Store) -> tuple[str, str] | None:
    """The indexed term within one edit of the word's stem (two when the stem has LONG_WORD_CHARS letters):
    tantivy's fuzzy term query finds the documents, their words name the term (nearest, then most frequent).
    Failing that, for a word of LONG_WORD_CHARS letters, a term one of whose written forms is one edit from
    the word as typed, the stem two edits away: stemming can part a typo from its word ("federeted" stems to
    "federet", "federated" to "feder")."""
    searcher = snapshot.searcher
    by_stem = 2 if len(stem) >= LONG_WORD_CHARS else 1
    apart = _apart(searcher, word)
    if apart is not None:
        return apart
    letters = set(stem)
    surfaces = _surfaces(snapshot, stem, by_stem, store, lambda surface, term: abs(len(term) - len(stem))
                         <= by_stem and len(letters.symmetric_difference(term)) <= 2 * by_stem)
    near = [(edits(stem, t), -_frequency(searcher, t), t) for t in surfaces]
    near = [c for c in near if c[0] <= by_stem]
    if not near and len(word) >= LONG_WORD_CHARS:
        surfaces = _surfaces(snapshot, stem, 2, store, lambda surface, term: abs(len(surface) - len(word))
                             <= 1 and edits(surface, word) <= 1)
        near = [(min(edits(s, word) for s in surfaces[t]), -_frequency(searcher, t), t) for t in surfaces]
    if not near:
        return None
    term = min(near)[2]
    surface = min(surfaces[term].items(), key=lambda s: (edits(s[0], word), -s[1], s[0]))[0]
    return term, surface


def _apart(searcher: tantivy.Searcher, word: str) -> tuple[str, str] | None:
    """A word the analysis keeps apart (`analysis.KEPT_APART`) one edit from `word` (two when it has
    LONG_WORD_CHARS letters) whose term the index holds, nearest first: its term is no stem of it, so a typo's
    stem does not lead there ("accesibility" stems to "acces", one edit from "access")."""
    most = 2 if len(word) >= LONG_WORD_CHARS else 1
    near = sorted((edits(kept, word), kept) for kept in KEPT_APART
                  if kept[0] == word[0] and abs(len(kept) - len(word)) <= most)
    return next(((KEPT_APART[kept], kept) for n, kept in near
                 if n <= most and _known(searcher, KEPT_APART[kept])), None)


def _surfaces(snapshot: Snapshot, stem: str, distance: int, store: Store,
              keep: Callable[[str, str], bool]) -> dict[str, Counter[str]]:
    """The words (lower case, by their one term) of the FUZZY_SAMPLE items best matching `stem` within
    `distance` edits, those `keep(surface, term)` allows, with how often each is written there."""
    fuzzy = _fields({name: tantivy.Query.fuzzy_term_query(SCHEMA, name, stem, distance=distance)
                     for name, _ in TEXT_FIELDS})
    hits = snapshot.searcher.search(fuzzy, FUZZY_SAMPLE, count=False).hits
    surfaces: dict[str, Counter[str]] = {}
    for item in items(store, ids_of(snapshot, [address for _, address in hits])):
        for surface in _WORDS.findall(f"{item.title} {item.summary} {' '.join(item.authors)}".lower()):
            found = terms(surface)
            if len(found) == 1 and surface not in FILLER and keep(surface, found[0]):
                surfaces.setdefault(found[0], Counter())[surface] += 1
    return surfaces


def _frequency(searcher: tantivy.Searcher, term: str) -> int:
    return sum(searcher.doc_freq(name, term) for name, _ in TEXT_FIELDS)


def filter_clauses(query: Query, snapshot: Snapshot) -> list[tuple[tantivy.Occur, tantivy.Query]]:
    """The query's filters (since:, until:, type:, author:) and the words typed after a minus, as clauses;
    an author: filter selects the items `bot.search.authors` says that name wrote (the rule routing uses)."""
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
    for name in filters.authors:  # the archive's names it matches, each a term of the "author" field
        names = authors_of(snapshot).matching(authors.stored(name))
        if not names:
            return [(tantivy.Occur.Must, tantivy.Query.boolean_query([]))]
        clauses.append((tantivy.Occur.Must, tantivy.Query.term_set_query(SCHEMA, "author", names)))
    for venue in filters.venues:
        words = [VENUE_ALIASES.get(w, w) for w in _WORDS.findall(venue.lower())]
        if not words:
            return [(tantivy.Occur.Must, tantivy.Query.boolean_query([]))]
        said = tantivy.Query.phrase_query(SCHEMA, "venue", words) if len(words) > 1 \
            else tantivy.Query.term_query(SCHEMA, "venue", words[0])
        clauses.append((tantivy.Occur.Must, said))
    for held in filters.has:
        clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(SCHEMA, "has", held)))
    left_out = without_query(query)
    if left_out is not None:
        clauses.append((tantivy.Occur.MustNot, left_out))
    # Filters select, they do not score.
    return [(occur, tantivy.Query.const_score_query(q, 0.0)) for occur, q in clauses]


def without_query(query: Query) -> tantivy.Query | None:
    """The items holding any word or phrase typed after a minus (`Query.without`), in any text field, matched
    as a quoted phrase is (stemmed, never as a prefix nor corrected), or another of its glossary forms when it
    is a whole abbreviation or long form (`-LLM` leaves out "large language models" too, `-"speech
    recognition"` ASR); None when there is none."""
    phrases = []
    fields = tuple(name for name, _ in TEXT_FIELDS)
    for typed in query.without:
        words = tuple(t for w in typed for t in terms(w))
        if not words:
            continue
        forms = [words, *(form for found in glossary.expand(list(typed))
                          if not found.plain and len(terms(found.said)) == len(words) for form in found.adds)]
        phrases += [_phrase(list(form), fields) for form in dict.fromkeys(forms)]
    if not phrases:
        return None
    return phrases[0] if len(phrases) == 1 else tantivy.Query.boolean_query([(SHOULD, p) for p in phrases])
