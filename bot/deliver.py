"""Fan-out over the delivery ledger: every open (item, channel) row is posted exactly once, by a pool.

A `Deliverer` is the `deliver` step of `poller.poll_once`, and runs under the store's poll lock, so it is the
only deliverer: a row already in state `posting` when a run starts was claimed by a process that died, and its
fate is unknown; `bot.posting` reconciles it before posting again. This module decides what is sent to whom
and when; `bot.posting` posts one message exactly once (claim, post, reconcile by metadata, settle or fail)
and holds the error policy.

Bursts: when one poll queued more than `burst_threshold` (BURST_THRESHOLD) rows for a channel, and none of
them has been tried yet, they become a burst once (`Store.form_batch`, a `batches` row: the decision survives
restarts, and rows of another poll never join). The burst's top-level message (`blocks.batch_message`,
metadata `mlresearch_batch`) is posted under its own ledger row, then each item's usual message in its
thread. A burst message that fails for good leaves its items to be posted on their own.

A follow-up's row (target 'followup:code' or 'followup:venue', queued by `Store.record_page` when an item's
page later shows a code release or a venue) is a reply in the thread of the item's post in that channel
(its `thread_ts`), posted with the channel's other rows, paced and exactly once as they are.

A follow's row (target 'person', its channel_id the user ID) is a direct message: the person's DM is opened
(`posting.open_dm`) and the message posted there, as a channel's. A person who cannot be messaged fails only
their rows. Follow rows carry no poll, so they are never a burst.

Channels are served concurrently by a small pool, each channel oldest first and paced (about one post per
second): a channel's work yields while it waits for its pace, and the pool's threads serve whichever channel
is due, so a burst's 40 posts to one channel do not hold a thread for 40 seconds. A channel whose
subscription Slack's errors pause stops; a workspace whose token Slack refuses (invalid_auth, token_revoked,
account_inactive) is disabled (logged loudly) and its remaining rows fail; others go on.

Each workspace is posted to with the client `client_for(team_id)` gives (once per run): the one bot token of
a single-workspace install, or in OAuth mode the token of the workspace's own installation
(`bot.oauth.WorkspaceClients`, refreshed when about to expire). A workspace with no installation has no
client: its rows fail (`not_installed`), never posted with another workspace's token; one whose token refresh
Slack refuses is disabled, as for invalid_auth. Rows of the local shell's workspace (LOCAL_TEAM_ID, see
`bot.shell`) are left for the shell to print: a store the shell used can be served without posting them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from slack_sdk import WebClient

from bot import blocks
from bot.config import Settings
from bot.errors import WorkspaceUnavailable
from bot.models import Delivery, DeliveryBatch, DeliveryReport, Item
from bot.posting import (
    MAX_ATTEMPTS,
    Channel,
    Defer,
    Job,
    Paused,
    Posting,
    Step,
    Unreachable,
    WorkspaceDown,
    fail,
    log_failure,
    open_dm,
)
from bot.slackweb import make_client, posting_client
from bot.store import Store

log = logging.getLogger("bot.deliver")

DEFAULT_POOL_SIZE = 8
DEFAULT_PACE = 1.0  # seconds between two posts to one channel
LOCAL_TEAM_ID = "TSHELL"  # the workspace `mlresearch-bot shell` stands in for; never a real Slack team

ClientFor = Callable[[str], WebClient]
More = Callable[[], dict[tuple[str, str], Step]]


@dataclass
class Run:
    """One delivery run: its store (a session), posting policy, and what it learned: each workspace's
    disabled reason, client or why it has none, each channel served, rows failed before any post."""

    store: Store
    posting: Posting
    disabled: dict[str, str | None] = field(default_factory=dict)
    clients: dict[str, WebClient] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    channels: dict[tuple[str, str], Channel] = field(default_factory=dict)
    failed: int = 0


def from_settings(settings: Settings, store: Store | None = None) -> Deliverer | None:
    """The deliverer for `poll` and `serve`: one token for every workspace (single-workspace install), or in
    OAuth mode each workspace's own token, from its installation in `store` (`bot.oauth.WorkspaceClients`)."""
    if settings.oauth_enabled:
        if store is None:
            raise ValueError("OAuth mode: the deliverer needs the store that holds the installations")
        from bot.oauth import WorkspaceClients  # the OAuth boundary: imported in OAuth mode only

        return Deliverer(WorkspaceClients(store, settings), burst_threshold=settings.burst_threshold)
    if not settings.slack_bot_token:
        log.warning("event=delivery_disabled reason=no_token detail=\"SLACK_BOT_TOKEN is not set; "
                    "new items stay queued until it is\"")
        return None
    client = make_client(settings.slack_bot_token, settings.slack_api_url)
    return Deliverer(lambda team_id: client, burst_threshold=settings.burst_threshold)


@dataclass
class Deliverer:
    """Callable `Store -> DeliveryReport`. Dependencies are explicit: `client_for(team_id)` gives the team's
    WebClient; `pace` is the minimum time between two posts to one channel; `backoff` the first wait before
    re-posting a row of unknown fate; `burst_threshold` how many items of one poll a channel takes one by one
    (more are a burst; None: never); `sleep`/`clock` can be replaced in tests."""

    client_for: ClientFor
    pool_size: int = DEFAULT_POOL_SIZE
    pace: float = DEFAULT_PACE
    backoff: float = 0.5
    max_attempts: int = MAX_ATTEMPTS
    burst_threshold: int | None = None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    # a worker's: team -> clock time before which nothing is posted to it; (team, Retry-After) of a 429
    hold: Callable[[str], float | None] | None = None
    on_ratelimited: Callable[[str, float], None] | None = None
    # a worker's: (team, channel) -> its claim holder's id, or None once the channel may be another's
    fence: Callable[[str, str], str | None] | None = None
    refill_wait: float = 0.5  # seconds before `more` is asked again after it had nothing
    top_up_every: float = 2.0  # seconds between two asks of `more` while the pool is busy (see schedule)
    _down: dict[str, str] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __call__(self, store: Store) -> DeliveryReport:
        started = self.clock()
        self._down = {}
        rows = [r for r in store.open_deliveries() if r.team_id != LOCAL_TEAM_ID]
        if not rows:
            return DeliveryReport()
        with store.session() as session:  # one connection for the run, handed between the pool's threads
            run = self.begin(session)
            active = {(s.team_id, s.channel_id) for s in session.subscriptions() if not s.paused}
            active |= session.followers()  # a follow's row: (team, user ID)
            self.schedule(self.steps(run, rows, active))
            return self.report(run, len(rows), started)

    def begin(self, store: Store) -> Run:
        """A delivery run over `store` (a session): its posting policy, and what it learns of workspaces."""
        self._down = {}
        store.close_orphan_batches()
        posting = Posting(self.pace, self.backoff, self.max_attempts, self.clock, self.hold, self.fence)
        return Run(store, posting)

    def report(self, run: Run, rows: int, started: float) -> DeliveryReport:
        delivered = sum(ch.delivered for ch in run.channels.values())
        failed = run.failed + sum(ch.failed for ch in run.channels.values())
        log.info("event=delivery_run channels=%d rows=%d delivered=%d failed=%d seconds=%.2f",
                 len(run.channels), rows, delivered, failed, self.clock() - started)
        return DeliveryReport(delivered=delivered, failed=failed)

    def steps(
        self, run: Run, rows: list[Delivery], active: set[tuple[str, str]],
        last_posts: dict[tuple[str, str], float] | None = None,
    ) -> dict[tuple[str, str], Step]:
        """Each channel's step for `rows` (ledger order): rows that cannot be sent (a disabled workspace, an
        unsubscribed channel, one not in `active`) fail here; the others are grouped by channel, bursts
        formed. `last_posts` gives a channel's last post (clock time) when it was posted to before."""
        store = run.store
        items = store.get_items(sorted({r.item_id for r in rows}))
        for team in {r.team_id for r in rows} - run.disabled.keys():
            run.disabled[team] = store.workspace_disabled(team)
        self._clients(run)
        groups: dict[tuple[str, str], list[Delivery]] = {}
        for row in rows:  # ledger order: oldest first within each channel
            reason = run.disabled[row.team_id] or self._down.get(row.team_id)
            why = f"workspace_disabled: {reason}" if reason is not None else run.unavailable.get(row.team_id)
            if why is None and (row.team_id, row.channel_id) not in active:
                why = "not_following" if row.to_person else "not_subscribed"
            if why is not None:
                log_failure(row, why)
                store.mark_failed(row.id, why)
                run.failed += 1
            else:
                groups.setdefault((row.team_id, row.channel_id), []).append(row)
        plans = {key: self._bursts(store, rows) for key, rows in groups.items()}
        steps: dict[tuple[str, str], Step] = {}
        for key in groups:
            client = run.clients[key[0]]
            hit = None if self.on_ratelimited is None else partial(self.on_ratelimited, key[0])
            ch = Channel(key[0], key[1], client, posting_client(client, hit))
            ch.last_post = (last_posts or {}).get(key)
            run.channels[key] = ch
            steps[key] = self._serve(store, run.posting, ch, plans[key], items)
        return steps

    def _clients(self, run: Run) -> None:
        """Each enabled workspace's client (`client_for`, once per run), and why the others have none."""
        store = run.store
        wanted = {team for team, reason in run.disabled.items() if reason is None}
        for team_id in sorted(wanted - run.clients.keys() - run.unavailable.keys()):
            try:
                run.clients[team_id] = self.client_for(team_id)
            except WorkspaceUnavailable as exc:
                run.unavailable[team_id] = exc.reason
                log.error("event=workspace_unavailable team=%s reason=%r", team_id, exc.reason)
                if exc.disable:
                    self._disable(store, team_id, exc.reason)

    def _bursts(
        self, store: Store, rows: list[Delivery]
    ) -> list[tuple[DeliveryBatch | None, list[Delivery]]]:
        """One channel's open rows as what it is sent, in ledger order: rows alone (None) and bursts (a batch
        and its rows). The rows of one poll become a burst here, once (`Store.form_batch`), when they are more
        than `burst_threshold` and none has been tried alone; a burst formed earlier stays one."""
        polls: dict[str, list[Delivery]] = {}
        for row in rows:
            if row.poll is not None and row.batch_id is None:
                polls.setdefault(row.poll, []).append(row)
        formed: dict[int, str] = {}
        if self.burst_threshold is not None:
            for group in polls.values():
                fresh = all(r.state == "pending" and not r.attempts for r in group)
                if fresh and len(group) > self.burst_threshold:
                    batch = store.form_batch(group)
                    if batch is not None:
                        formed.update((r.id, batch.id) for r in group)
                        log.info("event=burst_formed team=%s channel=%s batch=%s items=%d",
                                 batch.team_id, batch.channel_id, batch.id, batch.count)
        batch_of = {r.id: r.batch_id or formed.get(r.id) for r in rows}
        known = {b.id: b for b in store.batches(sorted({b for b in batch_of.values() if b}))}
        plan: list[tuple[DeliveryBatch | None, list[Delivery]]] = []
        units: dict[str, list[Delivery]] = {}
        for row in rows:
            batch_id = batch_of[row.id]
            batch = known.get(batch_id) if batch_id else None
            if batch is None:
                plan.append((None, [row]))
            elif batch.id in units:
                units[batch.id].append(row)
            else:
                units[batch.id] = [row]
                plan.append((batch, units[batch.id]))
        return plan

    # the pool ---------------------------------------------------------------------------------------

    def schedule(
        self, steps: dict[tuple[str, str], Step], *, more: More | None = None,
        done: Callable[[tuple[str, str]], None] | None = None, stop: threading.Event | None = None,
    ) -> None:
        """Run each channel's steps on a pool of `pool_size` threads. A channel's step yields when it must
        wait (pacing between its posts, backoff, a workspace's hold), and the thread serves whichever channel
        is due first, so a burst's many posts to one channel never hold a thread while it waits its turn.

        A worker passes `more` (called by a thread of its own whenever fewer steps than the pool are due: the
        next channels' steps, claimed; and every `top_up_every` seconds however busy the pool is, so that a
        channel waiting its turn starts while the others are still posting, instead of beginning a paced
        queue of its own once they are done; after an empty answer it is asked again `refill_wait` seconds
        later, and the run ends once nothing is left and `more` had nothing), `done` (told
        each channel whose step ended, to release it) and `stop` (once set, no step goes on: each is closed
        at its next wait, which leaves its row pending or, with its fate unknown, `posting`). Returns when no
        step is left and `more` has nothing, or once stopped."""
        heap: list[tuple[float, int, tuple[str, str], Step]] = []
        order = itertools.count()
        now = self.clock()
        for key, step in steps.items():
            heap.append((now, next(order), key, step))
        heapq.heapify(heap)
        cond = threading.Condition()
        busy = 0
        finished = False  # (with `more`) nothing is left and `more` had nothing more
        dry_until = 0.0
        asked = self.clock()  # when `more` was last asked

        def stopped() -> bool:
            return stop is not None and stop.is_set()

        def finish(key: tuple[str, str], step: Step | None) -> None:
            if step is not None:
                try:
                    step.close()
                except Exception:  # noqa: BLE001 - a step that fails to stop must not stop the others
                    log.exception("event=delivery_crashed team=%s channel=%s", key[0], key[1])
            if done is not None:
                done(key)

        def feed() -> None:
            """With `more`: keep at least a pool's worth of steps due, and top up every `top_up_every` s."""
            nonlocal finished, dry_until, asked
            assert more is not None
            while True:
                with cond:
                    while True:
                        now = self.clock()
                        if stopped() or (now < dry_until and not heap and not busy):
                            finished = True
                            cond.notify_all()
                            return
                        if now >= dry_until and (now >= asked + self.top_up_every or sum(
                                1 for entry in heap if entry[0] <= now) < self.pool_size):
                            break
                        cond.wait(max(dry_until, asked + self.top_up_every) - now)
                    asked = now
                fresh: dict[tuple[str, str], Step] = {}
                try:
                    fresh = more()
                except Exception:  # noqa: BLE001 - a failed claim is tried again after refill_wait
                    log.exception("event=claim_failed")
                with cond:
                    now = self.clock()
                    if not fresh:
                        dry_until = now + self.refill_wait
                    for key, step in fresh.items():
                        heapq.heappush(heap, (now, next(order), key, step))
                    cond.notify_all()

        def work() -> None:
            nonlocal busy
            while True:
                task: tuple[float, int, tuple[str, str], Step] | None = None
                closing: list[tuple[float, int, tuple[str, str], Step]] = []
                with cond:
                    while True:
                        if stopped():
                            closing, heap[:] = heap[:], []
                            if not closing:
                                cond.notify_all()
                                return
                            break
                        now = self.clock()
                        if heap and heap[0][0] <= now:
                            task = heapq.heappop(heap)
                            busy += 1
                            break
                        if not heap and not busy and (more is None or finished):
                            cond.notify_all()
                            return
                        cond.wait(heap[0][0] - now if heap else None)
                for _, _, key, step in closing:
                    finish(key, step)
                if task is None:
                    continue
                _, n, key, step = task
                again: float | None = None
                try:
                    again = next(step)
                except StopIteration:
                    pass
                except Exception:  # noqa: BLE001 - one channel's crash must not stop the others
                    log.exception("event=delivery_crashed team=%s channel=%s", key[0], key[1])
                if again is not None and stopped():
                    finish(key, step)
                    again = None
                elif again is None and done is not None:
                    done(key)
                with cond:
                    busy -= 1
                    if again is not None:
                        heapq.heappush(heap, (again, n, key, step))
                    cond.notify_all()

        workers = max(1, self.pool_size if more is not None else min(self.pool_size, len(steps)))
        with ThreadPoolExecutor(max_workers=workers + 1, thread_name_prefix="deliver") as pool:
            futures = [pool.submit(work) for _ in range(workers)]
            if more is not None:
                futures.append(pool.submit(feed))
            for future in futures:
                future.result()

    # one channel ------------------------------------------------------------------------------------

    def _serve(
        self, store: Store, posting: Posting, ch: Channel,
        plan: list[tuple[DeliveryBatch | None, list[Delivery]]], items: dict[str, Item],
    ) -> Step:
        left = sum(len(rows) for _, rows in plan)  # rows not yet settled in this run, for a pause's count
        if plan and plan[0][1][0].to_person:  # a person's follow messages, in their DM
            ch.person = ch.channel_id
            try:
                open_dm(ch)
            except Defer:
                return
            except (WorkspaceDown, Unreachable) as exc:
                if isinstance(exc, WorkspaceDown):
                    self._disable(store, ch.team_id, str(exc))
                for _, rows in plan:
                    for row in rows:
                        fail(store, ch, Job(row=row), str(exc))
                return
        for batch, rows in plan:
            thread_ts: str | None = None
            if batch is not None and batch.state == "sent":
                thread_ts = batch.ts
            elif batch is not None and batch.state in ("pending", "posting"):
                listed = [items[r.item_id] for r in rows if r.item_id in items]
                try:
                    thread_ts = yield from self._burst(store, posting, ch, batch, listed)
                except Defer:
                    return
                except Paused:
                    ch.failed += left
                    return
            # a burst whose message failed for good: its items are posted on their own
            for row in rows:
                down = self._down.get(ch.team_id)
                if down is not None:
                    fail(store, ch, Job(row=row), f"workspace_disabled: {down}")
                    left -= 1
                    continue
                try:
                    yield from self._item(store, posting, ch, row, items.get(row.item_id), thread_ts)
                except Defer:
                    return
                except Paused:  # pause_subscription failed this row and the channel's later ones
                    ch.failed += left
                    return
                except WorkspaceDown as exc:
                    self._disable(store, ch.team_id, str(exc))
                    fail(store, ch, Job(row=row), str(exc))
                left -= 1

    def _burst(
        self, store: Store, posting: Posting, ch: Channel, batch: DeliveryBatch, listed: list[Item]
    ) -> Step:
        """Post (or find) a burst's message: its ts, or None when it failed for good."""
        if self._down.get(ch.team_id) is not None:
            return None
        try:
            return (yield from posting.deliver(store, ch, Job(batch=batch, items=listed)))
        except WorkspaceDown as exc:
            self._disable(store, ch.team_id, str(exc))
            store.mark_batch_failed(batch.id, str(exc))
            return None

    def _item(
        self, store: Store, posting: Posting, ch: Channel, row: Delivery, item: Item | None,
        thread_ts: str | None,
    ) -> Step:
        if item is None:
            fail(store, ch, Job(row=row), "item_missing")
            return
        if row.followup is not None:  # a reply in the thread of the item's post in this channel
            if blocks.followup_message(item, row.followup) is None:
                fail(store, ch, Job(row=row), "nothing_to_follow_up")
                return
            thread_ts = row.thread_ts
        ts = yield from posting.deliver(store, ch, Job(row=row, item=item, thread_ts=thread_ts))
        if ts is not None:
            ch.delivered += 1

    def _disable(self, store: Store, team_id: str, reason: str) -> None:
        with self._lock:
            if team_id in self._down:
                return
            self._down[team_id] = reason
        store.disable_workspace(team_id, reason)
        log.error("event=workspace_disabled team=%s reason=%s detail=\"Slack refused the token; delivery "
                  "to this workspace has stopped until the app is reinstalled\"", team_id, reason)
