"""The lifecycle every loopback stand-in shares: a ThreadingHTTPServer on 127.0.0.1 (a random port), served
from a daemon thread, usable as a context manager. Handlers find the stand-in that owns them as
`self.server.owner`."""

from __future__ import annotations

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class Delegate(BaseHTTPRequestHandler):
    """Hands every GET and POST to the owning stand-in's `_serve(handler)`; a caller gone mid-answer (a worker
    SIGKILLed in the middle of a call) ends the request quietly, as the feed stand-in's do."""

    server: Any

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.server.owner._serve(self)

    do_GET = do_POST

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass


class Loopback:
    """Subclasses call `super().__init__(handler)` (by default `Delegate`: they define `_serve`) and read
    `self.port`; `stop()` is idempotent."""

    def __init__(self, handler: type[BaseHTTPRequestHandler] = Delegate, *, name: str = "loopback") -> None:
        self._httpd: ThreadingHTTPServer | None = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self  # type: ignore[attr-defined]
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, name=name, daemon=True
        )

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
            self._thread.join(5)

    def stopping(self) -> None:
        """Called first in `stop()`: release anything a handler may be waiting on."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
