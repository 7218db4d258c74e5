"""`serve` with SLACK_APP_TOKEN: Socket Mode in place of the HTTP Request URL. The real `python -m bot serve`
opens its connection through `apps.connections.open` (the Web API stand-in) and speaks to a local WebSocket
stand-in with slack_sdk's own Socket Mode client: envelopes in, acks (with the answer) out."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import pytest

from bot.feed import parse
from bot.store import SQLiteStore
from tests.fakes.recorder import Recorder, chat_completion
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import ROOT, SECRET, TOKEN, ServeProcess, command_body, http
from tests.fakes.socket_mode import FakeSocketMode

DATA = ROOT / "tests" / "data"
APP_TOKEN = "xapp-1-A0MLRESEARCH-test"
Running = tuple[ServeProcess, FakeSlack, FakeSocketMode]


def env_for(slack: FakeSlack, db: Path) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_APP_TOKEN": APP_TOKEN,
            "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{db}",
            "FEED_URL": str(DATA / "apple_ml_rss.xml"), "POLL_INTERVAL": "0"}


@contextmanager
def socket_serve(tmp_path: Path, **extra: str) -> Iterator[Running]:
    """`serve` in Socket Mode over an archive of the fixture feed, connected to the WebSocket stand-in."""
    store = SQLiteStore(tmp_path / "bot.db")
    store.migrate()
    store.add_items(parse((DATA / "apple_ml_archive.xml").read_bytes()))
    with FakeSlack() as slack, FakeSocketMode() as socket_mode:
        slack.handlers["apps.connections.open"] = socket_mode.open_connection
        slack.handlers["views.publish"] = lambda call: {"ok": True, "view": {"id": "V0HOME"}}
        bot = ServeProcess({**env_for(slack, store.path), **extra}, tmp_path).start()
        try:
            socket_mode.wait_connected()
            yield bot, slack, socket_mode
        finally:
            bot.stop()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    with socket_serve(tmp_path) as running:
        yield running


def command_envelope(envelope_id: str, text: str, **fields: str) -> dict[str, Any]:
    """A slash command as Socket Mode delivers it: the same fields as the HTTP form, in an envelope."""
    payload = dict(parse_qsl(command_body(text, **fields).decode()))
    return {"envelope_id": envelope_id, "type": "slash_commands", "payload": payload,
            "accepts_response_payload": True}


def test_socket_mode_connects_with_the_app_token(running: Running) -> None:
    _bot, slack, socket_mode = running
    opened = [call for call in slack.calls if call.method == "apps.connections.open"]
    assert opened and opened[0].token == APP_TOKEN
    assert socket_mode.connections == 1


def test_a_command_is_answered_in_the_envelope_ack(running: Running) -> None:
    _bot, _slack, socket_mode = running
    socket_mode.send(command_envelope("env-1", "search diffusion"))
    ack = socket_mode.receive()
    assert ack["envelope_id"] == "env-1"
    answer = ack["payload"]
    assert answer["response_type"] == "ephemeral"
    assert "*diffusion*" in str(answer["blocks"]).lower()
    socket_mode.send(command_envelope("env-2", "frobnicate"))
    assert "I don't know" in socket_mode.receive()["payload"]["text"]


def test_an_event_is_acked_then_handled(running: Running) -> None:
    _bot, slack, socket_mode = running
    event = {"type": "app_home_opened", "user": "U0ALICE", "channel": "D0HOME", "tab": "home"}
    socket_mode.send({"envelope_id": "env-3", "type": "events_api", "accepts_response_payload": False,
                      "payload": {"type": "event_callback", "team_id": "T0FAKE", "api_app_id": "A0MLRESEARCH",
                                  "event": event, "event_id": "Ev1", "event_time": 1700000000}})
    assert socket_mode.receive()["envelope_id"] == "env-3"
    assert slack.wait_for(lambda fake: any(c.method == "views.publish" for c in fake.calls))
    published = next(call for call in slack.calls if call.method == "views.publish")
    assert published.params["user_id"] == "U0ALICE" and published.token == TOKEN


def test_a_slow_summary_is_acked_in_the_envelope_and_answered_via_response_url(tmp_path: Path) -> None:
    with Recorder() as hooks, Recorder(chat_completion("- Apple studies learning at scale [1]")) as model, \
            socket_serve(tmp_path, SUMMARY_API_URL=model.url("/v1")) as (_bot, _slack, socket_mode):
        socket_mode.send(command_envelope("env-4", "summarize learning", response_url=hooks.url("/slow/1")))
        ack = socket_mode.receive()
        assert ack["envelope_id"] == "env-4" and ack["payload"]["response_type"] == "ephemeral"
        assert hooks.wait_for(lambda r: bool(r.to("/slow/1")), timeout=30)
        final = hooks.to("/slow/1")[0].json
        assert final["response_type"] == "ephemeral" and final["blocks"]
        assert final["text"] != ack["payload"]["text"]
        assert model.requests and model.requests[0].path == "/v1/chat/completions"


def test_http_carries_only_healthz_and_sigterm_stops_cleanly(running: Running) -> None:
    bot, _slack, _socket_mode = running
    assert http("GET", bot.base + "/healthz")[0] == 200
    assert http("POST", bot.base + "/slack/events", b"{}", {"Content-Type": "application/json"})[0] == 404
    assert bot.proc is not None
    bot.proc.send_signal(signal.SIGTERM)
    assert bot.proc.wait(30) == 0
    assert "Traceback" not in bot.output()


def test_a_refused_app_token_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with FakeSlack() as slack:
        slack.handlers["apps.connections.open"] = lambda call: {"ok": False, "error": "invalid_auth"}
        bot = ServeProcess(env_for(slack, tmp_path / "bot.db"), tmp_path)
        with pytest.raises(RuntimeError, match="exited 1"):
            bot.start()
    output = bot.output()
    assert "Socket Mode connection failed: invalid_auth (check SLACK_APP_TOKEN)" in output
    assert "Traceback" not in output
