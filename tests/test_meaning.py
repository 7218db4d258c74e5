"""Search by meaning over the 72 real posts: hybrid ranking (keywords never worse: an exact title or a rare
word still first), the same on both stores, vectors stored once per item and model, a model that is not ready
or fails leaves keyword search working, and related items."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bot.errors import EmbeddingError, SearchError
from bot.search.authors import matches, typed
from bot.search.embed import StaticModel
from bot.search.index import STOPWORDS, SearchIndex
from bot.search.meaning import LOADING_NOTE
from bot.search.query import parse_query, search
from bot.search.related import find_item, related
from bot.store import SQLiteStore, Store, open_store
from tests.test_search_parity import CORPUS, filled

MODEL = StaticModel.bundled


def hybrid(store: Store) -> SearchIndex:
    return SearchIndex(store, model=MODEL)


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return filled(SQLiteStore(Path(tmp_path_factory.mktemp("meaning")) / "corpus.db"))


def ids(found) -> list[str]:
    return [h.item.id for h in found.hits]


def test_every_exact_title_still_comes_first(corpus_store: Store) -> None:
    index = hybrid(corpus_store)
    for post in CORPUS:
        title = " ".join(post["title"].replace('"', " ").split())
        assert ids(search(index, title, limit=3))[0] == post["link"], title


def test_a_rare_word_still_comes_first(corpus_store: Store) -> None:
    index = hybrid(corpus_store)
    for word, link in [("dysfluent", "dysfluent"), ("HomePod", "homepod"), ("Keyframer", "keyframer"),
                       ("bandit", "bandit")]:
        first = search(index, word, limit=3).hits[0].item
        assert link in (first.link + first.title).lower(), word


def test_a_description_in_other_words_finds_what_keywords_miss(corpus_store: Store) -> None:
    query = "a speaker hearing you across a noisy kitchen"
    homepod = next(p["link"] for p in CORPUS if "HomePod" in p["title"])
    assert homepod not in ids(search(SearchIndex(corpus_store), query, limit=3))
    assert homepod in ids(search(hybrid(corpus_store), query, limit=3))


def test_filters_apply_to_matches_by_meaning(corpus_store: Store) -> None:
    index = hybrid(corpus_store)
    found = search(index, "turning text into a natural sounding voice since:2025-01-01", limit=10)
    assert found.hits and all(h.item.published.year >= 2025 for h in found.hits)
    updates = search(index, "learning from people's data without seeing it type:update", limit=10)
    assert updates.hits and all(h.item.kind == "update" for h in updates.hits)
    by = search(index, 'speech author:"Siri Team"', limit=10)
    # each hit has an author the filter's rule takes for that name (bot.search.authors: the first and last
    # words, in order, so "Siri Speech Recognition Team" too)
    assert by.hits and all(any(matches(typed("Siri Team"), a) for a in h.item.authors) for h in by.hits)


@pytest.mark.postgres
def test_both_stores_give_the_same_hybrid_top_ten(tmp_path: Path, pg_schema_url: str) -> None:
    lite = hybrid(filled(SQLiteStore(tmp_path / "parity.db")))
    pg = hybrid(filled(open_store(pg_schema_url)))
    for query in ["cutting out the main subject of a photo", "LLM", "how does Hey Siri work?",
                  "privacy since:2024-01-01", "voice trigger type:paper"]:
        on_sqlite, on_postgres = search(lite, query), search(pg, query)
        assert on_sqlite.hits, query
        ranked = [(h.item.id, h.score) for h in on_sqlite.hits]
        assert ranked == [(h.item.id, h.score) for h in on_postgres.hits], query


def test_vectors_are_stored_once_per_item_and_model(store: Store) -> None:
    filled(store)
    calls: list[int] = []
    model = MODEL()

    class Counting:
        name = model.name

        def embed(self, texts):
            calls.append(len(texts))
            return model.embed(texts)

    search(SearchIndex(store, model=Counting), "privacy")
    assert sum(calls) == len(CORPUS) + 1  # every item, then the query
    assert len(store.item_vectors(model.name)) == len(CORPUS)
    calls.clear()
    search(SearchIndex(store, model=Counting), "privacy")  # another process: reads them, embeds the query
    assert calls == [1]


def test_an_edited_item_and_a_new_model_are_embedded_again(store: Store) -> None:
    filled(store)
    index = hybrid(store)
    search(index, "privacy")
    first = store.item_vectors(MODEL().name)
    post = CORPUS[0]
    item = next(i for i in store.latest(100) if i.id == post["link"])
    from msgspec.structs import replace
    store.add_items([replace(item, summary="A new abstract about homomorphic encryption.")])
    search(index, "privacy")
    again = store.item_vectors(MODEL().name)
    assert again[post["link"]] != first[post["link"]]
    assert {k: v for k, v in again.items() if k != post["link"]} == \
        {k: v for k, v in first.items() if k != post["link"]}

    class Other:
        name = "other-model"

        def embed(self, texts):
            return MODEL().embed(texts)[:, ::-1].copy()

    search(SearchIndex(store, model=Other), "privacy")
    assert len(store.item_vectors("other-model")) == len(CORPUS)
    assert store.drop_item_vectors("other-model") == len(CORPUS)
    assert store.item_vectors(MODEL().name) == {}


def test_a_search_before_the_model_is_ready_matches_words_and_says_so(corpus_store: Store) -> None:
    release = threading.Event()

    def slow():
        release.wait(10)
        return MODEL()

    index = SearchIndex(corpus_store, model=slow)
    thread = index.start()
    found = search(index, "privacy")
    assert found.hits and found.note == LOADING_NOTE
    assert ids(found) == ids(search(SearchIndex(corpus_store), "privacy"))
    release.set()
    thread.join(10)
    assert search(index, "privacy").note is None


def test_a_model_that_fails_to_load_leaves_keyword_search_working(corpus_store: Store) -> None:
    def broken():
        raise EmbeddingError("the embedding model could not be loaded: a test")

    found = search(SearchIndex(corpus_store, model=broken), "privacy")
    assert ids(found) == ids(search(SearchIndex(corpus_store), "privacy"))
    assert found.note is not None and "could not be loaded" in found.note and "\n" not in found.note


@pytest.mark.parametrize("text", ["", "   ", "🙂🙂", "the of and", "how is it"])
def test_empty_emoji_or_stop_word_queries_are_one_line(corpus_store: Store, text: str) -> None:
    with pytest.raises(SearchError) as caught:
        search(hybrid(corpus_store), text)
    assert "\n" not in str(caught.value)


def test_related_items_are_near_and_say_what_they_share(corpus_store: Store) -> None:
    index = hybrid(corpus_store)
    item = find_item(index, "https://machinelearning.apple.com/research/hey-siri/")
    assert item.title.startswith("Hey Siri")
    nearest = related(index, item, 5)
    assert nearest and item.id not in [r.item.id for r in nearest]
    assert "Personalized Hey Siri" in [r.item.title for r in nearest]
    assert all(r.shares for r in nearest)
    assert find_item(index, "<https://machinelearning.apple.com/research/hey-siri|Hey Siri>").id == item.id
    assert find_item(index, "personalized hey siri").title == "Personalized Hey Siri"


def test_related_without_a_model_uses_keywords(corpus_store: Store) -> None:
    index = SearchIndex(corpus_store)
    item = find_item(index, "Personalized Hey Siri")
    assert any("Siri" in r.item.title for r in related(index, item, 3))


@pytest.mark.parametrize("text, needle", [
    ("https://machinelearning.apple.com/research/not-here", "not in the archive"),
    ("", "Give a link"),
    ("zzqxv", "No item in the archive matches"),
])
def test_related_to_something_not_in_the_archive_is_one_line(corpus_store: Store, text: str, needle: str):
    with pytest.raises(SearchError) as caught:
        find_item(hybrid(corpus_store), text)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_summaries_retrieve_with_the_hybrid_ranking(corpus_store: Store) -> None:
    from bot.summarize import retrieve

    # not "kitchen": Personalized Hey Siri holds "hearing" and "kitchen", 47% of its weight, and is listed
    # first by them (issue 54), so a summary quotes it alone
    query = "a speaker hearing you across a noisy room"
    items = retrieve(hybrid(corpus_store), query).items
    assert any("HomePod" in i.title for i in items)
    assert parse_query(query).text == query.replace("a smart", "a smart")


def test_an_endpoint_too_slow_for_a_query_leaves_the_search_to_keywords(corpus_store: Store) -> None:
    from bot.search.embed import QUERY_TIMEOUT, RemoteModel
    from tests.fakes.openai_api import FakeOpenAI

    with FakeOpenAI() as api:
        index = SearchIndex(corpus_store, model=lambda: RemoteModel(api.url, None, "m"))
        assert search(index, "privacy").note is None  # the archive embedded through the endpoint
        assert len(corpus_store.item_vectors("api:m")) == len(CORPUS)
        api.delay = QUERY_TIMEOUT + 3
        found = search(index, "differential privacy")  # a new search (a repeated one is answered as before)
    assert ids(found) == ids(search(SearchIndex(corpus_store), "differential privacy"))
    assert found.note is not None and "unavailable" in found.note


def test_what_related_items_share_is_never_a_word_of_any_english_text(corpus_store: Store) -> None:
    """The shared words of the nearest items to every post are topic words, not "despite", "such" or "they"
    (which came up on these 72 posts before the common words were left out)."""
    from bot.search.related import _GENERAL, related

    index = SearchIndex(corpus_store)
    for item in corpus_store.latest(20):
        for near in related(index, item, 5, corpus_store):
            assert not {w.lower() for w in near.shares.split(", ")} & (_GENERAL | STOPWORDS), near.shares
