"""Talking to `mlresearch-bot serve` as Slack does: signed requests (v0 HMAC-SHA256 over
`v0:<timestamp>:<body>`) in Slack's encodings, and a helper that runs `python -m bot serve` as a subprocess
(`wsgi_post` sends an event into the serve Router in this process).

    with ServeProcess(env) as bot:
        status, answer = bot.command("search diffusion", response_url=hooks.url("/r/1"))
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

SECRET = "test-signing-secret-8f2a"
TOKEN = "xoxb-test-token"
TEAM = "T0FAKE"
APP_ID = "A0MLRESEARCH"
ROOT = Path(__file__).resolve().parents[2]
CONFIG_VARIABLES = (
    "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL", "FEED_URL", "DATABASE_URL",
    "POLL_INTERVAL", "PORT", "LOG_LEVEL", "SUMMARY_API_URL", "SUMMARY_API_KEY", "SUMMARY_MODEL",
    "SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET", "SLACK_SCOPES",
)


def signature(body: bytes, timestamp: str, secret: str = SECRET) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(
    body: bytes, content_type: str, *, secret: str = SECRET, age: float = 0.0
) -> dict[str, str]:
    timestamp = str(int(time.time() - age))
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature(body, timestamp, secret)}


def command_body(text: str, *, channel: str = "C0GENERAL", user: str = "U0ALICE", team: str = TEAM,
                 response_url: str = "http://127.0.0.1:9/unused", channel_name: str = "general") -> bytes:
    """A slash command exactly as Slack posts it (application/x-www-form-urlencoded, every field)."""
    return urlencode({
        "token": "verification-token-unused", "team_id": team, "team_domain": "fake",
        "channel_id": channel, "channel_name": channel_name, "user_id": user, "user_name": "alice",
        "command": "/mlresearch", "text": text, "api_app_id": APP_ID, "is_enterprise_install": "false",
        "response_url": response_url, "trigger_id": "1337.42.abcdef",
    }).encode()


def block_action_body(action_id: str, value: str, *, channel: str = "C0GENERAL", user: str = "U0ALICE",
                      team: str = TEAM, response_url: str = "http://127.0.0.1:9/unused") -> bytes:
    """A button click on an ephemeral message (interactivity: `payload=<json>`)."""
    payload = {
        "type": "block_actions", "team": {"id": team, "domain": "fake"},
        "user": {"id": user, "username": "alice", "name": "alice", "team_id": team},
        "api_app_id": APP_ID, "token": "verification-token-unused", "trigger_id": "1337.43.abcdef",
        "container": {"type": "message", "message_ts": "1700000000.000100", "channel_id": channel,
                      "is_ephemeral": True},
        "channel": {"id": channel, "name": "general"}, "response_url": response_url,
        "actions": [{"type": "button", "action_id": action_id, "block_id": "share", "value": value,
                     "text": {"type": "plain_text", "text": "Share in channel"},
                     "action_ts": "1700000001.1"}],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def event_body(
    event: dict[str, Any], *, team: str = TEAM, event_id: str | None = None, bot_user: str = "UFAKEBOT",
    authorized: str | None = None,
) -> bytes:
    """An Events API `event_callback` envelope (JSON); a retry carries the same `event_id`. Its
    authorization is the app's bot user in `authorized`, by default `team` (an OAuth install's own: its
    installation's bot user); from a Slack Connect channel `team_id` can name the other workspace."""
    return json.dumps({
        "token": "verification-token-unused", "team_id": team, "api_app_id": APP_ID, "event": event,
        "type": "event_callback", "event_id": event_id or f"Ev{time.monotonic_ns()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": authorized or team, "user_id": bot_user, "is_bot": True}],
    }).encode()


def wsgi_post(app: Callable[..., Iterable[bytes]], body: bytes) -> int:
    """A signed Events API request (JSON `body`) to /slack/events of the WSGI `app` (the serve Router, in this
    process): its HTTP status, once the answer is read whole."""
    headers = signed_headers(body, "application/json")
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/slack/events", "QUERY_STRING": "",
               "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)),
               "HTTP_X_SLACK_REQUEST_TIMESTAMP": headers["X-Slack-Request-Timestamp"],
               "HTTP_X_SLACK_SIGNATURE": headers["X-Slack-Signature"], "REMOTE_ADDR": "127.0.0.1",
               "SERVER_NAME": "bot.test", "SERVER_PORT": "443", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(body)}
    status: list[int] = []
    b"".join(app(environ, lambda line, headers, exc_info=None: status.append(int(line.split()[0]))))
    return status[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def clean_env(**values: str) -> dict[str, str]:
    """The process environment without any of the bot's variables, plus `values`."""
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARIABLES}
    env.update(values)
    return env


class ServeProcess:
    """`python -m bot serve` in a subprocess (working directory `cwd`, so no stray .env is read)."""

    def __init__(self, env: dict[str, str], cwd: Path, *, secret: str = SECRET,
                 argv: list[str] | None = None) -> None:
        # `python -m bot serve`, or another app served the same way (bench_app's bare Bolt)
        self.argv = argv or [sys.executable, "-m", "bot", "serve"]
        self.port = int(env.get("PORT") or free_port())
        self.env = clean_env(**{**env, "PORT": str(self.port)})
        self.cwd = cwd
        self.secret = secret
        self.proc: subprocess.Popen[str] | None = None
        self.log = cwd / f"serve-{self.port}.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> ServeProcess:
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited {self.proc.returncode}:\n{self.output()}")
            try:
                if http("GET", self.base + "/healthz", timeout=1)[0] == 200:
                    return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"serve did not answer /healthz:\n{self.output()}")

    def stop(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)

    def output(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # speaking Slack ---------------------------------------------------------------------------------

    def post(self, body: bytes, content_type: str, *, signed: bool = True, secret: str | None = None,
             age: float = 0.0, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        sent = signed_headers(body, content_type, secret=secret or self.secret, age=age) if signed \
            else {"Content-Type": content_type}
        sent.update(headers or {})
        return http("POST", self.base + "/slack/events", body, sent)

    def command(self, text: str, **fields: Any) -> tuple[int, dict[str, Any]]:
        status, raw = self.post(command_body(text, **fields), "application/x-www-form-urlencoded")
        return status, (json.loads(raw) if raw.strip() else {})

    def action(self, action_id: str, value: str, **fields: Any) -> tuple[int, bytes]:
        return self.post(block_action_body(action_id, value, **fields), "application/x-www-form-urlencoded")

    def event(self, event: dict[str, Any], **fields: Any) -> tuple[int, bytes]:
        return self.post(event_body(event, **fields), "application/json")
