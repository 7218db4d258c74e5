"""Pure Block Kit builders for `/mlresearch` replies (the App Home and the follow / reading-list replies are
`bot.home`'s, the status reply `bot.status`'s), and the blocks they are made of.

Every builder returns Block Kit as plain dicts, exactly as `slack_sdk.models.blocks` would serialize them;
every text is `cut` to Slack's limit for its field before it gets there (the models' checks would only
repeat that, on every reply). Feed text, model text and user input are escaped (`blocks.escape`,
`highlight.inert`) before reaching mrkdwn, and every mrkdwn text object is `verbatim`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from bot import voice
from bot.blocks import (
    ACTION_VALUE_LIMIT,
    CITE_ACTION_ID,
    FALLBACK_TEXT_LIMIT,
    KIND_LABEL,
    RELATED_ACTION_ID,
    SAVE_ACTION_ID,
    author_menu,
    counted,
    cut,
    day,
    escape,
    format_authors,
    safe_url,
    snippet,
    title_link,
    titled,
)
from bot.models import AUTHOR_PREFIX, Item, SearchHit
from bot.search.highlight import WordMatcher, highlighted_snippet, words
from bot.summarize import Summary
from bot.voice import SLACK

COMMAND = "/mlresearch"
LIST_SNIPPET_CHARS = 200
SHARE_ACTION_ID = "share_reply"
SHARE_VALUE_LIMIT = 2000
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,30}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,30}")
SITE = "<https://machinelearning.apple.com|machinelearning.apple.com>"  # verbatim text links only explicitly

Blocks = list[dict[str, Any]]

COMMANDS: tuple[tuple[str, str, str], ...] = (  # (usage, what it does, an example)
    (
        "search <terms>",
        'search the archive ("a phrase", -word to leave it out, or a post\'s link); filter with '
        "since:YYYY-MM-DD, until:YYYY-MM-DD, type:paper|update, author:Name, venue:icml, has:code",
        "search image captioning since:2026-01-01",
    ),
    ("summarize <topic>", "what Apple's research says about a topic, with sources", "summarize diffusion"),
    ("latest [n]", "the n newest items (default 5, at most 20)", "latest 10"),
    ("related <link or title words>", "up to five items close to one in the archive", "related hey siri"),
    ("cite <link or title words>", "an item's BibTeX entry, and the same reference in plain text",
     "cite hey siri"),
    (
        "subscribe [keywords…] [about:\"topic\"] [author:\"name\"] [digest:daily|weekly] [at:HH:MM]",
        "post new items in this channel: all of them, or those matching a keyword, (by meaning) an about: "
        "topic or an author; digest: one message a day (or each Monday) at 09:00 your time, or at:",
        'subscribe privacy "speech recognition"',
    ),
    ("unsubscribe", "stop posting new items in this channel", "unsubscribe"),
    (
        "follow <keywords…> [author:\"name\"]",
        "get a direct message when a new item matches one of your keywords, or is by an author you follow",
        'follow privacy author:"Awni Hannun"',
    ),
    ("unfollow [keywords…]", "stop following those keywords (none: all of them)", "unfollow privacy"),
    ("follows", "the keywords you follow", "follows"),
    ("status", "feed health and this channel's subscription", "status"),
    ("trending", "what this workspace saved, 👍'd and opened most in 30 days, and Apple's topics this month",
     "trending"),
    ("help", "this message", "help"),
)


def _text(kind: str, text: str) -> dict[str, Any]:
    # As slack_sdk serializes a text object: keys sorted, an empty text left out. Every mrkdwn object is
    # verbatim (as `blocks.md`): Slack shows it as written, never turning a bare `@here` or URL into a mention
    # or a link; our own `<url|title>`, `<#C…>` and `<@U…>` still work.
    obj: dict[str, Any] = {"text": text, "type": kind} if text else {"type": kind}
    if kind == "mrkdwn":
        obj["verbatim"] = True
    return obj


def section(text: str) -> dict[str, Any]:
    return {"text": _text("mrkdwn", cut(text, 3000)), "type": "section"}


def context(text: str) -> dict[str, Any]:
    return {"elements": [_text("mrkdwn", cut(text, 2000))], "type": "context"}


def header(text: str) -> dict[str, Any]:
    return {"text": _text("plain_text", cut(text, 150)), "type": "header"}


def divider() -> dict[str, Any]:
    return {"type": "divider"}


def share_button(value: str) -> dict[str, Any]:
    button: dict[str, Any] = {"action_id": SHARE_ACTION_ID, "text": _text("plain_text", "Share in channel"),
                              "type": "button"}
    if value:
        button["value"] = value[:SHARE_VALUE_LIMIT]
    return {"elements": [button], "type": "actions"}


def quoted(text: str, limit: int = 80) -> str:
    """User input echoed back: one line, cut, escaped, in curly quotes (`voice.Surface.quote`)."""
    return SLACK.quote(text, limit)


def channel_ref(channel_id: str) -> str:
    return f"<#{channel_id}>" if _CHANNEL_ID.fullmatch(channel_id) else "this channel"


def user_ref(user_id: str) -> str:
    return f"<@{user_id}>" if _USER_ID.fullmatch(user_id) else "someone"


def item_blocks(item: Item, text: str) -> Blocks:
    """An item in a list: its title link, the line of its paper, code and venue when known, then `text`
    (already escaped mrkdwn); then kind · day · authors."""
    body = titled(item) + (f"\n{text}" if text else "")
    meta = f"{KIND_LABEL.get(item.kind, 'Paper')} · {day(item)}"
    if item.authors:
        meta += f" · {escape(cut(format_authors(item.authors), 200))}"
    return [section(body), context(meta)]


def list_snippet(item: Item) -> str:
    return escape(snippet(item.summary, LIST_SNIPPET_CHARS)) if item.summary else ""


def one_line(message: str) -> tuple[str, Blocks]:
    """A short answer; `message` is mrkdwn the caller has already escaped."""
    return message, [section(message)]


# --- replies ---------------------------------------------------------------------------------------------


HELP_INTRO = (
    "*Apple Machine Learning Research, in Slack.* I keep an archive of every paper and update Apple "
    f"publishes at {SITE}, post new ones in the channels that subscribe, and search and summarize the "
    "archive for you. Replies are only visible to you unless you share them."
)


def help_reply(intro: str = HELP_INTRO) -> tuple[str, Blocks]:
    """Every command with an example, under `intro` (Slack's; the shell has its own)."""
    lines = [
        f"• `{COMMAND} {escape(use)}`: {what}\n      e.g. `{COMMAND} {ex}`"
        for use, what, ex in COMMANDS
    ]
    blocks = [section(intro), section("\n".join(lines))]
    return "How to use /mlresearch: " + ", ".join(escape(c[0]) for c in COMMANDS), blocks


def trending_reply(lines: Sequence[str]) -> tuple[str, Blocks]:
    """What the team is reading (`bot.trending.lines`: mrkdwn, titles escaped), to the person who asked."""
    note = "Counts from this workspace over the last 30 days; no one is named."
    return (cut("What the team is reading: " + " ".join(lines), FALLBACK_TEXT_LIMIT),
            [header("What the team is reading"), section("\n".join(lines)), context(note)])


def usage_reply(word: str) -> tuple[str, Blocks]:
    names = ", ".join(c[0].split()[0] for c in COMMANDS)
    return one_line(f"I don't know {quoted(word, 30)}. Try `{COMMAND} help`; commands: {names}.")


def searched_opening(searched_for: str | None, typed: str | None = None) -> tuple[str, Blocks]:
    """A reply's opening when a misspelt word was searched as another: its text ("" when none) and blocks,
    naming the words `typed` too (`voice.searched`), so the reply under it need not echo them. `commands`
    opens a command's reply with it; an answer in a thread says it in its own header instead."""
    if not searched_for:
        return "", []
    said = voice.searched(SLACK, searched_for, typed)
    return f"{said}. ", [context(said)]


def search_reply(
    text: str | None, hits: Sequence[SearchHit], matcher: WordMatcher, total: int,
    expanded: str | None = None, note: str | None = None,
) -> tuple[str, Blocks]:
    """The results that earned a place (bot.search.hybrid): how many there are ("for" the query `text`; None
    when the reply opens with what was searched, `searched_opening`), the best of them, each one found by
    meaning alone marked as such."""
    if not hits:
        return no_results(text)
    blocks: Blocks = []
    also = voice.also_searched(SLACK, expanded)  # not a second "Searched for": it would read as a correction
    if also:
        blocks.append(context(also))
    if note:
        blocks.append(context(escape(note)))
    count = voice.results(SLACK, total, len(hits), text)
    blocks.append(context(count))
    for hit in hits:
        blocks += item_blocks(hit.item, highlighted_snippet(hit.item.summary, matcher, 300))
        if hit.by_meaning:  # too few of the words to match them: none, or some (in bold in its text)
            blocks.append(context(f"_{voice.by_meaning(holds_some(hit.item, matcher))}_"))
        blocks.append(result_actions(hit.item))
    titles = "; ".join(escape(cut(h.item.title, 100)) + (" (related by meaning)" if h.by_meaning else "")
                       for h in hits)
    everything = max(total, len(hits))  # the fallback text names how many, not how many are shown
    return f"{voice.results(SLACK, everything, everything, text)}: {titles}", blocks


def holds_some(item: Item, matcher: WordMatcher) -> bool:
    """Whether an item listed for its meaning holds some of the words searched (in bold in its text)."""
    return bool(matcher.among(set(words(f"{item.title} {item.summary}"))))


def result_actions(item: Item) -> dict[str, Any]:
    """A search result's buttons, Save, Related and Cite, and its authors' **More by…** menu:
    `blocks.item_actions(item, read=False).to_dict()`, built as plain JSON. Every search reply holds five;
    building them through slack_sdk's models (with their validation) took a fifth of a served search
    command's time (cProfile, 300 commands)."""
    value = item.id[:ACTION_VALUE_LIMIT]
    buttons = [button("Save", SAVE_ACTION_ID, value)]
    if safe_url(item.link):
        buttons.append(button("Related", RELATED_ACTION_ID, value))
    buttons.append(button("Cite", CITE_ACTION_ID, value))
    menu = author_menu(item.authors)
    return {"elements": [*buttons, *([menu] if menu else [])], "type": "actions"}


def button(label: str, action_id: str, value: str) -> dict[str, Any]:
    """A button carrying `value`, as slack_sdk's `ButtonElement` serializes it."""
    return {"action_id": action_id, "text": {"text": label, "type": "plain_text"}, "type": "button",
            "value": value}


def related_reply(item: Item, related: Sequence[Any], topics: Sequence[str] = ()) -> tuple[str, Blocks]:
    """The items close to `item` (bot.search.related.Related), one line each on what they share; none is one
    line and what to try (`topics`: of the glossary, named in its title, `related.topics_of`)."""
    if not related:
        return one_line(voice.nothing_near(SLACK, item.title, topics))
    blocks: Blocks = [context(voice.related_to(f"*{title_link(item, 150)}*"))]
    for hit in related:
        shared = voice.shares(hit.shares, SLACK)
        blocks.append(section(f"*{title_link(hit.item, 150)}* ({day(hit.item)})\n{shared}"))
    titles = "; ".join(escape(cut(h.item.title, 100)) for h in related)
    return f"{voice.related_to(escape(cut(item.title, 100)))}: {titles}", blocks


def no_results(text: str | None, missing: Sequence[str] = (), topics: Sequence[str] = (),
               meant: Sequence[tuple[str, str]] = (), unfiltered: tuple[int, str, str] | None = None,
               filtered: bool = False) -> tuple[str, Blocks]:
    """Nothing earned a place: one line (`voice.no_results`)."""
    return one_line(voice.no_results(SLACK, text, missing, topics, meant, unfiltered, filtered))


def latest_reply(items: Sequence[Item], note: str = "") -> tuple[str, Blocks]:
    if not items:
        return one_line("The archive is empty: nothing has been fetched yet. Try again after the next poll.")
    head = "The newest item" if len(items) == 1 else f"The {counted(len(items), 'newest item')}"
    blocks: Blocks = [context(head + (f" · {note}" if note else ""))]
    for item in items:
        blocks += item_blocks(item, list_snippet(item))
    titles = "; ".join(escape(cut(i.title, 100)) for i in items)
    return ("The newest: " if len(items) == 1 else f"The {len(items)} newest: ") + titles, blocks


def citation(item: Item) -> str:
    return title_link(item, 90) + f" ({day(item)})"


def summary_reply(summary: Summary) -> tuple[str, Blocks]:
    how = (
        "sentences quoted from the abstracts"
        if summary.method == "extractive"
        else f"written by {escape(cut(summary.model or 'a language model', 60))} from these items only"
    )
    blocks: Blocks = [context(escape(summary.note))] if summary.note else []
    about = voice.summary_about(SLACK, summary.about, summary.filters)
    blocks.append(section(f"*{about}*"))
    for bullet in summary.bullets:
        sources = "; ".join(citation(summary.items[n - 1]) for n in bullet.sources)
        blocks.append(section(f"• {escape(bullet.text)}\n      ↳ {sources}"))
    blocks.append(context(f"{counted(len(summary.items), 'item')}, {summary.span} · {how}"))
    text = f"{about}: " + " ".join(
        escape(b.text) for b in summary.bullets
    )
    return cut(text, 3000), blocks


def no_filtered(text: str, newest: Item | None) -> tuple[str, Blocks]:
    """A search of filters alone that no item matches: one line (`voice.no_filtered`), naming when the newest
    item was published (`newest`), not the words, spelling and topics a search of words is told to try."""
    return one_line(voice.no_filtered(SLACK, text, day(newest) if newest else None))


def no_summary(topic: str, topics: Sequence[str] = (), unfiltered: tuple[int, str, str] | None = None
               ) -> tuple[str, Blocks]:
    """Nothing to summarize: one line (`voice.no_summary`)."""
    return one_line(voice.no_summary(SLACK, topic, topics, unfiltered))


def keywords_text(keywords: Sequence[str], counts: Mapping[str, int] | None = None) -> str:
    if not keywords:
        return "every new item (no keyword filter)"
    return "only new items matching " + ", ".join(keyword_label(k, counts) for k in keywords)


def keyword_label(keyword: str, counts: Mapping[str, int] | None = None) -> str:
    """A stored keyword as a reply names it (mrkdwn, escaped): `speech`, `about:privacy` (by meaning), or
    author: Awni Hannun (4 items so far) (`counts`: the items each author: keyword matches)."""
    if keyword.startswith(AUTHOR_PREFIX):
        name = escape(keyword[len(AUTHOR_PREFIX):])
        if counts is None or keyword not in counts:
            return f"author: {name}"
        return f"author: {name} ({counted(counts[keyword], 'item')} so far)"
    return f"`{escape(keyword)}` (by meaning)" if keyword.startswith("about:") else f"`{escape(keyword)}`"
