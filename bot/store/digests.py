"""Digest subscriptions (a part of `Store`): a channel's digest schedule, the items waiting for its next
digest (queued at ingest, as the delivery ledger's rows are), and the digest ledger, one row per (channel,
period), claimed before its message is posted (`bot.digest` decides when a period is due and posts it).

A row's life: `start_digest` inserts it already `posting` (the claim) and, in the same transaction, gives it
every item of the channel still waiting that arrived before the period's end; with none it is `empty` and
nothing is posted. Then `mark_digest_sent` (with the message's ts), `release_digest` (back to `pending`: not
posted, try at the next poll), or `mark_digest_failed`. A row found `posting` when a run starts was claimed by
a process that died: the channel's history says whether its message went out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime

from bot.models import Digest, Item, Route, Subscription
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.ledger import claim_row, queue_routes
from bot.store.models import iso, row_digest, row_item, row_subscription, utcnow

# m011_digests, for both backends: {id} is the backend's own key column, {ref} its integer type.
DIGEST_SCHEMA = (
    "ALTER TABLE subscriptions ADD COLUMN digest TEXT",
    "ALTER TABLE subscriptions ADD COLUMN digest_at TEXT",
    "ALTER TABLE subscriptions ADD COLUMN digest_tz TEXT",
    "ALTER TABLE subscriptions ADD COLUMN digest_since TEXT",
    "CREATE TABLE digests (id {id}, team_id TEXT NOT NULL, channel_id TEXT NOT NULL, period TEXT NOT NULL, "
    "starts TEXT, ends TEXT NOT NULL, state TEXT NOT NULL, items INTEGER NOT NULL DEFAULT 0, "
    "attempts INTEGER NOT NULL DEFAULT 0, ts TEXT, error TEXT, claimed_at TEXT, created_at TEXT, "
    "updated_at TEXT)",
    "CREATE UNIQUE INDEX digests_period ON digests (team_id, channel_id, period)",
    "CREATE TABLE digest_items (team_id TEXT NOT NULL, channel_id TEXT NOT NULL, item_id TEXT NOT NULL, "
    "matched TEXT, arrived_at TEXT NOT NULL, digest_id {ref}, PRIMARY KEY (team_id, channel_id, item_id))",
    "CREATE INDEX digest_items_digest ON digest_items (digest_id)",
)
DONE = ("sent", "failed", "empty")


class DigestsMixin(StoreBase):
    """Digest schedules, the items waiting for a digest, the digest ledger."""

    def set_digest(
        self, team_id: str, channel_id: str, mode: str | None, at: str = "09:00", tz: str = "UTC",
        now: datetime | None = None,
    ) -> Subscription | None:
        """Make a channel's subscription a digest (`mode` "daily" or "weekly", at `at` local time in `tz`),
        or, with `mode` None, one post per item again: the items that were waiting for its next digest are
        then queued to be posted one by one. A new or changed schedule counts from `now` (no digest is due
        before it); turning a digest on starts with no items waiting. None if the channel isn't subscribed."""
        stamp = iso(now or utcnow())
        with self._write() as db:
            sub = _subscription(db, team_id, channel_id)
            if sub is None:
                return None
            if mode is None:
                if sub.digest is not None:
                    _items_to_deliveries(db, sub, stamp)
                db.execute(
                    "UPDATE subscriptions SET digest = NULL, digest_at = NULL, digest_tz = NULL, "
                    "digest_since = NULL WHERE team_id = ? AND channel_id = ?", [team_id, channel_id],
                )
            else:
                if sub.digest is None:  # left over from an earlier digest subscription: not this one's
                    db.execute(
                        "DELETE FROM digest_items WHERE team_id = ? AND channel_id = ? AND digest_id IS NULL",
                        [team_id, channel_id],
                    )
                same = (sub.digest, sub.digest_at, sub.digest_tz) == (mode, at, tz)
                since = iso(sub.digest_since) if same and sub.digest_since else stamp
                db.execute(
                    "UPDATE subscriptions SET digest = ?, digest_at = ?, digest_tz = ?, digest_since = ? "
                    "WHERE team_id = ? AND channel_id = ?", [mode, at, tz, since, team_id, channel_id],
                )
            return _subscription(db, team_id, channel_id)

    def digest_subscriptions(self) -> list[Subscription]:
        """Every digest subscription that receives items: not paused, its workspace not disabled."""
        with self.connect() as db:
            return [
                row_subscription(r)
                for r in db.rows(
                    "SELECT * FROM subscriptions WHERE digest IS NOT NULL AND paused = 0 "
                    "AND team_id NOT IN (SELECT team_id FROM workspaces) ORDER BY created_at, channel_id"
                )
            ]

    def waiting_digest_items(self, team_id: str, channel_id: str) -> list[str]:
        """The ids of the items waiting for the channel's next digest, in arrival order."""
        with self.connect() as db:
            rows = db.rows(
                "SELECT item_id FROM digest_items WHERE team_id = ? AND channel_id = ? AND digest_id IS NULL "
                "ORDER BY arrived_at, item_id", [team_id, channel_id],
            )
            return [r["item_id"] for r in rows]

    # the digest ledger ------------------------------------------------------------------------------

    def get_digest(self, team_id: str, channel_id: str, period: str) -> Digest | None:
        with self.connect() as db:
            return _digest(db, team_id, channel_id, period)

    def digests(self, team_id: str | None = None, channel_id: str | None = None) -> list[Digest]:
        clauses, params = [], []
        if team_id is not None:
            clauses.append("team_id = ?")
            params.append(team_id)
        if channel_id is not None:
            clauses.append("channel_id = ?")
            params.append(channel_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        with self.connect() as db:
            return [row_digest(r) for r in db.rows(f"SELECT * FROM digests {where} ORDER BY id", params)]

    def start_digest(
        self, team_id: str, channel_id: str, period: str, starts: datetime | None, ends: datetime
    ) -> tuple[Digest, bool]:
        """Claim the channel's digest for `period` (ending at `ends`): in one transaction, a ledger row in
        state `posting` holding every waiting item that arrived before `ends` (also those of periods missed
        while no digester ran: its `starts` is then the first one's arrival), or `empty` when there is none.
        Only one caller can create it; returns (the row, whether this call created it). Its claim time is
        the wall clock's (what the channel's history is read from if the post's fate is lost)."""
        stamp = iso(utcnow())
        with self._write() as db:
            existing = _digest(db, team_id, channel_id, period)
            if existing is not None:
                return existing, False
            row = db.one(
                "INSERT INTO digests (team_id, channel_id, period, starts, ends, state, items, attempts, "
                "claimed_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'posting', 0, 1, ?, ?, ?) "
                "ON CONFLICT DO NOTHING RETURNING id",
                [team_id, channel_id, period, iso(starts), iso(ends), stamp, stamp, stamp],
            )
            if row is None:  # writers take turns, so only if the row appeared between the two statements
                again = _digest(db, team_id, channel_id, period)
                assert again is not None
                return again, False
            digest_id = int(row[0])
            cursor = db.execute(
                "UPDATE digest_items SET digest_id = ? WHERE team_id = ? AND channel_id = ? "
                "AND digest_id IS NULL AND arrived_at < ?", [digest_id, team_id, channel_id, iso(ends)],
            )
            count = int(cursor.rowcount)
            # A digest catching up after missed periods says from when its items are (not its period's start)
            earliest = db.one("SELECT MIN(arrived_at) FROM digest_items WHERE digest_id = ?", [digest_id])
            begins = iso(starts)
            if earliest and earliest[0] and begins and earliest[0] < begins:
                begins = str(earliest[0])
            db.execute(
                "UPDATE digests SET items = ?, state = ?, starts = ? WHERE id = ?",
                [count, "posting" if count else "empty", begins, digest_id],
            )
            created = _digest(db, team_id, channel_id, period)
        assert created is not None
        return created, True

    def claim_digest(self, digest_id: int, expected_state: str) -> bool:
        """Mark a digest as being posted again (a row released to `pending`, or one of unknown fate that the
        channel's history does not show). Only one caller can claim it."""
        with self._write() as db:
            return claim_row(db, "digests", digest_id, expected_state)

    def digest_contents(self, digest_id: int) -> list[tuple[Item, tuple[str, ...]]]:
        """The items of a digest with the keywords each matched, newest first (items no longer in the
        archive are left out)."""
        with self.connect() as db:
            rows = db.rows(
                "SELECT items.*, digest_items.matched AS digest_matched FROM digest_items "
                "JOIN items ON items.id = digest_items.item_id WHERE digest_items.digest_id = ? "
                "ORDER BY items.published DESC, items.pk DESC", [digest_id],
            )
        return [(row_item(r), tuple(json.loads(r["digest_matched"] or "[]"))) for r in rows]

    def mark_digest_sent(self, digest_id: int, ts: str | None) -> None:
        self._settle_digest(digest_id, "sent", None, ts)

    def mark_digest_failed(self, digest_id: int, reason: str) -> None:
        self._settle_digest(digest_id, "failed", reason)

    def release_digest(self, digest_id: int, reason: str) -> None:
        """Back to `pending`: the message was not posted (rate limited); the next poll posts it."""
        self._settle_digest(digest_id, "pending", reason)

    def _settle_digest(self, digest_id: int, state: str, error: str | None, ts: str | None = None) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE digests SET state = ?, ts = coalesce(?, ts), error = ?, updated_at = ? WHERE id = ?",
                [state, ts, (error or "")[:500] or None, iso(utcnow()), digest_id],
            )


def queue_digest_items(db: Conn, routes: Sequence[Route], now: str | None) -> int:
    """At ingest: every route to a digest (`bot.route` matched the item to a digest subscription, as it
    matches a channel's) is an item waiting for that channel's next digest. Returns how many were queued."""
    return db.executemany(
        "INSERT INTO digest_items (team_id, channel_id, item_id, matched, arrived_at) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT DO NOTHING",
        [[r.team_id, r.to, r.item_id, json.dumps(list(r.matched)), now or iso(utcnow())]
         for r in routes if r.target == "digest"],
    )


def _items_to_deliveries(db: Conn, sub: Subscription, now: str | None) -> None:
    """A digest channel turned back to one post per item: the items waiting for its digest, and those of a
    digest not posted yet (`pending`: rate limited), are queued in the delivery ledger (posted at the next
    poll) instead, and such a digest fails as `per_item`."""
    key = [sub.team_id, sub.channel_id]
    unposted = (
        "digest_items.team_id = ? AND digest_items.channel_id = ? AND (digest_items.digest_id IS NULL OR "
        "digest_items.digest_id IN (SELECT id FROM digests WHERE team_id = ? AND channel_id = ? "
        "AND state = 'pending'))"
    )
    rows = db.rows(
        "SELECT digest_items.item_id, digest_items.matched FROM digest_items JOIN items ON items.id = "
        f"digest_items.item_id WHERE {unposted} ORDER BY digest_items.arrived_at, items.published",
        key * 2,
    )
    # Each as it was matched when it arrived (why it matched stays what the post says).
    queue_routes(db, [Route(r["item_id"], sub.team_id, sub.channel_id, "channel",
                            tuple(json.loads(r["matched"] or "[]"))) for r in rows], now)
    db.execute(f"DELETE FROM digest_items WHERE {unposted}", key * 2)
    db.execute(
        "UPDATE digests SET state = 'failed', error = 'per_item', updated_at = ? "
        "WHERE team_id = ? AND channel_id = ? AND state = 'pending'", [now, *key],
    )


def _subscription(db: Conn, team_id: str, channel_id: str) -> Subscription | None:
    rows = db.rows("SELECT * FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id])
    return row_subscription(rows[0]) if rows else None


def _digest(db: Conn, team_id: str, channel_id: str, period: str) -> Digest | None:
    rows = db.rows(
        "SELECT * FROM digests WHERE team_id = ? AND channel_id = ? AND period = ?",
        [team_id, channel_id, period],
    )
    return row_digest(rows[0]) if rows else None
