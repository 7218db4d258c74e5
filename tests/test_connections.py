"""Slow and idle clients cost nobody else anything (issue 53, point 2): more connections than the limit, each
sending a request line and a Host header and nothing more, and /healthz and a signed /slack/events request
still answer within Slack's 3 s (a real `serve`); a request's head and body must arrive in time, an idle
connection is closed, and a request being answered is never closed to make room (in process, with small
limits). Every connection a test opens is closed by the test; none waits longer than its socket timeout."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.connections import MAX_CONNECTIONS, REQUEST_SECONDS, ConnectionLimits
from bot.server import create_http_server, run_until, wake
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import ROOT, SECRET, TOKEN, ServeProcess, http

SLACK_WAITS = 3.0  # Slack's deadline for an answer
SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: bot.test\r\n"  # and never the blank line that ends a head


@contextlib.contextmanager
def slow_clients(port: int, count: int, first: bytes = SLOW_HEAD) -> Iterator[list[socket.socket]]:
    """`count` connections to `port` that each send `first` and then nothing; all closed on the way out."""
    opened: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            if first:
                sock.sendall(first)
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


def closed_by_server(sock: socket.socket, within: float, trickle: bytes = b"") -> bool:
    """Whether the server closes `sock` within `within` seconds (sending `trickle` every 0.2 s meanwhile)."""
    deadline = time.monotonic() + within
    sock.settimeout(0.2)
    while time.monotonic() < deadline:
        try:
            if trickle:
                sock.sendall(trickle)
            if sock.recv(1024) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:  # reset, or a broken pipe on the next byte: closed
            return True
    return False


# --- the real `serve` ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    home = tmp_path_factory.mktemp("connections")
    with FakeSlack() as slack:
        env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
               "DATABASE_URL": f"sqlite:///{home / 'bot.db'}",
               "FEED_URL": str(ROOT / "tests/data/apple_ml_rss.xml"), "POLL_INTERVAL": "0"}
        with ServeProcess(env, Path(home)) as process:
            yield process


def test_more_slow_clients_than_the_limit_cost_health_and_slack_nothing(serve: ServeProcess) -> None:
    """Waitress alone (100 connections, 120 s idle): 101 such clients made both time out for 15 s."""
    with slow_clients(serve.port, MAX_CONNECTIONS + 20):
        started = time.monotonic()
        status, _ = http("GET", serve.base + "/healthz", timeout=SLACK_WAITS)
        assert status == 200
        status, answer = serve.command("help")
        assert status == 200 and "/mlresearch" in answer["text"]
        # answered while every slow client was still within its deadline: room was made, not waited for
        assert time.monotonic() - started < REQUEST_SECONDS
    deadline = time.monotonic() + 10  # the line is written at the next check (each second)
    while "event=connections_closed" not in serve.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "event=connections_closed" in serve.output() and "Traceback" not in serve.output()


# --- in process, small limits ----------------------------------------------------------------------------


@contextlib.contextmanager
def server(app: Any, limits: ConnectionLimits) -> Iterator[int]:
    bound = create_http_server(app, 0, host="127.0.0.1", limits=limits)
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(bound, stopping), daemon=True)
    thread.start()
    try:
        yield int(bound.effective_port)
    finally:
        stopping.set()
        wake(bound)
        thread.join(10)


def ok(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def test_a_request_whose_head_trickles_in_is_closed_at_its_deadline() -> None:
    limits = ConnectionLimits(request_seconds=1.0)
    with server(ok, limits) as port, slow_clients(port, 1, b"GET / HTTP/1.1\r\n") as (sock,):
        assert closed_by_server(sock, within=15, trickle=b"X")  # one byte each 0.2 s: never idle


def test_a_body_that_never_arrives_is_closed_at_its_deadline() -> None:
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"x" * 10
    with server(ok, ConnectionLimits(request_seconds=1.0)) as port, \
            slow_clients(port, 1, head) as (sock,):
        assert closed_by_server(sock, within=15)


def test_an_idle_connection_is_closed_after_the_idle_time() -> None:
    with server(ok, ConnectionLimits(idle_seconds=1)) as port, \
            slow_clients(port, 1, b"") as (sock,):
        assert closed_by_server(sock, within=15)


def test_a_request_being_answered_is_never_closed_to_make_room() -> None:
    """One connection of two allowed is answering a slow request; a flood of slow clients takes turns in the
    other, and a quick request still gets in (the second thread answers it); then the slow request gets its
    answer."""
    entered, release = threading.Event(), threading.Event()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ["PATH_INFO"] == "/slow":
            entered.set()
            release.wait(30)
        return ok(environ, start_response)

    answers: list[int] = []
    with server(app, ConnectionLimits(max_connections=2)) as port:
        base = f"http://127.0.0.1:{port}"
        slow = threading.Thread(target=lambda: answers.append(http("GET", base + "/slow", timeout=30)[0]))
        slow.start()
        try:
            assert entered.wait(10)
            with slow_clients(port, 10):
                assert http("GET", base + "/fast", timeout=SLACK_WAITS)[0] == 200
        finally:
            release.set()
            slow.join(30)
    assert answers == [200]
