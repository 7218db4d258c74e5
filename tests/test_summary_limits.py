"""The optional summary endpoint at the network edge: its answer is read in the calling thread, capped at
1 MiB and cut at the deadline, so a slow or endless endpoint costs no thread and no memory (issue 11)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from bot.search.index import SearchIndex
from bot.summarize import MAX_RESPONSE_BYTES, Summarizer
from tests.fakes.archive import filled_store
from tests.fakes.loopback import Loopback


class EndlessEndpoint(Loopback):
    """Answers every POST with 200 and a body that never ends: `chunk` bytes every `pause` seconds."""

    def __init__(self, *, chunk: int, pause: float) -> None:
        super().__init__(name="endless-endpoint")
        self.chunk, self.pause = chunk, pause
        self.done = threading.Event()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stopping(self) -> None:
        self.done.set()

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()  # HTTP/1.0: the body runs until the connection closes
        block = b'{"choices": [' + b" " * self.chunk
        try:
            while not self.done.is_set():
                handler.wfile.write(block[: self.chunk])
                handler.wfile.flush()
                if self.pause:
                    self.done.wait(self.pause)
        except OSError:  # the client gave up, as it should
            pass


@pytest.fixture
def index(tmp_path: Path) -> SearchIndex:
    return SearchIndex(filled_store(tmp_path))


@pytest.fixture
def fast() -> Iterator[EndlessEndpoint]:
    with EndlessEndpoint(chunk=64 * 1024, pause=0) as endpoint:
        yield endpoint


@pytest.fixture
def trickle() -> Iterator[EndlessEndpoint]:
    with EndlessEndpoint(chunk=16, pause=0.05) as endpoint:
        yield endpoint


def ours(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads started since `before` and still alive, other than the stand-in's request handlers."""
    return [
        t for t in threading.enumerate()
        if t not in before and t.is_alive() and "process_request" not in t.name
    ]


def fallback_reason(caplog: pytest.LogCaptureFixture) -> str:
    (record,) = [r for r in caplog.records if "summary_fallback" in r.getMessage()]
    return record.getMessage()


def test_an_endless_answer_stops_at_the_cap_in_the_calling_thread(
    index: SearchIndex, fast: EndlessEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    before = set(threading.enumerate())
    with caplog.at_level(logging.WARNING, logger="bot.summarize"):
        summary = Summarizer(fast.url, timeout=30).summarize(index, "diffusion models")
    assert summary is not None and summary.method == "extractive"
    reason = fallback_reason(caplog)
    assert f"{MAX_RESPONSE_BYTES}-byte cap" in reason and "\n" not in reason
    assert ours(before) == []


def test_a_trickling_answer_stops_at_the_deadline_and_leaves_no_thread(
    index: SearchIndex, trickle: EndlessEndpoint, caplog: pytest.LogCaptureFixture
) -> None:
    before = set(threading.enumerate())
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="bot.summarize"):
        summary = Summarizer(trickle.url, timeout=1.0).summarize(index, "diffusion models")
    assert time.monotonic() - started < 5
    assert summary is not None and summary.method == "extractive"
    assert "1 s" in fallback_reason(caplog)
    assert ours(before) == []
