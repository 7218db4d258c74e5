"""What is a person's own: the App Home (their reading list, with *Export .bib*, and follows, what the team
is reading, then the latest items, the workspace's subscribed channels, feed health and how to use) and the
replies to `/mlresearch follow`, `unfollow`, `follows` and to a click on Save.

Pure Block Kit builders as in `bot.views`, made of its blocks; the store is passed in.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from bot import trending
from bot.blocks import ACTION_VALUE_LIMIT, KIND_LABEL, cut, day, escape, titled
from bot.models import Item
from bot.status import feed_lines
from bot.views import (
    COMMAND,
    COMMANDS,
    SITE,
    Blocks,
    button,
    channel_ref,
    context,
    divider,
    header,
    item_blocks,
    keyword_label,
    keywords_text,
    list_snippet,
    one_line,
    section,
)

REMOVE_ACTION_ID = "unsave_item"
EXPORT_ACTION_ID = "export_bibtex"  # the reading list as a .bib file, in a DM (bot.cite.send_reading_list)
HOME_BLOCKS = 100  # Slack's limit for a view
HOME_SAVED = 50  # reading-list items the App Home shows at most


# --- follows --------------------------------------------------------------------------------------------


def follows_text(keywords: Sequence[str], counts: Mapping[str, int] | None = None) -> str:
    """Followed keywords as a reply lists them; an author's with how many items match it, when `counts`
    says."""
    return ", ".join(keyword_label(k, counts) for k in keywords)


def follow_reply(added: Sequence[str], over: Sequence[str], now: Sequence[str],
                 counts: Mapping[str, int] | None = None) -> tuple[str, Blocks]:
    if added:
        message = (f"Following {follows_text(added, counts)}: I'll send you a direct message when a new item "
                   "matches (items already archived aren't sent).")
    else:
        message = "You already follow that; nothing was changed."
    if over:
        message += (f" Not added, you follow the most I keep ({len(now)}): {follows_text(over)}; "
                    f"`{COMMAND} unfollow` some first.")
    message += f" You follow: {follows_text(now, counts)}." if now else ""
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


def follows_reply(keywords: Sequence[str], counts: Mapping[str, int] | None = None) -> tuple[str, Blocks]:
    if not keywords:
        return one_line(
            f"You don't follow anything yet. `{COMMAND} follow &lt;keywords…&gt;` sends you a direct message "
            f'for each new item that matches, e.g. `{COMMAND} follow privacy "speech recognition"`.'
        )
    return one_line(
        f"You follow {follows_text(keywords, counts)}: a new item matching any of them comes to you as a "
        f"direct message. Stop with `{COMMAND} unfollow &lt;keywords…&gt;` (or `{COMMAND} unfollow` for all)."
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
    """The App Home tab for one person: their reading list (saved items, each with Remove) and follows, what
    the team is reading (`bot.trending`), the latest items, this workspace's subscribed channels, feed
    health, how to use. At most HOME_BLOCKS blocks: the reading list shows the most recently saved items
    that fit, and says how many are left out.
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
    if team_id:  # what the workspace reads: counts only, the same lines as `/mlresearch trending`
        rest += [divider(), header("What the team is reading"),
                 section("\n".join(trending.lines(trending.trending(store, team_id))))]
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
    rest.append(section("\n".join(feed_lines(store.latest_feed_state(), store.count_items(), newest,
                                                  store.demo_loaded_at() is not None))))
    rest += [divider(), header("How to use")]
    rest.append(section("\n".join(f"• `{COMMAND} {example}`: {what}" for _u, what, example in COMMANDS)))
    room = HOME_BLOCKS - len(top) - len(rest) - 1  # one block is kept for the note on what is left out
    return {"type": "home", "blocks": [*top, *reading_list(store, team_id, user_id, room), *rest]}


def _channels(n: int) -> str:
    return f"{n} channel" if n == 1 else f"{n} channels"


def reading_list(store: Any, team_id: str, user_id: str, room: int) -> Blocks:
    """A person's saved items, most recently saved first: the *Export .bib* button (every saved item as a
    BibTeX file, sent in a DM), then one section each with a Remove button, at most `room` blocks in all
    (and HOME_SAVED items), then a line saying how many more there are."""
    if not (team_id and user_id):
        return [section("I can't tell who you are in which workspace, so no reading list is shown.")]
    shown = max(0, min(room - 1, HOME_SAVED))
    saved = store.saved_items(team_id, user_id, shown + 1)
    if not saved:
        return [section("Nothing saved yet. Click *Save* on any item I post or find, and it is kept here.")]
    export = button("Export .bib", EXPORT_ACTION_ID, "reading_list")
    blocks: Blocks = [{"elements": [export], "type": "actions"}]
    for entry in saved[:shown]:
        item = entry.item
        meta = f"{KIND_LABEL.get(item.kind, 'Paper')} · {day(item)} · saved {entry.saved_at:%Y-%m-%d}"
        block = section(f"{titled(item)}\n{meta}")
        block["accessory"] = button("Remove", REMOVE_ACTION_ID, item.id[:ACTION_VALUE_LIMIT])
        blocks.append(block)
    if len(saved) > shown:
        total = store.count_saved(team_id, user_id)
        blocks.append(context(f"Showing the {shown} most recently saved of your {total} items; remove some "
                              "to see the older ones here."))
    return blocks
