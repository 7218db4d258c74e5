"""The command line's BibTeX: `mlresearch-bot cite LINK|WORDS` and `mlresearch-bot export --bibtex
[--saved-by USER] [--since YYYY-MM-DD]`, run by `bot.cli` (which parses their arguments and maps errors to
exit codes).

stdout holds BibTeX only, so `mlresearch-bot export --bibtex > refs.bib` is always a file a BibTeX parser
reads; what is said about it (which item words picked, nothing found, an empty reading list, workspaces
merged) is one line on stderr. Nothing found is exit status 0, as for `search`; bad usage is 2.

`--saved-by USER` is one person's reading list: USER is a Slack user ID (U… or W…). A user ID names one
person across the workspaces of an Enterprise Grid organization, so when several workspaces hold a reading
list of that ID they are merged (each item once) and stderr names the workspaces. `--since` keeps the items
published on or after that day (UTC), with or without `--saved-by`.
"""

from __future__ import annotations

import argparse
import re
from datetime import date

from bot.cli_common import EMPTY_ARCHIVE, err, open_archive, out
from bot.config import Settings
from bot.errors import EXIT_OK, NothingFound, UsageError

USER_ID = re.compile(r"[UW][A-Z0-9]{2,40}")


def cmd_cite(settings: Settings, args: argparse.Namespace) -> int:
    """The item's entry on stdout; which item words picked, or nothing found, on stderr."""
    from bot import bibtex
    from bot.cite import find
    from bot.search.index import SearchIndex, meaning_model

    store = open_archive(settings)
    if store.count_items() == 0:
        err(EMPTY_ARCHIVE)
        return EXIT_OK
    index = SearchIndex(store, model=meaning_model(settings))
    try:
        item, words = find(" ".join(args.item), index, store)  # SearchError (no word): exit 2
    except NothingFound as exc:
        err(str(exc))
        return EXIT_OK
    if words is not None:
        err(f"cited the first match for {_echo(words)}: {item.title}")
    out(bibtex.entry(item, item.venue))
    return EXIT_OK


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    """Entries for the archive, or `--saved-by`'s reading list, published `--since` a day (as `cite`)."""
    from bot import bibtex
    from bot.store.models import row_item

    if not args.bibtex:
        raise UsageError("export needs a format: --bibtex (the only one so far), e.g. "
                         "mlresearch-bot export --bibtex > archive.bib")
    since = _day(args.since) if args.since else None
    user = _user(args.saved_by) if args.saved_by is not None else None
    store = open_archive(settings)
    if store.count_items() == 0:
        err(EMPTY_ARCHIVE)
        return EXIT_OK
    if user is not None:
        saved = store.saved_by(user)
        teams = sorted({team for team, _entry in saved})
        items = [entry.item for _team, entry in saved]
        if not items:
            err(f"{user} has saved nothing (in any workspace): there is nothing to export")
            return EXIT_OK
        if len(teams) > 1:
            err(f"{user}'s reading lists in {len(teams)} workspaces ({', '.join(t[:20] for t in teams[:5])}"
                f"{', …' if len(teams) > 5 else ''}) are merged: each item once")
    else:
        items = [row_item(row) for row in store.each_item()]
    if since is not None:
        items = [item for item in items if item.published.date() >= since]
        if not items:
            whose = f"{user} saved" if user else "the archive holds"
            err(f"nothing {whose} was published on or after {since.isoformat()}: there is nothing to export")
            return EXIT_OK
    out(bibtex.bibliography(items, {i.id: i.venue for i in items if i.venue}).rstrip("\n"))
    return EXIT_OK


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--since must be a date like 2026-01-31, not {_echo(text)}") from None


def _user(text: str) -> str:
    user = text.strip()
    if not USER_ID.fullmatch(user):
        raise UsageError(f"--saved-by takes a Slack user ID such as U0123ABCD (a person's profile → ⋮ → "
                         f"Copy member ID), not {_echo(text)}")
    return user


def _echo(text: str, limit: int = 80) -> str:
    shown = " ".join(text.split())
    return repr(shown if len(shown) <= limit else shown[: limit - 1] + "…")
