"""Worker processes sharing the delivery ledger (a part of `Store`): who is alive, which channel each serves,
and which workspaces Slack asked everyone to leave alone for a while.

    workers           a heartbeat row per running worker (`mlresearch-bot worker`): id, host, pid, the
                      database identity it saw at start, when it was last seen
    channel_claims    a row per (team, channel or person) that ever had open deliveries: the worker that
                      holds it and until when (its lease), and when it was last posted to (pacing survives
                      a hand-over from one worker to another)
    workspace_holds   a workspace's shared 429 backoff: no worker posts to it, nor claims its channels, before
                      `until`

A channel is served by one worker at a time: `claim_channels` takes channels with open rows that nobody
holds (PostgreSQL: `FOR UPDATE SKIP LOCKED`, so claiming workers pass each other instead of waiting),
`renew_claims` extends a live worker's leases, `release_channel` gives one back with the time of its last
post. A claim dies with its holder: on PostgreSQL each process claims through a `ClaimHolder`
(`hold_claims`), a database session of its own holding a session advisory lock named by the holder's id, and
a claim whose holder's lock is gone (the process was killed, its session ended) is free at once, however
long its lease; a live holder keeps a channel until it releases it or its lease ends (it stalled). The next
claimer reconciles the rows a dead holder left `posting` (bot.posting). A holder's row claims are fenced: a
row is claimed only while its channel's claim still names the holder (`claim(..., holder=)`). Times are
seconds since the epoch from the caller's clock (workers' clocks are NTP-synced; leases are tens of seconds).

The claim side of the ledger lives here; queuing rows (the write side) does not.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Any

from bot.errors import StoreError
from bot.models import Delivery
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import row_delivery

# m019_workers (both backends); {float} is the backend's double-precision type.
WORKERS_DDL = (
    "CREATE TABLE workers (id TEXT PRIMARY KEY, host TEXT, pid INTEGER, database TEXT, "
    "started_at {float}, seen_at {float})",
    "CREATE TABLE channel_claims (team_id TEXT NOT NULL, channel_id TEXT NOT NULL, worker_id TEXT, "
    "lease_until {float}, last_post {float}, PRIMARY KEY (team_id, channel_id))",
    "CREATE INDEX channel_claims_worker ON channel_claims (worker_id)",
    "CREATE TABLE workspace_holds (team_id TEXT PRIMARY KEY, until {float} NOT NULL)",
    "CREATE INDEX deliveries_open_channel ON deliveries (team_id, channel_id) "
    "WHERE state IN ('pending', 'posting')",
)
IDENTITY_KEY = "database_identity"  # meta: the identity `migrate` recorded (see bot.worker)
OPEN = "state IN ('pending', 'posting')"
# PostgreSQL: the session advisory lock of a claim holder is keyed by its id (a bigint under 2**62, so that
# pg_locks' classid and objid, its high and low halves, give it back without overflow) ...
HOLDER_KEY = "(hashtextextended({}, 0) & 4611686018427387903)"
# ... and the holders alive are those whose lock some session of this database holds now.
LIVE_HOLDERS = (
    "SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l WHERE l.locktype = 'advisory' "
    "AND l.objsubid = 1 AND l.granted AND l.database = (SELECT oid FROM pg_database "
    "WHERE datname = current_database())"
)


def _keys(keys: Iterable[tuple[str, str]], column: str = "channel_id") -> tuple[str, list[str]]:
    """A `(team_id, channel_id) IN (VALUES ...)` clause and its parameters (both backends)."""
    pairs = list(keys)
    values = ", ".join(["(?, ?)"] * len(pairs))
    return f"(team_id, {column}) IN (VALUES {values})", [v for pair in pairs for v in pair]


class ClaimHolder:
    """The database session a process's channel claims live and die with (`WorkersMixin.hold_claims`). On
    PostgreSQL: a connection of its own, never replaced, holding the session advisory lock of `id`; the
    server drops the lock when the session ends (the process was killed or crashed, the server restarted),
    and other processes then take its channels at once. Once its session is gone it stays lost: its claims
    may be anyone's, so nothing more may be posted under them. On SQLite (one process) it is always alive."""

    def __init__(self, holder_id: str, store: WorkersMixin | None = None, db: Conn | None = None) -> None:
        self.id = holder_id
        self._store, self._db = store, db
        self._lock = threading.Lock()  # alive() peeks at the socket: never while check() waits on it
        self.lost = False

    def alive(self) -> bool:
        """Whether the session still holds the lock, with no round trip: a session the server ended (a
        restart, a terminated backend) has said so on its socket. Never waits: while `check` is under way,
        what was last known."""
        if not self._lock.acquire(blocking=False):
            return not self.lost
        try:
            if not self.lost and self._store is not None and self._db is not None:
                self.lost = not self._store._usable(self._db)
            return not self.lost
        finally:
            self._lock.release()

    def check(self) -> bool:
        """As `alive`, by a round trip: a session that broke without a word fails it too (one cut off by the
        network may keep it waiting; its leases then run out, and the holder posts nothing more)."""
        with self._lock:
            if not self.lost and self._store is not None and self._db is not None:
                try:
                    self._db.one("SELECT 1")
                except self._store._errors:
                    self.lost = True
            return not self.lost

    def close(self) -> None:
        """Give up the lock and end the session; the holder is lost from now on."""
        if not self._lock.acquire(timeout=1.0):  # a check stuck on a cut network: the server ends it
            self.lost = True
            return
        try:
            if self._store is not None and self._db is not None:
                if not self.lost:  # at once: the server ends a closed session's backend a moment later
                    with suppress(*self._store._errors):
                        self._db.one(f"SELECT pg_advisory_unlock({HOLDER_KEY.format('?')})", [self.id])
                self._store._release(self._db, False)
            self.lost, self._db = True, None
        finally:
            self._lock.release()


class WorkersMixin(StoreBase):
    """Heartbeats, channel claims with leases tied to their holder's session, shared workspace holds."""

    def database_identity(self) -> str:
        """What names this database apart from a copy of it (a backend fills it)."""
        raise NotImplementedError

    def hold_claims(self, holder_id: str) -> ClaimHolder:
        """A `ClaimHolder` for `holder_id` (unique: host, pid, random), for claiming channels with
        `claim_channels`; close it when done. PostgreSQL: a new session takes the holder's lock."""
        if self.backend != "postgres":
            return ClaimHolder(holder_id)
        db = self._open(False)
        try:
            held = db.one(f"SELECT pg_try_advisory_lock({HOLDER_KEY.format('?')})", [holder_id])[0]
        except self._errors as exc:
            failure = self._failure(db, exc)
            self._release(db, False)
            raise failure from exc
        if not held:
            self._release(db, False)
            raise StoreError(f"{self.describe()}: another session holds the claims of {holder_id}")
        return ClaimHolder(holder_id, self, db)

    def _holder_alive(self, column: str) -> str:
        """SQL true when the holder named in `column` holds its lock (PostgreSQL), or always (SQLite)."""
        if self.backend != "postgres":
            return "1 = 1"
        return f"{HOLDER_KEY.format(column)} IN ({LIVE_HOLDERS})"

    # heartbeats -------------------------------------------------------------------------------------------

    def heartbeat(self, worker_id: str, *, host: str, pid: int, database: str, now: float) -> None:
        """Record (or refresh) a worker's heartbeat row."""
        with self._write() as db:
            db.execute(
                "INSERT INTO workers (id, host, pid, database, started_at, seen_at) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at",
                [worker_id, host, pid, database, now, now],
            )

    def live_workers(self, now: float, within: float) -> list[dict[str, Any]]:
        """The workers seen in the last `within` seconds whose claim holder is alive (PostgreSQL: a worker
        killed a moment ago is not one): id, host, pid, database, started_at, seen_at."""
        with self.connect() as db:
            return db.rows(f"SELECT * FROM workers WHERE seen_at >= ? AND {self._holder_alive('id')} "
                           "ORDER BY started_at, id", [now - within])

    def forget_worker(self, worker_id: str, *, before: float | None = None) -> None:
        """Drop a worker's heartbeat (it stopped), and every heartbeat last seen before `before`."""
        with self._write() as db:
            db.execute("DELETE FROM workers WHERE id = ?", [worker_id])
            if before is not None:
                db.execute("DELETE FROM workers WHERE seen_at < ?", [before])

    # channel claims ---------------------------------------------------------------------------------------

    def discover_channels(self, skip_team: str) -> int:
        """A claim row for every channel with open deliveries that has none yet (outside `skip_team`)."""
        with self._write() as db:
            return int(db.execute(
                "INSERT INTO channel_claims (team_id, channel_id) SELECT DISTINCT team_id, channel_id "
                f"FROM deliveries WHERE {OPEN} AND team_id <> ? ON CONFLICT DO NOTHING", [skip_team],
            ).rowcount or 0)

    def claim_channels(
        self, worker_id: str, limit: int, *, now: float, lease: float
    ) -> list[tuple[str, str, float | None]]:
        """Claim up to `limit` channels for the holder `worker_id` that have open deliveries, are held by
        nobody (released, their lease ended, or their holder's session gone) and whose workspace is not on
        hold: (team_id, channel_id, last post time or None) of each. Exactly one worker gets a channel; on
        PostgreSQL a channel another is claiming right now is skipped, not waited for. In no particular order
        (the order claim rows were made: channels of many workspaces mixed), so the scan stops at `limit`
        however many channels are waiting."""
        skip = " FOR UPDATE SKIP LOCKED" if self.backend == "postgres" else ""
        holder_alive = self._holder_alive("c.worker_id")
        with self._row_write() as db:
            rows = db.rows(
                "UPDATE channel_claims SET worker_id = ?, lease_until = ? WHERE (team_id, channel_id) IN ("
                "SELECT c.team_id, c.channel_id FROM channel_claims c "
                f"WHERE (c.worker_id IS NULL OR c.lease_until < ? OR NOT {holder_alive}) "
                "AND NOT EXISTS (SELECT 1 FROM workspace_holds h WHERE h.team_id = c.team_id "
                "AND h.until > ?) "
                "AND EXISTS (SELECT 1 FROM deliveries d WHERE d.team_id = c.team_id "
                f"AND d.channel_id = c.channel_id AND d.{OPEN}) "
                f"LIMIT ?{skip}) "
                "RETURNING team_id, channel_id, last_post",
                [worker_id, now + lease, now, now, limit],
            )
        return [(r["team_id"], r["channel_id"], r["last_post"]) for r in rows]

    def renew_claims(self, worker_id: str, *, now: float, lease: float) -> set[tuple[str, str]]:
        """Extend the leases `worker_id` still holds; returns the channels it holds."""
        with self._row_write() as db:
            rows = db.rows(
                "UPDATE channel_claims SET lease_until = ? WHERE worker_id = ? RETURNING team_id, channel_id",
                [now + lease, worker_id],
            )
        return {(r["team_id"], r["channel_id"]) for r in rows}

    def release_channel(self, worker_id: str, team_id: str, channel_id: str, last_post: float | None) -> None:
        """Give a channel back (when it still is `worker_id`'s), keeping the time of its last post."""
        with self._row_write() as db:
            db.execute(
                "UPDATE channel_claims SET worker_id = NULL, lease_until = NULL, "
                "last_post = COALESCE(?, last_post) WHERE team_id = ? AND channel_id = ? AND worker_id = ?",
                [last_post, team_id, channel_id, worker_id],
            )

    def release_all(self, worker_id: str) -> int:
        """Give back every channel `worker_id` holds (it is stopping)."""
        with self._row_write() as db:
            return int(db.execute(
                "UPDATE channel_claims SET worker_id = NULL, lease_until = NULL WHERE worker_id = ?",
                [worker_id],
            ).rowcount or 0)

    def held_channels(self) -> list[dict[str, Any]]:
        """Every claim row held by a worker (team_id, channel_id, worker_id, lease_until, last_post)."""
        with self.connect() as db:
            return db.rows(
                "SELECT * FROM channel_claims WHERE worker_id IS NOT NULL ORDER BY team_id, channel_id"
            )

    def held_by_others(self, worker_id: str, now: float, skip_team: str) -> int:
        """How many open deliveries (outside `skip_team`) are in channels another live holder keeps: its
        lease not ended, its session alive."""
        with self.connect() as db:
            return int(db.one(
                "SELECT count(*) FROM deliveries d JOIN channel_claims c ON c.team_id = d.team_id AND "
                f"c.channel_id = d.channel_id WHERE d.{OPEN} AND d.team_id <> ? AND c.worker_id <> ? "
                f"AND c.lease_until >= ? AND {self._holder_alive('c.worker_id')}",
                [skip_team, worker_id, now],
            )[0])

    def count_open(self, skip_team: str) -> int:
        """How many deliveries (outside `skip_team`) are open."""
        with self.connect() as db:
            sql = f"SELECT count(*) FROM deliveries WHERE {OPEN} AND team_id <> ?"
            return int(db.one(sql, [skip_team])[0])

    def open_deliveries_of(self, keys: Sequence[tuple[str, str]]) -> list[Delivery]:
        """The open deliveries of these (team, channel) pairs, oldest first."""
        if not keys:
            return []
        clause, params = _keys(keys)
        with self.connect() as db:
            sql = f"SELECT * FROM deliveries WHERE {OPEN} AND {clause} ORDER BY id"
            return [row_delivery(r) for r in db.rows(sql, params)]

    def active_targets(self, keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these (team, channel or user) pairs may be sent to: an unpaused subscription, or a person
        following at least one keyword."""
        if not keys:
            return set()
        clause, params = _keys(keys)
        with self.connect() as db:
            subs = db.rows(
                f"SELECT team_id, channel_id FROM subscriptions WHERE {clause} AND COALESCE(paused, 0) = 0",
                params,
            )
            people = db.rows(
                "SELECT DISTINCT team_id, user_id AS channel_id FROM follows "
                f"WHERE {_keys(keys, 'user_id')[0]}",
                params,
            )
        return {(r["team_id"], r["channel_id"]) for r in [*subs, *people]}

    # workspace holds (shared 429 backoff) ---------------------------------------------------------------

    def hold_workspace(self, team_id: str, until: float) -> None:
        """No worker posts to `team_id` before `until` (a later hold wins)."""
        with self._row_write() as db:
            db.execute(
                "INSERT INTO workspace_holds (team_id, until) VALUES (?, ?) ON CONFLICT (team_id) DO UPDATE "
                "SET until = excluded.until WHERE workspace_holds.until < excluded.until",
                [team_id, until],
            )

    def workspace_holds(self, now: float) -> dict[str, float]:
        """The workspaces on hold at `now`, and until when."""
        with self.connect() as db:
            rows = db.rows("SELECT team_id, until FROM workspace_holds WHERE until > ?", [now])
        return {r["team_id"]: float(r["until"]) for r in rows}
