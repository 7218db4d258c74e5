"""`/mlresearch related`, and what search replies say about the glossary and search by meaning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.search.embed import StaticModel
from bot.search.index import SearchIndex
from bot.store import Store
from tests.fakes.archive import filled_store


@pytest.fixture
def services(tmp_path: Path) -> Services:
    store: Store = filled_store(tmp_path)
    return Services(store=store, settings=Settings(), index=SearchIndex(store, model=StaticModel.bundled))


def ask(services: Services, text: str) -> Reply:
    return handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services)


def test_related_lists_the_items_close_to_it_with_what_they_share(services: Services) -> None:
    """Of the archive's items, only Velox (4D geometry and appearance) is close to the 3D Gaussian heads."""
    heads = next(i for i in services.store.latest(10) if "3D Gaussian Head" in i.title)
    reply = ask(services, f"related {heads.link}")
    sections = [b for b in reply.blocks if b["type"] == "section"]
    assert len(sections) == 1 and "Velox" in sections[0]["text"]["text"]
    assert all("Shares: " in s["text"]["text"] or "Near in meaning" in s["text"]["text"] for s in sections)
    assert all(s["text"].get("verbatim") is True for s in sections)
    assert reply.share_value is None  # ephemeral, like every reply


@pytest.mark.parametrize("text, needle", [
    ("related", "Usage"),
    ("related https://machinelearning.apple.com/research/nowhere", "not in the archive"),
    ("related 🙂", "Give a link"),
])
def test_related_bad_input_is_one_line(services: Services, text: str, needle: str) -> None:
    reply = ask(services, text)
    assert len(reply.blocks) == 1 and needle in reply.text and "\n" not in reply.text


def test_search_says_what_it_searched_for(services: Services) -> None:
    reply = ask(services, "search LLM")
    dumped = json.dumps(reply.blocks, ensure_ascii=False)
    assert "Also searched: “LLM” as large language model" in dumped
    assert dumped.count("Searched for") == 0  # what was added is not a second "Searched for"


def test_a_search_while_the_model_loads_says_nothing_is_lost(tmp_path: Path) -> None:
    import threading

    release = threading.Event()
    store = filled_store(tmp_path)

    def slow():
        release.wait(10)
        return StaticModel.bundled()

    index = SearchIndex(store, model=slow)
    thread = index.start()
    try:
        reply = ask(Services(store=store, settings=Settings(), index=index), "search learning")
        assert "nothing is lost" in json.dumps(reply.blocks)
    finally:
        release.set()
        thread.join(10)
