"""Odd command text and requests without a workspace get a one-line answer and change nothing:

- counts are ASCII digits only (`latest ²`, `latest ٣` and full-width digits get the usage line);
- control characters in command text are refused, never echoed back raw;
- a signed request with no (or an empty) team id is answered with one line and never reaches another
  workspace's data: no write under team '', and an App Home opened without a team lists no subscriptions.

The last part goes through the real `serve` with signed requests, as Slack sends them."""

from __future__ import annotations

import json
import logging
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from bot.commands import Invocation, Reply, Services, handle, shared
from bot.config import Settings
from bot.store import Store
from tests.fakes.archive import filled_store
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import Call, FakeSlack
from tests.fakes.slack_sender import APP_ID, ROOT, SECRET, TOKEN, ServeProcess, command_body

FORM = "application/x-www-form-urlencoded"
OTHER_TEAM, SECRET_CHANNEL = "T0OTHER", "C0SECRETCHAN"


@pytest.fixture
def services(tmp_path: Path) -> Services:
    return Services(store=filled_store(tmp_path), settings=Settings())


def ask(services: Services, text: str, team_id: str = "T1") -> Reply:
    return handle(Invocation(text=text, team_id=team_id, channel_id="C1", user_id="U1"), services)


def one_line(reply: Reply) -> str:
    assert len(reply.blocks) == 1 and reply.blocks[0]["type"] == "section" and reply.share_value is None
    assert reply.text.strip() and "\n" not in reply.text
    return reply.text


def controls_in(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in ("Cc", "Cs") or c in "\u2028\u2029\u202e"]


# --- counts: ASCII digits only ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", ["²", "³", "٣", "１０", "1²", "𝟗", "1000"])
def test_latest_with_a_non_ascii_digit_is_a_usage_line(
    n: str, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        reply = ask(services, f"latest {n}")
    assert one_line(reply).startswith("Usage: `/mlresearch latest [n]`")
    assert not [r for r in caplog.records if r.exc_info]  # no traceback in the log either


# --- control characters -------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "search \x1b[31mred", "search red\x00", "latest\x07", "search a\x7fb", "summarize x\x9b31m",
    "subscribe \x1b]8;;https://evil.example\x07click\x1b]8;;\x07", "search \u202espeech", "search \ud800x",
])
def test_control_characters_are_refused_in_one_line(
    text: str, services: Services, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        reply = ask(services, text)
    assert "control character" in one_line(reply)
    assert controls_in(json.dumps([reply.text, reply.blocks], ensure_ascii=False)) == []
    assert [r for r in caplog.records if controls_in(r.getMessage())] == []  # nor raw into a log line
    assert services.store.subscriptions() == []


@pytest.mark.parametrize("text", ["search speech\u2028recognition", "search speech\nrecognition\t"])
def test_line_breaks_are_only_spaces(text: str, services: Services) -> None:
    reply = ask(services, text)
    assert "control character" not in reply.text and reply.blocks
    assert controls_in(json.dumps([reply.text, reply.blocks], ensure_ascii=False)) == []


def test_a_shared_value_with_control_characters_is_refused(services: Services) -> None:
    reply = shared("search \x1b[2Jx", "U1", services, "T1", "C1")
    assert "control character" in one_line(reply)


# --- no workspace -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["subscribe speech", "unsubscribe", "status", "search speech", "help"])
def test_an_invocation_without_a_workspace_is_one_line_and_changes_nothing(
    text: str, services: Services
) -> None:
    services.store.subscribe("", "C1", "U0OLD")  # a row under team '' (never written by the bot) stays put
    reply = ask(services, text, team_id="")
    assert "no workspace" in one_line(reply)
    assert [(s.team_id, s.user_id) for s in services.store.subscriptions()] == [("", "U0OLD")]


def test_the_store_lists_no_subscriptions_for_an_empty_team(services: Services) -> None:
    services.store.subscribe(OTHER_TEAM, SECRET_CHANNEL, "U2")
    assert services.store.subscriptions("") == []
    assert [s.team_id for s in services.store.subscriptions()] == [OTHER_TEAM]  # None: every workspace


# --- through serve, signed as Slack signs ------------------------------------------------------------------


def channel_info(call: Call) -> dict[str, Any]:
    channel = str(call.params.get("channel"))
    return {"ok": True,
            "channel": {"id": channel, "is_private": False, "is_archived": False, "is_member": True}}


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        fake.handlers["views.publish"] = lambda call: {"ok": True, "view": {"id": "V0HOME"}}
        fake.handlers["chat.postEphemeral"] = lambda call: {"ok": True, "message_ts": "1700000000.000200"}
        fake.handlers["conversations.info"] = channel_info
        yield fake


@pytest.fixture(scope="module")
def hooks() -> Iterator[Recorder]:
    with Recorder(lambda request: (200, "ok")) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, slack: FakeSlack
) -> Iterator[tuple[ServeProcess, Store]]:
    home = tmp_path_factory.mktemp("odd")
    store = filled_store(home)
    store.subscribe(OTHER_TEAM, SECRET_CHANNEL, "U0OTHER", ["secret"])
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
           "DATABASE_URL": f"sqlite:///{home / 'bot.db'}", "POLL_INTERVAL": "0",
           "FEED_URL": str(ROOT / "tests" / "data" / "apple_ml_rss.xml")}
    with ServeProcess(env, home) as process:
        yield process, store


def without_team(body: bytes) -> bytes:
    fields = dict(parse_qsl(body.decode(), keep_blank_values=True))
    del fields["team_id"], fields["team_domain"]
    return urlencode(fields).encode()


def subscriptions(store: Store) -> list[tuple[str, str]]:
    return sorted((s.team_id, s.channel_id) for s in store.subscriptions())


@pytest.mark.parametrize("how", ["missing", "empty"])
@pytest.mark.parametrize("text", ["subscribe speech", "status", "latest 3"])
def test_a_signed_command_without_a_team_is_one_line_and_writes_nothing(
    how: str, text: str, served: tuple[ServeProcess, Store]
) -> None:
    bot, store = served
    before = subscriptions(store)
    body = command_body(text, channel="C0NOTEAM", team="")
    status, raw = bot.post(without_team(body) if how == "missing" else body, FORM)
    assert status == 200
    answer = json.loads(raw)
    assert answer["response_type"] == "ephemeral" and "no workspace" in answer["text"]
    assert "\n" not in answer["text"] and len(answer["blocks"]) == 1
    assert subscriptions(store) == before


@pytest.mark.parametrize("how", ["missing", "empty"])
def test_an_app_home_opened_without_a_team_lists_no_other_workspace(
    how: str, served: tuple[ServeProcess, Store], slack: FakeSlack
) -> None:
    bot, store = served
    user = f"U0HOME{how.upper()}"
    envelope: dict[str, Any] = {
        "token": "verification-token-unused", "api_app_id": APP_ID, "type": "event_callback",
        "event": {"type": "app_home_opened", "user": user, "channel": "D0HOME", "tab": "home",
                  "event_ts": "1700000000.1"},
        "event_id": f"Ev{time.monotonic_ns()}", "event_time": int(time.time()),
    }
    if how == "empty":
        envelope["team_id"] = ""
    status, _ = bot.post(json.dumps(envelope).encode(), "application/json")
    assert status == 200

    def published(fake: FakeSlack) -> list[Call]:
        return [c for c in fake.calls_to("views.publish") if c.params.get("user_id") == user]

    assert slack.wait_for(lambda s: bool(published(s)), timeout=20)
    view = json.dumps(published(slack)[0].params["view"])
    assert SECRET_CHANNEL not in view and "secret" not in view
    assert store.get_subscription(OTHER_TEAM, SECRET_CHANNEL) is not None


def test_a_share_click_without_a_team_is_one_line_and_posts_nothing(
    served: tuple[ServeProcess, Store], slack: FakeSlack, hooks: Recorder
) -> None:
    bot, _store = served
    payload = {
        "type": "block_actions", "user": {"id": "U0ALICE", "username": "alice"}, "api_app_id": APP_ID,
        "token": "verification-token-unused", "trigger_id": "1337.43.abcdef",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": "C0SHARENT",
                      "is_ephemeral": True},
        "channel": {"id": "C0SHARENT", "name": "general"}, "response_url": hooks.url("/noteam/share"),
        "actions": [{"type": "button", "action_id": "share_reply", "block_id": "share", "value": "latest",
                     "text": {"type": "plain_text", "text": "Share in channel"},
                     "action_ts": "1700000001.1"}],
    }
    status, _ = bot.post(urlencode({"payload": json.dumps(payload)}).encode(), FORM)
    assert status == 200
    assert hooks.wait_for(lambda r: bool(r.to("/noteam/share")), timeout=20)
    [answer] = [r.json for r in hooks.to("/noteam/share")]
    assert answer["response_type"] == "ephemeral" and "no workspace" in answer["text"]
    assert slack.posts("C0SHARENT") == []
