"""The archive and the bot's state: one interface (`Store`), two backends.

    open_store("sqlite:///mlresearch.db")          -> SQLiteStore (the embedded default)
    open_store("postgres://user:pw@host:5432/db")  -> PostgresStore (Heroku; several processes)

Modules: `conn` (one connection speaking the shared SQL dialect), `models` (rows to records, time helpers;
the records themselves are in bot.models, the errors in bot.errors), `base` (the connection/session layer
and the backend's hooks), the parts of the interface, each backend-independent: `archive` (items, ingest and
identity, the per-feed baseline), `feed_state` (feed state, meta), `subscriptions` (and workspaces),
`ledger` (deliveries), `installations` (and OAuth state), `digests` (digest schedules, the items waiting for
a digest, the digest ledger), `trending` (what a workspace saved, liked and opened through Related, counted);
`store` (`Store`, their composition), `merge`
(batched merging of items), `sqlite` and `postgres` (connections, migrations, the poll lock).
"""

from __future__ import annotations

from bot.errors import ConfigError
from bot.store.base import MIGRATIONS
from bot.store.conn import Conn
from bot.store.models import authors_text, from_iso, iso, utcnow
from bot.store.sqlite import SQLiteStore
from bot.store.store import Store

__all__ = [
    "MIGRATIONS",
    "Conn",
    "SQLiteStore",
    "Store",
    "authors_text",
    "from_iso",
    "is_postgres_url",
    "iso",
    "open_store",
    "utcnow",
]


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


def open_store(database_url: str) -> Store:
    """The store a DATABASE_URL names (not migrated: call `migrate()` before writing)."""
    if is_postgres_url(database_url):
        from bot.store.postgres import PostgresStore  # psycopg is imported only when it is used

        return PostgresStore(database_url)
    from bot.config import sqlite_path

    path = sqlite_path(database_url)
    folder = path.absolute().parent
    if not folder.is_dir():  # never made here: a typo would put the archive on another disk
        what = "is a file, not a folder" if folder.exists() else \
            "does not exist: create it, or correct the path"
        raise ConfigError("DATABASE_URL", f"the folder {path.parent} {what} (in {database_url!r})")
    if path.is_dir():
        raise ConfigError("DATABASE_URL", f"{path} is a folder, not a database file (in {database_url!r})")
    return SQLiteStore(path)
