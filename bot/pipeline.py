"""The poll pipeline, wired once: what `poll`, `serve` and the shell run.

    pipeline = Pipeline.from_settings(settings, store)            # Slack's deliverer; or deliver=a printer
    result = pipeline.poll_once(lock_timeout=60)                    # one cycle, in the calling thread
    new, baseline, fetched = pipeline.preview()                     # `poll --dry-run`: writes nothing
    poller = pipeline.start(interval, on_result=...)                # the same cycle every `interval` seconds
    pipeline.close()                                                # the HTTP client, if the pipeline made it

A cycle is `bot.poller.poll_once`: fetch -> parse -> route (`bot.route`: who gets each new item and why,
embeddings computed here, outside any transaction) -> ingest (new items and ledger rows in one short
transaction) -> enrich new items from the research index beside a web feed, and route them by the authors
it found, and from their own pages (`bot.item_pages`: paper, code, venue; follow-ups for a later finding) ->
deliver -> post due digests (`bot.digest`).
Then every hook in `after` runs with the cycle's `PollResult`, in order, each guarded (a hook never breaks a
poll): the place for a search index refresh, and for `serve`'s first-run backfill of a sparse archive
(`backfill_if_sparse`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import TracebackType

import httpx

from bot import deliver as slack_delivery
from bot import digest as digests
from bot import feed, item_pages, poller, research_index
from bot import worker as workers
from bot.config import Settings
from bot.models import Item, PollResult, Subscription
from bot.poller import Deliver, Enrich, Poller
from bot.route import Router
from bot.search.index import meaning_model
from bot.search.topics import TopicMatcher
from bot.store import Store

log = logging.getLogger("bot.pipeline")

After = Callable[[PollResult], object]


@dataclass(eq=False)
class Pipeline:
    store: Store
    client: httpx.Client
    feed_url: str
    # Builds the delivery step on first use (a dry run never builds Slack's); None: items queue in the ledger.
    make_deliver: Callable[[], Deliver | None] = field(default=lambda: None)
    enrich: Enrich | None = None
    # Builds the digest step from the delivery step (`bot.digest.from_deliverer`); None: no digests posted.
    make_digest: Callable[[Deliver | None], Deliver | None] = field(default=lambda deliver: None)
    index_url: str | None = None
    after: list[After] = field(default_factory=list)
    owns_client: bool = False
    # Who gets each new item (about: topics by meaning, with the model search uses).
    router: Router = field(default_factory=Router)
    _backfilling: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        store: Store,
        *,
        deliver: Deliver | None = None,
        client: httpx.Client | None = None,
        after: Sequence[After] = (),
        digest: Deliver | None = None,
        no_deliver: bool = False,
    ) -> Pipeline:
        """The pipeline FEED_URL and the Slack settings describe, over `store`. `deliver` replaces Slack's
        deliverer (the shell prints); `client` replaces the HTTP client made here (the caller closes it);
        `after` are the first hooks; `digest` replaces the digest step (one beside Slack's deliverer);
        `no_deliver` ingests and queues only (`poll --no-deliver`: workers deliver). On PostgreSQL, Slack's
        delivery and digest steps leave the work to worker processes while one is alive (`bot.worker`)."""
        index_url = research_index.index_url_for(settings.feed_url)
        if no_deliver:
            make_deliver: Callable[[], Deliver | None] = lambda: None  # noqa: E731 - ingest and queue only
        elif deliver is not None:
            make_deliver = lambda: deliver  # noqa: E731
        else:
            make_deliver = lambda: _slack_delivery(settings, store)  # noqa: E731
        return cls(
            store=store,
            client=client or feed.make_client(),
            feed_url=settings.feed_url,
            make_deliver=make_deliver,
            make_digest=(lambda _deliver: digest) if digest is not None else (
                lambda made: _slack_digest(made, settings, store)
            ),
            enrich=item_pages.enricher(index_url),
            index_url=index_url,
            after=list(after),
            owns_client=client is None,
            router=Router(TopicMatcher(meaning_model(settings)).match),
        )

    @cached_property
    def deliver(self) -> Deliver | None:
        return self.make_deliver()

    @cached_property
    def digest(self) -> Deliver | None:
        return self.make_digest(self.deliver)

    def poll_once(self, lock_timeout: float = 60.0) -> PollResult:
        """One cycle under the store's poll lock (LockTimeout when another process holds it), then `after`."""
        result = poller.poll_once(
            self.store, self.client, self.feed_url, deliver=self.deliver, lock_timeout=lock_timeout,
            enrich=self.enrich, digest=self.digest, router=self.router,
        )
        self.finish(result)
        return result

    def preview(self) -> tuple[list[Item], bool, int]:
        """Dry run (`bot.poller.preview`): (new items, whether it would be the baseline, items fetched)."""
        return poller.preview(self.store, self.client, self.feed_url)

    def start(self, interval: float, on_result: After | None = None) -> Poller:
        """The background `Poller` running this cycle; `on_result` sees each result after the hooks."""

        def finished(result: PollResult) -> None:
            self.finish(result)
            if on_result is not None:
                on_result(result)

        background = Poller(self.store, self.client, self.feed_url, interval, deliver=self.deliver,
                            enrich=self.enrich, on_result=finished, digest=self.digest, router=self.router)
        background.start()
        return background

    def finish(self, result: PollResult) -> None:
        """Run the `after` hooks on a cycle's result; one that raises is one log line."""
        for hook in self.after:
            try:
                hook(result)
            except Exception:  # noqa: BLE001 - what follows a poll never breaks it
                log.exception("event=after_poll_crashed hook=%s", getattr(hook, "__name__", repr(hook)))

    def backfill_if_sparse(self, _result: PollResult | None = None, *, retry: str = "next_poll") -> None:
        """First run (`serve`): fill an archive of fewer than 50 items from the research index, once; a
        failure is logged and retried on the next call (as an `after` hook: after the next poll; `retry` says
        when, see `research_index.backfill_if_sparse`). One at a time: a call while another runs does
        nothing. Nothing without a research index (a file feed)."""
        if self.index_url is None or not self._backfilling.acquire(blocking=False):
            return
        try:
            research_index.backfill_if_sparse(self.store, self.client, self.index_url, retry=retry)
        finally:
            self._backfilling.release()

    def close(self) -> None:
        if self.owns_client:
            self.client.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def would_burst(store: Store, new: Sequence[Item], threshold: int,
                router: Router | None = None) -> list[tuple[Subscription, int]]:
    """For a dry run: the channels a poll bringing `new` would post to as a burst (more than `threshold` of
    the items for one channel: one message, the items in its thread), each with how many items it would
    get. Only the channels that take items one by one count (not paused, no digest, the workspace not
    disabled); routed as a poll routes them (`router`: keywords, about: topics). Read-only; nothing for a
    missing database."""
    if len(new) <= threshold or not store.exists():
        return []
    audience = store.audience()
    routes = (router or Router()).decide(new, audience).routes
    counts: dict[tuple[str, str], int] = {}
    for route in routes:
        if route.target == "channel":
            key = (route.team_id, route.to)
            counts[key] = counts.get(key, 0) + 1
    return [(sub, counts[(sub.team_id, sub.channel_id)]) for sub in audience.subscriptions
            if sub.digest is None and counts.get((sub.team_id, sub.channel_id), 0) > threshold]


def _slack_delivery(settings: Settings, store: Store) -> Deliver | None:
    """Slack's deliverer; on PostgreSQL, through channel claims and only while no worker is alive."""
    made = slack_delivery.from_settings(settings, store)
    if made is None or store.backend != "postgres":
        return made
    return workers.PollerDelivery(made, lease=settings.worker_lease)


def _slack_digest(deliver: Deliver | None, settings: Settings, store: Store) -> Deliver | None:
    made = digests.from_deliverer(deliver)
    if made is None or store.backend != "postgres":
        return made
    return workers.PollerDigest(made, lease=settings.worker_lease)
