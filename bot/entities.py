"""Papers as Slack Work Objects: an archive item as a content-item entity, so Slack shows it as a paper card
(under a feed post, an unfurl, an answer) with a flexpane, built with slack_sdk's models
(`slack_sdk.models.metadata`).

    paper(item)                    # the card: title, Paper/Update, authors, date, the abstract's start, link;
                                   # Save and Related (the buttons every item message has, same action ids),
                                   # Cite in its overflow menu (a card shows two primary actions at most)
    with_papers(metadata, items)   # a message's event metadata with its papers' entities beside it
    details(item, near)            # the flexpane: the whole abstract, every author, the related items,
                                   # Save and Read, Cite in the overflow (bot.flexpane sends it on
                                   # `entity_details_requested`)

Slack's shape (docs.slack.dev/messaging/work-objects-implementation): an entity is `entity_type`
(`slack#/entities/content_item`, "a content page, an article page"), `url` (the item's link), `external_ref`
(`{"id": <the item's id>}`, which Slack echoes back when someone opens the card) and `entity_payload`
(`attributes` with the title, `fields` of the content-item type: `description`, `created_by`, `date_created`;
`custom_fields`; `actions`). A message's `metadata` carries `entities` beside its `event_type` and
`event_payload`: chat.postMessage "re-uses the existing metadata parameter" for entities, and slack_sdk
models the two together (`EventAndEntityMetadata`), so a feed post keeps the contract's `mlresearch_item`
event (what reconciliation finds it by) and gains the card. chat.unfurl takes `metadata` with `entities`
beside `unfurls` (each entity names the URL as posted, `app_unfurl_url`); the Block Kit unfurl stays the
preview wherever Work Objects are off. entity.presentDetails takes one entity, without `app_unfurl_url`.

Feed text goes into entities as plain strings (no `format: markdown`): Slack shows it as written and finds no
mention or link in it; titles are cut at TITLE_CHARS, the card's abstract at ABSTRACT_CHARS (its first
ABSTRACT_SENTENCES sentences), the flexpane's at FULL_ABSTRACT_CHARS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slack_sdk.models.metadata import (
    ContentItemEntityFields,
    EntityActionButton,
    EntityActions,
    EntityArrayItemField,
    EntityAttributes,
    EntityCustomField,
    EntityMetadata,
    EntityPayload,
    EntityRefField,
    EntityStringField,
    EntityTimestampField,
    EntityTitle,
    EntityTypedField,
    EntityUserField,
    EventAndEntityMetadata,
    ExternalRef,
)

from bot.blocks import (
    ACTION_VALUE_LIMIT,
    CITE_ACTION_ID,
    KIND_LABEL,
    OPEN_ACTION_ID,
    RELATED_ACTION_ID,
    SAVE_ACTION_ID,
    TITLE_CHARS,
    cut,
    format_authors,
    safe_url,
    snippet,
)
from bot.models import UNDATED, Item
from bot.summarize import sentences

ENTITY_TYPE = "slack#/entities/content_item"
ABSTRACT_CHARS = 400
ABSTRACT_SENTENCES = 2
FULL_ABSTRACT_CHARS = 3000
MESSAGE_PAPERS = 5  # cards under one message at most (an answer listing 20 items shows the first 5)
AUTHORS_LISTED = 50  # the flexpane's author list
AUTHOR_CHARS = 100
CREATED_BY_CHARS = 200  # the card's authors line ("J. Doe, J. Roe et al.")
URL_CHARS = 3000  # Slack's limit for an action button's URL


def abstract_start(text: str, limit: int = ABSTRACT_CHARS) -> str:
    """The abstract's first sentences as written (plain text, not escaped), at most `limit` characters; the
    start of the text when it holds no complete sentence."""
    found = sentences(text)[:ABSTRACT_SENTENCES]
    if not found:
        return snippet(text, limit) if text.strip() else ""
    shown = found[0]
    for more in found[1:]:
        if len(shown) + 1 + len(more) > limit:
            break
        shown = f"{shown} {more}"
    return cut(shown, limit)


def paper(item: Item, *, unfurl_url: str | None = None) -> EntityMetadata | None:
    """The item's card: title, kind, authors, date, the abstract's start, its link, Save and Related (and
    Cite, in the overflow menu); None when its link is not a plain http(s) URL (Slack needs one).
    `unfurl_url`: the URL as posted, for an unfurl."""
    url = safe_url(item.link)
    if url is None:
        return None
    actions = EntityActions(primary_actions=[_save(item), EntityActionButton(
        text="Related", action_id=RELATED_ACTION_ID, value=item.id[:ACTION_VALUE_LIMIT],
        accessibility_label="Items close to this one, shown only to you")], overflow_actions=[_cite(item)])
    payload = EntityPayload(attributes=_attributes(item), fields=_fields(item, abstract_start(item.summary)),
                            actions=actions)
    return EntityMetadata(entity_type=ENTITY_TYPE, url=url, external_ref=ExternalRef(id=item.id),
                          entity_payload=payload, app_unfurl_url=unfurl_url)


def with_papers(metadata: dict[str, Any], items: Sequence[Item]) -> dict[str, Any]:
    """A message's event metadata (`event_type`, `event_payload`) with the cards of the first
    MESSAGE_PAPERS `items` as its `entities`, as slack_sdk's EventAndEntityMetadata serializes them; the
    metadata unchanged when none of them can be a card."""
    cards = [card for card in (paper(item) for item in items[:MESSAGE_PAPERS]) if card is not None]
    if not cards:
        return metadata
    both = EventAndEntityMetadata(event_type=metadata.get("event_type"),
                                  event_payload=metadata.get("event_payload"), entities=list(cards))
    return both.to_dict()


def unfurl_metadata(found: Sequence[tuple[str, Item]]) -> dict[str, Any] | None:
    """chat.unfurl's `metadata`: a card for each (URL as posted, item); None when there is none."""
    cards = [card for card in (paper(item, unfurl_url=url) for url, item in found) if card is not None]
    return EventAndEntityMetadata(entities=list(cards)).to_dict() if cards else None


def details(item: Item, near: Sequence[Item], *, external_ref: ExternalRef | None = None) -> EntityMetadata:
    """The item's flexpane: the whole abstract, every author (at most AUTHORS_LISTED), the related items
    (each a reference to its own card), Save and Read (and Cite, in the overflow menu). `external_ref`: the
    one Slack sent (it must match), else the item's. The item's link must be a plain http(s) URL (as for
    its card)."""
    url = safe_url(item.link) or ""
    whole = cut(" ".join(item.summary.split()), FULL_ABSTRACT_CHARS)
    fields = _fields(item, whole)
    order = [name for name, value in (("description", fields.description), ("created_by", fields.created_by),
                                      ("date_created", fields.date_created)) if value is not None]
    custom: list[dict[str, Any] | EntityCustomField] = []
    names = [cut(" ".join(a.split()), AUTHOR_CHARS) for a in item.authors if a and a.strip()]
    if names:
        custom.append(EntityCustomField(
            label="Authors", key="authors", type="array", item_type="string",
            value=[EntityArrayItemField(value=name) for name in names[:AUTHORS_LISTED]]))
        order.append("authors")
    refs = [EntityArrayItemField(type="slack#/types/entity_ref", entity_ref=EntityRefField(
        entity_url=link, external_ref=ExternalRef(id=other.id), title=cut(other.title, TITLE_CHARS),
        display_type=KIND_LABEL.get(other.kind, "Paper")))
        for other in near if (link := safe_url(other.link)) is not None]
    if refs:
        custom.append(EntityCustomField(label="Related", key="related", type="array",
                                        item_type="slack#/types/entity_ref", value=list(refs)))
        order.append("related")
    primary: list[dict[str, Any] | EntityActionButton] = [_save(item)]
    if url:
        primary.append(EntityActionButton(text="Read", action_id=OPEN_ACTION_ID, url=url[:URL_CHARS],
                                          value=item.id[:ACTION_VALUE_LIMIT]))
    payload = EntityPayload(attributes=_attributes(item), fields=fields, custom_fields=custom or None,
                            display_order=order,
                            actions=EntityActions(primary_actions=primary, overflow_actions=[_cite(item)]))
    return EntityMetadata(entity_type=ENTITY_TYPE, url=url,
                          external_ref=external_ref or ExternalRef(id=item.id), entity_payload=payload)


def _attributes(item: Item) -> EntityAttributes:
    return EntityAttributes(title=EntityTitle(text=cut(item.title, TITLE_CHARS) or "Untitled"),
                            display_type=KIND_LABEL.get(item.kind, "Paper"))


def _fields(item: Item, description: str) -> ContentItemEntityFields:
    authors = cut(format_authors(item.authors), CREATED_BY_CHARS)
    return ContentItemEntityFields(
        description=EntityStringField(value=description, long=True) if description else None,
        created_by=EntityTypedField(type="slack#/types/user", user=EntityUserField(text=authors))
        if authors else None,
        date_created=EntityTimestampField(value=int(item.published.timestamp()))
        if item.published != UNDATED else None,  # a demo post of unknown date: none rather than 1970
    )


def _save(item: Item) -> EntityActionButton:
    """Save: the Save button's action id and value, so the listener that answers it answers this too."""
    return EntityActionButton(text="Save", action_id=SAVE_ACTION_ID, value=item.id[:ACTION_VALUE_LIMIT],
                              accessibility_label="Save to your reading list")


def _cite(item: Item) -> EntityActionButton:
    """Cite: the Cite button's action id and value (bot.blocks.cite_button), answered by the same listener."""
    return EntityActionButton(text="Cite", action_id=CITE_ACTION_ID, value=item.id[:ACTION_VALUE_LIMIT],
                              accessibility_label="Its BibTeX entry, shown only to you")
