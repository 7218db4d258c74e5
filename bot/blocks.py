"""Block Kit for items, built by pure functions with `slack_sdk.models.blocks` (which checks Slack's limits).

Feed text is untrusted: `escape` turns `&`, `<`, `>` into entities, so a title such as
`<!channel> <@U123> <https://evil.example|click>` arrives inert; every mrkdwn text object is `verbatim`
(`md`), so Slack does not turn a bare `@here` or URL into a mention or a link either (our own `<url|title>`
still links); and `cut` keeps every text within Slack's limits (cutting on a word) rather than letting Slack
reject the message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot.errors import SearchError
from bot.models import AUTHOR_PREFIX, Item, shown_day
from bot.search.authors import typed
from bot.search.match import TOPIC_PREFIX

EVENT_TYPE = "mlresearch_item"
BATCH_EVENT_TYPE = "mlresearch_batch"
FOLLOWUP_EVENT_TYPE = "mlresearch_followup"
VENUE_CHARS = 80
BATCH_TITLE_CHARS = 150
BATCH_LISTED = 100  # titles listed in a burst's message at most; the thread holds every item
MAX_BLOCKS = 50
RELATED_ACTION_ID = "related_item"
SNIPPET_CHARS = 300
SECTION_TEXT_LIMIT = 3000
TITLE_CHARS = 250
FALLBACK_TEXT_LIMIT = 3000
KIND_LABEL = {"research": "Paper", "update": "Update"}
OPEN_ACTION_ID = "open_item"
SAVE_ACTION_ID = "save_item"
CITE_ACTION_ID = "cite_item"
# Cite buttons: an item's ("cite_item"), and a written answer's, one per cited item ("cite_item_2"): action
# ids must differ within one actions block.
CITE_ACTIONS = re.compile(r"^cite_item(?:_[0-9]{1,2})?$")
ACTION_VALUE_LIMIT = 2000
AUTHOR_ACTION_ID = "more_by_author"
AUTHOR_OPTIONS = 100  # Slack: a static select holds at most 100 options
OPTION_TEXT_CHARS = 75  # Slack: an option's text


def escape(text: str) -> str:
    """Escape feed text for mrkdwn: it can never mention, link or ping."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def counted(count: int, noun: str) -> str:
    """"1 item", "3 items": a count and its noun in the number it takes."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, cut on a word with an ellipsis."""
    text = " ".join(text.split()) if "\n" not in text else text
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    space = head.rfind(" ")
    if space > limit // 2:
        head = head[:space]
    return head.rstrip(" ,.;:") + "…"


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    return cut(" ".join(text.split()), limit)


def safe_url(url: str) -> str | None:
    """The link only if it is a plain http(s) URL safe to put inside `<...|...>`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if any(c in url for c in "<>| \n\t"):
        return None
    return url


def title_link(item: Item, limit: int = TITLE_CHARS) -> str:
    title = escape(cut(item.title, limit))
    url = safe_url(item.link)
    return f"<{url}|{title}>" if url else title


def md(text: str) -> MarkdownTextObject:
    """A mrkdwn text object Slack shows as written: no auto-linked URLs, no `@here` / `@channel` mentions."""
    return MarkdownTextObject(text=text, verbatim=True)


def day(item: Item) -> str:
    """The day it was published, YYYY-MM-DD ("date unknown" when it is not known)."""
    return shown_day(item.published)


def links_line(item: Item) -> str:
    """The line under an item's title, as mrkdwn: "<paper|Paper> · <code|Code> · ICML 2025" (what its page
    says, `bot.item_pages`), each part only when known and its link a plain http(s) URL; the venue escaped and
    cut. "" when there is nothing to say."""
    parts = []
    for link, label in ((item.paper_url, "Paper"), (item.code_url, "Code")):
        url = safe_url(link) if link else None
        if url:
            parts.append(f"<{url}|{label}>")
    if item.venue and item.venue.strip():
        parts.append(escape(cut(item.venue, VENUE_CHARS)))
    return " · ".join(parts)


def titled(item: Item, limit: int = TITLE_CHARS) -> str:
    """An item's title in bold as its link, and the line of its paper, code and venue under it when known."""
    line = links_line(item)
    return f"*{title_link(item, limit)}*" + (f"\n{line}" if line else "")


def item_message(item: Item, matched: Sequence[str] = ()) -> dict[str, Any]:
    """The channel post for one new item: `text` (fallback), `blocks`, `metadata`, `unfurl_*`."""
    meta = f"{KIND_LABEL.get(item.kind, 'Paper')} · {day(item)}"
    if item.authors:
        meta += f" · {escape(cut(format_authors(item.authors), 200))}"
    blocks: list[Any] = [
        SectionBlock(text=md(titled(item))),
        ContextBlock(elements=[md(meta)]),
    ]
    if item.summary:
        blocks.append(SectionBlock(text=md(escape(snippet(item.summary)))))
    blocks.append(item_actions(item))
    topics = [k for k in matched if k.startswith(TOPIC_PREFIX)]
    by = [k[len(AUTHOR_PREFIX):] for k in matched if k.startswith(AUTHOR_PREFIX)]
    keywords = [k for k in matched if not k.startswith((TOPIC_PREFIX, AUTHOR_PREFIX))]
    if keywords:
        words = ", ".join(escape(cut(k, 60)) for k in keywords[:10])
        blocks.append(ContextBlock(elements=[md(f"Matched your keywords: {words}")]))
    if by:
        names = ", ".join(escape(cut(name, 60)) for name in by[:5])
        blocks.append(ContextBlock(elements=[md(f"By an author you follow: {names}")]))
    for topic in topics[:3]:
        why = escape(cut(topic[len(TOPIC_PREFIX):], 200))
        blocks.append(ContextBlock(elements=[md(f"Matched your topic by meaning: {why}")]))
    return posted(fallback_text(item), blocks, EVENT_TYPE, {"item_id": item.id})


def item_actions(item: Item, *, read: bool = True) -> ActionsBlock:
    """The item's buttons, in one actions block: Read (the link, when it is a plain http(s) URL, and
    `read`), Save (to the clicker's reading list), Related (the nearest items; not for an item whose link is
    not a plain URL, as Read), Cite (its BibTeX entry, to the clicker)."""
    elements: list[ButtonElement] = []
    url = safe_url(item.link)
    if url and read:
        elements.append(
            ButtonElement(text=PlainTextObject(text="Read"), url=url[:3000], action_id=OPEN_ACTION_ID,
                          value=item.id[:ACTION_VALUE_LIMIT])
        )
    elements.append(save_button(item))
    if url:
        elements.append(related_button(item))
    elements.append(cite_button(item))
    menu = author_menu(item.authors)
    return ActionsBlock(elements=[*elements, *([menu] if menu else [])])


def author_menu(authors: Sequence[str]) -> dict[str, Any] | None:
    """**More by…**: a menu of the authors (each once, at most AUTHOR_OPTIONS); choosing one answers the
    person alone with `search author:"<name>"` (bot.listeners). Slack links no text to a command, so a menu,
    beside Save and Related, is how an author's name leads to their items. Each option is the name tidied
    (`bot.search.authors.typed`: letters, digits and . ' - only, so no name pings, links or breaks a
    command), its value what is searched; a name no search takes (only initials, over 100 characters) is
    left out. None when no name is left."""
    names: dict[tuple[str, ...], str] = {}
    for author in authors:
        if len(names) >= AUTHOR_OPTIONS:
            break
        try:
            name = typed(author)
        except SearchError:
            continue
        names.setdefault(name.words, name.name)
    if not names:
        return None
    return {
        "action_id": AUTHOR_ACTION_ID,
        "options": [{"text": {"emoji": False, "text": cut(name, OPTION_TEXT_CHARS), "type": "plain_text"},
                     "value": name} for name in names.values()],
        "placeholder": {"emoji": False, "text": "More by…", "type": "plain_text"},
        "type": "static_select",
    }


def cite_button(item: Item) -> ButtonElement:
    """**Cite**: its click answers (ephemerally) with the item's BibTeX entry and the same in plain text."""
    return ButtonElement(text=PlainTextObject(text="Cite"), action_id=CITE_ACTION_ID,
                         value=item.id[:ACTION_VALUE_LIMIT])


def save_button(item: Item) -> ButtonElement:
    """Save: puts the item on the reading list of whoever clicks it (`value` is the item's id)."""
    return ButtonElement(text=PlainTextObject(text="Save"), action_id=SAVE_ACTION_ID,
                         value=item.id[:ACTION_VALUE_LIMIT])


def follow_message(item: Item, matched: Sequence[str]) -> dict[str, Any]:
    """A follow's direct message for one new item: the item's message (buttons and metadata included),
    with why it came: the followed keywords that matched."""
    message = item_message(item)
    words = ", ".join(f"`{escape(cut(k, 60))}`" for k in matched[:10]) or "your follows"
    why = ContextBlock(elements=[md(f"You follow {words} · `/mlresearch follows` to see or change them")])
    message["blocks"].append(why.to_dict())
    message["text"] = cut(f"New for you ({', '.join(escape(cut(k, 60)) for k in matched[:3])}): "
                          f"{message['text']}", FALLBACK_TEXT_LIMIT)
    return message


def related_button(item: Item) -> ButtonElement:
    """The **Related** button: its click answers (ephemerally) with the items nearest to this one."""
    return ButtonElement(text=PlainTextObject(text="Related"), action_id=RELATED_ACTION_ID,
                         value=item.id[:2000])


def posted(text: str, blocks: Sequence[Any], event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    """chat.postMessage's arguments for what the bot posts (an item, a follow-up, a burst, a digest): feed
    text is never unfurled, and neither the blocks nor the notification `text` are parsed for mentions or
    links; the metadata names what the message is, so a crash's reconcile can find it."""
    return {
        "text": text,
        "blocks": [b.to_dict() for b in blocks],
        "unfurl_links": False,
        "unfurl_media": False,
        "parse": "none",
        "metadata": {"event_type": event_type, "event_payload": payload},
    }


def fallback_text(item: Item) -> str:
    """The plain `text` of a post: title and link, escaped."""
    url = safe_url(item.link) or ""
    return cut(f"{escape(cut(item.title, TITLE_CHARS))} {url}".strip(), FALLBACK_TEXT_LIMIT)


def item_text(item: Item) -> dict[str, Any]:
    """The same post without blocks (used once when Slack rejects the blocks)."""
    message = item_message(item)
    message.pop("blocks")
    return message


def followup_message(item: Item, kind: str) -> dict[str, Any] | None:
    """A follow-up reply in the thread of an item's post (`Delivery.followup`): "Code released: <link>" or
    "Published at ICML 2025", with the item's title under it (a burst's thread holds several items); None when
    the item no longer says it. Its metadata (`followup_id`) is how a crash's post is found again."""
    if kind == "code" and item.code_url and (url := safe_url(item.code_url)):
        said, plain = f"Code released: <{url}|{escape(url.split('://', 1)[1])}>", f"Code released: {url}"
    elif kind == "venue" and item.venue and item.venue.strip():
        venue = escape(cut(item.venue, VENUE_CHARS))
        said = plain = f"Published at {venue}"
    else:
        return None
    blocks = [SectionBlock(text=md(said)), ContextBlock(elements=[md(title_link(item, 150))])]
    text = cut(f"{plain} ({escape(cut(item.title, 150))})", FALLBACK_TEXT_LIMIT)
    return posted(text, blocks, FOLLOWUP_EVENT_TYPE,
                  {"item_id": item.id, "followup": kind, "followup_id": followup_id(item.id, kind)})


def followup_id(item_id: str, kind: str) -> str:
    """The key of one follow-up in its message's metadata: its kind and the item's id."""
    return f"{kind}:{item_id}"


def batch_message(batch_id: str, count: int, items: Sequence[Item]) -> dict[str, Any]:
    """A burst's top-level message: how many items, from when, their titles as links (papers and updates
    apart); the items themselves go in its thread. `count` is the burst's size (the metadata says it too)."""
    papers = [i for i in items if i.kind != "update"]
    updates = [i for i in items if i.kind == "update"]
    days = sorted({day(i) for i in items})
    when = "" if not days else f", published {days[0]}" if len(days) == 1 else \
        f", published {days[0]} to {days[-1]}"
    parts = [f"{len(kind)} {noun if len(kind) == 1 else noun + 's'}"
             for kind, noun in ((papers, "paper"), (updates, "update")) if kind]
    summary = f"{count} new items ({', '.join(parts)}){when}" if parts else f"{count} new items{when}"
    blocks: list[Any] = [SectionBlock(text=md(f"*{summary}*"))]
    listed = 0
    for heading, group in (("Papers", papers), ("Updates", updates)):
        shown = group[: max(0, BATCH_LISTED - listed)]
        listed += len(shown)
        if not shown:
            continue
        text = f"*{heading}*"
        for item in shown:
            line = f"• {title_link(item, BATCH_TITLE_CHARS)}"
            if len(text) + 1 + len(line) > SECTION_TEXT_LIMIT:
                blocks.append(SectionBlock(text=md(text)))
                text = line
            else:
                text = f"{text}\n{line}"
        blocks.append(SectionBlock(text=md(text)))
    more = len(items) - listed
    note = "Each item is in this message's thread." if more <= 0 else \
        f"…and {more} more. Each item is in this message's thread."
    blocks = blocks[: MAX_BLOCKS - 1]
    blocks.append(ContextBlock(elements=[md(note)]))
    text = cut(f"{summary}; each item is in the thread.", FALLBACK_TEXT_LIMIT)
    return posted(text, blocks, BATCH_EVENT_TYPE, {"batch_id": batch_id, "count": count})


_PARTICLES = frozenset(
    {"van", "von", "der", "den", "de", "del", "della", "da", "di", "du", "la", "le", "ter", "bin"}
)


def format_authors(authors: Sequence[str], limit: int = 3) -> str:
    """Authors for a result line, given names as initials: "A. Author, B. Author, C. Author", and with more
    than `limit` of them the first two and "et al." ("A. Author, B. Author et al."). Plain text: escape it
    for mrkdwn."""
    names = [_initials(a) for a in authors if a and a.strip()]
    if len(names) > limit:
        return ", ".join(names[:2]) + " et al."
    return ", ".join(names)


# a group that signs a post ("Siri Speech Recognition Team", "Input & Intelligence — Natural Language
# Processing Team") is a name, not a given name and a surname: kept whole
_GROUP = re.compile(r"\b(team|group|lab|labs)\b", re.IGNORECASE)


def _initials(name: str) -> str:
    name = " ".join(name.split())
    if _GROUP.search(name):
        return name
    if "," in name:  # "Doe, Jane" -> "Jane Doe"
        last, _, given = name.partition(",")
        name = f"{given.strip()} {last.strip()}".strip()
    words = name.split(" ")
    if len(words) < 2:
        return name
    surname_start = len(words) - 1
    while surname_start > 1 and words[surname_start - 1].lower() in _PARTICLES:
        surname_start -= 1
    initials = [_initial(w) for w in words[:surname_start]]
    return " ".join([*initials, *words[surname_start:]])


def _initial(word: str) -> str:
    parts = [p for p in word.split("-") if p]
    letters = [next((c for c in p if c.isalpha()), "") for p in parts]
    initials = "-".join(f"{c.upper()}." for c in letters if c)
    return initials or word
