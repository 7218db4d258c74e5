"""One open database connection speaking the dialect both backends share. Its own module so the store's
parts (`base`, `accounts`, `merge`) import it without importing each other."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=512)
def _pyformat(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class Conn:
    """One open DB-API connection (sqlite3 or psycopg, in autocommit mode) speaking the shared dialect:
    `?` placeholders (rewritten to `%s` for psycopg), rows as dicts."""

    def __init__(self, raw: Any, *, pyformat: bool, readonly: bool = False) -> None:
        self.raw = raw
        self.pyformat = pyformat
        self.readonly = readonly

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.raw.execute(_pyformat(sql) if self.pyformat else sql, params)

    def executemany(self, sql: str, rows: Sequence[Iterable[Any]]) -> int:
        if not rows:
            return 0
        cursor = self.raw.cursor()
        try:
            cursor.executemany(_pyformat(sql) if self.pyformat else sql, rows)
            return int(cursor.rowcount)
        finally:
            cursor.close()

    def one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.execute(sql, params).fetchone()

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.execute(sql, params)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
