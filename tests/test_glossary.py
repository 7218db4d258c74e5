"""The glossary (bot/search/glossary.json), used both ways: each abbreviation finds the posts that spell it
out, each long form the posts that abbreviate it, and the reply says what was searched for."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.models import Item
from bot.search import glossary
from bot.search.highlight import highlighted_snippet, word_matcher
from bot.search.index import SearchIndex
from bot.search.query import search
from bot.store import SQLiteStore, Store

ENTRIES = glossary.entries()


def _item(n: int, title: str) -> Item:
    link = f"https://machinelearning.apple.com/research/g{n}"
    return Item(id=link, guid=link, title=title, link=link, summary="An abstract about nothing much.",
                published=datetime(2025, 1, 1 + n % 28, tzinfo=UTC), kind="research")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> SearchIndex:
    """Per entry: a post titled with its long form only, and one titled with its abbreviation only."""
    store = SQLiteStore(Path(tmp_path_factory.mktemp("glossary")) / "g.db")
    store.migrate()
    items = []
    for n, entry in enumerate(ENTRIES):
        items.append(_item(2 * n, f"Zq{n} work on {entry.long[0]}"))
        items.append(_item(2 * n + 1, f"Zq{n} work with {entry.short}"))
    store.add_items(items)
    return SearchIndex(store)


def test_the_glossary_ships_inside_the_package() -> None:
    assert glossary.GLOSSARY_FILE.parent == Path(glossary.__file__).parent
    assert len(ENTRIES) >= 30
    assert len({e.short.lower() for e in ENTRIES}) == len(ENTRIES)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.short for e in ENTRIES])
def test_an_abbreviation_finds_its_long_form_and_back(entry: glossary.Entry, index: SearchIndex) -> None:
    n = ENTRIES.index(entry)
    long_form, short_form = f"https://machinelearning.apple.com/research/g{2 * n}", \
        f"https://machinelearning.apple.com/research/g{2 * n + 1}"
    found = search(index, f"{entry.short}", limit=100)
    assert long_form in [h.item.id for h in found.hits]
    assert found.expanded is not None and entry.long[0] in found.expanded
    back = search(index, entry.long[0], limit=100)
    if entry.case:  # an abbreviation that is also a common word: the index folds case, "HE" would be "he"
        assert short_form not in [h.item.id for h in back.hits]
        assert back.expanded is None or entry.short not in back.expanded
        return
    assert short_form in [h.item.id for h in back.hits]
    assert back.expanded is not None and entry.short in back.expanded


def test_the_reply_names_what_was_searched_for() -> None:
    assert glossary.shown(glossary.expand(["LLMs"], "LLMs")) == "LLM, large language model"
    assert glossary.shown(glossary.expand(["kv", "cache"], "KV cache")) == "KV cache, key-value cache"
    assert glossary.shown(glossary.expand(["image"], "image")) is None


def test_what_search_by_meaning_embeds_spells_an_abbreviation_out() -> None:
    """The words embedded beside the long forms: each abbreviation expanded is left out, a plural and one of
    several words too, and nothing else (a word of the abbreviation typed elsewhere stays)."""
    def kept(typed: str) -> list[str]:
        return glossary.spelled_out(typed.split(), glossary.expand(typed.split(), typed))

    assert kept("LLMs for code") == ["for", "code"]
    assert kept("KV cache and cache eviction") == ["and", "cache", "eviction"]
    assert kept("large language models for code") == ["large", "language", "models", "for", "code"]
    assert kept("HE schemes") == ["schemes"]
    assert kept("he schemes") == ["he", "schemes"]  # a common word unless typed in capitals
    assert kept("describing a photo") == ["describing", "a", "photo"]  # plain words are not abbreviations


def test_an_abbreviation_that_is_a_common_word_counts_only_in_capitals() -> None:
    assert glossary.expand(["he", "said"], "he said") == []
    assert [e.entry.short for e in glossary.expand(["he", "schemes"], "HE schemes")] == ["HE"]


def test_a_long_form_never_searches_an_abbreviation_that_is_a_common_word(tmp_path: Path) -> None:
    """The index folds case, so searching "HE" would find every "he": "homomorphic encryption" (or plain words
    meaning it) searches its own words only."""
    store = SQLiteStore(tmp_path / "he.db")
    store.migrate()
    store.add_items([_item(1, "A study of voices: he said the model works"),
                     _item(2, "Homomorphic encryption at scale")])
    index = SearchIndex(store)
    for typed in ("homomorphic encryption", "data that stays encrypted"):
        found = search(index, typed, limit=10)
        assert [h.item.title for h in found.hits] == ["Homomorphic encryption at scale"], typed
        assert "HE" not in (found.expanded or ""), typed


def test_an_abbreviation_typed_last_is_a_word_not_the_start_of_others(store: Store) -> None:
    """The last word typed also matches as a prefix, but not an abbreviation: "SER" is speech emotion
    recognition, never "server" or "series"."""
    store.migrate()
    store.add_items([_item(1, "Server foundation models"), _item(2, "A series of services"),
                     _item(3, "Speech emotion recognition from short clips")])
    index = SearchIndex(store)
    for typed in ("SER", "ser", "clips SER"):
        found = search(index, typed, limit=10)
        assert [h.item.title for h in found.hits] == ["Speech emotion recognition from short clips"], typed
    assert [h.item.title for h in search(index, "serv", limit=10).hits] == [
        "Server foundation models", "A series of services"]  # a word's start still is one
    assert not glossary.is_abbreviation("lid") and glossary.is_abbreviation("LID")  # `case`: capitals only
    assert glossary.is_abbreviation("LLMs") and not glossary.is_abbreviation("server")


def test_an_abbreviation_finds_its_plural_and_back_wherever_it_is_typed(store: Store) -> None:
    """The stemmer keeps "LLMs" apart from "LLM" (no vowel before the s): the abbreviation stands for both,
    first, last or alone, typed in either number."""
    store.migrate()
    store.add_items([_item(1, "Evaluating LLMs on long documents"),
                     _item(2, "Evaluating an LLM on short notes"), _item(3, "Evaluating parsers")])
    index = SearchIndex(store)
    for typed in ("LLM evaluating", "evaluating LLM", "LLM", "LLMs", "LLMs evaluating"):
        found = search(index, typed, limit=10)
        assert sorted(h.item.title for h in found.hits) == [
            "Evaluating LLMs on long documents", "Evaluating an LLM on short notes"], typed
    bold = highlighted_snippet("Evaluating LLMs, an LLM and language models", word_matcher(["llm"]))
    assert bold == "Evaluating *LLMs*, an *LLM* and language models"  # the reply bolds what was found
    assert highlighted_snippet("An LLM", word_matcher(["llms"])) == "An *LLM*"
