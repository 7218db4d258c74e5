"""Links to machinelearning.apple.com shared in Slack, unfurled from the archive (`link_shared` ->
`chat.unfurl`).

    links = apple_links(event)                    # our site's links: canonical, distinct, at most MAX_LINKS
    unfurls, missing = unfurls_for(links, store)  # {url as posted: {"blocks": [...]}} for the archived ones
    client.chat_unfurl(**target(event), unfurls=unfurls)

Only `SITE_HOST` is read: a link to any other host (whatever the event's `domain` says) is left alone, and
so is one that is not a plain http(s) URL. Links are matched by their canonical form (`feed.canonical_link`:
https, lower-case host, no trailing slash, fragment or tracking parameters), as the archive stores them
(`Store.item_by_link`); a link given twice in two spellings is unfurled once. An event lists at most
MAX_LINKS of our links (Slack's own cap is about as small; an event of 20 is looked up 5 times, not 20).

What an unfurl shows: the title (linked), kind · date · authors, the abstract's first sentences (quoted as
written, cut at ABSTRACT_CHARS), and the **Save** and **Related** buttons of every item message (the same
action ids, so the same listeners answer them). All of it is feed text: escaped and `verbatim`, it can never
mention, link or ping.

Two decisions the issue left open:
- A link the archive does not hold is left to Slack's own preview. The research index is one 20 MiB page
  listing every post; reading it for each unknown link would let anyone who pastes links make the bot
  download it again and again, and the archive already holds every post once `backfill` has run (the poller
  adds new ones every POLL_INTERVAL, and enriches them from that same index). A post published since the last
  poll is unfurled from the next poll on.
- Block Kit, not Work Objects. A Work Object unfurl needs "Work Object Previews" switched on in the app's
  settings, one of Slack's entity types (file, task, incident, content item), its own action buttons
  (answered through `entity.*` methods, not `block_actions`) and a flexpane answered on
  `entity_details_requested`; Block Kit unfurls work in every workspace and client, and reuse our blocks and
  the Save / Related listeners as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from bot import views
from bot.blocks import cut, escape, item_actions, snippet
from bot.feed import canonical_link
from bot.models import Item
from bot.store import Store
from bot.summarize import sentences

SITE_HOST = "machinelearning.apple.com"
MAX_LINKS = 5
ABSTRACT_CHARS = 400
ABSTRACT_SENTENCES = 2
MAX_URL_CHARS = 2000
EVENT_ID_CHARS = 100  # of a message ts, unfurl id, source or channel id passed back to Slack


@dataclass(frozen=True)
class Links:
    """Our site's links in a `link_shared` event, and what was left out."""

    wanted: tuple[tuple[str, str], ...]  # (the URL as posted, its canonical link), in the event's order
    seen: int  # links the event listed
    other_hosts: int  # links to another host, or not a plain web URL
    over_cap: int  # our links beyond MAX_LINKS (distinct ones)


def apple_links(event: dict[str, Any], limit: int = MAX_LINKS) -> Links:
    """The event's links to SITE_HOST, canonical and distinct, at most `limit` of them."""
    raw = event.get("links")
    listed = raw if isinstance(raw, list) else []
    wanted: list[tuple[str, str]] = []
    canon_seen: set[str] = set()
    other = over = 0
    for link in listed:
        url = link.get("url") if isinstance(link, dict) else None
        canonical = _ours(url) if isinstance(url, str) else None
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


def _ours(url: str) -> str | None:
    if len(url) > MAX_URL_CHARS:
        return None
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return None
    if host != SITE_HOST:
        return None
    return canonical_link(url)


def unfurls_for(links: Links, store: Store) -> tuple[dict[str, dict[str, Any]], int]:
    """({URL as posted: its unfurl}, how many of the links the archive does not hold)."""
    found: dict[str, dict[str, Any]] = {}
    missing = 0
    for url, canonical in links.wanted:
        item = store.item_by_link(canonical)
        if item is None:
            missing += 1
            continue
        found[url] = {"blocks": unfurl_blocks(item)}
    return found, missing


def unfurl_blocks(item: Item) -> list[dict[str, Any]]:
    """An item as an unfurl: title link, kind · date · authors, the abstract's first sentences, Save and
    Related (the link itself is the message, so no Read button)."""
    return [*views.item_blocks(item, escape(abstract_start(item.summary))),
            item_actions(item, read=False).to_dict()]


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
