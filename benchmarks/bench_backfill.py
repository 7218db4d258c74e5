"""Backfill benchmark (issue 6): the research index with 1,000 and 5,000 synthetic posts, over loopback HTTP.

For each size, the time of one `research_index.backfill` (fetch + parse + merge, in one transaction)
  - into an empty archive (every post added), and
  - into a full archive that already holds the same posts as the feed brought them (abstract cut at ~600
    characters, no authors), so every post is enriched;
then search p50/p99 over the full archive before and after its backfill (terms, and author: filters).

Target: 5,000 posts in under 5 s; search p99 unchanged (within noise, a few ms).

Then (issue 55) the posts' own pages: 700 posts backfilled, then `item_pages.enrich_pages` reads each
one's page (paper, code, venue: synthetic pages in the shape of tests/data/item_pages/) from a loopback
server, once with no pause (the work itself: fetch, parse, store) and once at the pace `backfill --pages`
keeps (BACKFILL_PACE, one page a second), the time each takes, and how many pages gave each field.

Run: .venv/bin/python benchmarks/bench_backfill.py [--pages-only] [--pages N]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bot import item_pages  # noqa: E402
from bot import research_index as ri  # noqa: E402
from bot.feed import make_client  # noqa: E402
from bot.search.index import SearchIndex  # noqa: E402
from bot.search.query import search  # noqa: E402
from bot.store import SQLiteStore, Store  # noqa: E402
from tests.fakes.feed_server import FeedServer, Reply  # noqa: E402
from tests.fakes.research_index import _WORDS, index_page, item_page, synthetic_posts  # noqa: E402

SIZES = (1_000, 5_000)
PAGES = 700
SEARCHES = 400
TARGET_S = 5.0


def fresh_store(directory: Path, name: str) -> Store:
    store = SQLiteStore(directory / f"{name}.db")
    store.migrate()
    return store


def feed_like(page: bytes) -> list:  # type: ignore[type-arg]
    """The index's items as the feed would have brought them: abstract cut at ~600 characters, no authors."""
    items = ri.parse(page).items
    return [replace(i, summary=i.summary[:599].rstrip() + "…", authors=()) for i in items]


def search_latency(store: Store, queries: list[str]) -> tuple[float, float]:
    timings = []
    index = SearchIndex(store)
    search(index, queries[0], limit=10)  # builds the index: its cost is not a search's
    for query in queries:
        start = time.perf_counter()
        search(index, query, limit=10)
        timings.append((time.perf_counter() - start) * 1000)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.99) - 1]


def queries_for(n: int) -> list[str]:
    rng = random.Random(n)
    queries = []
    for k in range(SEARCHES):
        if k % 4 == 3:
            i = rng.randrange(n)
            queries.append(f'author:"Author{i % 997} Surname{(i * 3) % 991}"')
        else:
            queries.append(" ".join(rng.sample(_WORDS, 1 + k % 3)))
    return queries


def synthetic_page(n: int, title: str) -> bytes:
    """Post n's own page: every post names its paper, two in three their code, three in four a venue."""
    venue = ("ICML 2025", "NeurIPS 2025", "the Workshop on Efficient Systems at NeurIPS 2025", None)[n % 4]
    body = f"<p>This paper was accepted at {venue}.</p>" if venue else ""
    body += "<p>" + " ".join(_WORDS[(n + k) % len(_WORDS)] for k in range(120)) + ".</p>"
    if n % 3:
        body += f"<p>Code is available at https://github.com/apple/ml-synthetic-{n}.</p>"
    return item_page(title, body, publication=f"https://arxiv.org/pdf/2501.{n:05d}v2")


def pages(count: int) -> int:
    """Backfill `count` posts, then read their pages: with no pause, and at BACKFILL_PACE."""
    posts = synthetic_posts(count, prefix="paged")
    html = "text/html; charset=utf-8"
    print(f"\n{'pages':>6}  {'pace':>6}  {'elapsed':>9}  {'read':>5} {'failed':>6}  {'paper':>5} {'code':>5} "
          f"{'venue':>5}  {'work a page':>11}")
    with tempfile.TemporaryDirectory() as tmp, FeedServer() as server, make_client() as client:
        url = server.route("/research", Reply(body=index_page(posts), content_type=html))
        for n, post in enumerate(posts):
            body = synthetic_page(n, post["title"])
            server.route(f"/research/{post['slug']}", Reply(body=body, content_type=html))
        for pace in (0.0, item_pages.BACKFILL_PACE):
            store = fresh_store(Path(tmp), f"pages-{pace}")
            ri.backfill(store, client, url)
            start = time.perf_counter()
            result = item_pages.enrich_pages(store, client, server.base, (), more=None, recheck=False,
                                             pace=pace, budget=None)
            took = time.perf_counter() - start
            items = store.latest(limit=count)
            fields = ("paper_url", "code_url", "venue")
            have = [sum(1 for i in items if getattr(i, field)) for field in fields]
            work = (took - pace * max(0, result.read + result.failed - 1)) / max(1, result.read) * 1000
            print(f"{count:>6,}  {pace:>5.1f}s  {took:>8.1f}s  {result.read:>5,} {result.failed:>6,}  "
                  f"{have[0]:>5,} {have[1]:>5,} {have[2]:>5,}  {work:>8.1f} ms")
    return 0


def main() -> int:
    count = int(sys.argv[sys.argv.index("--pages") + 1]) if "--pages" in sys.argv else PAGES
    if "--pages-only" in sys.argv:
        return pages(count)
    print(
        f"{'posts':>6}  {'archive':<7} {'backfill':>9}  {'added':>6} {'enriched':>8}  "
        f"{'search p50/p99 before':>22}  {'after':>15}"
    )
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp, FeedServer() as server, make_client() as client:
        directory = Path(tmp)
        for n in SIZES:
            page = index_page(synthetic_posts(n))
            url = server.route(f"/research-{n}", Reply(body=page, content_type="text/html; charset=utf-8"))
            queries = queries_for(n)

            empty = fresh_store(directory, f"empty-{n}")
            start = time.perf_counter()
            result = ri.backfill(empty, client, url)
            took = time.perf_counter() - start
            worst = max(worst, took) if n == max(SIZES) else worst
            p50, p99 = search_latency(empty, queries)
            print(
                f"{n:>6,}  {'empty':<7} {took:>8.2f}s  {result.added:>6,} {result.enriched:>8,}  "
                f"{'-':>22}  {p50:>6.2f}/{p99:>5.2f} ms"
            )

            full = fresh_store(directory, f"full-{n}")
            full.add_items(feed_like(page))
            b50, b99 = search_latency(full, queries)
            start = time.perf_counter()
            result = ri.backfill(full, client, url)
            took = time.perf_counter() - start
            worst = max(worst, took) if n == max(SIZES) else worst
            a50, a99 = search_latency(full, queries)
            print(
                f"{n:>6,}  {'full':<7} {took:>8.2f}s  {result.added:>6,} {result.enriched:>8,}  "
                f"{b50:>11.2f}/{b99:>5.2f} ms  {a50:>6.2f}/{a99:>5.2f} ms"
            )
    verdict = "PASS" if worst < TARGET_S else "FAIL"
    print(f"slowest backfill of {max(SIZES):,} posts: {worst:.2f}s (target < {TARGET_S:g} s) {verdict}")
    pages(count)
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
