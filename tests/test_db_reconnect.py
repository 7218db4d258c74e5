"""A lost PostgreSQL connection (the server restarted, the backends terminated) is one log line and a retry,
never a traceback: the store drops the connections the server ended and goes on with new ones, a unit of
work whose connection breaks midway is a one-line StoreError (the next one reconnects), and the poller logs
`event=poll_failed reason=database` and tries again at its next cycle.

Only this test's own connections are terminated: each store gets an application_name of its own."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from bot import commands
from bot.config import Settings
from bot.errors import StoreError
from bot.models import PollResult
from bot.poller import Poller
from bot.store import Store, open_store
from tests.conftest import PG_URL
from tests.fakes.slack_sender import ROOT
from tests.fakes.tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres

FEED = str(ROOT / "tests" / "data" / "apple_ml_rss.xml")
WAIT = 60.0  # seconds: a generous bound on a busy machine, never a measure


def with_app_name(url: str, name: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


def terminate(app_name: str) -> int:
    """End every backend of `app_name` from an admin connection, and wait until they are gone."""
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND application_name = %s) AS t", [app_name]).fetchone()
        deadline = time.monotonic() + WAIT
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                            [app_name]).fetchone()[0]:
            assert time.monotonic() < deadline, "the terminated backends did not go away"
            time.sleep(0.05)
    return int(ended[0]) if ended else 0


@pytest.fixture
def app_name() -> str:
    return f"h3_reconnect_{uuid.uuid4().hex[:10]}"


@pytest.fixture
def pg_store(pg_schema_url: str, app_name: str) -> Iterator[Store]:
    store = open_store(with_app_name(pg_schema_url, app_name))
    store.migrate()
    yield store
    store.close()


def hold_pooled_connections(store: Store, n: int = 3) -> None:
    """Leave `n` idle connections in the store's pool (units of work open at once each take one)."""
    def nest(depth: int) -> None:
        if depth:
            with store.connect() as db:
                db.execute("SELECT 1")
                nest(depth - 1)

    nest(n)


def lines_of(caplog: pytest.LogCaptureFixture, event: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if f"event={event}" in r.getMessage()]


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in caplog.text
    assert not any(r.exc_info for r in caplog.records)


def test_the_next_call_after_terminated_connections_works(
    pg_store: Store, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hold_pooled_connections(pg_store)
    assert terminate(app_name) == 3

    assert pg_store.count_items() == 0  # a read
    pg_store.set_meta("after", "restart")  # a write
    assert pg_store.get_meta("after") == "restart"

    no_traceback(caplog)
    [line] = lines_of(caplog, "db_connection_lost")
    assert "dropped=3" in line


def test_a_session_goes_on_after_its_connection_is_terminated(
    pg_store: Store, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    with pg_store.session() as run:
        run.set_meta("before", "1")
        terminate(app_name)
        run.set_meta("after", "2")
        assert run.get_meta("before") == "1" and run.get_meta("after") == "2"
    no_traceback(caplog)
    assert len(lines_of(caplog, "db_connection_lost")) == 1


def test_a_connection_lost_midway_is_one_line_and_the_next_call_reconnects(
    pg_store: Store, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hold_pooled_connections(pg_store, 2)
    with pytest.raises(StoreError) as lost, pg_store.connect() as db:
        terminate(app_name)  # after the connection was handed out, before its statement
        db.execute("SELECT 1")
    message = str(lost.value)
    assert "\n" not in message and message.startswith("lost the connection to the PostgreSQL database")

    assert pg_store.count_items() == 0
    no_traceback(caplog)
    assert len(lines_of(caplog, "db_connection_lost")) == 1


def test_a_command_after_terminated_connections_is_answered(pg_store: Store, app_name: str) -> None:
    services = commands.Services(store=pg_store, settings=Settings())
    subscribe = commands.Invocation(text="subscribe speech", team_id="T1", channel_id="C1", user_id="U1")
    before = commands.handle(subscribe, services).text
    hold_pooled_connections(pg_store)
    terminate(app_name)

    reply = commands.handle(commands.Invocation(text="latest 3", team_id="T1", channel_id="C1", user_id="U1"),
                            services)
    assert "can't reach the archive" not in reply.text and "can't reach the archive" not in before
    assert pg_store.get_subscription("T1", "C1") is not None


def run_poller(store: Store, until: int, between: dict[int, object] | None = None,
               interval: float = 0.05) -> list[PollResult]:
    """Run a Poller until it has delivered `until` results; `between[n]` (a callable) runs after the n-th."""
    results: list[PollResult] = []
    done = threading.Event()
    steps = dict(between or {})

    def on_result(result: PollResult) -> None:
        results.append(result)
        step = steps.pop(len(results), None)
        if callable(step):
            step()
        if len(results) >= until:
            done.set()

    with httpx.Client() as client:
        poller = Poller(store, client, FEED, interval, on_result=on_result)
        poller.start()
        try:
            assert done.wait(WAIT), f"the poller gave {len(results)} result(s), not {until}"
        finally:
            poller.stop()
    return results


def test_the_poller_recovers_from_terminated_connections_without_a_traceback(
    pg_store: Store, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    results = run_poller(pg_store, 2, {1: lambda: (hold_pooled_connections(pg_store), terminate(app_name))})

    assert results[0].baseline and results[0].fetched > 0
    assert results[1].error is None and not results[1].baseline
    no_traceback(caplog)
    assert not lines_of(caplog, "poll_crashed")


def test_the_poller_logs_one_line_while_the_database_is_down_and_polls_again_after(
    pg_schema_url: str, app_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = urlsplit(PG_URL)
    with TcpProxy((server.hostname or "127.0.0.1", server.port or 5432)) as proxy:
        url = with_app_name(pg_schema_url, app_name).replace(
            f"{server.hostname}:{server.port or 5432}", f"127.0.0.1:{proxy.port}", 1)
        assert str(proxy.port) in url
        store = open_store(url)
        store.migrate()
        failed = threading.Event()

        class Watch(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "event=poll_failed" in record.getMessage():
                    failed.set()

        watch = Watch()
        logging.getLogger("bot.poller").addHandler(watch)
        try:
            def outage() -> None:  # after the first cycle: down until a cycle has failed, then back
                proxy.down()
                assert failed.wait(WAIT), "no cycle failed while the database was down"
                proxy.up()

            results = run_poller(store, 2, {1: lambda: threading.Thread(target=outage, daemon=True).start()})
        finally:
            logging.getLogger("bot.poller").removeHandler(watch)
            store.close()

    assert results[0].baseline and results[1].error is None
    no_traceback(caplog)
    assert not lines_of(caplog, "poll_crashed")
    failures = lines_of(caplog, "poll_failed")
    assert failures and all("reason=database" in line and "\n" not in line for line in failures)
