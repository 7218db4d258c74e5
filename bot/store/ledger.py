"""The delivery ledger: a row per (item, channel), queued at ingest, claimed, settled as sent or failed,
or released to be retried (a part of `Store`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from bot.models import Delivery, Item, Subscription
from bot.search.match import TOPIC_PREFIX, matched_keywords
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import iso, row_delivery, utcnow


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

    def claim(self, delivery_id: int, expected_state: str = "pending") -> bool:
        """Mark a delivery as being posted (its fate is unknown until mark_sent / mark_failed). Only one
        caller can claim a pending row."""
        now = iso(utcnow())
        with self._write() as db:
            cursor = db.execute(
                "UPDATE deliveries SET state = 'posting', attempts = attempts + 1, claimed_at = ?, "
                "updated_at = ? WHERE id = ? AND state = ?",
                [now, now, delivery_id, expected_state],
            )
            return bool(cursor.rowcount == 1)

    def mark_sent(self, delivery_id: int, ts: str | None) -> None:
        self._settle(delivery_id, "sent", None, ts=ts)

    def mark_failed(self, delivery_id: int, reason: str) -> None:
        self._settle(delivery_id, "failed", reason)

    def release(self, delivery_id: int, reason: str) -> None:
        """Put a delivery back to pending (a transient failure: retried at the next poll)."""
        self._settle(delivery_id, "pending", reason)

    def _settle(self, delivery_id: int, state: str, error: str | None, *, ts: str | None = None) -> None:
        with self._write() as db:
            if state == "sent":
                db.execute(
                    "UPDATE deliveries SET state = 'sent', ts = ?, error = NULL, updated_at = ? WHERE id = ?",
                    [ts, iso(utcnow()), delivery_id],
                )
            else:
                db.execute(
                    "UPDATE deliveries SET state = ?, error = ?, updated_at = ? WHERE id = ?",
                    [state, (error or "")[:500], iso(utcnow()), delivery_id],
                )


TopicMatch = Callable[[Item, Sequence[str]], list[str]]


def queue_deliveries(db: Conn, items: Sequence[Item], subs: Sequence[Subscription], now: str | None,
                     topics: TopicMatch | None = None) -> int:
    """A pending delivery for every (new item, matching subscription); the ledger's unique (item, team,
    channel) index makes a second one impossible. Returns how many were queued. A keyword "about:<topic>"
    is matched by `topics` (bot.search.topics: by meaning); its label, prefixed, is kept in `matched`."""
    from bot.search.topics import words_only

    rows: list[list[Any]] = []
    for item in items:
        for sub in subs:
            matched: list[str] = []
            if sub.keywords:
                plain = [k for k in sub.keywords if not k.startswith(TOPIC_PREFIX)]
                about = [k[len(TOPIC_PREFIX):] for k in sub.keywords if k.startswith(TOPIC_PREFIX)]
                matched = matched_keywords(item.title, item.summary, plain)
                if about:
                    matched += [TOPIC_PREFIX + label for label in (topics or words_only)(item, about)]
                if not matched:
                    continue
            rows.append([item.id, sub.team_id, sub.channel_id, json.dumps(matched), now, now])
    return db.executemany(
        "INSERT INTO deliveries (item_id, team_id, channel_id, state, matched, attempts, created_at, "
        "updated_at) VALUES (?, ?, ?, 'pending', ?, 0, ?, ?) ON CONFLICT DO NOTHING",
        rows,
    )
