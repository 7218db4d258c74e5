"""The agent messaging experience's state (a part of `Store`): who has been greeted in the Messages tab, what
each person is looking at (`app_context_changed`), which items each answer showed, and people's votes on the
answers (feedback buttons).

    greet_once(team, user)                  -> True the first time only (the greeting is posted once)
    set_viewing(team, user, channel | None) / viewing(team, user)
    record_feedback(team, channel, reply_ts, user, vote)
        -> "stored" | "changed" | "same" | "not_an_answer"   (the last vote counts; one row per person)
    feedback_since(day)                     -> the votes, newest first

A vote copies the question as understood and the items shown from the answer's row (`answered_events`, kept
30 days), so the feedback list outlives the questions table; the items' ids also one a line (`item_ids`),
which `bot.store.trending` counts without reading JSON.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from msgspec import Struct

from bot.store.base import StoreBase
from bot.store.models import from_iso, iso, utcnow
from bot.store.trending import vote_items

AGENT_SCHEMA = (  # m017_agent's schema (both backends)
    "ALTER TABLE answered_events ADD COLUMN shown TEXT",
    "CREATE INDEX answered_events_reply ON answered_events (team_id, channel_id, reply_ts)",
    "CREATE TABLE agent_greetings (team_id TEXT NOT NULL, user_id TEXT NOT NULL, greeted_at TEXT NOT NULL, "
    "PRIMARY KEY (team_id, user_id))",
    "CREATE TABLE agent_context (team_id TEXT NOT NULL, user_id TEXT NOT NULL, channel_id TEXT NOT NULL, "
    "updated_at TEXT NOT NULL, PRIMARY KEY (team_id, user_id))",
    "CREATE TABLE feedback (team_id TEXT NOT NULL, channel_id TEXT NOT NULL, message_ts TEXT NOT NULL, "
    "user_id TEXT NOT NULL, vote TEXT NOT NULL, understood TEXT NOT NULL, shown TEXT NOT NULL, "
    "voted_at TEXT NOT NULL, PRIMARY KEY (team_id, channel_id, message_ts, user_id))",
    "CREATE INDEX feedback_voted_at ON feedback (voted_at)",
)
VOTES = ("up", "down")
Recorded = Literal["stored", "changed", "same", "not_an_answer"]


class Feedback(Struct, frozen=True):
    """One person's vote on one answer."""

    team_id: str
    channel_id: str
    message_ts: str  # the answer's ts
    user_id: str
    vote: str  # "up" | "down"
    understood: str  # the question as understood (bot.ask.Understood.as_json())
    shown: tuple[dict[str, Any], ...]  # the items the answer listed: {"id", "title", "link"}
    voted_at: datetime


class AgentMixin(StoreBase):
    """Greetings, what people look at, and feedback on answers."""

    def greet_once(self, team_id: str, user_id: str) -> bool:
        """True the first time a person opens the Messages tab (greet them), False ever after."""
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO agent_greetings (team_id, user_id, greeted_at) VALUES (?, ?, ?) "
                "ON CONFLICT DO NOTHING", [team_id, user_id, iso(utcnow())])
            return cursor.rowcount == 1

    def set_viewing(self, team_id: str, user_id: str, channel_id: str | None) -> None:
        """What the person is looking at (a channel id), or None when not a channel the bot can see."""
        with self._write() as db:
            if channel_id is None:
                db.execute("DELETE FROM agent_context WHERE team_id = ? AND user_id = ?", [team_id, user_id])
                return
            db.execute(
                "INSERT INTO agent_context (team_id, user_id, channel_id, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (team_id, user_id) DO UPDATE SET channel_id = excluded.channel_id, "
                "updated_at = excluded.updated_at", [team_id, user_id, channel_id, iso(utcnow())])

    def viewing(self, team_id: str, user_id: str) -> str | None:
        with self.connect(readonly=True) as db:
            row = db.one("SELECT channel_id FROM agent_context WHERE team_id = ? AND user_id = ?",
                         [team_id, user_id])
            return str(row[0]) if row else None

    def record_feedback(self, team_id: str, channel_id: str, reply_ts: str, user_id: str,
                        vote: str) -> Recorded:
        """Store a vote on the answer posted at `reply_ts` (the last vote counts)."""
        if vote not in VOTES:
            raise ValueError(f"vote must be one of {VOTES}")
        with self._write() as db:
            answer = db.one(
                "SELECT understood, shown FROM answered_events WHERE team_id = ? AND channel_id = ? "
                "AND reply_ts = ? AND state = 'answered' AND understood IS NOT NULL",
                [team_id, channel_id, reply_ts])
            if answer is None:
                return "not_an_answer"
            old = db.one("SELECT vote FROM feedback WHERE team_id = ? AND channel_id = ? AND message_ts = ? "
                         "AND user_id = ?", [team_id, channel_id, reply_ts, user_id])
            db.execute(
                "INSERT INTO feedback (team_id, channel_id, message_ts, user_id, vote, understood, shown, "
                "voted_at, item_ids) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (team_id, channel_id, "
                "message_ts, user_id) DO UPDATE SET vote = excluded.vote, voted_at = excluded.voted_at",
                [team_id, channel_id, reply_ts, user_id, vote, str(answer[0]), str(answer[1] or "[]"),
                 iso(utcnow()), "\n".join(vote_items(answer[1]))])  # item_ids: what trending counts
            if old is None:
                return "stored"
            return "same" if old[0] == vote else "changed"

    def feedback_since(self, since: datetime | None = None) -> list[Feedback]:
        """The votes cast since `since` (all without it), newest first."""
        with self.connect(readonly=True) as db:
            rows = db.rows(
                "SELECT team_id, channel_id, message_ts, user_id, vote, understood, shown, voted_at "
                "FROM feedback WHERE voted_at >= ? ORDER BY voted_at DESC, message_ts DESC",
                [iso(since) or ""])
        return [Feedback(str(r["team_id"]), str(r["channel_id"]), str(r["message_ts"]), str(r["user_id"]),
                         str(r["vote"]), str(r["understood"]), _shown(r["shown"]),
                         from_iso(str(r["voted_at"])) or utcnow()) for r in rows]


def _shown(text: Any) -> tuple[dict[str, Any], ...]:
    try:
        value = json.loads(str(text or "[]"))
    except ValueError:
        return ()
    return tuple(v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()
