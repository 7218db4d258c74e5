"""One request to the model endpoint, bounded from outside: a deadline over all of it (connecting, the headers
and every read, however the bytes trickle), a cap on the bytes read and on one line, and a stop signal. A
watchdog thread shuts the connection down the moment the deadline passes or the stop is set, so even a read
waiting for bytes that never come ends then, and the endpoint sees its connection close (it stops writing,
and spending tokens). Every open request is listed in its `ModelStreams` (the summarizer's): `close_all()`
ends them all at once, and refuses new ones (serve calls it when it stops).

    with summarizer.streams.post(client, url, body, headers, seconds=20, max_bytes=256 * 1024,
                                 stop=stop) as reading:
        for line in reading.lines(16 * 1024):    # b'data: {...}', without its line end
            ...
        # or reading.body(): the whole body, within the same caps

Each read is checked as it arrives, never a whole line at a time: a line with no newline passing its cap is
refused after one more read (at most 64 KiB), so memory stays flat whatever the endpoint sends.

What ends a request, as the caller sees it (each a SummaryError with a one-line message):

    the deadline passed         "no answer within 20 s"
    the stop signal set         SummaryStopped "the answer was stopped"
    close_all()                 "the server is stopping"
    past `max_bytes` in all     "the summary endpoint's answer passed the 262144-byte cap"
    one line past its cap       "a line of the summary endpoint's answer passed the 16384-byte cap"
    an HTTP status but 200      "HTTP 500 from the summary endpoint"
    a compressed body           "the summary endpoint compressed its answer (gzip)"
    the network failing        "<the httpx error's name>: <its message>"
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from bot.errors import SummaryError, SummaryStopped

if TYPE_CHECKING:
    import httpx

WATCH_EVERY = 0.1  # seconds between the watchdog's looks at the clock and the stop signal
_LINE_END = re.compile(rb"\r\n|\r|\n")
_SHOWN = "the summary endpoint"


class ModelStreams:
    """The requests to the model endpoint open now (one registry per summarizer, shared by its threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[_Request] = set()
        self._closed = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def close_all(self) -> int:
        """End every open request now (each raises "the server is stopping" in its thread) and refuse new
        ones; how many were open."""
        with self._lock:
            self._closed = True
            ending = list(self._open)
        for request in ending:
            request.cut("shutdown")
        return len(ending)

    @contextmanager
    def post(self, client: httpx.Client | None, url: str, body: dict[str, Any], headers: dict[str, str], *,
             seconds: float, max_bytes: int, stop: threading.Event | None = None) -> Iterator[Reading]:
        """POST `body` as JSON and hand over its answer (200 only) to be read (see the module docstring);
        `client` None: a client of its own, closed after."""
        import httpx  # imported when a model is first asked, not when `serve` starts

        request = _Request(seconds, stop)
        with self._lock:
            if self._closed:
                raise SummaryError("the server is stopping")
            self._open.add(request)
        request.watch()
        try:
            request.check()
            with _owned(client) as using:
                sent = {**headers, "Accept-Encoding": "identity"}
                with using.stream("POST", url, json=body, headers=sent, timeout=request.left(),
                                  extensions={"trace": request.trace}) as response:
                    request.attach(response.extensions.get("network_stream"))
                    request.check()
                    if response.status_code != 200:
                        raise SummaryError(f"HTTP {response.status_code} from {_SHOWN}")
                    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
                    if encoding not in ("", "identity"):
                        raise SummaryError(f"{_SHOWN} compressed its answer ({encoding[:20]})")
                    yield Reading(request, response, max_bytes)
        except Exception as exc:  # noqa: BLE001 - every failure becomes one SummaryError line
            raise request.failure(exc, timed_out=isinstance(exc, httpx.TimeoutException)) from None
        finally:
            request.finish()
            with self._lock:
                self._open.discard(request)


class Reading:
    """An open answer's body, read one network read at a time; `read` counts the bytes so far."""

    def __init__(self, request: _Request, response: httpx.Response, max_bytes: int) -> None:
        self._request = request
        self._response = response
        self.max_bytes = max_bytes
        self.read = 0

    def chunks(self) -> Iterator[bytes]:
        """The body as it arrives (no decoding), each read checked against the deadline, the stop and the cap;
        the stream's end is checked too (a connection shut down by the watchdog ends a body that has no
        length)."""
        import httpx

        # each read waits at most what is left now (httpcore reads the timeout when the body is first asked
        # for); the watchdog ends a read at the deadline whatever this says
        self._response.request.extensions["timeout"] = httpx.Timeout(self._request.left()).as_dict()
        for chunk in self._response.iter_raw():
            self._request.check()
            self.read += len(chunk)
            if self.read > self.max_bytes:
                raise SummaryError(f"{_SHOWN}'s answer passed the {self.max_bytes}-byte cap")
            yield chunk
        self._request.check()

    def lines(self, max_line: int) -> Iterator[bytes]:
        """The body's lines without their ends (\\n, \\r\\n or \\r); a line (or a part with no line end yet)
        past `max_line` bytes is refused as soon as it is read."""
        pending = b""
        for chunk in self.chunks():
            parts = _LINE_END.split(pending + chunk)
            pending = parts.pop()
            for line in [*parts, pending]:
                if len(line) > max_line:
                    raise SummaryError(f"a line of {_SHOWN}'s answer passed the {max_line}-byte cap")
            yield from parts
        if pending:
            yield pending

    def body(self) -> bytes:
        return b"".join(self.chunks())


class _Request:
    """One request's deadline, stop signal and connection, and the watchdog that shuts the connection down."""

    def __init__(self, seconds: float, stop: threading.Event | None) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.stop = stop
        self.reason: str | None = None  # why it was cut: "stopped", "deadline", "shutdown"
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name="model-watchdog", daemon=True)

    # the watchdog -----------------------------------------------------------------------------------------

    def watch(self) -> None:
        self._watchdog.start()

    def finish(self) -> None:
        self._done.set()
        if self._watchdog.is_alive() and self._watchdog is not threading.current_thread():
            self._watchdog.join()

    def _watch(self) -> None:
        while not self._done.wait(max(0.0, min(WATCH_EVERY, self.at - time.monotonic()))):
            reason = self.reason or self.due()
            if reason is not None:
                self.cut(reason)
                return

    def due(self) -> str | None:
        if self.stop is not None and self.stop.is_set():
            return "stopped"
        if time.monotonic() >= self.at:
            return "deadline"
        return None

    def cut(self, reason: str) -> None:
        """Record why, and shut the connection down (a read waiting on it returns at once)."""
        with self._lock:
            if self.reason is None:
                self.reason = reason
            for sock in self._sockets:
                _shut(sock)

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: the connection's socket as soon as it is connected, before any header."""
        if event == "connection.connect_tcp.complete":
            self.attach(info.get("return_value"))

    def attach(self, stream: Any) -> None:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if sock not in self._sockets:
                self._sockets.append(sock)
            if self.reason is not None:
                _shut(sock)

    # the reader's side ------------------------------------------------------------------------------------

    def check(self) -> None:
        """Raise the error that ends this request, if any has."""
        reason = self.reason or self.due()
        if reason is not None:
            self.cut(reason)
            raise self.ended()

    def left(self) -> float:
        self.check()
        return max(0.001, self.at - time.monotonic())

    def ended(self) -> SummaryError:
        if self.reason == "stopped":
            return SummaryStopped("the answer was stopped")
        if self.reason == "shutdown":
            return SummaryError("the server is stopping")
        return SummaryError(f"no answer within {self.seconds:g} s")

    def failure(self, exc: Exception, *, timed_out: bool) -> SummaryError:
        """`exc` as one SummaryError line: why the request was cut, when it was (a shut connection's error
        says nothing true), else what failed."""
        if self.reason is not None or self.due() is not None:
            self.cut(self.reason or self.due() or "deadline")
            return self.ended()
        if isinstance(exc, SummaryError):
            return exc
        if timed_out:
            return SummaryError(f"no answer within {self.seconds:g} s")
        return SummaryError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}")


@contextmanager
def _owned(client: httpx.Client | None) -> Iterator[httpx.Client]:
    import httpx

    if client is not None:
        yield client
        return
    with httpx.Client() as own:
        yield own


def _shut(sock: socket.socket) -> None:
    # the plain socket's shutdown, also for a TLS socket (whose own shutdown unwraps it under the reader)
    with contextlib.suppress(OSError, ValueError):  # already closed: nothing to end
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
