"""The command line's reads of the archive: `search`, `summarize`, `related`, `latest`, `status` and
`feedback`, in the words Slack and the shell use (`bot.voice` decides them; this module prints them as text).

Every line of an answer is on stdout, the informational ones too ("Searched for “captioning” (you typed
“captoning”)", "No item holds “topological”: these were found without it."); stderr holds an error's one
line only. Nothing found is exit status 0: a line saying why, or `[]` (a null summary) under --json.

--json rows of `search`, `related` and `latest`: {"id", "title", "link", "published", "score",
"by_meaning"}; `by_meaning` is true when the item was listed for its meaning, not its words (for `related`:
near in meaning while sharing none of the item's rarer words). A search whose misspelt words were searched
typed right adds "searched_for" (the words as searched, as the text's "Searched for" line says them) to each
row. `related LINK|WORDS` whose link or words name no archive item is an error, exit status 1 and its line
on stderr ("No item in the archive matches “hey siri”…"), under --json too: so a script tells it from an
item nothing is close to, which is nothing found (`[]`, exit status 0).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from bot.cli_common import EMPTY_ARCHIVE, err, iso, item_json, open_archive, out
from bot.config import Settings, redact_url
from bot.errors import EXIT_OK, NothingFound, UsageError
from bot.models import shown_day


def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    from bot.search.index import SearchIndex, meaning_model
    from bot.search.query import search

    store = open_archive(settings)
    query = " ".join(args.query)
    index = SearchIndex(store, model=meaning_model(settings))
    try:
        found = search(index, query, limit=args.limit)
    except NothingFound as exc:  # a link not in the archive: a message (or []) and exit 0, as no results
        out("[]" if args.json else str(exc))
        return EXIT_OK
    if args.json:
        out(hits_json(found.hits, found.searched_for))
        return EXIT_OK
    if not found.hits and store.count_items() == 0:
        out(EMPTY_ARCHIVE)
        return EXIT_OK
    from bot import voice
    from bot.search.query import parse_query, split_filters
    from bot.voice import TERMINAL

    lines = []
    if found.searched_for:
        lines.append(voice.searched(TERMINAL, found.searched_for, split_filters(query)[0] or query))
    also = voice.also_searched(TERMINAL, found.expanded) if found.hits else None
    lines += [said for said in (also, found.note) if said]
    if not found.hits:
        newest = store.latest(1)
        lines.append(voice.nothing_found(TERMINAL, query, found, _suggest(index),
                                         lambda: shown_day(newest[0].published) if newest else None))
        out("\n".join(lines))
        return EXIT_OK
    asked = parse_query(query)
    echoed = None if found.searched_for else (" ".join(asked.links) or query)
    lines.append(voice.results(TERMINAL, found.total, len(found.hits), echoed) + ":")
    matcher = voice.result_matcher(found, asked, found.hits)
    from bot.blocks import format_authors  # slack_sdk's Block Kit comes with it: not under --json
    from bot.views import holds_some

    for rank, hit in enumerate(found.hits, 1):
        lines.append(f"{rank:>2}. {hit.item.title}\n    {shown_day(hit.item.published)}  {hit.item.link}")
        if hit.item.authors:
            lines.append(f"    {format_authors(hit.item.authors)}")
        if facts := _facts(hit.item):
            lines.append(f"    {facts}")
        if hit.by_meaning:
            lines.append(f"    {voice.by_meaning(holds_some(hit.item, matcher))}")
    out("\n".join(lines))
    return EXIT_OK


def _suggest(index: Any) -> Any:
    """The topics a reply that found nothing suggests (`SearchIndex.suggest`), as `bot.voice` asks."""
    return lambda query, missing: index.suggest(query.content, missing=missing)


def hits_json(hits: Sequence[Any], searched_for: str | None = None) -> str:
    """Search hits as --json rows; each says what the text says of it (see the module docstring)."""
    corrected = {"searched_for": searched_for} if searched_for else {}
    return json.dumps([{**item_json(h.item), "score": h.score, "by_meaning": h.by_meaning, **corrected}
                       for h in hits], ensure_ascii=False)


def cmd_summarize(settings: Settings, args: argparse.Namespace) -> int:
    from bot import voice
    from bot.blocks import counted  # imported with the summarizer anyway
    from bot.search.index import SearchIndex, meaning_model
    from bot.search.query import parse_query, split_filters
    from bot.summarize import MAX_ITEMS as SUMMARY_ITEMS
    from bot.summarize import Summarizer
    from bot.voice import TERMINAL

    topic = " ".join(" ".join(args.topic).split())
    if not topic:
        raise UsageError("summarize needs a topic, for example: mlresearch-bot summarize diffusion models")
    store = open_archive(settings)
    index = SearchIndex(store, model=meaning_model(settings))
    summary = Summarizer.from_settings(settings).summarize(index, topic)
    if summary is None:  # nothing found is not a failure: a message, or a null summary under --json
        if args.json:
            out(json.dumps({"topic": topic, "summary": None, "items": []}, ensure_ascii=False))
        elif store.count_items() == 0:
            out(EMPTY_ARCHIVE)
        else:  # the summary's own search, answered again from the index's kept one
            found = index.search(parse_query(topic), SUMMARY_ITEMS)
            out(voice.nothing_to_summarize(TERMINAL, topic, found, _suggest(index)))
        return EXIT_OK
    if args.json:
        out(json.dumps(summary.as_json(), ensure_ascii=False))
        return EXIT_OK
    how = "quoted from the abstracts" if summary.method == "extractive" else f"written by {summary.model}"
    if summary.searched_for:
        out(voice.searched(TERMINAL, summary.searched_for, split_filters(topic)[0] or topic))
    if summary.note:
        out(summary.note)
    about = voice.summary_about(TERMINAL, summary.about, summary.filters)
    out(f"{about} ({counted(len(summary.items), 'item')}, {summary.span}; {how}):\n")
    out(summary.text() + "\n")
    for n, item in enumerate(summary.items, 1):
        out(f"[{n}] {item.title} ({shown_day(item.published)})\n    {item.link}")
    return EXIT_OK


def cmd_related(settings: Settings, args: argparse.Namespace) -> int:
    from bot.search.index import SearchIndex, meaning_model
    from bot.search.query import MAX_LIMIT
    from bot.search.related import find_item, related, topics_of

    if not 1 <= args.limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be between 1 and {MAX_LIMIT}")
    store = open_archive(settings)
    if store.count_items() == 0:
        out("[]" if args.json else EMPTY_ARCHIVE)
        return EXIT_OK
    index = SearchIndex(store, model=meaning_model(settings))
    try:
        item = find_item(index, " ".join(args.item))
    except NothingFound as exc:  # no item to start from: nothing found (exit 0, as the contract says);
        # under --json, `[]` on stdout and the reason on stderr, where "nothing close" prints `[]` alone
        if args.json:
            out("[]")
            err(str(exc))
        else:
            out(str(exc))
        return EXIT_OK
    found = related(index, item, args.limit)
    if args.json:
        out(json.dumps([{**item_json(h.item), "score": h.score, "by_meaning": not h.shares} for h in found],
                       ensure_ascii=False))
        return EXIT_OK
    from bot import voice
    from bot.voice import TERMINAL

    if not found:
        out(voice.nothing_near(TERMINAL, item.title, topics_of(index, item)))
        return EXIT_OK
    out(voice.related_to(item.title) + ":")
    for rank, hit in enumerate(found, 1):
        out(f"{rank:>2}. {hit.item.title}\n    {shown_day(hit.item.published)}  {hit.item.link}\n"
            f"    {voice.shares(hit.shares, TERMINAL)}")
    return EXIT_OK


def cmd_latest(settings: Settings, args: argparse.Namespace) -> int:
    """The newest items, as `/mlresearch latest [n]` lists them (at most LATEST_MAX)."""
    from bot.commands.archive import LATEST_DEFAULT, LATEST_MAX

    raw = (args.n or "").strip()
    if raw and not (raw.isascii() and raw.isdigit() and len(raw) <= 3 and int(raw) >= 1):
        raise UsageError(f"latest takes a number from 1 to {LATEST_MAX}, got {raw[:20]!r}")
    n = int(raw) if raw else LATEST_DEFAULT
    store = open_archive(settings)
    items = store.latest(min(n, LATEST_MAX))
    if args.json:
        out(json.dumps([{**item_json(i), "score": None, "by_meaning": False} for i in items],
                       ensure_ascii=False))
        return EXIT_OK
    if not items:
        out(EMPTY_ARCHIVE)
        return EXIT_OK
    if n > LATEST_MAX:
        out(f"at most {LATEST_MAX} at a time:")
    from bot.blocks import format_authors

    for rank, item in enumerate(items, 1):
        out(f"{rank:>2}. {item.title}\n    {shown_day(item.published)}  {item.link}")
        if item.authors:
            out(f"    {format_authors(item.authors)}")
        if facts := _facts(item):
            out(f"    {facts}")
    return EXIT_OK


def _facts(item: Any) -> str:
    """An item's paper, code and venue on one line ("paper: https://arxiv.org/abs/… · code: https://github.com/…
    · ICML 2025"), "" when none is known: the line under the title posts show (`blocks.links_line`)."""
    parts = [f"{label}: {url}" for label, url in (("paper", item.paper_url), ("code", item.code_url)) if url]
    return " · ".join([*parts, *([" ".join(item.venue.split())[:80]] if item.venue else [])])


def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    """The feed's health, the archive and every subscription, as `/mlresearch status` says them (the command
    line is in no channel, so every channel's subscription is listed). It changes no database: one that holds
    no archive, or whose schema is behind this release, is one line saying so (`open_archive`). The feed is
    the one FEED_URL names: another feed polled into the same archive is not its health."""
    from bot.status import feed_lines, subscription_line

    store = open_archive(settings, upgrade=False)
    state = store.feed_state(settings.feed_url, readonly=True)
    polled = state.last_poll is not None
    newest = next(iter(store.latest(1)), None)
    subs = store.subscriptions()
    summaries = (f"written by {settings.summary_model or 'the SUMMARY_API_URL model'}, extractive if it fails"
                 if settings.summary_enabled else "extractive (quoted from the abstracts, offline)")
    if args.json:
        feed = None if not polled else {
            "url": redact_url(state.url), "ok": state.ok, "last_poll": iso(state.last_poll),
            "last_success": iso(state.last_success), "error_streak": state.error_streak,
            "last_error": state.last_error, "last_error_at": iso(state.last_error_at),
        }
        out(json.dumps({
            "feed": feed,
            "items": store.count_items(),
            "demo": store.demo_loaded_at() is not None,
            "newest": item_json(newest) if newest else None,
            "subscriptions": [
                {"team_id": s.team_id, "channel_id": s.channel_id, "keywords": list(s.keywords),
                 "digest": s.digest, "paused": s.paused, "disabled": store.workspace_disabled(s.team_id)}
                for s in subs
            ],
            "summaries": "abstractive" if settings.summary_enabled else "extractive",
        }, ensure_ascii=False))
        return EXIT_OK
    from bot.shell_text import mrkdwn_to_text  # Slack's mrkdwn as terminal text

    demo = store.demo_loaded_at() is not None
    lines = feed_lines(state if polled else None, store.count_items(), newest, demo)
    lines.append(f"*Subscriptions:* {len(subs)}" + (" (`/mlresearch subscribe` in a channel)" * (not subs)))
    counts = _author_counts([k for sub in subs for k in sub.keywords], store)
    for sub in subs:
        line = subscription_line(sub, sub.channel_id, store.workspace_disabled(sub.team_id), counts=counts)
        lines.append("  " + line.replace("*This channel:*", f"{sub.team_id}/{sub.channel_id}:", 1))
    lines.append(f"*Summaries:* {summaries}")
    for line in lines:
        out(mrkdwn_to_text(line))
    return EXIT_OK


def _author_counts(keywords: list[str], store: Any) -> dict[str, int] | None:
    """How many archive items each author: keyword matches, read from the archive's rows (no search index
    is built for a status); None when there is no author: keyword."""
    from bot import author_follows
    from bot.models import AUTHOR_PREFIX
    from bot.search.authors import Directory

    if not any(k.startswith(AUTHOR_PREFIX) for k in keywords):
        return None
    rows = ((row["id"], json.loads(row["authors"] or "[]")) for row in store.each_item())
    return author_follows.counts(keywords, Directory.of((i, a) for i, a in rows if isinstance(a, list)))


def cmd_feedback(settings: Settings, args: argparse.Namespace) -> int:
    """The votes on the bot's answers, newest first: time, vote, the question as understood (the query it
    ran), the items shown. docs/feedback.md says how to turn them into judged queries."""
    from datetime import UTC, date, datetime

    from bot.ask import Understood

    since = None
    if args.since:
        try:
            since = datetime.combine(date.fromisoformat(args.since), datetime.min.time(), UTC)
        except ValueError:
            raise UsageError(f"--since must be a date like 2026-12-01, not {args.since[:40]!r}") from None
    store = open_archive(settings)
    votes = store.feedback_since(since)
    rows = []
    for vote in votes:
        understood = Understood.from_json(vote.understood)
        rows.append({"time": vote.voted_at.isoformat(), "vote": vote.vote,
                     "question": understood.command() if understood else None,
                     "query": understood.query if understood else None,
                     "understood": understood.describe() if understood else None,
                     "team_id": vote.team_id, "channel_id": vote.channel_id, "answer_ts": vote.message_ts,
                     "items": [{"id": i.get("id"), "title": i.get("title"), "link": i.get("link")}
                               for i in vote.shown]})
    if args.json:
        out(json.dumps(rows, ensure_ascii=False, indent=2))
        return EXIT_OK
    if not rows:
        out("no feedback yet" + (f" since {args.since}" if args.since else ""))
        return EXIT_OK
    for row in rows:
        mark = "+1" if row["vote"] == "up" else "-1"
        out(f"{row['time'][:16].replace('T', ' ')}  {mark}  {row['question'] or '?'}")
        for n, item in enumerate(row["items"], 1):
            out(f"    {n}. {item['title']}  {item['link']}")
    return EXIT_OK
