"""Posting one message of the delivery ledger exactly once: claim its row, post, reconcile, settle or fail.

A `Job` is one message under its ledger row: an item's (a `deliveries` row; in a burst's thread when the
burst's message was posted), a follow-up's (a `deliveries` row whose target is `followup:code` or
`followup:venue`: a reply in the thread of the item's post, `blocks.followup_message`, metadata
`mlresearch_followup`), or a burst's top-level message (a `batches` row, `blocks.batch_message`, metadata
`mlresearch_batch`). `Posting.deliver` claims the row (state `posting`), posts, and marks it sent
with the message's ts. A row found in state `posting` was claimed by a process that died, or its post's fate
is unknown: it is reconciled first, by reading the channel's recent history for our message metadata (an
item's by its item id, a burst's by its batch id; a reply in its burst's thread, conversations.replies);
only when the message is absent is it posted again (without the history scope: posted again, at least once,
with a warning).

A follow's messages go to the person's DM, opened first (`open_dm`, conversations.open, im:write) and looked
in after a crash (im:history). A person who cannot be messaged (user_not_found, user_disabled,
cannot_dm_bot...) is `Unreachable`; without im:write the message goes to the user ID (Slack's DM too) and
cannot be reconciled. Slack errors, by kind:

    429                          slack_sdk waits Retry-After and retries; if it persists, the row goes back
                                 to pending and the channel waits for the next poll (`Defer`). A worker
                                 (bot.worker) instead holds the whole workspace for Retry-After, for every
                                 worker, and defers at once (`Posting.hold`, `bot.slackweb.posting_client`)
    5xx, internal_error,         the post's fate is unknown: back off, reconcile, post again (a few times);
      a broken connection        still unknown: the row stays `posting` and is reconciled at the next poll
    channel_not_found,           the subscription is paused with the reason (`Paused`); others go on
      is_archived, not_in_channel
    invalid_auth, token_revoked, `WorkspaceDown`: the caller disables the workspace; its remaining rows fail
      account_inactive
    invalid_blocks,              posted once more as text only (the event metadata without the paper
      msg_blocks_too_long,       card's entity)
      invalid_metadata_*
    anything else                that row fails; later rows go on

A row claimed `MAX_ATTEMPTS` times without success fails for good, so no failure blocks a channel forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import blocks, entities
from bot.models import Delivery, DeliveryBatch, Item
from bot.reconcile import find_posted
from bot.slackweb import (
    BLOCKS_ERRORS,
    CHANNEL_ERRORS,
    NO_HISTORY_ERRORS,
    NOT_SENT_ERRORS,
    TRANSPORT_ERRORS,
    WORKSPACE_ERRORS,
    error_code,
    fate_unknown,
)
from bot.store import Store, utcnow

log = logging.getLogger("bot.deliver")  # one logger for delivery's log lines, wherever they are written

MAX_ATTEMPTS = 5  # claims of one row, across polls, before it fails for good
POST_TRIES = 3  # posts of one row within one run when its fate stays unknown


class Defer(Exception):
    """Stop serving this channel in this run; its open rows wait for the next poll."""


class Paused(Exception):
    """The channel's subscription was paused (its open rows failed with it)."""


class WorkspaceDown(Exception):
    """The workspace's token no longer works."""


class Unreachable(Exception):
    """The person cannot be sent a direct message (deactivated, unknown, ...)."""


@dataclass
class Channel:
    """One channel (or person's DM) in a run: its clients, when it was last posted to, what it settled."""

    team_id: str
    channel_id: str
    client: WebClient
    poster: WebClient
    last_post: float | None = None
    delivered: int = 0
    failed: int = 0
    person: str | None = None  # a follow's direct messages: the user ID (channel_id becomes their DM's)


@dataclass
class Job:
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
        if self.row.followup is not None:  # a reply in the item's thread (`Store.record_page` queued it)
            message = blocks.followup_message(self.item, self.row.followup) or {}
            if text_only:
                message.pop("blocks", None)
        elif text_only:
            message = blocks.item_text(self.item)
        else:  # with the item's paper card (a Work Object) beside the event metadata
            build = blocks.follow_message if self.row.to_person else blocks.item_message
            message = build(self.item, self.row.matched)
            message["metadata"] = entities.with_papers(message["metadata"], [self.item])
        if self.thread_ts is not None:
            message["thread_ts"] = self.thread_ts
        return message


Step = Generator[float, None, Any]  # yields the clock time it waits for (pacing, backoff), then returns


@dataclass(frozen=True)
class Posting:
    """Posts the jobs of one delivery run: `pace` is the minimum time between two posts to one channel,
    `backoff` the first wait before re-posting a job of unknown fate, `max_attempts` the claims of one row
    before it fails for good; `clock` gives the time a step waits for (it yields it, see `Step`)."""

    pace: float
    backoff: float
    max_attempts: int
    clock: Callable[[], float]
    # team -> the clock time before which nothing is posted to it (a 429 another worker saw), or None
    hold: Callable[[str], float | None] | None = None
    # a worker's: (team, channel or person) -> the claim holder whose channel claim a row's claim must still
    # name, or None when this process may no longer hold the channel (its claims' database session ended,
    # its lease may have lapsed while it stalled, another took it): then nothing more is posted there
    fence: Callable[[str, str], str | None] | None = None
    # an item's message, built once per run for all the channels it goes to (Block Kit through slack_sdk's
    # models is a third of a post's CPU): (item, matched, to a person, text only) -> message, no thread_ts
    built: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def deliver(self, store: Store, ch: Channel, job: Job) -> Step:
        """Post one job exactly once: its ts; None when it is settled as failed; raises to stop the
        channel."""
        ledger = job.ledger
        state, attempts, last_error = ledger.state, ledger.attempts, ledger.error or "unknown"
        claimed_at = ledger.claimed_at or utcnow()
        for try_no in range(POST_TRIES):
            if try_no:
                yield self.clock() + self.backoff * 2 ** (try_no - 1)
            if state == "posting":  # a post of unknown fate: look before posting again
                ts = _find_post(ch, job, claimed_at)
                if ts is not None:
                    _settle_sent(store, job, ts)
                    log.info("event=delivery_reconciled channel=%s item=%s ts=%s",
                             ch.channel_id, job.label, ts)
                    return ts
            if attempts >= self.max_attempts:
                fail(store, ch, job, f"gave_up after {attempts} attempts: {last_error}")
                return None
            yield from self._wait_turn(ch)  # pacing and holds before the claim: a stop here leaves it pending
            holder = self.fence(*_key(ch)) if self.fence is not None else None
            if self.fence is not None and holder is None:
                raise Defer  # the channel may be another's now: leave it (and this row) to it
            if not _claim(store, job, state, holder):
                raise Defer  # changed under us (unsubscribed, paused, taken over): leave the channel alone
            state, attempts, claimed_at = "posting", attempts + 1, utcnow()
            try:
                ts, code, status = yield from self._attempt(ch, job)
            except GeneratorExit:  # closed (a worker stopping) at a wait before a post: nothing was sent
                if self.fence is None or self.fence(*_key(ch)) is not None:  # else: the next holder's
                    _release(store, job, "stopped before posting")
                raise
            if ts is not None:
                _settle_sent(store, job, ts)
                return ts
            unknown = self._on_error(store, ch, job, code, status)
            if unknown is None:
                return None
            last_error = unknown
        log.warning("event=delivery_deferred channel=%s item=%s error=%r detail=\"fate unknown; "
                    "reconciled at the next poll\"", ch.channel_id, job.label, last_error)
        raise Defer

    def _attempt(self, ch: Channel, job: Job) -> Step:
        """Post a job: (ts, "", 200), or (None, error, HTTP status) with status -1 for a broken connection.
        Blocks Slack rejects are posted once more as text only."""
        for text_only in (False, True):
            try:
                return (yield from self._post(ch, self._message(job, text_only))), "", 200
            except SlackApiError as exc:
                code, status = error_code(exc)
            except TRANSPORT_ERRORS as exc:
                return None, f"connection_error:{type(exc).__name__}", -1
            if text_only or code not in BLOCKS_ERRORS:
                break
            log.warning("event=blocks_rejected channel=%s item=%s error=%s retry=text_only",
                        ch.channel_id, job.label, code)
        return None, code, status

    def _message(self, job: Job, text_only: bool) -> dict[str, Any]:
        if job.batch is not None or job.row is None or job.item is None:
            return job.message(text_only)
        key = (job.item.id, tuple(job.row.matched), job.row.target, text_only)
        found = self.built.get(key)
        if found is None:
            found = job.message(text_only)
            found.pop("thread_ts", None)
            self.built[key] = found
        message = dict(found)
        if job.thread_ts is not None:
            message["thread_ts"] = job.thread_ts
        return message

    def _on_error(self, store: Store, ch: Channel, job: Job, code: str, status: int) -> str | None:
        """Apply the error policy to a failed post. Returns the error when the post's fate is unknown (try
        again after reconciling), None when the job is settled; raises to stop the channel or workspace."""
        if fate_unknown(code, status):
            log.warning("event=post_unknown channel=%s item=%s error=%s status=%d",
                        ch.channel_id, job.label, code, status)
            return f"{code} (HTTP {status})"
        if code in WORKSPACE_ERRORS:
            raise WorkspaceDown(code)
        if code in CHANNEL_ERRORS and ch.person is not None:  # the person's DM: no subscription to pause
            fail(store, ch, job, code)
            return None
        if code in CHANNEL_ERRORS:
            if job.batch is not None:
                store.mark_batch_failed(job.batch.id, f"paused: {code}")
            else:
                assert job.row is not None
                log_failure(job.row, code)
            store.pause_subscription(ch.team_id, ch.channel_id, code)
            log.warning("event=subscription_paused team=%s channel=%s reason=%s",
                        ch.team_id, ch.channel_id, code)
            raise Paused
        if status == 429 or code in NOT_SENT_ERRORS:
            log.warning("event=delivery_deferred channel=%s item=%s error=%s",
                        ch.channel_id, job.label, code)
            _release(store, job, code)
            raise Defer
        fail(store, ch, job, code)
        return None

    def _wait_turn(self, ch: Channel) -> Step:
        """Wait until the channel may be posted to: `pace` after its last post, and after any hold on its
        workspace."""
        while True:
            due = ch.last_post + self.pace if ch.last_post is not None else 0.0
            held = self.hold(ch.team_id) if self.hold is not None else None
            due = max(due, held or 0.0)
            if due <= self.clock():
                return
            yield due

    def _post(self, ch: Channel, message: dict[str, Any]) -> Step:
        yield from self._wait_turn(ch)
        if self.fence is not None and self.fence(*_key(ch)) is None:
            # Claimed, then stalled (or lost the session) long enough that another may hold the channel now:
            # not posted; the row stays `posting`, so whoever holds the channel looks for it before posting.
            raise Defer
        try:
            response = ch.poster.chat_postMessage(channel=ch.channel_id, **message)
        finally:  # paced from the answer: a request slow to reach Slack never lands closer to the next one
            ch.last_post = self.clock()
        return str(response["ts"])


def open_dm(ch: Channel) -> None:
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
        raise Defer from None
    if code == "missing_scope":
        log.warning("event=dm_open_failed team=%s user=%s error=%s detail=\"no im:write: posting to the "
                    "user ID; reinstall the app so a crash cannot repeat a message\"",
                    ch.team_id, ch.person, code)
        return
    if code in WORKSPACE_ERRORS:
        raise WorkspaceDown(code)
    if fate_unknown(code, status) or status == 429 or code in NOT_SENT_ERRORS:
        log.warning("event=dm_open_failed team=%s user=%s error=%s status=%d", ch.team_id, ch.person,
                    code, status)
        raise Defer
    raise Unreachable(code)


def _find_post(ch: Channel, job: Job, claimed_at: datetime) -> str | None:
    """Our post of this job since it was claimed, or None (also when it cannot be read: then the caller
    posts again, at least once): an item's or a burst's message in the channel's history, by its
    metadata; a reply in its burst's thread (conversations.replies). A failed read defers the channel."""
    if job.batch is not None:
        event_type, key, wanted = blocks.BATCH_EVENT_TYPE, "batch_id", job.batch.id
    elif job.row is not None and job.row.followup is not None:
        event_type, key = blocks.FOLLOWUP_EVENT_TYPE, "followup_id"
        wanted = blocks.followup_id(job.row.item_id, job.row.followup)
    else:
        assert job.row is not None
        event_type, key, wanted = blocks.EVENT_TYPE, "item_id", job.row.item_id
    try:
        return find_posted(ch.client, ch.channel_id, claimed_at, event_type=event_type, key=key,
                           wanted=wanted, thread_ts=job.thread_ts)
    except SlackApiError as exc:
        code, status = error_code(exc)
        if code in NO_HISTORY_ERRORS:
            log.warning("event=reconcile_unavailable channel=%s item=%s error=%s detail=\"cannot read "
                        "history; posting again, the channel may see this item twice\"",
                        ch.channel_id, job.label, code)
            return None
        if code in WORKSPACE_ERRORS:
            raise WorkspaceDown(code) from None
        if code == "thread_not_found" and job.thread_ts is not None:
            log.warning("event=reconcile_unavailable channel=%s item=%s error=%s detail=\"the burst's "
                        "message is gone; posting again\"", ch.channel_id, job.label, code)
            return None  # someone deleted the burst's message (and so its thread): nothing to find
        log.warning("event=reconcile_failed channel=%s item=%s error=%s status=%d",
                    ch.channel_id, job.label, code, status)
        raise Defer from None
    except TRANSPORT_ERRORS as exc:
        log.warning("event=reconcile_failed channel=%s item=%s error=%s",
                    ch.channel_id, job.label, type(exc).__name__)
        raise Defer from None


def _key(ch: Channel) -> tuple[str, str]:
    """The (team, channel or person) a channel's claim is keyed by (a follow's: the person, not the DM)."""
    return ch.team_id, ch.person or ch.channel_id


# settling ------------------------------------------------------------------------------------------
def _claim(store: Store, job: Job, state: str, holder: str | None) -> bool:
    if job.batch is not None:
        return store.claim_batch(job.batch.id, expected_state=state, holder=holder)
    assert job.row is not None
    return store.claim(job.row.id, expected_state=state, holder=holder)


def _release(store: Store, job: Job, reason: str) -> None:
    if job.batch is not None:
        store.release_batch(job.batch.id, reason)
    else:
        assert job.row is not None
        store.release(job.row.id, reason)


def _settle_sent(store: Store, job: Job, ts: str) -> None:
    if job.batch is not None:
        store.mark_batch_sent(job.batch.id, ts)
    else:
        assert job.row is not None
        store.mark_sent(job.row.id, ts)


def fail(store: Store, ch: Channel, job: Job, reason: str) -> None:
    """Settle a job as failed: an item's row (counted in `ch.failed`), or a burst's (its items go alone)."""
    if job.batch is not None:
        log.warning("event=burst_failed team=%s channel=%s batch=%s error=%r detail=\"its items are "
                    "posted on their own\"", ch.team_id, ch.channel_id, job.batch.id, reason)
        store.mark_batch_failed(job.batch.id, reason)
        return
    assert job.row is not None
    log_failure(job.row, reason)
    store.mark_failed(job.row.id, reason)
    ch.failed += 1


def log_failure(row: Delivery, error: str) -> None:
    log.warning("event=delivery_failed team=%s channel=%s item=%s error=%r",
                row.team_id, row.channel_id, row.item_id, error)
