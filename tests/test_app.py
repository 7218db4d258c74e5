"""The real serve stack: `python -m bot serve` (waitress + Bolt's WSGI adapter) in a subprocess, spoken to as
Slack speaks to it (signed form-encoded slash commands, interactivity payloads, Events API JSON), with the Web
API, response_urls and a summary endpoint played by local stand-ins. No test asserts on time."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.feed import parse
from bot.store import Store, open_store
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.recorder import Received, Recorder, chat_completion
from tests.fakes.slack_api import BOT_USER, Call, FakeSlack
from tests.fakes.slack_sender import (
    ROOT,
    TEAM,
    TOKEN,
    ServeProcess,
    clean_env,
    command_body,
    event_body,
    http,
)

DATA = ROOT / "tests" / "data"
FORM = "application/x-www-form-urlencoded"


def seed(db_url: str) -> Store:
    store = open_store(db_url)
    store.migrate()
    for name in ("apple_ml_archive.xml", "apple_ml_rss.xml"):
        store.add_items(parse((DATA / name).read_bytes()))
    return store


def publish_ok(call: Call) -> dict[str, Any]:
    return {"ok": True, "view": {"id": "V0HOME", **(call.params.get("view") or {})}}


def channel_info(call: Call) -> dict[str, Any]:
    channel = str(call.params.get("channel"))
    return {"ok": True, "channel": {"id": channel, "name": channel.lower(), "is_channel": True,
                                    "is_private": False, "is_archived": False, "is_member": True}}


def ephemeral_ok(call: Call) -> dict[str, Any]:
    return {"ok": True, "message_ts": "1700000000.000200"}


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        fake.handlers["views.publish"] = publish_ok
        fake.handlers["chat.postEphemeral"] = ephemeral_ok
        fake.handlers["conversations.info"] = channel_info
        yield fake


@pytest.fixture(scope="module")
def hooks() -> Iterator[Recorder]:
    def respond(request: Received) -> tuple[int, Any]:
        return (404, "expired_url") if request.path.startswith("/expired") else (200, "ok")

    with Recorder(respond) as recorder:
        yield recorder


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("serve")


@pytest.fixture(scope="module")
def store(home: Path) -> Store:
    return seed(f"sqlite:///{home / 'bot.db'}")


@pytest.fixture(scope="module")
def bot(home: Path, store: Store, slack: FakeSlack) -> Iterator[ServeProcess]:
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "test-signing-secret-8f2a",
           "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{store.path}",
           "FEED_URL": str(DATA / "apple_ml_rss.xml"), "POLL_INTERVAL": "0"}
    with ServeProcess(env, home) as process:
        yield process


def share_value(answer: dict[str, Any]) -> str | None:
    for block in answer.get("blocks") or []:
        for element in block.get("elements") or []:
            if element.get("action_id") == "share_reply":
                return str(element["value"])
    return None


def rendered(value: Any) -> Any:
    """What Slack would show: everything but button values (opaque, sent back to us on a click)."""
    if isinstance(value, dict):
        return {k: rendered(v) for k, v in value.items() if k != "value"}
    if isinstance(value, list):
        return [rendered(v) for v in value]
    return value


# --- HTTP surface --------------------------------------------------------------------------------------


def test_healthz_reports_the_archive(bot: ServeProcess, store: Store) -> None:
    status, raw = http("GET", bot.base + "/healthz")
    assert status == 200
    body = json.loads(raw)
    assert body["status"] == "ok"
    assert body["items"] == store.count_items() > 0
    assert isinstance(body["subscriptions"], int)
    assert body["last_poll"] is None and body["feed_ok"] is False  # POLL_INTERVAL=0: never polled


def test_other_paths_are_404_and_wrong_methods_405(bot: ServeProcess) -> None:
    assert http("GET", bot.base + "/")[0] == 404
    assert http("POST", bot.base + "/slack/actions", b"x=1")[0] == 404
    assert http("GET", bot.base + "/slack/events")[0] == 405
    assert http("POST", bot.base + "/healthz", b"")[0] == 405


def test_url_verification_handshake(bot: ServeProcess) -> None:
    body = json.dumps({"token": "x", "challenge": "ch4ll3nge", "type": "url_verification"}).encode()
    status, raw = bot.post(body, "application/json")
    assert status == 200 and b"ch4ll3nge" in raw


@pytest.mark.parametrize("how", ["unsigned", "bad_signature", "wrong_secret", "stale", "future"])
def test_unverified_requests_get_401_and_change_nothing(
    how: str, bot: ServeProcess, store: Store, hooks: Recorder, slack: FakeSlack
) -> None:
    store.subscribe("T0KEEP", "C0KEEP", "U0ALICE")
    channel = f"C0DENY{how.upper()}"
    body = command_body("subscribe", channel=channel, response_url=hooks.url(f"/denied/{how}"))
    uninstall = event_body({"type": "app_uninstalled"}, team="T0KEEP")
    calls_before = len(slack.calls)
    for payload, ctype in ((body, FORM), (uninstall, "application/json")):
        if how == "unsigned":
            status, _ = bot.post(payload, ctype, signed=False)
        elif how == "bad_signature":
            status, _ = bot.post(payload, ctype, headers={"X-Slack-Signature": "v0=" + "0" * 64})
        elif how == "wrong_secret":
            status, _ = bot.post(payload, ctype, secret="not-the-secret")
        elif how == "stale":
            status, _ = bot.post(payload, ctype, age=5 * 60 + 30)
        else:
            status, _ = bot.post(payload, ctype, age=-(5 * 60 + 30))
        assert status == 401
    assert store.get_subscription(TEAM, channel) is None
    assert store.get_subscription("T0KEEP", "C0KEEP") is not None
    assert hooks.to(f"/denied/{how}") == []
    assert len(slack.calls) == calls_before


# --- commands ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "help", "search diffusion", "summarize language models", "latest",
                                  "latest 3", "status", "frobnicate", "SEARCH Speech"])
def test_each_command_is_answered_ephemerally_in_the_ack(text: str, bot: ServeProcess) -> None:
    status, answer = bot.command(text)
    assert status == 200
    assert answer["response_type"] == "ephemeral"
    assert answer["text"].strip()
    assert isinstance(answer.get("blocks"), list) and answer["blocks"]
    assert "Traceback" not in json.dumps(answer)


def test_subscribe_and_unsubscribe_change_the_store(bot: ServeProcess, store: Store) -> None:
    status, answer = bot.command("subscribe speech, vision", channel="C0SUBS")
    assert status == 200 and answer["response_type"] == "ephemeral"
    sub = store.get_subscription(TEAM, "C0SUBS")
    assert sub is not None and not sub.paused and sub.keywords
    status, answer = bot.command("status", channel="C0SUBS")
    assert status == 200 and answer["text"]
    status, answer = bot.command("unsubscribe", channel="C0SUBS")
    assert status == 200 and store.get_subscription(TEAM, "C0SUBS") is None


@pytest.mark.parametrize("text", [
    'search "unbalanced AND (NEAR* OR -title:x ^ ',
    "search " + "a" * 5000,
    "search " + "diffusion " * 500,
    "search 🤖 speech 🎉 recognition 👩‍🔬",
    "search <!channel> <@U0BOB> <https://evil.example|click> &amp;",
    "summarize <!here> NOT OR AND *",
    "subscribe <!channel>, " + "x" * 3000,
    "latest -5", "latest 99999999999999999999", "latest 🤖",
    "\u0000\u202e\ufeff",
])
def test_hostile_input_is_answered_cleanly(text: str, bot: ServeProcess) -> None:
    status, answer = bot.command(text, channel="C0HOSTILE")
    assert status == 200
    assert answer["response_type"] == "ephemeral" and answer["text"].strip()
    dumped = json.dumps(rendered(answer), ensure_ascii=False)
    assert "Traceback" not in dumped
    for raw in ("<!channel>", "<!here>", "<@U0BOB>", "<https://evil.example"):
        assert raw not in dumped


# --- the share button ----------------------------------------------------------------------------------


def test_share_posts_the_reply_visibly_and_removes_the_ephemeral(bot: ServeProcess, hooks: Recorder) -> None:
    status, answer = bot.command("search learning")
    value = share_value(answer)
    assert status == 200 and value
    status, _ = bot.action("share_reply", value, response_url=hooks.url("/share/ok"))
    assert status == 200
    assert hooks.wait_for(lambda r: len(r.to("/share/ok")) >= 2)
    visible, delete = (r.json for r in hooks.to("/share/ok"))
    assert visible["response_type"] == "in_channel" and visible["replace_original"] is False
    assert visible["text"] and visible["blocks"]
    assert share_value(visible) is None  # no share button on the shared copy
    assert "U0ALICE" in json.dumps(visible)  # "shared by <@U0ALICE>"
    assert delete.get("delete_original") is True


def test_share_falls_back_to_posting_when_the_response_url_expired(
    bot: ServeProcess, hooks: Recorder, slack: FakeSlack
) -> None:
    status, _ = bot.action("share_reply", "search learning", channel="C0SHARE2",
                           response_url=hooks.url("/expired/1"))
    assert status == 200
    assert slack.wait_for(lambda s: bool(s.posts("C0SHARE2")))
    post = slack.posts("C0SHARE2")[0]
    assert post["text"] and post["params"]["unfurl_links"] in (False, "false", "0", 0)


def test_share_failure_is_one_line_for_the_user(bot: ServeProcess, hooks: Recorder, slack: FakeSlack) -> None:
    slack.fault("chat.postMessage", channel="C0SHARE3", error="not_in_channel")
    status, _ = bot.action("share_reply", "latest", channel="C0SHARE3", response_url=hooks.url("/expired/2"))
    assert status == 200
    assert slack.wait_for(lambda s: bool(s.calls_to("chat.postEphemeral", "C0SHARE3")))
    note = slack.calls_to("chat.postEphemeral", "C0SHARE3")[0].params
    assert note["user"] == "U0ALICE" and "not_in_channel" in note["text"] and "\n" not in note["text"]


# --- App Home and lifecycle ----------------------------------------------------------------------------


def test_app_home_is_published(bot: ServeProcess, slack: FakeSlack) -> None:
    status, _ = bot.event({"type": "app_home_opened", "user": "U0HOME", "channel": "D0HOME", "tab": "home",
                           "event_ts": "1700000000.1"})
    assert status == 200
    def published(fake: FakeSlack) -> list[Call]:
        return [c for c in fake.calls_to("views.publish") if c.params.get("user_id") == "U0HOME"]

    assert slack.wait_for(lambda s: bool(published(s)))
    call = published(slack)[0]
    assert call.token == TOKEN
    assert call.params["view"]["type"] == "home" and call.params["view"]["blocks"]


def test_messages_tab_does_not_publish(bot: ServeProcess, slack: FakeSlack) -> None:
    status, _ = bot.event({"type": "app_home_opened", "user": "U0MSGS", "channel": "D0MSGS",
                           "tab": "messages", "event_ts": "1700000000.2"})
    assert status == 200
    bot.command("help")  # one more round trip for the lazy listener to have run
    assert not any(c.params.get("user_id") == "U0MSGS" for c in slack.calls_to("views.publish"))


@pytest.mark.parametrize(("event", "expect"), [
    ({"type": "channel_archive", "channel": "{c}", "user": "U0ALICE"}, "paused"),
    ({"type": "group_archive", "channel": "{c}"}, "paused"),
    ({"type": "channel_left", "channel": "{c}", "actor_id": "U0ALICE"}, "paused"),
    ({"type": "group_left", "channel": "{c}", "actor_id": "U0ALICE"}, "paused"),
    ({"type": "member_left_channel", "user": BOT_USER, "channel": "{c}", "channel_type": "C", "team": TEAM},
     "paused"),
    ({"type": "member_left_channel", "user": "U0BOB", "channel": "{c}", "channel_type": "C", "team": TEAM},
     "active"),
    ({"type": "channel_deleted", "channel": "{c}"}, "gone"),
    ({"type": "group_deleted", "channel": "{c}"}, "gone"),
])
def test_channel_lifecycle(event: dict[str, Any], expect: str, bot: ServeProcess, store: Store) -> None:
    channel = f"C0LIFE{event['type'].upper().replace('_', '')}{expect.upper()}"
    store.subscribe(TEAM, channel, "U0ALICE")
    status, _ = bot.event({k: (channel if v == "{c}" else v) for k, v in event.items()})
    assert status == 200
    sub = store.get_subscription(TEAM, channel)
    if expect == "gone":
        assert sub is None
    else:
        assert sub is not None and sub.paused is (expect == "paused")


@pytest.mark.parametrize(("event", "forgotten"), [
    ({"type": "app_uninstalled"}, True),
    ({"type": "tokens_revoked", "tokens": {"oauth": ["U0ALICE"], "bot": ["UFAKEBOT"]}}, True),
    ({"type": "tokens_revoked", "tokens": {"oauth": ["U0ALICE"]}}, False),
])
def test_uninstall_forgets_the_workspace(
    event: dict[str, Any], forgotten: bool, bot: ServeProcess, store: Store
) -> None:
    team = f"T0GONE{event['type'].upper().replace('_', '')}{str(forgotten).upper()}"
    store.subscribe(team, "C0A", "U0ALICE")
    store.subscribe(team, "C0B", "U0ALICE", ["speech"])
    store.subscribe("T0STAYS", "C0A", "U0ALICE")
    status, _ = bot.event(event, team=team)
    assert status == 200
    assert (store.subscriptions(team) == []) is forgotten
    assert store.get_subscription("T0STAYS", "C0A") is not None


# --- the slow path -------------------------------------------------------------------------------------


def test_slow_summary_is_acked_at_once_and_answered_via_response_url(
    tmp_path: Path, slack: FakeSlack, hooks: Recorder
) -> None:
    db = seed(f"sqlite:///{tmp_path / 'slow.db'}")
    model = Recorder(chat_completion("- Apple studies learning at scale [1]"), delay=1.5).start()
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "test-signing-secret-8f2a",
           "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{db.path}", "POLL_INTERVAL": "0",
           "FEED_URL": str(DATA / "apple_ml_rss.xml"), "SUMMARY_API_URL": model.url("/v1"),
           "SUMMARY_API_KEY": "sk-test"}
    try:
        with ServeProcess(env, tmp_path) as process:
            status, answer = process.command("summarize learning", response_url=hooks.url("/slow/1"))
            assert status == 200 and answer["response_type"] == "ephemeral"
            assert hooks.to("/slow/1") == []  # acknowledged before the answer exists
            assert hooks.wait_for(lambda r: bool(r.to("/slow/1")), timeout=30)
            final = hooks.to("/slow/1")[0].json
            assert final["response_type"] == "ephemeral" and final["text"] and final["blocks"]
            assert final["text"] != answer["text"]
            assert model.requests and model.requests[0].path == "/v1/chat/completions"
            assert "sk-test" not in process.output()
    finally:
        model.stop()


# --- process lifecycle ---------------------------------------------------------------------------------


def test_sigterm_stops_serve_cleanly(tmp_path: Path, slack: FakeSlack) -> None:
    db = seed(f"sqlite:///{tmp_path / 'term.db'}")
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "test-signing-secret-8f2a",
           "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{db.path}", "POLL_INTERVAL": "1",
           "FEED_URL": str(DATA / "apple_ml_rss.xml")}
    process = ServeProcess(env, tmp_path).start()
    assert process.proc is not None
    process.proc.send_signal(signal.SIGTERM)
    try:
        code = process.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.proc.kill()
        pytest.fail(f"serve did not stop on SIGTERM:\n{process.output()}")
    out = process.output()
    assert code == 0, out
    assert "event=stopped" in out and "Traceback" not in out
    assert TOKEN not in out and "test-signing-secret" not in out


def test_a_second_signal_while_serve_is_stopping_changes_nothing(
    tmp_path: Path, slack: FakeSlack, feed_server: FeedServer
) -> None:
    """Ctrl-C twice: the second signal comes after the HTTP server has closed, while the poller is still
    finishing its fetch. It used to wake the closed server (an OSError in the signal handler: a traceback,
    and the rest of the shutdown skipped). Now serve finishes stopping as after one signal."""
    feed = feed_server.route("/rss.xml", Reply(body=(DATA / "apple_ml_rss.xml").read_bytes(), delay=6))
    db = seed(f"sqlite:///{tmp_path / 'twice.db'}")
    env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "test-signing-secret-8f2a",
           "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{db.path}", "POLL_INTERVAL": "60",
           "FEED_URL": feed}
    process = ServeProcess(env, tmp_path).start()
    assert process.proc is not None
    try:
        deadline = time.monotonic() + 10
        while not feed_server.requests and time.monotonic() < deadline:  # the poller is fetching
            time.sleep(0.05)
        assert feed_server.requests, process.output()
        process.proc.send_signal(signal.SIGINT)
        closed = False
        while not closed and time.monotonic() < deadline + 10:  # until the HTTP server has closed its socket
            try:
                socket.create_connection(("127.0.0.1", process.port), timeout=0.5).close()
            except ConnectionRefusedError:
                closed = True
            except ConnectionResetError:  # accepted into the backlog as the socket closed: ask again
                pass
            time.sleep(0.05)
        assert closed, process.output()
        process.proc.send_signal(signal.SIGINT)
        code = process.proc.wait(timeout=30)
    finally:
        process.stop()
    out = process.output()
    assert code == 0, out
    assert "event=stopped" in out and "Traceback" not in out, out


def test_serve_without_credentials_says_what_is_missing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bot", "serve"], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "SLACK_BOT_TOKEN" in lines[0] and "SLACK_SIGNING_SECRET" in lines[0] and ".env.example" in lines[0]


def test_serve_names_only_the_missing_variable(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bot", "serve"], cwd=tmp_path,
                          env=clean_env(SLACK_BOT_TOKEN=TOKEN), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "SLACK_SIGNING_SECRET" in done.stderr and "SLACK_BOT_TOKEN" not in done.stderr


def test_serve_or_shell_starts_the_shell_without_credentials(tmp_path: Path) -> None:
    pytest.importorskip("bot.shell")
    done = subprocess.run([sys.executable, "-m", "bot", "serve", "--or-shell"], cwd=tmp_path,
                          env=clean_env(DATABASE_URL=f"sqlite:///{tmp_path / 'shell.db'}", POLL_INTERVAL="0"),
                          input="/mlresearch help\n", capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "shell" in line]
    assert len(notes) >= 1 and "SLACK_BOT_TOKEN" in notes[0]
    assert done.stdout.strip()


# --- the app manifest ----------------------------------------------------------------------------------


def test_manifest_matches_the_app() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is False and settings["interactivity"]["is_enabled"] is True
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/mlresearch"
    for url in (command["url"], settings["event_subscriptions"]["request_url"],
                settings["interactivity"]["request_url"]):
        assert url == "https://YOUR-APP.example.com/slack/events"
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "channels:history", "groups:history", "channels:read",
            "groups:read", "app_mentions:read", "im:history", "assistant:write"} <= scopes
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_home_opened", "app_uninstalled", "tokens_revoked", "channel_archive", "channel_deleted",
        "group_archive", "group_deleted", "channel_left", "group_left", "member_left_channel",
        "app_mention", "message.im", "app_context_changed", "agent_session_stopped", "link_shared",
        "entity_details_requested"}
    assert {"links:read", "links:write"} <= scopes
    assert manifest["features"]["unfurl_domains"] == ["machinelearning.apple.com"]
    assert manifest["features"]["app_home"]["messages_tab_enabled"] is True
    agent = manifest["features"]["agent_view"]  # the agent messaging experience (tests/test_agent.py)
    assert agent["agent_description"] and agent["suggested_prompts"]


# --- the Related button --------------------------------------------------------------------------------


def test_the_related_button_answers_ephemerally_with_the_nearest_items(
    bot: ServeProcess, hooks: Recorder, store: Store
) -> None:
    item = next(i for i in store.latest(10) if "3D Gaussian Head" in i.title)  # Velox is near it
    status, _ = bot.action("related_item", item.id, response_url=hooks.url("/related/ok"))
    assert status == 200
    assert hooks.wait_for(lambda r: len(r.to("/related/ok")) >= 1)
    [answer] = (r.json for r in hooks.to("/related/ok"))
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    dumped = json.dumps(rendered(answer), ensure_ascii=False)
    assert "Related to" in dumped and item.title[:40] in dumped and "Traceback" not in dumped


def test_search_results_carry_a_related_button(bot: ServeProcess) -> None:
    status, answer = bot.command("search learning")
    related = [e for b in answer["blocks"] if b["type"] == "actions" for e in b["elements"]
               if e.get("action_id") == "related_item"]
    assert status == 200 and related and all(r["value"] for r in related)
