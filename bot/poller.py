"""One poll cycle (`poll_once`) and the background loop (`Poller`).

A cycle, in this order and in the code below:
    fetch (conditional GET)
    -> parse
    -> route: who gets each new item and why (`bot.route`: a read, then matching and embeddings; no
       transaction is open, so a slow model or endpoint delays no write)
    -> ingest: new items, edits and the routed ledger rows in one short transaction (routed again if a
       subscription changed in between)
    -> enrich new items from the research index (the feed has no authors and cuts abstracts), then route
       those whose authors it found to the author follows and subscriptions they match (`route.by_authors`);
       then their own pages (paper, code, venue) and a few older ones' (`bot.item_pages`: a later finding
       queues a follow-up reply)
    -> deliver whatever the ledger holds open (so posts carry the authors, the whole abstract and the paper,
       code and venue; follow-ups too), then due digests.
Only the holder of the store's poll lock runs a cycle, so a web process and a scheduled `poll` never deliver
at once.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence

import httpx

from bot import route
from bot.errors import FeedError, LockTimeout, RoutesStale, StoreError
from bot.feed import fetch, parse
from bot.models import DeliveryReport, Fetched, Item, PollResult
from bot.route import Router
from bot.store import Store

log = logging.getLogger("bot.poller")

Deliver = Callable[[Store], DeliveryReport]
# Enrichment of newly polled items from the research index (issue 6) and their own pages (issue 55): (store,
# client, new item ids) -> the ids of the items it found authors for (anything else: none). It runs after
# ingest, so it never changes which items are new or what ingest queued; see item_pages.enricher.
Enrich = Callable[[Store, httpx.Client, Sequence[str]], object]


def poll_once(
    store: Store,
    client: httpx.Client,
    feed_url: str,
    *,
    deliver: Deliver | None = None,
    lock_timeout: float = 60.0,
    enrich: Enrich | None = None,
    digest: Deliver | None = None,
    router: Router | None = None,
) -> PollResult:
    """Run one cycle under the poll lock. A feed failure is recorded and returned in `error`; deliveries
    still open from earlier cycles are attempted anyway, and due digests (`digest`, after delivery) posted.
    `router` decides who gets each new item (None: about: topics match by their words)."""
    with store.poll_lock(timeout=lock_timeout):
        return _cycle(store, client, feed_url, deliver, enrich, digest, router or Router())


def _cycle(
    store: Store, client: httpx.Client, feed_url: str, deliver: Deliver | None, enrich: Enrich | None = None,
    digest: Deliver | None = None, router: Router | None = None,
) -> PollResult:
    router = router or Router()
    state = store.feed_state(feed_url)
    error: str | None = None
    fetched = new = updated = 0
    not_modified = baseline = False
    new_items: list[Item] = []
    try:
        answer = fetch(client, feed_url, state.validators)
        if isinstance(answer, Fetched):
            items = parse(answer.content)
            routes = router.route(store, feed_url, items)
            ingested = route.ingest(store, feed_url, items, answer.validators, router=router, routes=routes)
            fetched, new, updated, baseline = (
                len(items),
                len(ingested.new),
                ingested.updated,
                ingested.baseline,
            )
            new_items = ingested.new
        else:
            not_modified = True
            store.record_not_modified(feed_url, answer.validators)
    except FeedError as exc:
        error = str(exc)
        store.record_failure(feed_url, error)
        log.warning("event=feed_error kind=%s error=%r", exc.kind, error)
    except RoutesStale as exc:  # subscriptions kept changing while routing: the next poll ingests these
        error = str(exc)
        log.warning("event=route_stale error=%r", error)
    if enrich is not None and not baseline:
        # After ingest, so it can change neither what is new nor what ingest queued; before delivery, so what
        # is posted holds what the index and the item's page say, and the authors it found route their items.
        _enrich(store, client, enrich, [item.id for item in new_items], router)
    report = deliver(store) if deliver is not None else DeliveryReport()
    if digest is not None:  # digests count as delivered messages
        digested = _digests(store, digest)
        report = DeliveryReport(report.delivered + digested.delivered, report.failed + digested.failed,
                                report.left)
    result = PollResult(
        fetched=fetched,
        new=new,
        delivered=report.delivered,
        failed=report.failed,
        not_modified=not_modified,
        baseline=baseline,
        updated=updated,
        error=error,
        new_items=new_items,
        left_to_others=report.left,
    )
    log.info(
        "event=poll fetched=%d new=%d updated=%d delivered=%d failed=%d not_modified=%s baseline=%s ok=%s",
        fetched,
        new,
        updated,
        report.delivered,
        report.failed,
        not_modified,
        baseline,
        error is None,
    )
    return result


def _enrich(store: Store, client: httpx.Client, enrich: Enrich, item_ids: list[str], router: Router) -> None:
    """The enrichment step, then the routes of the items it found authors for; a failure of either is one
    log line and never breaks the poll (an item left unrouted by its authors is only not sent for them)."""
    try:
        found = enrich(store, client, item_ids)
    except Exception:  # noqa: BLE001 - enrichment is a nicety; it never breaks a poll
        log.exception("event=enrich_crashed")
        return
    authored = [i for i in found if isinstance(i, str)] if isinstance(found, list) else []
    if not authored:
        return
    try:
        queued = route.by_authors(store, authored, router)
    except StoreError as exc:  # RoutesStale too: follows kept changing
        log.warning("event=route_by_authors_failed items=%d error=%r", len(authored),
                    " ".join(str(exc).split())[:300])
        return
    except Exception:  # noqa: BLE001 - what was queued before still goes out: delivery must run
        log.exception("event=route_by_authors_crashed items=%d", len(authored))
        return
    log.info("event=route_by_authors items=%d queued=%d", len(authored), queued)


def _digests(store: Store, digest: Deliver) -> DeliveryReport:
    """The digest step; its failure is one log line and never breaks the poll."""
    try:
        return digest(store)
    except StoreError as exc:
        log.warning("event=digest_failed reason=database error=%r", " ".join(str(exc).split())[:300])
    except Exception:  # noqa: BLE001 - a digest must not break the poll that ingested and delivered
        log.exception("event=digest_crashed")
    return DeliveryReport()


def preview(store: Store, client: httpx.Client, feed_url: str) -> tuple[list[Item], bool, int]:
    """Dry run: fetch and parse, and say what would be new, writing nothing (a missing database stays
    missing, an existing one is only read). Returns (new items, whether this would be the baseline poll,
    items fetched)."""
    state = store.feed_state(feed_url, readonly=True)
    answer = fetch(client, feed_url, state.validators)
    if not isinstance(answer, Fetched):
        return [], False, 0
    items = parse(answer.content)
    new, baseline = store.preview(feed_url, items)
    return new, baseline, len(items)


class Poller:
    """Runs `poll_once` every `interval` seconds (with up to 10% jitter) on a daemon thread, never
    overlapping itself; `stop()` lets an in-flight cycle finish. A cycle the database fails (down,
    restarting, connections ended) is one log line, `event=poll_failed reason=database`, and the next cycle
    tries again."""

    def __init__(
        self,
        store: Store,
        client: httpx.Client,
        feed_url: str,
        interval: float,
        *,
        deliver: Deliver | None = None,
        on_result: Callable[[PollResult], None] | None = None,
        enrich: Enrich | None = None,
        digest: Deliver | None = None,
        router: Router | None = None,
    ) -> None:
        self.store = store
        self.router = router
        self.client = client
        self.feed_url = feed_url
        self.interval = interval
        self.deliver = deliver
        self.enrich = enrich
        self.digest = digest
        self.on_result = on_result
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 25.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = poll_once(
                    self.store,
                    self.client,
                    self.feed_url,
                    deliver=self.deliver,
                    lock_timeout=0,
                    enrich=self.enrich,
                    digest=self.digest,
                    router=self.router,
                )
                if self.on_result is not None:
                    self.on_result(result)
            except LockTimeout:
                log.info("event=poll_skipped reason=another_process_is_polling")
            except StoreError as exc:  # the database is down or restarting: the next cycle tries again
                log.warning("event=poll_failed reason=database error=%r", " ".join(str(exc).split())[:300])
            except Exception:  # noqa: BLE001 - the loop must outlive any one bad cycle
                log.exception("event=poll_crashed")
            wait = self.interval * (1 + random.uniform(0, 0.1))
            self._stop.wait(wait)
