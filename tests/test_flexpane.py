"""A paper card's flexpane: Slack's documented `entity_details_requested` (tests/data/slack/) sent signed into
the real app (the Router, Bolt and our listeners behind waitress, in this process) over each store, answered
with `entity.presentDetails` on FakeSlack; the flexpane's Save clicked with Slack's documented Work Object
`block_actions` payload."""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.blocks import OPEN_ACTION_ID, SAVE_ACTION_ID
from bot.commands.archive import RELATED_RESULTS
from bot.config import Settings
from bot.entities import ENTITY_TYPE
from bot.models import Item
from bot.search.index import SearchIndex, meaning_model
from bot.search.related import related
from bot.store import Store
from tests import slack_docs
from tests.fakes.archive import corpus_items
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import http, signed_headers
from tests.test_unfurls import App
from tests.test_unfurls import app as app  # noqa: F401 - the signed app over each store, with FakeSlack

ROOT = Path(__file__).resolve().parents[1]
SLACK_TEAM, SLACK_USER = "T123ABC456", "U123ABC456"  # the workspace and person of Slack's examples
UNUSED = "http://127.0.0.1:9/unused"  # a response_url nothing answers (Slack's example names hooks.slack.com)


def send_event(app: App, body: dict[str, Any]) -> None:
    raw = json.dumps(body).encode()
    status, _ = http("POST", app.url, raw, signed_headers(raw, "application/json"))
    assert status == 200
    app.executor.drain()


def opened(card: dict[str, Any]) -> dict[str, Any]:
    """Slack's documented event for someone opening `card` (an entity the bot sent): Slack echoes the card's
    `external_ref` and `url` (as `entity_url` and `link`), and the URL as posted (`app_unfurl_url`)."""
    body = slack_docs.envelope("entity_details_requested")
    event = body["event"]
    event["external_ref"] = card["external_ref"]
    event["entity_url"] = card["url"]
    event["link"] = {"url": card["url"], "domain": "machinelearning.apple.com"}
    event["app_unfurl_url"] = card.get("app_unfurl_url", card["url"])
    return body


@dataclass(frozen=True)
class Paper:
    item: Item
    related: list[Item]  # as the Related button lists them (by meaning with the bundled model, as serve)


@pytest.fixture
def paper(store: Store) -> Paper:
    """One of the real posts with two authors or more and two related items or more."""
    store.add_items(corpus_items())
    index = SearchIndex(store, model=meaning_model(Settings()))
    for item in store.latest(100):
        near = [r.item for r in related(index, item, RELATED_RESULTS, store)]
        if len(near) >= 2 and len(item.authors) >= 2:
            return Paper(item, near)
    raise AssertionError("no post in the corpus has two related items")


def flexpane_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "bot.flexpane"]


# --- Slack's example, and a card of ours -------------------------------------------------------------------


def test_slacks_documented_event_for_a_link_we_do_not_hold_is_answered_not_found(
    app: App, slack_api: FakeSlack, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = slack_docs.envelope("entity_details_requested")  # external_ref 123, https://example.com/document/123
    send_event(app, body)
    trigger = body["event"]["trigger_id"]
    [call] = slack_api.presented
    assert (call["trigger_id"], call["error"]) == (trigger, {"status": "not_found"})
    assert "metadata" not in call
    [line] = flexpane_lines(caplog)
    assert "event=entity_details_not_found reason=other_host" in line and f"team={SLACK_TEAM}" in line
    assert store.saved_items(SLACK_TEAM, "U0123456") == []
    assert "Traceback" not in caplog.text


def test_opening_a_paper_card_shows_the_abstract_authors_related_items_and_save(
    app: App, slack_api: FakeSlack, store: Store, paper: Paper, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    item = paper.item
    app.share_links(item.link + "?utm_source=slack")
    [card] = slack_api.unfurls[0]["metadata"]["entities"]  # what the bot sent, as Slack got it
    body = opened(card)
    send_event(app, body)

    [call] = slack_api.presented
    assert call["trigger_id"] == body["event"]["trigger_id"] and "error" not in call
    flexpane = call["metadata"]
    assert flexpane["entity_type"] == ENTITY_TYPE and flexpane["url"] == item.link
    assert flexpane["external_ref"] == card["external_ref"] == {"id": item.id}  # must match the trigger's
    assert "app_unfurl_url" not in flexpane  # Slack's flexpane schema leaves it out
    payload = flexpane["entity_payload"]
    assert payload["attributes"]["title"] == {"text": item.title}
    assert payload["fields"]["description"]["value"] == " ".join(item.summary.split())  # the whole abstract
    assert payload["fields"]["date_created"] == {"value": int(item.published.timestamp())}
    custom = {field["key"]: field for field in payload["custom_fields"]}
    assert [a["value"] for a in custom["authors"]["value"]] == list(item.authors)
    assert custom["authors"]["type"] == "array" and custom["authors"]["item_type"] == "string"
    expected = paper.related
    refs = custom["related"]["value"]
    assert [r["entity_ref"]["external_ref"]["id"] for r in refs] == [i.id for i in expected]
    assert [r["entity_ref"]["entity_url"] for r in refs] == [i.link for i in expected]
    assert all(r["type"] == "slack#/types/entity_ref" for r in refs)
    assert custom["related"]["item_type"] == "slack#/types/entity_ref"
    assert payload["display_order"] == ["description", "created_by", "date_created", "authors", "related"]
    save, read = payload["actions"]["primary_actions"]
    assert (save["action_id"], save["value"], save["text"]) == (SAVE_ACTION_ID, item.id, "Save")
    assert (read["action_id"], read["url"]) == (OPEN_ACTION_ID, item.link)
    [line] = flexpane_lines(caplog)
    assert "event=entity_details_presented" in line and f"related={len(expected)}" in line


def test_the_flexpanes_save_saves_through_the_save_listener(
    app: App, slack_api: FakeSlack, store: Store, paper: Paper
) -> None:
    item = paper.item
    app.share_links(item.link)
    [card] = slack_api.unfurls[0]["metadata"]["entities"]
    send_event(app, opened(card))
    [save, _read] = slack_api.presented[0]["metadata"]["entity_payload"]["actions"]["primary_actions"]
    click = slack_docs.parsed("block_actions_work_object")  # Slack's: an action on a Work Object unfurl
    click["container"].update(type="entity_detail", entity_url=card["url"],  # from the flexpane, on our card
                               external_ref=card["external_ref"], app_unfurl_url=item.link)
    click["actions"] = [{"type": "button", "text": {"type": "plain_text", "text": save["text"]},
                         "action_id": save["action_id"], "block_id": "TPdc", "value": save["value"],
                         "action_ts": "1748809126.803329"}]
    click["response_url"] = UNUSED
    raw = urlencode({"payload": json.dumps(click)}).encode()
    status, _ = http("POST", app.url, raw, signed_headers(raw, "application/x-www-form-urlencoded"))
    assert status == 200
    app.executor.drain()
    assert [s.item.id for s in store.saved_items(SLACK_TEAM, SLACK_USER)] == [item.id]
    [reply] = slack_api.ephemerals  # the response_url did not answer: the line goes ephemerally
    assert (reply["channel"], reply["user"]) == ("C123ABC456", SLACK_USER) and "reading list" in reply["text"]


def test_a_card_opened_again_by_its_link_alone_is_presented_with_slacks_external_ref(
    app: App, slack_api: FakeSlack, paper: Paper
) -> None:
    body = opened({"external_ref": {"id": "an-id-we-never-sent", "type": "legacy"}, "url": paper.item.link})
    send_event(app, body)
    [call] = slack_api.presented
    assert call["metadata"]["external_ref"] == {"id": "an-id-we-never-sent", "type": "legacy"}
    assert call["metadata"]["entity_payload"]["attributes"]["title"]["text"] == paper.item.title


# --- what gets no flexpane ---------------------------------------------------------------------------------


def test_odd_requests_are_one_log_line_each_a_2xx_and_nothing_stored(
    app: App, slack_api: FakeSlack, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    base = slack_docs.envelope("entity_details_requested")

    def variant(**event: Any) -> dict[str, Any]:
        body = copy.deepcopy(base)
        body["event"].update(event)
        return {k: v for k, v in body.items() if v is not None}

    no_trigger = variant(trigger_id=None)
    long_trigger = variant(trigger_id="1." * 200)
    odd_shapes = variant(external_ref=[1, 2], entity_url=42, link="https://machinelearning.apple.com/x")
    not_archived = variant(external_ref={"id": 7}, entity_url="https://machinelearning.apple.com/research/nope",
                           link=None)
    other_workspace = copy.deepcopy(base)  # no workspace Bolt could authorize it for
    del other_workspace["authorizations"], other_workspace["team_id"]
    for body in (no_trigger, long_trigger, odd_shapes, not_archived, other_workspace):
        send_event(app, body)

    statuses = [call.get("error", {}).get("status") for call in slack_api.presented]
    assert statuses == ["not_found", "not_found"]  # the odd shapes and the item the archive lacks
    lines = flexpane_lines(caplog)
    assert len(lines) == 5
    assert "reason=no_trigger_id" in lines[0] and "reason=no_trigger_id" in lines[1]
    assert "entity_details_not_found reason=no_link" in lines[2]
    assert "entity_details_not_found reason=not_archived" in lines[3]
    assert "entity_details_refused reason=no_workspace" in lines[4]
    assert store.count_items() == 2 and store.saved_items(SLACK_TEAM, "U0123456") == []
    assert "Traceback" not in caplog.text


def test_slack_refusing_the_flexpane_is_one_log_line(
    app: App, slack_api: FakeSlack, paper: Paper, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slack_api.fault("entity.presentDetails", error="feature_not_enabled")
    send_event(app, opened({"external_ref": {"id": paper.item.id}, "url": paper.item.link}))
    [line] = flexpane_lines(caplog)
    assert "event=entity_details_failed stage=slack" in line and "error=feature_not_enabled" in line
    assert "Traceback" not in caplog.text


# --- the fake and the manifest, against Slack's documents -------------------------------------------------


def test_the_fake_takes_slacks_documented_flexpane_and_refuses_an_unfurls_shape(slack_api: FakeSlack) -> None:
    client = WebClient(token="xoxb-test", base_url=slack_api.url)
    documented_metadata = slack_docs.parsed("entity_presentDetails_metadata")
    client.entity_presentDetails(trigger_id="1.2.3", metadata=documented_metadata)
    client.entity_presentDetails(trigger_id="1.2.3", error={"status": "not_found"})
    assert [call.get("metadata") for call in slack_api.presented] == [documented_metadata, None]
    for refused, kwargs in (("invalid_metadata", {"metadata": {"entities": [documented_metadata]}}),
                            ("invalid_arguments", {"error": {"status": "gone"}}),
                            ("invalid_trigger_id", {"trigger_id": ""})):
        with pytest.raises(SlackApiError) as raised:
            client.entity_presentDetails(**{"trigger_id": "1.2.3", **kwargs})
        assert raised.value.response["error"] == refused


def test_the_manifest_subscribes_entity_details_requested() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert "entity_details_requested" in manifest["settings"]["event_subscriptions"]["bot_events"]
