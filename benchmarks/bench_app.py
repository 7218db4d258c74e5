"""Benchmark of `mlresearch-bot serve` (waitress + Bolt's WSGI adapter), run as a real subprocess.

1. Cold start: from spawning `python -m bot serve` (its package byte-compiled, as an install leaves it) to the
   first 200 on /healthz, median of 5, beside a bare Bolt app that only acks, served the same way (waitress +
   SlackRequestHandler, /healthz answered by WSGI).
2. `/mlresearch search …` round trips, signed as Slack signs them, from 20 concurrent clients over an archive
   of 20,000 synthetic items: p50 / p99. Three mixes: searches each the first of its words (no misspelling
   correction cached yet), searches for recurring topics (a team searches the same few dozen topics over and
   over), and a worst case where most queries match most items.
   Beside each: the serve process's CPU time per request. And the CPU time of one such search handled in
   process (commands.handle, no Bolt or HTTP), each the first of its words. And, as the floor the stack
   itself sets, the bare Bolt app (below) under the first-words load: it only acks, so its p99 and CPU are
   what waitress, Bolt and this harness's clients cost before any search.
3. Peak RSS (VmHWM) of the serve process after that load (its search index holds the whole archive).
4. With a PostgreSQL URL (BENCH_DATABASE_URL, or TEST_DATABASE_URL), steps 2 and 3 again for the realistic
   archive on PostgreSQL (a fresh schema, dropped afterwards), as a Heroku install runs; without one only
   SQLite is measured, and the output says so.

5. `--agent`: a question in the Messages tab (a DM event, signed) answered by a model endpoint stand-in that
   streams at a realistic pace (the first token after MODEL_FIRST_TOKEN s, then MODEL_CHARS characters every
   MODEL_PACE s: ~50 tokens/s): the time from the event to the first streamed characters (chat.startStream,
   the answer's header), to the first sentence the model wrote (chat.appendStream), and to the finished answer
   (chat.stopStream), median and worst of AGENT_RUNS, over a realistic archive of AGENT_ITEMS on SQLite.
   Only this step runs with `--agent`.

Targets: cold start < 1.5 s and < 1.5x bare Bolt; search p99 < 100 ms in every mix; peak RSS < 150 MB; a
first-of-its-words search <= 5 ms of CPU in process.
Run: python benchmarks/bench_app.py [--quick] [--agent]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ITEMS = 20_000  # the archive searched (issue 12's size for the index's memory)
sys.path.insert(0, str(ROOT))

from benchmarks.bench_store import postgres_store  # noqa: E402
from bot.models import Item  # noqa: E402
from bot.store import SQLiteStore  # noqa: E402
from tests.fakes.openai_api import FakeOpenAI  # noqa: E402
from tests.fakes.slack_api import FakeSlack  # noqa: E402
from tests.fakes.slack_sender import (  # noqa: E402
    SECRET,
    TOKEN,
    ServeProcess,
    clean_env,
    command_body,
    free_port,
    http,
    signed_headers,
)

WORDS = [
    "model", "learning", "language", "vision", "diffusion", "captioning", "image", "video", "speech", "audio",
    "retrieval", "transformer", "attention", "privacy", "federated", "differential", "robust", "alignment",
    "reward", "policy", "agent", "planning", "reasoning", "benchmark", "dataset", "multimodal", "encoder",
    "token", "compression", "quantization", "sparse", "efficient", "inference", "training", "scaling",
    "generative", "gaussian", "geometry", "reconstruction", "depth", "segmentation", "detection", "tracking",
    "assistant", "memory", "context", "dialogue", "ranking", "graph", "kernel", "optimization", "stochastic",
    "calibration", "uncertainty", "simulation", "bayesian", "causal", "fairness", "embedding", "on-device",
]
QUERIES = ["diffusion", "speech recognition", "privacy federated", "vision transformer", "token compression",
           "reasoning benchmark", "on-device model", "gaussian", "robust alignment", "learn"]

BARE_BOLT = textwrap.dedent("""
    import os, sys
    from slack_bolt import App
    from slack_bolt.adapter.wsgi import SlackRequestHandler
    from slack_sdk import WebClient
    from waitress import serve

    app = App(client=WebClient(token=os.environ["SLACK_BOT_TOKEN"], base_url=os.environ["SLACK_API_URL"]),
              signing_secret=os.environ["SLACK_SIGNING_SECRET"], token_verification_enabled=False,
              process_before_response=True)

    @app.command("/mlresearch")
    def command(ack):
        ack(response_type="ephemeral", text="ok")

    slack = SlackRequestHandler(app)

    def wsgi(environ, start_response):
        if environ["PATH_INFO"] == "/healthz":
            start_response("200 OK", [("Content-Type", "application/json")])
            return [b'{"status": "ok"}']
        return slack(environ, start_response)

    serve(wsgi, host="127.0.0.1", port=int(os.environ["PORT"]), threads=2)  # serve's HTTP_THREADS
""")


def synthetic_items(n: int, seed: int = 7, *, dense: bool = False) -> list[Item]:
    """`n` made-up research items. Realistic by default: abstracts of 60-120 words drawn (Zipf-like) from a
    4,000-word vocabulary, each item about 2-4 of the topic words, so a topic matches a few percent of the
    archive. `dense=True` is the worst case: every word a topic word, so most queries match most items."""
    rng = random.Random(seed)
    filler = filler_words(rng)
    weights = [1 / (rank + 1) for rank in range(len(filler))]
    start = datetime(2017, 7, 1, tzinfo=UTC)
    items = []
    for i in range(n):
        if dense:
            title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))).capitalize()
            summary = ". ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16)))
                                for _ in range(rng.randint(3, 8))) + "."
        else:
            topics = rng.sample(WORDS, rng.randint(2, 4))
            words = rng.choices(filler, weights, k=rng.randint(60, 120)) + topics
            rng.shuffle(words)
            title = " ".join(topics + rng.choices(filler, weights, k=rng.randint(2, 6))).capitalize()
            summary = ". ".join(" ".join(words[j : j + 12]) for j in range(0, len(words), 12)) + "."
        link = f"https://machinelearning.apple.com/research/synthetic-{i}"
        items.append(Item(id=link, guid=f"synthetic-{i}", title=title, link=link, summary=summary,
                          published=start + timedelta(hours=6 * i), kind="research"))
    return items


def filler_words(rng: random.Random) -> list[str]:
    """The 4,000 made-up words of synthetic abstracts (the first draws of `rng`)."""
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "de", "gu", "ri", "no", "ta"]
    words = {"".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(6000)}
    return sorted(words)[:4000]


def new_queries(count: int, seed: int = 7) -> list[str]:
    """`count` searches of two words of the synthetic abstracts each, no word in two of them (nor in
    QUERIES): each is the first search of its words, so nothing about them is held in memory yet."""
    words = filler_words(random.Random(seed))
    random.Random(seed + 1).shuffle(words)
    return [f"search {words[2 * i]} {words[2 * i + 1]}" for i in range(count)]


def time_to_healthz(argv: list[str], env: dict[str, str], cwd: Path, port: int) -> tuple[float, float]:
    """Seconds from spawn to the first 200 on /healthz, and to the answer of a first signed
    `/mlresearch help` sent right then: a start that only put its cost off would show in the second."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{argv} exited {proc.returncode}")
            try:
                if http("GET", f"http://127.0.0.1:{port}/healthz", timeout=1)[0] == 200:
                    break
            except OSError:
                time.sleep(0.005)
        healthy = time.perf_counter() - started
        body = command_body("help")
        status = http("POST", f"http://127.0.0.1:{port}/slack/events", body,
                      signed_headers(body, "application/x-www-form-urlencoded"), timeout=10)[0]
        if status != 200:
            raise RuntimeError(f"{argv}: the first command answered {status}")
        return healthy, time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(30)


def bare_bolt(tmp: Path) -> Path:
    bare = tmp / "bare_bolt.py"
    bare.write_text(BARE_BOLT)
    return bare


def cold_start(env: dict[str, str], tmp: Path, runs: int) -> None:
    bare = bare_bolt(tmp)
    # Slack's and waitress's modules were byte-compiled when pip installed them; the bot's own are compiled
    # the same way (as `make run`, a regular install or Heroku's build do), not at every start: this checkout
    # is installed editable, and where PYTHONDONTWRITEBYTECODE is set Python would never keep them compiled.
    compileall.compile_dir(ROOT / "bot", quiet=1)
    ours: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    for _ in range(runs):  # interleaved, so drift in machine load hits both alike
        port = free_port()
        ours.append(time_to_healthz([sys.executable, "-m", "bot", "serve"],
                                    clean_env(**{**env, "PORT": str(port)}), tmp, port))
        port = free_port()
        base.append(time_to_healthz([sys.executable, str(bare)], clean_env(**{**env, "PORT": str(port)}), tmp,
                                    port))
    print(f"cold start (spawn -> first 200 on /healthz, and -> a first command answered; median of {runs}; "
          "bot/ byte-compiled as installed):")
    for what, pick in (("/healthz", 0), ("first command", 1)):
        mine = statistics.median(t[pick] for t in ours)
        bare_median = statistics.median(t[pick] for t in base)
        runs_ours = ", ".join(f"{t[pick] * 1000:.0f}" for t in ours)
        runs_bare = ", ".join(f"{t[pick] * 1000:.0f}" for t in base)
        print(f"  {what:14s} mlresearch-bot serve {mine * 1000:5.0f} ms   bare Bolt {bare_median * 1000:5.0f}"
              f" ms   ratio {mine / bare_median:4.2f}x   (runs: {runs_ours} / {runs_bare})")
        if pick == 0:
            print(f"  {'':14s} target < 1.5 s and < 1.5x: "
                  f"{'ok' if mine < 1.5 and mine / bare_median < 1.5 else 'MISSED'}")


def search_load(
    bot: ServeProcess, clients: int, per_client: int, texts: list[str] | None = None, *, unique: bool = False
) -> list[float]:
    """Round-trip times of `clients` x `per_client` search commands, each a random one of `texts` (or, with
    `unique`, each client going through its own share of `texts` in order)."""
    texts = texts or [f"search {q}" for q in QUERIES]
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[str] = []
    barrier = threading.Barrier(clients)

    def client(n: int) -> None:
        rng = random.Random(n)
        mine = []
        barrier.wait()
        for i in range(per_client):
            text = texts[n * per_client + i] if unique else rng.choice(texts)
            body = command_body(text, channel=f"C{n:04d}", user=f"U{i:04d}")
            headers = signed_headers(body, "application/x-www-form-urlencoded")
            started = time.perf_counter()
            status, raw = http("POST", bot.base + "/slack/events", body, headers)
            mine.append(time.perf_counter() - started)
            if status != 200 or json.loads(raw).get("response_type") != "ephemeral":
                errors.append(f"{status} {raw[:80]!r}")
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} failed requests, e.g. {errors[0]}")
    return latencies


WARM_MODEL = 2.0  # seconds after the warm-up: the model and 20,000 stored vectors load in < 1 s


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def archive(tmp: Path, *, dense: bool) -> SQLiteStore:
    """The archive as an install holds it: items, and their vectors for search by meaning (computed once,
    at ingest or by `reindex`; serve reads them in the background after it starts)."""
    from bot.search.embed import StaticModel
    from bot.search.engine import build
    from bot.search.index import SearchIndex

    store = SQLiteStore(tmp / f"bench-{'dense' if dense else 'real'}.db")
    store.migrate()
    store.add_items(synthetic_items(ITEMS, dense=dense))
    SearchIndex(store, model=StaticModel.bundled).vectors(build(store))
    return store


@contextmanager
def postgres_copy(url: str, source: SQLiteStore) -> Iterator[str]:
    """A fresh schema of the PostgreSQL database at `url` (bench_store's, dropped afterwards) holding
    `source`'s items and vectors (copied, not computed again); yields its DATABASE_URL."""
    from bot.search.embed import BUNDLED_NAME
    from bot.store.postgres import PostgresStore

    with postgres_store(url)(ITEMS) as store:
        assert isinstance(store, PostgresStore)
        store.add_items(synthetic_items(ITEMS))
        store.put_item_vectors(BUNDLED_NAME, list(source.each_item_vector(BUNDLED_NAME)))
        store.close()
        yield store.url


def stack_floor(env: dict[str, str], tmp: Path, clients: int, per_client: int) -> None:
    """The bare Bolt app (waitress and Bolt with serve's threads, a listener that only acks) under the
    first-words load: what the stack and these clients cost before any search. Not a target: a reading of
    how much of the round trip's p99 and CPU is left to the search in the machine's present phase."""
    with ServeProcess(env, tmp, argv=[sys.executable, str(bare_bolt(tmp))]) as bare:
        search_load(bare, clients, 5)
        few = per_client // 4
        report("bare Bolt app that only acks (the stack's floor), the first-words load",
               measure(bare, clients, few, new_queries(clients * few), unique=True), clients, 0, target=False)


def realistic_loads(bot: ServeProcess, clients: int, per_client: int, backend: str) -> list[Load]:
    """The realistic archive's two mixes (each search the first of its words; recurring topics), reported."""
    search_load(bot, clients, 5)  # warm up: auth.test, page cache, the index's first build
    time.sleep(WARM_MODEL)  # and the embedding model and vectors, loaded in the background
    few = per_client // 4
    first = measure(bot, clients, few, new_queries(clients * few), unique=True)
    report(f"{backend}, realistic archive, each search the first of its words", first, clients, ITEMS,
           target=True)
    recurring = measure(bot, clients, per_client)
    report(f"{backend}, realistic archive, searches for recurring topics", recurring, clients, ITEMS,
           target=True)
    return [first, recurring]


@dataclass(frozen=True)
class Load:
    latencies: list[float]  # sorted, seconds
    rate: float  # requests per second
    steal: float  # the share (%) of CPU time the hypervisor took meanwhile
    cpu_ms: float  # the serve process's CPU time (user + system) per request


def measure(bot: ServeProcess, clients: int, per_client: int, texts: list[str] | None = None, *,
            unique: bool = False) -> Load:
    before, spent = cpu_times(), process_cpu(bot.proc.pid)
    started = time.perf_counter()
    latencies = sorted(search_load(bot, clients, per_client, texts, unique=unique))
    rate = len(latencies) / (time.perf_counter() - started)
    cpu_ms = (process_cpu(bot.proc.pid) - spent) * 1000 / max(1, len(latencies))
    return Load(latencies, rate, steal_share(before, cpu_times()), cpu_ms)


def process_cpu(pid: int) -> float:
    """The CPU time (user + system, seconds) process `pid` has used (/proc/PID/stat), which, unlike latency,
    does not drift with the other tenants of a shared VM."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat: user, nice, system, idle, iowait, irq, softirq, steal)."""
    return [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def steal_share(before: list[int], after: list[int]) -> float:
    spent = [b - a for a, b in zip(before, after, strict=True)]
    return 100 * spent[7] / max(1, sum(spent))


def in_process(store: SQLiteStore, count: int = 200) -> None:
    """CPU time of a `/mlresearch search` handled in this process (commands.handle, as serve's listener calls
    it, on a thread's session of the store), each the first search of its words: search by meaning on, the
    reply's blocks built; Bolt, waitress and HTTP left out."""
    from bot.commands import Invocation, Services, handle
    from bot.config import Settings
    from bot.search.embed import StaticModel
    from bot.search.index import SearchIndex

    session = store.thread_view()
    index = SearchIndex(session, model=StaticModel.bundled)
    services = Services(store=session, settings=Settings(), index=index)
    # words of the archive no other step searches (the loads over HTTP take the first pairs)
    texts = new_queries(1000)[-(count + 20):]
    for text in texts[:20]:  # the index, the model and the vectors loaded
        handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services)
    started = time.process_time()
    for text in texts[20:]:
        handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services)
    cpu = (time.process_time() - started) * 1000 / count
    print(f"in-process search command, each the first of its words ({count}, {ITEMS:,} items): "
          f"CPU {cpu:.1f} ms a search   target <= 5 ms: {'ok' if cpu <= 5 else 'MISSED'}")


def reference_loop_ms() -> float:
    """A fixed pure-Python workload, best of 5: how fast this machine runs Python right now (on a shared VM it
    drifts, and every figure above drifts with it)."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i * i % 7
        best = min(best, time.perf_counter() - started)
    return best * 1000


def report(label: str, load: Load, clients: int, items: int, *, target: bool) -> None:
    latencies = load.latencies
    p99 = percentile(latencies, 0.99)
    archive = f"{items:,} items, " if items else ""
    print(f"search round trip, {label} ({clients} concurrent clients, {len(latencies)} requests, "
          f"{archive}{load.rate:.0f} req/s):")
    verdict = f"   target p99 < 100 ms: {'ok' if p99 < 100 else 'MISSED'}" if target else ""
    print(f"  p50 {percentile(latencies, 0.5):6.1f} ms   p99 {p99:6.1f} ms   "
          f"max {latencies[-1] * 1000:6.1f} ms   CPU {load.cpu_ms:4.1f} ms a request{verdict}")


def percentile(values: list[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] * 1000


AGENT_RUNS = 10
AGENT_ITEMS = 2_000  # the archive the questions search (a few years of the real feed)
MODEL_FIRST_TOKEN = 0.4  # seconds before a hosted model's first token
MODEL_CHARS, MODEL_PACE = 4, 0.02  # ~ one token every 20 ms
WRITTEN = ("The archive's items study {a} in several settings [1]. Two of them look at how {a} scales with "
           "model size [2][3]. One compares {a} with {b} on the same benchmarks [4]. Together they suggest "
           "{a} works best when it is trained on diverse data [1][2].")


def agent_latency(env: dict[str, str], tmp: Path, runs: int) -> None:
    """Step 5: DM event -> processing status -> first streamed characters -> first written sentence ->
    finished answer; then the stop button during an answer -> the stream's end."""
    store = SQLiteStore(tmp / "agent.db")
    store.migrate()
    store.add_items(synthetic_items(AGENT_ITEMS))
    slack_url = env["SLACK_API_URL"]
    with FakeSlack() as slack, FakeOpenAI(WRITTEN.format(a="speech", b="vision"), chunk_chars=MODEL_CHARS,
                                          pace=MODEL_PACE, delay=MODEL_FIRST_TOKEN) as model, \
            ServeProcess({**env, "SLACK_API_URL": slack.url, "DATABASE_URL": f"sqlite:///{store.path}",
                          "SUMMARY_API_URL": model.url, "SUMMARY_API_KEY": "bench"}, tmp) as bot:
        assert slack_url != slack.url
        sign: list[float] = []
        first, written, done = [], [], []
        for n in range(runs + 1):  # the first question warms the search index: not counted
            ts = f"{1800000000 + n}.000100"
            event = {"type": "message", "channel_type": "im", "channel": "D0BENCH", "user": "U0BENCH",
                     "text": f"what has Apple published on {WORDS[n % len(WORDS)]}?", "ts": ts,
                     "event_ts": ts}
            started = time.monotonic()
            status, _ = bot.event(event)
            assert status == 200, status

            def stream_call(method: str, fake: FakeSlack = slack, thread: str = ts) -> float | None:
                starts = [c for c in fake.calls_to("chat.startStream") if c.params.get("thread_ts") == thread]
                if not starts:
                    return None
                stream_ts = str((starts[0].answer or {}).get("ts") or "")
                if method == "chat.startStream":
                    return starts[0].done_at
                calls = [c for c in fake.calls_to(method) if c.params.get("ts") == stream_ts and c.done_at]
                return calls[0].done_at if calls else None

            if not slack.wait_for(lambda _s: stream_call("chat.stopStream") is not None, timeout=120):
                raise RuntimeError(f"no streamed answer:\n{bot.output()[-3000:]}")
            if n == 0:
                continue
            signs = [c for c in slack.calls_to("agents.sessions.setStatus")
                     if c.params.get("thread_ts") == ts and c.params.get("status") == "processing"]
            sign.append(float(signs[0].done_at or 0) - started if signs else float("nan"))
            first.append(float(stream_call("chat.startStream") or 0) - started)
            written.append(float(stream_call("chat.appendStream") or 0) - started)
            done.append(float(stream_call("chat.stopStream") or 0) - started)
        stopped = stop_latency(bot, slack, model, runs)
    for label, values in (("first visible sign (the session's processing status)", sign),
                          ("first streamed characters (the header)", first),
                          ("first sentence the model wrote", written), ("finished answer", done)):
        print(f"DM event -> {label}: median {statistics.median(values) * 1000:.0f} ms, "
              f"worst {max(values) * 1000:.0f} ms ({len(values)} questions)")
    print(f"  model stand-in: first token after {MODEL_FIRST_TOKEN:g} s, then {MODEL_CHARS} characters every "
          f"{MODEL_PACE * 1000:.0f} ms; answer of {len(WRITTEN.format(a='speech', b='vision'))} characters")
    print(f"stop button (agent_session_stopped) -> the stream's end (chat.stopStream): median "
          f"{statistics.median(stopped) * 1000:.0f} ms, worst {max(stopped) * 1000:.0f} ms "
          f"({len(stopped)} stops during a written answer)")


def stop_latency(bot: Any, slack: FakeSlack, model: FakeOpenAI, runs: int) -> list[float]:
    """The stop button pressed while an answer is being written: from the event to chat.stopStream."""
    model.content = " ".join(WRITTEN.format(a="speech", b="vision") for _ in range(20))  # a long answer
    times = []
    for n in range(runs):
        ts = f"{1900000000 + n}.000100"
        event = {"type": "message", "channel_type": "im", "channel": "D0STOP", "user": "U0BENCH",
                 "text": f"what has Apple published on {WORDS[n % len(WORDS)]}?", "ts": ts, "event_ts": ts}
        status, _ = bot.event(event)
        assert status == 200, status

        def stream_ts(fake: FakeSlack = slack, thread: str = ts) -> str | None:
            starts = [c for c in fake.calls_to("chat.startStream") if c.params.get("thread_ts") == thread]
            return str((starts[0].answer or {}).get("ts") or "") if starts and starts[0].answer else None

        def calls(method: str, fake: FakeSlack = slack) -> list[Any]:
            return [c for c in fake.calls_to(method) if c.params.get("ts") == stream_ts() and c.done_at]

        if not slack.wait_for(lambda _s: len(calls("chat.appendStream")) >= 2, timeout=120):
            raise RuntimeError(f"no streamed answer:\n{bot.output()[-3000:]}")
        stop = {"type": "agent_session_stopped", "channel": "D0STOP", "thread_ts": ts, "user": "U0BENCH",
                "streaming_message_ts": [stream_ts()], "event_ts": f"{1900000000 + n}.500000"}
        started = time.monotonic()
        status, _ = bot.event(stop)
        assert status == 200, status
        if not slack.wait_for(lambda _s: bool(calls("chat.stopStream")), timeout=60):
            raise RuntimeError(f"the stop did not end the stream:\n{bot.output()[-3000:]}")
        times.append(float(calls("chat.stopStream")[0].done_at) - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description="serve benchmark")
    parser.add_argument("--quick", action="store_true", help="fewer requests")
    parser.add_argument("--agent", action="store_true",
                        help="only the Messages tab's streamed answers: DM event to first characters and to "
                             "the finished answer")
    parser.add_argument("--cold", type=int, metavar="RUNS", default=0,
                        help="only the cold start, the median of RUNS interleaved starts of each")
    args = parser.parse_args()
    if args.cold:
        print(f"mlresearch-bot serve benchmark, cold start (python {sys.version.split()[0]})")
        reference = reference_loop_ms()
        with tempfile.TemporaryDirectory(prefix="mlbot-bench-cold-") as tmpdir, FakeSlack() as slack:
            tmp = Path(tmpdir)
            cold = SQLiteStore(tmp / "cold.db")
            cold.migrate()
            cold.add_items(synthetic_items(ITEMS))
            cold_start({"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
                        "POLL_INTERVAL": "0", "LOG_LEVEL": "WARNING", "DATABASE_URL": f"sqlite:///{cold.path}",
                        "FEED_URL": str(ROOT / "tests" / "data" / "apple_ml_rss.xml")}, tmp, runs=args.cold)
        print(f"reference loop {reference:.0f} ms at the start, {reference_loop_ms():.0f} ms at the end")
        return
    if args.agent:
        print(f"mlresearch-bot serve benchmark, streamed answers (python {sys.version.split()[0]})")
        with tempfile.TemporaryDirectory(prefix="mlbot-bench-agent-") as tmpdir:
            env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": "unused",
                   "POLL_INTERVAL": "0", "LOG_LEVEL": "WARNING",
                   "FEED_URL": str(ROOT / "tests" / "data" / "apple_ml_rss.xml")}
            agent_latency(env, Path(tmpdir), AGENT_RUNS)
        return
    clients, per_client = 20, (25 if args.quick else 100)
    print(f"mlresearch-bot serve benchmark (python {sys.version.split()[0]})")
    reference = reference_loop_ms()
    with tempfile.TemporaryDirectory(prefix="mlbot-bench-app-") as tmpdir, FakeSlack() as slack:
        tmp = Path(tmpdir)
        env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
               "POLL_INTERVAL": "0", "LOG_LEVEL": "WARNING",
               "FEED_URL": str(ROOT / "tests" / "data" / "apple_ml_rss.xml")}
        cold = SQLiteStore(tmp / "cold.db")
        cold.migrate()
        cold.add_items(synthetic_items(ITEMS))
        cold_start({**env, "DATABASE_URL": f"sqlite:///{cold.path}"}, tmp, runs=5)
        peaks: dict[str, float] = {}
        loads: list[Load] = []
        real = archive(tmp, dense=False)
        in_process(real)
        stack_floor(env, tmp, clients, per_client)
        with ServeProcess({**env, "DATABASE_URL": f"sqlite:///{real.path}"}, tmp) as bot:
            loads += realistic_loads(bot, clients, per_client, "SQLite")
            assert bot.proc is not None
            peaks["SQLite"] = peak_rss_mb(bot.proc.pid)
        dense = archive(tmp, dense=True)
        with ServeProcess({**env, "DATABASE_URL": f"sqlite:///{dense.path}"}, tmp) as bot:
            search_load(bot, clients, 5)
            time.sleep(WARM_MODEL)
            loads.append(measure(bot, clients, per_client // 4))
            report("SQLite, worst case: most queries match most items", loads[-1], clients, ITEMS,
                   target=True)
            assert bot.proc is not None
            peaks["SQLite"] = max(peaks["SQLite"], peak_rss_mb(bot.proc.pid))
        url = os.environ.get("BENCH_DATABASE_URL") or os.environ.get("TEST_DATABASE_URL")
        if url:
            with (postgres_copy(url, real) as scoped,
                  ServeProcess({**env, "DATABASE_URL": scoped}, tmp) as bot):
                loads += realistic_loads(bot, clients, per_client, "PostgreSQL")
                assert bot.proc is not None
                peaks["PostgreSQL"] = peak_rss_mb(bot.proc.pid)
        else:
            print("PostgreSQL not measured: set BENCH_DATABASE_URL (or TEST_DATABASE_URL)")
        for backend, peak in peaks.items():
            print(f"peak RSS of serve on {backend} (VmHWM, after the load): {peak:.1f} MB   target < 150 MB: "
                  f"{'ok' if peak < 150 else 'MISSED'}")
        steal = ", ".join(f"{load.steal:.0f}%" for load in loads)
        print(f"machine: reference loop {reference:.0f} ms at the start, {reference_loop_ms():.0f} ms at the "
              f"end (best of 5 each); CPU steal during the loads {steal}")


if __name__ == "__main__":
    main()
