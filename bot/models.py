"""The frozen records every layer passes around: what the feed yields (`Item`, `Validators`, `Fetched`,
`NotModified`), what the store hands out (`FeedState`, `Ingested`, `Subscription`, `Delivery`, `SavedItem`,
`SearchHit`, `SearchFilters`) and what a poll reports (`DeliveryReport`, `PollResult`). Nothing here does
I/O or imports another module of the bot."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Literal

Kind = Literal["research", "update"]


# --- the feed -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One feed entry. `id` is its identity: the canonical link."""

    id: str
    guid: str | None
    title: str
    link: str
    summary: str
    published: datetime
    kind: Kind
    authors: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class Validators:
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class Fetched:
    content: bytes
    validators: Validators


@dataclass(frozen=True)
class NotModified:
    validators: Validators


# --- the store ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FeedState:
    url: str
    etag: str | None = None
    last_modified: str | None = None
    last_poll: datetime | None = None
    last_success: datetime | None = None
    error_streak: int = 0
    last_error: str | None = None
    last_error_at: datetime | None = None

    @property
    def validators(self) -> Validators:
        return Validators(self.etag, self.last_modified)

    @property
    def ok(self) -> bool:
        return self.last_success is not None and self.error_streak == 0


@dataclass(frozen=True)
class Ingested:
    """What one successful poll changed: the new items (oldest first), how many known items were edited,
    whether this was the baseline (first) poll, and how many deliveries were queued."""

    new: list[Item]
    updated: int
    baseline: bool
    queued: int


@dataclass(frozen=True)
class Subscription:
    team_id: str
    channel_id: str
    user_id: str | None
    created_at: datetime
    keywords: tuple[str, ...] = ()
    paused: bool = False
    paused_reason: str | None = None
    # A digest subscription (bot.digest): "daily" or "weekly" (None: one post per item), the local time it
    # goes out, the subscriber's IANA time zone, and when this schedule was set (no digest is due before).
    digest: str | None = None
    digest_at: str = "09:00"
    digest_tz: str = "UTC"
    digest_since: datetime | None = None


@dataclass(frozen=True)
class Delivery:
    id: int
    item_id: str
    team_id: str
    channel_id: str
    state: str  # pending | posting | sent | failed
    matched: tuple[str, ...] = ()
    attempts: int = 0
    ts: str | None = None
    error: str | None = None
    claimed_at: datetime | None = None
    target: str = "channel"  # channel | person (a follow's direct message: channel_id is the user ID)
    poll: str | None = None  # the poll (ingest) that queued it
    batch_id: str | None = None  # the burst it is posted in, in the thread of the batch's message

    @property
    def to_person(self) -> bool:
        return self.target == "person"


@dataclass(frozen=True)
class SavedItem:
    """An item in a person's reading list."""

    item: Item
    saved_at: datetime


@dataclass(frozen=True)
class DeliveryBatch:
    """A burst: the one top-level message of a channel's items from one poll, whose thread holds them."""

    id: str
    team_id: str
    channel_id: str
    poll: str
    count: int
    state: str  # pending | posting | sent | failed
    attempts: int = 0
    ts: str | None = None
    error: str | None = None
    claimed_at: datetime | None = None


@dataclass(frozen=True)
class Digest:
    """A digest ledger row: one per (channel, period), claimed before its message is posted. `period` is the
    schedule and the UTC end of the period ("weekly:2026-12-07T08:00:00Z"); `items` how many it holds."""

    id: int
    team_id: str
    channel_id: str
    period: str
    starts: datetime | None
    ends: datetime
    state: str  # pending | posting | sent | failed | empty
    items: int = 0
    attempts: int = 0
    ts: str | None = None
    error: str | None = None
    claimed_at: datetime | None = None


@dataclass(frozen=True)
class SearchHit:
    item: Item
    score: float
    by_meaning: bool = False  # close in meaning only: the item does not hold the query's words


@dataclass(frozen=True)
class SearchFilters:
    since: date | None = None
    until: date | None = None  # the last day included
    kind: str | None = None
    authors: tuple[str, ...] = field(default=())


# --- a poll ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeliveryReport:
    delivered: int = 0
    failed: int = 0


@dataclass(frozen=True)
class PollResult:
    fetched: int = 0
    new: int = 0
    delivered: int = 0
    failed: int = 0
    not_modified: bool = False
    baseline: bool = False
    updated: int = 0
    error: str | None = None
    new_items: list[Item] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "fetched": self.fetched,
            "new": self.new,
            "delivered": self.delivered,
            "failed": self.failed,
            "not_modified": self.not_modified,
        }
