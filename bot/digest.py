"""Digest subscriptions: one message per period instead of one per item.

A channel subscribed with `digest:daily` or `digest:weekly` gets no per-item posts: each new item it matches
waits in the store (`bot.store.digests`, queued at ingest) for the channel's next digest. The schedule is
local time in the subscriber's time zone: daily at `at` (default 09:00), weekly on Monday at `at`. A period
ends at each scheduled instant; its digest holds the items that arrived before that instant and were in no
earlier digest (normally exactly the period's; after an outage, one digest catches up, never one per missed
period), grouped by type, newest first, with links; a weekly digest ends with what the team is reading
(`bot.trending`). A period that brought nothing posts nothing.

`Digester` is the digest step of a poll (`bot.poller.poll_once`, after delivery), so it runs in the one
process holding the poll lock. For each digest subscription whose latest scheduled instant has passed, it
claims the ledger row for (channel, period) before posting (`Store.start_digest`), and settles it after.
A row found `posting` when a run starts was claimed by a process that died: the channel's history is read
for a message whose metadata (`event_type` `mlresearch_digest`) carries that period (`bot.reconcile`), and
the digest is posted again only when none is there. Slack errors are sorted as the deliverer sorts them
(`bot.slackweb`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from msgspec import Struct, field
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import ContextBlock, DividerBlock, HeaderBlock, PlainTextObject, SectionBlock

from bot import trending
from bot.blocks import KIND_LABEL, counted, cut, escape, md, posted, title_link
from bot.deliver import LOCAL_TEAM_ID, ClientFor
from bot.errors import WorkspaceUnavailable
from bot.models import DeliveryReport, Digest, Item, Subscription
from bot.posting import MAX_ATTEMPTS, WorkspaceDown
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
    posting_client,
)
from bot.store import Store, iso, utcnow
from bot.store.digests import DONE

log = logging.getLogger("bot.digest")

EVENT_TYPE = "mlresearch_digest"
MODES = ("daily", "weekly")
DEFAULT_AT = "09:00"
WEEKLY_DAY = 0  # Monday
MAX_LISTED = 60  # items listed in one digest; the rest are counted
SECTION_CHARS = 2900
_AT = re.compile(r"([01]?[0-9]|2[0-3]):([0-5][0-9])")


# --- the schedule ----------------------------------------------------------------------------------------


def parse_at(text: str) -> str | None:
    """`9:30` or `09:30` -> "09:30"; anything else (`25:00`, `9`, `9am`) -> None."""
    found = _AT.fullmatch(text.strip())
    return f"{int(found.group(1)):02d}:{found.group(2)}" if found else None


def zone(name: str | None) -> ZoneInfo | None:
    """The IANA time zone `name` (as Slack's `user.tz` gives it), or None when it is unknown."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


class Schedule(Struct, frozen=True):
    mode: str  # daily | weekly
    at: time
    tz: ZoneInfo

    @classmethod
    def of(cls, sub: Subscription) -> Schedule | None:
        """A digest subscription's schedule (an unknown zone is read as UTC); None for a per-item one."""
        if sub.digest not in MODES:
            return None
        at = parse_at(sub.digest_at) or DEFAULT_AT
        hour, minute = (int(part) for part in at.split(":"))
        return cls(sub.digest or "daily", time(hour, minute), zone(sub.digest_tz) or ZoneInfo("UTC"))

    def instant(self, day: date) -> datetime:
        """The digest time on a local `day`, in UTC. A time the clocks skip (a spring-forward gap) is read
        with the offset before the change (02:30 becomes 03:30); a time they pass twice, the first time."""
        return datetime.combine(day, self.at, tzinfo=self.tz).astimezone(UTC)

    def days(self, around: datetime, back: int, ahead: int) -> list[date]:
        today = around.astimezone(self.tz).date()
        days = [today + timedelta(days=n) for n in range(-back, ahead + 1)]
        return [d for d in days if self.mode == "daily" or d.weekday() == WEEKLY_DAY]

    def last_due(self, now: datetime) -> datetime:
        """The latest digest time at or before `now`: when the period that has most recently ended ended."""
        return max(t for t in map(self.instant, self.days(now, 9, 1)) if t <= now)

    def next_after(self, moment: datetime) -> datetime:
        """The first digest time after `moment`."""
        return min(t for t in map(self.instant, self.days(moment, 1, 9)) if t > moment)

    def describe(self) -> str:
        """"every day at 09:00" / "every Monday at 09:00" (the zone is said apart)."""
        return f"every {'day' if self.mode == 'daily' else 'Monday'} at {self.at:%H:%M}"


def period_key(mode: str, ends: datetime) -> str:
    """The ledger's and the message metadata's name for a period: its schedule and its end in UTC."""
    return f"{mode}:{iso(ends)}"


def next_digest(sub: Subscription, now: datetime) -> datetime | None:
    """When the channel's next digest is due (aware, in the subscriber's zone), or None (no digest)."""
    schedule = Schedule.of(sub)
    if schedule is None:
        return None
    since = sub.digest_since if sub.digest_since is not None and sub.digest_since > now else now
    return schedule.next_after(since).astimezone(schedule.tz)


def local_time(moment: datetime) -> str:
    """"Mon 7 Dec 2026, 09:00" for an aware local time."""
    return f"{moment:%a} {moment.day} {moment:%b %Y, %H:%M}"


# --- the message -----------------------------------------------------------------------------------------


def digest_message(
    sub: Subscription, digest: Digest, contents: Sequence[tuple[Item, Sequence[str]]],
    ending: Sequence[str] = (),
) -> dict[str, Any]:
    """The channel post for one digest: a header, the span and counts, then the items grouped by type
    (papers, then updates), newest first, as links, then `ending` (mrkdwn lines: a weekly digest's "what the
    team is reading", `bot.trending.digest_lines`); `text` (fallback), `metadata` with the period, no
    unfurls, nothing parsed."""
    schedule = Schedule.of(sub)
    tz = schedule.tz if schedule is not None else ZoneInfo("UTC")
    label = "Weekly" if sub.digest == "weekly" else "Daily"
    heading = f"{label} digest: {counted(len(contents), 'new item')}"  # the header, and the fallback's start
    kinds = {kind: [(i, m) for i, m in contents if i.kind == kind] for kind in KIND_LABEL}
    counts = ", ".join(
        counted(len(found), KIND_LABEL[kind].lower())
        for kind, found in kinds.items() if found
    )
    ends = digest.ends.astimezone(tz)
    span = f"until {local_time(ends)}"
    if digest.starts is not None:
        span = f"{local_time(digest.starts.astimezone(tz))} to {local_time(ends)}"
    blocks: list[Any] = [
        HeaderBlock(text=PlainTextObject(text=cut(heading, 150))),
        ContextBlock(elements=[md(escape(cut(f"{span} ({tz.key}) · {counts}", 1900)))]),
    ]
    listed = 0
    for kind, found in kinds.items():
        lines = []
        for item, matched in found:
            if listed >= MAX_LISTED:
                break
            listed += 1
            line = f"• {title_link(item, 150)} · {item.published.date().isoformat()}"
            if matched:
                line += " · matched: " + ", ".join(escape(cut(k, 40)) for k in matched[:5])
            lines.append(line)
        if lines:
            blocks += _sections(f"*{KIND_LABEL[kind]}s*", lines)
    if listed < len(contents):
        more = len(contents) - listed
        blocks.append(ContextBlock(elements=[md(f"… and {more} more, in the archive: `/mlresearch search`")]))
    last = [DividerBlock(), SectionBlock(text=md(cut("\n".join(ending), SECTION_CHARS)))] if ending else []
    titles = "; ".join(escape(cut(item.title, 100)) for item, _ in contents[:20])
    text = cut(f"{heading} ({counts}): {titles}", 3000)
    return posted(text, [*blocks[: 50 - len(last)], *last], EVENT_TYPE, {"period": digest.period})


def _sections(title: str, lines: list[str]) -> list[SectionBlock]:
    """`title` and `lines` as sections of at most SECTION_CHARS each (Slack's limit is 3000)."""
    sections: list[SectionBlock] = []
    text = title
    for line in lines:
        if len(text) + 1 + len(line) > SECTION_CHARS:
            sections.append(SectionBlock(text=md(text)))
            text = ""
        text = f"{text}\n{line}" if text else cut(line, SECTION_CHARS)
    sections.append(SectionBlock(text=md(text)))
    return sections


def digest_text(message: dict[str, Any]) -> dict[str, Any]:
    """The same post without blocks (when Slack rejects the blocks)."""
    return {k: v for k, v in message.items() if k != "blocks"}


# --- the digest step of a poll ---------------------------------------------------------------------------


def from_deliverer(deliver: object) -> Digester | None:
    """The digest step beside a poll's Slack deliverer (with its clients), or None (no deliverer: a dry run,
    the shell's printer)."""
    client_for = getattr(deliver, "client_for", None)
    return Digester(client_for) if client_for is not None else None


class Digester(Struct):
    """Callable `Store -> DeliveryReport`: posts every digest that is due. `client_for(team_id)` gives the
    team's WebClient; `clock` the time (UTC, aware) that decides which periods have ended."""

    client_for: ClientFor
    clock: Callable[[], datetime] = field(default=utcnow)
    max_attempts: int = MAX_ATTEMPTS

    def __call__(self, store: Store) -> DeliveryReport:
        now = self.clock()
        delivered = failed = 0
        clients: dict[str, WebClient | None] = {}
        for sub in store.digest_subscriptions():
            if sub.team_id == LOCAL_TEAM_ID:
                continue
            due = due_digest(store, sub, now)
            if due is None:
                continue
            if sub.team_id not in clients:
                clients[sub.team_id] = self._client(store, sub.team_id)
            client = clients[sub.team_id]
            if client is None:
                continue
            try:
                outcome = self._digest(store, client, sub, *due)
            except WorkspaceDown as exc:
                clients[sub.team_id] = None
                store.disable_workspace(sub.team_id, str(exc))
                log.error("event=workspace_disabled team=%s reason=%s detail=\"Slack refused the token; "
                          "delivery to this workspace has stopped until the app is reinstalled\"",
                          sub.team_id, exc)
                continue
            delivered += outcome == "sent"
            failed += outcome == "failed"
        return DeliveryReport(delivered=delivered, failed=failed)

    def _client(self, store: Store, team_id: str) -> WebClient | None:
        try:
            return self.client_for(team_id)
        except WorkspaceUnavailable as exc:
            log.error("event=workspace_unavailable team=%s reason=%r", team_id, exc.reason)
            if exc.disable:
                store.disable_workspace(team_id, exc.reason)
            return None

    def _digest(
        self, store: Store, client: WebClient, sub: Subscription, schedule: Schedule, period: str,
        ends: datetime, row: Digest | None,
    ) -> str | None:
        """Claim (or reconcile) and post one channel's digest. Returns "sent", "failed" or None (nothing to
        post, or its fate is left for the next poll)."""
        channel = sub.channel_id
        if row is None:
            row, created = start_digest(store, sub, schedule, period, ends)
            if row.state == "empty":
                log.info("event=digest_empty channel=%s period=%s", channel, period)
                return None
            if not created and row.state in DONE:
                return None
            fresh = created
        else:
            fresh = False
        if not fresh:
            if row.state == "posting":  # claimed by a run that died: did its message go out?
                ts = self._find(client, channel, period, row.claimed_at or utcnow())
                if ts == "":
                    return None  # history unreadable for now: the next poll looks again
                if ts is not None:
                    store.mark_digest_sent(row.id, ts)
                    log.info("event=digest_reconciled channel=%s period=%s ts=%s", channel, period, ts)
                    return "sent"
            if row.attempts >= self.max_attempts:
                reason = f"gave_up after {row.attempts} attempts: {row.error or 'unknown'}"
                return self._fail(store, row, reason)
            if not store.claim_digest(row.id, row.state):
                return None
        contents = store.digest_contents(row.id)
        if not contents:
            return self._fail(store, row, "items_missing")
        ending = trending.digest_lines(store, sub.team_id, self.clock()) if sub.digest == "weekly" else []
        return self._post(store, client, sub, row, digest_message(sub, row, contents, ending))

    def _post(
        self, store: Store, client: WebClient, sub: Subscription, row: Digest, message: dict[str, Any]
    ) -> str | None:
        poster = posting_client(client)
        for text_only in (False, True):
            try:
                response = poster.chat_postMessage(channel=sub.channel_id, **message)
            except SlackApiError as exc:
                code, status = error_code(exc)
            except TRANSPORT_ERRORS as exc:
                code, status = f"connection_error:{type(exc).__name__}", -1
            else:
                store.mark_digest_sent(row.id, str(response["ts"]))
                log.info("event=digest_sent channel=%s period=%s items=%d", sub.channel_id, row.period,
                         row.items)
                return "sent"
            if text_only or code not in BLOCKS_ERRORS:
                break
            message = digest_text(message)
        if fate_unknown(code, status):
            log.warning("event=digest_unknown channel=%s period=%s error=%s status=%d detail=\"reconciled at "
                        "the next poll\"", sub.channel_id, row.period, code, status)
            return None
        if code in WORKSPACE_ERRORS:
            self._fail(store, row, code)
            raise WorkspaceDown(code)
        if code in CHANNEL_ERRORS:
            store.pause_subscription(sub.team_id, sub.channel_id, code)
            log.warning("event=subscription_paused team=%s channel=%s reason=%s",
                        sub.team_id, sub.channel_id, code)
            return self._fail(store, row, code)
        if status == 429 or code in NOT_SENT_ERRORS:
            store.release_digest(row.id, code)
            log.warning("event=digest_deferred channel=%s period=%s error=%s",
                        sub.channel_id, row.period, code)
            return None
        return self._fail(store, row, code)

    def _find(self, client: WebClient, channel: str, period: str, claimed_at: datetime) -> str | None:
        """The ts of the channel's digest of `period` posted since it was claimed; None when it is not there
        (or history cannot be read at all: then it is posted again, at least once); "" when reading failed
        for now."""
        try:
            return find_posted(client, channel, claimed_at, event_type=EVENT_TYPE, key="period",
                               wanted=period)
        except SlackApiError as exc:
            code, status = error_code(exc)
            # History first, as the deliverer's `_find_post`: missing_scope (in both sets) here means the
            # history scope, which is no reason to stop the workspace's deliveries.
            if code in NO_HISTORY_ERRORS:
                log.warning("event=reconcile_unavailable channel=%s period=%s error=%s detail=\"cannot read "
                            "history; posting again, the channel may see this digest twice\"",
                            channel, period, code)
                return None
            if code in WORKSPACE_ERRORS:
                raise WorkspaceDown(code) from None
            log.warning("event=reconcile_failed channel=%s period=%s error=%s status=%d",
                        channel, period, code, status)
            return ""
        except TRANSPORT_ERRORS as exc:
            log.warning("event=reconcile_failed channel=%s period=%s error=%s",
                        channel, period, type(exc).__name__)
            return ""

    def _fail(self, store: Store, row: Digest, reason: str) -> str:
        log.warning("event=digest_failed team=%s channel=%s period=%s error=%r",
                    row.team_id, row.channel_id, row.period, reason)
        store.mark_digest_failed(row.id, reason)
        return "failed"


def due_digest(
    store: Store, sub: Subscription, now: datetime
) -> tuple[Schedule, str, datetime, Digest | None] | None:
    """(schedule, period, its end, its ledger row or None) when the channel has a digest to post or settle
    at `now`: the latest digest time has passed, after the schedule was set, and its row is not settled."""
    schedule = Schedule.of(sub)
    if schedule is None:
        return None
    ends = schedule.last_due(now)
    if sub.digest_since is not None and ends <= sub.digest_since:
        return None  # the schedule was set after the latest digest time: its first period is still on
    period = period_key(schedule.mode, ends)
    row = store.get_digest(sub.team_id, sub.channel_id, period)
    if row is not None and row.state in DONE:
        return None
    return schedule, period, ends, row


def start_digest(
    store: Store, sub: Subscription, schedule: Schedule, period: str, ends: datetime
) -> tuple[Digest, bool]:
    """Claim the channel's digest of `period` (`Store.start_digest`); it began at the digest time before
    `ends`, or when the schedule was set if that is later."""
    starts = max(t for t in map(schedule.instant, schedule.days(ends, 9, 0)) if t < ends)
    if sub.digest_since is not None and sub.digest_since > starts:
        starts = sub.digest_since
    return store.start_digest(sub.team_id, sub.channel_id, period, starts, ends)
