"""Work that calls the model endpoint (`SUMMARY_API_*`), on its own small pool, with caps: one person cannot
slow everyone.

    lane = ModelLane()                                  # MODEL_WORKERS threads (or `pool=` one given)
    slot = lane.admit(team_id, user_id)                 # None: over a cap; say BUSY, queue nothing
    slot.start(fn, *args)                               # runs on the lane; the slot is freed when fn ends
    lane.submit(team_id, user_id, fn, *args) -> bool    # admit + start
    lane.shutdown(wait=True, cancel_futures=True)       # `serve` drains it on stop, as the lazy pool

Bolt's lazy listeners share one pool (`bot.app.LAZY_WORKERS`, an unbounded queue): Save, Remove, Related, the
App Home, answers without a model. A summary written by a model takes seconds (up to `summarize.TIMEOUT`);
run there, sixteen of them from one person filled the pool and another person's Save waited behind them
(0.2 s -> 29.5 s). So model work leaves that pool: it is admitted here, in the request (or by a lazy listener
that returns at once), and runs on MODEL_WORKERS threads of its own. Admission counts what is in flight
(running or waiting for a thread): at most PER_USER for one person, PER_WORKSPACE for one workspace, and
MAX_IN_FLIGHT in all; anything beyond is refused at once with the one line BUSY, never queued, so a wait
here is bounded too (a few model calls at most).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

log = logging.getLogger("bot.lanes")

MODEL_WORKERS = 4
PER_USER = 2  # one running, one waiting
PER_WORKSPACE = 8
MAX_IN_FLIGHT = 16
BUSY = "I'm busy writing other answers right now; please try again in a minute."


class Slot:
    """A place in the lane, held from `admit` until the work started on it ends (or `release`)."""

    def __init__(self, lane: ModelLane, team_id: str, user_id: str) -> None:
        self.lane = lane
        self.key = (team_id, user_id)
        self._released = False

    def start(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any] | None:
        """Run `fn(*args, **kwargs)` on the lane; None (and the slot freed) when the lane is shut down."""

        def work() -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - a listener's failure is one log line, as Bolt's are
                log.error("event=model_work_failed error=%s: %s", type(exc).__name__,
                          " ".join(str(exc).split())[:200])
                return None
            finally:
                self.release()

        try:
            future = self.lane.pool.submit(work)
        except RuntimeError:  # shut down: nothing runs
            self.release()
            return None
        future.add_done_callback(lambda _f: self.release())  # cancelled before it ran
        return future

    def release(self) -> None:
        with self.lane.lock:
            if self._released:
                return
            self._released = True
            self.lane._leave(*self.key)


class ModelLane:
    def __init__(self, workers: int = MODEL_WORKERS, *, per_user: int = PER_USER,
                 per_workspace: int = PER_WORKSPACE, total: int = MAX_IN_FLIGHT,
                 pool: ThreadPoolExecutor | None = None) -> None:
        self.pool = pool or ThreadPoolExecutor(max_workers=workers, thread_name_prefix="model")
        self.per_user, self.per_workspace, self.total = per_user, per_workspace, total
        self.lock = threading.Lock()
        self.users: Counter[tuple[str, str]] = Counter()
        self.workspaces: Counter[str] = Counter()
        self.in_flight = 0

    def admit(self, team_id: str, user_id: str) -> Slot | None:
        """A slot for one piece of model work by `user_id` of `team_id`, or None (logged) when a cap is
        reached."""
        with self.lock:
            if self.users[(team_id, user_id)] >= self.per_user:
                reason = "user"
            elif self.workspaces[team_id] >= self.per_workspace:
                reason = "workspace"
            elif self.in_flight >= self.total:
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

    def _leave(self, team_id: str, user_id: str) -> None:  # under self.lock
        self.users[(team_id, user_id)] -= 1
        if self.users[(team_id, user_id)] <= 0:
            del self.users[(team_id, user_id)]
        self.workspaces[team_id] -= 1
        if self.workspaces[team_id] <= 0:
            del self.workspaces[team_id]
        self.in_flight -= 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.pool.shutdown(wait=wait, cancel_futures=cancel_futures)
