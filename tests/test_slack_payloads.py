"""Slack's own documented payloads (tests/data/slack/, loaded by tests/slack_docs.py) driven into the real app
the two ways Slack reaches it, over each store: signed HTTP requests to the Request URL (the Router, Bolt and
our listeners behind waitress), and Socket Mode envelopes through slack_sdk's client connected to the
WebSocket stand-in. Each must be acked (HTTP 2xx; in Socket Mode, an ack for its envelope) and do its job,
read from the Web API stand-in's calls and the store. Lazy listeners run on a tracked pool: `drain()` waits
for all of them, so a test can say that nothing else happened without sleeping."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import wait
from contextlib import contextmanager
from itertools import count
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import answers, blocks, commands, home
from bot.app import build_app, web_client
from bot.config import Settings
from bot.conversation import EVENT_TYPE
from bot.lanes import ModelLane
from bot.server import EVENTS_PATH, Router, connect_socket_mode, create_http_server, run_until, wake
from bot.store import Store
from tests import slack_docs
from tests.fakes.archive import corpus_items
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import BOT_USER, Call, FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, http, signed_headers
from tests.fakes.socket_mode import FakeSocketMode
from tests.test_conversation import TrackingExecutor
from tests.test_oauth import finish_install, start_install

APP_TOKEN = "xapp-1-A0MLRESEARCH-test"
JSON, FORM = "application/json", "application/x-www-form-urlencoded"
TRANSPORTS = ["http", "socket_mode"]


class Slack:
    """The app as Slack reaches it over one transport; every send asserts the ack."""

    def __init__(self, transport: str, web: FakeSlack, executor: TrackingExecutor, *, base: str,
                 socket: FakeSocketMode | None = None) -> None:
        self.transport, self.web, self.executor = transport, web, executor
        self.base, self.socket = base, socket
        self.url = base + EVENTS_PATH
        self._envelopes = count(1)

    def event(self, body: dict[str, Any]) -> None:
        self._send(json.dumps(body).encode(), JSON, "events_api", body, accepts=False)

    def action(self, payload: dict[str, Any]) -> None:
        self._send(urlencode({"payload": json.dumps(payload)}).encode(), FORM, "interactive", payload,
                   accepts=False)

    def command(self, form: dict[str, str]) -> dict[str, Any]:
        """The slash command's ack: the answer Slack shows (a command is answered in its ack)."""
        return self._send(urlencode(form).encode(), FORM, "slash_commands", form, accepts=True)

    def _send(self, body: bytes, content_type: str, kind: str, payload: dict[str, Any], *,
              accepts: bool) -> dict[str, Any]:
        if self.transport == "http":
            status, raw = http("POST", self.url, body, signed_headers(body, content_type))
            assert 200 <= status < 300, f"{kind} answered {status}: {raw[:200]!r}"
            return json.loads(raw) if raw.strip() else {}
        assert self.socket is not None
        envelope_id = f"env-{next(self._envelopes)}"
        self.socket.send({"envelope_id": envelope_id, "type": kind, "payload": payload,
                          "accepts_response_payload": accepts})
        ack = self.socket.receive(timeout=10)  # no ack at all (Bolt answered non-2xx) raises queue.Empty
        assert ack["envelope_id"] == envelope_id
        return dict(ack.get("payload") or {})

    def drain(self) -> None:
        """Wait for every lazy listener started so far (and any they started)."""
        while pending := [f for f in self.executor.futures if not f.done()]:
            wait(pending, timeout=30)

    def calls(self, method: str) -> list[Any]:
        return self.web.calls_to(method)


@contextmanager
def running(store: Store, web: FakeSlack, transport: str, **settings: Any) -> Iterator[Slack]:
    """The real app (build_app: Bolt and every listener) on `store`, served as `serve` serves it: the HTTP
    server (the Request URL, or in Socket Mode only /healthz and the OAuth pages) and, in Socket Mode, the
    connection to the WebSocket stand-in. `settings`: OAuth's client id and secret in place of a bot token."""
    socket_mode = transport == "socket_mode"
    token = None if settings.get("slack_client_id") else TOKEN
    config = Settings(slack_bot_token=token, slack_signing_secret=SECRET, slack_api_url=web.url,
                      poll_interval=0, slack_app_token=APP_TOKEN if socket_mode else None, **settings)
    executor = TrackingExecutor(4)
    app = build_app(config, store, client=web_client(config), executor=executor,
                    model_lane=ModelLane(pool=executor))
    handler = SlackRequestHandler(app, path=EVENTS_PATH)
    oauth = handler if config.oauth_enabled else None
    router = Router(None if socket_mode else handler, store, oauth, SECRET)
    server = create_http_server(router, 0, host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.effective_port}"
    try:
        if not socket_mode:
            yield Slack(transport, web, executor, base=base)
            return
        with FakeSocketMode() as socket:
            web.handlers["apps.connections.open"] = socket.open_connection
            connection = connect_socket_mode(app, config)
            try:
                socket.wait_connected()
                yield Slack(transport, web, executor, base=base, socket=socket)
            finally:
                connection.close()
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        executor.shutdown(wait=True)


@pytest.fixture(params=TRANSPORTS)
def slack(request: pytest.FixtureRequest, corpus: Store, slack_api: FakeSlack) -> Iterator[Slack]:
    """The app over the 72 real posts, on each store, reached over each transport in turn."""
    with running(corpus, slack_api, str(request.param)) as app:
        yield app


def no_listener_error(logs: pytest.LogCaptureFixture) -> None:
    lines = [r.getMessage() for r in logs.records]
    assert not [line for line in lines if "listener_error" in line or "Traceback" in line], lines
    assert not [r for r in logs.records if r.levelno >= logging.ERROR], lines


def elements(message_blocks: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every interactive element of a message, by action_id, with the block it is in."""
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for block in message_blocks:
        for element in [*(block.get("elements") or []), block.get("accessory") or {}]:
            if isinstance(element, dict) and element.get("action_id"):
                found[element["action_id"]] = (str(block.get("block_id") or ""), element)
    return found


def item_message_element(action_id: str) -> tuple[str, dict[str, Any]]:
    """A button of the channel post of the archive's first item (what the bot posts for a new item)."""
    return elements(blocks.item_message(corpus_items()[0])["blocks"])[action_id]


def web_calls(web: FakeSlack) -> list[str]:
    """The Web API methods called, apart from the auth.test Bolt makes once for the bot's own user id."""
    return [call.method for call in web.calls if call.method not in ("auth.test", "apps.connections.open")]


# --- questions: a mention, a direct message ---------------------------------------------------------------


def test_a_documented_mention_is_answered_in_its_thread(slack: Slack, logs: pytest.LogCaptureFixture) -> None:
    body = slack_docs.mention_for(BOT_USER)
    slack.event(body)
    slack.drain()
    event = body["event"]
    answers_posted = [m for m in slack.web.posts(event["channel"])
                      if (m.get("metadata") or {}).get("event_type") == EVENT_TYPE]
    assert [m["thread_ts"] for m in answers_posted] == [event["ts"]]
    assert answers_posted[0]["text"]
    no_listener_error(logs)


def test_a_documented_direct_message_is_answered_in_its_thread(slack: Slack,
                                                               logs: pytest.LogCaptureFixture) -> None:
    body = slack_docs.envelope("message.im")
    slack.event(body)
    slack.drain()
    event = body["event"]
    replies = [m for m in slack.web.posts(event["channel"])
               if (m.get("metadata") or {}).get("event_type") == EVENT_TYPE]
    assert [m["thread_ts"] for m in replies] == [event["ts"]]
    no_listener_error(logs)


# --- the App Home, the Messages tab, the context in view --------------------------------------------------


def test_opening_the_home_tab_publishes_that_persons_home(slack: Slack, corpus: Store,
                                                          logs: pytest.LogCaptureFixture) -> None:
    body = slack_docs.envelope("app_home_opened")
    person, item = body["event"]["user"], corpus_items()[1]
    assert corpus.save_item(slack_docs.workspace(body), person, item.id) == "saved"
    slack.event(body)
    slack.drain()
    (published,) = slack.calls("views.publish")
    assert published.params["user_id"] == person
    view = published.params["view"]
    assert view["type"] == "home" and item.title[:40] in json.dumps(view, ensure_ascii=False)
    no_listener_error(logs)


def test_opening_the_messages_tab_greets_once_and_suggests_prompts(slack: Slack,
                                                                   logs: pytest.LogCaptureFixture) -> None:
    body = slack_docs.on_tab("messages")
    dm = body["event"]["channel"]
    slack.event(body)
    slack.drain()
    (prompts,) = slack.calls("assistant.threads.setSuggestedPrompts")
    assert prompts.params["channel_id"] == dm and "thread_ts" not in prompts.params
    assert len(prompts.params["prompts"]) >= 1
    (greeting,) = slack.web.posts(dm)
    assert greeting["text"]
    no_listener_error(logs)


def test_a_documented_context_change_remembers_the_channel_in_view_for_that_person(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture
) -> None:
    body = slack_docs.envelope("app_context_changed")
    team, person = slack_docs.workspace(body), body["authorizations"][0]["user_id"]
    channel = body["event"]["context"]["entities"][0]["value"]
    slack.event(body)
    slack.drain()
    assert [call.params["channel"] for call in slack.calls("conversations.info")] == [channel]
    assert corpus.viewing(team, person) == channel
    no_listener_error(logs)


# --- unfurls ----------------------------------------------------------------------------------------------


def test_a_documented_link_shared_unfurls_the_archived_links_and_leaves_other_hosts(
    slack: Slack, logs: pytest.LogCaptureFixture
) -> None:
    ours = [item.link for item in corpus_items()[:2]]
    body = slack_docs.shared_links(ours)
    slack.event(body)
    slack.drain()
    (unfurl,) = slack.calls("chat.unfurl")
    event = body["event"]
    assert unfurl.params["unfurl_id"] == event["unfurl_id"] and unfurl.params["source"] == event["source"]
    assert sorted(unfurl.params["unfurls"]) == sorted(ours)  # yet.another-example.com is left to Slack
    no_listener_error(logs)


# --- the assistant pane (installs still on assistant_view) ------------------------------------------------


def test_a_documented_assistant_thread_start_suggests_prompts_in_that_thread(
    slack: Slack, logs: pytest.LogCaptureFixture
) -> None:
    body = slack_docs.envelope("assistant_thread_started")
    thread = body["event"]["assistant_thread"]
    slack.event(body)
    slack.drain()
    (prompts,) = slack.calls("assistant.threads.setSuggestedPrompts")
    assert (prompts.params["channel_id"], prompts.params["thread_ts"]) == (thread["channel_id"],
                                                                            thread["thread_ts"])
    no_listener_error(logs)


def test_a_documented_assistant_context_change_is_acked_and_changes_nothing(
    slack: Slack, logs: pytest.LogCaptureFixture
) -> None:
    slack.event(slack_docs.envelope("assistant_thread_context_changed"))
    slack.drain()
    assert web_calls(slack.web) == []
    no_listener_error(logs)


# --- events other sessions are giving listeners now (behaviour checked where those land) ------------------


@pytest.mark.parametrize("name", ["agent_session_stopped", "entity_details_requested"])
def test_documented_agent_session_and_work_object_events_are_acked(
    slack: Slack, logs: pytest.LogCaptureFixture, name: str
) -> None:
    slack.event(slack_docs.envelope(name))
    slack.drain()
    no_listener_error(logs)


# --- lifecycle ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tokens_revoked", "app_uninstalled"])
def test_a_documented_revocation_or_uninstall_forgets_the_workspace(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture, name: str
) -> None:
    body = slack_docs.envelope(name)
    team = slack_docs.workspace(body)
    corpus.subscribe(team, "C0GONE", "U0ALICE", ["diffusion"])
    corpus.subscribe("T0OTHER", "C0STAYS", "U0BOB", ["speech"])
    slack.event(body)
    slack.drain()
    assert corpus.subscriptions(team) == []
    assert [s.channel_id for s in corpus.subscriptions("T0OTHER")] == ["C0STAYS"]
    no_listener_error(logs)


ELSEWHERE = "C0ELSEWHERE"


def sent_on_a_subscribed_channel(slack: Slack, corpus: Store, body: dict[str, Any]) -> tuple[str, str]:
    """Sends `body`, an event about a channel, once that channel and another of its workspace (ELSEWHERE)
    are subscribed to, and waits for what it started: (team, channel)."""
    team, channel = slack_docs.workspace(body), body["event"]["channel"]
    corpus.subscribe(team, channel, "U0ALICE", ["diffusion"])
    corpus.subscribe(team, ELSEWHERE, "U0ALICE", ["diffusion"])
    slack.event(body)
    slack.drain()
    return team, channel


def paused(corpus: Store, team: str, channel: str) -> bool:
    """Whether `channel`'s subscription is paused (it must still be there)."""
    subscription = corpus.get_subscription(team, channel)
    assert subscription is not None
    return subscription.paused


@pytest.mark.parametrize("name", ["channel_archive", "group_archive", "channel_left", "group_left"])
def test_a_documented_archive_or_leave_pauses_that_channels_subscription(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture, name: str
) -> None:
    team, channel = sent_on_a_subscribed_channel(slack, corpus, slack_docs.envelope(name))
    assert paused(corpus, team, channel)
    assert not paused(corpus, team, ELSEWHERE)
    no_listener_error(logs)


@pytest.mark.parametrize("name", ["channel_deleted", "group_deleted"])
def test_a_documented_deletion_unsubscribes_that_channel(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture, name: str
) -> None:
    team, channel = sent_on_a_subscribed_channel(slack, corpus, slack_docs.envelope(name))
    assert corpus.get_subscription(team, channel) is None
    assert not paused(corpus, team, ELSEWHERE)
    no_listener_error(logs)


def test_a_person_leaving_a_channel_changes_nothing_and_the_bot_leaving_pauses_it(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture
) -> None:
    # as documented: W123ABC456, a person, left
    team, channel = sent_on_a_subscribed_channel(slack, corpus, slack_docs.envelope("member_left_channel"))
    assert not paused(corpus, team, channel)
    left = slack_docs.left_by(BOT_USER)
    left["event_id"] = "Ev0BOTLEFT"
    slack.event(left)
    slack.drain()
    assert paused(corpus, team, channel)
    assert not paused(corpus, team, ELSEWHERE)
    no_listener_error(logs)


# --- buttons: block_actions -----------------------------------------------------------------------------


def test_save_on_an_item_message_puts_it_on_the_readers_list(
    slack: Slack, corpus: Store, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    block_id, save = item_message_element(blocks.SAVE_ACTION_ID)
    payload = slack_docs.click(save, block_id=block_id, response_url=hooks.url("/save"))
    slack.action(payload)
    slack.drain()
    team, reader = payload["team"]["id"], payload["user"]["id"]
    assert [s.item.id for s in corpus.saved_items(team, reader)] == [corpus_items()[0].id]
    reply = hooks.only("/save")
    assert reply.json["response_type"] == "ephemeral" and reply.json["text"]
    no_listener_error(logs)


def test_related_on_an_item_message_answers_the_reader_privately(
    slack: Slack, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    block_id, related = item_message_element(blocks.RELATED_ACTION_ID)
    slack.action(slack_docs.click(related, block_id=block_id, response_url=hooks.url("/related")))
    slack.drain()
    reply = hooks.only("/related")
    assert reply.json["response_type"] == "ephemeral" and reply.json["text"]
    no_listener_error(logs)


def test_choosing_an_author_under_a_post_lists_their_items_to_the_reader_alone(
    slack: Slack, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    """**More by…** (Slack links no text to a command): the author chosen is searched, `search
    author:"…"`, and the results go to the person who chose, ephemerally, with a Share button."""
    by_him = [i for i in corpus_items() if "Oncel Tuzel" in i.authors]
    assert len(by_him) == 2
    block_id, menu = elements(blocks.item_message(by_him[0])["blocks"])[blocks.AUTHOR_ACTION_ID]
    chosen = [o["value"] for o in menu["options"]].index("Oncel Tuzel")
    slack.action(slack_docs.click(menu, block_id=block_id, response_url=hooks.url("/author"), option=chosen))
    slack.drain()
    reply = hooks.only("/author")
    assert reply.json["response_type"] == "ephemeral" and reply.json["replace_original"] is False
    assert reply.json["text"].startswith("2 results for “author:\"Oncel Tuzel\"”")
    listed = json.dumps(reply.json["blocks"], ensure_ascii=False)
    assert all(blocks.title_link(item) in listed for item in by_him)
    assert commands.SHARE_ACTION_ID in elements(reply.json["blocks"])
    no_listener_error(logs)


def test_the_link_button_is_acked_and_nothing_else_happens(slack: Slack, hooks: Recorder,
                                                          logs: pytest.LogCaptureFixture) -> None:
    block_id, read = item_message_element(blocks.OPEN_ACTION_ID)
    assert read.get("url")  # Slack opens it; the click still comes to the app, which must ack it
    slack.action(slack_docs.click(read, block_id=block_id, response_url=hooks.url("/read")))
    slack.drain()
    assert web_calls(slack.web) == [] and hooks.requests == []
    no_listener_error(logs)


def test_share_on_a_command_reply_posts_it_in_the_channel(slack: Slack, hooks: Recorder,
                                                         logs: pytest.LogCaptureFixture) -> None:
    answer = slack.command(slack_docs.command("search diffusion", response_url=hooks.url("/command")))
    block_id, share = elements(answer["blocks"])[commands.SHARE_ACTION_ID]
    slack.action(slack_docs.click(share, block_id=block_id, response_url=hooks.url("/share")))
    slack.drain()
    assert hooks.wait_for(lambda r: len(r.to("/share")) >= 2)
    shared, deleted = (r.json for r in hooks.to("/share"))
    assert shared["response_type"] == "in_channel" and "diffusion" in json.dumps(shared["blocks"]).lower()
    assert deleted["delete_original"] is True
    no_listener_error(logs)


def test_remove_in_the_home_tab_takes_the_item_off_and_publishes_the_home_again(
    slack: Slack, corpus: Store, logs: pytest.LogCaptureFixture
) -> None:
    documented = slack_docs.parsed("block_actions")
    team, reader, item = documented["team"]["id"], documented["user"]["id"], corpus_items()[2]
    corpus.save_item(team, reader, item.id)
    view = home.home_view(corpus, team, reader)
    block_id, remove = elements(view["blocks"])[home.REMOVE_ACTION_ID]
    slack.action(slack_docs.click(remove, block_id=block_id))
    slack.drain()
    assert corpus.saved_items(team, reader) == []
    (published,) = slack.calls("views.publish")
    assert published.params["user_id"] == reader
    no_listener_error(logs)


def test_a_thumbs_up_on_an_answer_is_stored_and_thanked(slack: Slack, corpus: Store,
                                                       logs: pytest.LogCaptureFixture) -> None:
    mention = slack_docs.mention_for(BOT_USER)
    slack.event(mention)
    slack.drain()
    (answer,) = [m for m in slack.web.posts(mention["event"]["channel"])
                 if (m.get("metadata") or {}).get("event_type") == EVENT_TYPE]
    block_id, buttons = elements(answer["blocks"])[answers.FEEDBACK_ACTION_ID]
    payload = slack_docs.click(buttons, block_id=block_id, channel=answer["channel"], message_ts=answer["ts"],
                               thread_ts=answer["thread_ts"], team=slack_docs.workspace(mention))
    slack.action(payload)
    slack.drain()
    (vote,) = corpus.feedback_since()
    assert (vote.user_id, vote.vote) == (payload["user"]["id"], "up")
    (thanks,) = slack.calls("chat.postEphemeral")
    assert thanks.params["user"] == payload["user"]["id"] and thanks.params["channel"] == answer["channel"]
    no_listener_error(logs)


# --- the slash command ----------------------------------------------------------------------------------


def test_the_documented_slash_command_is_answered_in_its_ack(slack: Slack, hooks: Recorder,
                                                            logs: pytest.LogCaptureFixture) -> None:
    answer = slack.command(slack_docs.command("search diffusion", response_url=hooks.url("/command")))
    assert answer["response_type"] == "ephemeral"
    assert "diffusion" in json.dumps(answer["blocks"]).lower()
    help_answer = slack.command(slack_docs.command("", response_url=hooks.url("/command")))
    assert "/mlresearch" in json.dumps(help_answer)
    no_listener_error(logs)


# --- the OAuth redirect ---------------------------------------------------------------------------------

CLIENT_ID, CLIENT_SECRET = "1111.2222", "client-secret-5b1e9c"


def documented_install(web: FakeSlack) -> dict[str, Any]:
    """Slack's side of an install whose code exchange answers with the documented oauth.v2.access response:
    the code is good once, with the client id and secret as HTTP Basic auth (as slack_sdk sends them); the
    token it hands out is known to auth.test as the bot of that workspace."""
    access = slack_docs.parsed("oauth.v2.access")
    codes = {"code-documented"}
    basic = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()

    def exchange(call: Call) -> dict[str, Any]:
        if call.headers.get("Authorization") != basic:
            return {"ok": False, "error": "invalid_client_id"}
        if call.params.get("code") not in codes:
            return {"ok": False, "error": "invalid_code"}
        codes.discard(str(call.params["code"]))
        return access

    def auth_test(call: Call) -> dict[str, Any]:
        if call.token != access["access_token"]:
            return {"ok": False, "error": "invalid_auth"}
        return {"ok": True, "url": "https://softball.slack.com/", "team": access["team"]["name"],
                "user": "mlresearch", "team_id": access["team"]["id"], "user_id": access["bot_user_id"],
                "bot_id": "B0KRQLJ9H", "enterprise_id": access["enterprise"]["id"],
                "is_enterprise_install": False}

    web.handlers["oauth.v2.access"] = exchange
    web.handlers["auth.test"] = auth_test
    return access


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_documented_oauth_answer_installs_the_workspace_whose_commands_then_use_its_token(
    corpus: Store, slack_api: FakeSlack, hooks: Recorder, logs: pytest.LogCaptureFixture, transport: str
) -> None:
    access = documented_install(slack_api)
    team, enterprise = access["team"]["id"], access["enterprise"]["id"]
    with running(corpus, slack_api, transport, slack_client_id=CLIENT_ID,
                 slack_client_secret=CLIENT_SECRET) as slack:
        browser = SimpleNamespace(base=slack.base)
        status, page = finish_install(browser, start_install(browser), "code-documented")  # type: ignore[arg-type]
        assert status == 200, page
        record = corpus.find_installation(team, None)  # a workspace is keyed by its team alone
        assert record is not None and record["bot_token"] == access["access_token"]
        assert record["enterprise_id"] == enterprise
        answer = slack.command(slack_docs.command("subscribe diffusion", response_url=hooks.url("/command"),
                                                  team=team, enterprise=enterprise))
        slack.drain()
        channel = slack_docs.parsed("slash_command")["channel_id"]
        assert corpus.get_subscription(team, channel) is not None, answer
        assert {call.token for call in slack.calls("conversations.info")} == {access["access_token"]}
    no_listener_error(logs)


# --- the Web API stand-in answers as Slack documents ------------------------------------------------------


def test_the_fake_web_api_answers_the_methods_we_call_as_slack_documents(slack_api: FakeSlack) -> None:
    client = WebClient(token=TOKEN, base_url=slack_api.url)
    channel = client.conversations_info(channel="C0SEEN")["channel"]
    assert channel["id"] == "C0SEEN" and channel["is_member"] is True and channel["is_archived"] is False
    slack_api.channels["C0HIDDEN"] = None
    with pytest.raises(SlackApiError) as hidden:
        client.conversations_info(channel="C0HIDDEN")
    assert hidden.value.response["error"] == "channel_not_found"
    view = client.views_publish(user_id="U0ALICE", view={"type": "home", "blocks": []})["view"]
    assert {"id", "team_id", "hash", "app_id", "bot_id"} <= set(view) and view["type"] == "home"
    # chat.startStream: "recipient_user_id ... Required when streaming to channels" (not in a DM)
    with pytest.raises(SlackApiError):
        client.chat_startStream(channel="C0SEEN", thread_ts="1700000000.000100", markdown_text="hi")
    assert client.chat_startStream(channel="C0SEEN", thread_ts="1700000000.000100", markdown_text="hi",
                                   recipient_user_id="U0ALICE", recipient_team_id="T0FAKE")["ok"]
    assert client.chat_startStream(channel="D0ALICE", thread_ts="1700000000.000100", markdown_text="hi")["ok"]
