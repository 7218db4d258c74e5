"""A local stand-in for Slack's Socket Mode endpoint: the WebSocket server (RFC 6455, text frames, ping/pong,
close) that `apps.connections.open` hands out, spoken to by slack_sdk's own Socket Mode client over loopback.

    with FakeSlack() as slack, FakeSocketMode() as socket_mode:
        slack.handlers["apps.connections.open"] = socket_mode.open_connection
        ... start the app with SLACK_APP_TOKEN set ...
        socket_mode.wait_connected()
        socket_mode.send({"envelope_id": "1", "type": "slash_commands", "payload": {...}})
        socket_mode.receive()                                    # {"envelope_id": "1", "payload": {...}}

Envelopes go to the most recent connection; every text frame a client sends is queued for `receive`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import queue
import struct
import threading
from contextlib import suppress
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import Loopback

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's handshake constant
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA


class _Upgrade(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        key = self.headers.get("Sec-WebSocket-Key", "")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not key:
            self.send_error(400)
            return
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.close_connection = True
        self.server.owner._serve_frames(self)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass


class FakeSocketMode(Loopback):
    def __init__(self) -> None:
        super().__init__(_Upgrade, name="fake-socket-mode")
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()
        self.connections = 0
        self._current: _Upgrade | None = None
        self._lock = threading.Condition()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/link/?ticket=fake-ticket"

    def open_connection(self, call: Any) -> dict[str, Any]:
        """A FakeSlack handler for `apps.connections.open`."""
        return {"ok": True, "url": self.url}

    def wait_connected(self, timeout: float = 10.0) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self._current is not None, timeout):
                raise AssertionError("no Socket Mode client connected")

    def send(self, envelope: dict[str, Any]) -> None:
        with self._lock:
            if self._current is None:
                raise AssertionError("no Socket Mode client is connected")
            _write_frame(self._current, TEXT, json.dumps(envelope).encode())

    def receive(self, timeout: float = 10.0) -> dict[str, Any]:
        return self.received.get(timeout=timeout)

    def stopping(self) -> None:
        with self._lock, suppress(OSError):  # the client may have gone already
            if self._current is not None:
                _write_frame(self._current, CLOSE, struct.pack("!H", 1001))

    def _serve_frames(self, conn: _Upgrade) -> None:
        with self._lock:
            self._current = conn
            self.connections += 1
            self._lock.notify_all()
        try:
            while True:
                frame = _read_frame(conn)
                if frame is None:
                    return
                opcode, data = frame
                if opcode == TEXT:
                    self.received.put(json.loads(data))
                elif opcode == PING:
                    with self._lock:
                        _write_frame(conn, PONG, data)
                elif opcode == CLOSE:
                    return
        except OSError:
            return
        finally:
            with self._lock:
                if self._current is conn:
                    self._current = None


def _read_frame(conn: BaseHTTPRequestHandler) -> tuple[int, bytes] | None:
    """One whole frame from the client (clients mask every frame), or None at the end of the stream."""
    head = conn.rfile.read(2)
    if len(head) < 2:
        return None
    opcode, length = head[0] & 0x0F, head[1] & 0x7F
    if length == 126:
        (length,) = struct.unpack("!H", conn.rfile.read(2))
    elif length == 127:
        (length,) = struct.unpack("!Q", conn.rfile.read(8))
    mask = conn.rfile.read(4) if head[1] & 0x80 else b"\0\0\0\0"
    data = conn.rfile.read(length)
    return opcode, bytes(byte ^ mask[i % 4] for i, byte in enumerate(data))


def _write_frame(conn: BaseHTTPRequestHandler, opcode: int, data: bytes) -> None:
    """One unmasked frame to the client (servers never mask)."""
    if len(data) <= 125:
        head = struct.pack("!BB", 0x80 | opcode, len(data))
    elif len(data) <= 0xFFFF:
        head = struct.pack("!BBH", 0x80 | opcode, 126, len(data))
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, len(data))
    conn.wfile.write(head + data)
