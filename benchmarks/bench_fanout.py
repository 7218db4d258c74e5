"""Fan-out benchmark: one new item to N channels through a local Slack stand-in with a fixed latency per call.

    .venv/bin/python benchmarks/bench_fanout.py [--channels 200] [--latency 0.05] [--pool 8] [--runs 3]

Prints the time to deliver (median of --runs, one new item each), the ideal (channels x latency / pool size),
their ratio (target: within 1.5x) and the number of duplicate or missing posts (target: 0). The stand-in runs
in its own process, as Slack would.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.deliver import DEFAULT_POOL_SIZE, Deliverer  # noqa: E402
from bot.feed import parse  # noqa: E402
from bot.models import Item, Validators  # noqa: E402
from bot.slackweb import make_client  # noqa: E402
from bot.store import SQLiteStore  # noqa: E402
from tests.fakes.slack_api import FakeSlack  # noqa: E402

FEED = "https://machinelearning.apple.com/rss.xml"
DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "apple_ml_rss.xml"


def serve_slack(latency: float, conn: Connection) -> None:
    """The Slack stand-in, in its own process as Slack would be: sends its URL, then the post counts."""
    with FakeSlack(latency=latency) as slack:
        conn.send(slack.url)
        conn.recv()
        conn.send(dict(slack.item_posts()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per Slack call")
    parser.add_argument("--pool", type=int, default=DEFAULT_POOL_SIZE)
    parser.add_argument("--runs", type=int, default=3, help="one new item per run; the median is reported")
    args = parser.parse_args()

    ours, theirs = multiprocessing.Pipe()
    slack = multiprocessing.get_context("spawn").Process(target=serve_slack, args=(args.latency, theirs))
    slack.start()
    slack_url = ours.recv()
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.db")
        store.migrate()
        known = parse(DATA.read_bytes())
        store.ingest(FEED, known, Validators())
        channels = [f"C{n:04d}" for n in range(args.channels)]
        for channel in channels:
            store.subscribe("T0001", channel, "U1")
        client = make_client("xoxb-bench", slack_url)
        deliver = Deliverer(lambda team_id: client, pool_size=args.pool)
        items, times, delivered, failed = [], [], 0, 0
        for run in range(args.runs):
            link = f"https://machinelearning.apple.com/research/benchmark-item-{run}"
            items.append(Item(id=link, guid=link, title=f"A new paper {run}", link=link,
                              summary="About it. " * 40, published=datetime.now(UTC), kind="research"))
            known.append(items[-1])
            store.ingest(FEED, known, Validators())
            started = time.perf_counter()
            report = deliver(store)
            times.append(time.perf_counter() - started)
            delivered, failed = delivered + report.delivered, failed + report.failed
    ours.send("counts")
    counts = ours.recv()
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


if __name__ == "__main__":
    main()
