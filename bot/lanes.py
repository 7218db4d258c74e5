"""Work that calls the model endpoint (`SUMMARY_API_*`), on its own small pool, shared fairly: one person
cannot slow everyone, nor one workspace the others.

    lane = ModelLane()                                  # MODEL_WORKERS threads (or `pool=` one given)
    slot = lane.admit(team_id, user_id)                 # None: over a cap; say BUSY, queue nothing
    slot.start(fn, *args)                               # queued, run on the lane; the slot freed when fn ends
    lane.submit(team_id, user_id, fn, *args) -> bool    # admit + start
    lane.shutdown(wait=True, cancel_futures=True)       # `serve` drains it on stop, as the lazy pool

Bolt's lazy listeners share one pool (`bot.app.LAZY_WORKERS`, an unbounded queue): Save, Remove, Related, the
App Home, answers without a model. A summary written by a model takes seconds (up to `summarize.TIMEOUT`);
run there, sixteen of them from one person filled the pool and another person's Save waited behind them
(0.2 s -> 29.5 s). So model work leaves that pool: it is admitted here, in the request (or by a lazy listener
that returns at once), and runs on MODEL_WORKERS threads of its own.

Admission counts what is in flight (running or waiting for a thread): at most PER_USER for one person,
PER_WORKSPACE for one workspace, and MAX_IN_FLIGHT in all, except that a workspace with nothing in flight is
always admitted (so in all at most MAX_IN_FLIGHT plus one per workspace). Anything beyond is refused at once
with the one line BUSY, never queued, so a wait here is bounded too.

Who runs next: waiting work is queued per workspace, and per person within it. A free thread takes the
next piece of the workspace running the fewest (of two as busy, the one served longer ago), of its person
running the fewest (the same tie rule), each person's in the order asked. So a quiet workspace's first
question waits for the first running answer to end, never behind another workspace's queue, and a person's
second question waits behind the first of everyone else in the workspace. Until 2026-12-06 threads were
first-come: with an 8 s endpoint, 8 people of one workspace asking 2 summaries each held all 4 threads, and a
second workspace's summary came back after 24 s; with two workspaces that busy, a third got BUSY at once.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from msgspec import Struct, field

log = logging.getLogger("bot.lanes")

MODEL_WORKERS = 4
PER_USER = 2  # one running, one waiting
PER_WORKSPACE = 8
MAX_IN_FLIGHT = 16  # ... in all, beyond each workspace's first
BUSY = "I'm busy writing other answers right now; please try again in a minute."


class Slot:
    """A place in the lane, held from `admit` until the work started on it ends (or `release`)."""

    def __init__(self, lane: ModelLane, team_id: str, user_id: str) -> None:
        self.lane = lane
        self.key = (team_id, user_id)
        self._released = False

    def start(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any] | None:
        """Queue `fn(*args, **kwargs)` to run on the lane (its result, or None when it raised, in the future
        returned); None (and the slot freed) when the lane is shut down."""
        return self.lane._queue(_Job(self, fn, args, kwargs))

    def release(self) -> None:
        with self.lane.lock:
            if self._released:
                return
            self._released = True
            self.lane._leave(*self.key)


class _Job(Struct):
    slot: Slot
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Any] = field(default_factory=Future)


class ModelLane:
    def __init__(self, workers: int = MODEL_WORKERS, *, per_user: int = PER_USER,
                 per_workspace: int = PER_WORKSPACE, total: int = MAX_IN_FLIGHT,
                 pool: ThreadPoolExecutor | None = None) -> None:
        self.workers = workers
        self.pool = pool or ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model")
        self.per_user, self.per_workspace, self.total = per_user, per_workspace, total
        self.lock = threading.Lock()
        self.users: Counter[tuple[str, str]] = Counter()  # in flight
        self.workspaces: Counter[str] = Counter()
        self.in_flight = 0
        self._waiting: dict[str, dict[str, deque[_Job]]] = {}  # workspace -> person -> their jobs, in order
        self._running_teams: Counter[str] = Counter()
        self._running_users: Counter[tuple[str, str]] = Counter()
        self._served: dict[str | tuple[str, str], int] = {}  # when a workspace (a person) last got a thread
        self._turn = itertools.count()
        self._runners = 0  # threads of the pool taking jobs (at most `workers`)
        self._closed = False

    def admit(self, team_id: str, user_id: str) -> Slot | None:
        """A slot for one piece of model work by `user_id` of `team_id`, or None (logged) when a cap is
        reached."""
        with self.lock:
            if self.users[(team_id, user_id)] >= self.per_user:
                reason = "user"
            elif self.workspaces[team_id] >= self.per_workspace:
                reason = "workspace"
            elif self.in_flight >= self.total and self.workspaces[team_id]:
                reason = "total"
            else:
                self.users[(team_id, user_id)] += 1
                self.workspaces[team_id] += 1
                self.in_flight += 1
                return Slot(self, team_id, user_id)
        log.info("event=model_busy cap=%s team=%s user=%s", reason, team_id[:20], user_id[:20])
        return None

    def submit(self, team_id: str, user_id: str, fn: Callable[..., Any], /, *args: Any,
               **kwargs: Any) -> bool:
        """Admit and start `fn`; False when over a cap (nothing runs)."""
        slot = self.admit(team_id, user_id)
        if slot is None:
            return False
        return slot.start(fn, *args, **kwargs) is not None

    def _queue(self, job: _Job) -> Future[Any] | None:
        team, user = job.slot.key
        spawn = False
        with self.lock:
            closed = self._closed
            if not closed:
                self._waiting.setdefault(team, {}).setdefault(user, deque()).append(job)
                spawn = self._runners < self.workers
                self._runners += spawn
        if closed:  # shut down: nothing runs
            job.slot.release()
            return None
        if spawn:
            try:
                self.pool.submit(self._run)
            except RuntimeError:  # the pool was shut down: nothing runs
                with self.lock:
                    self._runners -= 1
                    left = self._drop_waiting()
                for gone in left:
                    gone.future.cancel()
                    gone.slot.release()
                return None
        return job.future

    def _run(self) -> None:
        """A thread of the pool: the next job (`_next`) until none waits."""
        while True:
            with self.lock:
                job = self._next()
                if job is None:
                    self._runners -= 1
                    return
            team, user = job.slot.key
            try:
                if job.future.set_running_or_notify_cancel():
                    job.future.set_result(self._call(job))
            finally:
                with self.lock:
                    self._running_teams[team] -= 1
                    self._running_users[(team, user)] -= 1
                    if self._running_teams[team] <= 0:
                        del self._running_teams[team]
                    if self._running_users[(team, user)] <= 0:
                        del self._running_users[(team, user)]
                job.slot.release()

    @staticmethod
    def _call(job: _Job) -> Any:
        try:
            return job.fn(*job.args, **job.kwargs)
        except Exception as exc:  # noqa: BLE001 - a listener's failure is one log line, as Bolt's are
            log.error("event=model_work_failed error=%s: %s", type(exc).__name__,
                      " ".join(str(exc).split())[:200])
            return None

    def _next(self) -> _Job | None:  # under self.lock
        """The waiting job that runs next (see the module docstring), taken off its queue and counted as
        running."""
        if not self._waiting:
            return None
        team = min(self._waiting, key=lambda t: (self._running_teams[t], self._served.get(t, -1)))
        people = self._waiting[team]
        user = min(people, key=lambda u: (self._running_users[(team, u)], self._served.get((team, u), -1)))
        jobs = people[user]
        job = jobs.popleft()
        if not jobs:
            del people[user]
        if not people:
            del self._waiting[team]
        self._served[team] = self._served[(team, user)] = next(self._turn)
        self._running_teams[team] += 1
        self._running_users[(team, user)] += 1
        return job

    def _drop_waiting(self) -> list[_Job]:  # under self.lock
        jobs = [job for people in self._waiting.values() for queued in people.values() for job in queued]
        self._waiting.clear()
        return jobs

    def _leave(self, team_id: str, user_id: str) -> None:  # under self.lock
        self.users[(team_id, user_id)] -= 1
        if self.users[(team_id, user_id)] <= 0:
            del self.users[(team_id, user_id)]
            self._served.pop((team_id, user_id), None)
        self.workspaces[team_id] -= 1
        if self.workspaces[team_id] <= 0:
            del self.workspaces[team_id]
            self._served.pop(team_id, None)
        self.in_flight -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more work is queued; with `cancel_futures`, what waits is dropped (its places freed); with
        `wait`, returns when what runs has ended."""
        with self.lock:
            self._closed = True
            dropped = self._drop_waiting() if cancel_futures else []
        for job in dropped:
            job.future.cancel()
            job.slot.release()
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)
