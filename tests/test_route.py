"""Routing (bot.route): who gets each new item is decided before ingest's transaction opens, so the model (or
a slow embeddings endpoint) never holds a write; ingest writes exactly the routes of the items new inside its
transaction, for the audience of that moment, or nothing (RoutesStale) and routing runs again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.errors import RoutesStale
from bot.models import MAX_WORKSPACE_TOPICS, Item, Validators
from bot.route import ATTEMPTS, Router, ingest
from bot.search.embed import RemoteModel, StaticModel
from bot.search.topics import TopicMatcher
from bot.store import Store, open_store
from tests.fakes.archive import make_item
from tests.fakes.openai_api import FakeOpenAI

FEED = "https://machinelearning.apple.com/rss.xml"
OLD = make_item("old", "An old post", "Something archived before.")
SPEECH = make_item("speech-1", "Streaming Speech Recognition on Device", "A recognizer for speech on device.")
VISION = make_item("vision-1", "Image Captioning with Less Data", "A captioning model for images.")


def baselined(store: Store) -> Store:
    ingest(store, FEED, [OLD], Validators())  # the baseline: nothing after it is queued for OLD
    return store


def batch(start: int, n: int) -> list[Item]:
    return [make_item(f"new-{i}", f"Post {i} on speech, vision and privacy", f"Abstract {i} of a study.")
            for i in range(start, start + n)]


class Watching:
    """A model that, each time it is asked for vectors, first has another connection write (a Save) and
    waits for it: if a write transaction were open, the Save would wait for it to end."""

    def __init__(self, url: str) -> None:
        self.model = StaticModel.bundled()
        self.name = self.model.name
        self.other = open_store(url)
        self.calls: list[tuple[int, bool, float]] = []  # (texts, the Save went through, its seconds)
        self.saves: list[threading.Thread] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        started = time.monotonic()
        done = threading.Event()

        def save() -> None:
            self.other.save_item("T0", "USAVER", OLD.id)
            done.set()

        thread = threading.Thread(target=save)
        thread.start()
        self.saves.append(thread)
        went_through = done.wait(3.0)
        self.calls.append((len(texts), went_through, time.monotonic() - started))
        return self.model.embed(texts)

    def close(self) -> None:
        for thread in self.saves:
            thread.join(30)
        self.other.close()


@pytest.fixture
def watching(database_url: str) -> Iterator[Watching]:
    model = Watching(database_url)
    yield model
    model.close()


def test_many_people_and_topics_the_model_runs_before_the_transaction(
    store: Store, watching: Watching
) -> None:
    """300 people x 20 topics (15 workspaces of 100 topics) and 10 new items: the items and the topics are
    embedded in one call, before ingest's transaction; a Save made during it goes through at once; the
    transaction itself is short. The next poll embeds only its new items (topic vectors are cached)."""
    baselined(store)
    for team in range(15):
        pool = [f"about:topic {team} {n} speech" for n in range(100)]
        for person in range(20):
            store.follow(f"T{team}", f"U{person}", pool[person * 5 : person * 5 + 20])
    router = Router(TopicMatcher(lambda: watching).match)

    started = time.monotonic()
    routes = router.route(store, FEED, batch(0, 10))
    routing = time.monotonic() - started
    started = time.monotonic()
    ingested = store.ingest(FEED, batch(0, 10), Validators(), routes=routes)
    held = time.monotonic() - started

    topics = len(store.audience().topics())
    assert topics == 15 * 100
    assert [(texts, went) for texts, went, _ in watching.calls] == [(10 + topics, True)]
    assert all(seconds < 1.0 for _, _, seconds in watching.calls)  # the Save did not wait for ingest
    assert len(ingested.new) == 10 and ingested.queued == sum(r.target == "person" for r in routes.routes)
    assert ingested.queued > 0
    assert held < max(2.0, routing)

    watching.calls.clear()
    ingest(store, FEED, [*batch(0, 10), *batch(10, 10)], Validators(), router=router)
    assert [(texts, went) for texts, went, _ in watching.calls] == [(10, True)]


def test_a_slow_embeddings_endpoint_delays_no_save(store: Store) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1", ["speech"])
    store.subscribe("T1", "C2", "U1", ["about:turning voice into text"])
    with FakeOpenAI(delay=2.0) as api:
        router = Router(TopicMatcher(lambda: RemoteModel(api.url, None, "m", timeout=10)).match)
        polled: list[float] = []

        def poll() -> None:
            started = time.monotonic()
            ingest(store, FEED, [SPEECH, VISION], Validators(), router=router)
            polled.append(time.monotonic() - started)

        thread = threading.Thread(target=poll)
        thread.start()
        deadline = time.monotonic() + 5
        while not api.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert api.requests, "routing asked the endpoint"
        started = time.monotonic()
        assert store.save_item("T1", "U1", OLD.id) == "saved"  # while routing waits for the endpoint
        saved = time.monotonic() - started
        thread.join(30)
    assert saved < 0.5
    assert polled and polled[0] >= 1.5  # routing, and only routing, waited
    assert [d.item_id for d in store.deliveries(channel_id="C1")] == [SPEECH.id]


def test_a_failing_endpoint_still_brings_keyword_subscriptions_their_items_with_one_log_line(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1", ["speech"])
    store.subscribe("T1", "C2", "U1", ["about:speech recognition"])  # its words are in SPEECH's title
    store.subscribe("T1", "C3", "U1", ["about:turning voice into text"])  # by meaning only
    store.follow("T1", "U2", ["captioning", "about:turning voice into text"])
    with FakeOpenAI(status=500) as api, caplog.at_level(logging.WARNING):
        router = Router(TopicMatcher(lambda: RemoteModel(api.url, None, "m", timeout=5)).match)
        ingest(store, FEED, [SPEECH, VISION], Validators(), router=router)
        asked = len(api.requests)
        privacy = make_item("privacy-1", "Federated Learning with Privacy", "Learning across devices.")
        ingest(store, FEED, [SPEECH, VISION, privacy], Validators(), router=router)
        assert len(api.requests) == asked == 1  # one failure; the next poll does not wait on it again
    assert [d.item_id for d in store.deliveries(channel_id="C1")] == [SPEECH.id]
    [by_words] = store.deliveries(channel_id="C2")
    assert by_words.item_id == SPEECH.id and by_words.matched == ("about:speech recognition (its words)",)
    assert store.deliveries(channel_id="C3") == []
    followed = [(d.item_id, d.matched) for d in store.deliveries(channel_id="U2")]
    assert followed == [(VISION.id, ("captioning",))]
    failures = [r.getMessage() for r in caplog.records if "topic_match_fallback" in r.getMessage()]
    assert len(failures) == 1 and "HTTP 500" in failures[0]


class Counting:
    """The bundled model, counting the texts it embeds."""

    def __init__(self) -> None:
        self.model = StaticModel.bundled()
        self.name = self.model.name
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        return self.model.embed(texts)


def test_a_subscription_added_between_routing_and_ingest_gets_the_item(store: Store) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1", ["speech", "about:turning voice into text"])
    model = Counting()
    router = Router(TopicMatcher(lambda: model).match)
    routes = router.route(store, FEED, [SPEECH])
    assert len(model.texts) == 2  # the item and the topic
    store.subscribe("T1", "C2", "U1")  # after the read routing decided from
    with pytest.raises(RoutesStale):
        store.ingest(FEED, [SPEECH], Validators(), routes=routes)
    assert store.get_item(SPEECH.id) is None and store.deliveries() == []  # nothing was written
    ingested = ingest(store, FEED, [SPEECH], Validators(), router=router, routes=routes)  # routes again
    assert ingested.new == [SPEECH]
    assert sorted(d.channel_id for d in store.deliveries(item_id=SPEECH.id)) == ["C1", "C2"]
    assert len(model.texts) == 2  # routing again embedded nothing again


def test_a_channel_unsubscribed_or_a_follow_dropped_between_routing_and_ingest_gets_nothing(
    store: Store,
) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1", ["speech"])
    store.subscribe("T1", "C2", "U1", ["speech"])
    store.follow("T1", "U2", ["speech"])
    router = Router()
    routes = router.route(store, FEED, [SPEECH])
    assert {r.to for r in routes.routes} == {"C1", "C2", "U2"}
    store.unsubscribe("T1", "C2")
    store.unfollow("T1", "U2")
    ingest(store, FEED, [SPEECH], Validators(), router=router, routes=routes)
    assert [d.channel_id for d in store.deliveries(item_id=SPEECH.id)] == ["C1"]


def test_items_routed_as_new_but_archived_first_by_another_ingest_are_queued_once(store: Store) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1")
    router = Router()
    late = router.route(store, FEED, [SPEECH, VISION])
    ingest(store, FEED, [SPEECH], Validators(), router=router)  # another process takes SPEECH first
    ingested = store.ingest(FEED, [SPEECH, VISION], Validators(), routes=late)
    assert ingested.new == [VISION] and ingested.queued == 1
    assert sorted(d.item_id for d in store.deliveries(channel_id="C1")) == sorted([SPEECH.id, VISION.id])


def test_routing_that_never_holds_gives_up_with_nothing_written(store: Store) -> None:
    baselined(store)

    class Restless(Router):
        """Every routing reads an audience that changes before ingest."""

        def __init__(self) -> None:
            super().__init__()
            self.rounds = 0

        def route(self, store: Store, url: str, items: list[Item]) -> object:  # type: ignore[override]
            routes = super().route(store, url, items)
            self.rounds += 1
            store.subscribe("T1", f"C{self.rounds}", "U1")
            return routes

    restless = Restless()
    with pytest.raises(RoutesStale):
        ingest(store, FEED, [SPEECH], Validators(), router=restless)
    assert restless.rounds == ATTEMPTS
    assert store.get_item(SPEECH.id) is None and store.deliveries() == []
    ingest(store, FEED, [SPEECH], Validators())  # the next poll: still new, queued for every channel
    assert len(store.deliveries(item_id=SPEECH.id)) == ATTEMPTS


def test_a_digest_channel_item_waits_for_its_digest_as_routed(store: Store) -> None:
    baselined(store)
    store.subscribe("T1", "C1", "U1", ["speech"])
    store.set_digest("T1", "C1", "daily")
    ingest(store, FEED, [SPEECH, VISION], Validators())
    assert store.waiting_digest_items("T1", "C1") == [SPEECH.id]
    assert store.deliveries() == []


# --- the cap on about: topics per workspace ---------------------------------------------------------------


def reply(store: Store, text: str, user: str = "U9", channel: str = "C9") -> str:
    return handle(Invocation(text, "T1", channel, user), Services(store=store, settings=Settings())).text


def full_workspace(store: Store) -> list[str]:
    store.migrate()
    topics = [f"about:topic {n}" for n in range(MAX_WORKSPACE_TOPICS)]
    for person in range(0, MAX_WORKSPACE_TOPICS, 20):
        store.follow("T1", f"U{person}", topics[person : person + 20])
    assert len(store.workspace_topics("T1")) == MAX_WORKSPACE_TOPICS
    return topics


def test_a_workspace_holds_at_most_so_many_topics(store: Store) -> None:
    full_workspace(store)
    refused = reply(store, 'follow about:"a brand new topic"')
    assert "at most 100" in refused and "nothing was changed" in refused and "\n" not in refused
    assert store.follows("T1", "U9") == []
    refused = reply(store, 'subscribe privacy about:"a brand new topic"')
    assert "at most 100" in refused and store.get_subscription("T1", "C9") is None
    assert store.follow("T2", "U9", ["about:a brand new topic"])  # another workspace has its own room


def test_a_topic_already_in_the_workspace_costs_nothing_more(store: Store) -> None:
    topics = full_workspace(store)
    assert "at most" not in reply(store, 'follow about:"topic 7"')
    assert store.follows("T1", "U9") == [topics[7]]
    assert "at most" not in reply(store, 'subscribe about:"topic 8"')
    # a channel replacing its own topics frees their room first
    store.unfollow("T1", "U80")
    assert "at most" not in reply(store, 'subscribe about:"fresh one"', channel="C8")
    assert "at most" not in reply(store, 'subscribe about:"fresh two"', channel="C8")
