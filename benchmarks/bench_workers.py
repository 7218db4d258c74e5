"""Worker processes benchmark (issue 22): `mlresearch-bot worker` processes (the real CLI) deliver over one
PostgreSQL database through a local Slack stand-in with a fixed latency per call, per-channel pacing checked
and a per-workspace rate limit answered with HTTP 429 (Retry-After: 1).

    TEST_DATABASE_URL=postgresql://postgres@127.0.0.1:5432/test \\
    .venv/bin/python benchmarks/bench_workers.py [--channels 2000] [--workspaces 200] [--burst 40]
        [--burst-channels 200] [--workers 1,2,4] [--latency 0.05] [--workspace-limit 20] [--lease 5]

Cases: one new item to --channels channels spread over --workspaces workspaces; a burst of --burst items to
--burst-channels channels (one burst message each, every item in its thread: --burst + 1 messages a channel,
paced one a second). Each with 1, 2 and 4 workers, then once more with the most workers and one of them
SIGKILLed when 40% of the messages are out (its channels wait for WORKER_LEASE=--lease seconds, then another
worker reconciles them). Workers start first and idle; the clock runs from the commit of the ingest that
queues the rows to the last message. The ideal of a run: the longest of (messages x latency / (pool x
workers)), (one channel's messages x 1 s pacing) and (one workspace's messages / --workspace-limit a second).
Each run gets a fresh schema of TEST_DATABASE_URL's database, dropped after.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bot.config import DEFAULT_BURST_THRESHOLD  # noqa: E402
from bot.deliver import DEFAULT_POOL_SIZE  # noqa: E402
from bot.feed import parse  # noqa: E402
from bot.models import Item, Validators  # noqa: E402
from bot.route import ingest  # noqa: E402
from bot.store import open_store  # noqa: E402
from tests.fakes.slack_api import Call, FakeSlack, Fault  # noqa: E402

FEED = "https://machinelearning.apple.com/rss.xml"
DATA = ROOT / "tests" / "data" / "apple_ml_rss.xml"
BATCH_EVENT = "mlresearch_batch"


def team_of(channel: str) -> str:
    return f"T{channel[-5:-2]}"


class WorkspaceLimit(Fault):
    """Answers a post with 429 (Retry-After: 1) when its workspace had `limit` posts in the last second."""

    def __init__(self, limit: int) -> None:
        super().__init__("chat.postMessage", status=429, retry_after=1, times=None)
        self.limit = limit
        self.recent: dict[str, deque[float]] = defaultdict(deque)
        self.answered = 0

    def matches(self, call: Call) -> bool:
        if call.method != "chat.postMessage" or not call.channel:
            return False
        window = self.recent[team_of(call.channel)]
        while window and window[0] < call.at - 1.0:
            window.popleft()
        if len(window) >= self.limit:
            self.answered += 1
            return True
        window.append(call.at)
        return False


def serve_slack(latency: float, limit: int, conn: Connection) -> None:
    """The stand-in, in its own process as Slack would be: sends its URL, then answers "counts" with what it
    saw (posts by (channel, item), bursts by channel, messages, 429s, pacing violations) and "reset"."""
    with FakeSlack(latency=latency) as slack:
        fault = WorkspaceLimit(limit)
        slack.faults.append(fault)
        conn.send(slack.url)
        while (what := conn.recv()) != "stop":
            if what == "n":  # cheap, asked every 50 ms while a run goes on: messages posted so far
                with slack._cond:
                    conn.send(sum(len(found) for found in slack.messages.values()))
                continue
            if what == "cpu":
                times = os.times()
                conn.send(times.user + times.system)
                continue
            if what == "reset":
                with slack._cond:
                    slack.calls.clear()
                    slack.messages.clear()
                    fault.recent.clear()
                    fault.answered = 0
                conn.send("ok")
                continue
            items = Counter()
            bursts = Counter()
            for message in slack.posts():
                meta = message.get("metadata") or {}
                if meta.get("event_type") == BATCH_EVENT:
                    bursts[message["channel"]] += 1
                else:
                    items[(message["channel"], str((meta.get("event_payload") or {}).get("item_id")))] += 1
            at: dict[str, list[float]] = defaultdict(list)
            for call in slack.calls_to("chat.postMessage"):
                if call.status == 200 and call.channel:
                    at[call.channel].append(call.at)
            violations = sum(1 for times in at.values() for a, b in zip(times, times[1:], strict=False)
                             if b - a < 0.9)
            conn.send((dict(items), dict(bursts), sum(items.values()) + sum(bursts.values()), fault.answered,
                       violations))


@dataclass
class Result:
    case: str
    workers: int
    killed: bool
    messages: int
    expected: int
    elapsed: float
    ideal: float
    duplicates: int
    missing: int
    limited: int
    violations: int
    cpu: dict[str, float]


def schema_url(base: str) -> tuple[str, str]:
    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    return schema, f"{base}{sep}options=-csearch_path%3D{schema}"


def drop_schema(base: str, schema: str) -> None:
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def channel_ids(count: int, workspaces: int, rng: random.Random) -> list[str]:
    """Slack-like channel IDs (random, so claims by ID spread over workspaces); the workspace in the tail."""
    return [f"C{rng.getrandbits(24):06X}{n % workspaces:03d}{n // workspaces % 100:02d}"
            for n in range(count)]


def run_case(args: argparse.Namespace, slack: Connection, slack_url: str, case: str, channels: list[str],
             items: int, workers: int, kill: bool) -> Result:
    schema, url = schema_url(args.database)
    try:
        store = open_store(url)
        store.migrate()
        known = parse(DATA.read_bytes())
        ingest(store, FEED, known, Validators())
        for channel in channels:
            store.subscribe(team_of(channel), channel, "U1")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "DATABASE_URL"))}
        env.update(DATABASE_URL=url, SLACK_BOT_TOKEN="xoxb-bench", SLACK_API_URL=slack_url,
                   LOG_LEVEL="WARNING",
                   BURST_THRESHOLD=str(DEFAULT_BURST_THRESHOLD), WORKER_LEASE=str(args.lease),
                   FEED_URL=FEED)
        slack.send("reset")
        slack.recv()
        procs = [subprocess.Popen([sys.executable, "-m", "bot", "worker"], env=env, cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for _ in range(workers)]
        deadline = time.monotonic() + 60
        while len(store.live_workers(time.time(), 60)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        stamp = uuid.uuid4().hex[:6]
        links = [f"https://machinelearning.apple.com/research/{stamp}-{n}" for n in range(items)]
        new = [Item(id=link, guid=link, title=f"A new paper {n}", link=link, summary="About it. " * 40,
                    published=datetime.now(UTC), kind="research") for n, link in enumerate(links)]
        per_channel = items + 1 if items > DEFAULT_BURST_THRESHOLD else items
        expected = len(channels) * per_channel
        slack.send("cpu")
        slack_cpu = slack.recv()
        pg_cpu = postgres_cpu()
        worker_cpu = sum(process_cpu(proc.pid) for proc in procs)
        started = time.perf_counter()
        ingest(store, FEED, [*known, *new], Validators())
        victim = procs[0] if kill else None
        victim_cpu = 0.0
        messages = 0
        end = time.monotonic() + 600
        while time.monotonic() < end:
            slack.send("n")
            messages = slack.recv()
            if victim is not None and messages >= 0.4 * expected:
                victim_cpu = process_cpu(victim.pid)
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                victim = None
            if messages >= expected:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        slack.send("cpu")
        slack_cpu = slack.recv() - slack_cpu
        pg_cpu = postgres_cpu() - pg_cpu
        worker_cpu = sum(process_cpu(p.pid) for p in procs if p.poll() is None) - worker_cpu + victim_cpu
        time.sleep(1.0)  # anything posted twice would show now
        slack.send("counts")
        counts, bursts, messages, limited, violations = slack.recv()
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=40)
        store.close()
    finally:
        drop_schema(args.database, schema)
    duplicates = sum(n - 1 for n in counts.values() if n > 1) + sum(n - 1 for n in bursts.values() if n > 1)
    missing = sum(1 for c in channels for i in new if counts.get((c, i.id), 0) == 0)
    if per_channel > items:
        missing += sum(1 for c in channels if not bursts.get(c))
    by_calls = expected * args.latency / (DEFAULT_POOL_SIZE * workers)
    by_pace = (per_channel - 1) * 1.0
    per_workspace = Counter(team_of(c) for c in channels).most_common(1)[0][1] * per_channel
    by_limit = per_workspace / args.workspace_limit
    cpu = {"workers": worker_cpu, "slack": slack_cpu, "postgres": pg_cpu}
    return Result(case, workers, kill, messages, expected, elapsed, max(by_calls, by_pace, by_limit),
                  duplicates, missing, limited, violations, cpu)


def process_cpu(pid: int) -> float:
    """CPU seconds a process has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu() -> float:
    """CPU seconds used so far by every postgres process on this machine (other users' sessions too)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "comm").read_text().strip() in ("postgres", "postmaster"):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", default=os.environ.get("TEST_DATABASE_URL", ""))
    parser.add_argument("--channels", type=int, default=2000)
    parser.add_argument("--workspaces", type=int, default=200)
    parser.add_argument("--burst", type=int, default=40)
    parser.add_argument("--burst-channels", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per Slack call")
    parser.add_argument("--workspace-limit", type=int, default=20, help="posts a second before a 429")
    parser.add_argument("--lease", type=int, default=5, help="WORKER_LEASE of the workers (seconds)")
    args = parser.parse_args()
    if not args.database.startswith(("postgres://", "postgresql://")):
        parser.error("PostgreSQL needed: --database or TEST_DATABASE_URL")
    counts = [int(n) for n in args.workers.split(",")]
    rng = random.Random(22)

    ours, theirs = multiprocessing.Pipe()
    slack = multiprocessing.get_context("spawn").Process(target=serve_slack,
                                                         args=(args.latency, args.workspace_limit, theirs))
    slack.start()
    slack_url = ours.recv()
    results: list[Result] = []
    cases = [("fan-out", channel_ids(args.channels, args.workspaces, rng), 1)]
    if args.burst:
        burst_ws = max(1, args.burst_channels // 10)
        cases.append(("burst", channel_ids(args.burst_channels, burst_ws, rng), args.burst))
    try:
        for name, channels, items in cases:
            for n in counts:
                results.append(run_case(args, ours, slack_url, name, channels, items, n, False))
                print_row(results[-1], results)
            if max(counts) > 1:
                results.append(run_case(args, ours, slack_url, name, channels, items, max(counts), True))
                print_row(results[-1], results)
    finally:
        ours.send("stop")
        slack.join()


HEADER = False


def print_row(r: Result, results: list[Result]) -> None:
    global HEADER
    if not HEADER:
        print(f"{'case':<9} {'workers':>7} {'messages':>9} {'elapsed':>9} {'ideal':>8} {'ratio':>6} "
              f"{'vs 1':>6} {'dup':>4} {'miss':>5} {'429s':>5} {'pace<0.9s':>9}  CPU ms/message: workers, "
              "Slack stand-in, postgres (cores busy); load average")
        HEADER = True
    one = next((x for x in results if x.case == r.case and x.workers == 1 and not x.killed), None)
    speedup = f"{one.elapsed / r.elapsed:.2f}x" if one is not None else "-"
    workers = f"{r.workers}{' (1 killed)' if r.killed else ''}"
    print(f"{r.case:<9} {workers:>7} {r.messages:>5}/{r.expected:<5} {r.elapsed:>8.2f}s {r.ideal:>7.2f}s "
          f"{r.elapsed / r.ideal:>5.2f}x {speedup:>6} {r.duplicates:>4} {r.missing:>5} {r.limited:>5} "
          f"{r.violations:>9}  {per(r, 'workers')}, {per(r, 'slack')}, {per(r, 'postgres')} "
          f"({sum(r.cpu.values()) / r.elapsed:.2f}); {os.getloadavg()[0]:.1f}", flush=True)


def per(r: Result, part: str) -> str:
    return f"{r.cpu[part] * 1000 / max(1, r.messages):.2f}"


if __name__ == "__main__":
    main()
