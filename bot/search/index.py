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
tantivy.Query constructors only (never its query parser): any user string is safe. With search by meaning
(`model`), bot.search.hybrid blends this ranking with the similarity of meaning.

Memory: tantivy holds the indexed text; Python holds only an Entry per item (what ranking and filters ask of
every candidate). The items a search returns are read from the database (one query), so the archive's text is
never held twice.

Freshness: every search reads the store's change marker (a counter bumped by triggers on items, one tiny
query); when it moved, the rows written since (each row is stamped with its last write's marker) are read and
re-indexed (or the whole index rebuilt, see `build`) before the search runs. A search that arrives while the
first build runs (`start`, at serve's start-up) waits for it at most READY_WAIT seconds, then gets a one-line
answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

import tantivy

from bot import memory
from bot.config import Settings
from bot.errors import BotError, SearchError, SearchUnavailable
from bot.feed import kind_of
from bot.models import Item, SearchHit
from bot.search import glossary
from bot.search.analysis import ANALYZER_NAME, analyzer, terms
from bot.search.query import Query
from bot.store import Store
from bot.store.models import from_iso

if TYPE_CHECKING:
    from bot.search.embed import Embedder
    from bot.search.vectors import Progress, Vectors

log = logging.getLogger("bot.search")

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
MAX_FOUND = 256  # searches whose answers are kept (SearchIndex._found)
EXPANSION_BOOST = 0.5  # a glossary form the query did not use weighs this much of the words it did
_FILLER = """a about an and any are as at be by can do does for from has have how i in into is it its me of
on or our say says show shows tell than that the their there these this to was we what when where which who
why with you your"""
STOPWORDS = frozenset(_FILLER.split())  # words that say nothing about a topic (as bot.summarize's)
LOADING_NOTE = ("Search by meaning is still starting up: these results match your words only (nothing is "
                "lost; ask again in a minute to also match by meaning).")


@dataclass(frozen=True)
class Found:
    """Ranked hits, and the query as searched when a misspelt word was searched as another (else None)."""

    hits: list[SearchHit]
    searched_for: str | None = None
    expanded: str | None = None  # the glossary forms searched too: "LLM, large language model"
    note: str | None = None  # why these results match words only (search by meaning unavailable)


class Entry(NamedTuple):
    """What the index keeps in Python of each item: what ranking and filtering ask of every candidate. Its
    text is in the database, which gives the hits (and in tantivy's index)."""

    published: str  # the row's ISO-8601 UTC text, which sorts as the time does
    kind: str  # as `_kind` gives it
    digest: str  # of the text its vector is computed from (`item_text`)
    written: int  # a hash of the whole row: a write that changed nothing is not indexed again


@dataclass(frozen=True)
class _Snapshot:
    index: tantivy.Index
    searcher: tantivy.Searcher
    entries: dict[str, Entry]  # id -> Entry, for every item of the archive
    marker: int
    corrections: dict[str, tuple[str, str] | None]  # word -> (term, surface) (see _correct)


def item_text(title: str, summary: str | None) -> str:
    """What an item's vector is computed from: its title and abstract."""
    return f"{title}. {' '.join((summary or '').split())}"


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _entry(row: dict[str, Any]) -> Entry:
    return Entry(row["published"], _kind(row), digest(item_text(row["title"], row["summary"])), _hash(row))


def _hash(row: dict[str, Any]) -> int:
    return hash(tuple(row.values()))


def items(store: Store, ids: Sequence[str]) -> list[Item]:
    """The items of `ids` as the database holds them, in that order (one gone since is left out)."""
    found = store.get_items(list(dict.fromkeys(ids)))
    return [found[item_id] for item_id in ids if item_id in found]


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
    """The index of the whole archive (the marker is read first: the rows are at least that new), its rows
    read a page at a time (`Store.each_item`) and kept only as Entries. Given the previous snapshot, only the
    rows written since its marker are read (`Store.changed_items`) and re-indexed, in its index (unless more
    than REBUILD_SHARE of them changed: then a new index, whose statistics hold no deleted documents). Items
    are never deleted by the bot: when the archive holds fewer items than the snapshot's entries with the
    changes applied, some were, and the whole archive is read again."""
    marker = store.change_marker()
    if previous is not None:
        written, count = store.changed_items(previous.marker)
        changed = [row for row in written if _written(previous, row)]
        entries = previous.entries | {row["id"]: _entry(row) for row in changed}
        if len(entries) == count and len(changed) <= REBUILD_SHARE * max(count, 1):
            index = previous.index
            writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
            for row in changed:
                writer.delete_documents_by_term("id", row["id"])
                writer.add_document(_document(row))
            return _committed(index, writer, entries, marker)
    return _new_index(store.each_item(), marker)


def _written(previous: _Snapshot, row: dict[str, Any]) -> bool:
    """Whether `row` differs from what `previous` indexed of it (or is new)."""
    known = previous.entries.get(row["id"])
    return known is None or known.written != _hash(row)


def _new_index(rows: Iterable[dict[str, Any]], marker: int) -> _Snapshot:
    index = tantivy.Index(SCHEMA)
    index.register_tokenizer(ANALYZER_NAME, analyzer())
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
    entries = {}
    for row in rows:
        writer.add_document(_document(row))
        entries[row["id"]] = _entry(row)
    snapshot = _committed(index, writer, entries, marker)
    memory.give_back()  # the writer's buffers and the rows read
    return snapshot


def _committed(
    index: tantivy.Index, writer: tantivy.IndexWriter, entries: dict[str, Entry], marker: int
) -> _Snapshot:
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return _Snapshot(index, index.searcher(), entries, marker, {})


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
    """The item's kind as `bot.store.models.row_item` gives it (without parsing every link)."""
    if row["kind"] == "update" or ("/updates/" in row["link"] and kind_of(row["link"]) == "update"):
        return "update"
    return "research"


class SearchIndex:
    """The archive's search index (see the module docstring); safe to share between threads.

    `model` (a function returning an Embedder, e.g. `functools.partial(bot.search.embed.load, settings)`)
    turns on search by meaning: it is called once, when the first search needs it (or in the background
    after `start`); until the vectors are ready, or when the model fails to load, searches match words only
    and `Found.note` says so. Without it, search is by keywords only."""

    def __init__(self, store: Store, *, ready_wait: float = READY_WAIT,
                 model: Callable[[], Embedder] | None = None, answers: int = MAX_FOUND) -> None:
        self.store = store
        self.ready_wait = ready_wait
        self.answers = answers  # how many searches' answers are kept (0: none, as benchmarks of the engine)
        self._snapshot: _Snapshot | None = None
        self._lock = threading.Lock()
        self._starting = False
        self._model_loader = model
        self._model: Embedder | None = None
        self._model_error: str | None = None
        self._vectors: Vectors | None = None
        self._vector_lock = threading.Lock()
        # The answers to the latest searches, each kept with the snapshot and vectors it came from and good
        # only while both are current: a team searches the same topics again and again.
        self._found: OrderedDict[tuple[Query, int], tuple[_Snapshot, Vectors | None, Found]] = OrderedDict()
        self._lock_found = threading.Lock()
        self._background = False  # start() was called: the model loads there, searches never wait for it
        self._refreshing = threading.Event()  # a background thread is embedding new items

    @property
    def meaning(self) -> bool:
        """Whether search by meaning is configured."""
        return self._model_loader is not None

    def start(self) -> threading.Thread:
        """Build the index in a background thread (serve's start-up); searches meanwhile wait for it. Then
        the embedding model loads and the vectors are read (or computed) there too; searches meanwhile match
        words only."""
        self._lock.acquire()  # held from now on, so no search can start a build of its own meanwhile
        self._starting = True
        self._background = True
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
        if self.meaning:
            try:
                self.vectors(self.current())
            except BotError as exc:
                log.warning("event=vectors_unavailable reason=%r", str(exc))

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

    # search by meaning -------------------------------------------------------------------------------------

    def model(self) -> Embedder:
        """The embedding model, loaded on first use (EmbeddingError, one line, when it cannot be)."""
        from bot.errors import EmbeddingError

        if self._model is not None:
            return self._model
        if self._model_error is not None or self._model_loader is None:
            raise EmbeddingError(self._model_error or "search by meaning is not configured")
        with self._vector_lock:
            if self._model is None and self._model_error is None:
                try:
                    self._model = self._model_loader()
                except EmbeddingError as exc:
                    self._model_error = str(exc)
                    log.warning("event=embedding_model_failed reason=%r", str(exc))
                    raise
            if self._model is None:
                raise EmbeddingError(self._model_error or "the embedding model is not loaded")
            return self._model

    def vectors(self, snapshot: _Snapshot, store: Store | None = None, progress: Progress | None = None,
                wait: bool = True, recompute: bool = False) -> Vectors | None:
        """The vectors of `snapshot`'s items (computed for those without one; for all with `recompute`).
        None when another thread is computing them and `wait` is false."""
        from bot.search.vectors import sync

        current = self._vectors
        if current is not None and current.marker == snapshot.marker and not recompute:
            return current
        model = self.model()
        if not self._vector_lock.acquire(blocking=wait):
            return None
        try:
            current = self._vectors
            if current is None or current.marker != snapshot.marker or recompute:
                current = self._vectors = sync(store or self.store, model, snapshot.entries, snapshot.marker,
                                               None if recompute else current, progress, recompute)
            return current
        finally:
            self._vector_lock.release()

    def _refresh_in_background(self) -> None:
        if self._refreshing.is_set():
            return
        self._refreshing.set()

        def refresh() -> None:
            try:
                self.vectors(self.current())
            except BotError as exc:
                log.warning("event=vectors_refresh_failed reason=%r", str(exc))
            finally:
                self._refreshing.clear()

        threading.Thread(target=refresh, name="search-vectors", daemon=True).start()

    def _ready_vectors(self, snapshot: _Snapshot, store: Store | None) -> tuple[Vectors | None, str | None]:
        """The vectors to search with, or None and a note saying why not."""
        if not self.meaning:
            return None, None
        if self._background and (self._model is None or self._vectors is None) and self._model_error is None:
            return None, LOADING_NOTE
        previous = self._vectors
        if self._background and previous is not None and previous.marker != snapshot.marker:
            # serve: new items are embedded in the background; until then they match by words only
            self._refresh_in_background()
            return previous, None
        try:
            vectors = self.vectors(snapshot, store, wait=not self._background or self._vectors is None)
        except BotError as exc:
            return None, f"Search by meaning is unavailable ({' '.join(str(exc).split())[:150]}); these " \
                         "results match your words only."
        if vectors is None:  # another thread is embedding new items: the previous vectors serve meanwhile
            vectors = self._vectors
        return vectors, None

    # searching ---------------------------------------------------------------------------------------------

    def search(self, query: Query, limit: int, store: Store | None = None) -> Found:
        """The best `limit` hits for `query` (see the module docstring); `store` as in `current`.

        With search by meaning, the ranking blends keyword and meaning scores (bot.search.hybrid)."""
        snapshot = self.current(store)
        with self._lock_found:
            held = self._found.get((query, limit))
            if held is not None and held[0] is snapshot and held[1] is self._vectors:
                self._found.move_to_end((query, limit))
                return replace(held[2], hits=list(held[2].hits))
        found = self._search(snapshot, query, limit, store)
        if found.note is None and self.answers:  # a complete answer: the same for this snapshot and vectors
            with self._lock_found:
                self._found[(query, limit)] = (snapshot, self._vectors, found)
                while len(self._found) > self.answers:
                    self._found.popitem(last=False)
        return found

    def _search(self, snapshot: _Snapshot, query: Query, limit: int, store: Store | None) -> Found:
        if query.terms and not query.phrases and all(t in STOPWORDS for t in query.terms):
            raise SearchError("Those are all common words (like 'the' or 'how'); add a word that says what "
                              "you are looking for.")
        expansions = glossary.expand(list(query.terms), query.text)
        reader = store or self.store
        text, searched_for = _text_query(snapshot, query, reader, expansions)
        clauses = [] if text is None else [(tantivy.Occur.Must, text)]
        clauses += filter_clauses(query)
        expanded = glossary.shown(expansions)
        dated = query.filters.since or query.filters.until
        if not clauses or (text is None and not query.filters.authors and not dated):
            return Found([], searched_for, expanded)
        keyword = combined(clauses)
        vectors, note = (None, None) if text is None else self._ready_vectors(snapshot, store)
        if vectors is None:
            return Found(ranked_hits(snapshot, keyword, limit, reader), searched_for, expanded, note)
        from bot.search import hybrid  # numpy's boundary: imported with the model

        try:
            hits = hybrid.rank(self.model(), snapshot, vectors, query, expansions, keyword, limit, reader)
        except BotError as exc:  # the endpoint failed on the query: words only
            note = f"Search by meaning is unavailable ({' '.join(str(exc).split())[:150]}); these results " \
                   "match your words only."
            return Found(ranked_hits(snapshot, keyword, limit, reader), searched_for, expanded, note)
        return Found(hits, searched_for, expanded)

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


def _text_query(
    snapshot: _Snapshot, query: Query, store: Store, expansions: list[glossary.Expansion] | None = None
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


def _correct(snapshot: _Snapshot, word: str, stem: str, store: Store) -> tuple[str, str] | None:
    """For a word no indexed term matches: the nearest indexed term within the fuzzy distance (tantivy's
    fuzzy term query finds the documents; their words name the term: nearest, then most frequent), and the
    word as most often written there."""
    if word in snapshot.corrections:
        return snapshot.corrections[word]
    snapshot.corrections[word] = found = _nearest(snapshot, stem, store)
    return found


def _nearest(snapshot: _Snapshot, stem: str, store: Store) -> tuple[str, str] | None:
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


def _with_ties(searcher: tantivy.Searcher, query: tantivy.Query, limit: int) -> list[tuple[Any, Any]]:
    """tantivy's best hits for `query`: at least `limit`, and every hit tied with the `limit`-th (read in
    growing pages), so which of the tied ones are kept never depends on how tantivy breaks ties."""
    wanted = limit + 1
    while True:
        hits = searcher.search(query, wanted, count=False).hits
        if len(hits) < wanted or hits[-1][0] < hits[limit - 1][0]:
            return hits
        wanted *= 4


def keyword_scores(snapshot: _Snapshot, query: tantivy.Query, limit: int) -> list[tuple[float, str]]:
    """The best `limit` (score, id), best first, without building Items (the hybrid ranking's candidates);
    ties with the last place are all read, as in `ranked`, so both stores pick the same."""
    searcher = snapshot.searcher
    hits = _with_ties(searcher, query, limit)
    found = [(round(float(score), 6), str(searcher.doc(address).get_first("id"))) for score, address in hits]
    return sorted(found, key=lambda hit: (-hit[0], hit[1]))[:limit]


def ranked_hits(snapshot: _Snapshot, query: tantivy.Query, limit: int, store: Store) -> list[SearchHit]:
    """The best `limit` hits: score, then newest, then id. Hits tied with the last place are all read, so
    the order never depends on how tantivy breaks ties."""
    searcher = snapshot.searcher
    hits = _with_ties(searcher, query, limit)
    # (score, published, id): published as the row's ISO-8601 UTC text, which sorts as the time does; only
    # the hits kept become Items.
    ranked: list[tuple[float, str, str]] = []
    for score, address in hits:
        key = str(searcher.doc(address).get_first("id"))
        ranked.append((round(float(score), 6), snapshot.entries[key].published, key))
    ranked.sort(key=lambda hit: hit[2])
    ranked.sort(key=lambda hit: hit[:2], reverse=True)
    return hits_of(store, ranked[:limit])


def hits_of(store: Store, ranked: list[tuple[float, str, str]]) -> list[SearchHit]:
    """(score, published, id), best first, as SearchHits: the items read from the database."""
    found = store.get_items([key for _, _, key in ranked])
    return [SearchHit(found[key], score) for score, _, key in ranked if key in found]


def meaning_model(settings: Settings) -> Callable[[], Embedder]:
    """The model loader `SearchIndex(model=...)` takes, for these settings (the embeddings endpoint when
    configured, else the bundled model); numpy and the model are imported when it is called."""

    def load() -> Embedder:
        from bot.search.embed import load as load_model

        return load_model(settings)

    return load
