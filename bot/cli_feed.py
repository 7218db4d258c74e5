"""The command line's writes from the web: `poll` (one poll cycle: fetch the feed, store, deliver; or a dry
run saying what would be posted) and `backfill` (every post of the research index merged into the archive,
and with `--pages` each post's own page), beside the library calls they wrap (`bot.pipeline`,
`bot.research_index`, `bot.item_pages`). Each imports them when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bot.cli_common import embed_archive, err, item_json, open_store, out
from bot.config import Settings, redact_url
from bot.errors import EXIT_OK, BotError, Failure, IndexReadError
from bot.models import PollResult


def cmd_poll(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return _poll(settings, args)
    except (Failure, BrokenPipeError):
        raise  # the object is already out (or nobody reads it)
    except Exception as exc:
        if args.json:  # a failure before any result still prints the object, saying what went wrong
            dry = {"dry_run": True} if args.dry_run else {}
            error = " ".join(str(exc).split())[:300] or type(exc).__name__
            out(json.dumps({**PollResult().as_json(), **dry, "error": error}, ensure_ascii=False))
        raise


def _poll(settings: Settings, args: argparse.Namespace) -> int:
    from bot.blocks import counted  # imported with the pipeline anyway
    from bot.pipeline import Pipeline, would_burst
    from bot.store import open_store as store_at

    # A dry run reads the store as it is (not created, not migrated); a poll migrates it first.
    store = store_at(settings.database_url) if args.dry_run else open_store(settings)
    with Pipeline.from_settings(settings, store, no_deliver=getattr(args, "no_deliver", False)) as pipeline:
        if args.dry_run:
            new, baseline, fetched = pipeline.preview()
            bursts = [] if baseline else would_burst(store, new, settings.burst_threshold, pipeline.router)
            if args.json:
                out(
                    json.dumps(
                        {
                            "fetched": fetched,
                            "new": len(new),
                            "delivered": 0,
                            "failed": 0,
                            "not_modified": fetched == 0 and not new,
                            "left_to_others": 0,
                            "dry_run": True,
                            "baseline": baseline,
                            "items": [item_json(i) for i in new],
                            "bursts": [{"team_id": sub.team_id, "channel_id": sub.channel_id, "items": count}
                                       for sub, count in bursts],
                        }
                    )
                )
            elif baseline:
                out(f"first poll: {counted(len(new), 'item')} would be recorded as seen; "
                     "nothing would be posted")
            else:
                out(f"{counted(len(new), 'new item')} would be posted:" if new else "nothing new")
                for item in new:
                    out(f"  {item.published:%Y-%m-%d}  {item.title}\n              {item.link}")
                for sub, count in bursts:
                    out(f"{sub.team_id}/{sub.channel_id} would get a burst: one message, its {count} items "
                         f"in its thread (more than BURST_THRESHOLD={settings.burst_threshold})")
            return EXIT_OK
        demo = store.demo_loaded_at() is not None  # a successful poll replaces it (bot.demo)
        result = pipeline.poll_once()
    if args.json:
        error = {"error": result.error} if result.error else {}
        out(json.dumps({**result.as_json(), **error}, ensure_ascii=False))
    elif not result.error:  # a failed poll is its one error line, not zero counts before it
        state = "not modified" if result.not_modified else f"fetched {result.fetched}"
        extra = " (first poll: recorded as seen, nothing posted)" if result.baseline else ""
        extra += " (the demo archive was replaced)" if demo else ""
        out(f"{state}, {result.new} new, {result.delivered} delivered, {result.failed} failed{extra}")
    if result.error:
        raise Failure(f"poll failed: {result.error}")
    return EXIT_OK


def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Merge the research index into the archive (issue 6); nothing is ever delivered. `--pages`: then read
    the own page of every post never read (its paper, code and venue: `bot.item_pages`), BACKFILL_PACE
    apart; an interrupted run keeps what it read, and the next one goes on from there."""
    from bot import feed, item_pages, research_index
    from bot.store import open_store as store_at

    url = args.url or research_index.index_url_for(settings.feed_url) or research_index.DEFAULT_INDEX_URL
    tty = sys.stderr.isatty()
    pages: Any = None

    def progress(message: str) -> None:
        if tty:
            print(f"\r\033[Kbackfill: {message}", end="", file=sys.stderr, flush=True)

    try:
        with feed.make_client() as client:
            if args.dry_run:
                progress(f"reading {redact_url(url)} …")
                index = research_index.read(client, url)
                added, enriched = store_at(settings.database_url).preview_index(index.items)
                result = research_index.BackfillResult(
                    len(index.items), added, enriched, sum(index.skipped.values()), index.skipped_note()
                )
            else:
                store = open_store(settings)
                result = research_index.backfill(store, client, url, progress=progress)
                origin = item_pages.origin_of(url)
                if args.pages and origin is not None:
                    progress("reading the posts' own pages, one a second …")
                    pages = item_pages.enrich_pages(
                        store, client, origin, (), more=None, recheck=False, pace=item_pages.BACKFILL_PACE,
                        budget=None, progress=progress)
    except IndexReadError as exc:
        raise Failure(f"backfill failed: {exc}") from None
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    if result.note:
        err(f"warning: {result.note}")
    if not args.dry_run and (result.added or result.enriched):
        try:  # the new posts' vectors, for search by meaning, now rather than at the first search
            embed_archive(settings, store, tty)
        except BotError as exc:
            err(f"warning: search by meaning will embed the new posts later: {exc}")
    read = {} if pages is None else {"pages": {"read": pages.read, "changed": pages.changed,
                                                "failed": pages.failed, "left": pages.left}}
    if args.json:
        out(json.dumps({**result.as_json(), **({"dry_run": True} if args.dry_run else {}), **read}))
    elif args.dry_run:
        out(
            f"dry run: {result.found} posts in the index; {result.added} would be added, "
            f"{result.enriched} enriched; nothing written"
        )
    else:
        out(f"{result.found} posts in the index: {result.added} added, {result.enriched} enriched")
        if pages is not None:
            out(f"their own pages: {pages.read} read ({pages.changed} with a paper, code or venue), "
                 f"{pages.failed} failed" + (f", {pages.left} left for the next run" if pages.left else ""))
    return EXIT_OK
