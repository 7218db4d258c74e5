"""Worker processes (issue 22): several `mlresearch-bot worker` processes share the ledger through one
PostgreSQL database; each row is posted once, a channel's posts keep their order and pacing, SIGTERM releases
everything, a SIGKILLed worker's channels are taken over at once (its claims die with its database session,
issue 53), a stalled one's after its lease, a 429 holds the workspace for every worker, and a worker refuses
a database it must not serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bot.deliver import Deliverer
from bot.models import DeliveryReport, Validators
from bot.route import ingest
from bot.slackweb import make_client
from bot.store import Store, open_store
from bot.worker import PollerDelivery, Worker
from tests.fakes.slack_api import FakeSlack
from tests.test_deliver import assert_exactly_once, feed_file, posted_items
from tests.test_multiprocess import NEW, RSS, TEAM, bot_env

CHANNELS = ["C1", "C2", "C3", "C4"]


def prepared(url: str, feed: Path, channels: list[str] = CHANNELS) -> Store:
    store = open_store(url)
    store.migrate()
    ingest(store, str(feed), RSS, Validators())
    for channel in channels:
        store.subscribe(TEAM, channel, "U1")
    return store


def queue(tmp_path: Path, url: str, slack: FakeSlack, count: int, channels: list[str] = CHANNELS,
          **extra: str) -> tuple[Path, dict[str, str]]:
    """A database with `channels` subscribed and `count` new items queued for each by `poll --no-deliver`."""
    feed = feed_file(tmp_path / "feed.xml", [str(i.guid) for i in RSS])
    prepared(url, feed, channels).close()
    feed_file(feed, [str(i.guid) for i in [*RSS, *NEW[:count]]])
    env = bot_env(url, slack, feed, BURST_THRESHOLD="100", **extra)
    done = subprocess.run([sys.executable, "-m", "bot", "poll", "--no-deliver", "--json"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"delivered": 0' in done.stdout and f'"new": {count}' in done.stdout
    return feed, env


def start_workers(env: dict[str, str], cwd: Path, n: int, *args: str) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen([sys.executable, "-m", "bot", "worker", *args], env=env, cwd=cwd, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(n)]


def stop(procs: list[subprocess.Popen[str]], timeout: float = 10) -> list[str]:
    """SIGTERM each; each must exit 0 within `timeout` seconds. Their logs."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    logs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err
        logs.append(out + err)
    return logs


def assert_order_and_pace(
    slack: FakeSlack, channels: list[str], expected: list[str], pace: float = 0.9
) -> None:
    for channel in channels:
        assert posted_items(slack, channel) == expected, channel
        calls = [c.at for c in slack.calls_to("chat.postMessage", channel)]
        gaps = [b - a for a, b in zip(calls, calls[1:], strict=False)]
        assert all(gap >= pace for gap in gaps), (channel, gaps)


def settled(url: str) -> Store:
    store = open_store(url)
    assert store.held_channels() == []
    assert store.live_workers(time.time(), 3600) == []
    return store


@pytest.mark.postgres
def test_three_workers_post_each_row_once_in_order_and_paced(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    slack_api.latency = 0.05
    _, env = queue(tmp_path, pg_schema_url, slack_api, 3)
    store = open_store(pg_schema_url)
    expected = [d.item_id for d in store.deliveries(channel_id="C1")]
    procs = start_workers(env, tmp_path, 3)
    assert slack_api.wait_for(lambda s: len(s.posts()) >= 12, timeout=60)
    time.sleep(1.5)  # the workers keep looking: nothing is posted again
    logs = stop(procs)
    assert_exactly_once(slack_api, CHANNELS, NEW[:3])
    assert_order_and_pace(slack_api, CHANNELS, expected)
    assert sum("event=worker_started" in log for log in logs) == 3
    assert not any("Traceback" in log for log in logs)
    assert {d.state for d in settled(pg_schema_url).deliveries()} == {"sent"}


@pytest.mark.postgres
def test_sigterm_stops_at_once_releasing_everything_and_another_worker_finishes(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    _, env = queue(tmp_path, pg_schema_url, slack_api, 6)
    store = open_store(pg_schema_url)
    expected = [d.item_id for d in store.deliveries(channel_id="C1")]
    [proc] = start_workers(env, tmp_path, 1)
    assert slack_api.wait_for(lambda s: len(s.posts()) >= 8, timeout=60)  # two posts a channel, 1 s apart
    started = time.monotonic()
    stop([proc])
    assert time.monotonic() - started < 5
    left = settled(pg_schema_url).deliveries()
    assert {d.state for d in left} == {"sent", "pending"} and "posting" not in {d.state for d in left}
    done = subprocess.run([sys.executable, "-m", "bot", "worker", "--once"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert_exactly_once(slack_api, CHANNELS, NEW[:6])
    assert_order_and_pace(slack_api, CHANNELS, expected)
    settled(pg_schema_url)


@pytest.mark.postgres
def test_a_sigkilled_workers_channels_and_heartbeat_die_with_it_the_next_poll_delivers_everything(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    _, env = queue(tmp_path, pg_schema_url, slack_api, 3, WORKER_LEASE="3600")  # a lease that never ends
    # C1's first post lands, but its answer never comes back in time: the worker dies holding it `posting`
    slack_api.fault("chat.postMessage", channel="C1", delay=60, after=True)
    [victim] = start_workers(env, tmp_path, 1)
    assert slack_api.wait_for(lambda s: len(s.posts("C1")) == 1, timeout=30)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=10)
    store = open_store(pg_schema_url)
    assert "posting" in {d.state for d in store.deliveries(channel_id="C1")}
    assert store.held_channels() and all(c["lease_until"] > time.time() + 3000 for c in store.held_channels())
    with psycopg.connect(pg_schema_url) as db:  # its heartbeat row is fresh, but it is not alive
        fresh = db.execute("SELECT count(*) FROM workers WHERE seen_at > %s", [time.time() - 60]).fetchone()
    assert fresh == (1,)
    assert store.live_workers(time.time(), 3600) == []
    open_rows = sum(d.state != "sent" for d in store.deliveries())
    done = subprocess.run([sys.executable, "-m", "bot", "poll", "--json"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["delivered"], answer["left_to_others"]) == (open_rows, 0)  # not left to a dead worker
    assert "event=delivery_reconciled" in done.stderr
    assert_exactly_once(slack_api, CHANNELS, NEW[:3])  # C1's landed post was found, not posted twice
    assert {d.state for d in store.deliveries()} == {"sent"}
    assert store.held_channels() == []


@pytest.mark.postgres
def test_a_stalled_worker_keeps_its_channels_until_its_lease_ends(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    """SIGSTOP (a frozen VM): the worker's database session lives on, so its claims hold until their lease
    (5 s here) ends; then the others take over, and the stalled worker, resumed, posts nothing again."""
    _, env = queue(tmp_path, pg_schema_url, slack_api, 3, WORKER_LEASE="5")
    slack_api.fault("chat.postMessage", channel="C1", delay=60, after=True)
    [victim] = start_workers(env, tmp_path, 1)
    assert slack_api.wait_for(lambda s: len(s.posts("C1")) == 1, timeout=30)
    victim.send_signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        others = start_workers(env, tmp_path, 2)
        assert slack_api.wait_for(lambda s: len(s.posts()) >= 12, timeout=60)
        time.sleep(1)
    finally:
        victim.send_signal(signal.SIGCONT)
    logs = stop(others) + stop([victim], timeout=30)
    assert_exactly_once(slack_api, CHANNELS, NEW[:3])  # C1's landed post was found, not posted twice
    c1_later = [c.at for c in slack_api.calls_to("chat.postMessage", "C1")][1:]
    assert c1_later and min(c1_later) - stopped_at >= 3  # C1 waited for the lease (5 s from the last renewal)
    assert any("event=delivery_reconciled" in log for log in logs)
    assert {d.state for d in open_store(pg_schema_url).deliveries()} == {"sent"}


@pytest.mark.postgres
def test_a_429_seen_by_one_worker_holds_the_workspace_for_every_worker(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    channels = [f"C{n:02d}" for n in range(40)]  # more than one worker claims at a time: both hold some
    _, env = queue(tmp_path, pg_schema_url, slack_api, 2, channels)
    slack_api.fault("chat.postMessage", channel="C00", status=429, retry_after=3, skip=1)
    store = open_store(pg_schema_url)
    with store.poll_lock(name="write"), psycopg.connect(pg_schema_url, autocommit=True) as watch:
        # every write waits until both workers have started and wait at their first (their heartbeat): one
        # that starts late (a loaded machine) must still hold channels when the other meets the 429, or the
        # test would prove nothing about it
        procs = start_workers(env, tmp_path, 2)
        deadline = time.monotonic() + 60
        while watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' "
                            "AND datname = current_database()").fetchone() != (2,):
            assert time.monotonic() < deadline, [p.poll() for p in procs]
            time.sleep(0.05)
        assert store.live_workers(time.time(), 3600) == [] and slack_api.posts() == []
    holders: set[str] = set()
    while not [c for c in slack_api.calls_to("chat.postMessage") if c.status == 429]:
        holders |= {row["worker_id"] for row in store.held_channels()}
        time.sleep(0.05)
    holders |= {row["worker_id"] for row in store.held_channels()}
    assert slack_api.wait_for(lambda s: len(s.posts()) >= 80, timeout=90)
    stop(procs)
    assert len(holders) == 2  # both workers held channels of the workspace when one of them saw the 429
    [limited] = [c for c in slack_api.calls_to("chat.postMessage") if c.status == 429]
    during = [c for c in slack_api.calls_to("chat.postMessage") if limited.at + 0.8 < c.at < limited.at + 2.9]
    assert during == []  # no worker posted to the workspace while Slack asked it to wait
    assert_exactly_once(slack_api, channels, NEW[:2])


@pytest.mark.postgres
def test_serves_poller_leaves_delivery_to_live_workers_and_delivers_without_them(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    _, env = queue(tmp_path, pg_schema_url, slack_api, 1)
    store = open_store(pg_schema_url)
    client = make_client("xoxb-test", slack_api.url)
    step = PollerDelivery(Deliverer(lambda team: client, pace=0), lease=30)
    holder = store.hold_claims("w1")  # the worker's database session: its heartbeat counts while it lives
    store.heartbeat("w1", host="h", pid=1, database=store.database_identity(), now=time.time())
    assert step(store) == DeliveryReport(left=4)  # left to the worker, and counted
    assert slack_api.posts() == []
    holder.close()  # the worker died: its heartbeat row is fresh, but its session is gone
    assert store.live_workers(time.time(), 30) == []
    assert step(store).delivered == 4
    assert_exactly_once(slack_api, CHANNELS, NEW[:1])
    assert store.held_channels() == []


def one_line_refusal(env: dict[str, str], cwd: Path, needle: str) -> None:
    done = subprocess.run([sys.executable, "-m", "bot", "worker", "--once"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and needle in done.stderr, done.stderr


@pytest.mark.postgres
def test_a_worker_refuses_sqlite_an_unmigrated_database_and_a_copy(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    env = bot_env(f"sqlite:///{tmp_path / 'bot.db'}", slack_api, tmp_path / "feed.xml")
    one_line_refusal(env, tmp_path, "worker needs PostgreSQL")
    assert not (tmp_path / "bot.db").exists()

    store = open_store(pg_schema_url)
    store.migrate(stop_before="m019_workers")
    env = bot_env(pg_schema_url, slack_api, tmp_path / "feed.xml")
    one_line_refusal(env, tmp_path, "run `mlresearch-bot migrate` first")

    _, env = queue(tmp_path, pg_schema_url, slack_api, 1)
    store.set_meta("database_identity", "postgres:7000000000000000000/prod/public")  # as a fork would hold
    one_line_refusal(env, tmp_path, "is a copy of another database")
    assert {d.state for d in store.deliveries()} == {"pending"}
    assert store.held_channels() == [] and slack_api.posts() == []
    assert os.environ.get("DATABASE_URL") != pg_schema_url


# --- the store's part (both backends) ------------------------------------------------------------------


def queued_in_store(store: Store, tmp_path: Path, items: int = 2) -> None:
    """`items` new items queued for each of CHANNELS, and their claim rows made."""
    feed = feed_file(tmp_path / "feed.xml", [str(i.guid) for i in RSS])
    ingest(store, str(feed), RSS, Validators())
    for channel in CHANNELS:
        store.subscribe(TEAM, channel, "U1")
    ingest(store, str(feed), [*RSS, *NEW[:items]], Validators())
    assert store.discover_channels("TSHELL") == 4


def test_claims_are_exclusive_until_released_or_their_lease_ends(store: Store, tmp_path: Path) -> None:
    queued_in_store(store, tmp_path)
    holders = [store.hold_claims(name) for name in "abcd"]  # live holders: only leases free their claims
    now = 1_000_000.0
    first = store.claim_channels("a", 3, now=now, lease=30)
    second = store.claim_channels("b", 3, now=now, lease=30)
    assert len(first) == 3 and len(second) == 1  # each channel to exactly one worker
    assert {(t, c) for t, c, _ in first} & {(t, c) for t, c, _ in second} == set()
    assert store.claim_channels("c", 3, now=now + 29, lease=30) == []  # all leased
    team, channel, _ = first[0]
    store.release_channel("a", team, channel, last_post=now + 1.5)
    assert store.claim_channels("c", 3, now=now + 2, lease=30) == [(team, channel, now + 1.5)]
    assert store.renew_claims("b", now=now + 20, lease=30) == {(t, c) for t, c, _ in second}
    taken = store.claim_channels("c", 9, now=now + 31, lease=30)  # a's lease ended, b's was renewed
    assert {(t, c) for t, c, _ in taken} == {(t, c) for t, c, _ in first[1:]}
    store.hold_workspace(TEAM, now + 100)
    store.hold_workspace(TEAM, now + 50)  # a shorter hold never shortens one
    assert store.workspace_holds(now + 60) == {TEAM: now + 100}
    assert store.release_all("c") == 3
    assert store.claim_channels("d", 9, now=now + 61, lease=30) == []  # the workspace is on hold
    assert len(store.claim_channels("d", 9, now=now + 101, lease=30)) == 4  # b's renewed lease ended too
    for holder in holders:
        holder.close()


def test_a_row_is_claimed_only_under_its_channels_claim_and_a_sent_row_stays_sent(
    store: Store, tmp_path: Path
) -> None:
    """A process that lost its channel (its session ended, it stalled past its lease) posts nothing more
    there: its claim of the channel's next row fails; and settling late never puts back a row posted since."""
    queued_in_store(store, tmp_path, 1)
    a, b = store.hold_claims("a"), store.hold_claims("b")
    now = time.time()
    assert len(store.claim_channels("a", 9, now=now, lease=30)) == 4
    row = store.deliveries(channel_id="C1")[0]
    assert not store.claim(row.id, holder="b")  # b does not hold C1
    assert store.claim(row.id, holder="a")
    assert store.claim_channels("b", 9, now=now + 31, lease=30)  # a stalled past its lease: b takes C1
    assert not store.claim(row.id, "posting", holder="a")  # a, resumed, cannot take the row back
    assert store.claim(row.id, "posting", holder="b")  # b reconciles it (not found), claims it, posts it
    store.mark_sent(row.id, "1.000001")
    store.release(row.id, "stopped before posting")  # a settles late what it had claimed
    store.mark_failed(row.id, "internal_error")
    assert [(d.state, d.ts) for d in store.deliveries(channel_id="C1")] == [("sent", "1.000001")]
    a.close()
    b.close()


@pytest.mark.postgres
def test_a_claim_dies_with_its_holders_session(pg_schema_url: str, tmp_path: Path) -> None:
    store = open_store(pg_schema_url)
    store.migrate()
    queued_in_store(store, tmp_path)
    a, b = store.hold_claims("a"), store.hold_claims("b")
    now = time.time()
    assert len(store.claim_channels("a", 3, now=now, lease=3600)) == 3
    assert len(store.claim_channels("b", 9, now=now, lease=3600)) == 1  # a's three are a's
    store.heartbeat("a", host="h", pid=1, database="d", now=now)
    assert [w["id"] for w in store.live_workers(now, 30)] == ["a"]
    a.close()  # as a SIGKILL would end it: the server drops the session and its lock
    assert store.live_workers(now, 30) == []  # a fresh heartbeat, but no session behind it
    assert len(store.claim_channels("b", 9, now=now + 1, lease=3600)) == 3  # at once, an hour's lease left
    assert store.held_by_others("c", now + 1, "TSHELL") == 8  # every open row, in b's four channels
    b.close()
    assert store.held_by_others("c", now + 1, "TSHELL") == 0  # a dead holder keeps nothing from anyone


@pytest.mark.postgres
def test_a_worker_whose_claims_session_ends_posts_nothing_more_under_them(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    """The database restarted, or an operator terminated the backend: the session holding a live worker's
    claims is gone, and another process may take its channels at once. The worker notices before its next
    post (not silently reconnecting under claims it no longer holds), ends its run, and claims again under a
    new id; the channel is delivered by the next claimer, each row once."""
    queue(tmp_path, pg_schema_url, slack_api, 6, ["C1"])
    store = open_store(pg_schema_url)
    client = make_client("xoxb-test", slack_api.url)
    worker = Worker(store, Deliverer(lambda team: client, pace=1.0), lease=30, register=False,
                    worker_id="w-test:1")
    reports: list[DeliveryReport] = []
    running = threading.Thread(target=lambda: reports.append(worker.deliver()))
    running.start()
    assert slack_api.wait_for(lambda s: len(s.posts()) >= 2, timeout=30)
    with psycopg.connect(pg_schema_url, autocommit=True) as admin:
        [(pid,)] = admin.execute(
            "SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND "
            "((l.classid::bigint << 32) | l.objid::bigint) = (hashtextextended(%s, 0) & 4611686018427387903)",
            ["w-test:1"]).fetchall()
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
        deadline = time.monotonic() + 30
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone() != (0,):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    running.join(30)
    assert not running.is_alive() and len(reports) == 1
    assert 2 <= reports[0].delivered < 6  # it stopped with rows left
    assert "event=claims_lost worker=w-test:1" in caplog.text
    assert store.held_channels() == []  # it gave the channel back (nobody had taken it yet)
    rest = PollerDelivery(Deliverer(lambda team: client, pace=1.0), lease=30)(store)
    assert rest.delivered == 6 - reports[0].delivered
    assert_exactly_once(slack_api, ["C1"], NEW[:6])
    assert worker.deliver() == DeliveryReport() and worker.worker_id == "w-test:1/1"  # a new session, new id
    worker.close()


@pytest.mark.postgres
def test_a_run_longer_than_the_lease_keeps_its_channels(
    pg_schema_url: str, tmp_path: Path, slack_api: FakeSlack
) -> None:
    """Serve's poller delivering with no worker alive renews its leases: a worker starting during a long run
    (a channel's queue paced over more than a lease) cannot take a channel from under it."""
    import threading

    _, _ = queue(tmp_path, pg_schema_url, slack_api, 6, ["C1"])
    store = open_store(pg_schema_url)
    client = make_client("xoxb-test", slack_api.url)
    step = PollerDelivery(Deliverer(lambda team: client, pace=1.0), lease=3)
    reports: list[DeliveryReport] = []
    running = threading.Thread(target=lambda: reports.append(step(store)))
    running.start()
    time.sleep(4.5)  # past the first lease
    taken = store.claim_channels("late-worker", 10, now=time.time(), lease=30)
    running.join(30)
    assert taken == []
    assert reports == [DeliveryReport(delivered=6, failed=0)]
    assert_exactly_once(slack_api, ["C1"], NEW[:6])


def test_a_busy_pool_still_starts_the_channels_waiting_their_turn() -> None:
    """A worker whose pool is kept busy by the channels it holds still claims the next ones every
    `top_up_every` seconds: a channel's queue is paced, so one that starts only when the others are done
    makes the whole run as long as its own queue again (a 40-item burst: 97 s instead of 60)."""
    deliverer = Deliverer(lambda team: None, pool_size=1, top_up_every=0.05)
    events: list[tuple[str, str]] = []

    def channel(name: str, posts: int) -> Iterator[float]:
        events.append(("start", name))
        for _ in range(posts):
            time.sleep(0.02)  # a post
            yield deliverer.clock()  # due again at once: the one thread never runs dry
        events.append(("end", name))

    batches = [{("T1", "C1"): channel("C1", 25), ("T1", "C2"): channel("C2", 25)},
               {("T1", "C3"): channel("C3", 1)}]
    finished: list[tuple[str, str]] = []
    deliverer.schedule({}, more=lambda: batches.pop(0) if batches else {}, done=finished.append)
    assert events.index(("start", "C3")) < events.index(("end", "C1"))
    assert events.index(("start", "C3")) < events.index(("end", "C2"))
    assert sorted(finished) == [("T1", "C1"), ("T1", "C2"), ("T1", "C3")]
