"""A paper card's flexpane: Slack's `entity_details_requested` (someone opened a card, or refreshed its
flexpane) answered with `entity.presentDetails`.

    present(event, team_id, services, client)  # one call to Slack at most, one log line always

The card names its item twice (`bot.entities.paper`): `external_ref.id` is the item's id, and `url` its
link, which Slack sends back as `entity_url`. The item is looked up by the id, else by the link when it is
one of ours (`bot.unfurls.our_link`); the flexpane (`bot.entities.details`) shows its whole abstract, every
author, up to RELATED_RESULTS related items (`bot.search.related`, as the Related button finds them: only
those close enough, so maybe none) and Save (the Save button's action id: the same listener saves it).

What is not answered with a flexpane, each in one log line, with nothing stored:
- an event without a workspace Bolt authorized, or without a usable `trigger_id` (Slack needs one to answer):
  no call;
- an item the archive does not hold, a link to another host, an `external_ref` that names nothing:
  entity.presentDetails with Slack's `not_found` error status, so the person sees "not found" instead of a
  flexpane that never loads;
- the archive unreachable: `internal_error`.
Slack refusing the call, or not answering, is one more log line.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.metadata import ExternalRef

from bot.blocks import safe_url
from bot.commands import Services
from bot.commands.archive import RELATED_RESULTS
from bot.entities import details
from bot.errors import BotError, StoreError
from bot.models import Item
from bot.search.related import related
from bot.slackweb import TRANSPORT_ERRORS, error_code
from bot.unfurls import MAX_URL_CHARS, our_link

log = logging.getLogger("bot.flexpane")

TRIGGER_CHARS = 200
REF_CHARS = 2000  # of an external_ref's id or type sent back to Slack
LOGGED_CHARS = 100


def present(event: dict[str, Any], team_id: str, services: Services, client: Any) -> str:
    """Answer one `entity_details_requested` (see the module docstring); returns the outcome it logged:
    "presented", "not_found", "internal_error", "refused" or "failed"."""
    user = _text(event.get("user"), 20)
    where = f"team={team_id[:20]} user={user}"
    trigger = event.get("trigger_id")
    if not team_id:
        log.info("event=entity_details_refused reason=no_workspace %s", where)
        return "refused"
    if not isinstance(trigger, str) or not trigger.strip() or len(trigger) > TRIGGER_CHARS:
        log.info("event=entity_details_refused reason=no_trigger_id %s", where)
        return "refused"
    ref = _external_ref(event.get("external_ref"))
    try:
        item, why = _item(event, ref, services)
    except StoreError as exc:
        log.error("event=entity_details_failed stage=archive %s error=%r", where,
                  " ".join(str(exc).split())[:200])
        return _error(client, trigger, "internal_error", where)
    if item is None:
        log.info("event=entity_details_not_found reason=%s %s", why, where)
        return _error(client, trigger, "not_found", where)
    near = _related(item, services, where)
    flexpane = details(item, near, external_ref=ref or ExternalRef(id=item.id))
    try:
        client.entity_presentDetails(trigger_id=trigger, metadata=flexpane)
    except SlackApiError as exc:
        log.warning("event=entity_details_failed stage=slack %s error=%s", where, error_code(exc)[0][:60])
        return "failed"
    except TRANSPORT_ERRORS as exc:
        log.warning("event=entity_details_failed stage=slack %s error=%s", where, type(exc).__name__)
        return "failed"
    log.info("event=entity_details_presented item=%s related=%d %s", item.id[:LOGGED_CHARS], len(near), where)
    return "presented"


def _item(event: dict[str, Any], ref: ExternalRef | None, services: Services) -> tuple[Item | None, str]:
    """(the item the event names, "") or (None, why not)."""
    store = services.store
    if ref is not None:
        item = store.get_item(ref.id) if len(ref.id) <= MAX_URL_CHARS else None
        if item is not None and safe_url(item.link) is not None:
            return item, ""
    link = event.get("entity_url")
    if not isinstance(link, str):
        link = (event.get("link") or {}).get("url") if isinstance(event.get("link"), dict) else None
    if not isinstance(link, str) or not link:
        return None, "no_link" if ref is None else "not_archived"
    canonical = our_link(link)
    if canonical is None:
        return None, "other_host"
    item = store.item_by_link(canonical)
    if item is None or safe_url(item.link) is None:
        return None, "not_archived"
    return item, ""


def _external_ref(raw: object) -> ExternalRef | None:
    """The event's `external_ref`, when it is the shape Slack documents (`id`, optional `type`: strings)."""
    if not isinstance(raw, dict):
        return None
    ref_id, ref_type = raw.get("id"), raw.get("type")
    if not isinstance(ref_id, str) or not ref_id or len(ref_id) > REF_CHARS:
        return None
    if ref_type is not None and (not isinstance(ref_type, str) or len(ref_type) > REF_CHARS):
        return None
    return ExternalRef(id=ref_id, type=ref_type)


def _related(item: Item, services: Services, where: str) -> list[Item]:
    """The items close to `item`, as the Related button lists them; none (one log line) when search fails."""
    try:
        return [near.item for near in related(services.index, item, RELATED_RESULTS, services.store)]
    except BotError as exc:
        log.warning("event=entity_details_related_failed %s error=%s", where, type(exc).__name__)
        return []


def _error(client: Any, trigger: str, status: str, where: str) -> str:
    """entity.presentDetails with an error status Slack documents ("not_found", "internal_error")."""
    try:
        client.entity_presentDetails(trigger_id=trigger, error={"status": status})
    except SlackApiError as exc:
        log.warning("event=entity_details_failed stage=slack %s error=%s", where, error_code(exc)[0][:60])
        return "failed"
    except TRANSPORT_ERRORS as exc:
        log.warning("event=entity_details_failed stage=slack %s error=%s", where, type(exc).__name__)
        return "failed"
    return status


def _text(value: object, limit: int) -> str:
    return value[:limit] if isinstance(value, str) else ""
