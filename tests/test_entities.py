"""Papers as Slack Work Objects: feed posts, follow DMs, unfurls and answers carry each paper's entity (a
content item) in their `metadata`, in the shape slack_sdk's models produce and Slack documents
(docs.slack.dev/messaging/work-objects-implementation), beside the event metadata posts are reconciled by;
over each store, with real slack_sdk traffic to FakeSlack (which checks what Slack requires of an entity)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from slack_sdk.models.metadata import (
    ContentItemEntityFields,
    EntityActionButton,
    EntityActions,
    EntityAttributes,
    EntityMetadata,
    EntityPayload,
    EntityStringField,
    EntityTimestampField,
    EntityTitle,
    EntityTypedField,
    EntityUserField,
    EventAndEntityMetadata,
    ExternalRef,
)

from bot import entities
from bot.blocks import CITE_ACTION_ID, EVENT_TYPE, RELATED_ACTION_ID, SAVE_ACTION_ID
from bot.conversation import EVENT_TYPE as ANSWER_EVENT
from bot.feed import parse
from bot.models import Item, Validators
from bot.route import ingest
from bot.store import Store
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack, dm_channel
from tests.test_agent import dm, model, running  # noqa: F401 - `model`: the streaming model stand-in
from tests.test_deliver import DATA, FEED, deliverer
from tests.test_unfurls import HOSTILE, PLAIN, App
from tests.test_unfurls import app as app  # noqa: F401 - the signed app over each store, with FakeSlack

RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
NEW = [i for i in parse((DATA / "apple_ml_archive.xml").read_bytes()) if i.id not in {r.id for r in RSS}]
TEAM = "T0001"
LINK = re.compile(r"<(https://machinelearning\.apple\.com/[^|>]+)\|")
CITED = re.compile(r"\[\d+\] <(https://machinelearning\.apple\.com/[^|>]+)\|")


def card(item: Item, description: str, authors: str | None, unfurl_url: str | None = None) -> EntityMetadata:
    """The paper card Slack should get for `item`, written out with slack_sdk's models."""
    fields = ContentItemEntityFields(
        description=EntityStringField(value=description, long=True),
        created_by=EntityTypedField(type="slack#/types/user", user=EntityUserField(text=authors))
        if authors else None,
        date_created=EntityTimestampField(value=int(item.published.timestamp())))
    actions = EntityActions(primary_actions=[
        EntityActionButton(text="Save", action_id=SAVE_ACTION_ID, value=item.id,
                           accessibility_label="Save to your reading list"),
        EntityActionButton(text="Related", action_id=RELATED_ACTION_ID, value=item.id,
                           accessibility_label="Items close to this one, shown only to you")],
        overflow_actions=[EntityActionButton(text="Cite", action_id=CITE_ACTION_ID, value=item.id,
                                             accessibility_label="Its BibTeX entry, shown only to you")])
    return EntityMetadata(
        entity_type="slack#/entities/content_item", url=item.link, external_ref=ExternalRef(id=item.id),
        app_unfurl_url=unfurl_url,
        entity_payload=EntityPayload(attributes=EntityAttributes(title=EntityTitle(text=item.title),
                                                                 display_type="Paper"),
                                     fields=fields, actions=actions))


def new_item(store: Store, *, channel: str = "C1", follower: str | None = None) -> Item:
    """A store past its baseline poll, `channel` subscribed (and `follower` following the item's first
    title word); one new item found by the next poll."""
    ingest(store, FEED, RSS, Validators())
    store.subscribe(TEAM, channel, "U1")
    if follower is not None:
        store.follow(TEAM, follower, [NEW[0].title.split()[0].lower()])
    [item] = ingest(store, FEED, [*RSS, NEW[0]], Validators()).new
    return item


# --- feed posts ---------------------------------------------------------------------------------------------


def test_a_feed_post_and_a_follow_dm_carry_the_paper_card_beside_the_event_metadata(
    store: Store, slack_api: FakeSlack
) -> None:
    item = new_item(store, follower="U0ALICE")
    assert deliverer(slack_api)(store).delivered == 2
    [post] = slack_api.calls_to("chat.postMessage", "C1")
    [follow] = slack_api.calls_to("chat.postMessage", dm_channel("U0ALICE"))
    expected = EventAndEntityMetadata(
        event_type=EVENT_TYPE, event_payload={"item_id": item.id},
        entities=[card(item, entities.abstract_start(item.summary), None)]).to_dict()  # RSS names no authors
    assert post.params["metadata"] == expected == follow.params["metadata"]
    assert post.params["metadata"]["event_type"] == "mlresearch_item"  # the contract's, reconciliation's
    assert len(expected["entities"][0]["entity_payload"]["fields"]["description"]["value"]) <= 400
    assert post.params["blocks"] and post.params["unfurl_links"] is False  # the Block Kit post as before


def test_a_post_slack_refuses_for_its_metadata_goes_again_without_the_card(
    store: Store, slack_api: FakeSlack
) -> None:
    item = new_item(store)
    slack_api.fault("chat.postMessage", channel="C1", error="invalid_metadata_schema")
    assert deliverer(slack_api)(store).delivered == 1
    first, second = slack_api.calls_to("chat.postMessage", "C1")
    assert "entities" in first.params["metadata"]
    assert second.params["metadata"] == {"event_type": EVENT_TYPE, "event_payload": {"item_id": item.id}}
    assert [m["metadata"]["event_payload"]["item_id"] for m in slack_api.posts("C1")] == [item.id]


def test_feed_text_in_a_card_is_plain_text_and_an_item_without_a_web_link_has_none() -> None:
    [hostile] = entities.with_papers({"event_type": ANSWER_EVENT, "event_payload": {}}, [HOSTILE])["entities"]
    assert hostile["entity_payload"]["attributes"]["title"]["text"] == HOSTILE.title  # shown as written
    assert '"format"' not in json.dumps(hostile)  # no markdown: no mention or link is made of it
    odd = Item(id="odd", guid=None, title="t", link="javascript:alert(1)", summary="s",
               published=datetime(2026, 1, 1, tzinfo=UTC), kind="research")
    plain = {"event_type": EVENT_TYPE, "event_payload": {"item_id": "odd"}}
    assert entities.with_papers(plain, [odd]) == plain


# --- unfurls ------------------------------------------------------------------------------------------------


def test_an_unfurl_sends_the_paper_card_beside_the_block_kit_unfurl(app: App, slack_api: FakeSlack) -> None:
    posted = "https://MachineLearning.apple.com/research/hostile/?utm_source=slack#abstract"
    app.share_links(posted, PLAIN.link)
    [call] = slack_api.unfurls
    assert list(call["unfurls"]) == [posted, PLAIN.link]  # the fallback where Work Objects are off
    assert call["metadata"] == EventAndEntityMetadata(entities=[
        card(HOSTILE, entities.abstract_start(HOSTILE.summary), "J. Doe, J. Roe et al.", unfurl_url=posted),
        card(PLAIN, "One sentence only.", None, unfurl_url=PLAIN.link),
    ]).to_dict()


def test_an_unfurl_slack_refuses_for_its_metadata_is_sent_again_as_block_kit(
    app: App, slack_api: FakeSlack
) -> None:
    slack_api.fault("chat.unfurl", error="invalid_metadata")
    app.share_links(PLAIN.link)
    first, second = slack_api.calls_to("chat.unfurl")
    assert "metadata" in first.params and "metadata" not in second.params
    [call] = slack_api.unfurls
    assert list(call["unfurls"]) == [PLAIN.link]


# --- answers ------------------------------------------------------------------------------------------------


def listed(message: dict[str, Any]) -> list[str]:
    """The item links an answer's blocks show, in order."""
    return list(dict.fromkeys(LINK.findall(json.dumps(message.get("blocks") or []))))


def test_an_answer_carries_the_cards_of_the_items_it_lists(store: Store, slack_api: FakeSlack) -> None:
    with running(store, slack_api) as bot:
        asked = dm(bot, "what has Apple published on speech recognition?")
        bot.drain()
        [reply] = bot.answers("D0ALICE")
    shown = listed(reply)
    assert len(shown) >= 2
    metadata = reply["metadata"]
    assert (metadata["event_type"], metadata["event_payload"]) == (ANSWER_EVENT, {"message_ts": asked["ts"]})
    items = [item for link in shown if (item := store.get_item(link)) is not None]
    cards = [card(i, entities.abstract_start(i.summary), None) for i in items]
    assert metadata["entities"] == EventAndEntityMetadata(entities=cards).to_dict()["entities"]


def test_a_written_answer_posted_whole_carries_the_cited_papers_and_a_streamed_one_the_event_only(
    store: Store, slack_api: FakeSlack, model: FakeOpenAI  # noqa: F811 - the fixture imported above
) -> None:
    slack_api.fault("chat.startStream", error="method_deprecated")
    with running(store, slack_api, summary_api_url=model.url) as bot:
        dm(bot, "speech recognition")
        bot.drain()
        [posted] = bot.answers("D0ALICE")
        dm(bot, "speech recognition", channel="D0BOB")
        bot.drain()
        [streamed] = slack_api.streamed("D0BOB")
    cited = CITED.findall(json.dumps(posted["blocks"]))  # "[2] <link|title> · date", in the list's order
    assert len(cited) == 2
    assert [e["external_ref"]["id"] for e in posted["metadata"]["entities"]] == cited
    assert "entities" not in streamed["metadata"]  # chat.stopStream: Slack documents event metadata only
    assert streamed["metadata"]["event_type"] == ANSWER_EVENT


@pytest.mark.parametrize("count", [0, 7])
def test_a_message_carries_at_most_five_cards(count: int) -> None:
    many = [Item(id=f"https://machinelearning.apple.com/research/p{n}", guid=None, title=f"P{n}",
                 link=f"https://machinelearning.apple.com/research/p{n}", summary="An abstract.",
                 published=datetime(2026, 1, 1, tzinfo=UTC), kind="research") for n in range(count)]
    metadata = entities.with_papers({"event_type": ANSWER_EVENT, "event_payload": {}}, many)
    assert len(metadata.get("entities", [])) == min(count, entities.MESSAGE_PAPERS)
