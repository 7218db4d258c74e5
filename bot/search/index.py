"""The one search engine: a tantivy index in RAM, derived from the archive (the database stays the source of
truth), the same for both stores.

    index = SearchIndex(store)              # built on first use, or in the background with index.start()
    index.search(parse_query("captoning"), limit=5) -> Found(hits=[...], searched_for="captioning")

Ranking: BM25 over the index of bot.search.engine (which says what is indexed, and what memory it keeps),
of the query as bot.search.keywords builds it (loose words, phrases, prefixes, misspellings, filters); with
search by meaning (`model`), bot.search.hybrid blends it with the similarity of meaning. A query of only
common words (STOPWORDS) is refused in one line.

Freshness: every search reads the store's change marker (a counter bumped by triggers on items, one tiny
query); when it moved, the rows written since (each row is stamped with its last write's marker) are read and
re-indexed (or the whole index rebuilt, see `build`) before the search runs. A search that arrives while the
first build runs (`start`, at serve's start-up) waits for it at most READY_WAIT seconds, then gets a one-line
answer.

Search by meaning (`model`): its model and the archive's vectors are bot.search.meaning's state, kept
beside the index; in serve (after `start`) they load in the background, and searches match words only
meanwhile, their note saying why.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import tantivy
from msgspec import Struct
from msgspec.structs import replace

from bot.config import Settings
from bot.errors import BotError, NothingFound, SearchError, SearchUnavailable
from bot.models import SearchFilters, SearchHit
from bot.search import glossary
from bot.search.engine import SCHEMA, Snapshot, build, newest_hits, ranked_hits
from bot.search.keywords import as_spelled, combined, filter_clauses, spelled, text_query, whole_last
from bot.search.meaning import Meaning, unavailable
from bot.search.query import MAX_QUERY_CHARS, Query, parse_query
from bot.search.words import STOPWORDS
from bot.store import Store

if TYPE_CHECKING:
    from bot.search.embed import Embedder
    from bot.search.vectors import Progress, Vectors

READY_WAIT = 2.0
MAX_FOUND = 256  # searches whose answers are kept (SearchIndex._found)
CUT_NOTE = f"Your search was longer than {MAX_QUERY_CHARS} characters; I searched its first words."
UNCLOSED_NOTE = ("A quote mark was not closed, so I searched its words loose, not as a phrase; close it to "
                 "search the phrase.")


class Found(Struct, frozen=True):
    """Ranked hits, and the query as searched when a misspelt word was searched as another (else None)."""

    hits: list[SearchHit]
    searched_for: str | None = None
    expanded: str | None = None  # the glossary forms searched too: "LLM, large language model"
    note: str | None = None  # why these results match words only (search by meaning unavailable), or that
    # a long query was cut, or that a quote mark was left open, or which words no result holds (`absent`)
    total: int = 0  # how many items earned a place (hits are the best `limit` of them)
    missing: tuple[str, ...] = ()  # words of the query that no item holds
    meant: tuple[tuple[str, str], ...] = ()  # when nothing was found: (a quoted phrase, as search would spell
    # it) for each phrase holding a misspelt word ("image captoning", "image captioning")
    whole: bool = False  # the last word, typed as if it might be cut short, was searched whole: a word the
    # archive holds (keywords.whole_last)
    unfiltered: int = 0  # when the filters left nothing: the results of the words alone (0 when none holds
    # them: a match by meaning alone is no reason to drop a filter)

    def as_searched(self, query: Query) -> Query:
        """`query` as it was searched: the words typed right when a misspelt word was searched as another."""
        return parse_query(self.searched_for) if self.searched_for else query

    def last_as_prefix(self, query: Query) -> bool:
        """Whether the last word of `query` (the query these hits answer) stood for every word it starts: not
        when a misspelt word was searched as typed right, nor when it was searched whole (`whole`). A reply
        bolds, and a summary quotes, by this rule, so neither shows a word the search did not match."""
        return query.last_is_prefix and not (self.searched_for or self.whole)


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
        self._snapshot: Snapshot | None = None
        self._lock = threading.Lock()
        self._starting = False
        self._meaning = Meaning(store, model, self.current)
        # The answers to the latest searches, each kept with the snapshot and vectors it came from and good
        # only while both are current: a team searches the same topics again and again.
        self._found: OrderedDict[tuple[Query, int], tuple[Snapshot, Vectors | None, Found]] = OrderedDict()
        self._lock_found = threading.Lock()

    @property
    def meaning(self) -> bool:
        """Whether search by meaning is configured."""
        return self._meaning.configured

    def start(self) -> threading.Thread:
        """Build the index in a background thread (serve's start-up); searches meanwhile wait for it. Then
        the embedding model loads and the vectors are read (or computed) there too; searches meanwhile match
        words only."""
        self._lock.acquire()  # held from now on, so no search can start a build of its own meanwhile
        self._starting = True
        self._meaning.start()
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
            self._meaning.load()

    def current(self, store: Store | None = None) -> Snapshot:
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

    # search by meaning (bot.search.meaning) ----------------------------------------------------------------

    def model(self) -> Embedder:
        """The embedding model, loaded on first use (EmbeddingError, one line, when it cannot be)."""
        return self._meaning.model()

    def vectors(self, snapshot: Snapshot, store: Store | None = None, progress: Progress | None = None,
                wait: bool = True, recompute: bool = False) -> Vectors | None:
        """The vectors of `snapshot`'s items (computed for those without one; for all with `recompute`).
        None when another thread is computing them and `wait` is false."""
        return self._meaning.vectors(snapshot, store, progress, wait, recompute)

    def usable_vectors(self, snapshot: Snapshot, store: Store | None = None) -> Vectors | None:
        """The vectors to use now for `snapshot` (`Meaning.usable`): in serve, never computed in the calling
        thread. None while there are none."""
        return self._meaning.usable(snapshot, store)

    # searching ---------------------------------------------------------------------------------------------

    def search(self, query: Query, limit: int, store: Store | None = None) -> Found:
        """The best `limit` hits for `query` (see the module docstring); `store` as in `current`.

        With search by meaning, the ranking blends keyword and meaning scores (bot.search.hybrid)."""
        snapshot = self.current(store)
        self._meaning.follow_endpoint()  # (before the answers kept: they are the model's)
        with self._lock_found:
            held = self._found.get((query, limit))
            if held is not None and held[0] is snapshot and held[1] is self._meaning.held:
                self._found.move_to_end((query, limit))
                return _told_absent(replace(held[2], hits=list(held[2].hits)))
        found = self._search(snapshot, query, limit, store)
        if found.note is None and self.answers:  # a complete answer: the same for this snapshot and vectors
            with self._lock_found:
                self._found[(query, limit)] = (snapshot, self._meaning.held, found)
                while len(self._found) > self.answers:
                    self._found.popitem(last=False)
        return _told_absent(found)

    def suggest(self, words: Sequence[str], store: Store | None = None, missing: Sequence[str] = (),
                besides: str | None = None) -> list[str]:
        """Topics of the glossary to try when nothing matched `words` (`glossary.suggest`): only those that
        items hold (a search's best hit matches the topic's words, not its meaning alone), so a suggestion
        never leads to another empty reply, nor to items only near a topic the archive does not cover. When
        a word is in no item (`missing`, as the search of `words` found: "quantum computing"), only a topic
        the words name whole ("ASR for kids": automatic speech recognition): one sharing the other word would
        be about something else (computer vision). `besides` (an item's id, `words` its title's): topics the
        words name whole that items other than it hold, what to search when nothing is close to it."""

        def found(topic: str) -> bool:
            try:
                hits = self.search(parse_query(topic), 1 if besides is None else 2, store).hits
            except SearchError:
                return False
            return any(not hit.by_meaning and hit.item.id != besides for hit in hits)

        return glossary.suggest(words, found=found, whole=bool(missing) or besides is not None)

    def _search(self, snapshot: Snapshot, query: Query, limit: int, store: Store | None) -> Found:
        if query.links:
            return self._linked(snapshot, query, limit, store)
        whole = whole_last(snapshot, query)  # "vision pro": "pro" is no "proud"
        found = self._ranked(snapshot, whole, limit, store)
        if whole is not query:
            found = replace(found, whole=True)
        if found.hits:
            return found
        if query.terms and query.filters != SearchFilters():  # the filters left nothing: do the words alone?
            alone = self._ranked(snapshot, dataclasses.replace(whole, filters=SearchFilters()), 1, store)
            if alone.hits and not alone.hits[0].by_meaning:
                found = replace(found, unfiltered=alone.total)
        if not query.phrases:
            return found
        # Quotes mean the phrase as typed, so a misspelt one is searched as typed (and found nowhere); the
        # answer says what was most likely meant, as `subscribe` does for a keyword.
        reader = store or self.store
        typed = [" ".join(phrase) for phrase in query.phrases]
        meant = [(words, right) for words in typed if (right := as_spelled(snapshot, words, reader))]
        return replace(found, meant=tuple(meant))

    def _linked(self, snapshot: Snapshot, query: Query, limit: int, store: Store | None) -> Found:
        """A query of links (a post's address pasted in): the items at them; else the words of their
        addresses, said so; else NothingFound (one line)."""
        reader = store or self.store
        items = [item for link in query.links if (item := reader.item_by_link(link)) is not None]
        if items:
            kept = [item for item in items if _passes(snapshot, item.id, query)]  # `<link> type:paper`
            return Found([SearchHit(item, 1.0) for item in kept[:limit]], total=len(kept),
                         unfiltered=0 if kept else len(items))
        one = len(query.links) == 1
        gone = "That link is not in the archive" if one else "Those links are not in the archive"
        if all(term in STOPWORDS for term in query.terms):  # none, or only common words (…/a)
            raise NothingFound(f"{gone}: {query.links[0][:100]}")
        found = self._search(snapshot, dataclasses.replace(query, links=()), limit, store)
        said = f"{gone}; searched the words of {'its' if one else 'their'} address: {query.text}"
        return replace(found, note=_notes(said, found.note))

    def _ranked(self, snapshot: Snapshot, query: Query, limit: int, store: Store | None) -> Found:
        if query.terms and not query.phrases and all(t in STOPWORDS for t in query.terms):
            raise SearchError("Those are all common words (like 'the' or 'how'); add a word that says what "
                              "you are looking for.")
        reader = store or self.store
        query, searched_for = spelled(snapshot, query, reader)  # as if typed right, from here on
        expansions = glossary.expand(list(query.terms), query.text)
        words = text_query(snapshot, query, expansions)
        text = words.query
        clauses = [] if text is None else [(tantivy.Occur.Must, text)]
        clauses += filter_clauses(query, snapshot)
        expanded = glossary.shown(expansions)
        selects = (query.filters.since or query.filters.until or query.filters.kind or query.filters.venues
                   or query.filters.has)  # ... alone, newest first
        told = _notes(CUT_NOTE if query.cut else None, UNCLOSED_NOTE if query.unclosed else None,
                      left_out(query.left_out) if query.left_out else None)
        if not clauses or (text is None and not query.filters.authors and not selects):
            return Found([], searched_for, expanded, told, 0, words.absent)
        keyword = combined(clauses)
        if text is None:  # filters only: the newest items they select
            hits, total = newest_hits(snapshot, keyword, limit, reader)
            return Found(hits, searched_for, expanded, told, total)
        model, vectors, note = self._meaning.ready(snapshot, store)
        if model is None or vectors is None:
            hits, total = ranked_hits(snapshot, keyword, limit, reader)
            return Found(hits, searched_for, expanded, _notes(note, told), total, words.absent)
        from bot.search import hybrid  # numpy's boundary: imported with the model

        try:
            ranked = hybrid.rank(model, snapshot, vectors, query, expansions, words, keyword, limit, reader)
        except BotError as exc:  # the endpoint failed on the query, or is out: words only
            note = unavailable(exc)
            hits, total = ranked_hits(snapshot, keyword, limit, reader)
            return Found(hits, searched_for, expanded, _notes(note, told), total, words.absent)
        return Found(ranked.hits, searched_for, expanded, told, ranked.total, words.absent)


def _passes(snapshot: Snapshot, item_id: str, query: Query) -> bool:
    """Whether the item `item_id` passes `query`'s filters (and words typed after a minus)."""
    clauses = filter_clauses(query, snapshot)
    if not clauses:
        return True
    at = tantivy.Query.term_query(SCHEMA, "id", item_id)
    return bool(snapshot.searcher.search(combined([(tantivy.Occur.Must, at), *clauses]), 1).hits)


def absent(missing: Sequence[str]) -> str:
    """Said beside results when words of the query are in no item, so nobody takes them for results about
    those words: "No item holds “topological”: these were found without it." (one line)."""
    said = _named([word[:40] for word in missing[:3]], "or")
    return f"No item holds {said}: these were found without {'it' if len(missing) == 1 else 'them'}."


def _told_absent(found: Found) -> Found:
    """`found` with the `absent` line in its note when it has results and words no item holds (added after
    the answer cache, which keeps only answers without a note)."""
    if found.hits and found.missing:
        return replace(found, note=_notes(found.note, absent(found.missing)))
    return found


def left_out(quoted: Sequence[str]) -> str:
    """Said when quoted phrases of only common words ("of the"), which decide nothing, were left out and the
    rest was searched: one line however many there were."""
    said = _named([phrase[:60] for phrase in quoted[:3]], "and")
    return f"{said} {'is' if len(quoted) == 1 else 'are'} only common words, so I searched the rest."


def _named(words: Sequence[str], conjunction: str) -> str:
    """Words quoted and listed as a sentence names them: "“a”", "“a” or “b”", "“a”, “b” and “c”"."""
    named = [f"“{word}”" for word in words]
    return named[0] if len(named) == 1 else f"{', '.join(named[:-1])} {conjunction} {named[-1]}"


def _notes(*notes: str | None) -> str | None:
    return " ".join(n for n in notes if n) or None


def meaning_model(settings: Settings) -> Callable[[], Embedder]:
    """The model loader `SearchIndex(model=...)` takes, for these settings (the embeddings endpoint when
    configured, else the bundled model); numpy and the model are imported when it is called."""

    def load() -> Embedder:
        from bot.search.embed import load as load_model

        return load_model(settings)

    return load
