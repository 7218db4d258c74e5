"""OAuth state rows (multi-workspace install): each is valid once and for its lifetime, expired rows are
deleted whenever a state is issued, and no number of /slack/install requests grows the table past its cap or
keeps a new install out: each network (a /24, a /64) may open only so many install pages (the serve Router,
in process), each state is issued for its network, and a full table makes room by taking the oldest state of
the network holding the most; an install in progress from a network holding no more than others keeps its
state. On both backends."""

from __future__ import annotations

import io
import threading
import urllib.request
from collections import Counter
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


def get(app: Router, path: str, client: str, **extra: str) -> tuple[int, dict[str, str], str]:
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        answer["status"], answer["headers"] = int(status.split()[0]), dict(headers)

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "REMOTE_ADDR": client,
               "SERVER_NAME": "bot.test", "SERVER_PORT": "443", "SERVER_PROTOCOL": "HTTP/1.1",
               "wsgi.url_scheme": "https", "wsgi.input": io.BytesIO(b""), "CONTENT_LENGTH": "0", **extra}
    body = b"".join(app(environ, start_response)).decode()
    return answer["status"], answer["headers"], body


def test_install_pages_are_limited_per_network(store: Store) -> None:
    """A client is known by its network: the /24 of an IPv4 address (an IPv4-mapped one too), the /64 of an
    IPv6 one, as one person or one attacker can hold a whole such network."""
    clock = [1000.0]
    app = router(store, clock)
    for v4, v6 in (("198.51.100.7", "2001:db8:1:2::1"), ("198.51.100.200", "2001:db8:1:2:ffff::9"),
                   ("198.51.100.7", "2001:db8:1:2::1")):
        assert get(app, "/slack/install", v4)[0] == 200 and get(app, "/slack/install", v6)[0] == 200
    for neighbour in ("198.51.100.9", "::ffff:198.51.100.77", "2001:db8:1:2::5"):
        status, headers, page = get(app, "/slack/install", neighbour)
        assert status == 429 and int(headers["Retry-After"]) > 0 and "Too many install attempts" in page
    assert kept(store) == 6  # the refused pages wrote no state
    assert get(app, "/slack/install", "198.51.101.7")[0] == 200  # the next network is not held up
    assert get(app, "/slack/install", "2001:db8:1:3::1")[0] == 200
    clock[0] += 600.0
    assert get(app, "/slack/install", "198.51.100.7")[0] == 200  # the window has passed
    assert INSTALL_LIMIT >= 10  # a person retrying a few times is never refused


def test_a_header_a_client_sends_cannot_choose_its_network(store: Store) -> None:
    app = router(store, [0.0])
    statuses = [get(app, "/slack/install", "198.51.100.7", HTTP_X_MLRESEARCH_NETWORK=f"10.{n}.0.0/24")[0]
                for n in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert len({state.split(".")[0] for state in states(store)}) == 1


def states(store: Store) -> list[str]:
    with store.connect() as db:
        return [str(row["state"]) for row in db.rows("SELECT state FROM oauth_states")]


def state_of(headers: dict[str, str]) -> str:
    """The state an install page bound to the browser (Bolt's cookie)."""
    cookie = headers["set-cookie"].split(";")[0]
    assert cookie.startswith("slack-app-oauth-state=")
    return cookie.split("=", 1)[1]


@pytest.mark.parametrize("spread", ["38_networks", "38_addresses_of_one_network"])
def test_a_flood_of_install_pages_never_keeps_a_new_install_out(store: Store, spread: str) -> None:
    """Issue 53: 31 opens of /slack/install from each of 38 addresses filled the 1,000 states, and every new
    install got 503 for 10 minutes. Now one network opens at most INSTALL_LIMIT pages; when the table is full
    the network holding the most states gives one up to a network holding fewer; an install in progress
    from a network holding no more than others keeps its state."""
    app = router(store, [0.0], limit=INSTALL_LIMIT)
    status, headers, _ = get(app, "/slack/install", "203.0.113.9")
    assert status == 200
    in_progress = state_of(headers)
    for n in range(38):
        address = f"198.51.{n}.7" if spread == "38_networks" else f"198.51.100.{n}"
        for _ in range(31):
            get(app, "/slack/install", address)
    assert kept(store) == (oauth.STATE_CAP if spread == "38_networks" else INSTALL_LIMIT + 1)
    status, headers, _ = get(app, "/slack/install", "192.0.2.50")
    assert status == 200  # was a 503 for 10 minutes
    assert kept(store) <= oauth.STATE_CAP
    assert StoreStates(store).consume(state_of(headers))
    assert StoreStates(store).consume(in_progress)
    per_network = Counter(state.split(".")[0] for state in states(store))
    if spread == "38_networks":  # the room is shared evenly
        assert len(per_network) == 38 and max(per_network.values()) - min(per_network.values()) <= 1
    else:
        assert list(per_network.values()) == [INSTALL_LIMIT]


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
