"""A scripted HTTP server on loopback for feed tests, and its pytest fixture (`feed_server`).

    server.feed("/rss.xml", body, etag='"v1"')         # 200; If-None-Match / If-Modified-Since -> 304
    server.route("/broken", Reply(status=500))
    server.route("/seq", [Reply(...), Reply(...)])     # one reply per request, the last one repeats
    server.redirect("/old", "/rss.xml", hops=3)        # /old -> /old/1 -> /old/2 -> /rss.xml
    server.url("/rss.xml")
    server.requests                                     # [Request(method, path, headers)], in order

A `Reply` can delay before its headers (`delay`), trickle its body (`chunk_delay`), gzip it (`gzip`),
stream it chunked without a Content-Length (`stream`), or stream forever (`endless`) so a size cap must
cut it off. `server.bytes_sent[path]` says how much of a body went out.
"""

from __future__ import annotations

import contextlib
import gzip as gzip_module
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.fakes.loopback import Loopback


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    etag: str | None = None
    last_modified: str | None = None
    content_type: str = "application/rss+xml; charset=utf-8"
    delay: float = 0.0
    chunk_delay: float = 0.0
    chunk_size: int = 64 * 1024
    gzip: bool = False
    stream: bool = False
    endless: bool = False


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


Route = Reply | list[Reply] | Callable[[Request], Reply]


class FeedServer(Loopback):
    def __init__(self) -> None:
        super().__init__(_handler_for(self), name="feed-server")
        self._routes: dict[str, Route] = {}
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        self.bytes_sent: dict[str, int] = {}
        self.closing = threading.Event()

    # scripting --------------------------------------------------------------------------------------

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def route(self, path: str, reply: Route) -> str:
        with self._lock:
            self._routes[path] = reply
            self._counts[path] = 0
        return self.url(path)

    def feed(
        self, path: str, body: bytes, *, etag: str | None = None, last_modified: str | None = None, **kw: Any
    ) -> str:
        return self.route(path, Reply(body=body, etag=etag, last_modified=last_modified, **kw))

    def redirect(self, path: str, target: str, *, hops: int = 1, status: int = 302) -> str:
        """A chain of `hops` redirects from `path` ending at `target`."""
        chain = [path] + [f"{path}/{i}" for i in range(1, hops)] + [target]
        for here, there in zip(chain, chain[1:], strict=False):
            self.route(here, Reply(status=status, headers={"Location": there}))
        return self.url(path)

    def requests_to(self, path: str) -> list[Request]:
        return [r for r in self.requests if r.path == path]

    def stopping(self) -> None:
        self.closing.set()

    # serving ----------------------------------------------------------------------------------------

    def _reply_for(self, request: Request) -> Reply | None:
        with self._lock:
            self.requests.append(request)
            route = self._routes.get(request.path)
            count = self._counts.get(request.path, 0)
            self._counts[request.path] = count + 1
        if route is None:
            return None
        if isinstance(route, list):
            return route[min(count, len(route) - 1)]
        if callable(route):
            return route(request)
        return route


def _handler_for(server: FeedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence the default stderr log
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            request = Request("GET", self.path, dict(self.headers.items()))
            reply = server._reply_for(request)
            if reply is None:
                reply = Reply(status=404, body=b"not found", content_type="text/plain")
            with contextlib.suppress(BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                self._send(request, reply)

        def _send(self, request: Request, reply: Reply) -> None:
            if reply.delay and server.closing.wait(reply.delay):
                return
            if reply.status == 200 and _not_modified(request, reply):
                self.send_response(304)
                self._validators(reply)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = reply.body
            self.send_response(reply.status)
            if body or reply.endless or reply.status < 300:
                self.send_header("Content-Type", reply.content_type)
            self._validators(reply)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.gzip:
                body = gzip_module.compress(body)
                self.send_header("Content-Encoding", "gzip")
            if reply.stream or reply.endless or reply.chunk_delay:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                sent = 0
                for chunk in _chunks(body, reply):
                    if server.closing.is_set():
                        return
                    self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.flush()
                    sent += len(chunk)
                    server.bytes_sent[request.path] = sent
                    if reply.chunk_delay and server.closing.wait(reply.chunk_delay):
                        return
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                server.bytes_sent[request.path] = len(body)

        def _validators(self, reply: Reply) -> None:
            if reply.etag:
                self.send_header("ETag", reply.etag)
            if reply.last_modified:
                self.send_header("Last-Modified", reply.last_modified)

    return Handler


def _not_modified(request: Request, reply: Reply) -> bool:
    inm = request.header("If-None-Match")
    if reply.etag and inm is not None:
        return reply.etag in [t.strip() for t in inm.split(",")] or inm.strip() == "*"
    ims = request.header("If-Modified-Since")
    return bool(reply.last_modified and ims is not None and ims == reply.last_modified)


def _chunks(body: bytes, reply: Reply) -> Iterator[bytes]:
    size = max(1, reply.chunk_size)
    if reply.endless:
        block = (body or b"<rss>") * (size // max(1, len(body or b"<rss>")) + 1)
        while True:
            yield block[:size]
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.fixture
def feed_server() -> Iterator[FeedServer]:
    """A started FeedServer on 127.0.0.1 (a fresh port), stopped after the test."""
    with FeedServer() as server:
        yield server
