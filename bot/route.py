"""Routing: who receives each new item, and why, decided once per poll before any transaction opens.

    the fetch's items ── store.preview ──► the new ones (none on a feed's baseline poll: nobody gets those)
                                              │
       store.audience() (one read) ───────────┤  each new item: analyzed once (the search analyzer),
         active subscriptions, follows        │  embedded once; each about: topic embedded once (cached)
                                              ▼
    ┌─ a channel's subscription (not paused, workspace not disabled)
    │    no keywords ─────────────────────────────────── every item ──┐
    │    a keyword or "a phrase" ── its terms in the title or abstract ┤ matched: the keywords it matched
    │    about:"topic" ── similarity ≥ THRESHOLD, or every topic word ─┤ and each topic's label, why
    │    author:"name" ── one of its authors is that name (bot.search.authors, as search's author:) ─┘
    │        └─► Route(target="channel")   a post in the channel
    │        └─► Route(target="digest")    if the channel takes a digest: the item waits for it
    └─ a person's follows (keywords, about: topics and authors, matched alike; any match)
             └─► Route(target="person")    one direct message per item, `matched` lists every match

    Routes(items=the new ids, audience=the read's version, routes=[Route, ...])
        ──► store.ingest(..., routes=...): new items + ledger rows, one short transaction, no model

The feed carries no authors: the research index fills them in after ingest (`research_index.enrich`). Then
`by_authors` routes the items whose authors became known to the author follows and subscriptions they match
(only those: keywords and topics were routed at ingest), queued in one short transaction that checks the
audience as ingest does; the ledger's unique (item, workspace, channel or person) keeps an item that both
ingest and `by_authors` routed to one place to one post.

A slow or failing embeddings endpoint delays only this step (one log line; topics then match by their words
for a while, `bot.search.topics.TopicMatcher`); it never holds a transaction, so no write waits for it.

What changes between this read and ingest's transaction is checked there, not guessed here (`ingest`):
- an item routed as new but found archived inside the transaction (another process took it): its routes are
  dropped, the other process wrote its own;
- an item new inside the transaction but not routed, or a subscription or follow added, changed or removed
  since the read (the audience's version differs): the transaction writes nothing (RoutesStale) and this
  routes again, from a fresh read (item and topic vectors are cached, so it costs no model call), up to
  ATTEMPTS times; then the poll reports the error and the next poll ingests those items, still new.
So exactly-once holds as before: every new item is queued, in the transaction that archives it, for exactly
the audience of that moment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from bot.errors import RoutesStale
from bot.models import (
    AUTHOR_PREFIX,
    TOPIC_PREFIX,
    Audience,
    Ingested,
    Item,
    Route,
    Routes,
    RouteTarget,
    Validators,
)
from bot.search.authors import Typed, matches, required, stored, words_in
from bot.search.match import matcher
from bot.search.topics import words_only
from bot.store import Store

log = logging.getLogger("bot.route")

ATTEMPTS = 3  # routings tried against a changing audience before the poll gives up (the next poll retries)

# For each item, the labels of the topics it matches (bot.search.topics.TopicMatcher.match).
TopicLabels = Callable[[Sequence[Item], Sequence[str]], list[list[str]]]


def by_words(items: Sequence[Item], topics: Sequence[str]) -> list[list[str]]:
    """Topic labels without a model: a topic matches by its words."""
    return [words_only(item, topics) for item in items]


class Router:
    """Decides the routes of a fetch's new items. `topics` labels items by meaning (a TopicMatcher's
    `match`, whose model is loaded on first use); None: about: topics match by their words."""

    def __init__(self, topics: TopicLabels | None = None) -> None:
        self.topics = topics or by_words

    def route(self, store: Store, url: str, items: Sequence[Item]) -> Routes:
        """The routes of those of `items` the store does not hold yet (a read; nothing is written)."""
        new, baseline = store.preview(url, items)
        if baseline or not new:
            return Routes()
        return self.decide(new, store.audience())

    def decide(self, items: Sequence[Item], audience: Audience) -> Routes:
        """The routes of `items` (all new) for `audience`, item by item in feed order (the order the
        ledger's rows were always queued in)."""
        topics = audience.topics()
        labels = self.topics(items, topics) if topics else [[] for _ in items]
        routes: list[Route] = []
        named = _Authors(audience)
        for item, found in zip(items, labels, strict=True):
            label_of = {label.rsplit(" (", 1)[0]: label for label in found}  # "topic (why)" by topic
            keywords = matcher(item.title, item.summary)
            by = named.matched(item.authors)
            for n, sub in enumerate(audience.subscriptions):
                why = _why(sub.keywords, keywords, label_of) + by.get(n, ())
                if why or not sub.keywords:
                    target: RouteTarget = "channel" if sub.digest is None else "digest"
                    routes.append(Route(item.id, sub.team_id, sub.channel_id, target, why))
            for n, (team_id, user_id, followed) in enumerate(audience.follows, len(audience.subscriptions)):
                why = _why(followed, keywords, label_of) + by.get(n, ())
                if why:
                    routes.append(Route(item.id, team_id, user_id, "person", why))
        return Routes(frozenset(item.id for item in items), audience.version(), tuple(routes))

    def by_authors(self, items: Sequence[Item], audience: Audience) -> Routes:
        """The routes of archived `items` that only their authors decide: each author follow and author
        subscription (an author: keyword) one of an item's authors matches, `matched` naming those."""
        routes: list[Route] = []
        named = _Authors(audience)
        subs = audience.subscriptions
        for item in items:
            for n, why in sorted(named.matched(item.authors).items()):
                if n < len(subs):
                    target: RouteTarget = "channel" if subs[n].digest is None else "digest"
                    routes.append(Route(item.id, subs[n].team_id, subs[n].channel_id, target, why))
                else:
                    team_id, user_id, _ = audience.follows[n - len(subs)]
                    routes.append(Route(item.id, team_id, user_id, "person", why))
        return Routes(frozenset(item.id for item in items), audience.version(), tuple(routes))


def _why(
    wanted: Sequence[str], keywords: Callable[[Sequence[str]], list[str]], label_of: dict[str, str]
) -> tuple[str, ...]:
    """Which of `wanted`'s keywords and about: topics an item matches: its keywords as given, then each
    topic's label, prefixed (the label says by meaning or by its words). Authors: `_Authors`."""
    plain = [k for k in wanted if not k.startswith((TOPIC_PREFIX, AUTHOR_PREFIX))]
    about = [label_of.get(k[len(TOPIC_PREFIX):]) for k in wanted if k.startswith(TOPIC_PREFIX)]
    return tuple(keywords(plain) + [TOPIC_PREFIX + label for label in about if label])


class _Authors:
    """The author: keywords of an audience (its subscriptions, then its follows, numbered in that order),
    each found by the word an author's name must hold for it to match (`bot.search.authors.required`): an
    item is checked only against the names its authors' words can match, not against every follow."""

    def __init__(self, audience: Audience) -> None:
        self.by_word: dict[str, list[tuple[int, int, str, Typed]]] = {}
        self.anywhere: list[tuple[int, int, str, Typed]] = []  # a surname typed as an initial: any name
        wanted = [sub.keywords for sub in audience.subscriptions] + [f[2] for f in audience.follows]
        for n, keywords in enumerate(wanted):
            for place, keyword in enumerate(keywords):
                if not keyword.startswith(AUTHOR_PREFIX):
                    continue
                try:
                    name = stored(keyword[len(AUTHOR_PREFIX):])
                except ValueError:  # a stored name no rule takes any more: it matches nothing
                    continue
                need = required(name)
                entry = (n, place, keyword, name)
                (self.by_word.setdefault(need, []) if need is not None else self.anywhere).append(entry)

    def matched(self, authors: Sequence[str]) -> dict[int, tuple[str, ...]]:
        """For an item's authors: the author: keywords they match (as search's author: filter would), by
        the subscription's or follow's number, in the order it lists them."""
        if not authors or not (self.by_word or self.anywhere):
            return {}
        words = words_in(tuple(authors))
        candidates = [e for w in words for e in self.by_word.get(w, ())] + self.anywhere
        found: dict[int, list[tuple[int, str]]] = {}
        for n, place, keyword, name in candidates:
            if any(matches(name, author) for author in authors):
                found.setdefault(n, []).append((place, keyword))
        return {n: tuple(k for _, k in sorted(set(hits))) for n, hits in found.items()}


def by_authors(store: Store, item_ids: Sequence[str], router: Router | None = None) -> int:
    """Queue, for the archived items `item_ids` whose authors became known after ingest (the research
    index's enrichment), the routes their authors decide (`Router.by_authors`), in one short transaction
    that checks the audience (`Store.queue_after_ingest`), ATTEMPTS times against a changing one. Returns
    how many deliveries and digest items were queued (a route ingest queued already is not queued again)."""
    found = store.get_items(list(dict.fromkeys(item_ids))) if item_ids else {}
    items = [found[i] for i in dict.fromkeys(item_ids) if i in found and found[i].authors]
    if not items:
        return 0
    router = router or Router()
    for attempt in range(1, ATTEMPTS + 1):
        routes = router.by_authors(items, store.audience())
        if not routes.routes:
            return 0
        try:
            return store.queue_after_ingest(routes)
        except RoutesStale as exc:
            if attempt == ATTEMPTS:
                raise
            log.info("event=route_again step=authors attempt=%d reason=%r", attempt, str(exc))
    raise AssertionError("unreachable")


def ingest(
    store: Store, url: str, items: Sequence[Item], validators: Validators, at: datetime | None = None, *,
    router: Router | None = None, routes: Routes | None = None,
) -> Ingested:
    """Ingest a fetch with its routes (`routes`, or `router`'s decision now): `store.ingest`, one short
    transaction. When the routes turn out stale there (see the module docstring), route again and retry,
    ATTEMPTS times in all; then RoutesStale reaches the caller with nothing written."""
    router = router or Router()
    for attempt in range(1, ATTEMPTS + 1):
        if routes is None:
            routes = router.route(store, url, items)
        try:
            return store.ingest(url, items, validators, at, routes=routes)
        except RoutesStale as exc:
            if attempt == ATTEMPTS:
                raise
            log.info("event=route_again attempt=%d reason=%r", attempt, str(exc))
            routes = None
    raise AssertionError("unreachable")
