"""The frozen records every layer passes around: what the feed yields (`Item`, `Validators`, `Fetched`,
`NotModified`), what the store hands out (`FeedState`, `Ingested`, `Subscription`, `Delivery`, `SavedItem`,
`SearchHit`, `SearchFilters`), who receives a new item (`Audience`, `Route`, `Routes`: decided by
`bot.route`, written by the store) and what a poll reports (`DeliveryReport`, `PollResult`). Nothing here
does I/O or imports another module of the bot."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, date, datetime
from typing import Literal

from msgspec import Struct, field

Kind = Literal["research", "update"]

MAX_KEYWORDS = 20  # keywords of one subscription, and follows of one person in one workspace
TOPIC_PREFIX = "about:"  # a keyword that is a topic matched by meaning: "about:privacy"
AUTHOR_PREFIX = "author:"  # a keyword that is an author's name (bot.search.authors): "author:Awni Hannun"
MAX_WORKSPACE_TOPICS = 100  # distinct about: topics of one workspace's subscriptions and follows together
FOLLOWUP_PREFIX = "followup:"  # a delivery's target when it is a follow-up reply (`Delivery.followup`)


# --- the feed -------------------------------------------------------------------------------------------

# The day of a post whose date is unknown (some posts of the bundled demo archive, bot/demo.py): it sorts
# last and is shown as "date unknown", never as a day. The feed and the research index always give a date.
UNDATED = datetime(1970, 1, 1, tzinfo=UTC)


def shown_day(moment: date | datetime) -> str:
    """The day as people read it, YYYY-MM-DD, or "date unknown" for UNDATED's."""
    day = moment.date() if isinstance(moment, datetime) else moment
    return "date unknown" if day == UNDATED.date() else day.isoformat()


class Item(Struct, frozen=True):
    """One feed entry. `id` is its identity: the canonical link. `venue` ("ICML 2025"), `paper_url` (its arXiv
    or PDF link) and `code_url` (its code, e.g. github.com/apple/ml-…) are what its page on the site says
    (`bot.item_pages`), None until read or when the page says nothing."""

    id: str
    guid: str | None
    title: str
    link: str
    summary: str
    published: datetime
    kind: Kind
    authors: tuple[str, ...] = field(default=())
    venue: str | None = None
    paper_url: str | None = None
    code_url: str | None = None


class Validators(Struct, frozen=True):
    etag: str | None = None
    last_modified: str | None = None


class Fetched(Struct, frozen=True):
    content: bytes
    validators: Validators


class NotModified(Struct, frozen=True):
    validators: Validators


# --- the store ------------------------------------------------------------------------------------------


class FeedState(Struct, frozen=True):
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


class Ingested(Struct, frozen=True):
    """What one successful poll changed: the new items (oldest first), how many known items were edited,
    whether this was the baseline (first) poll, and how many deliveries were queued."""

    new: list[Item]
    updated: int
    baseline: bool
    queued: int


class Subscription(Struct, frozen=True):
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


class Delivery(Struct, frozen=True):
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
    # channel | person (a follow's direct message: channel_id is the user ID) | followup:code |
    # followup:venue (a reply in the thread of the item's post in that channel: bot.item_pages found it later)
    target: str = "channel"
    poll: str | None = None  # the poll (ingest) that queued it
    batch_id: str | None = None  # the burst it is posted in, in the thread of the batch's message
    thread_ts: str | None = None  # a follow-up's: the thread of the item's post it replies in

    @property
    def to_person(self) -> bool:
        return self.target == "person"

    @property
    def followup(self) -> str | None:
        """What a follow-up row tells in the item's thread ("code" or "venue"; target "followup:code"), or
        None for an item's own post."""
        return self.target[len(FOLLOWUP_PREFIX):] if self.target.startswith(FOLLOWUP_PREFIX) else None


class SavedItem(Struct, frozen=True):
    """An item in a person's reading list."""

    item: Item
    saved_at: datetime


class DeliveryBatch(Struct, frozen=True):
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


class Digest(Struct, frozen=True):
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


class SearchHit(Struct, frozen=True):
    item: Item
    score: float
    by_meaning: bool = False  # close in meaning only: the item does not hold the query's words


class SearchFilters(Struct, frozen=True):
    since: date | None = None
    until: date | None = None  # the last day included
    kind: str | None = None
    authors: tuple[str, ...] = field(default=())
    venues: tuple[str, ...] = field(default=())  # venue:icml: the venue holds each one's words
    has: tuple[str, ...] = field(default=())  # has:code, has:paper, has:venue: the item holds each


# --- a poll ---------------------------------------------------------------------------------------------


class DeliveryReport(Struct, frozen=True):
    delivered: int = 0
    failed: int = 0
    left: int = 0  # open posts left to other processes (workers, or a live holder of their channels)


class PollResult(Struct, frozen=True):
    fetched: int = 0
    new: int = 0
    delivered: int = 0
    failed: int = 0
    not_modified: bool = False
    baseline: bool = False
    updated: int = 0
    error: str | None = None
    new_items: list[Item] = field(default_factory=list)
    left_to_others: int = 0  # open posts this poll left to other processes (PostgreSQL: workers, claims)

    def as_json(self) -> dict[str, object]:
        return {
            "fetched": self.fetched,
            "new": self.new,
            "delivered": self.delivered,
            "failed": self.failed,
            "not_modified": self.not_modified,
            "left_to_others": self.left_to_others,
        }


# --- routing: who receives a new item, and why (bot.route decides, the store writes) -----------------------


class Audience(Struct, frozen=True):
    """Everyone who could receive a new item, as read at one moment: the active subscriptions (not paused,
    their workspace not disabled) and each person's follows (outside disabled workspaces)."""

    subscriptions: tuple[Subscription, ...] = ()
    follows: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (team_id, user_id, keywords)

    def version(self) -> str:
        """What routing depends on, as a digest: two reads with the same version route every item alike."""
        subs = sorted(
            (s.team_id, s.channel_id, sorted(s.keywords), s.digest is None) for s in self.subscriptions
        )
        people = sorted((team, user, sorted(keywords)) for team, user, keywords in self.follows)
        return hashlib.sha256(json.dumps([subs, people]).encode()).hexdigest()

    def topics(self) -> list[str]:
        """Every about: topic someone subscribes to or follows (without the prefix), each once."""
        keywords = [k for s in self.subscriptions for k in s.keywords]
        keywords += [k for _, _, followed in self.follows for k in followed]
        return list(dict.fromkeys(k[len(TOPIC_PREFIX):] for k in keywords if k.startswith(TOPIC_PREFIX)))


RouteTarget = Literal["channel", "digest", "person"]


class Route(Struct, frozen=True):
    """One new item for one recipient: a post in a channel, an item waiting for a channel's digest, or a
    direct message to a person (`to` is then the user ID); `matched` says why (the keywords, and each
    about: topic's label, prefixed), empty for a channel that takes every item."""

    item_id: str
    team_id: str
    to: str
    target: RouteTarget
    matched: tuple[str, ...] = ()


class Routes(Struct, frozen=True):
    """The routing of one fetch, decided before ingest's transaction: `items` are the ids it considered new
    (each routed, whether or not anyone gets it), `audience` the `Audience.version()` it read. Ingest writes
    the routes of the items that are new inside its transaction, and refuses (`RoutesStale`) when an item
    new there was not routed or the audience changed since."""

    items: frozenset[str] = frozenset()
    audience: str = ""
    routes: tuple[Route, ...] = ()
