"""Subscriptions (a channel's keywords, pausing) and workspaces (disabled, forgotten) (a part of `Store`)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from bot.models import Subscription
from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import iso, row_subscription, utcnow


class SubscriptionsMixin(StoreBase):
    """Channels' subscriptions and disabled workspaces."""

    # subscriptions --------------------------------------------------------------------------------------

    def subscribe(
        self, team_id: str, channel_id: str, user_id: str | None, keywords: Sequence[str] = ()
    ) -> tuple[Subscription, bool]:
        """Subscribe a channel, or update its keywords (and resume it) if it is subscribed. Returns
        (subscription, created)."""
        now = iso(utcnow())
        with self._write() as db:
            existing = _subscription(db, team_id, channel_id)
            if existing:
                db.execute(
                    "UPDATE subscriptions SET keywords = ?, paused = 0, paused_reason = NULL "
                    "WHERE team_id = ? AND channel_id = ?",
                    [json.dumps(list(keywords)), team_id, channel_id],
                )
            else:
                db.execute(
                    "INSERT INTO subscriptions (team_id, channel_id, user_id, created_at, keywords, paused) "
                    "VALUES (?, ?, ?, ?, ?, 0)",
                    [team_id, channel_id, user_id, now, json.dumps(list(keywords))],
                )
            sub = _subscription(db, team_id, channel_id)
        assert sub is not None
        return sub, existing is None

    def unsubscribe(self, team_id: str, channel_id: str) -> bool:
        """Remove a channel's subscription and its undelivered items (those queued to post one by one, and
        those waiting for its next digest). False if it was not subscribed."""
        with self._write() as db:
            cursor = db.execute(
                "DELETE FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id]
            )
            db.execute(
                "DELETE FROM digest_items WHERE team_id = ? AND channel_id = ? AND digest_id IS NULL",
                [team_id, channel_id],
            )
            db.execute(
                "UPDATE deliveries SET state = 'failed', error = 'unsubscribed', updated_at = ? "
                "WHERE team_id = ? AND channel_id = ? AND state = 'pending'",
                [iso(utcnow()), team_id, channel_id],
            )
            return bool(cursor.rowcount > 0)

    def get_subscription(self, team_id: str, channel_id: str) -> Subscription | None:
        with self.connect() as db:
            return _subscription(db, team_id, channel_id)

    def subscriptions(self, team_id: str | None = None) -> list[Subscription]:
        # None: every workspace's; any string, even '', only that workspace's (never a fall-through to all)
        where, params = ("WHERE team_id = ?", [team_id]) if team_id is not None else ("", [])
        sql = f"SELECT * FROM subscriptions {where} ORDER BY created_at, channel_id"
        with self.connect() as db:
            return [row_subscription(r) for r in db.rows(sql, params)]

    def count_subscriptions(self) -> int:
        with self.connect() as db:
            return int(db.one("SELECT count(*) FROM subscriptions")[0])

    def pause_subscription(self, team_id: str, channel_id: str, reason: str) -> None:
        """Pause a channel (it no longer receives items) and fail its undelivered items with the reason."""
        now = iso(utcnow())
        with self._write() as db:
            db.execute(
                "UPDATE subscriptions SET paused = 1, paused_reason = ? WHERE team_id = ? AND channel_id = ?",
                [reason, team_id, channel_id],
            )
            db.execute(
                "UPDATE deliveries SET state = 'failed', error = ?, updated_at = ? "
                "WHERE team_id = ? AND channel_id = ? AND state IN ('pending', 'posting')",
                [f"paused: {reason}", now, team_id, channel_id],
            )

    # workspaces -----------------------------------------------------------------------------------------

    def disable_workspace(self, team_id: str, reason: str) -> None:
        """Stop delivering to a workspace whose token no longer works (invalid_auth, token_revoked...)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO workspaces (team_id, disabled_reason, disabled_at) VALUES (?, ?, ?) "
                "ON CONFLICT (team_id) DO UPDATE SET disabled_reason = excluded.disabled_reason, "
                "disabled_at = excluded.disabled_at",
                [team_id, reason, iso(utcnow())],
            )

    def enable_workspace(self, team_id: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])

    def workspace_disabled(self, team_id: str) -> str | None:
        with self.connect() as db:
            row = db.one("SELECT disabled_reason FROM workspaces WHERE team_id = ?", [team_id])
            return row[0] if row else None

    def forget_workspace(self, team_id: str) -> None:
        """Uninstall: drop the workspace's subscriptions, follows, reading lists and undelivered items."""
        with self._write() as db:
            db.execute("DELETE FROM subscriptions WHERE team_id = ?", [team_id])
            db.execute(
                "DELETE FROM deliveries WHERE team_id = ? AND state IN ('pending', 'posting')", [team_id]
            )
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM installations WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM follows WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM saved_items WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM agent_context WHERE team_id = ?", [team_id])


def _subscription(db: Conn, team_id: str, channel_id: str) -> Subscription | None:
    rows = db.rows("SELECT * FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id])
    return row_subscription(rows[0]) if rows else None


def active_subscriptions(db: Conn) -> list[Subscription]:
    return [
        row_subscription(r)
        for r in db.rows(
            "SELECT * FROM subscriptions WHERE paused = 0 "
            "AND team_id NOT IN (SELECT team_id FROM workspaces) ORDER BY created_at, channel_id"
        )
    ]
