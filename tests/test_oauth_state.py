"""OAuth state rows (multi-workspace install): each is valid once and for its lifetime, expired rows are
deleted whenever a state is issued, and no number of /slack/install requests grows the table past its cap or
pushes out an install in progress: past the cap a new install is refused, and each client may open only so
many install pages (the serve Router, in process). On both backends."""

from __future__ import annotations

import io
import threading
import urllib.request
from datetime import timedelta
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot import oauth
from bot.app import build_app
from bot.config import Settings
from bot.errors import InstallsBusy
from bot.oauth import StoreStates
from bot.server import INSTALL_LIMIT, RateLimit, Router, create_http_server, run_until, wake
from bot.store import Store, utcnow
from tests.fakes.slack_sender import SECRET


def kept(store: Store) -> int:
    with store.connect() as db:
        return int(db.one("SELECT count(*) FROM oauth_states")[0])


def test_expired_states_are_deleted_when_the_next_one_is_issued(store: Store) -> None:
    past = utcnow() - timedelta(seconds=1)
    for n in range(5):
        store.issue_oauth_state(f"old-{n}", past - timedelta(minutes=n))
    assert kept(store) <= 5

    fresh = StoreStates(store).issue()

    assert kept(store) == 1
    assert StoreStates(store).consume(fresh)


def test_past_the_cap_no_state_is_issued_and_the_installs_in_progress_keep_theirs(store: Store) -> None:
    states = StoreStates(store, cap=5)
    issued = [states.issue() for _ in range(5)]
    for _ in range(3):
        with pytest.raises(InstallsBusy):
            states.issue()

    assert kept(store) == 5
    assert all(states.consume(s) for s in issued)  # none was pushed out
    assert states.consume(states.issue())  # room again once they are used (or expire)
    assert oauth.STATE_CAP == 1_000


def router(store: Store, clock: list[float], limit: int = 3) -> Router:
    """serve's Router in OAuth mode, in process, with an install limit on a clock the test moves."""
    settings = Settings(slack_client_id="1111.2222", slack_client_secret="client-secret",
                        slack_signing_secret=SECRET, slack_api_url="http://127.0.0.1:9/")
    handler = SlackRequestHandler(build_app(settings, store), path="/slack/events")
    return Router(None, store, handler, SECRET, install_limit=RateLimit(limit, 600.0, clock=lambda: clock[0]))


def get(app: Router, path: str, client: str) -> tuple[int, dict[str, str], str]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "REMOTE_ADDR": client,
               "SERVER_NAME": "bot.test", "SERVER_PORT": "443", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0"}
    body = b"".join(app(environ, start_response)).decode()
    return answer["status"], answer["headers"], body


def test_install_pages_are_limited_per_client(store: Store) -> None:
    clock = [1000.0]
    app = router(store, clock)
    assert [get(app, "/slack/install", "198.51.100.7")[0] for _ in range(3)] == [200] * 3
    status, headers, page = get(app, "/slack/install", "198.51.100.7")
    assert status == 429 and int(headers["Retry-After"]) > 0 and "Too many install attempts" in page
    assert kept(store) == 3  # the refused page wrote no state
    assert get(app, "/slack/install", "198.51.100.8")[0] == 200  # another client is not held up
    clock[0] += 600.0
    assert get(app, "/slack/install", "198.51.100.7")[0] == 200  # the window has passed
    assert INSTALL_LIMIT >= 10  # a person retrying a few times is never refused


def test_a_full_state_table_is_a_clear_page_not_an_error(store: Store) -> None:
    for n in range(oauth.STATE_CAP):
        store.issue_oauth_state(f"in-progress-{n}", utcnow() + timedelta(minutes=5))
    status, headers, page = get(router(store, [0.0], limit=10), "/slack/install", "198.51.100.9")
    assert status == 503 and "try again in a few minutes" in page and "Retry-After" in headers
    assert kept(store) == oauth.STATE_CAP
    assert StoreStates(store).consume("in-progress-0")


def test_a_consumed_or_expired_state_is_refused(store: Store) -> None:
    states = StoreStates(store)
    state = states.issue()
    assert states.consume(state)
    assert not states.consume(state)  # once only

    expired = StoreStates(store, expiration_seconds=-1).issue()
    assert not states.consume(expired)
    assert not states.consume("never-issued")
    assert not states.consume("")
    assert kept(store) == 0


@pytest.mark.parametrize("behind_router", [True, False], ids=["heroku", "direct"])
def test_on_heroku_the_client_is_the_address_its_router_appended(behind_router: bool) -> None:
    """Heroku's router appends the connecting client's address to X-Forwarded-For, and a dyno is reached only
    through it (DYNO is set): that address is the client the install limit counts. Elsewhere the header is
    anyone's to write and is dropped."""
    seen: list[str] = []

    def remote(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(str(environ.get("REMOTE_ADDR")))
        start_response("200 OK", [("Content-Length", "0")])
        return []

    server = create_http_server(remote, 0, host="127.0.0.1", behind_router=behind_router)
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        for forwarded in ("198.51.100.1, 203.0.113.9", "203.0.113.10"):
            request = urllib.request.Request(f"http://127.0.0.1:{server.effective_port}/slack/install",
                                             headers={"X-Forwarded-For": forwarded})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 200
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
    assert seen == (["203.0.113.9", "203.0.113.10"] if behind_router else ["127.0.0.1", "127.0.0.1"])
    assert Settings.from_env({"DYNO": "web.1"}).behind_router and not Settings.from_env({}).behind_router
