"""The HTTP edge of `serve` (a real `python -m bot serve` behind waitress): nothing from an unverified request
reaches a handler or a log line, signed requests of unexpected shapes get a 4xx (never a 500 or a
traceback), and every value a request puts in a log line is escaped."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest

from bot.store import Store, open_store
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import (
    ROOT,
    SECRET,
    TOKEN,
    ServeProcess,
    block_action_body,
    command_body,
    event_body,
    http,
    signature,
    signed_headers,
)

FORM = "application/x-www-form-urlencoded"
JSON = "application/json"
MARKERS = ("TVICTIM", "workspace_disabled", "C0VICTIM")
# Any character a terminal or a log reader could take for a line break or a control sequence (newline aside:
# it ends each line of the log file).
RAW_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = open_store(f"sqlite:///{tmp_path_factory.mktemp('edge') / 'bot.db'}")
    store.migrate()
    return store


@pytest.fixture(scope="module")
def bot(store: Store, slack: FakeSlack) -> Iterator[ServeProcess]:
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
           "DATABASE_URL": f"sqlite:///{store.path}", "FEED_URL": str(ROOT / "tests/data/apple_ml_rss.xml"),
           "POLL_INTERVAL": "0"}
    with ServeProcess(env, Path(str(store.path)).parent) as process:
        yield process


def forged_command() -> bytes:
    """An unsigned body whose fields, if logged, would forge a log line about another workspace."""
    return urlencode({"command": "/mlresearch event=workspace_disabled team=TVICTIM", "text": "subscribe",
                      "team_id": "TVICTIM", "channel_id": "C0VICTIM", "user_id": "U0EVE",
                      "response_url": "http://127.0.0.1:9/r"}).encode()


def new_output(bot: ServeProcess, before: int) -> str:
    return bot.output()[before:]


def rejected(output: str, status: int, reason: str) -> bool:
    return f"event=request_rejected status={status} reason={reason}" in output


# --- unverified requests: 401, nothing logged of the body, nothing changed ---------------------------------


@pytest.mark.parametrize(("how", "reason"), [
    ("timestamp=abc", "bad_timestamp"), ("timestamp=12abc", "bad_timestamp"), ("timestamp=", "bad_timestamp"),
    ("timestamp=1e9", "bad_timestamp"), ("timestamp=17\u00b2", "bad_timestamp"),
    ("timestamp=99999999999999999999", "bad_timestamp"), ("unsigned", "bad_timestamp"),
    ("no_signature", "missing_signature"), ("wrong_signature", "bad_signature"),
    ("stale", "stale_timestamp"), ("not_utf8", "body_not_utf8"),
])
def test_unverified_requests_get_401_and_log_no_field_of_their_body(
    how: str, reason: str, bot: ServeProcess, store: Store, slack: FakeSlack
) -> None:
    body = forged_command() + (b"&x=\xff" if how == "not_utf8" else b"")
    before, calls = len(bot.output()), len(slack.calls)
    if how.startswith("timestamp="):
        value = how.split("=", 1)[1]
        headers = {"Content-Type": FORM, "X-Slack-Request-Timestamp": value,
                   "X-Slack-Signature": signature(body, value)}
        status, raw = http("POST", bot.base + "/slack/events", body, headers)
    elif how == "unsigned":
        status, raw = bot.post(body, FORM, signed=False)
    elif how == "no_signature":
        headers = signed_headers(body, FORM)
        del headers["X-Slack-Signature"]
        status, raw = http("POST", bot.base + "/slack/events", body, headers)
    elif how == "wrong_signature":
        status, raw = bot.post(body, FORM, secret="not-the-secret")
    elif how == "stale":
        status, raw = bot.post(body, FORM, age=6 * 60)
    else:
        status, raw = bot.post(body, FORM)  # signed over its bytes, but not UTF-8: cannot be verified
    assert status == 401 and json.loads(raw) == {"error": "invalid request"}
    output = new_output(bot, before)
    assert rejected(output, 401, reason), output
    assert not any(marker in output for marker in MARKERS), output
    assert "Traceback" not in output and "listener_error" not in output
    assert store.get_subscription("TVICTIM", "C0VICTIM") is None and len(slack.calls) == calls


# --- signed requests of unexpected shapes: 400, one line, no traceback --------------------------------------


def _payload(value: str) -> bytes:
    return urlencode({"payload": value, "team_id": "TVICTIM"}).encode()


def _event(**fields: Any) -> bytes:
    body = json.loads(event_body({"type": "app_mention", "text": "hi", "channel": "C0VICTIM", "ts": "1.1"},
                                 team="TVICTIM"))
    body.update(fields)
    return json.dumps(body).encode()


def _action(**fields: Any) -> bytes:
    form = dict(parse_qsl(block_action_body("share_reply", "v", team="TVICTIM").decode()))
    payload = json.loads(form["payload"])
    payload.update(fields)
    return urlencode({"payload": json.dumps(payload)}).encode()


def _assistant(thread: Any) -> bytes:
    return event_body({"type": "assistant_thread_started", "assistant_thread": thread, "event_ts": "1.2"},
                      team="TVICTIM")


def _revoked(tokens: Any) -> bytes:
    return event_body({"type": "tokens_revoked", "tokens": tokens}, team="TVICTIM")


@pytest.mark.parametrize(("name", "body", "content_type", "reason"), [
    ("payload_not_json", _payload("{not json TVICTIM"), FORM, "body_not_json"),
    ("payload_a_string", _payload('"TVICTIM"'), FORM, "body_not_an_object"),
    ("payload_a_list", _payload('["TVICTIM"]'), FORM, "body_not_an_object"),
    ("json_list", b'[{"team_id": "TVICTIM"}]', JSON, "body_not_an_object"),
    ("json_string", b'"TVICTIM"', JSON, "body_not_an_object"),
    ("form_labelled_json", forged_command(), JSON, "body_not_json"),
    ("brace_in_a_form", b"{team_id=TVICTIM", FORM, "body_not_json"),
    ("event_a_string", _event(event="TVICTIM"), JSON, "unexpected_shape"),
    ("event_null", _event(event=None), JSON, "unexpected_shape"),
    ("authorizations_strings", _event(authorizations=["TVICTIM"]), JSON, "unexpected_shape"),
    ("team_a_number", _action(team=5), FORM, "unexpected_shape"),
    ("actions_empty", _action(actions=[]), FORM, "unexpected_shape"),
    ("actions_a_string", _action(actions="TVICTIM"), FORM, "unexpected_shape"),
    ("actions_null_inside", _action(actions=[None]), FORM, "unexpected_shape"),
    ("action_without_id", _action(actions=[{"value": "TVICTIM"}]), FORM, "unexpected_shape"),
    ("action_id_a_number", _action(actions=[{"action_id": 5, "value": "TVICTIM"}]), FORM, "unexpected_shape"),
    ("channel_a_string", _action(channel="C0VICTIM"), FORM, "unexpected_shape"),
    ("user_a_list", _action(user=["TVICTIM"]), FORM, "unexpected_shape"),
    ("response_url_not_a_url", _action(response_url="TVICTIM"), FORM, "unexpected_shape"),
    ("command_response_url_a_file", command_body("subscribe x", team="TVICTIM", channel="C0VICTIM",
                                                 response_url="file:///etc/passwd"), FORM,
     "unexpected_shape"),
    ("type_a_list", _action(type=["block_actions"]), FORM, "unexpected_shape"),
    ("assistant_thread_a_string", _assistant("TVICTIM"), JSON, "unexpected_shape"),
    ("assistant_thread_without_ts", _assistant({"channel_id": "D0VICTIM", "thread_ts": None}), JSON,
     "unexpected_shape"),
    ("assistant_context_a_list", _assistant({"channel_id": "D0VICTIM", "thread_ts": "1.1", "context": []}),
     JSON, "unexpected_shape"),
    ("tokens_a_string", _revoked("TVICTIM"), JSON, "unexpected_shape"),
    ("tokens_a_list", _revoked(["TVICTIM"]), JSON, "unexpected_shape"),
    ("tokens_bot_null_inside", _revoked({"bot": [None]}), JSON, "unexpected_shape"),
    ("view_without_type", json.dumps({"type": "view_submission", "team": {"id": "TVICTIM"},
                                      "view": {"id": "V1", "callback_id": "c"}}).encode(),
     JSON, "unexpected_shape"),
])
def test_signed_requests_of_unexpected_shapes_get_400_and_one_line(
    name: str, body: bytes, content_type: str, reason: str, bot: ServeProcess, store: Store
) -> None:
    before = len(bot.output())
    status, raw = bot.post(body, content_type)
    assert status == 400, (name, status, raw)
    assert json.loads(raw)["error"].startswith("bad request")
    output = new_output(bot, before)
    assert rejected(output, 400, reason), output
    assert "Exception while serving" not in output and "Traceback" not in output
    assert not any(marker in output for marker in MARKERS), output
    assert store.get_subscription("TVICTIM", "C0VICTIM") is None


def test_a_click_without_a_response_url_is_shared_as_the_bot(bot: ServeProcess, slack: FakeSlack) -> None:
    form = dict(parse_qsl(block_action_body("share_reply", "latest", channel="C0NOURL").decode()))
    payload = {**json.loads(form["payload"]), "response_url": None}
    before = len(bot.output())
    status, _ = bot.post(urlencode({"payload": json.dumps(payload)}).encode(), FORM)
    assert status == 200
    assert slack.wait_for(lambda s: bool(s.posts("C0NOURL")), timeout=20), new_output(bot, before)
    assert "Failed to run" not in new_output(bot, before)


@pytest.mark.parametrize("content_type", [JSON, "application/json; charset=utf-8"])
def test_url_verification_still_answers_the_challenge(content_type: str, bot: ServeProcess) -> None:
    body = json.dumps({"token": "x", "challenge": "ch4ll3nge", "type": "url_verification"}).encode()
    status, raw = bot.post(body, content_type)
    assert status == 200 and json.loads(raw) == {"challenge": "ch4ll3nge"}


def test_slash_commands_still_reach_their_listener(bot: ServeProcess) -> None:
    """(Interactivity, a form whose `payload` is an object, is exercised by tests/test_app.py.)"""
    status, answer = bot.command("help")
    assert status == 200 and answer["response_type"] == "ephemeral" and "/mlresearch" in answer["text"]


# --- escaping: what a signed request puts in a log line -------------------------------------------------


def test_values_from_requests_are_escaped_in_log_lines(bot: ServeProcess) -> None:
    hostile = "x\x1b[31m\r\nlevel=ERROR event=forged\u2028\u2029\x85\x9b\x7f\u202e"
    before = len(bot.output())
    status, _ = bot.command("help", channel="C0" + hostile)  # not a channel id: refused, the line names none
    assert status == 400 and rejected(new_output(bot, before), 400, "bad_id")
    status, _ = bot.event({"type": "x" + hostile})  # Bolt warns of an unhandled event, naming its type
    assert status in (200, 404)
    output = new_output(bot, before)
    assert not RAW_CONTROL.search(output), repr(output)
    assert "\\u2028" in output and "\\x1b" in output
    assert all(line.startswith("20") for line in output.splitlines()), output  # no forged line starts
