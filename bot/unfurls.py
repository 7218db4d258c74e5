"""Links to machinelearning.apple.com shared in Slack, unfurled from the archive (`link_shared` ->
`chat.unfurl`).

    links = apple_links(event)                      # our site's links: canonical, distinct, at most MAX_LINKS
    found = unfurls_for(links, store)               # the archived ones: Block Kit unfurls and paper cards
    send(client, target(event), found)              # chat.unfurl with `unfurls` and `metadata` (entities)

Only `SITE_HOST` is read: a link to any other host (whatever the event's `domain` says) is left alone, and
so is one that is not a plain http(s) URL. Links are matched by their canonical form (`feed.canonical_link`:
https, lower-case host, no trailing slash, fragment or tracking parameters), as the archive stores them
(`Store.item_by_link`); a link given twice in two spellings is unfurled once. An event lists at most
MAX_LINKS of our links (Slack's own cap is about as small; an event of 20 is looked up 5 times, not 20).

What an unfurl shows, in two forms sent together in one chat.unfurl:
- a Work Object (`metadata.entities`, `bot.entities.paper`): a paper card (title, Paper/Update, authors,
  date, the abstract's start) whose click opens the flexpane (`bot.flexpane`), where the workspace has Work
  Object Previews switched on for the app;
- the Block Kit unfurl (`unfurls`), everywhere else: the title (linked), kind · date · authors, the
  abstract's first sentences (quoted as written, cut at ABSTRACT_CHARS), and the **Save**, **Related** and
  **Cite** buttons of every item message (the same action ids, so the same listeners answer them; the card's
  actions carry them too). All of it is feed text: escaped and `verbatim`, it can never mention, link or ping.
Slack documents chat.unfurl's `metadata` as optional beside `unfurls` ("either unfurls or metadata must be
provided"); a call Slack refuses for its metadata is sent once more with `unfurls` alone (`send`).

A link the archive does not hold is left to Slack's own preview. The research index is one 20 MiB page
listing every post; reading it for each unknown link would let anyone who pastes links make the bot download
it again and again, and the archive already holds every post once `backfill` has run (the poller adds new
ones every POLL_INTERVAL, and enriches them from that same index). A post published since the last poll is
unfurled from the next poll on.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from msgspec import Struct
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import views
from bot.blocks import escape, item_actions
from bot.entities import ABSTRACT_CHARS, abstract_start, unfurl_metadata
from bot.feed import canonical_link
from bot.models import Item
from bot.slackweb import METADATA_ERRORS, error_code
from bot.store import Store

SITE_HOST = "machinelearning.apple.com"
MAX_LINKS = 5
MAX_URL_CHARS = 2000
EVENT_ID_CHARS = 100  # of a message ts, unfurl id, source or channel id passed back to Slack


class Links(Struct, frozen=True):
    """Our site's links in a `link_shared` event, and what was left out."""

    wanted: tuple[tuple[str, str], ...]  # (the URL as posted, its canonical link), in the event's order
    seen: int  # links the event listed
    other_hosts: int  # links to another host, or not a plain web URL
    over_cap: int  # our links beyond MAX_LINKS (distinct ones)


class Found(Struct, frozen=True):
    """What the archive holds of an event's links, ready for chat.unfurl."""

    unfurls: dict[str, dict[str, Any]]  # {URL as posted: {"blocks": [...]}}
    metadata: dict[str, Any] | None  # {"entities": [a paper card per URL]}, or None
    missing: int  # links the archive does not hold


def apple_links(event: dict[str, Any], limit: int = MAX_LINKS) -> Links:
    """The event's links to SITE_HOST, canonical and distinct, at most `limit` of them."""
    raw = event.get("links")
    listed = raw if isinstance(raw, list) else []
    wanted: list[tuple[str, str]] = []
    canon_seen: set[str] = set()
    other = over = 0
    for link in listed:
        url = link.get("url") if isinstance(link, dict) else None
        canonical = our_link(url) if isinstance(url, str) else None
        if canonical is None:
            other += 1
            continue
        if canonical in canon_seen:
            continue
        canon_seen.add(canonical)
        if len(wanted) >= limit:
            over += 1
            continue
        wanted.append((str(url), canonical))
    return Links(tuple(wanted), len(listed), other, over)


def our_link(url: str) -> str | None:
    """The canonical form of a link to SITE_HOST, or None (another host, not a plain web URL, too long)."""
    if len(url) > MAX_URL_CHARS:
        return None
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return None
    if host != SITE_HOST:
        return None
    return canonical_link(url)


def unfurls_for(links: Links, store: Store) -> Found:
    """The unfurls (Block Kit, and a paper card each) of the links the archive holds."""
    found: dict[str, dict[str, Any]] = {}
    held: list[tuple[str, Item]] = []
    missing = 0
    for url, canonical in links.wanted:
        item = store.item_by_link(canonical)
        if item is None:
            missing += 1
            continue
        found[url] = {"blocks": unfurl_blocks(item)}
        held.append((url, item))
    return Found(found, unfurl_metadata(held), missing)


def send(client: WebClient, into: dict[str, Any], found: Found) -> None:
    """chat.unfurl with both forms; refused for its metadata (METADATA_ERRORS), once more with the Block Kit
    unfurls alone. Raises SlackApiError (or a transport error) as chat.unfurl does."""
    try:
        client.chat_unfurl(**into, unfurls=found.unfurls, metadata=found.metadata)
    except SlackApiError as exc:
        if found.metadata is None or error_code(exc)[0] not in METADATA_ERRORS:
            raise
        client.chat_unfurl(**into, unfurls=found.unfurls)


def unfurl_blocks(item: Item) -> list[dict[str, Any]]:
    """An item as an unfurl: title link, kind · date · authors, the abstract's first sentences, Save,
    Related and Cite (the link itself is the message, so no Read button)."""
    return [*views.item_blocks(item, escape(abstract_start(item.summary, ABSTRACT_CHARS))),
            item_actions(item, read=False).to_dict()]


def target(event: dict[str, Any]) -> dict[str, Any] | None:
    """Where `chat.unfurl` puts the unfurls: the event's `unfurl_id` and `source` (a message, or a message
    being written), else its channel and message ts; None when it names neither."""
    unfurl_id, source = event.get("unfurl_id"), event.get("source")
    if isinstance(unfurl_id, str) and unfurl_id and isinstance(source, str) and source:
        return {"unfurl_id": unfurl_id[:EVENT_ID_CHARS], "source": source[:EVENT_ID_CHARS]}
    channel, ts = event.get("channel"), event.get("message_ts")
    if isinstance(channel, str) and channel and isinstance(ts, str) and ts:
        return {"channel": channel[:EVENT_ID_CHARS], "ts": ts[:EVENT_ID_CHARS]}
    return None
