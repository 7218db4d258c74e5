"""The agent messaging experience end to end (issue 20): the manifest, the Messages tab (greeting, prompts,
answers in their own thread), "what's new here?" from `app_context_changed`, answers written by a model and
streamed with citations, and feedback buttons, over each store, with FakeSlack and a streaming FakeOpenAI."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec.structs
import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.app import build_app, make_services, web_client
from bot.cli import main
from bot.config import Settings
from bot.errors import EmbeddingError
from bot.lanes import ModelLane
from bot.search.index import SearchIndex
from bot.server import EVENTS_PATH, Router, create_http_server, run_until, wake
from bot.store import Store
from tests import slack_docs
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, feedback_click
from tests.fakes.slack_sender import SECRET, TEAM, TOKEN, http, signed_headers
from tests.test_conversation import ITEMS, Bot, TrackingExecutor

ROOT = Path(__file__).resolve().parents[1]
WRITTEN = ("Apple runs speech recognition on-device, privately and fast [2]. Large speech models are trained "
           "on servers [1]. Apple also invented teleportation. Another claim cites nothing listed [9]. "
           "Both aim at speech recognition [1][2].")


@contextmanager
def running(store: Store, slack: FakeSlack, meaning: Callable[[], Any] | None = None, **settings: Any
            ) -> Iterator[Bot]:
    """The app over signed HTTP; `meaning` loads search's model instead of the settings' (it may fail)."""
    store.add_items(ITEMS)
    config = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.url,
                      poll_interval=0, **settings)
    executor = TrackingExecutor(4)
    client = web_client(config)
    services = make_services(config, store, client)
    if meaning is not None:
        services = msgspec.structs.replace(services, index=SearchIndex(store, model=meaning))
    # the model lane on the same tracked pool, so Bot.drain() waits for written answers too
    app = build_app(config, store, client=client, executor=executor, services=services,
                    model_lane=ModelLane(pool=executor))
    router = Router(SlackRequestHandler(app, path=EVENTS_PATH), store, None, SECRET)
    server = create_http_server(router, 0, host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        yield Bot(f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}", executor, slack)
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        executor.shutdown(wait=True)


@pytest.fixture
def bot(store: Store, slack_api: FakeSlack) -> Iterator[Bot]:
    with running(store, slack_api) as b:
        yield b


def channels_seen(slack: FakeSlack, *seen: str) -> None:
    """conversations.info answers for the channels in `seen`; any other is channel_not_found (not in it)."""
    def info(call: Any) -> dict[str, Any]:
        channel = str(call.params.get("channel") or "")
        if channel not in seen:
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {"id": channel, "is_member": True}}

    slack.handlers["conversations.info"] = info


def dm(bot: Bot, text: str, channel: str = "D0ALICE", thread_ts: str | None = None) -> dict[str, Any]:
    ts = bot.next_ts()
    event = {"type": "message", "channel_type": "im", "channel": channel, "user": "U0ALICE", "text": text,
             "ts": ts, "event_ts": ts, **({"thread_ts": thread_ts} if thread_ts else {})}
    assert bot.send(event) == 200
    return event


def click(bot: Bot, payload: dict[str, Any]) -> tuple[int, float]:
    body = urlencode({"payload": json.dumps(payload)}).encode()
    started = time.monotonic()
    status, _ = http("POST", bot.url, body, signed_headers(body, "application/x-www-form-urlencoded"))
    return status, time.monotonic() - started


def dumped(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks") or [], ensure_ascii=False)


# --- the manifest --------------------------------------------------------------------------------------


def test_the_manifest_declares_the_agent_messaging_experience_in_a_shape_slack_accepts() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    features = manifest["features"]
    assert "assistant_view" not in features  # new apps can only use the agent messaging experience
    agent = features["agent_view"]
    assert set(agent) <= {"agent_description", "suggested_prompts", "actions"}  # the schema's properties
    assert isinstance(agent["agent_description"], str) and 0 < len(agent["agent_description"]) <= 300
    prompts = agent["suggested_prompts"]
    assert 1 <= len(prompts) <= 4
    assert all(set(p) == {"title", "message"} and p["title"] and p["message"] for p in prompts)
    assert features["app_home"]["messages_tab_enabled"] is True
    assert features["app_home"]["messages_tab_read_only_enabled"] is False
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_home_opened", "message.im", "app_context_changed", "app_mention"} <= events
    assert not {e for e in events if e.startswith("assistant_thread")}  # assistant_view's events
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    needed = {"message.im": "im:history", "app_mention": "app_mentions:read", "channel_left": "channels:read"}
    assert all(scope in scopes for event, scope in needed.items() if event in events)
    assert {"chat:write", "assistant:write", "im:write", "channels:read", "groups:read"} <= scopes
    info = manifest["display_information"]
    assert len(info["name"]) <= 35 and len(info["description"]) <= 140
    assert 174 <= len(info["long_description"]) <= 4000


# --- the Messages tab ------------------------------------------------------------------------------------


def test_opening_the_messages_tab_greets_once_and_sets_prompts_without_a_thread(bot: Bot,
                                                                              store: Store) -> None:
    opened = {"type": "app_home_opened", "user": "U0ALICE", "channel": "D0ALICE", "tab": "messages",
              "event_ts": "1700000000.1"}
    for _ in range(3):
        assert bot.send(opened) == 200
        bot.drain()
    greetings = bot.slack.posts("D0ALICE")
    assert len(greetings) == 1 and "Ask me in plain words" in greetings[0]["text"]
    prompts = bot.slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert len(prompts) == 3 and all("thread_ts" not in p.params for p in prompts)
    assert prompts[0].params["channel_id"] == "D0ALICE" and len(prompts[0].params["prompts"]) == 4
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert prompts[0].params["prompts"] == manifest["features"]["agent_view"]["suggested_prompts"]
    assert store.greet_once(TEAM, "U0ALICE") is False and store.greet_once(TEAM, "U0BOB") is True
    assert bot.slack.calls_to("views.publish") == []  # the Home tab is not published for the Messages tab


def test_a_messages_tab_message_is_answered_in_its_own_thread_ending_with_feedback_buttons(bot: Bot) -> None:
    first = dm(bot, "what has Apple published on speech recognition this year?")
    second = dm(bot, "diffusion")
    bot.drain()
    replies = sorted(bot.answers("D0ALICE"), key=lambda r: r["thread_ts"])
    assert [r["thread_ts"] for r in replies] == [first["ts"], second["ts"]]  # each its own thread
    for reply in replies:
        last = reply["blocks"][-1]
        assert last["type"] == "context_actions"
        (buttons,) = last["elements"]
        assert buttons["type"] == "feedback_buttons" and buttons["action_id"] == "answer_feedback"
        assert buttons["positive_button"]["value"] == "up" and buttons["negative_button"]["value"] == "down"
    assert "Searched for “speech recognition”" in dumped(replies[0])
    assert "speech-on-device" in dumped(replies[0])


# --- context ---------------------------------------------------------------------------------------------


def context_body(channel: str, user: str = "U0ALICE", team: str = TEAM) -> bytes:
    """Slack's documented payload (tests/data/slack/app_context_changed.txt: the event has no `user`, the
    person is the envelope's authorization), its ids pointed at this test's workspace, person and channel."""
    body = slack_docs.envelope("app_context_changed")
    body["team_id"] = team
    body["event"]["context"]["entities"][0].update(value=channel, team_id=team)
    body["authorizations"][0].update(team_id=team, user_id=user)
    body["event_id"] = f"Ev{time.monotonic_ns()}"
    return json.dumps(body).encode()


def view(bot: Bot, channel: str, user: str = "U0ALICE") -> int:
    """The person looks at `channel` beside the Messages tab (a signed app_context_changed, as Slack
    sends it)."""
    body = context_body(channel, user)
    status, _ = http("POST", bot.url, body, signed_headers(body, "application/json"))
    return status


def test_whats_new_here_uses_the_subscription_of_the_channel_in_view(bot: Bot, store: Store) -> None:
    store.subscribe(TEAM, "C0ML", "U0BOB", ["diffusion"])
    channels_seen(bot.slack, "C0ML")
    assert view(bot, "C0ML") == 200
    bot.drain()
    dm(bot, "what's new here?")
    bot.drain()
    (reply,) = bot.answers("D0ALICE")
    body = dumped(reply)
    assert "Searched for “diffusion” (the keywords and topics <#C0ML> subscribes to)" in body
    links = body.split("<https://machinelearning.apple.com/research/")
    assert links[1].startswith("diffusion|")  # the channel's topic first (what else: the search's call)


def test_whats_new_here_in_a_mention_uses_that_channels_subscription(bot: Bot, store: Store) -> None:
    store.subscribe(TEAM, "C0SPEECH", "U0BOB", ["speech recognition", "about:on-device privacy"])
    bot.mention("what's new here?", channel="C0SPEECH")
    bot.drain()
    (reply,) = bot.answers("C0SPEECH")
    assert "(the keywords and topics <#C0SPEECH> subscribes to)" in dumped(reply)
    said = reply["blocks"][0]["elements"][0]["text"]
    assert said.startswith('Searched for “"speech recognition" on-device privacy”')


def test_a_context_naming_a_channel_the_bot_cannot_see_is_one_log_line_and_a_sensible_reply(
    bot: Bot, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.subscribe(TEAM, "C0SEEN", "U0BOB", ["diffusion"])
    channels_seen(bot.slack, "C0SEEN")
    view(bot, "C0SEEN")
    bot.drain()
    with caplog.at_level(logging.INFO, logger="bot"):
        view(bot, "C0SECRET")  # the bot is not in it: conversations.info says channel_not_found
        bot.drain()
    lines = [r.getMessage() for r in caplog.records if "context_unseen" in r.getMessage()]
    assert len(lines) == 1 and "channel_not_found" in lines[0] and "Traceback" not in caplog.text
    dm(bot, "what's new here?")
    bot.drain()
    (reply,) = bot.answers("D0ALICE")
    assert "I can't tell which channel you're looking at" in dumped(reply)
    assert "The 4 newest items" in dumped(reply)  # the whole archive's, not the earlier channel's


# --- written answers, streamed --------------------------------------------------------------------------


@pytest.fixture
def model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(WRITTEN, chunk_chars=9, pace=0.01) as api:
        yield api


def test_a_written_answer_to_a_misspelt_question_is_headed_by_what_was_searched(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    """The streamed header said the words as typed ("speech recogniton") though the search put them right."""
    with running(store, slack_api, summary_api_url=model.url, summary_api_key="k") as bot:
        dm(bot, "anything on speech recogniton?")
        bot.drain()
        (message,) = slack_api.streamed("D0ALICE")
    assert message["markdown"].startswith(
        "_Searched for “speech recognition” (you typed “speech recogniton”)")


def test_a_written_answer_says_what_the_search_reply_would_note(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    """Search by meaning unavailable (or still starting): these items match the words only. The answer the
    model writes says so in one line beside its cited items, as the search's own reply does."""
    def broken() -> Any:
        raise EmbeddingError("the model file is damaged")

    with running(store, slack_api, meaning=broken, summary_api_url=model.url, summary_api_key="k") as bot:
        dm(bot, "anything on speech recognition?")
        bot.drain()
        (message,) = slack_api.streamed("D0ALICE")
    assert "[1] <https://machinelearning.apple.com/research/" in dumped(message)
    note = ("Search by meaning is unavailable (the model file is damaged); these results match your words "
            "only.")
    assert dumped(message).count(note) == 1
    assert message["blocks"][-1]["type"] == "context_actions"


def test_a_written_answer_streams_sentences_that_cite_and_ends_with_the_cited_items(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="bot"), \
            running(store, slack_api, summary_api_url=model.url, summary_api_key="k") as bot:
        asked = dm(bot, "what has Apple published on speech recognition this year?")
        bot.drain()
        (message,) = slack_api.streamed("D0ALICE")
        click(bot, feedback_click("D0ALICE", message["ts"], "up", thread_ts=asked["ts"]))
        bot.drain()
    (vote,) = store.feedback_since()  # a vote on a streamed answer: the items it cited
    assert len(vote.shown) == 2 and all(f"<{i['link']}|" in dumped(message) for i in vote.shown)
    assert message["thread_ts"] == asked["ts"] and message["stopped"]
    markdown = message["markdown"]
    assert markdown.startswith("_Searched for “speech recognition”")
    assert "on-device, privately and fast [2]." in markdown and "trained on servers [1]." in markdown
    assert "teleportation" not in markdown and "[9]" not in markdown  # unsupported: dropped
    assert "Both aim at speech recognition [1][2]." in markdown
    appends = slack_api.calls_to("chat.appendStream")
    assert len(appends) >= 2  # sentence by sentence, as the model writes them
    (start,) = slack_api.calls_to("chat.startStream")
    assert start.params["recipient_user_id"] == "U0ALICE" and start.params["recipient_team_id"] == TEAM
    blocks = dumped(message)
    assert "[1] <https://machinelearning.apple.com/research/" in blocks and "[2] <" in blocks
    assert message["blocks"][-1]["type"] == "context_actions"
    assert message["metadata"]["event_payload"] == {"message_ts": asked["ts"]}
    assert slack_api.calls_to("chat.postMessage") == []
    assert model.requests[0]["body"]["stream"] is True
    system = model.requests[0]["body"]["messages"][0]["content"]
    assert "only claims the items support" in system and "End every sentence with the numbers" in system
    dropped = [r.getMessage() for r in caplog.records if "written_sentence_dropped" in r.getMessage()]
    assert len(dropped) == 2


def test_a_streamed_sentence_citing_a_number_outside_the_listed_items_is_dropped(
    store: Store, slack_api: FakeSlack
) -> None:
    """Two items are listed, numbered 1 and 2: a sentence citing [0], or [3] (one past the last), is dropped,
    alone or beside a good citation; those citing [1] and [2] stay."""
    text = ("Large speech models are trained on servers [1]. Zero is no item [0]. Three is one past the last "
            "[3]. Half right is still wrong [2][3]. Zero beside one [0, 1]. Both aim at speech recognition "
            "[1, 2].")
    with FakeOpenAI(text, chunk_chars=7) as api, \
            running(store, slack_api, summary_api_url=api.url, summary_api_key="k") as bot:
        dm(bot, "what has Apple published on speech recognition this year?")
        bot.drain()
        (message,) = slack_api.streamed("D0ALICE")
    markdown = message["markdown"]
    assert "trained on servers [1]." in markdown and "Both aim at speech recognition [1][2]." in markdown
    for dropped in ("Zero", "Three", "Half right", "[0]", "[3]"):
        assert dropped not in markdown
    assert len(re.findall(r"<https://machinelearning\.apple\.com/research/", dumped(message))) == 2


def test_a_stream_slack_refuses_falls_back_to_posting_the_finished_answer_once(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    slack_api.fault("chat.startStream", error="method_deprecated", times=None)
    with running(store, slack_api, summary_api_url=model.url) as bot:
        asked = dm(bot, "speech recognition")
        bot.drain()
        (reply,) = bot.answers("D0ALICE")
    assert reply["thread_ts"] == asked["ts"] and slack_api.calls_to("chat.appendStream") == []
    body = dumped(reply)
    assert "on-device, privately and fast [2]." in body and "teleportation" not in body
    assert reply["blocks"][-1]["type"] == "context_actions"


def test_a_stream_that_breaks_after_it_started_is_finished_in_its_own_message(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    slack_api.fault("chat.appendStream", error="streaming_state_conflict", times=None)
    with running(store, slack_api, summary_api_url=model.url) as bot:
        asked = dm(bot, "speech recognition")
        bot.drain()
    (message,) = slack_api.streamed("D0ALICE")
    assert message["thread_ts"] == asked["ts"] and message.get("updated")
    assert len(slack_api.calls_to("chat.appendStream")) == 1  # refused once: no more tries
    body = dumped(message)
    assert "on-device, privately and fast [2]." in body and message["blocks"][-1]["type"] == "context_actions"
    assert slack_api.calls_to("chat.postMessage") == [] and slack_api.calls_to("chat.stopStream") == []
    assert message["metadata"]["event_payload"] == {"message_ts": asked["ts"]}


@pytest.mark.parametrize("broken", ["cut", "malformed"])
def test_a_model_stream_that_breaks_gives_a_sensible_answer_and_one_log_line(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture, broken: str
) -> None:
    scripted = {"cut": {"cut_after": 12}, "malformed": {"stream_lines": ["{not json"]}}[broken]
    with FakeOpenAI(WRITTEN, chunk_chars=9, **scripted) as api, caplog.at_level(logging.INFO, logger="bot"), \
            running(store, slack_api, summary_api_url=api.url) as bot:
        dm(bot, "speech recognition")
        bot.drain()
    (message,) = slack_api.streamed("D0ALICE")
    assert message["stopped"]
    failures = [r.getMessage() for r in caplog.records if "written_answer_failed" in r.getMessage()]
    assert len(failures) == 1 and "Traceback" not in caplog.text
    blocks = dumped(message)
    assert "speech-cloud" in blocks or "speech-on-device" in blocks  # the items, with links
    if broken == "cut":  # what was written before the cut stays, and the answer says it was cut short
        assert "privately and fast [2]." in message["markdown"] and "cut short" in blocks
    else:  # nothing written: the answer without the model
        assert message["blocks"][-1]["type"] == "context_actions"


# --- feedback --------------------------------------------------------------------------------------------


def test_a_vote_is_acked_at_once_stored_once_and_thanked_ephemerally(bot: Bot, store: Store) -> None:
    asked = dm(bot, "diffusion")
    bot.drain()
    (reply,) = bot.answers("D0ALICE")
    status, took = click(bot, feedback_click("D0ALICE", reply["ts"], "down", thread_ts=asked["ts"]))
    assert status == 200 and took < 3.0
    bot.drain()
    click(bot, feedback_click("D0ALICE", reply["ts"], "up", thread_ts=asked["ts"]))  # the last vote counts
    bot.drain()
    (vote,) = store.feedback_since()
    assert vote.vote == "up" and vote.user_id == "U0ALICE" and vote.message_ts == reply["ts"]
    assert json.loads(vote.understood)["words"] == ["diffusion"]
    assert vote.shown[0]["link"] == "https://machinelearning.apple.com/research/diffusion"
    assert vote.shown[0]["title"] == "Diffusion Models for Images"
    thanks = slack_api_ephemerals(bot)
    assert len(thanks) == 2 and "Thanks" in thanks[0]["text"] and thanks[0]["thread_ts"] == asked["ts"]
    assert thanks[0]["user"] == "U0ALICE"


def test_two_people_vote_on_one_answer_and_each_ones_last_vote_counts(
    bot: Bot, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An answer in a channel, voted on by Alice and Bob, each changing their mind once: both votes are
    kept, each person's last one, and neither person's vote changes the other's."""
    asked = bot.mention("diffusion")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    with caplog.at_level(logging.INFO, logger="bot"):
        for user, vote in (("U0ALICE", "up"), ("U0BOB", "down"), ("U0ALICE", "down"), ("U0BOB", "down"),
                           ("U0BOB", "up")):
            status, _ = click(bot, feedback_click("C0TALK", reply["ts"], vote, user=user,
                                                  thread_ts=asked["ts"]))
            assert status == 200
            bot.drain()
    votes = {v.user_id: v for v in store.feedback_since()}
    assert {user: v.vote for user, v in votes.items()} == {"U0ALICE": "down", "U0BOB": "up"}
    assert all(v.message_ts == reply["ts"] and v.channel_id == "C0TALK" for v in votes.values())
    assert all(json.loads(v.understood)["words"] == ["diffusion"] for v in votes.values())
    outcomes = [r.getMessage().split("outcome=")[1].split()[0] for r in caplog.records
                if "event=feedback " in r.getMessage()]
    assert outcomes == ["stored", "stored", "changed", "same", "changed"]
    assert [e["user"] for e in slack_api_ephemerals(bot)] == ["U0ALICE", "U0BOB", "U0ALICE", "U0BOB", "U0BOB"]


def test_a_vote_on_a_message_that_is_not_an_answer_stores_nothing(
    bot: Bot, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    other = bot.slack.add_message("D0ALICE", "hello", user="U0ALICE")
    with caplog.at_level(logging.INFO, logger="bot"):
        status, _ = click(bot, feedback_click("D0ALICE", other["ts"], "up"))
        bot.drain()
    assert status == 200 and store.feedback_since() == []
    lines = [r.getMessage() for r in caplog.records if "event=feedback " in r.getMessage()]
    assert len(lines) == 1 and "outcome=not_an_answer" in lines[0]
    (reply,) = slack_api_ephemerals(bot)
    assert "isn't one of my answers" in reply["text"]


def slack_api_ephemerals(bot: Bot) -> list[dict[str, Any]]:
    return bot.slack.ephemerals


def test_the_feedback_command_lists_votes(bot: Bot, store: Store, database_url: str,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    dm(bot, "speech recognition this year")
    bot.drain()
    (reply,) = bot.answers("D0ALICE")
    click(bot, feedback_click("D0ALICE", reply["ts"], "down"))
    bot.drain()
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert main(["feedback", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["vote"] == "down" and row["question"].startswith("search speech recognition since:")
    assert {i["link"] for i in row["items"]} >= {"https://machinelearning.apple.com/research/speech-cloud"}
    assert main(["feedback", "--since", "2999-01-01"]) == 0
    assert "no feedback yet since 2999-01-01" in capsys.readouterr().out
    assert main(["feedback"]) == 0
    out = capsys.readouterr().out
    assert "-1  search speech recognition" in out and "speech-cloud" in out
    assert main(["feedback", "--since", "yesterday"]) == 2


def test_a_stream_whose_process_died_is_finished_by_the_takeover_not_answered_twice(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI
) -> None:
    """The process answering died mid-stream (its message started, no metadata on it yet): the claim's
    takeover finishes that message with the answer, and posts no second one."""
    from bot.app import make_services
    from bot.conversation import Question, answer

    store.add_items(ITEMS)
    settings = Settings(slack_bot_token=TOKEN, slack_api_url=slack_api.url, summary_api_url=model.url)
    client = web_client(settings)
    q = Question(TEAM, "D0ALICE", "U0ALICE", "speech recognition", "1700000001.000100", "1700000001.000100",
                 "Ev1")
    slack_api.add_message("D0ALICE", q.text, ts=q.ts, user="U0ALICE")
    assert store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1") == "claimed"
    started = client.chat_startStream(channel=q.channel_id, thread_ts=q.ts, markdown_text="_Searched…_")
    store.note_reply(q.team_id, q.channel_id, q.ts, str(started["ts"]))  # then the process died
    taken = store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1", stale_after=-1)
    assert taken == "reclaimed"
    assert answer(q, make_services(settings, store, client), client, taken) == "answered"
    (message,) = slack_api.streamed("D0ALICE")
    assert message.get("updated") and message["metadata"]["event_payload"] == {"message_ts": q.ts}
    assert message["blocks"][-1]["type"] == "context_actions"
    assert slack_api.calls_to("chat.postMessage") == []  # no second answer
    assert store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1") == "answered"
