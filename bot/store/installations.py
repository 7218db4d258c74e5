"""Installations and OAuth state, for multi-workspace mode (a part of `Store`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bot.store.base import StoreBase
from bot.store.conn import Conn
from bot.store.models import from_iso, iso, utcnow

# At most this many OAuth states are kept (each lives a few minutes): /slack/install cannot grow the table.
OAUTH_STATE_CAP = 1_000
_GROUP = re.compile(r"[0-9a-f]{4,32}")  # the source an OAuth state is for (see issue_oauth_state)


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
                          group: str | None = None, now: datetime | None = None) -> bool:
        """Keep a new OAuth state until `expires_at`, after deleting the expired ones. At most `cap` live
        states are kept. `group` names the source the state is for (a few hex digits; `state` then starts
        with `group` and a dot): when the table is full, the oldest state of the group holding the most takes
        the new one's place if that group holds at least two more than `group` does, so no source can keep
        the others out, and a source holding as many as the rest never loses one. Else none is added
        (False)."""
        if group is not None and not (_GROUP.fullmatch(group) and state.startswith(group + ".")):
            raise ValueError("an OAuth state's group is hex digits, and the state starts with it and a dot")
        with self._write() as db:
            db.execute("DELETE FROM oauth_states WHERE expires_at <= ?", [_fine(now or utcnow())])
            full = int(db.one("SELECT count(*) FROM oauth_states")[0]) >= max(cap, 1)
            if full and (group is None or not _make_room(db, group)):
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


def _make_room(db: Conn, group: str) -> bool:
    """Delete the oldest state of the group holding the most states (by the part of a state before its dot,
    as long as `group`), when it holds at least two more than `group`; whether one was deleted."""
    width = len(group)  # a few hex digits: checked by the caller, so safe in the SQL's text
    mine = int(db.one("SELECT count(*) FROM oauth_states WHERE state LIKE ?", [group + ".%"])[0])
    top = db.one(f"SELECT substr(state, 1, {width}) AS g, count(*) AS n FROM oauth_states "  # noqa: S608
                 f"WHERE substr(state, {width + 1}, 1) = '.' GROUP BY g ORDER BY n DESC, g LIMIT 1")
    if top is None or int(top[1]) < mine + 2:
        return False
    db.execute("DELETE FROM oauth_states WHERE state = (SELECT state FROM oauth_states WHERE state LIKE ? "
               "ORDER BY expires_at, state LIMIT 1)", [str(top[0]) + ".%"])
    return True


def _fine(moment: datetime) -> str:
    """An OAuth state's expiry as fixed-width ISO-8601 with microseconds: compared and ordered as text, so the
    oldest of states issued within one second is known."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _installation_key(team_id: str | None, enterprise_id: str | None) -> str:
    return f"{enterprise_id or '-'}:{team_id or '-'}"
