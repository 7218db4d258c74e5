"""The cost of either store backend, side by side, with the same search engine behind both (issues 5, 12).

    .venv/bin/python benchmarks/bench_store.py [--quick] [--sizes 2000,20000,100000] [--trending | --authors]

For SQLite (a temp file) and PostgreSQL (a fresh schema in the database BENCH_DATABASE_URL or
TEST_DATABASE_URL names, dropped afterwards): ingest of N synthetic items with Store.add_items (in batches of
5,000); the search index built from the database (bot.search.engine.build); then search (limit 10, through
bot.search.query.search: the change-marker query included) p50/p99 over bench_ingest's mix of queries, at
2,000, 20,000 and 100,000 items; "refresh" is the first search after 10 items changed (re-indexed first).
Targets: search p99 < 10 ms at 20,000 and < 50 ms at 100,000; index build < 2 s at 20,000. Without a
PostgreSQL URL only SQLite is measured, and the output says so. No asserts: it reports.

What the team is reading (issue 55), in the last table (`--trending` prints it alone): bot.trending.trending
(a workspace's most saved, 👍'd and Related-opened items of 30 days, and the glossary topics of the month's
items) at 20,000 items and 100,000 saves: 10 workspaces, the largest holding 40,000 saves (200 per person)
spread over two years (about 1,650 in the window: 55 a day), as many Related opens (55 items a day, each its
own counter) and 300 👍 in the window (10 a day, each answer listing 5 items), on a request thread's view of
the store (as serve reads); "cold" the first call (every abstract of the month analyzed); "kept" p50/p99
over calls with nothing new (the process's kept reading, after one query); "new" over calls each made right
after a save in the workspace (its saves counted again); "cpu" this process's CPU time a call; "worst" a
workspace holding 100,000 saves of its own, every one in the window (kept, and 20 calls after a save).
Target: p99 < 10 ms on both stores.

Search by meaning (issue 14), in a second table: "embed" is computing and storing every item's vector with
the bundled model (what a backfill or `reindex` pays; also given per 5,000 items, target < 30 s); "load" is
a second process reading the stored vectors (its keyword index already built); hybrid search p50/p99 over
the same queries (target p99 < 20 ms at 20,000); "vectors" is the memory the matrix adds, "rss" the
process's resident memory that loading the vectors (and the model, 16 MB) added; "related p99" is finding
the five related items (bot.search.related) of each of the 50 newest items. Queries refused as only common
words ("the") are left out.

Author matching (issue 55), in a third table (`--authors` prints it alone, at 20,000 items), on an archive of
the same size with authors (each item 3 to 9 of N/2 people): the archive's author names built once per
change, a typed name resolved as follow and subscribe resolve it, `search author:"…"`, and a poll's new items
routed to 1,000 author follows (benchmarks/authors_load.py says what is measured). Target: author matching
p99 < 10 ms at 20,000 items.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from msgspec.structs import replace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import authors_load  # noqa: E402
from benchmarks.bench_ingest import QUERIES, add_in_batches, pct, searchable, synthetic, timings  # noqa: E402
from bot.search import query as search  # noqa: E402
from bot.search.embed import StaticModel  # noqa: E402
from bot.search.engine import build  # noqa: E402
from bot.search.index import SearchIndex  # noqa: E402
from bot.search.related import related  # noqa: E402
from bot.store import Conn, SQLiteStore, Store, iso, open_store  # noqa: E402
from bot.trending import trending  # noqa: E402

BATCH = 5_000
RELATED_ITEMS = 50


@contextmanager
def sqlite_store(size: int) -> Iterator[Store]:
    with tempfile.TemporaryDirectory(prefix="mlbot-bench-") as tmp:
        store = SQLiteStore(Path(tmp) / f"bench-{size}.db")
        store.migrate()
        yield store
        store.close()


def postgres_store(url: str) -> Callable[[int], Any]:
    @contextmanager
    def make(size: int) -> Iterator[Store]:
        import psycopg

        schema = f"bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE SCHEMA "{schema}"')
        separator = "&" if "?" in url else "?"
        store = open_store(f"{url}{separator}options=-csearch_path%3D{schema}")
        try:
            store.migrate()
            yield store
        finally:
            store.close()
            with psycopg.connect(url, autocommit=True) as admin:
                admin.execute(f'DROP SCHEMA "{schema}" CASCADE')

    return make


def ingest(store: Store, size: int) -> float:
    start = time.perf_counter()
    add_in_batches(store, synthetic(size), BATCH)
    return time.perf_counter() - start


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def measure_hybrid(store: Store, size: int, runs: int) -> dict[str, float]:
    queries = [q for q in QUERIES if searchable(q)]
    start = time.perf_counter()
    SearchIndex(store, model=StaticModel.bundled).vectors(build(store))
    embed_s = time.perf_counter() - start
    # another process: reads the stored vectors; answers=0, so every search runs the engine (serve keeps the
    # answers to its latest searches, which would make repeats of this mix nearly free)
    index = SearchIndex(store, model=StaticModel.bundled, answers=0)
    snapshot = index.current()
    before = rss_mb()
    start = time.perf_counter()
    vectors = index.vectors(snapshot)
    load_s = time.perf_counter() - start
    assert vectors is not None
    added = rss_mb() - before
    every: list[float] = []
    for query in queries:
        every.extend(timings(lambda q=query: search.search(index, q, limit=10), runs, warmup=2))  # type: ignore[misc]
    nearest: list[float] = []  # the five related items of each of the newest RELATED_ITEMS
    for item in store.latest(RELATED_ITEMS):
        nearest.extend(timings(lambda i=item: related(index, i, 5), 1, warmup=0))  # type: ignore[misc]
    return {"embed_s": embed_s, "per_5000": embed_s * 5000 / size, "load_s": load_s, "p50": pct(every, 50),
            "p99": pct(every, 99), "vectors_mb": vectors.nbytes / 1e6, "rss_mb": added,
            "related_p99": pct(nearest, 99)}


def measure(make: Callable[[int], Any], size: int, runs: int) -> dict[str, float | str]:
    with make(size) as store:
        seconds = ingest(store, size)
        assert store.count_items() == size
        start = time.perf_counter()
        build(store)
        build_s = time.perf_counter() - start
        index = SearchIndex(store, answers=0)  # every search runs the engine (no kept answers)
        every: list[float] = []
        slowest, slowest_p99 = "", 0.0
        for query in [q for q in QUERIES if searchable(q)]:
            values = timings(lambda q=query: search.search(index, q, limit=10), runs, warmup=2)  # type: ignore[misc]
            every.extend(values)
            if pct(values, 99) > slowest_p99:
                slowest, slowest_p99 = query, pct(values, 99)
        # A poll elsewhere changes 10 items: the next search re-indexes them first (one sample).
        edited = [replace(item, title=item.title + " revised") for item in store.latest(10)]
        store.add_items(edited)
        start = time.perf_counter()
        search.search(index, "revised", limit=10)
        refresh_ms = (time.perf_counter() - start) * 1000
        hybrid = measure_hybrid(store, size, runs)
    return {
        **{f"hybrid_{k}": v for k, v in hybrid.items()},
        "refresh_ms": refresh_ms,
        "ingest_s": seconds,
        "rate": size / seconds,
        "build_s": build_s,
        "p50": pct(every, 50),
        "p99": pct(every, 99),
        "slowest": slowest,
        "slowest_p99": slowest_p99,
    }


TRENDING_ITEMS, SAVES, TEAMS, PER_PERSON, VOTES, OPENS_A_DAY = 20_000, 100_000, 10, 200, 300, 55
WORST_SAVES = 20  # calls after a save in the workspace of 100,000 saves in the window


def fill_trending(store: Store, now: datetime) -> None:
    """SAVES saves over two years in TEAMS workspaces (T00 holds 40%), T00's VOTES 👍 and Related counters
    (OPENS_A_DAY a day), and TWORST's 100,000 saves, all in the window (written in bulk, not by the store's
    calls, which take a transaction each)."""
    rng = random.Random(55)
    ids = [f"https://machinelearning.apple.com/research/synthetic-{i}" for i in range(TRENDING_ITEMS)]
    rest = SAVES * 6 // 10 // (TEAMS - 1)
    shares = {"T00": SAVES * 4 // 10, **{f"T{n:02d}": rest for n in range(1, TEAMS)}}
    rows: list[tuple[str, str, str, str]] = []
    for team, count, days in [*((t, c, 730) for t, c in shares.items()), ("TWORST", SAVES, 30)]:
        for person in range(count // PER_PERSON):
            for item in rng.sample(ids, PER_PERSON):
                ago = timedelta(seconds=rng.random() * days * 86400)
                rows.append((team, f"U{person:05d}", item, str(iso(now - ago))))
    shown = [rng.sample(ids, 5) for _ in range(VOTES)]
    votes = [("T00", "D0", f"{1700000000 + n}.000100", f"U{n % 500:05d}", "up", "{}",
              json.dumps([{"id": i, "title": "t", "link": i} for i in items]), "\n".join(items),
              iso(now - timedelta(seconds=rng.random() * 29 * 86400))) for n, items in enumerate(shown)]
    opens = {("T00", (now - timedelta(days=d)).date().isoformat(), rng.choice(ids)) for d in range(30)
             for _ in range(OPENS_A_DAY)}
    with store.connect() as db:
        db.execute("BEGIN")
        insert(db, "saved_items (team_id, user_id, item_id, saved_at)", rows)
        insert(db, "feedback (team_id, channel_id, message_ts, user_id, vote, understood, shown, item_ids, "
                   "voted_at)", votes)
        insert(db, "related_opens (team_id, day, item_id, opens)", [(*o, 1) for o in sorted(opens)])
        db.execute("COMMIT")
        # statistics, and PostgreSQL's visibility map (its index-only scans), as autovacuum leaves them
        db.execute("VACUUM ANALYZE" if store.backend == "postgres" else "ANALYZE")


def insert(db: Conn, into: str, rows: Sequence[Sequence[object]], chunk: int = 500) -> None:
    """`rows` inserted `chunk` a statement (the trending marks' triggers run once a statement on
    PostgreSQL: a statement a row, in one transaction, would stack a version of the mark's row for each)."""
    for start in range(0, len(rows), chunk):
        part = rows[start:start + chunk]
        values = ", ".join("(" + ", ".join("?" * len(row)) + ")" for row in part)
        db.execute(f"INSERT INTO {into} VALUES {values}", [v for row in part for v in row])


def after_saves(store: Store, team: str, now: datetime, runs: int) -> tuple[list[float], float]:
    """`trending` timed right after each of `runs` saves in `team` (so each reads the counts again, as the
    first call after any save, vote or open does), and this process's CPU time a call. The saves are made
    by the store's own call and not timed."""
    rng = random.Random(team)
    every, cpu = [], 0.0
    for n in range(runs):
        item = f"https://machinelearning.apple.com/research/synthetic-{rng.randrange(TRENDING_ITEMS)}"
        assert store.save_item(team, f"UBENCH{n:04d}", item) == "saved"
        start, began = time.perf_counter(), time.process_time()
        trending(store, team, now)
        every.append((time.perf_counter() - start) * 1000)
        cpu += time.process_time() - began
    return every, cpu * 1000 / runs


def measure_trending(make: Callable[[int], Any], runs: int) -> dict[str, float]:
    with make(TRENDING_ITEMS) as store:
        ingest(store, TRENDING_ITEMS)
        now = store.latest(1)[0].published + timedelta(days=1)
        fill_trending(store, now)
        store = store.thread_view()  # as serve's request threads read (one connection kept)
        start = time.perf_counter()
        report = trending(store, "T00", now)
        cold = (time.perf_counter() - start) * 1000
        assert report.saved and report.liked and report.opened and report.published
        cpu = time.process_time()
        every = timings(lambda: trending(store, "T00", now), runs, warmup=0)
        cpu_ms = (time.process_time() - cpu) * 1000 / runs
        fresh, fresh_cpu = after_saves(store, "T00", now, runs)
        worst = timings(lambda: trending(store, "TWORST", now), runs)
        worst_fresh, _cpu = after_saves(store, "TWORST", now, WORST_SAVES)
    return {"cold": cold, "p50": pct(every, 50), "p99": pct(every, 99), "cpu": cpu_ms,
            "new_p50": pct(fresh, 50), "new_p99": pct(fresh, 99), "new_cpu": fresh_cpu,
            "worst_p99": pct(worst, 99), "worst_new": pct(worst_fresh, 99), "month": report.published}


def print_trending(backends: list[tuple[str, Callable[[int], Any]]], runs: int) -> None:
    from benchmarks.bench_app import reference_loop_ms  # the machine's pace, as bench_app prints it

    reference = reference_loop_ms()
    print(f"what the team is reading ({TRENDING_ITEMS:,} items, {SAVES:,} saves; {runs} calls; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the start)")
    print(f"  {'backend':<9} {'month':>5} {'cold':>8} {'kept p50':>9} {'kept p99':>9} {'cpu':>8} "
          f"{'new p50':>9} {'new p99':>9} {'cpu':>8} {'worst kept p99':>15} {'worst new p99':>14}")
    print("  target: p99 < 10 ms; kept: nothing new since the last call, new: a save just before each call; "
          "cpu: this process's CPU time a call (the server's not counted)")
    for name, make in backends:
        r = measure_trending(make, runs)
        print(f"  {name:<9} {r['month']:>5.0f} {r['cold']:>5.1f} ms {r['p50']:>6.2f} ms {r['p99']:>6.2f} ms "
              f"{r['cpu']:>5.2f} ms {r['new_p50']:>6.2f} ms {r['new_p99']:>6.2f} ms {r['new_cpu']:>5.2f} ms "
              f"{r['worst_p99']:>12.2f} ms {r['worst_new']:>11.1f} ms", flush=True)
    end = reference_loop_ms()
    print(f"  machine: reference loop {reference:.0f} ms at the start, {end:.0f} ms at the end (best of 5); "
          f"load average {os.getloadavg()[0]:.1f} at the end")


def print_authors(rows: list[tuple[str, int, dict[str, float]]]) -> None:
    print(f"author matching (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end)")
    print(authors_load.HEADER)
    print(authors_load.TARGETS)
    for name, size, measured in rows:
        print(authors_load.row(name, size, measured))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer search runs; 20,000 items only")
    parser.add_argument("--sizes", help="comma-separated item counts (default 2000,20000,100000)")
    parser.add_argument("--trending", action="store_true", help="only what the team is reading (issue 55)")
    parser.add_argument("--authors", action="store_true",
                        help="only author matching (issue 55; at 20,000 items unless --sizes)")
    args = parser.parse_args()
    sizes = (
        [int(s) for s in args.sizes.split(",")]
        if args.sizes
        else [20_000]
        if args.quick
        else [2_000, 20_000, 100_000]
    )
    runs = 10 if args.quick else 40
    url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL")
    backends: list[tuple[str, Callable[[int], Any]]] = [("sqlite", sqlite_store)]
    if url:
        backends.append(("postgres", postgres_store(url)))
    print(
        f"mlresearch-bot store benchmark (python {sys.version.split()[0]}; search: {len(QUERIES)} queries "
        f"x {runs} runs, limit 10)"
    )
    if not url:
        print("  PostgreSQL not measured: set BENCH_DATABASE_URL or TEST_DATABASE_URL")
    if args.trending:
        print_trending(backends, 200)
        return
    if args.authors:
        from benchmarks.bench_app import reference_loop_ms

        reference = reference_loop_ms()
        print_authors([(name, size, authors_load.measure_authors(make, size, runs))
                       for size in ([int(s) for s in args.sizes.split(",")] if args.sizes else [20_000])
                       for name, make in backends])
        print(f"  machine: reference loop {reference:.0f} ms at the start, {reference_loop_ms():.0f} ms "
              "at the end (best of 5)")
        return
    header = (
        f"  {'backend':<9} {'items':>8} {'ingest':>9} {'items/s':>9} {'index':>7} {'search p50':>11} "
        f"{'search p99':>11} {'refresh':>9}  slowest query (p99)"
    )
    print(header)
    print("  targets: search p99 < 10 ms at 20,000 and < 50 ms at 100,000; index build < 2 s at 20,000")
    hybrid_rows, author_rows = [], []
    for size in sizes:
        for name, make in backends:
            author_rows.append((name, size, authors_load.measure_authors(make, size, runs)))
            r = measure(make, size, runs)
            print(
                f"  {name:<9} {size:>8,} {r['ingest_s']:>8.1f}s {r['rate']:>9,.0f} {r['build_s']:>6.2f}s "
                f"{r['p50']:>8.2f} ms {r['p99']:>8.2f} ms {r['refresh_ms']:>6.0f} ms  "
                f"{r['slowest']!r} ({r['slowest_p99']:.1f} ms)",
                flush=True,
            )
            hybrid_rows.append(
                f"  {name:<9} {size:>8,} {r['hybrid_embed_s']:>7.1f}s {r['hybrid_per_5000']:>8.1f}s "
                f"{r['hybrid_load_s']:>6.2f}s {r['hybrid_p50']:>8.2f} ms {r['hybrid_p99']:>8.2f} ms "
                f"{r['hybrid_vectors_mb']:>7.1f} MB {r['hybrid_rss_mb']:>6.1f} MB "
                f"{r['hybrid_related_p99']:>8.2f} ms"
            )
    print(f"search by meaning ({StaticModel.bundled().name})")
    print(f"  {'backend':<9} {'items':>8} {'embed':>8} {'per 5,000':>9} {'load':>7} {'hybrid p50':>11} "
          f"{'hybrid p99':>11} {'vectors':>10} {'rss':>9} {'related p99':>11}")
    print("  targets: embedding 5,000 items < 30 s; hybrid search p99 < 20 ms at 20,000")
    for row in hybrid_rows:
        print(row)
    print_authors(author_rows)
    print_trending(backends, 200)


if __name__ == "__main__":
    main()
