"""Search by meaning with vectors missing: none yet, a failed load, or fewer than the archive's items (new
items not embedded yet, the database's connections killed). A search answers by its words and says search
by meaning is catching up, never "Something went wrong"; the vectors are completed in the background and
search by meaning comes back. On both stores, and on PostgreSQL with its backends really terminated."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import tantivy
from msgspec.structs import replace

from bot.errors import StoreError
from bot.search import hybrid
from bot.search.embed import StaticModel
from bot.search.index import SearchIndex
from bot.search.keywords import combined, text_query
from bot.search.meaning import CATCHING_UP_NOTE
from bot.search.query import parse_query, search
from bot.search.vectors import sync
from bot.store import Store, open_store
from tests.fakes.archive import corpus_items
from tests.test_db_reconnect import hold_pooled_connections, terminate, with_app_name

MODEL = StaticModel.bundled
WAIT = 30.0  # seconds: a bound on a busy machine, never a measure


def ids(found) -> list[str]:
    return [hit.item.id for hit in found.hits]


def by_words(store: Store, text: str) -> list[str]:
    """What search without a model lists for `text`."""
    return ids(search(SearchIndex(store), text))


def settles(condition: Callable[[], bool]) -> bool:
    """Whether `condition` holds within WAIT seconds (the background embedding finishing)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def started_on_an_empty_archive(store: Store, model: Callable[[], object] = MODEL) -> SearchIndex:
    """serve's index, started (and its vectors loaded) before the archive held any item."""
    index = SearchIndex(store, model=model)  # type: ignore[arg-type]
    index.start().join(WAIT)
    return index


def test_items_that_came_after_the_vectors_are_searched_by_their_words_until_they_have_theirs(
    store: Store,
) -> None:
    index = started_on_an_empty_archive(store)
    store.add_items(corpus_items())  # a poll, a backfill: none of them has a vector yet

    found = search(index, "privacy")
    assert found.note == CATCHING_UP_NOTE
    assert ids(found) == by_words(store, "privacy") and found.hits

    assert settles(lambda: search(index, "privacy").note is None)  # embedded in the background
    assert len(store.item_vectors(MODEL().name)) == len(corpus_items())
    assert any(hit.by_meaning for hit in search(index, "a speaker hearing you across a noisy kitchen").hits)


def test_a_new_item_is_found_by_its_words_at_once_and_by_meaning_once_embedded(store: Store) -> None:
    store.add_items(corpus_items())
    index = SearchIndex(store, model=MODEL)
    index.start().join(WAIT)
    assert search(index, "privacy").note is None
    item = next(i for i in corpus_items() if "Privacy" in i.title)
    new = replace(item, id=item.id + "-new", guid=item.guid + "-new", link=item.link + "-new")
    store.add_items([new])

    found = search(index, item.title)
    assert found.note == CATCHING_UP_NOTE and new.id in ids(found)
    assert settles(lambda: search(index, item.title).note is None)
    assert new.id in ids(search(index, item.title)) and new.id in store.item_vectors(MODEL().name)


def test_a_failed_load_is_tried_again_in_the_background(store: Store) -> None:
    store.add_items(corpus_items())
    calls: list[int] = []

    def fails_once() -> StaticModel:
        calls.append(1)
        if len(calls) == 1:
            raise StoreError("lost the connection to the PostgreSQL database (a test)")
        return MODEL()

    index = SearchIndex(store, model=fails_once)
    index.start().join(WAIT)
    found = search(index, "privacy")
    assert found.note == CATCHING_UP_NOTE and ids(found) == by_words(store, "privacy")
    assert settles(lambda: search(index, "privacy").note is None)
    assert len(calls) == 2


def test_ranking_with_fewer_vectors_than_items_lists_the_words_hits(store: Store) -> None:
    """hybrid.rank itself, given vectors of none, or of some, of the snapshot's items: the items without a
    vector are still listed by their words (no IndexError)."""
    store.add_items(corpus_items())
    index = SearchIndex(store)
    snapshot = index.current()
    query = parse_query("privacy")
    words = text_query(snapshot, query, [])
    keyword = combined([(tantivy.Occur.Must, words.query)])
    listed = ids(search(SearchIndex(store), "privacy", limit=50))
    for kept in (0, len(snapshot.entries) // 2):
        entries = dict(list(snapshot.entries.items())[:kept])
        vectors = sync(store, MODEL(), entries, snapshot.marker)
        ranked = hybrid.rank(MODEL(), snapshot, vectors, query, [], words, keyword, 50, store)
        assert set(listed) == {hit.item.id for hit in ranked.hits if not hit.by_meaning} and listed


@pytest.mark.postgres
def test_a_search_after_the_backends_were_terminated_three_times_answers_by_its_words(
    pg_schema_url: str,
) -> None:
    app_name = f"gaps_{time.monotonic_ns() % 10**10}"
    store = open_store(with_app_name(pg_schema_url, app_name))
    store.migrate()
    try:
        index = started_on_an_empty_archive(store)
        store.add_items(corpus_items())
        for _ in range(3):
            hold_pooled_connections(store)
            assert terminate(app_name) >= 1

        found = search(index, "privacy")  # was: IndexError in hybrid.rank, "Something went wrong"
        assert found.note == CATCHING_UP_NOTE and ids(found) == by_words(store, "privacy")
        assert settles(lambda: search(index, "privacy").note is None)
    finally:
        store.close()
