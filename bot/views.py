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

from bot.blocks import (
    ACTION_VALUE_LIMIT,
    CITE_ACTION_ID,
    KIND_LABEL,
    RELATED_ACTION_ID,
    SAVE_ACTION_ID,
    author_menu,
    corrected,
    counted,
    cut,
    day,
    escape,
    format_authors,
    safe_url,
    snippet,
    title_link,
)
from bot.models import AUTHOR_PREFIX, Item, SearchHit
from bot.search import glossary
from bot.search.highlight import WordMatcher, highlighted_snippet, words
from bot.search.query import without_open_quote
from bot.summarize import Summary

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
        "since:YYYY-MM-DD, until:YYYY-MM-DD, type:paper|update, author:Name",
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
    """User input echoed back: one line, cut, escaped, in curly quotes (a text that is one quoted phrase in
    those quotes alone: “image captioning”, not “"image captioning"”; a quote mark left open is left out)."""
    text = without_open_quote(text)
    if len(text) > 2 and text[0] == text[-1] == '"' and text.count('"') == 2:
        text = text[1:-1]
    return "“" + escape(cut(text, limit)) + "”"


def channel_ref(channel_id: str) -> str:
    return f"<#{channel_id}>" if _CHANNEL_ID.fullmatch(channel_id) else "this channel"


def user_ref(user_id: str) -> str:
    return f"<@{user_id}>" if _USER_ID.fullmatch(user_id) else "someone"


def item_blocks(item: Item, text: str) -> Blocks:
    """An item in a list: its title link, then kind · day, then `text` (already escaped mrkdwn)."""
    body = f"*{title_link(item)}*" + (f"\n{text}" if text else "")
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


def usage_reply(word: str) -> tuple[str, Blocks]:
    names = ", ".join(c[0].split()[0] for c in COMMANDS)
    return one_line(f"I don't know {quoted(word, 30)}. Try `{COMMAND} help`; commands: {names}.")


BY_MEANING = "related by meaning: it does not use your words"
BY_MEANING_SOME = "related by meaning: it holds only some of your words"


def searched_opening(searched_for: str | None, typed: str | None = None) -> tuple[str, Blocks]:
    """A reply's opening when a misspelt word was searched as another: its text ("" when none) and blocks,
    naming the words `typed` too ("Searched for “captioning” (you typed “captoning”)"), so the reply under
    it need not echo them. `commands` opens a command's reply with it; an answer in a thread says it in its
    own header instead."""
    if not searched_for:
        return "", []
    said = f"Searched for {corrected(quoted(searched_for), quoted(typed)) if typed else quoted(searched_for)}"
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
    total = max(total, len(hits))
    blocks: Blocks = []
    if expanded:  # a second "Searched for" would read as if the first were wrong
        also = glossary.also(expanded, lambda said: f"“{said}”")
        blocks.append(context(f"Also searched: {escape(cut(also, 300))}"))
    if note:
        blocks.append(context(escape(note)))
    count = counted(total, "result") + (f" for {quoted(text)}" if text is not None else "")
    blocks.append(context(count + (f" · the best {len(hits)}" if total > len(hits) else "")))
    for hit in hits:
        blocks += item_blocks(hit.item, highlighted_snippet(hit.item.summary, matcher, 300))
        if hit.by_meaning:  # too few of the words to match them: none, or some (in bold in its text)
            some = matcher.among(set(words(f"{hit.item.title} {hit.item.summary}")))
            blocks.append(context(f"_{BY_MEANING_SOME if some else BY_MEANING}_"))
        blocks.append(result_actions(hit.item))
    titles = "; ".join(escape(cut(h.item.title, 100)) + (" (related by meaning)" if h.by_meaning else "")
                       for h in hits)
    return f"{count}: {titles}", blocks


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
        example = f" (e.g. {topics_to_try(topics)})" if topics else ""
        return one_line(f"Nothing in the archive is near {quoted(item.title, 120)} yet: no other item is "
                        f"close enough to it. Try `{COMMAND} search` with words of its topic{example}.")
    blocks: Blocks = [context(f"Related to *{title_link(item, 150)}*")]
    for hit in related:
        shared = f"Shares: {escape(cut(hit.shares, 200))}" if hit.shares else "Near in meaning"
        blocks.append(section(f"*{title_link(hit.item, 150)}* ({day(hit.item)})\n{shared}"))
    titles = "; ".join(escape(cut(h.item.title, 100)) for h in related)
    return f"Related to {escape(cut(item.title, 100))}: {titles}", blocks


def no_results(text: str | None, missing: Sequence[str] = (), topics: Sequence[str] = (),
               meant: Sequence[tuple[str, str]] = (), unfiltered: tuple[int, str, str] | None = None
               ) -> tuple[str, Blocks]:
    """Nothing earned a place: one line saying so ("for" the query `text`; None when the reply opens with what
    was searched), which words no item holds, which quoted phrase was most likely meant, and what to try:
    the words without their filters when that finds some (`unfiltered`: how many, the words, the filters)."""
    echoed = f" for {quoted(text)}" if text is not None else ""
    if unfiltered is not None:
        return one_line(f"No results{echoed}. {without_filters('search', *unfiltered)}")
    absent = f" No item holds {', '.join(quoted(w, 40) for w in missing[:3])}." if missing else ""
    absent += "".join(f" No item says {quoted(typed, 60)}: did you mean {quoted(right, 60)}?"
                      for typed, right in meant[:2])
    related = topics_to_try(topics) or "`vision`, `privacy`, `speech`"
    message = (
        f"No results{echoed}.{absent} Try fewer or broader words, or a related topic (e.g. "
        f"{related}), check the spelling, drop a since:, type: or author: filter, or see `{COMMAND} latest`."
    )
    return one_line(message)


def latest_reply(items: Sequence[Item], note: str = "") -> tuple[str, Blocks]:
    if not items:
        return one_line("The archive is empty: nothing has been fetched yet. Try again after the next poll.")
    blocks: Blocks = [context(f"The {counted(len(items), 'newest item')}" + (f" · {note}" if note else ""))]
    for item in items:
        blocks += item_blocks(item, list_snippet(item))
    titles = "; ".join(escape(cut(i.title, 100)) for i in items)
    return f"The {len(items)} newest: {titles}", blocks


def citation(item: Item) -> str:
    return title_link(item, 90) + f" ({day(item)})"


def summary_reply(summary: Summary) -> tuple[str, Blocks]:
    how = (
        "sentences quoted from the abstracts"
        if summary.method == "extractive"
        else f"written by {escape(cut(summary.model or 'a language model', 60))} from these items only"
    )
    blocks: Blocks = [context(escape(summary.note))] if summary.note else []
    about = quoted(summary.about) + (f" ({escape(cut(summary.filters, 100))})" if summary.filters else "")
    blocks.append(section(f"*What Apple ML Research says about {about}*"))
    for bullet in summary.bullets:
        sources = "; ".join(citation(summary.items[n - 1]) for n in bullet.sources)
        blocks.append(section(f"• {escape(bullet.text)}\n      ↳ {sources}"))
    blocks.append(context(f"{counted(len(summary.items), 'item')}, {summary.span} · {how}"))
    text = f"What Apple ML Research says about {about}: " + " ".join(
        escape(b.text) for b in summary.bullets
    )
    return cut(text, 3000), blocks


def topics_to_try(topics: Sequence[str]) -> str:
    """Suggested topics (`SearchIndex.suggest`), at most two, as code: "`automatic speech recognition`"."""
    return ", ".join(f"`{escape(cut(t, 60))}`" for t in topics[:2])


def no_filtered(text: str, newest: Item | None) -> tuple[str, Blocks]:
    """A search of filters alone (since:, until:, type:, author:) that no item matches: one line saying so,
    and, for dates, when the newest item was published (`newest`; not the words, spelling and topics a
    search of words is told to try)."""
    then = f" The newest item is from {day(newest)}: `{COMMAND} latest` lists the newest." if newest else ""
    return one_line(f"No results for {quoted(text)}: no item matches the filter; widen or drop it.{then}")


def without_filters(verb: str, count: int, words: str, filters: str) -> str:
    """What the words alone find when the filters left nothing, and the command to run: "Without
    since:2024-01-01 there are 2 results: `/mlresearch search federated learning`." """
    return (f"Without {escape(cut(filters, 100))} there {'is' if count == 1 else 'are'} "
            f"{counted(count, 'result')}: `{COMMAND} {verb} {escape(cut(words, 200))}`.")


def no_summary(topic: str, topics: Sequence[str] = (), unfiltered: tuple[int, str, str] | None = None
               ) -> tuple[str, Blocks]:
    """Nothing to summarize: one line saying so, and what to try (`topics`: related ones items hold; or,
    `unfiltered`, what the words find without the filters, as `no_results` says it)."""
    if unfiltered is not None:
        alone = without_filters("summarize", *unfiltered)
        return one_line(f"Nothing in the archive is about {quoted(topic)}. {alone}")
    related = topics_to_try(topics)
    also = f" or a related topic (e.g. {related})" if related else ""
    return one_line(
        f"Nothing in the archive is about {quoted(topic)}, so there is nothing to summarize. "
        f"Try broader words{also}, or `{COMMAND} search` to see what is there."
    )


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
