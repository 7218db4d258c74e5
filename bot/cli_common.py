"""What the command line's subcommands share: printing (an answer on stdout, an error on stderr), opening the
archive for a command that reads it, and an item's JSON.

stdout holds the answer and every informational line ("Searched for …", "No item holds …"); stderr holds only
an error's one line (`err`), the progress shown on a terminal, and the log when LOG_LEVEL asks for it.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from bot.config import Settings
from bot.errors import Failure
from bot.models import UNDATED

EMPTY_ARCHIVE = (
    "the archive is empty: run `mlresearch-bot poll` (the feed's newest items) or `mlresearch-bot backfill` "
    "(every post on the research index) to fill it"
)


def out(text: str) -> None:
    print(text, flush=True)


def err(text: str) -> None:
    print(f"mlresearch-bot: {' '.join(text.split())}", file=sys.stderr, flush=True)


def open_store(settings: Settings) -> Any:
    """The store DATABASE_URL names, migrated (created when it does not exist yet)."""
    from bot import store as stores

    store = stores.open_store(settings.database_url)
    store.migrate()
    return store


def open_archive(settings: Settings, *, upgrade: bool = True) -> Any:
    """The store of a command that only reads (`search`, `status`, …). A database that holds no archive yet (a
    SQLite file that does not exist, a PostgreSQL database without the tables) is a Failure saying so, the
    same on both stores, and nothing is created; a SQLite path whose folder does not exist is the one-line
    ConfigError `poll` would give (the fix is the path, not a poll). An archive that exists is upgraded to
    this release's schema, unless `upgrade` is False (`status`, which changes no database: a schema behind
    this release is a Failure naming `migrate`)."""
    from bot import store as stores

    store = stores.open_store(settings.database_url)  # ConfigError: the folder does not exist
    if not store.exists():
        raise Failure(f"no archive {_where(settings, store)} yet: run `mlresearch-bot poll` or "
                      "`mlresearch-bot backfill` first")
    if upgrade:
        store.migrate()
        return store
    missing = [name for name in stores.MIGRATIONS if name not in set(store.applied_migrations())]
    if missing:
        raise Failure(f"the {store.describe()} was made by an earlier release ({len(missing)} migration(s) "
                      "pending): run `mlresearch-bot migrate` first")
    return store


def _where(settings: Settings, store: Any) -> str:
    """Where the archive was looked for: "at ./mlresearch.db", "in PostgreSQL database bot on db.example"."""
    if not settings.database_url.startswith("sqlite:///"):
        return f"in the {store.describe()}"
    path = settings.sqlite_path
    return f"at {path if path.is_absolute() or str(path).startswith('.') else f'./{path}'}"


def published(item: Any) -> str | None:
    """An item's day for --json: YYYY-MM-DD, or null when it is not known (bot.models.UNDATED)."""
    return None if item.published == UNDATED else f"{item.published:%Y-%m-%d}"


def item_json(item: Any) -> dict[str, str | None]:
    return {"id": item.id, "title": item.title, "link": item.link, "published": published(item)}


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def embed_archive(settings: Settings, store: Any, tty: bool, *, recompute: bool = False) -> tuple[int, str]:
    """The search index built and every item's vector computed (those missing, or all with `recompute`),
    with progress on a terminal. Returns (items, model name)."""
    from bot.search.index import SearchIndex, meaning_model

    index = SearchIndex(store, model=meaning_model(settings))
    snapshot = index.current()

    def progress(done: int, total: int) -> None:
        if tty:
            print(f"\r\033[Kembedding {done:,} of {total:,} items …", end="", file=sys.stderr, flush=True)

    try:
        vectors = index.vectors(snapshot, progress=progress, recompute=recompute)
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    assert vectors is not None
    return len(snapshot.entries), vectors.model
