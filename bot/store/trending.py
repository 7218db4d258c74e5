"""What a workspace reads, counted per workspace and never per person (a part of `Store`; `bot.trending`
decides what the counts mean to a user).

    reading(team, since, month, limit) -> Reading  the three counts below (`limit` items each), the items
                                                   they name, the texts of `month`'s items (of the latest
                                                   month with items while it has none); kept (see below)
    record_related_open(team, item_id)             one more open of the item through Related, today
    most_saved(team, since, limit)  -> [(id, n)]   the items on most reading lists, saved since `since`
    most_liked(team, since, limit)  -> [(id, n)]   the items shown in the most answers 👍'd since `since`
    most_opened(team, since, limit) -> [(id, n)]   the items opened most through Related, `since`'s day on

`related_opens` (m021) holds one counter per (workspace, day, item): who opened an item, and when in the day,
is never stored. A counter older than KEEP_DAYS is deleted whenever an open is recorded. Saves and votes are
read where they are kept (`saved_items`, `feedback`): an item taken off a reading list, or a 👍 changed to 👎,
no longer counts. Each count reads the newest MAX_ROWS rows of its kind in the window (a workspace saving more
than that in 30 days is counted over its newest saves), and is ordered by its count, then by the latest
activity, then by item id (the last first): the same on both stores.

Kept: a process keeps each workspace's latest reading (of KEPT_TEAMS workspaces at most; the month's texts
once for all) and gives each of its parts again while a read would find the same, which one query of two key
lookups tells: the workspace's marks in `trending_marks` (m022), one a kind, each moved in the writer's
transaction by triggers on its table (`saved_items`, `feedback`, `related_opens`) whatever process or release
writes, so a save counts in every process's next call; the archive's change marker (`search_generation`: the
items named, the month's texts); and no row of the window read has left it since (`Counted.serves`). A save
costs the next call the saves' count alone.
"""

from __future__ import annotations

import heapq
import json
import operator
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from msgspec import Struct
from msgspec.structs import replace

from bot.models import Item
from bot.store.archive import ITEM_COLUMNS
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.merge import marks
from bot.store.models import from_iso, iso, row_item, utcnow

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
MARKED = {"saved_items": "saved", "feedback": "liked", "related_opens": "opened"}  # table: its mark
MARKS_TABLE = ("CREATE TABLE trending_marks (team_id TEXT PRIMARY KEY, saved BIGINT NOT NULL DEFAULT 0, "
               "liked BIGINT NOT NULL DEFAULT 0, opened BIGINT NOT NULL DEFAULT 0)")
KEEP_DAYS = 35  # days of Related counters kept (the window is 30)
MAX_ROWS = 2_000  # the newest saves, 👍 and Related counters of a workspace read for one count
MAX_MONTH = 1_000  # items of one month read for its topics
KEPT_TEAMS = 500  # workspaces whose latest reading a process keeps
NONE_YET = "~"  # after every ISO time and day: no row counted, so no row can leave the window


def sqlite_marks_ddl() -> list[str]:
    """m022 on SQLite: the marks, and a trigger per table and change that moves the row's workspace's."""
    bump = ("INSERT INTO trending_marks (team_id, {mark}) VALUES ({row}.team_id, 1) "
            "ON CONFLICT (team_id) DO UPDATE SET {mark} = {mark} + 1")
    return [MARKS_TABLE, *(
        f"CREATE TRIGGER {table}_mark_{event.lower()} AFTER {event} ON {table} BEGIN "
        f"{bump.format(mark=mark, row='OLD' if event == 'DELETE' else 'NEW')}; END"
        for table, mark in MARKED.items() for event in ("INSERT", "UPDATE", "DELETE"))]


def postgres_marks_ddl() -> list[str]:
    """m022 on PostgreSQL: the marks, and a trigger per table and change that moves each changed workspace's
    once a statement (a row trigger would stack a version of the mark's row per row a long transaction
    changes: 100,000 saves inserted in one took 76 s, against 2 s)."""
    functions = [
        f"CREATE FUNCTION trending_mark_{mark}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO trending_marks (team_id, {mark}) SELECT DISTINCT team_id, 1 FROM changed "
        f"ON CONFLICT (team_id) DO UPDATE SET {mark} = trending_marks.{mark} + 1; RETURN NULL; END $$"
        for mark in MARKED.values()]
    return [MARKS_TABLE, *functions, *(
        f"CREATE TRIGGER {table}_mark_{event.lower()} AFTER {event} ON {table} REFERENCING "
        f"{'OLD' if event == 'DELETE' else 'NEW'} TABLE AS changed FOR EACH STATEMENT "
        f"EXECUTE FUNCTION trending_mark_{mark}()"
        for table, mark in MARKED.items() for event in ("INSERT", "UPDATE", "DELETE"))]


class Reading(Struct, frozen=True):
    """A workspace's counts over a window, the items they name, and a month's texts."""

    saved: Sequence[tuple[str, int]]  # (item id, count), most first
    liked: Sequence[tuple[str, int]]
    opened: Sequence[tuple[str, int]]
    items: Mapping[str, Item]  # the counted items still archived
    month: datetime  # the first instant (UTC) of the month `texts` are of
    texts: Sequence[str]  # the month's items (title, a line break, abstract), newest first
    latest: bool  # `month` is not the one asked but the latest before it with items


class Counted(Struct, frozen=True):
    """One count as read (`_saved`, `_liked`, `_opened`), and what it holds for."""

    top: list[tuple[str, int]]  # (item id, count), most first
    floor: str  # the oldest time (a day, for Related) of the window read; NONE_YET if none
    mark: int = -1  # the kind's mark, read before the count
    since: datetime | None = None
    by_day: bool = False

    def serves(self, mark: int, since: datetime) -> bool:
        """Whether a count under `mark` from `since` would find the same: nothing written since, and the
        window moved on (never back) by no more than its oldest row allows (the rows counted are the
        window's newest, so the same ones while none of the window has left it)."""
        return (mark == self.mark and self.since is not None and self.since <= since
                and (day_of(since) if self.by_day else str(iso(since))) <= self.floor)


class Kept(Struct, frozen=True):
    """A workspace's latest reading, its counts as read, and the archive's change marker it was read under."""

    counts: tuple[Counted, ...]  # saved, liked, opened
    generation: int
    limit: int
    asked: datetime  # the month asked
    reading: Reading


class TrendingMixin(StoreBase):
    """Counts of what a workspace saved, liked and opened; the items of a month; a process's kept readings."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: dict[str, Kept] = {}  # shared by this store's sessions and thread views (copies)
        self._months: dict[tuple[datetime, int], tuple[datetime, list[str], bool]] = {}
        self._kept_lock = threading.Lock()

    def record_related_open(self, team_id: str, item_id: str, now: datetime | None = None) -> None:
        """Count one open of `item_id` through Related (the button or the command) in `team_id`, today."""
        now = now or utcnow()
        with self._write() as db:
            db.execute("DELETE FROM related_opens WHERE day < ?", [day_of(now - timedelta(days=KEEP_DAYS))])
            db.execute(
                "INSERT INTO related_opens (team_id, day, item_id, opens) VALUES (?, ?, ?, 1) "
                "ON CONFLICT (team_id, day, item_id) DO UPDATE SET opens = related_opens.opens + 1",
                [team_id, day_of(now), item_id])

    def reading(self, team_id: str, since: datetime, month: datetime, limit: int) -> Reading:
        """`team_id`'s `limit` most saved, liked and opened items since `since` and the items they name; the
        texts of the items published in `month` (the first instant of a month, UTC), or while it has none, in
        the latest month before it that has. One query while the kept reading serves (see the module
        docstring); then a query for each count that may have changed, and one for the items when the
        archive changed or a count names an item the kept reading does not (two or three for the month)."""
        with self.connect() as db:
            row = db.one("SELECT m.saved, m.liked, m.opened, g.n FROM search_generation AS g "
                         "LEFT JOIN trending_marks AS m ON m.team_id = ?", [team_id])
            marks_now, generation = [int(v or 0) for v in row[:3]], int(row[3])
            kept = self._kept.get(team_id)
            if kept is None or kept.limit != limit:
                kept = None
            old = kept.counts if kept is not None else (None, None, None)
            counts = tuple(
                was if was is not None and was.serves(mark, since)
                else replace(count(db, team_id, since, limit, self._bytes), mark=mark, since=since,
                             by_day=count is _opened)
                for was, mark, count in zip(old, marks_now, (_saved, _liked, _opened), strict=True))
            if kept is not None and kept.generation != generation:
                kept = None  # the items named and the month's texts may have changed
            if kept is not None and kept.asked == month and all(map(operator.is_, counts, old)):
                return kept.reading
            shown_month, texts, latest = self._month(db, month, generation)
            wanted = list(dict.fromkeys(i for c in counts for i, _n in c.top))
            if kept is not None and all(i in kept.reading.items for i in wanted):
                items = kept.reading.items
            else:
                sql = f"SELECT {ITEM_COLUMNS} FROM items WHERE id IN ({marks(len(wanted))})"
                items = {r["id"]: row_item(r) for r in db.rows(sql, wanted)} if wanted else {}
        saved, liked, opened = (c.top for c in counts)
        reading = Reading(saved, liked, opened, items, shown_month, texts, latest)
        with self._kept_lock:
            if team_id not in self._kept and len(self._kept) >= KEPT_TEAMS:
                del self._kept[next(iter(self._kept))]  # the workspace kept longest
            self._kept[team_id] = Kept(counts, generation, limit, month, reading)
        return reading

    def _month(self, db: Conn, month: datetime, generation: int) -> tuple[datetime, list[str], bool]:
        """(the month, its items' texts, whether it is the latest with items before `month`), kept for the
        archive's `generation` (one month kept: every workspace asks about the same)."""
        known = self._months.get((month, generation))
        if known is not None:
            return known
        shown, latest = month, False
        texts = _published(db, month)
        if not texts:  # nothing yet this month: the latest month with items
            row = db.one("SELECT max(published) FROM items WHERE published < ?", [iso(month)])
            before = from_iso(row[0]) if row and row[0] else None
            if before is not None:
                shown, latest = month_of(before), True
                texts = _published(db, shown)
        with self._kept_lock:
            self._months.clear()
            self._months[(month, generation)] = (shown, texts, latest)
        return shown, texts, latest

    @property
    def _bytes(self) -> str:
        """The collation that compares text as bytes (as Python compares str), whatever the database's."""
        return '"C"' if self.backend == "postgres" else "BINARY"

    def most_saved(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items most people of `team_id` saved since `since` (and keep on their reading lists)."""
        with self.connect() as db:
            return _saved(db, team_id, since, limit, self._bytes).top

    def most_opened(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items of `team_id` opened most through Related from `since`'s day on."""
        with self.connect() as db:
            return _opened(db, team_id, since, limit, self._bytes).top

    def most_liked(self, team_id: str, since: datetime, limit: int) -> list[tuple[str, int]]:
        """The items shown in the most answers people of `team_id` gave 👍 since `since` (one per person and
        answer; their last vote counts)."""
        with self.connect() as db:
            return _liked(db, team_id, since, limit, self._bytes).top


# Each count: the top `limit` and the oldest time or day of the window. Saves and Related counters are counted
# by the database, over the newest MAX_ROWS rows of the window read from an index (a sort of the items'
# groups, item ids compared as bytes on both stores); votes in Python, from each vote's items kept one a line.
# The oldest row is the window's, read from the index: the oldest counted when no more than MAX_ROWS are,
# an earlier one otherwise (the count is then read again sooner than it needs to be; SQLite's window
# function `min(min(at)) OVER ()`, exact, cost 3 times the count).
_TOP = ("SELECT item_id, {n} AS n, max({at}) AS at, (SELECT min({at}) FROM {table} WHERE team_id = ? AND "
        "{at} >= ?) FROM (SELECT item_id, {at}{more} FROM {table} WHERE team_id = ? AND {at} >= ? "
        "ORDER BY {at} DESC, item_id DESC LIMIT ?) AS newest "
        "GROUP BY item_id ORDER BY n DESC, at DESC, item_id COLLATE {binary} DESC LIMIT ?")


def _grouped(db: Conn, sql: str, team_id: str, since: str, limit: int) -> Counted:
    rows = db.execute(sql, [team_id, since, team_id, since, MAX_ROWS, limit]).fetchall()
    return Counted([(str(r[0]), int(r[1])) for r in rows], str(rows[0][3]) if rows else NONE_YET)


def _saved(db: Conn, team_id: str, since: datetime, limit: int, binary: str) -> Counted:
    sql = _TOP.format(n="count(*)", at="saved_at", more="", table="saved_items", binary=binary)
    return _grouped(db, sql, team_id, str(iso(since)), limit)


def _opened(db: Conn, team_id: str, since: datetime, limit: int, binary: str) -> Counted:
    sql = _TOP.format(n="sum(opens)", at="day", more=", opens", table="related_opens", binary=binary)
    return _grouped(db, sql, team_id, day_of(since), limit)


def _liked(db: Conn, team_id: str, since: datetime, limit: int, binary: str) -> Counted:  # noqa: ARG001
    rows = db.execute(
        "SELECT item_ids, CASE WHEN item_ids IS NULL THEN shown END, voted_at FROM feedback "
        "WHERE team_id = ? AND voted_at >= ? AND vote = 'up' ORDER BY voted_at DESC LIMIT ?",
        [team_id, iso(since), MAX_ROWS]).fetchall()
    votes = ((i, 1, at) for ids, shown, at in rows for i in (ids.split("\n") if ids else vote_items(shown)))
    return Counted(_top(votes, limit), str(rows[-1][2]) if rows else NONE_YET)


def _published(db: Conn, month: datetime) -> list[str]:
    """The texts (title, a line break, abstract) of the items published in `month`, newest first (at most
    MAX_MONTH)."""
    rows = db.rows("SELECT title, summary FROM items WHERE published >= ? AND published < ? "
                   "ORDER BY published DESC, pk DESC LIMIT ?",
                   [iso(month), iso(next_month(month)), MAX_MONTH])
    return [f"{r['title']}\n{r['summary'] or ''}" for r in rows]


def _top(rows: Iterable[tuple[str, int, str]], n: int) -> list[tuple[str, int]]:
    """The `n` items of the most counts in `rows` (item id, count, when), ties the latest first, then by item
    id (the last first). Counted from the rows read at once (`fetchall`: psycopg's rows one by one cost more
    than the count)."""
    counts: dict[str, int] = {}
    last: dict[str, str] = {}
    for item_id, count, at in rows:
        counts[item_id] = counts.get(item_id, 0) + count
        if at > last.get(item_id, ""):
            last[item_id] = at
    ranked = heapq.nlargest(n, counts, key=lambda i: (counts[i], last[i], i))
    return [(i, counts[i]) for i in ranked if i]


def day_of(moment: datetime) -> str:
    """The UTC day of `moment`, as related_opens.day holds it ("2026-12-07")."""
    return str(iso(moment))[:10]


def month_of(moment: datetime) -> datetime:
    """The first instant (UTC) of `moment`'s month."""
    return moment.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def next_month(month: datetime) -> datetime:
    return (month + timedelta(days=32)).replace(day=1)


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
