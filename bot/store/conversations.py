"""Questions asked in Slack (mentions, direct messages, the assistant pane): a row per message, claimed before
it is answered, so Slack's retries of an event and a second process never answer it twice; and the question
as understood, which a follow-up in the same thread builds on (a part of `Store`).

A row is keyed by the message (team, channel, ts), not by the event id: a retry carries the same event id and
the same message, and the same message may also arrive as two events (a mention in a direct message). States:
`answering` (claimed; a claim older than `stale_after` seconds was left by a process that died and may be
taken over: `claim_question` says "reclaimed", and the caller checks the thread for an answer before posting
again), `answered`, `failed` (Slack refused the answer; not retried), `stopping` (the person pressed Slack's
stop button while it was being answered: the process answering it stops, see `bot.sessions`; never taken
over).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from bot.store.base import StoreBase
from bot.store.models import iso, utcnow

STALE_AFTER = 120.0  # seconds: longer than any answer takes (a model's summary times out well before)
KEEP_DAYS = 30  # questions older than this are forgotten (a follow-up in a month-old thread starts afresh)

ANSWERED_EVENTS = (  # m013_answered_events' schema (both backends): never changed, a new migration alters it
    "CREATE TABLE answered_events (team_id TEXT NOT NULL, channel_id TEXT NOT NULL, "
    "message_ts TEXT NOT NULL, thread_ts TEXT NOT NULL, event_id TEXT, state TEXT NOT NULL, "
    "understood TEXT, reply_ts TEXT, claimed_at TEXT NOT NULL, updated_at TEXT NOT NULL, "
    "PRIMARY KEY (team_id, channel_id, message_ts))",
    "CREATE INDEX answered_events_thread ON answered_events (team_id, channel_id, thread_ts, message_ts)",
    "CREATE INDEX answered_events_claimed ON answered_events (claimed_at)",
)
Claim = Literal["claimed", "reclaimed", "answered", "busy"]


class ConversationsMixin(StoreBase):
    """Claiming, settling and reading the questions asked of the bot."""

    def claim_question(self, team_id: str, channel_id: str, message_ts: str, thread_ts: str, event_id: str,
                       *, stale_after: float = STALE_AFTER) -> Claim:
        """Claim the answer to one message: "claimed" (answer it), "reclaimed" (a dead claim taken over:
        answer it unless the thread already holds the answer), "answered" (done before), "busy" (another
        request is answering it now)."""
        now = utcnow()
        with self._write() as db:
            db.execute("DELETE FROM answered_events WHERE claimed_at < ?",
                       [iso(now - timedelta(days=KEEP_DAYS))])
            cursor = db.execute(
                "INSERT INTO answered_events (team_id, channel_id, message_ts, thread_ts, event_id, state, "
                "claimed_at, updated_at) VALUES (?, ?, ?, ?, ?, 'answering', ?, ?) ON CONFLICT DO NOTHING",
                [team_id, channel_id, message_ts, thread_ts, event_id[:100], iso(now), iso(now)],
            )
            if cursor.rowcount == 1:
                return "claimed"
            row = db.one("SELECT state, claimed_at FROM answered_events WHERE team_id = ? AND channel_id = ? "
                         "AND message_ts = ?", [team_id, channel_id, message_ts])
            if row is None or row[0] != "answering":
                return "answered"
            if row[1] >= iso(now - timedelta(seconds=stale_after)):
                return "busy"
            cursor = db.execute(
                "UPDATE answered_events SET claimed_at = ?, event_id = ?, updated_at = ? WHERE team_id = ? "
                "AND channel_id = ? AND message_ts = ? AND state = 'answering' AND claimed_at = ?",
                [iso(now), event_id[:100], iso(now), team_id, channel_id, message_ts, row[1]],
            )
            return "reclaimed" if cursor.rowcount == 1 else "busy"

    def settle_question(self, team_id: str, channel_id: str, message_ts: str, *, state: str,
                        understood: str | None = None, reply_ts: str | None = None,
                        shown: str | None = None) -> None:
        """Record the outcome ("answered" or "failed"), the question as understood, the reply's ts and the
        items it showed (JSON, for the feedback on it: bot.store.agent)."""
        with self._write() as db:
            db.execute(
                "UPDATE answered_events SET state = ?, understood = ?, reply_ts = ?, shown = ?, "
                "updated_at = ? "
                "WHERE team_id = ? AND channel_id = ? AND message_ts = ?",
                [state, understood, reply_ts, shown, iso(utcnow()), team_id, channel_id, message_ts],
            )

    def note_reply(self, team_id: str, channel_id: str, message_ts: str, reply_ts: str) -> None:
        """Record the ts of an answer's message as soon as Slack made it (a streamed answer's, before it is
        finished), so a takeover of the claim finishes that message instead of posting a second answer."""
        with self._write() as db:
            db.execute("UPDATE answered_events SET reply_ts = ?, updated_at = ? WHERE team_id = ? AND "
                       "channel_id = ? AND message_ts = ? AND state = 'answering'",
                       [reply_ts, iso(utcnow()), team_id, channel_id, message_ts])

    def started_reply(self, team_id: str, channel_id: str, message_ts: str) -> str | None:
        """The ts `note_reply` recorded for a claim still being answered (None: no message was started)."""
        with self.connect(readonly=True) as db:
            row = db.one("SELECT reply_ts FROM answered_events WHERE team_id = ? AND channel_id = ? AND "
                         "message_ts = ? AND state = 'answering'", [team_id, channel_id, message_ts])
            return str(row[0]) if row and row[0] else None

    def release_question(self, team_id: str, channel_id: str, message_ts: str) -> None:
        """Forget a claim that was not answered (the answer could not be built), so a retry may try again."""
        with self._write() as db:
            db.execute("DELETE FROM answered_events WHERE team_id = ? AND channel_id = ? AND message_ts = ? "
                       "AND state = 'answering'", [team_id, channel_id, message_ts])

    def stop_questions(self, team_id: str, channel_id: str, thread_ts: str) -> int:
        """Mark the thread's questions still being answered as stopping (Slack's stop button); returns how
        many were."""
        with self._write() as db:
            cursor = db.execute("UPDATE answered_events SET state = 'stopping', updated_at = ? WHERE "
                                "team_id = ? AND channel_id = ? AND thread_ts = ? AND state = 'answering'",
                                [iso(utcnow()), team_id, channel_id, thread_ts])
            return max(cursor.rowcount, 0)

    def stop_requested(self, team_id: str, channel_id: str, message_ts: str) -> bool:
        """Whether the question's answer was stopped (`stop_questions`) while it was being answered."""
        with self.connect(readonly=True) as db:
            row = db.one("SELECT state FROM answered_events WHERE team_id = ? AND channel_id = ? AND "
                         "message_ts = ?", [team_id, channel_id, message_ts])
            return bool(row) and row[0] == "stopping"

    def previous_question(self, team_id: str, channel_id: str, thread_ts: str, before_ts: str) -> str | None:
        """The stored understanding of the last question answered in the thread before `before_ts`."""
        with self.connect(readonly=True) as db:
            row = db.one(
                "SELECT understood FROM answered_events WHERE team_id = ? AND channel_id = ? "
                "AND thread_ts = ? AND message_ts < ? AND state = 'answered' AND understood IS NOT NULL "
                "ORDER BY message_ts DESC LIMIT 1",
                [team_id, channel_id, thread_ts, before_ts],
            )
            return str(row[0]) if row else None

    def questions_before(self, team_id: str, channel_id: str, thread_ts: str, before_ts: str,
                         *, stale_after: float = STALE_AFTER) -> int:
        """How many earlier questions of the thread are still being answered (claims not yet stale)."""
        fresh = iso(utcnow() - timedelta(seconds=stale_after))
        with self.connect(readonly=True) as db:
            row = db.one(
                "SELECT COUNT(*) FROM answered_events WHERE team_id = ? AND channel_id = ? AND thread_ts = ? "
                "AND message_ts < ? AND state = 'answering' AND claimed_at >= ?",
                [team_id, channel_id, thread_ts, before_ts, fresh],
            )
            return int(row[0]) if row else 0
