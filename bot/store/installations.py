"""Installations and OAuth state, for multi-workspace mode (a part of `Store`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bot.store.base import StoreBase
from bot.store.models import from_iso, iso, utcnow

# At most this many OAuth states are kept (each lives a few minutes): /slack/install cannot grow the table.
OAUTH_STATE_CAP = 1_000


class InstallationsMixin(StoreBase):
    """Installations and OAuth state (multi-workspace mode)."""

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
                          now: datetime | None = None) -> bool:
        """Keep a new OAuth state until `expires_at`, after deleting the expired ones. When `cap` live states
        are kept already, none is added (False): a flood of /slack/install requests can delay a new install,
        never push out one in progress, and never grow the table."""
        with self._write() as db:
            db.execute("DELETE FROM oauth_states WHERE expires_at <= ?", [_fine(now or utcnow())])
            if int(db.one("SELECT count(*) FROM oauth_states")[0]) >= max(cap, 1):
                return False
            db.execute("INSERT INTO oauth_states (state, expires_at) VALUES (?, ?)",
                       [state, _fine(expires_at)])
            return True

    def consume_oauth_state(self, state: str, now: datetime | None = None) -> bool:
        """True once for a state issued and not expired; the state is deleted either way."""
        with self._write() as db:
            row = db.one("SELECT expires_at FROM oauth_states WHERE state = ?", [state])
            db.execute("DELETE FROM oauth_states WHERE state = ?", [state])
            expires = from_iso(row[0]) if row else None
            return expires is not None and expires > (now or utcnow())


def _fine(moment: datetime) -> str:
    """An OAuth state's expiry as fixed-width ISO-8601 with microseconds: compared and ordered as text, so the
    oldest of states issued within one second is known."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _installation_key(team_id: str | None, enterprise_id: str | None) -> str:
    return f"{enterprise_id or '-'}:{team_id or '-'}"
