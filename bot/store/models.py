"""Rows to records (the records themselves live in bot.models), and ISO-8601 time helpers. Nothing here
touches a database."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from bot.feed import kind_of
from bot.models import Delivery, DeliveryBatch, Digest, FeedState, Item, Subscription


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z") if moment else None


def from_iso(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


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
        venue=r.get("venue") or None,
        paper_url=r.get("paper_url") or None,
        code_url=r.get("code_url") or None,
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
        digest=r.get("digest") or None,
        digest_at=r.get("digest_at") or "09:00",
        digest_tz=r.get("digest_tz") or "UTC",
        digest_since=from_iso(r.get("digest_since")),
    )


def row_digest(r: dict[str, Any]) -> Digest:
    ends = from_iso(r["ends"])
    assert ends is not None
    return Digest(
        id=int(r["id"]),
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        period=r["period"],
        starts=from_iso(r["starts"]),
        ends=ends,
        state=r["state"],
        items=r["items"] or 0,
        attempts=r["attempts"] or 0,
        ts=r["ts"],
        error=r["error"],
        claimed_at=from_iso(r["claimed_at"]),
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
        target=r.get("target") or "channel",
        poll=r.get("poll"),
        batch_id=r.get("batch_id"),
        thread_ts=r.get("thread_ts"),
    )


def row_batch(r: dict[str, Any]) -> DeliveryBatch:
    return DeliveryBatch(
        id=r["id"],
        team_id=r["team_id"],
        channel_id=r["channel_id"],
        poll=r["poll"],
        count=int(r["size"] or 0),
        state=r["state"],
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
