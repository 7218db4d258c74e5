"""A slow or failing embeddings endpoint (EMBEDDINGS_API_URL) costs one search its budget, not everyone's
time: after a failure or a timeout the endpoint is out, searches match their words (the archive's vectors are
the endpoint's: a query embedded by another model cannot be compared with them) and say so, nobody asks the
endpoint meanwhile, and a background probe brings search by meaning back once it answers. An endpoint out
when search by meaning loads leaves the bundled model standing in (its own vectors of the archive), the
endpoint's stored vectors kept, until the endpoint answers.

The endpoint is tests/fakes/openai_api.py's stand-in on loopback, held (`delay`, until `released`) to play a
slow one; the app is the real one behind waitress, sent signed requests, on both stores."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.app import LAZY_WORKERS, build_app, web_client
from bot.blocks import SAVE_ACTION_ID
from bot.commands import Services
from bot.config import Settings
from bot.errors import EmbeddingError
from bot.search.embed import BUNDLED_NAME, RemoteModel, load
from bot.search.index import SearchIndex
from bot.search.query import search
from bot.server import EVENTS_PATH, HTTP_THREADS, Router, create_http_server, run_until, wake
from bot.store import Store
from tests.fakes.archive import corpus_items
from tests.fakes.openai_api import EMBEDDING_DIM, FakeOpenAI
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, block_action_body, command_body, http, signed_headers
from tests.test_meaning_gaps import by_words, ids, settles

WAIT = 30.0  # seconds: a bound on a busy machine, never a measure
RETRY = 0.05  # seconds between the background probes here (RETRY_EVERY in serve)
HELD = 120.0  # seconds the stand-in holds an answer: longer than any test runs (released at its end)
OUT_NOTE = "Search by meaning is unavailable"


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as stand_in:
        yield stand_in


def asked(api: FakeOpenAI) -> list[str]:
    """The single texts (a search's query) asked of the endpoint, its background probes left out."""
    return [request["body"]["input"][0] for request in list(api.requests)
            if request["path"].endswith("/embeddings") and len(request["body"]["input"]) == 1
            and request["body"]["input"] != ["probe"]]


def slow(api: FakeOpenAI) -> None:
    api.delay = HELD


def recovered(api: FakeOpenAI) -> None:
    api.delay = 0
    api.released.set()  # the answers held meanwhile come at once


# --- the endpoint's breaker ---------------------------------------------------------------------------------


def test_after_a_timeout_nobody_asks_the_endpoint_until_a_background_probe_gets_an_answer(
    api: FakeOpenAI,
) -> None:
    model = RemoteModel(api.url, None, "m", budget=0.2, retry_every=RETRY)
    try:
        slow(api)
        with pytest.raises(EmbeddingError) as caught:
            model.embed(["diffusion"])  # the caller waits its budget, not the endpoint's answer
        assert str(caught.value) == "no answer from the embeddings endpoint in 0.2 s"
        for texts in (["speech"], ["two", "texts"]):
            with pytest.raises(EmbeddingError) as again:
                model.embed(texts)
            assert str(again.value) == str(caught.value)
        assert settles(lambda: bool(asked(api)))  # (the held request is recorded on the stand-in's thread)
        assert asked(api) == ["diffusion"]  # only the first; the breaker answered the others
        assert not model.breaker.back.is_set()

        recovered(api)
        assert model.breaker.back.wait(WAIT)
        assert model.embed(["speech"]).shape == (1, EMBEDDING_DIM)
        assert asked(api) == ["diffusion", "speech"]
    finally:
        model.breaker.close()


def test_a_failing_endpoint_is_out_after_one_failure(api: FakeOpenAI) -> None:
    model = RemoteModel(api.url, None, "m", retry_every=HELD)
    try:
        api.status = 500
        for _ in range(3):
            with pytest.raises(EmbeddingError) as caught:
                model.embed(["a", "b"])
            assert str(caught.value) == "HTTP 500 from the embeddings endpoint"
        assert len(api.requests) == 1 and model.breaker.out == str(caught.value)
    finally:
        model.breaker.close()


# --- search, in serve (the index started in the background) ------------------------------------------------


def test_while_the_endpoint_is_out_searches_match_words_and_say_so_then_meaning_comes_back(
    store: Store, api: FakeOpenAI,
) -> None:
    store.add_items(corpus_items())
    model = RemoteModel(api.url, None, "m", budget=0.2, retry_every=RETRY)
    index = SearchIndex(store, model=lambda: model)
    try:
        index.start().join(WAIT)
        assert search(index, "differential privacy").note is None  # by meaning, the endpoint's vectors
        assert len(store.item_vectors("api:m")) == len(corpus_items())

        slow(api)
        before = len(asked(api))
        for text in ("federated learning", "speech recognition", "image captioning", "hey siri"):
            found = search(index, text)
            assert found.note == (f"{OUT_NOTE} (no answer from the embeddings endpoint in 0.2 s); these "
                                  "results match your words only.")
            assert ids(found) == by_words(store, text)
        assert settles(lambda: len(asked(api)) > before)  # (recorded on the stand-in's thread)
        assert len(asked(api)) == before + 1  # the first search waited its budget; the others asked nobody
        assert store.item_vectors(BUNDLED_NAME) == {}  # no query was compared with another model's vectors

        recovered(api)
        assert model.breaker.back.wait(WAIT)
        before = len(asked(api))
        found = search(index, "a speaker hearing you across a noisy kitchen")
        assert found.note is None and len(asked(api)) == before + 1  # asked, and answered
    finally:
        model.breaker.close()


def test_an_endpoint_out_at_start_leaves_the_bundled_model_standing_in_until_it_answers(
    store: Store, api: FakeOpenAI,
) -> None:
    store.add_items(corpus_items())
    search(SearchIndex(store, model=lambda: RemoteModel(api.url, None, "m")), "privacy")  # an earlier run
    assert len(store.item_vectors("api:m")) == len(corpus_items())

    api.status = 500
    settings = Settings.from_env({"EMBEDDINGS_API_URL": api.url, "EMBEDDINGS_MODEL": "m"})
    models: list[Any] = []
    index = SearchIndex(store, model=lambda: models.append(load(settings, retry_every=RETRY)) or models[-1])
    try:
        index.start().join(WAIT)
        found = search(index, "privacy")
        assert found.note is None  # by meaning: the bundled model's vectors, and its query
        assert len(store.item_vectors(BUNDLED_NAME)) == len(corpus_items())
        assert len(store.item_vectors("api:m")) == len(corpus_items())  # kept for the endpoint's return
        before = len(asked(api))

        api.status = 200
        assert settles(lambda: search(index, "speech recognition").note is None
                       and len(asked(api)) > before)  # the endpoint embeds the queries again
        assert "speech recognition" in asked(api)[-1]
        assert len(models) == 1
    finally:
        for model in models:
            model.endpoint.breaker.close()


# --- through the signed app: a slow endpoint holds no request thread past its budget -----------------------


class App:
    def __init__(self, url: str) -> None:
        self.url = url

    def post(self, body: bytes) -> tuple[int, dict[str, Any]]:
        status, raw = http("POST", self.url, body, signed_headers(body, "application/x-www-form-urlencoded"),
                           timeout=WAIT)
        return status, (json.loads(raw) if raw.strip() else {})


@pytest.fixture
def app(store: Store, slack_api: FakeSlack, api: FakeOpenAI) -> Iterator[tuple[App, RemoteModel]]:
    store.add_items(corpus_items())
    settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack_api.url,
                        poll_interval=0, embeddings_api_url=api.url)
    model = RemoteModel(api.url, None, "m", retry_every=HELD)  # serve's budget; no retry during the test
    index = SearchIndex(store, model=lambda: model)
    index.start().join(WAIT)
    client = web_client(settings)
    executor = ThreadPoolExecutor(max_workers=LAZY_WORKERS, thread_name_prefix="lazy")  # as `serve` makes it
    services = Services(store=store, settings=settings, slack=client, index=index)
    bolt = build_app(settings, store, client=client, executor=executor, services=services)
    server = create_http_server(Router(SlackRequestHandler(bolt, path=EVENTS_PATH), store, None, SECRET), 0,
                                host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        yield App(f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}"), model
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        recovered(api)
        executor.shutdown(wait=True)
        model.breaker.close()


def test_eight_searches_against_a_slow_endpoint_ask_it_at_most_once_per_request_thread_and_a_save_acks(
    app: tuple[App, RemoteModel], api: FakeOpenAI, store: Store,
) -> None:
    bot, model = app
    topics = ["federated learning", "speech recognition", "image captioning", "hey siri", "diffusion",
              "differential privacy", "on-device", "language models"]
    assert all(search(SearchIndex(store), topic).hits for topic in topics)
    slow(api)
    before = len(asked(api))
    item = store.latest(1)[0]
    replies: dict[str, tuple[int, dict[str, Any]]] = {}
    start = threading.Barrier(len(topics) + 1)

    def searching(topic: str) -> None:
        start.wait()
        replies[topic] = bot.post(command_body(f"search {topic}", user=f"U0{len(topic):02d}X"))

    with Recorder() as hooks:
        people = [threading.Thread(target=searching, args=(topic,)) for topic in topics]
        for person in people:
            person.start()
        start.wait()  # eight people search at once; a ninth clicks Save meanwhile
        click = block_action_body(SAVE_ACTION_ID, item.id, user="U0SAVER", response_url=hooks.url("/save"))
        assert bot.post(click)[0] == 200
        for person in people:
            person.join(WAIT)
        assert hooks.wait_for(lambda r: bool(r.to("/save")), timeout=WAIT)
        assert "Saved" in hooks.to("/save")[0].json["text"]

    for topic in topics:
        status, reply = replies[topic]
        assert status == 200 and OUT_NOTE in json.dumps(reply), topic
    # every search tried the endpoint before; now a request thread asks it once, and the rest are answered
    # by the words without asking (the answers the stand-in holds are still unsent)
    assert settles(lambda: len(asked(api)) > before)  # (recorded on the stand-in's thread)
    assert len(asked(api)) - before <= HTTP_THREADS
    assert model.breaker.out == "no answer from the embeddings endpoint in 1 s"
    assert not api.released.is_set()
