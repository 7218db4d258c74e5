"""A TCP proxy on 127.0.0.1 in front of a real server (the local PostgreSQL), to take the server away and
bring it back as a restart does: `down()` ends every connection through it and refuses new ones (each is
closed at once), `up()` lets them through again."""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from types import TracebackType


class TcpProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._up = True
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)

    def __enter__(self) -> TcpProxy:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()
        with suppress(OSError):
            self._listener.close()
        self._thread.join(10)

    def down(self) -> None:
        with self._lock:
            self._up = False
            ends, self._open = self._open, []
        for end in ends:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def up(self) -> None:
        with self._lock:
            self._up = True

    def _accept(self) -> None:
        while True:
            try:
                client, _address = self._listener.accept()
            except OSError:
                return
            with self._lock:
                up = self._up
            if not up:
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
