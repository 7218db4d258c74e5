"""Subscriptions, workspaces, installations and the delivery ledger: the part of the store's interface that
is plain rows, identical on every backend (mixed into `Store`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.models import Delivery, Subscription
from bot.store.conn import Conn
from bot.store.models import from_iso, iso, row_delivery, row_subscription, utcnow

# At most this many OAuth states are kept (each lives a few minutes): /slack/install cannot grow the table.
OAUTH_STATE_CAP = 1_000


class AccountsMixin:
    if TYPE_CHECKING:

        def connect(self, *, readonly: bool = False) -> AbstractContextManager[Conn]: ...

        def _write(self) -> AbstractContextManager[Conn]: ...

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
        """Remove a channel's subscription and its undelivered items. False if it was not subscribed."""
        with self._write() as db:
            cursor = db.execute(
                "DELETE FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id]
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
        """Uninstall: drop the workspace's subscriptions and undelivered items."""
        with self._write() as db:
            db.execute("DELETE FROM subscriptions WHERE team_id = ?", [team_id])
            db.execute(
                "DELETE FROM deliveries WHERE team_id = ? AND state IN ('pending', 'posting')", [team_id]
            )
            db.execute("DELETE FROM workspaces WHERE team_id = ?", [team_id])
            db.execute("DELETE FROM installations WHERE team_id = ?", [team_id])

    # installations and OAuth state (multi-workspace mode) ----------------------------------------------

    def save_installation(self, team_id: str | None, enterprise_id: str | None, data: dict[str, Any]) -> None:
        """Insert or replace the installation of a workspace (or org), as JSON."""
        now = iso(utcnow())
        with self._write() as db:
            db.execute(
                "INSERT INTO installations (key, team_id, enterprise_id, data, installed_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET data = excluded.data, "
                "updated_at = excluded.updated_at",
                [
                    _installation_key(team_id, enterprise_id),
                    team_id,
                    enterprise_id,
                    json.dumps(data),
                    now,
                    now,
                ],
            )

    def find_installation(self, team_id: str | None, enterprise_id: str | None) -> dict[str, Any] | None:
        with self.connect() as db:
            row = db.one(
                "SELECT data FROM installations WHERE key = ?", [_installation_key(team_id, enterprise_id)]
            )
            return json.loads(row[0]) if row else None

    def rewrite_installations(self, rewrite: Callable[[dict[str, Any]], dict[str, Any] | None]) -> int:
        """Replace each installation's data with `rewrite(data)` (None leaves it), in one transaction, so no
        concurrent save (a token refresh) is lost. Returns how many were rewritten."""
        done = 0
        with self._write() as db:
            for row in db.rows("SELECT key, data FROM installations ORDER BY key"):
                data = rewrite(json.loads(row["data"]))
                if data is not None:
                    db.execute("UPDATE installations SET data = ?, updated_at = ? WHERE key = ?",
                               [json.dumps(data), iso(utcnow()), row["key"]])
                    done += 1
        return done

    def delete_installation(self, team_id: str | None, enterprise_id: str | None) -> None:
        with self._write() as db:
            db.execute("DELETE FROM installations WHERE key = ?", [_installation_key(team_id, enterprise_id)])

    def issue_oauth_state(self, state: str, expires_at: datetime, *, cap: int = OAUTH_STATE_CAP,
                          now: datetime | None = None) -> None:
        """Keep a new OAuth state until `expires_at`. Expired states are deleted first, and when `cap` live
        states are kept the oldest go, so the table never holds more than `cap` rows."""
        with self._write() as db:
            db.execute("DELETE FROM oauth_states WHERE expires_at <= ?", [_fine(now or utcnow())])
            excess = int(db.one("SELECT count(*) FROM oauth_states")[0]) - (max(cap, 1) - 1)
            if excess > 0:
                db.execute(
                    "DELETE FROM oauth_states WHERE state IN "
                    "(SELECT state FROM oauth_states ORDER BY expires_at, state LIMIT ?)",
                    [excess],
                )
            db.execute("INSERT INTO oauth_states (state, expires_at) VALUES (?, ?)",
                       [state, _fine(expires_at)])

    def consume_oauth_state(self, state: str, now: datetime | None = None) -> bool:
        """True once for a state issued and not expired; the state is deleted either way."""
        with self._write() as db:
            row = db.one("SELECT expires_at FROM oauth_states WHERE state = ?", [state])
            db.execute("DELETE FROM oauth_states WHERE state = ?", [state])
            expires = from_iso(row[0]) if row else None
            return expires is not None and expires > (now or utcnow())

    # the delivery ledger --------------------------------------------------------------------------------

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


def _fine(moment: datetime) -> str:
    """An OAuth state's expiry as fixed-width ISO-8601 with microseconds: compared and ordered as text, so the
    oldest of states issued within one second is known."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _installation_key(team_id: str | None, enterprise_id: str | None) -> str:
    return f"{enterprise_id or '-'}:{team_id or '-'}"


def _subscription(db: Conn, team_id: str, channel_id: str) -> Subscription | None:
    rows = db.rows("SELECT * FROM subscriptions WHERE team_id = ? AND channel_id = ?", [team_id, channel_id])
    return row_subscription(rows[0]) if rows else None
