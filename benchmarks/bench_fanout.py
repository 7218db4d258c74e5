"""Fan-out benchmark: one new item to N channels through a local Slack stand-in with a fixed latency per call,
then a burst: one poll bringing --burst items to the same channels.

    .venv/bin/python benchmarks/bench_fanout.py [--channels 200] [--latency 0.05] [--pool 8] [--runs 3]
                                                [--burst 40] [--pace 1.0]

Prints the time to deliver (median of --runs, one new item each), the ideal (channels x latency / pool size),
their ratio (target: within 1.5x) and the number of duplicate or missing posts (target: 0). For the burst
(skipped with --burst 0): the messages sent (one top-level message per channel and each item in its thread),
the time, and the ideal: the messages x latency / pool size, or the pacing of one channel's messages (one per
--pace seconds) if that is longer. The stand-in runs in its own process, as Slack would.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.config import DEFAULT_BURST_THRESHOLD  # noqa: E402
from bot.deliver import DEFAULT_PACE, DEFAULT_POOL_SIZE, Deliverer  # noqa: E402
from bot.feed import parse  # noqa: E402
from bot.models import Item, Validators  # noqa: E402
from bot.route import ingest
from bot.slackweb import make_client  # noqa: E402
from bot.store import SQLiteStore  # noqa: E402
from tests.fakes.slack_api import FakeSlack  # noqa: E402

FEED = "https://machinelearning.apple.com/rss.xml"
DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "apple_ml_rss.xml"


def serve_slack(latency: float, conn: Connection) -> None:
    """The Slack stand-in, in its own process as Slack would be: sends its URL, then, at each request, the
    post counts so far: item posts by (channel, item), bursts' messages by channel, and posts in all."""
    with FakeSlack(latency=latency) as slack:
        conn.send(slack.url)
        while conn.recv() == "counts":
            bursts = Counter(m["channel"] for m in slack.batch_posts())
            conn.send((dict(slack.item_posts()), dict(bursts), len(slack.posts())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per Slack call")
    parser.add_argument("--pool", type=int, default=DEFAULT_POOL_SIZE)
    parser.add_argument("--runs", type=int, default=3, help="one new item per run; the median is reported")
    parser.add_argument("--burst", type=int, default=40, help="items in the burst (0: no burst)")
    parser.add_argument("--pace", type=float, default=DEFAULT_PACE, help="seconds between posts to a channel")
    args = parser.parse_args()

    ours, theirs = multiprocessing.Pipe()
    slack = multiprocessing.get_context("spawn").Process(target=serve_slack, args=(args.latency, theirs))
    slack.start()
    slack_url = ours.recv()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        store.migrate()
        known = parse(DATA.read_bytes())
        ingest(store, FEED, known, Validators())
        channels = [f"C{n:04d}" for n in range(args.channels)]
        for channel in channels:
            store.subscribe("T0001", channel, "U1")
        client = make_client("xoxb-bench", slack_url)
        deliver = Deliverer(lambda team_id: client, pool_size=args.pool, pace=args.pace,
                            burst_threshold=DEFAULT_BURST_THRESHOLD)
        items, times, delivered, failed = [], [], 0, 0
        for run in range(args.runs):
            link = f"https://machinelearning.apple.com/research/benchmark-item-{run}"
            items.append(Item(id=link, guid=link, title=f"A new paper {run}", link=link,
                              summary="About it. " * 40, published=datetime.now(UTC), kind="research"))
            known.append(items[-1])
            ingest(store, FEED, known, Validators())
            started = time.perf_counter()
            report = deliver(store)
            times.append(time.perf_counter() - started)
            delivered, failed = delivered + report.delivered, failed + report.failed
        ours.send("counts")
        counts, _, posts_before = ours.recv()
        burst: list[Item] = []
        if args.burst:
            for n in range(args.burst):
                link = f"https://machinelearning.apple.com/research/benchmark-burst-{n}"
                burst.append(Item(id=link, guid=link, title=f"A paper of the burst {n}", link=link,
                                  summary="About it. " * 40, published=datetime.now(UTC), kind="research"))
            ingest(store, FEED, [*known, *burst], Validators())
            started = time.perf_counter()
            burst_report = deliver(store)
            burst_time = time.perf_counter() - started
            ours.send("counts")
            burst_counts, bursts, posts_after = ours.recv()
    ours.send("stop")
    slack.join()

    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = sum(1 for c in channels for i in items if counts.get((c, i.id), 0) == 0)
    ideal = args.channels * args.latency / args.pool
    elapsed = statistics.median(times)
    print(f"one item to {args.channels} channels, {args.latency * 1000:.0f} ms per Slack call, "
          f"pool size {args.pool}, {args.runs} runs (delivered {delivered}, failed {failed})")
    print(f"elapsed:    {elapsed:.3f} s median (runs: {', '.join(f'{t:.3f}' for t in times)})")
    print(f"ideal:      {ideal:.3f} s ({args.channels} x {args.latency * 1000:.0f} ms / {args.pool})")
    print(f"ratio:      {elapsed / ideal:.2f}x ideal (target <= 1.5x)")
    print(f"duplicates: {duplicates}")
    print(f"missing:    {missing}")
    if not args.burst:
        return

    sent = posts_after - posts_before
    expected = args.channels * (args.burst + 1)
    duplicates = sum(n - 1 for (c, i), n in burst_counts.items() if n > 1) + sum(
        n - 1 for n in bursts.values() if n > 1)
    missing = sum(1 for c in channels for i in burst if burst_counts.get((c, i.id), 0) == 0) + sum(
        1 for c in channels if not bursts.get(c))
    by_calls = expected * args.latency / args.pool
    by_pace = args.burst * args.pace
    ideal = max(by_calls, by_pace)
    print()
    print(f"a burst of {args.burst} items to {args.channels} channels (delivered {burst_report.delivered}, "
          f"failed {burst_report.failed})")
    print(f"messages:   {sent} sent ({expected} expected: one message per channel, each item in its thread)")
    print(f"elapsed:    {burst_time:.3f} s")
    print(f"ideal:      {ideal:.3f} s (the longer of {expected} x {args.latency * 1000:.0f} ms / {args.pool} "
          f"= {by_calls:.3f} s and {args.burst} x {args.pace:g} s pacing per channel = {by_pace:.3f} s)")
    print(f"ratio:      {burst_time / ideal:.2f}x ideal (target <= 1.5x)")
    print(f"duplicates: {duplicates}")
    print(f"missing:    {missing}")


if __name__ == "__main__":
    main()
