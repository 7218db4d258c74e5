"""Worker processes: any number of them deliver the ledger's open rows together, over one PostgreSQL.

    mlresearch-bot worker [--once]      (Procfile: `worker: mlresearch-bot worker`)

    start      refuse, with one line and nothing claimed: a SQLite database (one process serves it: `serve`
               or `poll`), a database `migrate` has not brought to this release, a database that is a copy
               of the one `migrate` prepared (its recorded identity is not its own: a fork, a restore)
    heartbeat  a `workers` row, refreshed every lease/3 seconds with the leases of the channels it holds
    loop       claim a few channels with open rows (their whole queue: one worker per channel at a time, so
               a channel's messages keep their order and pacing; the claim records the channel's last post,
               so pacing survives a hand-over), post them through `bot.deliver.Deliverer` (bursts, follow
               DMs, reconciliation of rows of unknown fate), release each channel when its queue is done;
               claim more whenever the pool has nothing due; digests under the "digest" lock
    429        Slack's Retry-After for a workspace becomes a hold in the database: no worker posts to the
               workspace, or claims its channels, before it ends (every worker reads the holds twice a
               second), and the row goes back to pending
    SIGTERM    claim nothing more, let each post in flight finish, close every channel's step at its next
               wait (its row stays pending), release every claim, drop the heartbeat; well within the 30 s
               Heroku gives
    SIGKILL    the claims die with the process's database session (`ClaimHolder`, a session advisory lock):
               any worker (or serve's poller, or the next `poll`) claims the channels at once and reconciles
               their `posting` rows by message metadata; a live worker's heartbeat counts only while its
               session lives, so a poll after a killed worker delivers too
    session    a worker whose claim session ended while it lives (the database restarted, a terminated
               backend) posts nothing more under those claims: it ends the run and claims again under a new
               id. Before each row's claim and again before each post a worker checks that it still holds
               the channel: its session alive, the channel's lease renewed (a worker that stalled past its
               lease, a frozen VM, may have lost it) and not taken; a row's claim is also fenced in the
               database by the channel's claim row

`PollerDelivery` is the delivery step of a poll on PostgreSQL (`serve`'s elected poller, `poll`): while a
worker is alive it leaves delivery (and digests) to the workers; otherwise it delivers exactly as a worker
does, claims and all, so a worker that starts meanwhile never posts the same row; channels another live
process keeps are claimed as soon as they are free, for at most WORKER_LEASE, and what is left is counted.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field

from bot.deliver import LOCAL_TEAM_ID, Deliverer, Step
from bot.errors import LockTimeout, StoreError, UsageError
from bot.models import DeliveryReport
from bot.store import MIGRATIONS, Store
from bot.store.workers import IDENTITY_KEY, ClaimHolder

log = logging.getLogger("bot.worker")

DEFAULT_LEASE = 30  # seconds a dead worker's channels stay claimed (WORKER_LEASE)
HOLDS_EVERY = 0.5  # seconds between two reads of the workspaces' holds
DISCOVER_EVERY = 2.0  # seconds between two looks for channels with new open rows
DIGEST_EVERY = 10.0  # seconds between two looks for due digests
IDLE_WAIT = 0.5  # seconds a worker with nothing to claim waits before it looks again
DATABASE_WAIT = 5.0  # seconds a worker waits after the database failed a run
OTHERS_WAIT = 0.5  # seconds between two tries of a poll for the channels another live process keeps
HOLD_WAITS, MAX_HOLD_WAIT = 4, 60.0  # serve's poller waits out a workspace's hold this often, this long

Deliver = Callable[[Store], DeliveryReport]


def check(store: Store) -> None:
    """Refuse (UsageError, one line) a database a worker must not serve; claims nothing."""
    if store.backend != "postgres":
        raise UsageError("worker needs PostgreSQL: DATABASE_URL names a SQLite database, which one process "
                         "serves (`serve` or `poll` deliver there); see docs/workers.md")
    applied = set(store.applied_migrations())
    missing = [name for name in MIGRATIONS if name not in applied]
    if missing:
        raise UsageError(f"the {store.describe()} is not migrated for this release (missing {missing[0]}"
                         f"{f' and {len(missing) - 1} more' if len(missing) > 1 else ''}): run "
                         "`mlresearch-bot migrate` first")
    recorded, live = store.get_meta(IDENTITY_KEY), store.database_identity()
    if recorded != live:
        raise UsageError(f"the {store.describe()} is a copy of another database (migrate prepared "
                         f"{recorded}, "
                         f"this is {live}): a worker here would post what the original posts; run "
                         "`mlresearch-bot migrate` against this database to adopt it")


def new_worker_id() -> str:
    """host:pid:random, as heartbeats and claims name a worker."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def workers_alive(store: Store, lease: float) -> int:
    """How many workers have beaten within the last `lease` seconds and hold their database session."""
    return len(store.live_workers(time.time(), lease))


@dataclass
class Worker:
    """Delivers with `deliverer` through channel claims on `store` (see the module docstring). `digest`
    posts due digests; `register` False: no heartbeat (serve's poller delivering while no worker runs)."""

    store: Store
    deliverer: Deliverer
    digest: Deliver | None = None
    lease: float = DEFAULT_LEASE
    register: bool = True
    worker_id: str = field(default_factory=lambda: new_worker_id())
    chunk: int = 0  # channels claimed at a time (0: four times the pool)
    max_held: int = 512  # channels held at once
    _holds: dict[str, float] = field(default_factory=dict, init=False)
    _holds_read: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _holder: ClaimHolder | None = field(default=None, init=False)
    # each channel held: [when it was claimed, until when it is surely ours] (monotonic clock)
    _claims: dict[tuple[str, str], list[float]] = field(default_factory=dict, init=False)
    _told_lost: bool = field(default=False, init=False)
    _sessions: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.deliverer.hold = self._hold
        self.deliverer.on_ratelimited = self._ratelimited
        self.deliverer.fence = self._fence

    # the loop ---------------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, *, once: bool = False) -> DeliveryReport:
        """Deliver until `stop` is set (or, `once`, until nothing is left to claim); then release every claim
        and drop the heartbeat."""
        beating = threading.Event()
        beat = threading.Thread(target=self._beat, args=(beating,), name="heartbeat", daemon=True)
        delivered = failed = 0
        self._holding()  # first the session its claims (and its heartbeat's liveness) live with
        if self.register:
            self._heartbeat()
            log.info("event=worker_started worker=%s lease=%g", self.worker_id, self.lease)
            beat.start()
        last_digest = -DIGEST_EVERY
        try:
            while not stop.is_set():
                try:
                    report = self.deliver(stop)
                except StoreError as exc:  # the database is down or restarting: look again a little later
                    if once:
                        raise
                    log.warning("event=delivery_failed reason=database error=%r",
                                " ".join(str(exc).split())[:300])
                    stop.wait(DATABASE_WAIT)
                    continue
                delivered, failed = delivered + report.delivered, failed + report.failed
                if self.digest is not None and time.monotonic() - last_digest >= DIGEST_EVERY:
                    last_digest = time.monotonic()
                    report = self._digests()
                    delivered, failed = delivered + report.delivered, failed + report.failed
                if once:
                    break
                stop.wait(IDLE_WAIT)
        finally:
            beating.set()
            if beat.is_alive():
                beat.join(5)
            released = self.close()
            with suppress(StoreError):
                if self.register:
                    self.store.forget_worker(self.worker_id)
            log.info("event=worker_stopped worker=%s released=%d delivered=%d failed=%d",
                     self.worker_id, released, delivered, failed)
        return DeliveryReport(delivered=delivered, failed=failed)

    def close(self) -> int:
        """Give back every channel held and end the claims' session; how many channels were given back."""
        released = 0
        with suppress(StoreError):
            released = self.store.release_all(self.worker_id)
        if self._holder is not None:
            self._holder.close()
            self._holder = None
        return released

    def deliver(self, stop: threading.Event | None = None) -> DeliveryReport:
        """One run: claim channels while the pool has room, post their rows, release them; returns when
        nothing more can be claimed and every claimed channel is done (or `stop` is set)."""
        started = self.deliverer.clock()
        held: set[tuple[str, str]] = set()
        rows = 0
        discovered = [-DISCOVER_EVERY]
        holder = self._holding()
        with self.store.session() as session:
            run = self.deliverer.begin(session)

            def more() -> dict[tuple[str, str], Step]:
                nonlocal rows
                if (stop is not None and stop.is_set()) or not self._session_alive():
                    return {}  # stopping, or our claims died with our session: claim nothing more
                if time.monotonic() - discovered[0] >= DISCOVER_EVERY:
                    discovered[0] = time.monotonic()
                    session.discover_channels(LOCAL_TEAM_ID)
                self._read_holds(force=False)
                with self._lock:
                    room = min(self.chunk or 4 * self.deliverer.pool_size, self.max_held - len(held))
                if room <= 0:
                    return {}
                asked = time.monotonic()
                claimed = session.claim_channels(holder.id, room, now=time.time(), lease=self.lease)
                if not claimed:
                    return {}
                with self._lock:  # a channel this run already serves (its lease lapsed) gets no second step
                    claimed = [(t, c, at) for t, c, at in claimed if (t, c) not in held]
                    keys = [(team, channel) for team, channel, _ in claimed]
                    held.update(keys)
                    for key in keys:
                        self._claims[key] = [asked, asked + self.lease - self._margin]
                if not keys:
                    return {}
                found = session.open_deliveries_of(keys)
                rows += len(found)
                last = {(t, c): self._to_clock(at) for t, c, at in claimed if at is not None}
                steps = self.deliverer.steps(run, found, session.active_targets(keys), last)
                for key in keys:
                    if key not in steps:  # nothing to post after all (failed, or settled meanwhile)
                        done(key)
                return steps

            def done(key: tuple[str, str]) -> None:
                ch = run.channels.get(key)
                last = self._to_wall(ch.last_post) if ch is not None and ch.last_post is not None else None
                try:
                    session.release_channel(holder.id, key[0], key[1], last)
                except StoreError as exc:  # the lease ends it anyway
                    log.warning("event=release_failed team=%s channel=%s error=%r", key[0], key[1], str(exc))
                with self._lock:
                    held.discard(key)
                    self._claims.pop(key, None)

            renewing = threading.Event()
            renew = threading.Thread(target=self._renew, args=(renewing, holder), name="leases", daemon=True)
            renew.start()
            try:
                self.deliverer.schedule({}, more=more, done=done, stop=stop)
            finally:
                renewing.set()
                renew.join(5)
            if not rows and not run.failed:
                return DeliveryReport()
            return self.deliverer.report(run, rows, started)

    def _digests(self) -> DeliveryReport:
        """Due digests, posted by one process at a time (the "digest" lock); another holding it: next time."""
        assert self.digest is not None
        try:
            with self.store.poll_lock(timeout=0, name="digest"):
                return self.digest(self.store)
        except LockTimeout:
            return DeliveryReport()
        except StoreError as exc:
            log.warning("event=digest_failed reason=database error=%r", " ".join(str(exc).split())[:300])
        except Exception:  # noqa: BLE001 - a digest must not stop the worker
            log.exception("event=digest_crashed")
        return DeliveryReport()

    # the claims' session, heartbeat and leases -----------------------------------------------------------

    def _holding(self) -> ClaimHolder:
        """The session this process's claims live and die with (`Store.hold_claims`): opened at the first
        run, and again after one was lost, under a new id (`worker_id` + "/n"): the lost one's claims are
        anyone's now, this process's included, and its heartbeat no longer counts."""
        holder = self._holder
        if holder is not None and holder.alive():
            return holder
        if holder is not None:
            holder.close()
            self._holder = None
            lost, self._sessions = self.worker_id, self._sessions + 1
            self.worker_id = f"{lost.split('/')[0]}/{self._sessions}"
            if self.register:
                with suppress(StoreError):
                    self.store.forget_worker(lost)
        self._holder = self.store.hold_claims(self.worker_id)
        self._told_lost = False
        if self.register and holder is not None:
            self._heartbeat()
        return self._holder

    @property
    def _margin(self) -> float:
        """How long before its lease ends a channel is treated as lost (the clocks of two hosts differ)."""
        return min(self.lease / 6, 5.0)

    def _session_alive(self) -> bool:
        holder = self._holder
        if holder is not None and holder.alive():
            return True
        self._say_lost()
        return False

    def _fence(self, team_id: str, channel_id: str) -> str | None:
        """The holder id a row's claim in this channel must still find on the channel's claim row, or None
        when the channel may be another's now: the session holding this process's claims ended, or the
        channel's lease was not renewed in time (this process stalled) or was renewed without it (taken)."""
        holder = self._holder
        if holder is None or not self._session_alive():
            return None
        with self._lock:
            claim = self._claims.get((team_id, channel_id))
        if claim is None or time.monotonic() >= claim[1]:
            return None
        return holder.id

    def _say_lost(self) -> None:
        with self._lock:
            if self._told_lost:
                return
            self._told_lost = True
        log.warning("event=claims_lost worker=%s detail=\"the database session holding this process's "
                    "channel claims ended; it posts nothing more under them and claims again\"",
                    self.worker_id)

    def _heartbeat(self) -> None:
        self.store.heartbeat(self.worker_id, host=socket.gethostname(), pid=os.getpid(),
                             database=self.store.database_identity(), now=time.time())

    def _beat(self, stopping: threading.Event) -> None:
        while not stopping.wait(self.lease / 3):
            try:
                self._heartbeat()
            except StoreError as exc:  # the database is away: the next beat retries
                log.warning("event=heartbeat_failed worker=%s error=%r", self.worker_id, str(exc)[:300])

    def _renew(self, stopping: threading.Event, holder: ClaimHolder) -> None:
        """Renew the leases of the channels held, every lease/3 seconds, while a run goes on; and make sure
        the claims' session is still there (one the network cut off says nothing on its own)."""
        while not stopping.wait(self.lease / 3):
            if not holder.check():
                self._say_lost()
                return
            asked = time.monotonic()
            try:
                kept = self.store.renew_claims(holder.id, now=time.time(), lease=self.lease)
            except StoreError as exc:  # the database is away: the leases may run out; the next one retries
                log.warning("event=renew_failed worker=%s error=%r", holder.id, str(exc)[:300])
                continue
            with self._lock:
                for key, claim in self._claims.items():
                    if key in kept:
                        claim[1] = asked + self.lease - self._margin
                    elif claim[0] < asked:  # claimed before, not renewed: another holds it now
                        claim[1] = float("-inf")

    # shared 429 holds -----------------------------------------------------------------------------------

    def _ratelimited(self, team_id: str, seconds: float) -> None:
        until = time.time() + seconds
        with self._lock:
            self._holds[team_id] = max(until, self._holds.get(team_id, 0.0))
        log.warning("event=workspace_held team=%s seconds=%g detail=\"Slack answered 429: every worker "
                    "leaves this workspace alone until Retry-After ends\"", team_id, seconds)
        try:
            self.store.hold_workspace(team_id, until)
        except StoreError as exc:
            log.warning("event=hold_failed team=%s error=%r", team_id, str(exc)[:300])

    def _read_holds(self, *, force: bool) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self._holds_read < HOLDS_EVERY:
                return
            self._holds_read = now
        try:
            holds = self.store.workspace_holds(time.time())
        except StoreError:
            return
        with self._lock:
            for team, until in self._holds.items():  # our own, perhaps not written yet
                if until > time.time():
                    holds[team] = max(until, holds.get(team, 0.0))
            self._holds = holds

    def _hold(self, team_id: str) -> float | None:
        """The clock time before which nothing is posted to `team_id`, or None."""
        self._read_holds(force=False)
        with self._lock:
            until = self._holds.get(team_id)
        return self._to_clock(until) if until is not None and until > time.time() else None

    def _to_clock(self, wall: float) -> float:
        return self.deliverer.clock() + (wall - time.time())

    def _to_wall(self, clock: float) -> float:
        return time.time() - (self.deliverer.clock() - clock)


@dataclass
class PollerDelivery:
    """The delivery step of a poll on PostgreSQL (see the module docstring); `client_for` is the deliverer's
    (the digest step is built from it)."""

    deliverer: Deliverer
    lease: float = DEFAULT_LEASE

    @property
    def client_for(self) -> Callable[[str], object]:
        return self.deliverer.client_for

    def __call__(self, store: Store) -> DeliveryReport:
        alive = workers_alive(store, self.lease)
        if alive:
            left = store.count_open(LOCAL_TEAM_ID)
            log.info("event=delivery_left_to_workers workers=%d rows=%d", alive, left)
            return DeliveryReport(left=left)
        worker = Worker(store, self.deliverer, lease=self.lease, register=False,
                        worker_id=f"poller:{new_worker_id()}")
        try:
            report = worker.deliver()
            for _ in range(HOLD_WAITS):  # a 429 held a workspace: wait it out, as slack_sdk's retries did
                holds = store.workspace_holds(time.time())
                if not holds:
                    break
                time.sleep(min(max(holds.values()) - time.time(), MAX_HOLD_WAIT))
                more = worker.deliver()
                report = DeliveryReport(report.delivered + more.delivered, report.failed + more.failed)
            return self._others(store, worker, report)
        finally:
            worker.close()

    def _others(self, store: Store, worker: Worker, report: DeliveryReport) -> DeliveryReport:
        """Channels another live process keeps (a worker that started during this run, one stalled): each is
        claimed as soon as it is free, for at most a lease; what is still kept then (or, once a worker is
        alive, everything open: the workers deliver it) is counted as left to others."""
        deadline = time.monotonic() + self.lease
        while True:
            if workers_alive(store, self.lease):
                left = store.count_open(LOCAL_TEAM_ID)
                break
            left = store.held_by_others(worker.worker_id, time.time(), LOCAL_TEAM_ID)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(min(OTHERS_WAIT, max(deadline - time.monotonic(), 0.0)))
            more = worker.deliver()
            report = DeliveryReport(report.delivered + more.delivered, report.failed + more.failed)
        if left:
            log.info("event=delivery_left_to_others rows=%d detail=\"another live process keeps their "
                     "channels: it posts them\"", left)
        return DeliveryReport(report.delivered, report.failed, left)


@dataclass
class PollerDigest:
    """The digest step of a poll on PostgreSQL: nothing while a worker is alive (workers post digests),
    otherwise the digest under the "digest" lock a worker also takes."""

    digest: Deliver
    lease: float = DEFAULT_LEASE

    def __call__(self, store: Store) -> DeliveryReport:
        if workers_alive(store, self.lease):
            return DeliveryReport()
        try:
            with store.poll_lock(timeout=0, name="digest"):
                return self.digest(store)
        except LockTimeout:
            return DeliveryReport()
