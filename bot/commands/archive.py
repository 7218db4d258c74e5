"""`/mlresearch search`, `latest`, `related` and `summarize`: the archive's reads, beside the library calls
they wrap (`SearchIndex.search`, `Store.latest`, `bot.search.related`, `Summarizer.summarize`), in
`bot.voice`'s words. Search, latest and summarize replies can be shared in the channel (`shareable`).
"""

from __future__ import annotations

import re

from bot import trending, views, voice
from bot.ask import understand
from bot.blocks import cut, escape
from bot.commands.common import C, Invocation, Reply, Services, line, shareable
from bot.search.query import parse_query
from bot.search.related import find_item, related, topics_of
from bot.store import Store, utcnow
from bot.summarize import MAX_ITEMS as SUMMARY_ITEMS
from bot.summarize import Summarizer

SEARCH_RESULTS = 5
RELATED_RESULTS = 5
LATEST_DEFAULT = 5
LATEST_MAX = 20
COUNT = re.compile(r"[0-9]{1,3}")  # ASCII digits only: str.isdigit() also accepts "²", "٣", "１"


def cmd_search(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} search &lt;terms&gt;`, e.g. `{C} search image captioning type:paper`.")
    query = parse_query(rest)
    found = services.index.search(query, SEARCH_RESULTS, services.store)
    hits = found.hits
    if not hits and services.store.count_items() == 0:
        return line(
            "The archive is empty, so there is nothing to search yet. It fills at the next poll; to fill "
            "it now, run `mlresearch-bot poll` (the newest items) or `mlresearch-bot backfill` (every past "
            "post)."
        )
    if not hits:  # one line, as every surface says it (bot.voice)
        newest = lambda: _newest_day(services.store)  # noqa: E731 - asked for a date filter only
        said = voice.nothing_found(voice.SLACK, rest, found, _suggest(services), newest)
        text, blocks = views.one_line(said)
        noted = [views.context(escape(found.note))] if found.note else []  # a query cut short, say
        return Reply(text, [*noted, *blocks], searched_for=found.searched_for)
    # what was searched, said back: a link as its address (Slack sends <https://…>); None when a misspelt word
    # was searched as typed right (the reply opens with what was searched, and typed)
    echoed = None if found.searched_for else (" ".join(query.links) if query.links else rest)
    shown = hits[: shown_count(inv.shown)]
    matcher = voice.result_matcher(found, query, shown)
    reply = views.search_reply(echoed, shown, matcher, found.total, expanded=found.expanded, note=found.note)
    return shareable(reply, found.searched_for)


def shown_count(asked: int | None) -> int:
    """How many results a search reply shows: SEARCH_RESULTS, or fewer when a question asked for fewer."""
    return min(asked or SEARCH_RESULTS, SEARCH_RESULTS)


def cmd_related(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} related &lt;link or title words&gt;`, e.g. `{C} related hey siri`.")
    if services.store.count_items() == 0:
        return line("The archive is empty, so nothing is related to anything yet. It fills at the next poll.")
    item = find_item(services.index, rest, services.store)  # SearchError: one line
    near = related(services.index, item, RELATED_RESULTS, services.store)
    topics = [] if near else topics_of(services.index, item, services.store)
    trending.record_open(services.store, inv.team_id, item.id)  # the button's click and the command alike
    return Reply(*views.related_reply(item, near, topics))


def cmd_latest(rest: str, inv: Invocation, services: Services) -> Reply:
    usage = f"Usage: `{C} latest [n]`, where n is a number from 1 to {LATEST_MAX} (default {LATEST_DEFAULT})."
    if not rest:
        n = LATEST_DEFAULT
    elif COUNT.fullmatch(rest) and int(rest) >= 1:
        n = int(rest)
    else:
        return line(usage + _instead_of_latest(rest))
    note = f"at most {LATEST_MAX} at a time" if n > LATEST_MAX else ""
    items = services.store.latest(min(n, LATEST_MAX))
    if not items:
        return Reply(*views.latest_reply(items))
    return shareable(views.latest_reply(items, note))


def _suggest(services: Services) -> voice.Suggest:
    """The topics a reply that found nothing suggests (`SearchIndex.suggest`)."""
    return lambda query, missing: services.index.suggest(query.content, services.store, missing)


def _newest_day(store: Store) -> str | None:
    """The day the newest item was published (what a date filter that matched nothing is told)."""
    newest = store.latest(1)
    return views.day(newest[0]) if newest else None


def _instead_of_latest(rest: str) -> str:
    """What to type for `latest` followed by words ("latest privacy", "latest 2025 papers"), read as a
    question would be (bot.ask): " Did you mean `/mlresearch search privacy`?" ("" when it names no topic or
    time)."""
    understood = understand(f"latest {rest}", now=utcnow().date())
    named = understood.since or understood.until or any(c.isalpha() for w in understood.words for c in w)
    if understood.action != "search" or not named:  # "latest 1.5": a count mistyped
        return ""
    return f" Did you mean `{C} {escape(cut(understood.command().replace('`', ''), 200))}`?"


def cmd_summarize(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} summarize &lt;topic&gt;`, e.g. `{C} summarize diffusion models`.")
    summarizer = services.summarizer if services.summarizer is not None else Summarizer()
    summary = summarizer.summarize(services.index, rest)
    if summary is None:
        # the summary's own search, answered again from the index's kept answers (the same query and limit)
        found = services.index.search(parse_query(rest), SUMMARY_ITEMS, services.store)
        return line(voice.nothing_to_summarize(voice.SLACK, rest, found, _suggest(services)))
    return shareable(views.summary_reply(summary), summary.searched_for)
