"""What a workspace reads, counted per workspace and never per person (a part of `Store`; `bot.trending`
decides what the counts mean to a user).

    record_related_open(team, item_id)            one more open of the item through Related, today
    most_saved(team, since, limit)    -> [(id, n)]    the items on most reading lists, saved since `since`
    most_liked(team, since, limit)    -> [(id, n)]    the items shown in the most answers 👍'd since `since`
    most_opened(team, since, limit)   -> [(id, n)]    the items opened most through Related, `since`'s day on
    published_between(start, end)     -> [text]       the items published in [start, end), newest first
    latest_published(before)          -> datetime     when the newest item before `before` was published

`related_opens` (m021) holds one counter per (workspace, day, item): who opened an item, and when in the day,
is never stored. A counter older than KEEP_DAYS is deleted whenever an open is recorded. Saves and votes are
read where they are kept (`saved_items`, `feedback`): an item taken off a reading list, or a 👍 changed to 👎,
no longer counts. Each list is ordered by its count, then by the latest activity, then by item id (the last
first): the same on both stores.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import from_iso, iso, utcnow

TRENDING_DDL = (  # m021_related_opens (both backends; then backfill_vote_items)
    "CREATE TABLE related_opens (team_id TEXT NOT NULL, day TEXT NOT NULL, item_id TEXT NOT NULL, "
    "opens INTEGER NOT NULL, PRIMARY KEY (team_id, day, item_id))",
    "CREATE INDEX related_opens_day ON related_opens (day)",
    "ALTER TABLE feedback ADD COLUMN item_ids TEXT",  # the items of the answer voted on, one a line
    # a workspace's opens, saves and votes in a window, read from an index alone (bench_store: trending)
    "CREATE INDEX related_opens_by_team ON related_opens (team_id, day, item_id, opens)",
    "CREATE INDEX saved_items_by_team ON saved_items (team_id, saved_at, item_id)",
    "CREATE INDEX feedback_by_team ON feedback (team_id, voted_at)",
)
KEEP_DAYS = 35  # days of Related counters kept (the window is 30)
MAX_VOTES = 2_000  # the newest 👍 of a workspace read for one count (each holds the answer's items as JSON)
MAX_MONTH = 1_000  # items of one month read for its topics


class TrendingMixin(StoreBase):
    """Counts of what a workspace saved, liked and opened; the items of a month."""

    def record_related_open(self, team_id: str, item_id: str, now: datetime | None = None) -> None:
        """Count one open of `item_id` through Related (the button or the command) in `team_id`, today."""
        now = now or utcnow()
        with self._write() as db:
            db.execute("DELETE FROM related_opens WHERE day < ?", [_day(now - timedelta(days=KEEP_DAYS))])
            db.execute(
                "INSERT INTO related_opens (team_id, day, item_id, opens) VALUES (?, ?, ?, 1) "
                "ON CONFLICT (team_id, day, item_id) DO UPDATE SET opens = related_opens.opens + 1",
                [team_id, _day(now), item_id])

    def most_saved(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items most people of `team_id` saved since `since` (and keep on their reading lists)."""
        with self.connect() as db:
            rows = db.execute("SELECT item_id, 1, saved_at FROM saved_items WHERE team_id = ? "
                              "AND saved_at >= ?", [team_id, iso(since)]).fetchall()
            return _top(rows, limit)

    def most_opened(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items of `team_id` opened most through Related from `since`'s day on."""
        with self.connect() as db:
            rows = db.execute("SELECT item_id, opens, day FROM related_opens WHERE team_id = ? AND day >= ?",
                              [team_id, _day(since)]).fetchall()
            return _top(rows, limit)

    def most_liked(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items shown in the most answers people of `team_id` gave 👍 since `since` (one per person and
        answer; their last vote counts), of the newest MAX_VOTES such votes."""
        with self.connect() as db:
            rows = db.execute(
                "SELECT item_ids, CASE WHEN item_ids IS NULL THEN shown END, voted_at FROM feedback "
                "WHERE team_id = ? AND voted_at >= ? AND vote = 'up' ORDER BY voted_at DESC LIMIT ?",
                [team_id, iso(since), MAX_VOTES]).fetchall()
            votes = ((i, 1, at) for ids, shown, at in rows
                     for i in (ids.split("\n") if ids else vote_items(shown)))
            return _top(votes, limit)

    def published_between(self, start: datetime, end: datetime, limit: int = MAX_MONTH) -> list[str]:
        """The texts (title, a line break, abstract) of the items published in [start, end), newest first (at
        most `limit`)."""
        with self.connect() as db:
            rows = db.rows(
                "SELECT title, summary FROM items WHERE published >= ? AND published < ? "
                "ORDER BY published DESC, pk DESC LIMIT ?", [iso(start), iso(end), limit])
        return [f"{r['title']}\n{r['summary'] or ''}" for r in rows]

    def latest_published(self, before: datetime) -> datetime | None:
        """When the newest item published before `before` was published (None: no such item)."""
        with self.connect() as db:
            row = db.one("SELECT max(published) FROM items WHERE published < ?", [iso(before)])
        return from_iso(row[0]) if row and row[0] else None


def _top(rows: Iterable[tuple[str, int, str]], n: int) -> list[tuple[str, int]]:
    """The `n` items of the most counts in `rows` (item id, count, when), ties the latest first, then by item
    id (the last first). Counted here from the rows, read at once (`fetchall`: psycopg's rows one by one
    cost more than the count), not by SQL: SQLite's GROUP BY sorts in a temporary B-tree, PostgreSQL's ORDER
    BY sorts text by its collation, and either costs more (bench_store: trending)."""
    counts: dict[str, int] = {}
    last: dict[str, str] = {}
    for item_id, count, at in rows:
        counts[item_id] = counts.get(item_id, 0) + count
        if at > last.get(item_id, ""):
            last[item_id] = at
    ranked = heapq.nlargest(n, counts, key=lambda i: (counts[i], last[i], i))
    return [(i, counts[i]) for i in ranked if i]


def _day(moment: datetime) -> str:
    """The UTC day of `moment`, as related_opens.day holds it ("2026-12-07")."""
    return str(iso(moment))[:10]


def vote_items(shown: object) -> list[str]:
    """The item ids of an answer's `shown` JSON ([{"id", "title", "link"}]), each once; [] when unreadable.
    A vote keeps them as `feedback.item_ids`, one a line, so a count reads no JSON."""
    try:
        value = json.loads(str(shown or "[]"))
    except ValueError:
        return []
    ids = [v.get("id") for v in value if isinstance(v, dict)] if isinstance(value, list) else []
    return [i for i in dict.fromkeys(ids) if isinstance(i, str) and i and "\n" not in i]


def backfill_vote_items(db: Conn) -> None:
    """m021: `feedback.item_ids` of the votes cast before it (both backends)."""
    rows = db.execute("SELECT team_id, channel_id, message_ts, user_id, shown FROM feedback").fetchall()
    db.executemany(
        "UPDATE feedback SET item_ids = ? WHERE team_id = ? AND channel_id = ? AND message_ts = ? "
        "AND user_id = ?",
        [["\n".join(vote_items(shown)), team, channel, ts, user] for team, channel, ts, user, shown in rows])
