"""Author matching at archive scale, for bench_store.py (issue 55): what `follow author:"…"`, `subscribe
author:"…"`, `search author:"…"` and routing a new item to author follows cost on an archive of N items with
realistic authors.

An archive of N synthetic items (bench_ingest's text), each with 3 to 9 authors drawn from N/2 people, the
most published far more often than the rest (a Zipf-like weight); given names with accents, middle initials
and a few "Last, First" forms among them. Measured on a store of each backend:
- "names": the archive's author names (bot.search.authors.Directory) built from the index snapshot, once per
  change of the archive (the first author question after a poll pays it);
- "resolve": one typed name against the archive, as follow and subscribe do it (`author_follows.resolve`:
  the people it matches, or a "did you mean", and the count a reply shows), over a mix of full names,
  initials, lower case without accents, surnames alone (common and rare), misspellings and names no one has;
- "search": `search author:"…"` over the same names, through the engine (the change-marker query included);
- "route": a poll's 20 new items matched against 1,000 people following an author each, in one call as a
  poll makes it (`Router.by_authors`: the author part of routing; the keyword part is no author's).
Target: author matching p99 < 10 ms at 20,000 items (resolve and route; search's own target is bench_store's).
"full gc": CPython's full (generation 2) garbage collections during the measuring, and the longest: each
walks every object the process holds, in whichever call allocates when one falls due.
"""

from __future__ import annotations

import gc
import random
import time
import unicodedata
from collections.abc import Callable, Iterator
from itertools import accumulate
from typing import Any

from msgspec.structs import replace

from benchmarks.bench_ingest import add_in_batches, pct, synthetic
from bot.author_follows import resolve
from bot.models import Audience, Item
from bot.route import Router
from bot.search import query as search
from bot.search.authors import typed
from bot.search.engine import authors_of
from bot.search.index import SearchIndex
from bot.store import Store

GIVEN = ["Awni", "Chloé", "José", "Łukasz", "Yizhe", "Jiarui", "Pavan", "Hadi", "Fartash", "Oncel", "Albert",
         "Mehrdad", "Siyong", "Puja", "Sofia", "Qifeng", "Humeyra", "An", "Navdeep", "Samy", "Ruslan",
         "Jaeyoung", "Björn", "Zoë", "François", "Søren", "Marta", "Ines", "Ravi", "Mei", "Tatiana", "Omar"]
SYLLABLES = ["ha", "nun", "zhang", "lu", "va", "su", "pou", "ran", "far", "tash", "tu", "zel", "an", "to",
             "ny", "ma", "das", "ko", "la", "ki", "chen", "top", "cu", "al", "tin", "ta", "ji", "li", "wang",
             "kim", "ber", "gio", "no", "vic"]
BATCH = 5_000
ROUTE_FOLLOWS = 1_000


def people(n: int, seed: int = 11) -> list[str]:
    """`n` author names: a given name (or its initial), a middle initial now and then, a surname."""
    rng = random.Random(seed)
    names = []
    for _ in range(n):
        surname = "".join(rng.choices(SYLLABLES, k=rng.randint(2, 3))).capitalize()
        given = rng.choice(GIVEN)
        middle = f" {rng.choice('ABCDEFGHJKLMNPRSTWY')}." if rng.random() < 0.25 else ""
        names.append(f"{given}{middle} {surname}" if rng.random() < 0.97 else f"{surname}, {given}")
    return names


def with_authors(n: int, seed: int = 13) -> Iterator[Item]:
    """bench_ingest's synthetic items, each with 3 to 9 authors of n/2 people (Zipf-like popularity)."""
    rng = random.Random(seed)
    pool = people(max(n // 2, 10))
    weights = list(accumulate(1 / (rank + 1) ** 0.8 for rank in range(len(pool))))
    for item in synthetic(n):
        authors = tuple(dict.fromkeys(rng.choices(pool, cum_weights=weights, k=rng.randint(3, 9))))
        yield replace(item, authors=authors)


def names_to_try(pool: list[str], seed: int = 17) -> list[str]:
    """The typed names measured: known people in several forms, surnames alone, misspellings, strangers."""
    rng = random.Random(seed)
    known = [typed(name) for name in pool[:5] + rng.sample(pool, 15)]  # the most published, and others
    plain = "".join(c for c in unicodedata.normalize("NFKD", known[0].name) if not unicodedata.combining(c))
    tried = [name.name for name in known]
    tried += [f"{name.name.split()[0][0]}. {name.name.split()[-1]}" for name in known[:10]]  # initials
    tried += [plain.lower(), known[1].name.upper()]
    tried += [name.name.split()[-1] for name in known[:10]]  # surnames alone
    tried += [name.name[:-2] + name.name[-1] + name.name[-2] for name in known[:10]]  # a typo
    tried += ["Zygmunt Quorravelt", "Nobody Atall", "Q. Xyzzy"]
    return tried


def fill(store: Store, size: int) -> list[str]:
    """Stores `size` items with authors; the people they were drawn from."""
    add_in_batches(store, with_authors(size), BATCH)
    return people(max(size // 2, 10))


def clocked(fn: Callable[[], object], runs: int, warmup: int = 1) -> tuple[list[float], list[float]]:
    """`fn`'s wall times and this thread's CPU times, in ms: on a shared machine the CPU time is what the
    code costs, the wall time what a person would wait there."""
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(runs):
        start, started = time.perf_counter(), time.thread_time()
        fn()
        cpu.append((time.thread_time() - started) * 1000)
        wall.append((time.perf_counter() - start) * 1000)
    return wall, cpu


class FullCollections:
    """The full (generation 2) garbage collections made while in the block: their durations, in ms."""

    def __init__(self) -> None:
        self.took: list[float] = []
        self._start = 0.0

    def __enter__(self) -> FullCollections:
        gc.callbacks.append(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.took.append((time.perf_counter() - self._start) * 1000)


def measure_authors(make: Callable[[int], Any], size: int, runs: int) -> dict[str, float]:
    with make(size) as store:
        pool = fill(store, size)
        index = SearchIndex(store, answers=0)  # every search runs the engine
        snapshot = index.current()
        start = time.perf_counter()
        directory = authors_of(snapshot)
        names_ms = (time.perf_counter() - start) * 1000
        tried = names_to_try(pool)

        def resolved(name: str) -> None:
            done = resolve([typed(name)], authors_of(index.current(store)))
            for keyword in done.keywords:
                directory.count(typed(keyword.split(":", 1)[1]))

        kinds = ("resolve", "search", "route")
        taken: dict[str, tuple[list[float], list[float]]] = {kind: ([], []) for kind in kinds}

        def add(kind: str, measured: tuple[list[float], list[float]]) -> None:
            taken[kind][0].extend(measured[0])
            taken[kind][1].extend(measured[1])

        follows = tuple(("T1", f"U{n}", (f"author:{typed(name).name}",))
                        for n, name in enumerate(pool[:ROUTE_FOLLOWS]))
        audience = Audience((), follows)
        router = Router()
        new = list(with_authors(20, seed=99))
        with FullCollections() as collections:
            for name in tried:
                add("resolve", clocked(lambda n=name: resolved(n), runs))  # type: ignore[misc]
                add("search", clocked(lambda n=name: search.search(index, f'author:"{n}"', limit=10), runs))  # type: ignore[misc]
            add("route", clocked(lambda: router.by_authors(new, audience), runs * 10))
    took = collections.took
    found: dict[str, float] = {"names_ms": names_ms, "people": len(directory.names), "full_gc": len(took),
                               "full_gc_ms": max(took, default=0)}
    for kind, (wall, cpu) in taken.items():
        found |= {f"{kind}_p50": pct(wall, 50), f"{kind}_p99": pct(wall, 99), f"{kind}_cpu_p99": pct(cpu, 99)}
    return found


HEADER = (f"  {'backend':<9} {'items':>8} {'names':>8} {'built':>8} {'resolve p50':>12} {'p99 (cpu)':>17} "
          f"{'search p50':>11} {'p99 (cpu)':>17} {'route p99 (cpu)':>18} {'full gc (longest)':>18}")
TARGETS = ("  targets: author matching (resolve, route) p99 < 10 ms at 20,000 items; route: a poll of 20 new "
           f"items, {ROUTE_FOLLOWS:,} author follows; (cpu): this thread's CPU time, p99")


def row(name: str, size: int, r: dict[str, float]) -> str:
    return (f"  {name:<9} {size:>8,} {int(r['people']):>8,} {r['names_ms']:>6.0f} ms "
            f"{r['resolve_p50']:>9.2f} ms {r['resolve_p99']:>7.2f} ms ({r['resolve_cpu_p99']:>5.2f}) "
            f"{r['search_p50']:>8.2f} ms {r['search_p99']:>7.2f} ms ({r['search_cpu_p99']:>5.2f}) "
            f"{r['route_p99']:>8.2f} ms ({r['route_cpu_p99']:>5.2f}) "
            f"{int(r['full_gc']):>3}, {r['full_gc_ms']:>4.0f} ms")
