"""`/mlresearch help`, `status`, `trending` and `cite`: what the bot tells about itself, this channel and
workspace, and one item, beside the library calls they wrap (`bot.status`, `bot.trending`, `bot.cite`).
"""

from __future__ import annotations

from datetime import datetime

from bot import author_follows, cite, digest, status, trending, views
from bot.blocks import escape
from bot.commands.common import C, Invocation, Reply, Services, line
from bot.models import Subscription
from bot.store import Store


def cmd_help(rest: str, inv: Invocation, services: Services) -> Reply:
    return Reply(*views.help_reply())


def cmd_status(rest: str, inv: Invocation, services: Services) -> Reply:
    store = services.store
    newest = store.latest(1)
    sub = store.get_subscription(inv.team_id, inv.channel_id)
    follows = store.follows(inv.team_id, inv.user_id) if inv.user_id else []
    counts = author_follows.counted_in([*(sub.keywords if sub is not None else ()), *follows], services.index,
                                      services.store)
    summarizer = services.summarizer
    if summarizer is not None and summarizer.abstractive:
        summaries = f"written by `{escape(summarizer.model[:60])}`, extractive if it fails or is slow"
    else:
        summaries = "extractive (quoted from the abstracts, offline)"
    state = store.feed_state(services.settings.feed_url)  # FEED_URL's, not another feed's polled before
    return Reply(
        *status.status_reply(
            state if state.last_poll is not None else None,
            store.count_items(),
            newest[0] if newest else None,
            sub,
            inv.channel_id,
            store.workspace_disabled(inv.team_id),
            summaries,
            _next_digest(store, sub, services.clock()) if sub is not None else None,
            demo=store.demo_loaded_at() is not None,
            follows=follows,
            counts=counts,
        )
    )


def _next_digest(store: Store, sub: Subscription, now: datetime) -> datetime | None:
    """When the channel's next digest goes out, in the subscriber's zone: one whose time has passed but that
    the poll has not posted yet is still the next."""
    due = digest.due_digest(store, sub, now)
    if due is not None:
        schedule, _period, ends, _row = due
        return ends.astimezone(schedule.tz)
    return digest.next_digest(sub, now)


def cmd_trending(rest: str, inv: Invocation, services: Services) -> Reply:
    if rest:
        return line(f"`{C} trending` takes no words; it says what this workspace reads most.")
    report = trending.trending(services.store, inv.team_id, services.clock())
    return Reply(*views.trending_reply(trending.lines(report)))


def cmd_cite(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} cite &lt;link or title words&gt;`, e.g. `{C} cite hey siri`: the item's "
                    "BibTeX entry, and the same reference in plain text.")
    if services.store.count_items() == 0:
        return line("The archive is empty, so there is nothing to cite yet. It fills at the next poll.")
    item, words = services.store.get_item(rest), None  # a Cite button's value: the item's id, as it is
    if item is None:
        item, words = cite.find(rest, services.index, services.store)  # NothingFound, SearchError: one line
    return Reply(*cite.cite_reply(item, words, item.venue))
