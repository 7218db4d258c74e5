"""Fan-out over the delivery ledger: every open (item, channel) row is posted exactly once.

A `Deliverer` is the `deliver` step of `poller.poll_once`, and runs under the store's poll lock, so it is the
only deliverer: a row already in state `posting` when a run starts was claimed by a process that died, and its
fate is unknown. Such a row is reconciled first, by reading the channel's recent history for our message
metadata; only when the message is absent is it posted again (without the history scope: posted again, at
least once, with a warning).

A follow's row (target 'person', its channel_id the user ID) is a direct message: the person's DM is opened
(conversations.open, im:write), the message posted there and looked for there after a crash (im:history), as
a channel's. A person who cannot be messaged (user_not_found, user_disabled, cannot_dm_bot...) fails only
their rows; without im:write the message goes to the user ID (Slack's DM too) and cannot be reconciled.

Channels are served concurrently by a small pool, each channel oldest first and paced (about one post per
second). Slack errors, by kind:

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

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import blocks
from bot.config import Settings
from bot.errors import WorkspaceUnavailable
from bot.models import Delivery, DeliveryReport, Item
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

        return Deliverer(WorkspaceClients(store, settings))
    if not settings.slack_bot_token:
        log.warning("event=delivery_disabled reason=no_token detail=\"SLACK_BOT_TOKEN is not set; "
                    "new items stay queued until it is\"")
        return None
    client = make_client(settings.slack_bot_token, settings.slack_api_url)
    return Deliverer(lambda team_id: client)


def posted_ts(messages: Sequence[dict[str, Any]], item_id: str) -> str | None:
    """The ts of our post of `item_id` among channel messages (read with include_all_metadata)."""
    for message in messages:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == blocks.EVENT_TYPE and payload.get("item_id") == item_id:
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
class Deliverer:
    """Callable `Store -> DeliveryReport`. Dependencies are explicit: `client_for(team_id)` gives the team's
    WebClient; `pace` is the minimum time between two posts to one channel; `backoff` the first wait before
    re-posting a row of unknown fate; `sleep`/`clock` can be replaced in tests."""

    client_for: ClientFor
    pool_size: int = DEFAULT_POOL_SIZE
    pace: float = DEFAULT_PACE
    backoff: float = 0.5
    max_attempts: int = MAX_ATTEMPTS
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
        delivered = 0
        with ThreadPoolExecutor(max_workers=max(1, min(self.pool_size, len(groups) or 1)),
                                thread_name_prefix="deliver") as pool:
            futures = {key: pool.submit(self._serve, store, key, rows, items, clients[key[0]])
                       for key, rows in groups.items()}
            for (team_id, channel_id), future in futures.items():
                try:
                    channel = future.result()
                except Exception:  # noqa: BLE001 - one channel's crash must not lose the others' report
                    log.exception("event=delivery_crashed team=%s channel=%s", team_id, channel_id)
                    continue
                delivered += channel.delivered
                failed += channel.failed
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

    # one channel ------------------------------------------------------------------------------------

    def _serve(
        self, store: Store, key: tuple[str, str], rows: list[Delivery], items: dict[str, Item],
        client: WebClient,
    ) -> _Channel:
        ch = _Channel(key[0], key[1], client, posting_client(client))
        if rows[0].to_person:
            ch.person = key[1]
            try:
                self._open_dm(ch)
            except _Defer:
                return ch
            except (_WorkspaceDown, _Unreachable) as exc:
                if isinstance(exc, _WorkspaceDown):
                    self._disable(store, ch.team_id, str(exc))
                for row in rows:
                    self._fail(store, ch, row, str(exc))
                return ch
        for index, row in enumerate(rows):
            down = self._down.get(ch.team_id)
            if down is not None:
                self._fail(store, ch, row, f"workspace_disabled: {down}")
                continue
            try:
                self._deliver(store, ch, row, items.get(row.item_id))
            except _Defer:
                break
            except _Paused:  # pause_subscription failed this row and the channel's later ones
                ch.failed += len(rows) - index
                break
            except _WorkspaceDown as exc:
                self._disable(store, ch.team_id, str(exc))
                self._fail(store, ch, row, str(exc))
        return ch

    def _deliver(self, store: Store, ch: _Channel, row: Delivery, item: Item | None) -> None:
        if item is None:
            self._fail(store, ch, row, "item_missing")
            return
        state, attempts, last_error = row.state, row.attempts, row.error or "unknown"
        claimed_at = row.claimed_at or utcnow()
        for try_no in range(POST_TRIES):
            if try_no:
                self.sleep(self.backoff * 2 ** (try_no - 1))
            if state == "posting":  # a post of unknown fate: look before posting again
                ts = self._find_post(ch, row, claimed_at)
                if ts is not None:
                    store.mark_sent(row.id, ts)
                    ch.delivered += 1
                    log.info("event=delivery_reconciled channel=%s item=%s ts=%s",
                             ch.channel_id, row.item_id, ts)
                    return
            if attempts >= self.max_attempts:
                self._fail(store, ch, row, f"gave_up after {attempts} attempts: {last_error}")
                return
            if not store.claim(row.id, expected_state=state):
                raise _Defer  # changed under us (unsubscribed, paused): leave the channel alone
            state, attempts, claimed_at = "posting", attempts + 1, utcnow()
            ts, code, status = self._attempt(ch, row, item)
            if ts is not None:
                store.mark_sent(row.id, ts)
                ch.delivered += 1
                return
            unknown = self._on_error(store, ch, row, code, status)
            if unknown is None:
                return
            last_error = unknown
        log.warning("event=delivery_deferred channel=%s item=%s error=%r detail=\"fate unknown; "
                    "reconciled at the next poll\"", ch.channel_id, row.item_id, last_error)
        raise _Defer

    def _attempt(self, ch: _Channel, row: Delivery, item: Item) -> tuple[str | None, str, int]:
        """Post a row: (ts, "", 200), or (None, error, HTTP status) with status -1 for a broken connection.
        Blocks Slack rejects are posted once more as text only."""
        message = (blocks.follow_message if row.to_person else blocks.item_message)(item, row.matched)
        for text_only in (False, True):
            try:
                return self._post(ch, message), "", 200
            except SlackApiError as exc:
                code, status = error_code(exc)
            except TRANSPORT_ERRORS as exc:
                return None, f"connection_error:{type(exc).__name__}", -1
            if text_only or code not in BLOCKS_ERRORS:
                break
            log.warning("event=blocks_rejected channel=%s item=%s error=%s retry=text_only",
                        ch.channel_id, row.item_id, code)
            message = blocks.item_text(item)
        return None, code, status

    def _on_error(self, store: Store, ch: _Channel, row: Delivery, code: str, status: int) -> str | None:
        """Apply the error policy to a failed post. Returns the error when the post's fate is unknown (try
        again after reconciling), None when the row is settled; raises to stop the channel or workspace."""
        if status >= 500 or status < 0 or code in UNKNOWN_FATE_ERRORS:
            log.warning("event=post_unknown channel=%s item=%s error=%s status=%d",
                        ch.channel_id, row.item_id, code, status)
            return f"{code} (HTTP {status})"
        if code in WORKSPACE_ERRORS:
            raise _WorkspaceDown(code)
        if code in CHANNEL_ERRORS and ch.person is not None:  # the person's DM: no subscription to pause
            self._fail(store, ch, row, code)
            return None
        if code in CHANNEL_ERRORS:
            _log_failure(row, code)
            store.pause_subscription(ch.team_id, ch.channel_id, code)
            log.warning("event=subscription_paused team=%s channel=%s reason=%s",
                        ch.team_id, ch.channel_id, code)
            raise _Paused
        if status == 429 or code in NOT_SENT_ERRORS:
            log.warning("event=delivery_deferred channel=%s item=%s error=%s",
                        ch.channel_id, row.item_id, code)
            store.release(row.id, code)
            raise _Defer
        self._fail(store, ch, row, code)
        return None

    def _post(self, ch: _Channel, message: dict[str, Any]) -> str:
        if ch.last_post is not None:
            wait = self.pace - (self.clock() - ch.last_post)
            if wait > 0:
                self.sleep(wait)
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

    def _find_post(self, ch: _Channel, row: Delivery, claimed_at: datetime) -> str | None:
        """Our post of this row in the channel's history since it was claimed, or None (also when history
        cannot be read: then the caller posts again, at least once)."""
        oldest = f"{(claimed_at - RECONCILE_MARGIN).timestamp():.6f}"
        cursor = None
        try:
            for _ in range(HISTORY_PAGES):
                page = ch.client.conversations_history(
                    channel=ch.channel_id, oldest=oldest, limit=200, include_all_metadata=True, cursor=cursor
                )
                found = posted_ts(page.get("messages") or [], row.item_id)
                cursor = (page.get("response_metadata") or {}).get("next_cursor")
                if found is not None or not page.get("has_more") or not cursor:
                    return found
        except SlackApiError as exc:
            code, status = error_code(exc)
            if code in NO_HISTORY_ERRORS:
                log.warning("event=reconcile_unavailable channel=%s item=%s error=%s detail=\"cannot read "
                            "history; posting again, the channel may see this item twice\"",
                            ch.channel_id, row.item_id, code)
                return None
            if code in WORKSPACE_ERRORS:
                raise _WorkspaceDown(code) from None
            log.warning("event=reconcile_failed channel=%s item=%s error=%s status=%d",
                        ch.channel_id, row.item_id, code, status)
            raise _Defer from None
        except TRANSPORT_ERRORS as exc:
            log.warning("event=reconcile_failed channel=%s item=%s error=%s",
                        ch.channel_id, row.item_id, type(exc).__name__)
            raise _Defer from None
        return None

    # settling ---------------------------------------------------------------------------------------

    def _fail(self, store: Store, ch: _Channel, row: Delivery, reason: str) -> None:
        _log_failure(row, reason)
        store.mark_failed(row.id, reason)
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
