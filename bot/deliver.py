"""Fan-out over the delivery ledger: every open (item, channel) row is posted exactly once.

A `Deliverer` is the `deliver` step of `poller.poll_once`, and runs under the store's poll lock, so it is the
only deliverer: a row already in state `posting` when a run starts was claimed by a process that died, and its
fate is unknown. Such a row is reconciled first, by reading the channel's recent history for our message
metadata; only when the message is absent is it posted again (without the history scope: posted again, at
least once, with a warning).

Bursts: when one poll queued more than `burst_threshold` (BURST_THRESHOLD) rows for a channel, and none of
them has been tried yet, they become a burst once (`Store.form_batch`, a `batches` row: the decision survives
restarts, and rows of another poll never join). The burst's top-level message (`blocks.batch_message`,
metadata `mlresearch_batch`) is posted under its own ledger row, then each item's usual message in its
thread. A burst message of unknown fate is looked for in the channel's history by its batch id; a reply, in
the thread (conversations.replies) by its item id. A burst message that fails for good leaves its items to
be posted on their own.

A follow's row (target 'person', its channel_id the user ID) is a direct message: the person's DM is opened
(conversations.open, im:write), the message posted there and looked for there after a crash (im:history), as
a channel's. A person who cannot be messaged (user_not_found, user_disabled, cannot_dm_bot...) fails only
their rows; without im:write the message goes to the user ID (Slack's DM too) and cannot be reconciled.
Follow rows carry no poll, so they are never a burst.

Channels are served concurrently by a small pool, each channel oldest first and paced (about one post per
second): a channel's work yields while it waits for its pace, and the pool's threads serve whichever channel
is due, so a burst's 40 posts to one channel do not hold a thread for 40 seconds. Slack errors, by kind:

    429                          slack_sdk waits Retry-After and retries; if it persists, the row goes back
                                 to pending and the channel waits for the next poll
    5xx, internal_error,         the post's fate is unknown: back off, reconcile, post again (a few times);
      a broken connection        still unknown: the row stays `posting` and is reconciled at the next poll
    channel_not_found,           the channel's subscription is paused with the reason; others go on
      is_archived, not_in_channel
    invalid_auth, token_revoked, the workspace is disabled (logged loudly) and its remaining rows fail
      account_inactive
    invalid_blocks,              posted once more as text only
      msg_blocks_too_long
    anything else                that row fails; later rows go on

A row claimed `MAX_ATTEMPTS` times without success fails for good, so no failure blocks a channel forever.

Each workspace is posted to with the client `client_for(team_id)` gives (once per run): the one bot token of
a single-workspace install, or in OAuth mode the token of the workspace's own installation
(`bot.oauth.WorkspaceClients`, refreshed when about to expire). A workspace with no installation has no
client: its rows fail (`not_installed`), never posted with another workspace's token; one whose token refresh
Slack refuses is disabled, as for invalid_auth. Rows of the local shell's workspace (LOCAL_TEAM_ID, see
`bot.shell`) are left for the shell to print: a store the shell used can be served without posting them.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import blocks
from bot.config import Settings
from bot.errors import WorkspaceUnavailable
from bot.models import Delivery, DeliveryBatch, DeliveryReport, Item
from bot.slackweb import (
    BLOCKS_ERRORS,
    CHANNEL_ERRORS,
    NO_HISTORY_ERRORS,
    NOT_SENT_ERRORS,
    TRANSPORT_ERRORS,
    UNKNOWN_FATE_ERRORS,
    WORKSPACE_ERRORS,
    error_code,
    make_client,
    posting_client,
)
from bot.store import Store, utcnow

log = logging.getLogger("bot.deliver")

DEFAULT_POOL_SIZE = 8
DEFAULT_PACE = 1.0  # seconds between two posts to one channel
MAX_ATTEMPTS = 5  # claims of one row, across polls, before it fails for good
POST_TRIES = 3  # posts of one row within one run when its fate stays unknown
RECONCILE_MARGIN = timedelta(minutes=2)
HISTORY_PAGES = 5
LOCAL_TEAM_ID = "TSHELL"  # the workspace `mlresearch-bot shell` stands in for; never a real Slack team

ClientFor = Callable[[str], WebClient]


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


def posted_ts(
    messages: Sequence[dict[str, Any]], item_id: str, *, event_type: str = blocks.EVENT_TYPE,
    key: str = "item_id",
) -> str | None:
    """The ts of our post of `item_id` among channel messages (read with include_all_metadata); with
    `event_type`/`key`, of another of our messages (a burst's: mlresearch_batch, batch_id)."""
    for message in messages:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == event_type and payload.get(key) == item_id:
            return str(message["ts"])
    return None


class _Defer(Exception):
    """Stop serving this channel in this run; its open rows wait for the next poll."""


class _Paused(Exception):
    """The channel's subscription was paused (its open rows failed with it)."""


class _WorkspaceDown(Exception):
    """The workspace's token no longer works."""


class _Unreachable(Exception):
    """The person cannot be sent a direct message (deactivated, unknown, ...)."""


@dataclass
class _Channel:
    team_id: str
    channel_id: str
    client: WebClient
    poster: WebClient
    last_post: float | None = None
    delivered: int = 0
    failed: int = 0
    person: str | None = None  # a follow's direct messages: the user ID (channel_id becomes their DM's)


@dataclass
class _Job:
    """One message to post under its ledger row: an item's (`row`; in a burst's thread when `thread_ts`), or
    a burst's top-level message (`batch`, with the items it lists)."""

    row: Delivery | None = None
    item: Item | None = None
    batch: DeliveryBatch | None = None
    items: list[Item] = field(default_factory=list)
    thread_ts: str | None = None

    @property
    def label(self) -> str:
        """What log lines name: the item, or the burst."""
        if self.batch is not None:
            return f"batch:{self.batch.id}"
        assert self.row is not None
        return self.row.item_id

    @property
    def ledger(self) -> Delivery | DeliveryBatch:
        found = self.batch if self.batch is not None else self.row
        assert found is not None
        return found

    def message(self, text_only: bool) -> dict[str, Any]:
        if self.batch is not None:
            message = blocks.batch_message(self.batch.id, self.batch.count, self.items)
            if text_only:
                message.pop("blocks")
            return message
        assert self.row is not None and self.item is not None
        if text_only:
            message = blocks.item_text(self.item)
        else:
            build = blocks.follow_message if self.row.to_person else blocks.item_message
            message = build(self.item, self.row.matched)
        if self.thread_ts is not None:
            message["thread_ts"] = self.thread_ts
        return message


Step = Generator[float, None, Any]  # yields the clock time it waits for (pacing, backoff), then returns


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
    _down: dict[str, str] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __call__(self, store: Store) -> DeliveryReport:
        started = self.clock()
        self._down = {}
        rows = [r for r in store.open_deliveries() if r.team_id != LOCAL_TEAM_ID]
        if not rows:
            return DeliveryReport()
        with store.session() as run:  # one connection for the run, handed between the pool's threads
            return self._run(run, rows, started)

    def _run(self, store: Store, rows: list[Delivery], started: float) -> DeliveryReport:
        items = store.get_items(sorted({r.item_id for r in rows}))
        active = {(s.team_id, s.channel_id) for s in store.subscriptions() if not s.paused}
        active |= store.followers()  # a follow's row: (team, user ID)
        disabled = {team: store.workspace_disabled(team) for team in {r.team_id for r in rows}}
        clients, unavailable = self._clients(store, disabled)
        groups: dict[tuple[str, str], list[Delivery]] = {}
        failed = 0
        for row in rows:  # ledger order: oldest first within each channel
            reason = disabled[row.team_id]
            why = f"workspace_disabled: {reason}" if reason is not None else unavailable.get(row.team_id)
            if why is None and (row.team_id, row.channel_id) not in active:
                why = "not_following" if row.to_person else "not_subscribed"
            if why is not None:
                _log_failure(row, why)
                store.mark_failed(row.id, why)
                failed += 1
            else:
                groups.setdefault((row.team_id, row.channel_id), []).append(row)
        store.close_orphan_batches()
        plans = {key: self._bursts(store, rows) for key, rows in groups.items()}
        channels = {key: _Channel(key[0], key[1], clients[key[0]], posting_client(clients[key[0]]))
                    for key in groups}
        self._schedule({key: self._serve(store, channels[key], plans[key], items) for key in groups})
        delivered = sum(ch.delivered for ch in channels.values())
        failed += sum(ch.failed for ch in channels.values())
        log.info("event=delivery_run channels=%d rows=%d delivered=%d failed=%d seconds=%.2f",
                 len(groups), len(rows), delivered, failed, self.clock() - started)
        return DeliveryReport(delivered=delivered, failed=failed)

    def _clients(
        self, store: Store, disabled: dict[str, str | None]
    ) -> tuple[dict[str, WebClient], dict[str, str]]:
        """Each enabled workspace's client (`client_for`, once per run), and why the others have none."""
        clients: dict[str, WebClient] = {}
        unavailable: dict[str, str] = {}
        for team_id in sorted(team for team, reason in disabled.items() if reason is None):
            try:
                clients[team_id] = self.client_for(team_id)
            except WorkspaceUnavailable as exc:
                unavailable[team_id] = exc.reason
                log.error("event=workspace_unavailable team=%s reason=%r", team_id, exc.reason)
                if exc.disable:
                    self._disable(store, team_id, exc.reason)
        return clients, unavailable

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

    def _schedule(self, steps: dict[tuple[str, str], Step]) -> None:
        """Run each channel's steps on a pool of `pool_size` threads. A channel's step yields when it must
        wait (pacing between its posts, backoff), and the thread serves whichever channel is due first, so
        a burst's many posts to one channel never hold a thread while it waits its turn."""
        heap: list[tuple[float, int, tuple[str, str], Step]] = []
        now = self.clock()
        for n, (key, step) in enumerate(steps.items()):
            heap.append((now, n, key, step))
        heapq.heapify(heap)
        cond = threading.Condition()
        busy = 0

        def work() -> None:
            nonlocal busy
            while True:
                with cond:
                    while not heap and busy:
                        cond.wait()
                    if not heap:
                        return
                    due, n, key, step = heapq.heappop(heap)
                    busy += 1
                wait = due - self.clock()
                if wait > 0:
                    self.sleep(wait)
                again: float | None = None
                try:
                    again = next(step)
                except StopIteration:
                    pass
                except Exception:  # noqa: BLE001 - one channel's crash must not stop the others
                    log.exception("event=delivery_crashed team=%s channel=%s", key[0], key[1])
                with cond:
                    busy -= 1
                    if again is not None:
                        heapq.heappush(heap, (again, n, key, step))
                    cond.notify_all()

        workers = max(1, min(self.pool_size, len(steps)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver") as pool:
            for future in [pool.submit(work) for _ in range(workers)]:
                future.result()

    # one channel ------------------------------------------------------------------------------------

    def _serve(
        self, store: Store, ch: _Channel, plan: list[tuple[DeliveryBatch | None, list[Delivery]]],
        items: dict[str, Item],
    ) -> Step:
        left = sum(len(rows) for _, rows in plan)  # rows not yet settled in this run, for a pause's count
        if plan and plan[0][1][0].to_person:  # a person's follow messages, in their DM
            ch.person = ch.channel_id
            try:
                self._open_dm(ch)
            except _Defer:
                return
            except (_WorkspaceDown, _Unreachable) as exc:
                if isinstance(exc, _WorkspaceDown):
                    self._disable(store, ch.team_id, str(exc))
                for _, rows in plan:
                    for row in rows:
                        self._fail(store, ch, _Job(row=row), str(exc))
                return
        for batch, rows in plan:
            thread_ts: str | None = None
            if batch is not None and batch.state == "sent":
                thread_ts = batch.ts
            elif batch is not None and batch.state in ("pending", "posting"):
                listed = [items[r.item_id] for r in rows if r.item_id in items]
                try:
                    thread_ts = yield from self._burst(store, ch, batch, listed)
                except _Defer:
                    return
                except _Paused:
                    ch.failed += left
                    return
            # a burst whose message failed for good: its items are posted on their own
            for row in rows:
                down = self._down.get(ch.team_id)
                if down is not None:
                    self._fail(store, ch, _Job(row=row), f"workspace_disabled: {down}")
                    left -= 1
                    continue
                try:
                    yield from self._item(store, ch, row, items.get(row.item_id), thread_ts)
                except _Defer:
                    return
                except _Paused:  # pause_subscription failed this row and the channel's later ones
                    ch.failed += left
                    return
                except _WorkspaceDown as exc:
                    self._disable(store, ch.team_id, str(exc))
                    self._fail(store, ch, _Job(row=row), str(exc))
                left -= 1

    def _burst(self, store: Store, ch: _Channel, batch: DeliveryBatch, listed: list[Item]) -> Step:
        """Post (or find) a burst's message: its ts, or None when it failed for good."""
        if self._down.get(ch.team_id) is not None:
            return None
        try:
            return (yield from self._deliver(store, ch, _Job(batch=batch, items=listed)))
        except _WorkspaceDown as exc:
            self._disable(store, ch.team_id, str(exc))
            store.mark_batch_failed(batch.id, str(exc))
            return None

    def _item(
        self, store: Store, ch: _Channel, row: Delivery, item: Item | None, thread_ts: str | None
    ) -> Step:
        if item is None:
            self._fail(store, ch, _Job(row=row), "item_missing")
            return
        ts = yield from self._deliver(store, ch, _Job(row=row, item=item, thread_ts=thread_ts))
        if ts is not None:
            ch.delivered += 1

    def _deliver(self, store: Store, ch: _Channel, job: _Job) -> Step:
        """Post one job exactly once: its ts; None when it is settled as failed; raises to stop the
        channel."""
        ledger = job.ledger
        state, attempts, last_error = ledger.state, ledger.attempts, ledger.error or "unknown"
        claimed_at = ledger.claimed_at or utcnow()
        for try_no in range(POST_TRIES):
            if try_no:
                yield self.clock() + self.backoff * 2 ** (try_no - 1)
            if state == "posting":  # a post of unknown fate: look before posting again
                ts = self._find_post(ch, job, claimed_at)
                if ts is not None:
                    self._settle_sent(store, job, ts)
                    log.info("event=delivery_reconciled channel=%s item=%s ts=%s",
                             ch.channel_id, job.label, ts)
                    return ts
            if attempts >= self.max_attempts:
                self._fail(store, ch, job, f"gave_up after {attempts} attempts: {last_error}")
                return None
            if not self._claim(store, job, state):
                raise _Defer  # changed under us (unsubscribed, paused): leave the channel alone
            state, attempts, claimed_at = "posting", attempts + 1, utcnow()
            ts, code, status = yield from self._attempt(ch, job)
            if ts is not None:
                self._settle_sent(store, job, ts)
                return ts
            unknown = self._on_error(store, ch, job, code, status)
            if unknown is None:
                return None
            last_error = unknown
        log.warning("event=delivery_deferred channel=%s item=%s error=%r detail=\"fate unknown; "
                    "reconciled at the next poll\"", ch.channel_id, job.label, last_error)
        raise _Defer

    def _attempt(self, ch: _Channel, job: _Job) -> Step:
        """Post a job: (ts, "", 200), or (None, error, HTTP status) with status -1 for a broken connection.
        Blocks Slack rejects are posted once more as text only."""
        for text_only in (False, True):
            try:
                return (yield from self._post(ch, job.message(text_only))), "", 200
            except SlackApiError as exc:
                code, status = error_code(exc)
            except TRANSPORT_ERRORS as exc:
                return None, f"connection_error:{type(exc).__name__}", -1
            if text_only or code not in BLOCKS_ERRORS:
                break
            log.warning("event=blocks_rejected channel=%s item=%s error=%s retry=text_only",
                        ch.channel_id, job.label, code)
        return None, code, status

    def _on_error(self, store: Store, ch: _Channel, job: _Job, code: str, status: int) -> str | None:
        """Apply the error policy to a failed post. Returns the error when the post's fate is unknown (try
        again after reconciling), None when the job is settled; raises to stop the channel or workspace."""
        if status >= 500 or status < 0 or code in UNKNOWN_FATE_ERRORS:
            log.warning("event=post_unknown channel=%s item=%s error=%s status=%d",
                        ch.channel_id, job.label, code, status)
            return f"{code} (HTTP {status})"
        if code in WORKSPACE_ERRORS:
            raise _WorkspaceDown(code)
        if code in CHANNEL_ERRORS and ch.person is not None:  # the person's DM: no subscription to pause
            self._fail(store, ch, job, code)
            return None
        if code in CHANNEL_ERRORS:
            if job.batch is not None:
                store.mark_batch_failed(job.batch.id, f"paused: {code}")
            else:
                assert job.row is not None
                _log_failure(job.row, code)
            store.pause_subscription(ch.team_id, ch.channel_id, code)
            log.warning("event=subscription_paused team=%s channel=%s reason=%s",
                        ch.team_id, ch.channel_id, code)
            raise _Paused
        if status == 429 or code in NOT_SENT_ERRORS:
            log.warning("event=delivery_deferred channel=%s item=%s error=%s",
                        ch.channel_id, job.label, code)
            if job.batch is not None:
                store.release_batch(job.batch.id, code)
            else:
                assert job.row is not None
                store.release(job.row.id, code)
            raise _Defer
        self._fail(store, ch, job, code)
        return None

    def _post(self, ch: _Channel, message: dict[str, Any]) -> Step:
        if ch.last_post is not None:
            due = ch.last_post + self.pace
            if due > self.clock():
                yield due
        ch.last_post = self.clock()
        response = ch.poster.chat_postMessage(channel=ch.channel_id, **message)
        return str(response["ts"])

    def _open_dm(self, ch: _Channel) -> None:
        """Point `ch` at the direct message with `ch.person` (conversations.open), where follow messages are
        posted and looked for after a crash. Without im:write (an install from before follows) the messages
        go to the user ID, which Slack delivers to the same DM, but cannot be looked for: a crash may then
        repeat one."""
        assert ch.person is not None
        try:
            response = ch.client.conversations_open(users=ch.person)
            ch.channel_id = str((response.get("channel") or {}).get("id") or ch.person)
            return
        except SlackApiError as exc:
            code, status = error_code(exc)
        except TRANSPORT_ERRORS as exc:
            log.warning("event=dm_open_failed team=%s user=%s error=%s", ch.team_id, ch.person,
                        type(exc).__name__)
            raise _Defer from None
        if code == "missing_scope":
            log.warning("event=dm_open_failed team=%s user=%s error=%s detail=\"no im:write: posting to the "
                        "user ID; reinstall the app so a crash cannot repeat a message\"",
                        ch.team_id, ch.person, code)
            return
        if code in WORKSPACE_ERRORS:
            raise _WorkspaceDown(code)
        if status >= 500 or status == 429 or code in NOT_SENT_ERRORS or code in UNKNOWN_FATE_ERRORS:
            log.warning("event=dm_open_failed team=%s user=%s error=%s status=%d", ch.team_id, ch.person,
                        code, status)
            raise _Defer
        raise _Unreachable(code)

    def _find_post(self, ch: _Channel, job: _Job, claimed_at: datetime) -> str | None:
        """Our post of this job since it was claimed, or None (also when it cannot be read: then the caller
        posts again, at least once): an item's or a burst's message in the channel's history, by its
        metadata; a reply in its burst's thread (conversations.replies)."""
        oldest = f"{(claimed_at - RECONCILE_MARGIN).timestamp():.6f}"
        if job.batch is not None:
            event_type, key, wanted = blocks.BATCH_EVENT_TYPE, "batch_id", job.batch.id
        else:
            assert job.row is not None
            event_type, key, wanted = blocks.EVENT_TYPE, "item_id", job.row.item_id
        cursor = None
        try:
            for _ in range(HISTORY_PAGES):
                if job.thread_ts is not None:
                    page = ch.client.conversations_replies(
                        channel=ch.channel_id, ts=job.thread_ts, oldest=oldest, limit=200,
                        include_all_metadata=True, cursor=cursor,
                    )
                else:
                    page = ch.client.conversations_history(
                        channel=ch.channel_id, oldest=oldest, limit=200, include_all_metadata=True,
                        cursor=cursor,
                    )
                found = posted_ts(page.get("messages") or [], wanted, event_type=event_type, key=key)
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if found is not None or not page.get("has_more") or not cursor:
                    return found
        except SlackApiError as exc:
            code, status = error_code(exc)
            if code in NO_HISTORY_ERRORS:
                log.warning("event=reconcile_unavailable channel=%s item=%s error=%s detail=\"cannot read "
                            "history; posting again, the channel may see this item twice\"",
                            ch.channel_id, job.label, code)
                return None
            if code in WORKSPACE_ERRORS:
                raise _WorkspaceDown(code) from None
            if code == "thread_not_found" and job.thread_ts is not None:
                log.warning("event=reconcile_unavailable channel=%s item=%s error=%s detail=\"the burst's "
                            "message is gone; posting again\"", ch.channel_id, job.label, code)
                return None  # someone deleted the burst's message (and so its thread): nothing to find
            log.warning("event=reconcile_failed channel=%s item=%s error=%s status=%d",
                        ch.channel_id, job.label, code, status)
            raise _Defer from None
        except TRANSPORT_ERRORS as exc:
            log.warning("event=reconcile_failed channel=%s item=%s error=%s",
                        ch.channel_id, job.label, type(exc).__name__)
            raise _Defer from None
        return None

    # settling ---------------------------------------------------------------------------------------

    def _claim(self, store: Store, job: _Job, state: str) -> bool:
        if job.batch is not None:
            return store.claim_batch(job.batch.id, expected_state=state)
        assert job.row is not None
        return store.claim(job.row.id, expected_state=state)

    def _settle_sent(self, store: Store, job: _Job, ts: str) -> None:
        if job.batch is not None:
            store.mark_batch_sent(job.batch.id, ts)
        else:
            assert job.row is not None
            store.mark_sent(job.row.id, ts)

    def _fail(self, store: Store, ch: _Channel, job: _Job, reason: str) -> None:
        if job.batch is not None:
            log.warning("event=burst_failed team=%s channel=%s batch=%s error=%r detail=\"its items are "
                        "posted on their own\"", ch.team_id, ch.channel_id, job.batch.id, reason)
            store.mark_batch_failed(job.batch.id, reason)
            return
        assert job.row is not None
        _log_failure(job.row, reason)
        store.mark_failed(job.row.id, reason)
        ch.failed += 1

    def _disable(self, store: Store, team_id: str, reason: str) -> None:
        with self._lock:
            if team_id in self._down:
                return
            self._down[team_id] = reason
        store.disable_workspace(team_id, reason)
        log.error("event=workspace_disabled team=%s reason=%s detail=\"Slack refused the token; delivery "
                  "to this workspace has stopped until the app is reinstalled\"", team_id, reason)


def _log_failure(row: Delivery, error: str) -> None:
    log.warning("event=delivery_failed team=%s channel=%s item=%s error=%r",
                row.team_id, row.channel_id, row.item_id, error)
