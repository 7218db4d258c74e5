"""`serve`: the Bolt app behind waitress (Bolt's WSGI adapter) or over Socket Mode, and the in-process poller.

HTTP routes: `POST /slack/events` (commands, events, interactivity), `GET /healthz` (JSON), and in OAuth
mode (SLACK_CLIENT_ID and SLACK_CLIENT_SECRET set) `GET /slack/install` and `GET /slack/oauth_redirect`
(Bolt's OAuth flow, see `bot.oauth`; each install page writes an OAuth state, so one network (the /24 or
/64 of the client's address; on Heroku, as its router saw it) may open INSTALL_LIMIT of them per
INSTALL_WINDOW, and past that gets 429; the states table shares its room between networks, and when no
network can give one up the page is a 503 that asks to try again); anything else 404. In Socket Mode,
`/healthz` is still served on $PORT and `/slack/events` is not.

Before Bolt sees a request to /slack/events, the Router verifies its signature (slack_sdk's
SignatureVerifier, as Bolt does: an unsigned, badly signed or stale request, or one whose timestamp is not a
number, gets 401), then its shape (`bot.shapes`: the body must be what Bolt parses into a JSON object and
reads without failing, not nested too deep, its Slack ids and timestamps of Slack's shape, the parts our
listeners read shaped as Slack sends them: 400 otherwise). Either answer is logged as one
`event=request_rejected` line naming the reason only, never a field of the body. Bolt verifies the signature
again. Socket Mode envelopes get the same shape check (a misshapen one is acked empty, with the same line).

The HTTP server's connections are bounded (`bot.connections`): at most MAX_CONNECTIONS, the longest waiting
without a whole request making room for a new one; a request's head and body within REQUEST_SECONDS; an idle
connection closed after IDLE_SECONDS; so a slow client never costs another request its time.

SIGTERM or SIGINT stops the server: it stops accepting and finishes the requests in flight (up to 5 s),
every open request to the model endpoint is closed at once (an answer being written ends as cut short, and
no new one starts), the poller finishes its cycle (deliveries not yet posted stay pending), lazy listeners
drain, and `serve` returns 0, all well within Heroku's 30 s.
"""

from __future__ import annotations

import html
import io
import json
import logging
import signal
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from waitress import wasyncore

from bot import memory
from bot.addresses import network_of
from bot.app import LAZY_WORKERS, build_app, make_services, web_client
from bot.config import Settings
from bot.connections import BoundedServer, ConnectionLimits
from bot.errors import InstallsBusy, ServeError, StoreError
from bot.lanes import ModelLane
from bot.shapes import misshapen, misshapen_text
from bot.slackweb import error_code
from bot.store import Store, iso, open_store

if TYPE_CHECKING:
    from bot.poller import Poller

log = logging.getLogger("bot.server")

EVENTS_PATH = "/slack/events"
OAUTH_PATHS = ("/slack/install", "/slack/oauth_redirect")  # == bot.oauth.INSTALL_PATH, REDIRECT_PATH
HEALTH_PATH = "/healthz"
# Request threads. Listeners are CPU-bound Python and SQLite (the GIL lets one run at a time), so more threads
# only queue for the GIL and lengthen the tail: with 20 concurrent searches on 2 cores (bench_app's first
# searches of their words), 2 threads answered the 99th percentile in 67-81 ms where 4 took 86-99 ms and 8
# 143-162 ms. Two leave room while a request waits on Slack (subscribe asks conversations.info; slow work
# runs as lazy listeners), and while one thread is in numpy, tantivy or the database, the other runs Python.
HTTP_THREADS = 2
MAX_BODY = 1024 * 1024  # Slack's payloads are a few KB
POLLER_STOP_SECONDS = 20.0
# The poller (and the feed client and parser it imports) starts this long after the server listens, so its
# imports do not compete for the GIL with the first requests (Heroku's boot check, a health probe).
POLLER_START_DELAY = 0.5
LAZY_DRAIN_SECONDS = 3.0
HTTP_GRACE_SECONDS = 5.0
INSTALL_LIMIT = 30  # install pages (each an OAuth state) one network may open per INSTALL_WINDOW
INSTALL_WINDOW = 600.0  # seconds: an OAuth state's life (bot.oauth.STATE_SECONDS)
MAX_CLIENTS = 10_000  # networks the install limit remembers (the longest unseen are forgotten first)
# bot.oauth.NETWORK_HEADER as WSGI names it: the client's network, for the OAuth flow's state
NETWORK_ENVIRON = "HTTP_X_MLRESEARCH_NETWORK"
MAX_REQUEST_AGE = 5 * 60  # seconds between a request's X-Slack-Request-Timestamp and now, either way
StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def health(store: Store) -> tuple[int, dict[str, Any]]:
    """The /healthz answer: 200 and the counts, or 503 when the database cannot be read."""
    try:
        state = store.latest_feed_state()
        return 200, {
            "status": "ok",
            "items": store.count_items(),
            "subscriptions": store.count_subscriptions(),
            "last_poll": iso(state.last_poll) if state else None,
            "feed_ok": bool(state and state.ok),
        }
    except StoreError as exc:
        log.error("event=health_failed error=%s", " ".join(str(exc).split())[:200])
        return 503, {"status": "error", "error": "database unavailable"}


class RateLimit:
    """At most `limit` events per client in any `window` seconds (a sliding window), remembering at most
    `max_clients` clients (the longest unseen are forgotten first). `allow(client)` is None when the event
    may go ahead (it is counted), else the seconds until it may."""

    def __init__(self, limit: int, window: float, *, max_clients: int = MAX_CLIENTS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window = window
        self.max_clients = max_clients
        self.clock = clock
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, client: str) -> float | None:
        now = self.clock()
        with self._lock:
            times = self._seen.pop(client, None) or deque()
            while times and times[0] <= now - self.window:
                times.popleft()
            self._seen[client] = times  # now the most recently seen
            while len(self._seen) > self.max_clients:
                self._seen.popitem(last=False)
            if len(times) >= self.limit:
                return max(times[0] + self.window - now, 1.0)
            times.append(now)
            return None


class Router:
    """The WSGI application: Slack's Request URL to Bolt (verified and checked first when `signing_secret` is
    given, as in HTTP mode), /healthz, and 404 for everything else. In OAuth mode, /slack/install pages are
    limited per client network (`install_limit`, by the /24 or /64 of the connecting address, on Heroku the
    address its router appended to X-Forwarded-For): each writes an OAuth state, issued for that network."""

    def __init__(self, slack: WsgiApp | None, store: Store, oauth: WsgiApp | None = None,
                 signing_secret: str | None = None, install_limit: RateLimit | None = None) -> None:
        self.slack = slack
        self.store = store
        self.oauth = oauth
        self.verifier = SignatureVerifier(signing_secret) if signing_secret else None
        self.install_limit = install_limit or RateLimit(INSTALL_LIMIT, INSTALL_WINDOW)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        environ.pop(NETWORK_ENVIRON, None)  # ours to set (below), never a client's
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        if path == EVENTS_PATH and self.slack is not None:
            if method != "POST":
                return _json(start_response, 405, {"error": "method not allowed"}, [("Allow", "POST")])
            refused = self.refuse(environ) if self.verifier is not None else None
            if refused is not None:
                status, reason = refused
                log.warning("event=request_rejected status=%d reason=%s", status, reason)
                error = "invalid request" if status == 401 else f"bad request: {reason.replace('_', ' ')}"
                return _json(start_response, status, {"error": error})
            return self.slack(environ, start_response)
        if path in OAUTH_PATHS and self.oauth is not None:
            if method != "GET":
                return _json(start_response, 405, {"error": "method not allowed"}, [("Allow", "GET")])
            if path == OAUTH_PATHS[0]:
                network = network_of(str(environ.get("REMOTE_ADDR") or "-"))
                environ[NETWORK_ENVIRON] = network  # the OAuth flow issues the page's state for it
                wait = self.install_limit.allow(network)
                if wait is not None:
                    log.warning("event=install_refused reason=rate_limited retry_after=%d", wait)
                    return _page(start_response, 429, "Too many install attempts from your address. Please "
                                 f"try again in {max(1, round(wait / 60))} minute(s).", wait)
            try:
                return self.oauth(environ, start_response)
            except InstallsBusy as exc:
                return _page(start_response, 503, f"Sorry: {exc}.", INSTALL_WINDOW / 10)
        if path == HEALTH_PATH:
            if method not in ("GET", "HEAD"):
                return _json(start_response, 405, {"error": "method not allowed"}, [("Allow", "GET, HEAD")])
            status, body = health(self.store)
            return _json(start_response, status, body, head=method == "HEAD")
        return _json(start_response, 404, {"error": "not found"})

    def refuse(self, environ: dict[str, Any]) -> tuple[int, str] | None:
        """(status, reason) when a request to /slack/events must not reach Bolt, else None. Reads the body
        and puts it back in `environ` for Bolt."""
        assert self.verifier is not None
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = -1
        if length < 0:
            return 400, "bad_content_length"
        raw = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
        timestamp = environ.get("HTTP_X_SLACK_REQUEST_TIMESTAMP") or ""
        signature = environ.get("HTTP_X_SLACK_SIGNATURE") or ""
        if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
            return 401, "bad_timestamp"
        if abs(self.verifier.clock.now() - int(timestamp)) > MAX_REQUEST_AGE:
            return 401, "stale_timestamp"
        if not signature:
            return 401, "missing_signature"
        try:
            text = raw.decode("utf-8")  # as Bolt and the verifier read it
        except UnicodeDecodeError:
            return 401, "body_not_utf8"
        if not self.verifier.is_valid(text, timestamp, signature):
            return 401, "bad_signature"
        reason = misshapen_text(text, environ.get("CONTENT_TYPE"))
        return None if reason is None else (400, reason)


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
            429: "Too Many Requests", 503: "Service Unavailable"}


def _json(start_response: StartResponse, status: int, body: dict[str, Any],
          extra: list[tuple[str, str]] | None = None, head: bool = False) -> list[bytes]:
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
               ("Cache-Control", "no-store"), *(extra or [])]
    start_response(f"{status} {_REASONS.get(status, '')}".strip(), headers)
    return [] if head else [data]


def _page(start_response: StartResponse, status: int, text: str, retry_after: float) -> list[bytes]:
    """A short HTML page for a person in a browser (the install flow), with Retry-After."""
    data = (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>mlresearch-bot</title></head>"
            f"<body><p>{html.escape(text)}</p></body></html>").encode()
    start_response(f"{status} {_REASONS.get(status, '')}".strip(), [
        ("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(data))),
        ("Cache-Control", "no-store"), ("Retry-After", str(max(1, int(retry_after))))])
    return [data]


def create_http_server(wsgi: WsgiApp, port: int, host: str = "0.0.0.0", *, behind_router: bool = False,
                       limits: ConnectionLimits | None = None) -> BoundedServer:
    """A bound (not yet running) waitress server whose connections are bounded (`bot.connections`:
    `limits`, else its defaults); `.effective_port` is the port it listens on. Proxy headers are dropped,
    except `behind_router` (Heroku, `Settings.behind_router`): then the last X-Forwarded-For address, the one
    Heroku's router appends, is the client's (REMOTE_ADDR)."""
    proxy: dict[str, Any] = {}
    if behind_router:
        proxy = {"trusted_proxy": "*", "trusted_proxy_count": 1, "trusted_proxy_headers": {"x-forwarded-for"}}
    return BoundedServer(wsgi, limits or ConnectionLimits(), host=host, port=port, threads=HTTP_THREADS,
                         ident="mlresearch-bot", max_request_body_size=MAX_BODY,
                         clear_untrusted_proxy_headers=True, **proxy)


def start_poller(settings: Settings, store: Store) -> Poller | None:
    """The in-process poller (every POLL_INTERVAL seconds, with jitter) over the one poll pipeline, or None
    when POLL_INTERVAL=0. First run: a sparse archive is filled from the research index in the background now,
    and retried after each poll until one backfill succeeds (it does nothing after that); with no poller, at
    the next start (the failure's log line says which: retry=next_poll, retry=next_start)."""
    from bot.pipeline import Pipeline  # the poller's HTTP stack (httpx, feedparser): imported after listening

    pipeline = Pipeline.from_settings(settings, store)
    retry = "next_poll" if settings.poll_interval else "next_start"
    threading.Thread(target=pipeline.backfill_if_sparse, kwargs={"retry": retry}, name="backfill",
                     daemon=True).start()
    if settings.poll_interval == 0:
        log.info("event=poller_disabled reason=POLL_INTERVAL=0")
        return None
    pipeline.after.append(pipeline.backfill_if_sparse)
    poller = pipeline.start(settings.poll_interval)
    log.info("event=poller_started interval=%d", settings.poll_interval)
    return poller


def _start_poller_into(
    pollers: list[Poller | None], settings: Settings, store: Store, stopping: threading.Event
) -> None:
    if stopping.wait(POLLER_START_DELAY):
        return
    try:
        pollers.append(start_poller(settings, store))
    except Exception:  # noqa: BLE001 - serving goes on without the poller; the log says why
        log.exception("event=poller_failed_to_start")


def serve(settings: Settings) -> int:
    """Run until SIGTERM/SIGINT; 0 on a clean stop. Raises ServeError when it cannot start."""
    memory.limit_arenas()  # before any thread starts
    executor = ThreadPoolExecutor(max_workers=LAZY_WORKERS, thread_name_prefix="lazy")
    client = web_client(settings)
    # One workspace, one token: asked once, in the background while the store opens and the app is built
    # (Slack's round trip is the longest wait of the start), and answered before the server listens.
    token_checked = None if settings.oauth_enabled else executor.submit(check_token, client)
    store = open_store(settings.database_url)
    store.migrate()
    lane = ModelLane()
    services = make_services(settings, store, client)  # its search index is built once the server listens
    app = build_app(settings, store, client=client, executor=executor, services=services, model_lane=lane)
    if token_checked is not None:
        token_checked.result()  # a refused token: ServeError, and serve stops before it listens
    socket_mode = settings.slack_app_token is not None
    handler = SlackRequestHandler(app, path=EVENTS_PATH)
    slack: WsgiApp | None = None if socket_mode else handler
    oauth: WsgiApp | None = handler if settings.oauth_enabled else None  # also beside Socket Mode
    if settings.oauth_enabled and settings.slack_bot_token:
        log.warning("event=config_ignored variable=SLACK_BOT_TOKEN detail=\"SLACK_CLIENT_ID and "
                    "SLACK_CLIENT_SECRET are set: every workspace uses the token of its own installation\"")
    if settings.oauth_enabled and not settings.token_encryption_keys:
        log.warning("event=config_warning variable=TOKEN_ENCRYPTION_KEY detail=\"not set: each workspace's "
                    "OAuth tokens are stored unencrypted in the database\"")
    try:
        server = create_http_server(Router(slack, store, oauth, settings.slack_signing_secret), settings.port,
                                    behind_router=settings.behind_router)
    except OSError as exc:
        raise ServeError(f"cannot listen on port {settings.port}: {exc.strerror or exc}") from None
    socket_handler = connect_socket_mode(app, settings) if socket_mode else None
    pollers: list[Poller | None] = []
    starter: threading.Thread | None = None
    stopping = threading.Event()
    _install_signal_handlers(stopping, server)
    try:
        log.info("event=listening mode=%s port=%s path=%s workspaces=%s", "socket" if socket_mode else "http",
                 server.effective_port, HEALTH_PATH if socket_mode else EVENTS_PATH,
                 f"oauth install={OAUTH_PATHS[0]}" if settings.oauth_enabled else "single")
        # The poller (and the feed client it imports) starts beside the server, not before it (and a little
        # after it: POLLER_START_DELAY); a stop before then means it never starts.
        starter = threading.Thread(target=_start_poller_into, args=(pollers, settings, store, stopping),
                                   name="poller-start", daemon=True)
        starter.start()
        services.index.start()  # a search before it is built waits for it (bounded); nothing else does
        run_until(server, stopping)
    finally:
        if services.summarizer is not None:  # open model requests end now, not at their deadline
            closed = services.summarizer.streams.close_all()
            if closed:
                log.info("event=model_streams_closed count=%d", closed)
        if socket_handler is not None:
            socket_handler.close()
        if starter is not None:
            starter.join(POLLER_STOP_SECONDS)
        for poller in pollers:
            if poller is not None:
                poller.stop(timeout=POLLER_STOP_SECONDS)
        drains = [threading.Thread(target=pool.shutdown, kwargs={"wait": True, "cancel_futures": True},
                                   daemon=True) for pool in (executor, lane)]
        for drain in drains:
            drain.start()
        deadline = time.monotonic() + LAZY_DRAIN_SECONDS
        for drain in drains:
            drain.join(max(0.0, deadline - time.monotonic()))
        log.info("event=stopped")
    return 0


# Slack's answers to auth.test that mean the token itself is wrong (not Slack being unreachable or slow).
BAD_TOKEN_ERRORS = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked",
                              "token_expired"})
TOKEN_CHECK_TIMEOUT = 5.0


def check_token(client: WebClient, timeout: float = TOKEN_CHECK_TIMEOUT) -> None:
    """SLACK_BOT_TOKEN asked once with `auth.test` (through `client`'s base URL and token, with a short
    timeout): a token Slack refuses is a ServeError (one line, `serve` stops); Slack not answering is a
    warning, and `serve` starts (Slack may be back before the first command)."""
    probe = WebClient(token=client.token, base_url=client.base_url, timeout=int(max(1, timeout)))
    try:
        answer = probe.auth_test()
    except SlackApiError as exc:
        error, status = error_code(exc)  # Slack's error string, or http_<status>: one token, fit for a log
        if error in BAD_TOKEN_ERRORS:
            raise ServeError(f"Slack refused SLACK_BOT_TOKEN ({error}): copy the Bot User OAuth Token "
                             "(xoxb-…) from the app's OAuth & Permissions page") from None
        log.warning("event=token_unchecked reason=slack_error error=%s status=%d", error[:40], status)
        return
    except Exception as exc:  # noqa: BLE001 - Slack unreachable (DNS, refused, timeout): serve anyway
        log.warning("event=token_unchecked reason=unreachable error=%s", type(exc).__name__)
        return
    log.info("event=token_checked team=%s", str(answer.get("team_id") or "")[:20])


def run_until(server: Any, stopping: threading.Event, grace: float = HTTP_GRACE_SECONDS) -> None:
    """Serve until `stopping` is set (`wake` makes the loop see it at once), then stop accepting, let the
    requests in flight finish and their answers reach the client (up to `grace` seconds), and close."""
    try:
        while not stopping.is_set():
            wasyncore.loop(timeout=1.0, map=server._map, count=1, use_poll=True)
        server.accepting = False  # readable() is now False: no new connections
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _busy(server):
            wasyncore.loop(timeout=0.05, map=server._map, count=1, use_poll=True)
    finally:
        server.task_dispatcher.shutdown(cancel_pending=True, timeout=1)
        with _CLOSING:
            _closed.add(server)  # first: a signal handled in this thread while it closes wakes nothing
            server.close()


# A server is closed, and woken, under this lock (re-entrant: serve's signal handler runs in the thread that
# serves), and never woken once closed: its trigger's descriptor is closed then, or already another file's.
_CLOSING = threading.RLock()
_closed: weakref.WeakSet[Any] = weakref.WeakSet()


def wake(server: Any) -> None:
    """Wake `server`'s loop (`run_until`) now rather than at its next timeout; nothing once it has closed (a
    second Ctrl-C while serve stops the poller)."""
    with _CLOSING:
        if server not in _closed:
            server.pull_trigger()


def _busy(server: Any) -> bool:
    return any(channel.requests or channel.total_outbufs_len
               for channel in list(server.active_channels.values()))


def connect_socket_mode(app: Any, settings: Settings) -> Any:
    # Socket Mode's boundary: its client (and the ssl and WebSocket code it brings) only when SLACK_APP_TOKEN
    # is set; an HTTP server never imports it
    from slack_bolt.adapter.socket_mode import SocketModeHandler
    from slack_sdk.socket_mode.response import SocketModeResponse

    class CheckedSocketModeHandler(SocketModeHandler):
        """Bolt's Socket Mode handler, with HTTP's shape checks (`bot.shapes.misshapen`) before Bolt reads an
        envelope's payload: a misshapen one is acked empty (Slack does not send it again) and logged in one
        line naming the reason."""

        def handle(self, client: Any, req: Any) -> None:
            reason = misshapen(req.payload)
            if reason is None:
                super().handle(client, req)
                return
            log.warning("event=request_rejected mode=socket reason=%s", reason)
            client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))

    handler = CheckedSocketModeHandler(app, app_token=settings.slack_app_token, web_client=app.client)
    try:
        handler.connect()
    except SlackApiError as exc:
        error = exc.response.get("error")
        raise ServeError(f"Socket Mode connection failed: {error} (check SLACK_APP_TOKEN)") from None
    log.info("event=socket_mode_connected")
    return handler


def _install_signal_handlers(stopping: threading.Event, server: Any) -> None:
    def on_signal(signum: int, _frame: object) -> None:
        if not stopping.is_set():
            log.info("event=stopping signal=%s", signal.Signals(signum).name)
        stopping.set()
        wake(server)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
