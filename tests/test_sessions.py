"""Agent sessions (issue 52): every question (a mention, a DM, the Messages tab) is a session that shows
processing with a title and Bolt's loading messages at once and is active when answered; the progress streams
as Slack's task chunks with the papers found as sources; Slack's stop button (`agent_session_stopped`, the
payload as docs.slack.dev documents it) ends a written answer's work at once, closes the model request and
ends the stream with a line saying it was stopped, over each store."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest

from bot import sessions
from bot.answers import STOPPED
from bot.sessions import Stops
from bot.store import Store
from tests import slack_docs
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import TEAM, http, signed_headers
from tests.test_agent import context_body, dm, running, view

LONG = " ".join(f"Finding number {n} of the speech work is described in the second item [2]."
                for n in range(40))


def stop_event(channel: str, thread_ts: str, streaming: list[str] | None = None) -> dict[str, Any]:
    event = dict(slack_docs.parsed("agent_session_stopped"))  # Slack's documented event (tests/data/slack/)
    event.update(channel=channel, thread_ts=thread_ts, user="U0ALICE")
    event["streaming_message_ts"] = streaming or []
    return event


def wait_for(check: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# --- sessions -----------------------------------------------------------------------------------------------


def test_a_first_question_is_a_session_processing_with_a_title_then_active(store: Store,
                                                                           slack_api: FakeSlack) -> None:
    with running(store, slack_api) as bot:
        asked = dm(bot, "what has Apple published on speech recognition?")
        bot.drain()
        first = slack_api.calls_to("agents.sessions.setStatus")
        followed = dm(bot, "and on-device?", thread_ts=asked["ts"])
        bot.drain()
    assert [c.params["status"] for c in first] == ["processing", "active"]
    opened = first[0].params
    assert opened["channel_id"] == "D0ALICE" and opened["thread_ts"] == asked["ts"]
    assert opened["title"] == "what has Apple published on speech recognition?"
    assert opened["initiator_user_id"] == "U0ALICE"
    again = slack_api.calls_to("agents.sessions.setStatus")[2:]  # the follow-up: same session, no new title
    assert [c.params["status"] for c in again] == ["processing", "active"]
    assert all(c.params["thread_ts"] == followed["thread_ts"] and "title" not in c.params for c in again)
    # Bolt's set_status shows the loading messages while the archive is searched, for a first question too
    statuses = slack_api.calls_to("assistant.threads.setStatus")
    assert len(statuses) == 2 and statuses[0].params["thread_ts"] == asked["ts"]
    assert statuses[0].params["loading_messages"][0] == "Searching the archive…"
    assert bot.answers("D0ALICE")  # and it was answered


def test_a_mention_is_a_session_in_its_channel_thread(store: Store, slack_api: FakeSlack) -> None:
    with running(store, slack_api) as bot:
        asked = bot.mention("<@UFAKEBOT> summarize diffusion models", channel="C0TALK")
        bot.drain()
    calls = slack_api.calls_to("agents.sessions.setStatus")
    assert [(c.params["channel_id"], c.params["thread_ts"], c.params["status"]) for c in calls] == [
        ("C0TALK", asked["ts"], "processing"), ("C0TALK", asked["ts"], "active")]


def test_a_session_slack_refuses_is_one_log_line_and_the_answer_goes_on(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack_api.fault("agents.sessions.setStatus", error="not_allowed_token_type", times=None)
    with caplog.at_level(logging.INFO, logger="bot"), running(store, slack_api) as bot:
        dm(bot, "speech recognition")
        bot.drain()
        (answer,) = bot.answers("D0ALICE")
    failed = [r.getMessage() for r in caplog.records if "session_status_failed" in r.getMessage()]
    assert len(failed) == 2 and "not_allowed_token_type" in failed[0] and "Traceback" not in caplog.text
    assert answer["blocks"][-1]["type"] == "context_actions"


# --- progress as task chunks --------------------------------------------------------------------------------


def test_a_written_answer_streams_its_progress_as_tasks_with_the_papers_as_sources(
    store: Store, slack_api: FakeSlack
) -> None:
    written = "Apple runs speech recognition on-device [2]. Large speech models are trained on servers [1]."
    with FakeOpenAI(written, chunk_chars=9) as model, \
            running(store, slack_api, summary_api_url=model.url) as bot:
        dm(bot, "what has Apple published on speech recognition?")
        bot.drain()
    (message,) = slack_api.streamed("D0ALICE")
    (start,) = slack_api.calls_to("chat.startStream")
    opening = {c["id"]: c for c in start.params["chunks"] if c.get("type") == "task_update"}
    assert opening["search"]["status"] == "complete" and opening["search"]["output"].endswith("papers found")
    assert opening["search"]["sources"][0]["url"].startswith("https://machinelearning.apple.com/research/")
    assert opening["write"] == {"type": "task_update", "id": "write", "title": "Writing the answer",
                                "status": "in_progress"}
    assert message["tasks"]["write"]["status"] == "complete"  # stopStream: the answer is written
    assert "on-device [2]." in message["markdown"]


# --- the stop button ----------------------------------------------------------------------------------------


def test_the_stop_button_ends_a_written_answer_closes_the_model_request_and_says_so(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI(LONG, chunk_chars=40, pace=0.2) as model, caplog.at_level(logging.INFO, logger="bot"), \
            running(store, slack_api, summary_api_url=model.url) as bot:
        asked = dm(bot, "what has Apple published on speech recognition?")
        wait_for(lambda: any("Finding number 0" in "".join(sum(m["stream_chunks"], []))
                             for m in slack_api.streamed("D0ALICE")))
        (streaming,) = slack_api.streamed("D0ALICE")
        assert bot.send(stop_event("D0ALICE", asked["ts"], [streaming["ts"]])) == 200
        assert model.gave_up.wait(5)  # the model request was closed: no more tokens are spent
        bot.drain()
    (message,) = slack_api.streamed("D0ALICE")
    assert message["stopped"] and "Finding number 0" in message["markdown"]
    assert "Finding number 39" not in message["markdown"]
    assert STOPPED in json.dumps(message["blocks"], ensure_ascii=False)
    assert message["blocks"][-1]["type"] == "context_actions"  # feedback buttons still end it
    assert message["tasks"]["write"]["output"] == "Stopped"
    assert slack_api.session_statuses("D0ALICE", asked["ts"]) == ["processing", "active"]
    assert len(model.requests) == 1
    lines = [r.getMessage() for r in caplog.records]
    assert any("event=session_stop " in line and "found=1" in line for line in lines)
    assert any("event=question_stopped" in line for line in lines)
    assert "Traceback" not in caplog.text


def test_a_stop_with_no_work_twice_or_for_another_workspace_changes_nothing(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="bot"), running(store, slack_api) as bot:
        asked = dm(bot, "speech recognition")
        bot.drain()
        before = len(slack_api.calls)
        for _ in range(2):
            assert bot.send(stop_event("D0ALICE", asked["ts"])) == 200  # answered already: nothing runs
        body = json.dumps({
            "token": "x", "team_id": "T0OTHER", "api_app_id": "A0FAKE", "type": "event_callback",
            "event": stop_event("D0ALICE", asked["ts"]), "event_id": "Ev0OTHER", "event_time": 1,
            "authorizations": [{"team_id": "T0OTHER", "user_id": "UOTHERBOT", "is_bot": True}]})
        status, _ = http("POST", bot.url, body.encode(), signed_headers(body.encode(), "application/json"))
        assert status == 200
        odd = {**stop_event("D0ALICE", asked["ts"]), "thread_ts": "", "channel": "D0ALICE"}
        assert bot.send(odd) == 200  # a shape the request check lets through: the listener's one line
        bot.drain()
        assert len(slack_api.calls) == before  # no Slack call for any of them
    lines = [r.getMessage() for r in caplog.records if "session_stop" in r.getMessage()]
    assert sum("found=0" in line for line in lines) == 3  # a line each: twice here, once the other workspace
    assert any("session_stop_ignored reason=malformed" in line for line in lines)
    assert "Traceback" not in caplog.text
    (answer,) = bot.answers("D0ALICE")  # the answer given stays as it was
    assert answer["blocks"][-1]["type"] == "context_actions"


def test_a_stop_received_by_another_process_reaches_the_answer_through_the_store(store: Store) -> None:
    store.claim_question(TEAM, "D0ALICE", "1700000001.000100", "1700000001.000100", "Ev1")
    here, there = Stops(), Stops()  # two processes: the one answering, the one Slack sent the stop to
    with here.watch(store, TEAM, "D0ALICE", "1700000001.000100", "1700000001.000100") as stop:
        assert there.request_stop(store, TEAM, "D0ALICE", "1700000001.000100") == 1
        assert stop.wait(sessions.STOP_POLL * 20)
    assert here.running() == 0
    # the stopped question is not taken over later (it is not answered twice) and does not block its thread
    assert store.claim_question(TEAM, "D0ALICE", "1700000001.000100", "1700000001.000100", "Ev1",
                                stale_after=0) == "answered"
    assert store.questions_before(TEAM, "D0ALICE", "1700000001.000100", "1700000002.000100") == 0


def test_a_stop_for_another_thread_or_workspace_leaves_a_running_answer_alone(store: Store) -> None:
    stops = Stops()
    store.claim_question(TEAM, "D0ALICE", "1700000001.000100", "1700000001.000100", "Ev1")
    with stops.watch(store, TEAM, "D0ALICE", "1700000001.000100", "1700000001.000100") as stop:
        assert stops.request_stop(store, TEAM, "D0ALICE", "1700000009.000100") == 0
        assert stops.request_stop(store, "T0OTHER", "D0ALICE", "1700000001.000100") == 0
        assert not stop.wait(sessions.STOP_POLL * 3)
    assert not store.stop_requested(TEAM, "D0ALICE", "1700000001.000100")


def test_a_context_of_odd_shapes_is_one_log_line_and_changes_nothing(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    slack_api.handlers["conversations.info"] = lambda call: {"ok": True, "channel": {"id": "C0SEEN"}}
    with caplog.at_level(logging.INFO, logger="bot"), running(store, slack_api) as bot:
        assert view(bot, "C0SEEN") == 200
        bot.drain()
        assert store.viewing(TEAM, "U0ALICE") == "C0SEEN"
        # a context Slack never sends (not an object, entities not a list) is refused before any listener
        for context in ([], "x", {"entities": {"type": "x"}}, {"entities": "C0OTHER"}):
            body = json.loads(context_body("C0IGNORED"))
            body["event"]["context"] = context
            raw = json.dumps(body).encode()
            assert http("POST", bot.url, raw, signed_headers(raw, "application/json"))[0] == 400
        # entities of odd shapes in a list: acked, one log line each, nothing changed
        odd: list[Any] = [{"entities": [1, None, {"type": "slack#/types/channel_id", "value": {"a": 1}}]},
                          {"entities": [{"type": "slack#/types/channel_id", "value": "not a channel"}]}]
        for context in odd:
            body = json.loads(context_body("C0IGNORED"))
            body["event"]["context"] = context
            raw = json.dumps(body).encode()
            status, _ = http("POST", bot.url, raw, signed_headers(raw, "application/json"))
            assert status == 200
        bot.drain()
        assert store.viewing(TEAM, "U0ALICE") == "C0SEEN"  # nothing changed
    ignored = [r.getMessage() for r in caplog.records if "context_ignored" in r.getMessage()]
    assert len(ignored) == len(odd)
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if "listener_error" in r.getMessage()]


def test_an_empty_context_means_no_channel_is_in_view(store: Store, slack_api: FakeSlack) -> None:
    slack_api.handlers["conversations.info"] = lambda call: {"ok": True, "channel": {"id": "C0SEEN"}}
    with running(store, slack_api) as bot:
        view(bot, "C0SEEN")
        bot.drain()
        body = json.loads(context_body("C0SEEN"))
        body["event"]["context"] = {}  # as Slack documents it when no entity is in view
        raw = json.dumps(body).encode()
        assert http("POST", bot.url, raw, signed_headers(raw, "application/json"))[0] == 200
        bot.drain()
    assert store.viewing(TEAM, "U0ALICE") is None


def test_stops_are_released_when_the_answer_ends() -> None:
    stops = Stops()
    released = threading.Event()
    with stops.watch(None, TEAM, "D1", "1.1", "1.1"):
        assert stops.running() == 1
        released.set()
    assert stops.running() == 0 and released.is_set()
