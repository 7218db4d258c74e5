"""Every read and write of a request is keyed by the workspace Bolt authorized it for (`context.team_id`:
for an event, its `authorizations`), never by the body's `team_id`, which in a Slack Connect channel can
name another workspace. The serve Router and the Bolt app run in process over signed requests; both
stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.app import build_app
from bot.config import Settings
from bot.server import EVENTS_PATH, Router
from bot.store import Store
from tests import slack_docs
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, event_body, wsgi_post

OURS, OTHER = "T0OURS", "T0OTHER"  # the workspace the bot is authorized in; the one a shared channel names
SHARED = "C0SHARED"  # a Slack Connect channel both workspaces have subscribed


@pytest.fixture
def app(store: Store, slack_api: FakeSlack) -> Iterator[Router]:
    slack_api.handlers["views.publish"] = lambda call: {"ok": True, "view": {"id": "V0HOME"}}
    settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack_api.url)
    with ThreadPoolExecutor(max_workers=2) as executor:
        bolt = build_app(settings, store, executor=executor)
        yield Router(SlackRequestHandler(bolt, path=EVENTS_PATH), store, None, SECRET)


def post_event(app: Router, event: dict[str, Any]) -> int:
    """An event as Slack sends it from a shared channel: `team_id` the other workspace, authorized in ours."""
    return wsgi_post(app, event_body(event, team=OTHER, authorized=OURS))


def subscribed(store: Store) -> set[str]:
    return {s.team_id for s in store.subscriptions() if s.channel_id == SHARED and not s.paused}


@pytest.fixture
def both(store: Store) -> Store:
    store.subscribe(OURS, SHARED, "U0A", ["ours-keyword"])
    store.subscribe(OTHER, SHARED, "U0B", ["other-secret"])
    return store


@pytest.mark.parametrize("event", [
    {"type": "channel_deleted", "channel": SHARED},
    {"type": "channel_archive", "channel": SHARED, "user": "U0A"},
    {"type": "channel_left", "channel": SHARED},
])
def test_a_channel_event_changes_the_authorized_workspace_only(
    event: dict[str, Any], app: Router, both: Store
) -> None:
    assert post_event(app, event) == 200
    assert subscribed(both) == {OTHER}


def test_an_uninstall_forgets_the_authorized_workspace_only(app: Router, both: Store) -> None:
    assert post_event(app, {"type": "tokens_revoked", "tokens": {"bot": ["UFAKEBOT"], "oauth": []}}) == 200
    assert subscribed(both) == {OTHER}


def test_another_workspaces_revoked_bot_token_forgets_nothing(app: Router, both: Store) -> None:
    """Slack's documented event (tests/data/slack/tokens_revoked.txt): `tokens.bot` is an array of the user
    IDs of the bot users whose tokens were revoked, here UXXXXXXXX: the other workspace's bot user (the
    body's team_id), while the event is authorized for ours, whose bot user is UFAKEBOT. Only our own bot
    user's revocation forgets our workspace."""
    event = slack_docs.parsed("tokens_revoked")["event"]
    assert event["tokens"]["bot"] == ["UXXXXXXXX"]
    assert post_event(app, event) == 200
    assert subscribed(both) == {OURS, OTHER}


def test_the_app_home_is_built_for_the_authorized_workspace(
    app: Router, both: Store, slack_api: FakeSlack
) -> None:
    slack_api.members = {SHARED: {"U0A"}}
    event = {"type": "app_home_opened", "user": "U0A", "channel": "D0A", "tab": "home", "event_ts": "1.1"}
    assert post_event(app, event) == 200
    assert slack_api.wait_for(lambda s: bool(s.calls_to("views.publish")), timeout=20)
    view = json.dumps(slack_api.calls_to("views.publish")[0].params["view"])
    assert "ours-keyword" in view and "other-secret" not in view
    assert {c.token for c in slack_api.calls} == {TOKEN}
