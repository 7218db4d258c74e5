"""The reply to `/mlresearch status` (feed health, the archive, this channel's subscription, how summaries are
written) and the feed lines the App Home shows too. Pure Block Kit builders as in `bot.views`, made of its
blocks.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime

from bot.blocks import counted, cut, escape
from bot.models import FeedState, Item, Subscription
from bot.store import utcnow
from bot.views import COMMAND, Blocks, channel_ref, citation, keyword_label, section

_FORMATTING = re.compile(r"[*`]")


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


DEMO = ("the bundled demo archive: real posts for trying the bot offline, never posted to a channel; the "
        "first poll or backfill that reaches the feed replaces them")


def feed_lines(state: FeedState | None, count: int, newest: Item | None, demo: bool = False) -> list[str]:
    """The feed's health and the archive (`demo`: it is the demo archive, `bot.demo`, and says so)."""
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
    newest_is = f" · newest: {citation(newest)}" if newest else ""
    lines.append(f"*Archive:* {counted(count, 'item')}" + (f" ({DEMO})" if demo else "") + newest_is)
    return lines


def subscription_line(
    sub: Subscription | None, channel_id: str, disabled: str | None = None,
    next_digest: datetime | None = None, counts: Mapping[str, int] | None = None,
) -> str:
    """The channel's subscription in one line; `counts`: the archive items each author: keyword matches."""
    where = channel_ref(channel_id)
    if sub is None:
        return f"*This channel:* not subscribed (`{COMMAND} subscribe` to get new items in {where})"
    what = "every new item" if not sub.keywords else "items matching " + ", ".join(
        keyword_label(k, counts) for k in sub.keywords
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
    disabled: str | None, summaries: str, next_digest: datetime | None = None, demo: bool = False,
    follows: Sequence[str] = (), counts: Mapping[str, int] | None = None,
) -> tuple[str, Blocks]:
    """Feed health, the archive, this channel's subscription, the person's follows (when any; `counts`: the
    items each author: keyword matches) and how summaries are written."""
    lines = [*feed_lines(state, count, newest, demo),
             subscription_line(sub, channel_id, disabled, next_digest, counts)]
    if follows:
        lines.append("*Your follows:* " + ", ".join(keyword_label(k, counts) for k in follows))
    lines.append(f"*Summaries:* {summaries}")
    text = "Status: " + " · ".join(_FORMATTING.sub("", line) for line in lines[:2])
    return text, [section("\n".join(lines))]
