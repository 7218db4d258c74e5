"""Pure Block Kit builders for `/mlresearch` replies and the App Home.

Every builder returns Block Kit as plain dicts, exactly as `slack_sdk.models.blocks` would serialize them;
every text is `cut` to Slack's limit for its field before it gets there (the models' checks would only
repeat that, on every reply). Feed text, model text and user input are escaped (`blocks.escape`,
`highlight.inert`) before reaching mrkdwn, and every mrkdwn text object is `verbatim`.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from bot.blocks import (
    ACTION_VALUE_LIMIT,
    KIND_LABEL,
    RELATED_ACTION_ID,
    SAVE_ACTION_ID,
    cut,
    day,
    escape,
    format_authors,
    safe_url,
    snippet,
    title_link,
)
from bot.models import FeedState, Item, SearchHit, Subscription
from bot.search.highlight import WordMatcher, highlighted_snippet
from bot.store import utcnow
from bot.summarize import Summary

COMMAND = "/mlresearch"
LIST_SNIPPET_CHARS = 200
SHARE_ACTION_ID = "share_reply"
SHARE_VALUE_LIMIT = 2000
REMOVE_ACTION_ID = "unsave_item"
HOME_BLOCKS = 100  # Slack's limit for a view
HOME_SAVED = 50  # reading-list items the App Home shows at most
_CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{1,30}")
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,30}")
_FORMATTING = re.compile(r"[*`]")
SITE = "<https://machinelearning.apple.com|machinelearning.apple.com>"  # verbatim text links only explicitly

Blocks = list[dict[str, Any]]

COMMANDS: tuple[tuple[str, str, str], ...] = (  # (usage, what it does, an example)
    (
        "search <terms>",
        "search the archive; filter with since:YYYY-MM-DD, until:YYYY-MM-DD, type:paper|update, author:Name",
        "search image captioning since:2026-01-01",
    ),
    ("summarize <topic>", "what Apple's research says about a topic, with sources", "summarize diffusion"),
    ("latest [n]", "the n newest items (default 5, at most 20)", "latest 10"),
    ("related <link or title words>", "the five items nearest to one in the archive", "related hey siri"),
    (
        "subscribe [keywords…] [about:\"topic\"] [digest:daily|weekly] [at:HH:MM]",
        "post new items in this channel: all of them, or those matching a keyword or (by meaning) an about: "
        "topic; digest: one message a day (or each Monday) at 09:00 your time, or at:",
        'subscribe privacy "speech recognition"',
    ),
    ("unsubscribe", "stop posting new items in this channel", "unsubscribe"),
    (
        "follow <keywords…>",
        "get a direct message when a new item matches one of your keywords",
        'follow privacy "speech recognition"',
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
    """User input echoed back: one line, cut, escaped."""
    return "“" + escape(cut(" ".join(text.split()), limit)) + "”"


def channel_ref(channel_id: str) -> str:
    return f"<#{channel_id}>" if _CHANNEL_ID.fullmatch(channel_id) else "this channel"


def user_ref(user_id: str) -> str:
    return f"<@{user_id}>" if _USER_ID.fullmatch(user_id) else "someone"


def when(moment: datetime | None, now: datetime | None = None) -> str:
    if moment is None:
        return "never"
    seconds = int(((now or utcnow()) - moment).total_seconds())
    if seconds < 90:
        ago = "just now"
    elif seconds < 5400:
        ago = f"{round(seconds / 60)} min ago"
    elif seconds < 172800:
        ago = f"{round(seconds / 3600)} h ago"
    else:
        ago = f"{seconds // 86400} days ago"
    return f"{moment:%Y-%m-%d %H:%M} UTC ({ago})"


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


def help_reply() -> tuple[str, Blocks]:
    lines = [
        f"• `{COMMAND} {escape(use)}`: {what}\n      e.g. `{COMMAND} {ex}`"
        for use, what, ex in COMMANDS
    ]
    blocks = [
        section(
            "*Apple Machine Learning Research, in Slack.* I keep an archive of every paper and update Apple "
            f"publishes at {SITE}, post new ones in the channels that subscribe, and "
            "search and summarize the archive for you. Replies are only visible to you unless you share them."
        ),
        section("\n".join(lines)),
    ]
    return "How to use /mlresearch: " + ", ".join(escape(c[0]) for c in COMMANDS), blocks


def usage_reply(word: str) -> tuple[str, Blocks]:
    names = ", ".join(c[0].split()[0] for c in COMMANDS)
    return one_line(f"I don't know {quoted(word, 30)}. Try `{COMMAND} help`; commands: {names}.")


def search_reply(
    text: str, hits: Sequence[SearchHit], matcher: WordMatcher, more: bool, searched_for: str | None = None,
    expanded: str | None = None, note: str | None = None,
) -> tuple[str, Blocks]:
    if not hits:
        return no_results(text)
    blocks: Blocks = [context(f"Searched for {quoted(searched_for)}")] if searched_for else []
    if expanded:
        blocks.append(context(f"Searched for {escape(cut(expanded, 300))}"))
    if note:
        blocks.append(context(escape(note)))
    blocks.append(context(f"Results for {quoted(text)}" + (f" · the top {len(hits)}" if more else "")))
    for hit in hits:
        blocks += item_blocks(hit.item, highlighted_snippet(hit.item.summary, matcher, 300))
        blocks.append(result_actions(hit.item))
    titles = "; ".join(escape(cut(h.item.title, 100)) for h in hits)
    searched = f"Searched for {quoted(searched_for)}. " if searched_for else ""
    return f"{searched}{len(hits)} result(s) for {quoted(text)}: {titles}", blocks


def result_actions(item: Item) -> dict[str, Any]:
    """A search result's buttons, Save and Related: `blocks.item_actions(item, read=False).to_dict()`, built
    as plain JSON. Every search reply holds five; building them through slack_sdk's models (with their
    validation) took a fifth of a served search command's time (cProfile, 300 commands)."""
    value = item.id[:ACTION_VALUE_LIMIT]
    buttons = [_button("Save", SAVE_ACTION_ID, value)]
    if safe_url(item.link):
        buttons.append(_button("Related", RELATED_ACTION_ID, value))
    return {"elements": buttons, "type": "actions"}


def _button(label: str, action_id: str, value: str) -> dict[str, Any]:
    return {"action_id": action_id, "text": {"text": label, "type": "plain_text"}, "type": "button",
            "value": value}


def related_reply(item: Item, related: Sequence[Any]) -> tuple[str, Blocks]:
    """The items nearest to `item` (bot.search.related.Related), one line each on what they share."""
    if not related:
        return one_line(f"Nothing in the archive is near {quoted(item.title, 120)} yet.")
    blocks: Blocks = [context(f"Related to *{title_link(item, 150)}*")]
    for hit in related:
        shared = f"Shares: {escape(cut(hit.shares, 200))}" if hit.shares else "Near in meaning"
        blocks.append(section(f"*{title_link(hit.item, 150)}* ({day(hit.item)})\n{shared}"))
    titles = "; ".join(escape(cut(h.item.title, 100)) for h in related)
    return f"Related to {escape(cut(item.title, 100))}: {titles}", blocks


def no_results(text: str) -> tuple[str, Blocks]:
    message = (
        f"No results for {quoted(text)}. Try fewer or broader words (e.g. `vision`, `privacy`, `speech`), "
        f"check the spelling, drop a since:, type: or author: filter, or see `{COMMAND} latest`."
    )
    return one_line(message)


def latest_reply(items: Sequence[Item], note: str = "") -> tuple[str, Blocks]:
    if not items:
        return one_line("The archive is empty: nothing has been fetched yet. Try again after the next poll.")
    blocks: Blocks = [context(f"The {len(items)} newest item(s)" + (f" · {note}" if note else ""))]
    for item in items:
        blocks += item_blocks(item, list_snippet(item))
    titles = "; ".join(escape(cut(i.title, 100)) for i in items)
    return f"The {len(items)} newest: {titles}", blocks


def citation(item: Item) -> str:
    return title_link(item, 90) + f" ({day(item)})"


def summary_reply(summary: Summary) -> tuple[str, Blocks]:
    span = f"{summary.first_day:%Y-%m-%d}" if summary.first_day == summary.last_day else (
        f"{summary.first_day:%Y-%m-%d} to {summary.last_day:%Y-%m-%d}"
    )
    how = (
        "sentences quoted from the abstracts"
        if summary.method == "extractive"
        else f"written by {escape(cut(summary.model or 'a language model', 60))} from these items only"
    )
    blocks: Blocks = [section(f"*What Apple ML Research says about {quoted(summary.topic)}*")]
    for bullet in summary.bullets:
        sources = "; ".join(citation(summary.items[n - 1]) for n in bullet.sources)
        blocks.append(section(f"• {escape(bullet.text)}\n      ↳ {sources}"))
    blocks.append(context(f"{len(summary.items)} item(s), {span} · {how}"))
    text = f"What Apple ML Research says about {quoted(summary.topic)}: " + " ".join(
        escape(b.text) for b in summary.bullets
    )
    return cut(text, 3000), blocks


def no_summary(topic: str) -> tuple[str, Blocks]:
    return one_line(
        f"Nothing in the archive is about {quoted(topic)}, so there is nothing to summarize. "
        f"Try broader words, or `{COMMAND} search` to see what is there."
    )


def feed_lines(state: FeedState | None, count: int, newest: Item | None) -> list[str]:
    if state is None:
        lines = ["*Feed:* not polled yet"]
    else:
        health = "OK" if state.ok else ("failing" if state.error_streak else "waiting for a first success")
        lines = [
            f"*Feed:* {health} · last poll {when(state.last_poll)} · last success {when(state.last_success)}",
        ]
        if state.error_streak:
            error = escape(cut(state.last_error or "unknown error", 300))
            streak = state.error_streak
            lines.append(f"*Errors:* {streak} in a row; last: {error} ({when(state.last_error_at)})")
    lines.append(f"*Archive:* {count} item(s)" + (f" · newest: {citation(newest)}" if newest else ""))
    return lines


def subscription_line(
    sub: Subscription | None, channel_id: str, disabled: str | None = None,
    next_digest: datetime | None = None,
) -> str:
    where = channel_ref(channel_id)
    if sub is None:
        return f"*This channel:* not subscribed (`{COMMAND} subscribe` to get new items in {where})"
    what = "every new item" if not sub.keywords else "items matching " + ", ".join(
        f"`{escape(k)}`" for k in sub.keywords
    )
    line = f"*This channel:* subscribed to {what}"
    if sub.digest is not None:
        when_ = f"Mondays at {sub.digest_at}" if sub.digest == "weekly" else f"every day at {sub.digest_at}"
        line += f" · as a {sub.digest} digest, {when_} ({escape(cut(sub.digest_tz, 60))})"
        if next_digest is not None:
            line += f" · next digest: {next_digest:%a} {next_digest.day} {next_digest:%b %Y, %H:%M}"
    if sub.paused:
        line += f" · *paused*: {escape(cut(sub.paused_reason or 'unknown reason', 200))}"
    if disabled:
        line += f" · deliveries to this workspace are stopped: {escape(cut(disabled, 200))}"
    return line


def status_reply(
    state: FeedState | None, count: int, newest: Item | None, sub: Subscription | None, channel_id: str,
    disabled: str | None, summaries: str, next_digest: datetime | None = None,
) -> tuple[str, Blocks]:
    lines = [*feed_lines(state, count, newest), subscription_line(sub, channel_id, disabled, next_digest)]
    lines.append(f"*Summaries:* {summaries}")
    text = "Status: " + " · ".join(_FORMATTING.sub("", line) for line in lines[:2])
    return text, [section("\n".join(lines))]


def keywords_text(keywords: Sequence[str]) -> str:
    if not keywords:
        return "every new item (no keyword filter)"
    return "only new items matching " + ", ".join(
        f"`{escape(k)}` (by meaning)" if k.startswith("about:") else f"`{escape(k)}`" for k in keywords)


# --- follows --------------------------------------------------------------------------------------------


def follows_text(keywords: Sequence[str]) -> str:
    return ", ".join(f"`{escape(k)}` (by meaning)" if k.startswith("about:") else f"`{escape(k)}`"
                     for k in keywords)


def follow_reply(added: Sequence[str], over: Sequence[str], now: Sequence[str]) -> tuple[str, Blocks]:
    if added:
        message = (f"Following {follows_text(added)}: I'll send you a direct message when a new item matches "
                   "(items already archived aren't sent).")
    else:
        message = "You already follow that; nothing was changed."
    if over:
        message += (f" Not added, you follow the most I keep ({len(now)}): {follows_text(over)}; "
                    f"`{COMMAND} unfollow` some first.")
    message += f" You follow: {follows_text(now)}." if now else ""
    return one_line(message)


def unfollow_reply(removed: Sequence[str], asked: Sequence[str], now: Sequence[str]) -> tuple[str, Blocks]:
    if not removed:
        message = ("You don't follow anything; there was nothing to stop." if not now else
                   f"You don't follow {follows_text(asked)}; nothing was changed.")
    elif not now:
        message = f"Stopped following {follows_text(removed)}. You follow nothing now."
    else:
        message = f"Stopped following {follows_text(removed)}. You still follow {follows_text(now)}."
    return one_line(message)


def follows_reply(keywords: Sequence[str]) -> tuple[str, Blocks]:
    if not keywords:
        return one_line(
            f"You don't follow anything yet. `{COMMAND} follow &lt;keywords…&gt;` sends you a direct message "
            f'for each new item that matches, e.g. `{COMMAND} follow privacy "speech recognition"`.'
        )
    return one_line(
        f"You follow {follows_text(keywords)}: a new item matching any of them comes to you as a direct "
        f"message. Stop with `{COMMAND} unfollow &lt;keywords…&gt;` (or `{COMMAND} unfollow` for all)."
    )


def saved_reply(outcome: str, item: Item | None) -> str:
    """The one line (mrkdwn) that answers a click on Save: `outcome` is `Store.save_item`'s."""
    title = f"“{escape(cut(item.title, 100))}”" if item is not None else "That item"
    if outcome == "saved":
        return f"Saved {title} to your reading list: it's in my App Home (the Home tab)."
    if outcome == "already":
        return f"{title} is already in your reading list (my App Home)."
    if outcome == "full":
        return "Your reading list is full; remove some items in my App Home first. Nothing was saved."
    return "That item is no longer in the archive, so it can't be saved."


# --- App Home --------------------------------------------------------------------------------------------


def home_view(
    store: Any, team_id: str, user_id: str = "", visible: Collection[str] | None = None
) -> dict[str, Any]:
    """The App Home tab for one person: their reading list (saved items, each with Remove) and follows, the
    latest items, this workspace's subscribed channels, feed health, how to use. At most HOME_BLOCKS blocks:
    the reading list shows the most recently saved items that fit, and says how many are left out.
    `visible`: the channels the person is in; subscriptions elsewhere are only counted (None: all listed)."""
    latest = store.latest(5)
    every = store.subscriptions(team_id) if team_id else []  # no workspace: no one's subscriptions
    subs = [sub for sub in every if visible is None or sub.channel_id in visible]
    unseen = len(every) - len(subs)
    person = bool(team_id and user_id)
    follows = store.follows(team_id, user_id) if person else []
    top: Blocks = [
        header("Apple Machine Learning Research"),
        section(f"Every paper and update from {SITE}, in Slack: search, summaries, new items posted in "
                "the channels that subscribe, and sent to you for the keywords you follow."),
        divider(),
        header("Your reading list"),
    ]
    rest: Blocks = [divider(), header("Your follows")]
    if follows:
        rest.append(section(f"You follow {follows_text(follows)}: each new item matching one of them comes "
                            f"to you as a direct message. Change them with `{COMMAND} follow` / "
                            f"`{COMMAND} unfollow`."))
    else:
        rest.append(section(f"You follow nothing yet. `{COMMAND} follow &lt;keywords…&gt;` sends you a "
                            "direct message for each new item that matches."))
    rest += [divider(), header("Latest")]
    if latest:
        for item in latest:
            rest += item_blocks(item, list_snippet(item))
    else:
        rest.append(section("Nothing archived yet: the first items arrive with the first poll."))
    rest += [divider(), header("Subscribed channels")]
    if subs:
        lines = []
        for sub in subs[:40]:
            line = f"• {channel_ref(sub.channel_id)}: {keywords_text(sub.keywords)}"
            if sub.digest is not None:
                line += f" · as a {sub.digest} digest"
            if sub.paused:
                line += f" · *paused*: {escape(cut(sub.paused_reason or 'unknown reason', 120))}"
            lines.append(line)
        if len(subs) > 40:
            lines.append(f"… and {len(subs) - 40} more")
        if unseen:
            lines.append(f"… and {_channels(unseen)} you are not in")
        rest.append(section("\n".join(lines)))
    elif unseen:
        rest.append(section(f"Subscribed here: {_channels(unseen)}, none of which you are in."))
    elif not team_id:
        rest.append(section("I can't tell which workspace this is, so no subscriptions are listed."))
    else:
        rest.append(section(f"No channel here is subscribed yet. In a channel, type `{COMMAND} subscribe`"))
    rest += [divider(), header("Feed health")]
    newest = latest[0] if latest else None
    rest.append(section("\n".join(feed_lines(store.latest_feed_state(), store.count_items(), newest))))
    rest += [divider(), header("How to use")]
    rest.append(section("\n".join(f"• `{COMMAND} {example}`: {what}" for _u, what, example in COMMANDS)))
    room = HOME_BLOCKS - len(top) - len(rest) - 1  # one block is kept for the note on what is left out
    return {"type": "home", "blocks": [*top, *reading_list(store, team_id, user_id, room), *rest]}


def _channels(n: int) -> str:
    return f"{n} channel" if n == 1 else f"{n} channels"


def reading_list(store: Any, team_id: str, user_id: str, room: int) -> Blocks:
    """A person's saved items, most recently saved first, one section each with a Remove button: at most
    `room` of them (and HOME_SAVED), then a line saying how many more there are."""
    if not (team_id and user_id):
        return [section("I can't tell who you are in which workspace, so no reading list is shown.")]
    shown = max(0, min(room, HOME_SAVED))
    saved = store.saved_items(team_id, user_id, shown + 1)
    if not saved:
        return [section("Nothing saved yet. Click *Save* on any item I post or find, and it is kept here.")]
    blocks: Blocks = []
    for entry in saved[:shown]:
        item = entry.item
        meta = f"{KIND_LABEL.get(item.kind, 'Paper')} · {day(item)} · saved {entry.saved_at:%Y-%m-%d}"
        block = section(f"*{title_link(item)}*\n{meta}")
        block["accessory"] = {"action_id": REMOVE_ACTION_ID, "text": _text("plain_text", "Remove"),
                              "type": "button", "value": item.id[:ACTION_VALUE_LIMIT]}
        blocks.append(block)
    if len(saved) > shown:
        total = store.count_saved(team_id, user_id)
        blocks.append(context(f"Showing the {shown} most recently saved of your {total} items; remove some "
                              "to see the older ones here."))
    return blocks
