"""The delivery ledger: a row per (item, channel), or per (item, person) for a follow's direct message,
queued at ingest as `bot.route` decided, claimed, settled as sent or failed, or released to be retried (a
part of `Store`)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from typing import Any

from bot.models import Delivery, DeliveryBatch, Route
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import iso, row_batch, row_delivery, utcnow

# m010_bursts (both backends): a burst's message is a row of `batches` (its own ledger row: claimed, settled,
# reconciled by its metadata); each delivery records the poll that queued it and the batch it is posted in.
BATCHES_DDL = (
    "CREATE TABLE batches (id TEXT PRIMARY KEY, team_id TEXT NOT NULL, channel_id TEXT NOT NULL, "
    "poll TEXT NOT NULL, size INTEGER NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
    "ts TEXT, error TEXT, created_at TEXT, updated_at TEXT, claimed_at TEXT)",
    "CREATE INDEX idx_batches_state ON batches (state)",
    "ALTER TABLE deliveries ADD COLUMN poll TEXT",
    "ALTER TABLE deliveries ADD COLUMN batch_id TEXT",
    "CREATE INDEX idx_deliveries_batch_id ON deliveries (batch_id)",
    "CREATE INDEX idx_deliveries_poll ON deliveries (poll)",
)


class LedgerMixin(StoreBase):
    """The delivery ledger: reading deliveries, claiming one, settling it."""

    def open_deliveries(self) -> list[Delivery]:
        """Every delivery not yet sent or failed, oldest first."""
        with self.connect() as db:
            sql = "SELECT * FROM deliveries WHERE state IN ('pending', 'posting') ORDER BY id"
            return [row_delivery(r) for r in db.rows(sql)]

    def deliveries(self, *, item_id: str | None = None, channel_id: str | None = None) -> list[Delivery]:
        clauses, params = [], []
        if item_id:
            clauses.append("item_id = ?")
            params.append(item_id)
        if channel_id:
            clauses.append("channel_id = ?")
            params.append(channel_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.connect() as db:
            return [row_delivery(r) for r in db.rows(f"SELECT * FROM deliveries {where} ORDER BY id", params)]

    def claim(self, delivery_id: int, expected_state: str = "pending", *, holder: str | None = None) -> bool:
        """Mark a delivery as being posted (its fate is unknown until mark_sent / mark_failed). Only one
        caller can claim a pending row; with `holder`, only while its channel's claim names that holder
        (bot.store.workers): a holder that lost its channel posts nothing more there."""
        with self._row_write() as db:
            return claim_row(db, "deliveries", delivery_id, expected_state, holder)

    def mark_sent(self, delivery_id: int, ts: str | None) -> None:
        self._settle(delivery_id, "sent", None, ts=ts)

    def mark_failed(self, delivery_id: int, reason: str) -> None:
        self._settle(delivery_id, "failed", reason)

    def release(self, delivery_id: int, reason: str) -> None:
        """Put a delivery back to pending (a transient failure: retried at the next poll)."""
        self._settle(delivery_id, "pending", reason)

    def _settle(
        self, delivery_id: int | str, state: str, error: str | None, *, ts: str | None = None,
        table: str = "deliveries",
    ) -> None:
        # A sent row stays sent: a process that lost its channel (its claims' session ended, it stalled past
        # its lease) and settles late must not put back a row another has posted since.
        with self._row_write() as db:  # one statement: no turn among the writers on PostgreSQL
            if state == "sent":
                db.execute(
                    f"UPDATE {table} SET state = 'sent', ts = ?, error = NULL, updated_at = ? "
                    "WHERE id = ? AND state <> 'sent'",
                    [ts, iso(utcnow()), delivery_id],
                )
            else:
                db.execute(
                    f"UPDATE {table} SET state = ?, error = ?, updated_at = ? WHERE id = ? "
                    "AND state IN ('pending', 'posting')",
                    [state, (error or "")[:500], iso(utcnow()), delivery_id],
                )

    # bursts -----------------------------------------------------------------------------------------------

    def form_batch(self, rows: Sequence[Delivery]) -> DeliveryBatch | None:
        """Make `rows` (one channel's open rows of one poll, none claimed yet) a burst: a pending batch row
        and each row's batch_id, in one transaction. Done only while the rows are the whole of what their
        poll queued for the channel and none has been tried, so a burst is decided once (the batch id
        derives from the poll and channel), and a row of an older poll, or one already tried alone, never
        joins one. Returns the batch, or None when the rows no longer qualify."""
        if not rows:
            return None
        first = rows[0]
        if first.poll is None:
            return None
        batch_id = batch_id_of(first.poll, first.team_id, first.channel_id)
        ids = [r.id for r in rows]
        now = iso(utcnow())
        with self._write() as db:
            siblings = db.rows(
                "SELECT id, state, attempts, batch_id FROM deliveries WHERE poll = ? AND team_id = ? "
                "AND channel_id = ?",
                [first.poll, first.team_id, first.channel_id],
            )
            untouched = all(r["state"] == "pending" and not r["attempts"] and r["batch_id"] is None
                            for r in siblings)
            if not untouched or sorted(int(r["id"]) for r in siblings) != sorted(ids):
                return None
            db.execute(
                "INSERT INTO batches (id, team_id, channel_id, poll, size, state, attempts, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?) ON CONFLICT DO NOTHING",
                [batch_id, first.team_id, first.channel_id, first.poll, len(ids), now, now],
            )
            db.executemany("UPDATE deliveries SET batch_id = ? WHERE id = ?", [[batch_id, i] for i in ids])
            found = db.rows("SELECT * FROM batches WHERE id = ?", [batch_id])
        return row_batch(found[0])

    def batches(
        self, ids: Sequence[str] | None = None, *, channel_id: str | None = None
    ) -> list[DeliveryBatch]:
        """Batch rows: those with `ids`, or a channel's, or all; oldest first."""
        clauses: list[str] = []
        params: list[Any] = []
        if ids is not None:
            if not ids:
                return []
            clauses.append(f"id IN ({', '.join('?' * len(ids))})")
            params.extend(ids)
        if channel_id:
            clauses.append("channel_id = ?")
            params.append(channel_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.connect() as db:
            sql = f"SELECT * FROM batches {where} ORDER BY created_at, id"
            return [row_batch(r) for r in db.rows(sql, params)]

    def close_orphan_batches(self) -> int:
        """Fail the open batches none of whose items is still open (their channel was unsubscribed, say):
        nothing is left to post under them."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE batches SET state = 'failed', error = 'no open items', updated_at = ? "
                "WHERE state IN ('pending', 'posting') AND NOT EXISTS (SELECT 1 FROM deliveries d "
                "WHERE d.batch_id = batches.id AND d.state IN ('pending', 'posting'))",
                [iso(utcnow())],
            )
            return int(cursor.rowcount or 0)

    def claim_batch(
        self, batch_id: str, expected_state: str = "pending", *, holder: str | None = None
    ) -> bool:
        """As `claim`, for a burst's message."""
        with self._row_write() as db:
            return claim_row(db, "batches", batch_id, expected_state, holder)

    def mark_batch_sent(self, batch_id: str, ts: str | None) -> None:
        self._settle(batch_id, "sent", None, ts=ts, table="batches")

    def mark_batch_failed(self, batch_id: str, reason: str) -> None:
        self._settle(batch_id, "failed", reason, table="batches")

    def release_batch(self, batch_id: str, reason: str) -> None:
        self._settle(batch_id, "pending", reason, table="batches")


def claim_row(
    db: Conn, table: str, row_id: int | str, expected_state: str, holder: str | None = None
) -> bool:
    """Mark a ledger row (a delivery, a burst's message, a digest) as being posted: state 'posting', one
    more attempt, claimed now. Only one caller can claim a row in `expected_state`; with `holder`, only while
    the row's channel claim (channel_claims) names that holder."""
    now = iso(utcnow())
    fence, params = "", [now, now, row_id, expected_state]
    if holder is not None:
        fence = (" AND EXISTS (SELECT 1 FROM channel_claims c WHERE c.team_id = "
                 f"{table}.team_id AND c.channel_id = {table}.channel_id AND c.worker_id = ?)")
        params.append(holder)
    cursor = db.execute(
        f"UPDATE {table} SET state = 'posting', attempts = attempts + 1, claimed_at = ?, updated_at = ? "
        f"WHERE id = ? AND state = ?{fence}",
        params,
    )
    return bool(cursor.rowcount == 1)


def batch_id_of(poll: str, team_id: str, channel_id: str) -> str:
    """The stable id of the burst of `poll` in a channel (it goes into the message's metadata)."""
    return hashlib.sha256(f"{poll}\x1f{team_id}\x1f{channel_id}".encode()).hexdigest()[:24]


def queue_routes(db: Conn, routes: Sequence[Route], now: str | None) -> int:
    """A pending delivery for every route to a channel or a person (`bot.route` decided them before the
    transaction); the ledger's unique (item, team, channel) index makes a second one impossible. Every
    channel row records this poll (a fresh id), by which the deliverer groups a burst; a person's row (a
    follow's direct message, target 'person', channel_id the user ID) has none. Channel rows are queued
    first, as they always were. Returns how many were queued."""
    poll = uuid.uuid4().hex
    queued = db.executemany(
        "INSERT INTO deliveries (item_id, team_id, channel_id, state, matched, attempts, created_at, "
        "updated_at, poll) VALUES (?, ?, ?, 'pending', ?, 0, ?, ?, ?) ON CONFLICT DO NOTHING",
        [[r.item_id, r.team_id, r.to, json.dumps(list(r.matched)), now, now, poll]
         for r in routes if r.target == "channel"],
    )
    return queued + db.executemany(
        "INSERT INTO deliveries (item_id, team_id, channel_id, target, state, matched, attempts, created_at, "
        "updated_at) VALUES (?, ?, ?, 'person', 'pending', ?, 0, ?, ?) ON CONFLICT DO NOTHING",
        [[r.item_id, r.team_id, r.to, json.dumps(list(r.matched)), now, now]
         for r in routes if r.target == "person"],
    )
