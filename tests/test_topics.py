"""Topic subscriptions by meaning: `subscribe about:"…"` is stored beside the keywords, new items are matched
at ingest by similarity above the threshold (or by the topic's words), and the post says why."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot import blocks
from bot.commands import Invocation, Services, about_topics, handle
from bot.config import Settings
from bot.errors import EmbeddingError, SearchError
from bot.models import Item, Validators
from bot.route import Router, ingest
from bot.search.embed import StaticModel
from bot.search.topics import THRESHOLD, TopicMatcher
from bot.store import Store

FEED = "https://machinelearning.apple.com/rss.xml"


def item(slug: str, title: str, summary: str) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(id=link, guid=link, title=title, link=link, summary=summary,
                published=datetime(2026, 7, 1, tzinfo=UTC), kind="research")


SPEECH = item("neural-tts", "On-device Neural Speech Synthesis",
              "Recent advances in text-to-speech (TTS) synthesis have made it possible to construct a fully "
              "neural network based TTS system that runs on device and sounds natural.")
TOPIC = "turning text into a natural sounding voice"  # none of the post's words but "natural", "text"
UNRELATED = item("gaussian-heads", "Large-Scale 3D Gaussian Head Reconstruction",
                 "A feed-forward method reconstructs 3D Gaussian heads from multi-camera captures.")


def test_about_topics_are_parsed_apart_from_keywords() -> None:
    rest, topics = about_topics('privacy about:"On-Device Efficiency" speech')
    assert rest.split() == ["privacy", "speech"] and topics == ["about:on-device efficiency"]
    assert about_topics("about:“speech recognition”") == ("", ["about:speech recognition"])
    assert about_topics("about:privacy") == ("", ["about:privacy"])
    with pytest.raises(SearchError):
        about_topics('about:""')


def test_subscribe_about_stores_the_topic_and_says_it_matches_by_meaning(store: Store) -> None:
    store.migrate()
    services = Services(store=store, settings=Settings())
    reply = handle(Invocation('subscribe about:"on-device efficiency" privacy', "T1", "C1", "U1"), services)
    assert "by meaning" in reply.text
    sub = store.get_subscription("T1", "C1")
    assert sub is not None and sorted(sub.keywords) == ["about:on-device efficiency", "privacy"]


def test_new_items_match_a_topic_by_meaning_and_the_post_says_why(store: Store) -> None:
    store.migrate()
    ingest(store, FEED, [], Validators())  # an empty first poll is no baseline
    ingest(store, FEED, [item("old", "Old", "Old.")], Validators())  # the baseline
    store.subscribe("T1", "C1", "U1", [f"about:{TOPIC}"])
    router = Router(TopicMatcher(StaticModel.bundled).match)
    ingest(store, FEED, [SPEECH, UNRELATED], Validators(), router=router)
    [delivery] = store.deliveries(channel_id="C1")
    assert delivery.item_id == SPEECH.id
    [matched] = delivery.matched
    assert matched.startswith(f"about:{TOPIC} (similarity ")
    message = blocks.item_message(SPEECH, delivery.matched)
    why = [b for b in message["blocks"] if b["type"] == "context"][-1]["elements"][0]["text"]
    assert why.startswith(f"Matched your topic by meaning: {TOPIC} (similarity 0.")


def test_the_threshold_decides() -> None:
    model = StaticModel.bundled
    assert TopicMatcher(model)(SPEECH, [TOPIC])
    assert not TopicMatcher(model)(UNRELATED, [TOPIC])
    assert not TopicMatcher(model, threshold=0.9)(SPEECH, [TOPIC])
    assert TopicMatcher(model, threshold=-1.0)(UNRELATED, [TOPIC])
    assert 0 < THRESHOLD < 1


def test_without_a_model_a_topic_matches_by_its_words() -> None:
    def broken():
        raise EmbeddingError("the embedding model could not be loaded: a test")

    matcher = TopicMatcher(broken)
    assert matcher(SPEECH, ["neural speech"]) == ["neural speech (its words)"]
    assert matcher(UNRELATED, ["neural speech"]) == []
