"""Slack's agent sessions for the questions the bot answers, and the stop button that ends one.

    session = Session(client, team, channel, thread_ts, user)
    session.processing(title)       # agents.sessions.setStatus: the thread shows a status and a stop button
    with stops.watch(store, team, channel, thread_ts, message_ts) as stop:   # a threading.Event
        ... search, write and stream, checking `stop` (the model request is closed when it is set) ...
    session.active()                # the work is done (answered, stopped or failed): the stop button goes

Every question (a mention, a direct message, a message in the Messages tab) is an agent session scoped to its
thread (docs.slack.dev/ai/agent-sessions): `processing` at once, with a title on the thread's first question
(Slack ignores a title for a session that exists), and `active` when the answer is in. A session call that
fails is one log line and never in the way of the answer (an older workspace, a missing scope).

The stop button sends `agent_session_stopped` (channel, thread_ts; the workspace is the request's).
`request_stop` sets the stop of every question of that thread this process is answering, at once, and marks
the thread's unanswered questions in the store as stopping (`Store.stop_questions`), so a question another
process is answering stops too: `watch` looks at the store every STOP_POLL seconds while the question is
answered. An event for a thread with no work, a second click, or another workspace's thread finds nothing:
one log line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bot.store import Store

log = logging.getLogger("bot.sessions")

STOP_POLL = 0.25  # seconds between looks at the store for a stop another process received
TITLE_CHARS = 200  # Slack's limit for a session title
Key = tuple[str, str, str]  # (team, channel, thread_ts)


class Session:
    """One question's agent session: its thread in a channel or DM."""

    def __init__(self, client: Any, team_id: str, channel_id: str, thread_ts: str, user_id: str) -> None:
        self.client, self.team_id, self.channel_id = client, team_id, channel_id
        self.thread_ts, self.user_id = thread_ts, user_id

    def processing(self, title: str | None = None) -> None:
        """Processing (with the stop button); `title` names a new session."""
        self._set("processing", title=" ".join((title or "").split())[:TITLE_CHARS] or None,
                  initiator_user_id=self.user_id or None)

    def active(self) -> None:
        self._set("active")

    def _set(self, status: str, **extra: Any) -> None:
        try:
            answer = self.client.agents_sessions_setStatus(
                channel_id=self.channel_id, thread_ts=self.thread_ts, status=status, **extra)
        except Exception as exc:  # noqa: BLE001 - cosmetic: the answer goes on without it
            error = getattr(getattr(exc, "response", None), "get", lambda _k: None)("error")
            log.warning("event=session_status_failed status=%s team=%s channel=%s error=%s", status,
                        self.team_id[:20], self.channel_id[:20], str(error or type(exc).__name__)[:60])
            return
        warning = answer.get("warning") if hasattr(answer, "get") else None
        if warning:
            log.info("event=session_status_warning status=%s warning=%s", status, str(warning)[:80])


class Stops:
    """The stops of the questions this process is answering, by thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Key, list[threading.Event]] = {}

    @contextmanager
    def watch(self, store: Store | None, team_id: str, channel_id: str, thread_ts: str, message_ts: str
              ) -> Iterator[threading.Event]:
        """A stop for one question while it is answered: set by `request_stop` in this process, or (when
        `store` is given) by a stop another process wrote to the store."""
        key = (team_id, channel_id, thread_ts)
        stop = threading.Event()
        with self._lock:
            self._running.setdefault(key, []).append(stop)
        done = threading.Event()
        watcher = None
        if store is not None:
            watcher = threading.Thread(target=_watch_store, daemon=True, name="stop-watch",
                                       args=(store, team_id, channel_id, message_ts, stop, done))
            watcher.start()
        try:
            yield stop
        finally:
            done.set()
            with self._lock:
                events = self._running.get(key, [])
                if stop in events:
                    events.remove(stop)
                if not events:
                    self._running.pop(key, None)
            if watcher is not None:
                watcher.join(STOP_POLL * 4)

    def request_stop(self, store: Store | None, team_id: str, channel_id: str, thread_ts: str) -> int:
        """Stop the thread's questions being answered, here and (through the store) elsewhere; returns how
        many were found."""
        with self._lock:
            events = list(self._running.get((team_id, channel_id, thread_ts), []))
        for stop in events:
            stop.set()
        marked = store.stop_questions(team_id, channel_id, thread_ts) if store is not None else 0
        return max(len(events), marked)

    def running(self) -> int:
        with self._lock:
            return sum(len(events) for events in self._running.values())


def _watch_store(store: Store, team_id: str, channel_id: str, message_ts: str, stop: threading.Event,
                 done: threading.Event) -> None:
    while not done.wait(STOP_POLL):
        if stop.is_set():
            return
        try:
            if store.stop_requested(team_id, channel_id, message_ts):
                stop.set()
                return
        except Exception as exc:  # noqa: BLE001 - the store is down: this process's own stops still work
            log.warning("event=stop_watch_failed error=%s", type(exc).__name__)
            return
