"""A local stand-in for an OpenAI-compatible chat-completions endpoint, on 127.0.0.1 (a random port).

    with FakeOpenAI(content="- Point [1]") as api:
        Summarizer(api.url, "key", "model").summarize(index, "topic")
        api.requests  # [{"path", "headers", "body"}] as received

Set `content` (the assistant message, or a function of the request's JSON body that writes it, as a model
following what the prompt says would), `status` (an HTTP error instead), `raw` (a body sent as is), or
`delay` (seconds to wait before answering) to script it; it answers every request the same way. A POST to
`.../embeddings` gets an embeddings answer instead: one vector of EMBEDDING_DIM per input, from `embed`
(default: `letters`, counts of the letters a-h, so texts sharing letters are near).

A request with `"stream": true` gets a server-sent event stream instead: `content` cut into `chunk_chars`
pieces, one `data: {chat.completion.chunk}` event each, `pace` seconds apart, then a finish reason and
`data: [DONE]`. Script a broken stream with `stream_lines` (the events' data sent as is, then the connection
closes with no `[DONE]`), or `cut_after` (close the connection after that many content events), or
`stall_after` (after that many content events send nothing more, holding the connection open until the
client closes it or the stand-in stops). Script an endpoint that never ends a line with `drip` (send `data: `
and then one byte every `drip` seconds, no newline, for at most `drip_for` seconds) or `flood` (send `data: `
and then `flood` bytes at once, no newline). `sent` counts the bytes of events written; `gave_up` is set when
a client closes a stream's connection while the stand-in is still sending or holding it.
"""

from __future__ import annotations

import json
import re
import select
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeOpenAI:
    def __init__(
        self, content: str | Callable[[dict[str, Any]], str] = "", *, status: int = 200,
        raw: bytes | None = None, delay: float = 0,
        embed: Callable[[str], list[float]] | None = None, chunk_chars: int = 12, pace: float = 0.0,
        stream_lines: list[str] | None = None, cut_after: int | None = None, stall_after: int | None = None,
        drip: float | None = None, drip_for: float = 60.0, flood: int | None = None,
    ) -> None:
        self.stall_after = stall_after
        self.drip, self.drip_for, self.flood = drip, drip_for, flood
        self.sent = 0
        self.chunk_chars = chunk_chars
        self.pace = pace
        self.stream_lines = stream_lines
        self.cut_after = cut_after
        self.content = content
        self.embed = embed or letters
        self.status = status
        self.raw = raw
        self.delay = delay
        self.requests: list[dict[str, Any]] = []
        self.released = threading.Event()  # set on exit, so a delayed answer stops waiting
        self.gave_up = threading.Event()  # set when a client closed a stream before its end
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                fake.requests.append(
                    {"path": self.path, "headers": dict(self.headers), "body": json.loads(body or b"{}")}
                )
                if fake.delay:
                    fake.released.wait(fake.delay)
                if json.loads(body or b"{}").get("stream") and fake.status == 200 and fake.raw is None:
                    fake._stream(self, fake.written(json.loads(body or b"{}")))
                    return
                if fake.raw is not None:
                    payload = fake.raw
                elif fake.status != 200:
                    payload = json.dumps({"error": {"message": "scripted failure"}}).encode()
                elif self.path.endswith("/embeddings"):
                    inputs = json.loads(body or b"{}").get("input") or []
                    payload = json.dumps({"object": "list", "model": "stand-in", "data": [
                        {"object": "embedding", "index": n, "embedding": fake.embed(text)}
                        for n, text in enumerate(inputs)
                    ]}).encode()
                else:
                    payload = json.dumps(
                        {
                            "id": "chatcmpl-test",
                            "object": "chat.completion",
                            "created": int(time.time()),
                            "model": "stand-in",
                            "choices": [
                                {
                                    "index": 0,
                                    "message": {"role": "assistant",
                                                "content": fake.written(json.loads(body or b"{}"))},
                                    "finish_reason": "stop",
                                }
                            ],
                        }
                    ).encode()
                try:
                    self.send_response(fake.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:  # the client gave up (a timeout test)
                    pass

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def written(self, body: dict[str, Any]) -> str:
        return self.content(body) if callable(self.content) else self.content

    def _stream(self, handler: BaseHTTPRequestHandler, content: str) -> None:
        """Answer with an event stream (see the module docstring); HTTP/1.0: its end is the connection's."""
        def send(data: bytes) -> None:
            handler.wfile.write(data)
            handler.wfile.flush()
            self.sent += len(data)

        def event(data: str) -> None:
            send(f"data: {data}\n\n".encode())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return json.dumps({"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0,
                               "model": "stand-in",
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

        try:
            handler.send_response(200)
            handler.send_header("Content-Type", "text/event-stream")
            handler.end_headers()
            if self.drip is not None:
                send(b"data: ")
                until = time.monotonic() + self.drip_for
                while time.monotonic() < until and not self.released.wait(self.drip):
                    if _closed_by_peer(handler):
                        self.gave_up.set()
                        return
                    send(b"x")
                return
            if self.flood is not None:
                send(b"data: ")
                block = b"x" * 65536
                left = self.flood
                while left > 0:
                    send(block[:left])
                    left -= len(block)
                return
            if self.stream_lines is not None:
                for data in self.stream_lines:
                    event(data)
                return
            pieces = [content[i : i + self.chunk_chars] for i in range(0, len(content), self.chunk_chars)]
            event(chunk({"role": "assistant", "content": ""}))
            for n, piece in enumerate(pieces):
                if self.cut_after is not None and n >= self.cut_after:
                    return  # the body ends: no finish reason, no [DONE]
                if self.stall_after is not None and n >= self.stall_after:
                    while not self.released.wait(0.02):  # nothing more is sent
                        if _closed_by_peer(handler):
                            self.gave_up.set()
                            return
                    return
                if self.pace:
                    self.released.wait(self.pace)
                event(chunk({"content": piece}))
            event(chunk({}, "stop"))
            event("[DONE]")
        except OSError:  # the client gave up
            self.gave_up.set()

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def _closed_by_peer(handler: BaseHTTPRequestHandler) -> bool:
    """Whether the client has closed (or shut down) its side of the connection: readable, and at its end."""
    sock = handler.connection
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


EMBEDDING_DIM = 8


def fences(prompt: str) -> dict[str, str]:
    """The fenced parts of a prompt (bot.modeltext.fenced), by label: {"TOPIC": ..., "ITEM 1": ...}; every
    fence shares one token."""
    tokens = set(re.findall(r"^<<<[A-Z]+(?: \d+)? ([0-9a-f]{8})>>>$", prompt, re.MULTILINE))
    assert len(tokens) == 1, tokens
    token = re.escape(tokens.pop())
    found = re.findall(rf"^<<<([A-Z]+(?: \d+)?) {token}>>>\n(.*?)\n<<<END \1 {token}>>>$", prompt,
                       re.MULTILINE | re.DOTALL)
    return dict(found)


def letters(text: str) -> list[float]:
    """A stand-in embedding: how often each of the letters a-h occurs (plus one, so none is all zero)."""
    lowered = text.lower()
    return [float(lowered.count(c)) + (1.0 if c == "a" else 0.0) for c in "abcdefgh"][:EMBEDDING_DIM]
