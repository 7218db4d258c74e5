"""Subscriptions: one per workspace and channel, optional stemmed keywords, paused with a reason, and no
backlog for a new subscriber."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.feed import parse
from bot.models import Validators
from bot.route import ingest
from bot.search.index import SearchIndex
from bot.search.match import matched_keywords, split_keywords
from bot.search.query import search
from bot.store import Store

DATA = Path(__file__).parent / "data"
FEED = "https://machinelearning.apple.com/rss.xml"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
ARCHIVE = parse((DATA / "apple_ml_archive.xml").read_bytes())
NEW = [i for i in ARCHIVE if i.id not in {r.id for r in RSS}]


def test_subscribe_records_who_when_and_keywords(store: Store) -> None:
    sub, created = store.subscribe("T1", "C1", "U1", ["flow", "diffusion"])
    assert created
    assert (sub.team_id, sub.channel_id, sub.user_id) == ("T1", "C1", "U1")
    assert sub.keywords == ("flow", "diffusion")
    assert sub.created_at is not None and not sub.paused and sub.paused_reason is None
    assert store.get_subscription("T1", "C1") == sub


def test_subscribing_again_updates_keywords_never_a_second_subscription(store: Store) -> None:
    first, _ = store.subscribe("T1", "C1", "U1", ["flow"])
    again, created = store.subscribe("T1", "C1", "U2", ["diffusion"])
    assert not created
    assert again.keywords == ("diffusion",) and again.created_at == first.created_at
    assert store.subscriptions() == [again]
    store.subscribe("T1", "C1", "U1")
    assert store.subscriptions()[0].keywords == ()


def test_list_and_unsubscribe(store: Store) -> None:
    store.subscribe("T1", "C1", "U1")
    store.subscribe("T1", "C2", "U1")
    store.subscribe("T2", "C1", "U9")
    assert [s.channel_id for s in store.subscriptions("T1")] == ["C1", "C2"]
    assert len(store.subscriptions()) == 3
    assert store.unsubscribe("T1", "C1") is True
    assert store.unsubscribe("T1", "C1") is False
    assert {(s.team_id, s.channel_id) for s in store.subscriptions()} == {("T1", "C2"), ("T2", "C1")}


def test_a_new_subscription_gets_what_arrives_after_it_never_the_backlog(store: Store) -> None:
    ingest(store, FEED, RSS, Validators())  # baseline: recorded as seen
    store.subscribe("T1", "C1", "U1")
    assert ingest(store, FEED, RSS, Validators()).queued == 0
    assert store.open_deliveries() == []
    assert ingest(store, FEED, ARCHIVE[:3] + RSS, Validators()).queued == 3
    store.subscribe("T1", "C2", "U1")  # after those three arrived
    assert ingest(store, FEED, ARCHIVE, Validators()).queued == 2 * 3
    by_channel = {c: [d.item_id for d in store.open_deliveries() if d.channel_id == c] for c in ("C1", "C2")}
    assert by_channel["C1"] == [i.id for i in NEW]
    assert by_channel["C2"] == [i.id for i in NEW[3:]]


def test_a_paused_subscription_keeps_its_reason_and_receives_nothing(store: Store) -> None:
    ingest(store, FEED, RSS, Validators())
    store.subscribe("T1", "C1", "U1")
    store.pause_subscription("T1", "C1", "is_archived")
    sub = store.get_subscription("T1", "C1")
    assert sub is not None and sub.paused and sub.paused_reason == "is_archived"
    assert ingest(store, FEED, ARCHIVE, Validators()).queued == 0
    resumed, _ = store.subscribe("T1", "C1", "U1")
    assert not resumed.paused and resumed.paused_reason is None


def test_keyword_subscriptions_queue_matching_items_with_the_matched_words(store: Store) -> None:
    ingest(store, FEED, RSS, Validators())
    store.subscribe("T1", "C1", "U1", ["FLOW", "forgets", "quantum"])
    ingest(store, FEED, ARCHIVE, Validators())
    queued = {d.item_id.rsplit("/", 1)[-1]: d.matched for d in store.open_deliveries()}
    assert queued == {"normalizing-flows": ("FLOW",), "scaling-laws-forgetting-finetuning": ("forgets",)}


def test_an_abbreviation_subscribed_to_matches_it_in_either_number(store: Store) -> None:
    """The stemmer keeps "LLMs" apart from "LLM" (no vowel before the s): a subscription to LLM still gets the
    posts that say LLMs, as a search for it finds them."""
    ingest(store, FEED, RSS, Validators())
    store.subscribe("T1", "C1", "U1", ["LLM"])
    ingest(store, FEED, ARCHIVE, Validators())
    queued = {d.item_id for d in store.open_deliveries()}
    saying = {i.id for i in NEW if re.search(r"\bLLMs?\b", f"{i.title} {i.summary}")}
    assert saying and queued == saying


@pytest.mark.parametrize("keyword, title, summary, hit", [
    ("flow", "Normalizing Flows are Capable Generative Models", "", True),   # stemmed
    ("FLOWS", "a normalizing flow", "", True),                              # case-insensitive
    ("low", "Normalizing Flows", "", False),                                # a word, not a substring
    ("caption", "", "Image captioning is fundamental.", True),              # summary counts too
    ("image captioning", "BalCapRL: Image Captioning", "", True),           # a phrase
    ("captioning image", "BalCapRL: Image Captioning", "", False),          # in that order
    ("image captioning", "Image based captioning", "", False),              # next to each other
    ("image captioning", "", "An image, then captioning.", False),
    ("diffusion", "Velox", "geometry and appearance", False),
    ("llm", "Evaluating LLMs", "", True),                                   # an abbreviation in either number
    ("llms", "An LLM for parsing", "", True),
    ("llm", "Fellmore", "", False),
])
def test_keyword_matching(keyword: str, title: str, summary: str, hit: bool) -> None:
    assert matched_keywords(title, summary, [keyword]) == ([keyword] if hit else [])


def test_subscribe_text_splits_into_keywords() -> None:
    assert split_keywords('Diffusion, "image captioning"  RL rl') == ["diffusion", "image captioning", "rl"]


# Keywords people would subscribe to, from the new items' titles and abstracts: words (some inflected unlike
# the text) and phrases.
KEYWORDS = ["diffusion", "model", "models", "flow", "pretraining", "data", "forgets", "scaling", "simulation",
            "composition", "learning", "language", "generative models", "pretraining data", "self-play",
            "robust autonomy", "normalizing flows", "models diffusion"]


def test_a_subscription_matches_what_a_search_for_its_keywords_finds(store: Store) -> None:
    ingest(store, FEED, RSS, Validators())  # baseline
    channels = {f"C{n}": keyword for n, keyword in enumerate(KEYWORDS)}
    for channel, keyword in channels.items():
        store.subscribe("T1", channel, "U1", [keyword])
    ingest(store, FEED, ARCHIVE, Validators())
    queued = {channel: set() for channel in channels}
    for delivery in store.open_deliveries():
        queued[delivery.channel_id].add(delivery.item_id)
    new = {item.id for item in NEW}
    index = SearchIndex(store)
    for channel, keyword in channels.items():
        # A quoted phrase, followed by a space: no prefix matching, as a subscription has none.
        found = {hit.item.id for hit in search(index, f'"{keyword}" ', limit=50).hits}
        assert queued[channel] == found & new, keyword
    assert sum(map(len, queued.values())) > len(KEYWORDS)  # most keywords match something
