"""The one search engine: a tantivy index in RAM, derived from the archive (the database stays the source of
truth), the same for both stores.

    index = SearchIndex(store)              # built on first use, or in the background with index.start()
    index.search(parse_query("captoning"), limit=5) -> Found(hits=[...], searched_for="captioning")

Ranking is BM25 over title (weighted TITLE_BOOST), summary and authors (AUTHORS_BOOST), all analyzed by
bot.search.analysis (English stemming); any loose word may match (OR), a quoted phrase matches as a phrase,
the last word typed without a space after it also matches as a prefix. A word of MIN_FUZZY_CHARS or more
letters that matches no indexed term is searched fuzzily (edit distance 1; 2 when its stem has
LONG_WORD_CHARS letters) and `Found.searched_for` says what was searched for instead. since:, until:,
type: and author: are clauses of the tantivy query (dates or authors alone list their items, newest first).
Equal scores are ordered newest first, then by id, so both stores give the same order. Queries are built with
tantivy.Query constructors only (never its query parser): any user string is safe.

Freshness: every search reads the store's change marker (a counter bumped by triggers on items, one tiny
query); when it moved, the rows written since (each row is stamped with its last write's marker) are read and
re-indexed (or the whole index rebuilt, see `build`) before the search runs. A search that arrives while the
first build runs (`start`, at serve's start-up) waits for it at most READY_WAIT seconds, then gets a one-line
answer.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Any

import tantivy

from bot.errors import SearchUnavailable
from bot.feed import kind_of
from bot.models import Item, SearchHit
from bot.search.analysis import ANALYZER_NAME, analyzer, terms
from bot.search.query import Query
from bot.store import Store
from bot.store.models import from_iso, row_item

TITLE_BOOST = 5.0
AUTHORS_BOOST = 0.5
TEXT_FIELDS = (("title", TITLE_BOOST), ("summary", 1.0), ("authors", AUTHORS_BOOST))
MIN_FUZZY_CHARS = 5
LONG_WORD_CHARS = 8
MIN_STEM_CHARS = 4  # a typed prefix falls back to an indexed start of it no shorter than this
MAX_PREFIX_TERMS = 32  # the indexed terms a typed prefix expands to (the most frequent)
FUZZY_SAMPLE = 20  # documents read to name the word a fuzzy match found
READY_WAIT = 2.0
WRITER_HEAP = 64_000_000
WRITER_THREADS = 2
REBUILD_SHARE = 0.2
SHOULD = tantivy.Occur.Should
_WORDS = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class Found:
    """Ranked hits, and the query as searched when a misspelt word was searched as another (else None)."""

    hits: list[SearchHit]
    searched_for: str | None = None


@dataclass(frozen=True)
class _Snapshot:
    index: tantivy.Index
    searcher: tantivy.Searcher
    rows: dict[str, dict[str, Any]]  # id -> the item's row (bot.store.archive.ITEM_COLUMNS)
    marker: int
    corrections: dict[str, tuple[str, str] | None]  # word -> (term, surface) (see _correct)

    def item(self, item_id: str) -> Item:
        return row_item(self.rows[item_id])


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    for name, _ in TEXT_FIELDS:
        builder.add_text_field(name, tokenizer_name=ANALYZER_NAME, index_option="position")
    builder.add_text_field("kind", tokenizer_name="raw")
    builder.add_date_field("published", indexed=True, fast=True)
    return builder.build()


SCHEMA = _schema()


def build(store: Store, previous: _Snapshot | None = None) -> _Snapshot:
    """The index of the whole archive (the marker is read first: the rows are at least that new). Given the
    previous snapshot, only the rows written since its marker are read (`Store.changed_items`) and re-indexed,
    in its index (unless more than REBUILD_SHARE of them changed: then a new index, whose statistics hold no
    deleted documents). Items are never deleted by the bot: when the archive holds fewer items than the
    snapshot's rows with the changes applied, some were, and every row is read again."""
    marker = store.change_marker()
    if previous is not None:
        written, count = store.changed_items(previous.marker)
        changed = [row for row in written if previous.rows.get(row["id"]) != row]
        rows = previous.rows | {row["id"]: row for row in changed}
        if len(rows) == count:
            if len(changed) <= REBUILD_SHARE * max(count, 1):
                index = previous.index
                writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
                for row in changed:
                    writer.delete_documents_by_term("id", row["id"])
                    writer.add_document(_document(row))
                return _committed(index, writer, rows, marker)
            return _new_index(rows, marker)
    return _new_index({row["id"]: row for row in store.all_items()}, marker)


def _new_index(rows: dict[str, dict[str, Any]], marker: int) -> _Snapshot:
    index = tantivy.Index(SCHEMA)
    index.register_tokenizer(ANALYZER_NAME, analyzer())
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
    for row in rows.values():
        writer.add_document(_document(row))
    return _committed(index, writer, rows, marker)


def _committed(
    index: tantivy.Index, writer: tantivy.IndexWriter, rows: dict[str, dict[str, Any]], marker: int
) -> _Snapshot:
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return _Snapshot(index, index.searcher(), rows, marker, {})


def _document(row: dict[str, Any]) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("id", row["id"])
    doc.add_text("title", row["title"])
    doc.add_text("summary", row["summary"] or "")
    doc.add_text("authors", " \n ".join(json.loads(row["authors"] or "[]")))
    doc.add_text("kind", _kind(row))
    published = from_iso(row["published"])
    if published is not None:
        doc.add_date("published", published)
    return doc


def _kind(row: dict[str, Any]) -> str:
    """The item's kind as `row_item` gives it (without parsing every link)."""
    if row["kind"] == "update" or ("/updates/" in row["link"] and kind_of(row["link"]) == "update"):
        return "update"
    return "research"


class SearchIndex:
    """The archive's search index (see the module docstring); safe to share between threads."""

    def __init__(self, store: Store, *, ready_wait: float = READY_WAIT) -> None:
        self.store = store
        self.ready_wait = ready_wait
        self._snapshot: _Snapshot | None = None
        self._lock = threading.Lock()
        self._starting = False

    def start(self) -> threading.Thread:
        """Build the index in a background thread (serve's start-up); searches meanwhile wait for it."""
        self._lock.acquire()  # held from now on, so no search can start a build of its own meanwhile
        self._starting = True
        thread = threading.Thread(target=self._build_first, name="search-index", daemon=True)
        thread.start()
        return thread

    def _build_first(self) -> None:
        try:
            if self._snapshot is None:
                self._snapshot = build(self.store)
        finally:
            self._starting = False
            self._lock.release()

    def current(self, store: Store | None = None) -> _Snapshot:
        """The index as fresh as the archive: rebuilt when the store's change marker moved. `store` (a view of
        this index's store, e.g. a request's session) is read instead of the index's own when given."""
        store = store or self.store
        snapshot = self._snapshot
        marker = store.change_marker()
        if snapshot is not None and snapshot.marker == marker:
            return snapshot
        waited = self._lock.acquire(timeout=self.ready_wait if snapshot is None and self._starting else -1)
        if not waited:
            raise SearchUnavailable("Search is still starting up; try again in a few seconds.")
        try:
            snapshot = self._snapshot
            if snapshot is None or snapshot.marker != store.change_marker():
                snapshot = self._snapshot = build(store, snapshot)
            return snapshot
        finally:
            self._lock.release()

    def search(self, query: Query, limit: int, store: Store | None = None) -> Found:
        """The best `limit` hits for `query` (see the module docstring); `store` as in `current`."""
        snapshot = self.current(store)
        text, searched_for = _text_query(snapshot, query)
        clauses = [] if text is None else [(tantivy.Occur.Must, text)]
        clauses += _filters(query)
        dated = query.filters.since or query.filters.until
        if not clauses or (text is None and not query.filters.authors and not dated):
            return Found([], searched_for)
        return Found(_ranked(snapshot, _boolean(clauses), limit), searched_for)


def _boolean(clauses: list[tuple[tantivy.Occur, tantivy.Query]]) -> tantivy.Query:
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


def _text_query(snapshot: _Snapshot, query: Query) -> tuple[tantivy.Query | None, str | None]:
    """The scoring part of a query (None when it has no words), and the query as searched when a word was
    corrected."""
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
        correction = _correct(snapshot, word, stems[0])
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
    if not parts:
        return (None if not query.terms else tantivy.Query.boolean_query([])), None
    text = parts[0] if len(parts) == 1 else tantivy.Query.boolean_query([(SHOULD, p) for p in parts])
    return text, (" ".join(shown) if corrected else None)


def _correct(snapshot: _Snapshot, word: str, stem: str) -> tuple[str, str] | None:
    """For a word no indexed term matches: the nearest indexed term within the fuzzy distance (tantivy's
    fuzzy term query finds the documents; their words name the term: nearest, then most frequent), and the
    word as most often written there."""
    if word in snapshot.corrections:
        return snapshot.corrections[word]
    snapshot.corrections[word] = found = _nearest(snapshot, stem)
    return found


def _nearest(snapshot: _Snapshot, stem: str) -> tuple[str, str] | None:
    searcher = snapshot.searcher
    distance = 2 if len(stem) >= LONG_WORD_CHARS else 1
    letters = set(stem)
    fuzzy = _fields({name: tantivy.Query.fuzzy_term_query(SCHEMA, name, stem, distance=distance)
                     for name, _ in TEXT_FIELDS})
    surfaces: dict[str, Counter[str]] = {}
    for _, address in searcher.search(fuzzy, FUZZY_SAMPLE, count=False).hits:
        item = snapshot.item(str(searcher.doc(address).get_first("id")))
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


def _filters(query: Query) -> list[tuple[tantivy.Occur, tantivy.Query]]:
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


def _ranked(snapshot: _Snapshot, query: tantivy.Query, limit: int) -> list[SearchHit]:
    """The best `limit` hits: score, then newest, then id. Hits tied with the last place are all read, so
    the order never depends on how tantivy breaks ties."""
    searcher = snapshot.searcher
    wanted = limit + 1
    while True:
        hits = searcher.search(query, wanted, count=False).hits
        if len(hits) < wanted or hits[-1][0] < hits[limit - 1][0]:
            break
        wanted *= 4
    # (score, published, id): published as the row's ISO-8601 UTC text, which sorts as the time does; only
    # the hits kept become Items.
    ranked: list[tuple[float, str, str]] = []
    for score, address in hits:
        key = str(searcher.doc(address).get_first("id"))
        ranked.append((round(float(score), 6), snapshot.rows[key]["published"], key))
    ranked.sort(key=lambda hit: hit[2])
    ranked.sort(key=lambda hit: hit[:2], reverse=True)
    return [SearchHit(snapshot.item(key), score) for score, _, key in ranked[:limit]]
