"""A tiny local HTTP endpoint that records what is sent to it: Slack's `response_url`s in the app tests, and
an OpenAI-compatible chat-completions stand-in (slow, if asked) for the summarize path.

    with Recorder() as hooks:
        url = hooks.url("/commands/1")              # use as a slash command's response_url
        ...
        hooks.wait_for(lambda r: len(r.requests) >= 1)
        hooks.requests[0].json                      # what Bolt's respond() sent
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.loopback import Loopback


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body or b"null")


# A responder gets the request and returns (status, JSON answer).
Responder = Callable[[Received], tuple[int, Any]]


def ok_responder(_request: Received) -> tuple[int, Any]:
    return 200, "ok"


class Recorder(Loopback):
    def __init__(self, responder: Responder = ok_responder, *, delay: float = 0.0) -> None:
        super().__init__(name="recorder")
        self.responder = responder
        self.delay = delay
        self.requests: list[Received] = []
        self._cond = threading.Condition()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Received]:
        with self._cond:
            return [r for r in self.requests if r.path == path]

    def wait_for(self, predicate: Callable[[Recorder], bool], timeout: float = 10.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    def only(self, path: str, timeout: float = 10.0) -> Received:
        """The one request to `path`, once it has come; fails if none came within `timeout` seconds, or more
        than one had come by then."""
        assert self.wait_for(lambda r: bool(r.to(path)), timeout), f"nothing was sent to {path}"
        found = self.to(path)
        assert len(found) == 1, f"{len(found)} requests to {path}"
        return found[0]

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        received = Received(handler.command, handler.path, dict(handler.headers.items()),
                            handler.rfile.read(length) if length else b"", time.monotonic())
        with self._cond:
            self.requests.append(received)
            self._cond.notify_all()
        if self.delay:
            time.sleep(self.delay)
        status, answer = self.responder(received)
        body = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain" if isinstance(answer, str) else "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)




def chat_completion(content: str) -> Responder:
    """A responder answering every request as an OpenAI-compatible chat completion with `content`."""

    def respond(_request: Received) -> tuple[int, Any]:
        return 200, {"id": "cmpl-test", "object": "chat.completion",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                  "finish_reason": "stop"}]}

    return respond
