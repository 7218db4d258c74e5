"""One engine, both stores: the same archive (72 real posts) in SQLite and in PostgreSQL gives the same top
10, in the same order and with the same scores, for keywords, phrases, questions, misspellings and filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.search.index import SearchIndex
from bot.search.query import search
from bot.store import SQLiteStore, Store, open_store
from tests.fakes.archive import corpus_index, corpus_items, fixture_items

CORPUS = json.loads((Path(__file__).parent / "data" / "apple_ml_corpus.json").read_text())

QUERIES = [
    "diffusion",
    "foundation models",
    "privacy",
    "federated learning",
    '"federated learning"',
    '"language models" reasoning',
    "speech recognition",
    "accessibility",
    "on-device efficiency",
    "siri",
    "how does apple protect privacy in machine learning?",
    "3d reconstruction from images",
    "difusion",  # misspellings
    "langauge modles",
    "privcy federatd",
    "health type:paper",
    "models since:2024-01-01",
    "apple type:update",
    'author:"Siri Team"',
    "language models author:Zhang",
]


def filled(store: Store) -> Store:
    store.migrate()
    store.add_items(corpus_items())
    return store


@pytest.mark.postgres
def test_both_stores_give_the_same_top_ten(tmp_path: Path, pg_schema_url: str) -> None:
    lite = SearchIndex(filled(SQLiteStore(tmp_path / "parity.db")))
    pg = SearchIndex(filled(open_store(pg_schema_url)))
    for query in QUERIES:
        on_sqlite, on_postgres = search(lite, query), search(pg, query)
        ranked = [(h.item.id, h.score) for h in on_sqlite.hits]
        assert ranked, query
        assert ranked == [(h.item.id, h.score) for h in on_postgres.hits], query
        assert on_sqlite.searched_for == on_postgres.searched_for, query


def test_the_corpus_answers_every_query(tmp_path: Path) -> None:
    """What the parity test compares is worth comparing: each query finds items, misspellings are corrected
    (and say so), a phrase is stricter than its words."""
    index = SearchIndex(filled(SQLiteStore(tmp_path / "corpus.db")))
    for query in QUERIES:
        assert search(index, query).hits, query
    assert search(index, "langauge modles").searched_for == "language models"
    assert search(index, "difusion").searched_for == "diffusion"
    phrase = {h.item.id for h in search(index, '"language models"', limit=100).hits}
    words = {h.item.id for h in search(index, "language models", limit=100).hits}
    assert phrase < words
    assert all(h.item.kind == "update" for h in search(index, "apple type:update").hits)


WEIGHED = [  # an item may hold enough of these words by weight though not two thirds of them (issue 54)
    "catastrophic forgetting when adapting language models",
    "cutting objects out of camera pictures",
    "please find anything on personalizing models to each individual user",
    "what has apple published about privacy preserving federated learning on device lately",
]


@pytest.mark.postgres
def test_both_stores_weigh_the_words_alike(tmp_path: Path, pg_schema_url: str) -> None:
    """The words' weights are read from each store's index (how many items hold each word): the same
    results, in the same order and with the same scores, on both, with the post on forgetting added."""
    forgetting = [i for i in fixture_items() if i.link.endswith("/scaling-laws-forgetting-finetuning")]
    lite, pg = filled(SQLiteStore(tmp_path / "parity.db")), filled(open_store(pg_schema_url))
    for store in (lite, pg):
        store.add_items(forgetting)
    for meaning in (False, True):
        on_sqlite, on_postgres = corpus_index(lite, meaning), corpus_index(pg, meaning)
        for query in WEIGHED:
            ranked = [(h.item.id, h.score, h.by_meaning) for h in search(on_sqlite, query).hits]
            assert ranked, query
            assert ranked == [(h.item.id, h.score, h.by_meaning) for h in search(on_postgres, query).hits]
        first = search(on_postgres, WEIGHED[0]).hits[0]
        assert first.item.link == forgetting[0].link and not first.by_meaning
