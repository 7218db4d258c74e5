"""Fair under load: work that calls the model endpoint runs on its own small lane with per-person and
per-workspace caps, so one person's summaries against a slow model never delay another person's Save.

End to end: signed requests into the real app (the Router, Bolt and our listeners behind waitress, in this
process) over each store; the Web API is FakeSlack, the model a slow FakeOpenAI, response_urls a Recorder."""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot import lanes
from bot.app import LAZY_WORKERS, build_app, web_client
from bot.blocks import SAVE_ACTION_ID
from bot.config import Settings
from bot.conversation import EVENT_TYPE
from bot.lanes import BUSY, ModelLane
from bot.listeners import SHARE_ACTION_ID, WORKING
from bot.server import EVENTS_PATH, Router, create_http_server, run_until, wake
from bot.store import Store
from tests.fakes.archive import ARCHIVE, fixture_items
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import (
    SECRET,
    TEAM,
    TOKEN,
    block_action_body,
    command_body,
    event_body,
    http,
    signed_headers,
)

MODEL_SECONDS = 2.0
HELD = 120.0  # seconds a held stand-in keeps its answers: longer than any test (released at its end)
WAIT = 30.0  # seconds: a bound on a busy machine, never a measure


class Bot:
    def __init__(self, url: str, lane: ModelLane) -> None:
        self.url, self.lane = url, lane

    def lane_idle(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.lane.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.lane.in_flight

    def post(self, body: bytes, content_type: str) -> dict[str, Any]:
        status, answer = http("POST", self.url, body, signed_headers(body, content_type))
        assert status == 200
        return json.loads(answer) if answer.strip() else {}

    def command(self, text: str, user: str, response_url: str, team: str = TEAM) -> str:
        body = command_body(text, user=user, response_url=response_url, team=team)
        return str(self.post(body, "application/x-www-form-urlencoded").get("text"))


@pytest.fixture
def model(request: pytest.FixtureRequest) -> Iterator[FakeOpenAI]:
    """The model stand-in, answering after MODEL_SECONDS (or the seconds a test parametrizes it with)."""
    delay = getattr(request, "param", MODEL_SECONDS)
    with FakeOpenAI(content="- Diffusion models are composed [1]", delay=delay) as api:
        yield api


@pytest.fixture
def bot(store: Store, slack_api: FakeSlack, model: FakeOpenAI) -> Iterator[Bot]:
    store.add_items(fixture_items(ARCHIVE))
    settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack_api.url,
                        poll_interval=0, summary_api_url=model.url, summary_api_key="key",
                        summary_model="stand-in")
    executor = ThreadPoolExecutor(max_workers=LAZY_WORKERS, thread_name_prefix="lazy")  # as `serve` makes it
    lane = ModelLane()
    app = build_app(settings, store, client=web_client(settings), executor=executor, model_lane=lane)
    server = create_http_server(Router(SlackRequestHandler(app, path=EVENTS_PATH), store, None, SECRET), 0,
                                host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        yield Bot(f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}", lane)
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        model.released.set()  # the slow answers still waiting come at once
        executor.shutdown(wait=True)
        lane.shutdown(wait=True)


def test_one_persons_summaries_never_delay_another_persons_save(
    bot: Bot, store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    with Recorder() as hooks:
        acks = [bot.command("summarize diffusion", "U0ALICE", hooks.url(f"/alice/{n}")) for n in range(16)]
        # what the lane takes of one person (one running, one waiting); the rest is told at once, in the ack
        assert acks == [WORKING] * lanes.PER_USER + [BUSY] * (16 - lanes.PER_USER)
        assert bot.command("summarize diffusion", "U0ALICE", hooks.url("/alice/17")) == BUSY
        # another person is not held back by her: a summary of his own is taken, his Save answered at once
        assert bot.command("summarize diffusion", "U0BOB", hooks.url("/bob/summary")) == WORKING
        item = store.latest(1)[0]
        clicked = time.monotonic()
        click = block_action_body(SAVE_ACTION_ID, item.id, user="U0BOB", response_url=hooks.url("/bob/save"))
        bot.post(click, "application/x-www-form-urlencoded")
        assert hooks.wait_for(lambda r: bool(r.to("/bob/save")), timeout=10)
        waited = hooks.to("/bob/save")[0].at - clicked
        assert waited < 1.0, f"Bob's Save waited {waited:.1f} s behind Alice's summaries"
        assert "Saved" in hooks.to("/bob/save")[0].json["text"]
        assert [s.item.id for s in store.saved_items(TEAM, "U0BOB")] == [item.id]
        # the summaries taken are answered by the model; the ones refused never reached it
        answered = ["/alice/0", "/alice/1", "/bob/summary"]
        assert hooks.wait_for(lambda r: all(r.to(p) for p in answered), timeout=MODEL_SECONDS * 4)
        for path in answered:
            assert "Diffusion models are composed" in json.dumps(hooks.to(path)[0].json)
        assert not any(hooks.to(f"/alice/{n}") for n in range(2, 16))
    assert len(model.requests) == 3


def test_a_question_over_the_cap_gets_the_busy_line_in_its_thread(
    bot: Bot, slack_api: FakeSlack, store: Store
) -> None:
    with Recorder() as hooks:
        for n in range(lanes.PER_USER):  # Alice's place on the lane is taken
            assert bot.command("summarize diffusion", "U0ALICE", hooks.url(f"/alice/{n}")) == WORKING
        asked = {"type": "message", "channel_type": "im", "channel": "D0ALICE", "user": "U0ALICE",
                 "text": "summarize diffusion models", "ts": "1700000100.000100",
                 "event_ts": "1700000100.000100"}
        bot.post(event_body(asked), "application/json")
        assert slack_api.wait_for(lambda s: bool(s.posts("D0ALICE")), timeout=10)
        [reply] = slack_api.posts("D0ALICE")
        assert reply["text"] == BUSY and reply["thread_ts"] == asked["ts"]
        assert reply["metadata"]["event_type"] == EVENT_TYPE


def test_sharing_a_summary_writes_it_again_on_the_lane_and_over_the_cap_says_busy(
    bot: Bot, model: FakeOpenAI
) -> None:
    with Recorder() as hooks:
        for n in range(lanes.PER_USER):
            assert bot.command("summarize diffusion", "U0ALICE", hooks.url(f"/alice/{n}")) == WORKING
        click = block_action_body(SHARE_ACTION_ID, "summarize diffusion", response_url=hooks.url("/share"))
        bot.post(click, "application/x-www-form-urlencoded")
        assert hooks.wait_for(lambda r: bool(r.to("/share")), timeout=5)
        [said] = hooks.to("/share")
        assert said.json["text"] == BUSY and said.json["response_type"] == "ephemeral"
        assert bot.lane_idle(MODEL_SECONDS * 4)
        bot.post(click, "application/x-www-form-urlencoded")  # her place is free again: shared
        assert hooks.wait_for(lambda r: len(r.to("/share")) >= 2, timeout=MODEL_SECONDS * 4)
        assert hooks.to("/share")[1].json["response_type"] == "in_channel"
        assert "Diffusion models are composed" in json.dumps(hooks.to("/share")[1].json)


@pytest.mark.parametrize("model", [HELD], indirect=True)
def test_two_busy_workspaces_never_leave_a_third_refused(bot: Bot, model: FakeOpenAI) -> None:
    """Each of two workspaces takes all it may (PER_WORKSPACE in flight; 16 in all, MAX_IN_FLIGHT); a third
    workspace's first summary is taken all the same, and a busy workspace is still told BUSY past its cap."""
    with Recorder() as hooks:
        for team in ("T0BUSYA", "T0BUSYB"):
            for n in range(lanes.PER_WORKSPACE):
                person = f"U0{team[-1]}{n // lanes.PER_USER}"
                assert bot.command("summarize diffusion", person, hooks.url(f"/{team}/{n}"), team) == WORKING
            assert bot.command("summarize diffusion", "U0LATE", hooks.url(f"/{team}/late"), team) == BUSY
        assert bot.lane.in_flight == lanes.MAX_IN_FLIGHT
        assert bot.command("summarize diffusion", "U0QUIET", hooks.url("/quiet"), "T0QUIET") == WORKING
        assert bot.command("summarize speech", "U0QUIET2", hooks.url("/quiet2"), "T0QUIET") == BUSY  # all in
        model.released.set()
        assert bot.lane_idle(WAIT) and hooks.wait_for(lambda r: bool(r.to("/quiet")), timeout=WAIT)
        assert "Diffusion models are composed" in json.dumps(hooks.to("/quiet")[0].json)


# --- the lane itself -------------------------------------------------------------------------------------


class Jobs:
    """Jobs for a lane that say when they start and end when told: `start(label)` runs until `end(label)`."""

    def __init__(self) -> None:
        self.started: queue.Queue[str] = queue.Queue()
        self.gates: dict[str, threading.Event] = {}

    def job(self, label: str) -> Callable[[], None]:
        self.gates[label] = threading.Event()

        def run() -> None:
            self.started.put(label)
            self.gates[label].wait(WAIT)

        return run

    def next_started(self) -> str:
        return self.started.get(timeout=WAIT)

    def end(self, label: str) -> None:
        self.gates[label].set()

    def end_all(self) -> None:
        for gate in self.gates.values():
            gate.set()


def test_a_quiet_workspaces_first_question_runs_next_not_behind_a_busy_ones_queue() -> None:
    lane, jobs = ModelLane(4), Jobs()
    try:
        for n in range(lanes.PER_WORKSPACE):  # 8 people of one workspace ask 2 summaries each: 8 are taken
            person = n // lanes.PER_USER
            assert lane.submit("TA", f"U{person}", jobs.job(f"A{person}.{n % lanes.PER_USER}"))
        running = [jobs.next_started() for _ in range(4)]  # every thread busy: nothing else can start
        assert lane.submit("TB", "U0", jobs.job("B0"))  # another workspace's first question
        jobs.end(running[0])
        assert jobs.next_started() == "B0"  # the next thread free is its: behind one running answer
        for label in [*running[1:], "B0"]:  # (first-come ran the four A's waiting before it)
            jobs.end(label)
        rest = [jobs.next_started() for _ in range(4)]
        assert sorted(running + rest) == sorted(f"A{n // 2}.{n % 2}" for n in range(8))
    finally:
        jobs.end_all()
        lane.shutdown(wait=True)
    assert lane.in_flight == 0 and not lane.users and not lane.workspaces


def test_within_a_workspace_a_persons_second_question_waits_behind_anothers_first() -> None:
    lane, jobs = ModelLane(1), Jobs()
    try:
        assert lane.submit("T1", "U1", jobs.job("alice 1"))
        assert jobs.next_started() == "alice 1"
        assert lane.submit("T1", "U1", jobs.job("alice 2"))
        assert lane.submit("T1", "U2", jobs.job("bob 1"))
        jobs.end("alice 1")
        assert jobs.next_started() == "bob 1"  # first-come ran "alice 2"
        jobs.end("bob 1")
        assert jobs.next_started() == "alice 2"
    finally:
        jobs.end_all()
        lane.shutdown(wait=True)


def test_shutting_down_drops_what_waits_and_frees_its_places() -> None:
    lane, jobs = ModelLane(1), Jobs()
    assert lane.submit("T1", "U1", jobs.job("running"))
    assert jobs.next_started() == "running"
    slot = lane.admit("T2", "U2")
    assert slot is not None
    waiting = slot.start(jobs.job("waiting"))
    assert waiting is not None and not waiting.done()
    lane.shutdown(wait=False, cancel_futures=True)
    assert waiting.cancelled() and lane.in_flight == 1  # the running job keeps its place until it ends
    assert not lane.submit("T3", "U3", jobs.job("late"))
    jobs.end("running")
    lane.shutdown(wait=True)
    assert lane.in_flight == 0 and not lane.users and not lane.workspaces
    assert jobs.started.empty()  # neither the waiting job nor the late one ran


def test_the_lane_caps_each_person_each_workspace_and_in_all_and_frees_a_place_when_work_ends() -> None:
    lane = ModelLane(2, per_user=2, per_workspace=3, total=4)
    gate = threading.Event()
    try:
        assert lane.submit("T1", "U1", gate.wait, 10) and lane.submit("T1", "U1", gate.wait, 10)
        assert not lane.submit("T1", "U1", gate.wait, 10)  # a third for one person
        assert lane.submit("T1", "U2", gate.wait, 10)
        assert not lane.submit("T1", "U3", gate.wait, 10)  # a fourth for one workspace
        assert lane.submit("T2", "U1", gate.wait, 10)  # the same id in another workspace: another person
        assert not lane.submit("T2", "U2", gate.wait, 10)  # four in flight in all
        assert lane.submit("T3", "U9", gate.wait, 10)  # ... but a workspace with nothing in flight is taken
        assert not lane.submit("T3", "U8", gate.wait, 10)  # (once)
        gate.set()
        deadline = time.monotonic() + 5
        while lane.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lane.in_flight == 0 and not lane.users and not lane.workspaces
        done = threading.Event()

        def boom() -> None:
            done.set()
            raise RuntimeError("a failing job frees its place too")

        assert lane.submit("T1", "U1", boom)
        assert done.wait(5)
        deadline = time.monotonic() + 5
        while lane.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lane.in_flight == 0
    finally:
        gate.set()
        lane.shutdown(wait=True)
    assert not lane.submit("T1", "U1", print)  # shut down: nothing runs, and no place is kept
    assert lane.in_flight == 0
