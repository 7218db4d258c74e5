"""What the store hands out: frozen records, the store's errors, and ISO-8601 time helpers. Nothing here
touches a database."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from bot.feed import Item, Validators, kind_of


class StoreError(Exception):
    """The store could not be opened or written."""


class LockTimeout(StoreError):
    """Another process holds the poll lock."""


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else None


def from_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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


@dataclass(frozen=True)
class SearchHit:
    item: Item
    score: float


@dataclass(frozen=True)
class SearchFilters:
    since: date | None = None
    kind: str | None = None
    authors: tuple[str, ...] = field(default=())


# --- rows to records (a row is a dict of column name to value, from either backend) ---------------------


def authors_text(authors: tuple[str, ...] | list[str]) -> str | None:
    """The names as one space-joined text for the full-text index (None for no authors)."""
    text = " ".join(" ".join(a.split()) for a in authors if a and a.strip())
    return text or None


def row_item(r: dict[str, Any]) -> Item:
    published = from_iso(r["published"])
    assert published is not None
    return Item(
        id=r["id"],
        guid=r["guid"],
        title=r["title"],
        link=r["link"],
        summary=r["summary"] or "",
        published=published,
        kind="update" if r["kind"] == "update" else kind_of(r["link"]),
        authors=tuple(json.loads(r["authors"] or "[]")),
    )


def row_subscription(r: dict[str, Any]) -> Subscription:
    created = from_iso(r["created_at"])
    assert created is not None
    return Subscription(
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        user_id=r["user_id"],
        created_at=created,
        keywords=tuple(json.loads(r["keywords"] or "[]")),
        paused=bool(r["paused"]),
        paused_reason=r["paused_reason"],
    )


def row_delivery(r: dict[str, Any]) -> Delivery:
    return Delivery(
        id=int(r["id"]),
        item_id=r["item_id"],
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        state=r["state"],
        matched=tuple(json.loads(r["matched"] or "[]")),
        attempts=r["attempts"] or 0,
        ts=r["ts"],
        error=r["error"],
        claimed_at=from_iso(r["claimed_at"]),
    )


def row_feed_state(url: str, r: dict[str, Any] | None) -> FeedState:
    if r is None:
        return FeedState(url=url)
    return FeedState(
        url=url,
        etag=r["etag"],
        last_modified=r["last_modified"],
        last_poll=from_iso(r["last_poll"]),
        last_success=from_iso(r["last_success"]),
        error_streak=r["error_streak"] or 0,
        last_error=r["last_error"],
        last_error_at=from_iso(r["last_error_at"]),
    )
