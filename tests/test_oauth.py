"""Multi-workspace install (SLACK_CLIENT_ID + SLACK_CLIENT_SECRET): the real `serve` stack runs Bolt's OAuth
flow against a local stand-in for oauth.v2.access (tests/fakes/slack_oauth.py); installations and OAuth state
live in our store; each workspace is served, and posted to, with its own token; tokens rotate; an uninstall
forgets the workspace; and no token or secret ever reaches the logs."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk.oauth.installation_store import Installation

from bot import deliver, oauth
from bot.app import build_app
from bot.config import DEFAULT_SLACK_SCOPES, Settings
from bot.errors import ConfigError
from bot.feed import parse
from bot.models import Validators
from bot.oauth import StoreInstallations, StoreStates, from_record, to_record
from bot.route import ingest
from bot.server import EVENTS_PATH, OAUTH_PATHS, Router
from bot.store import Store, open_store, utcnow
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import Call, FakeSlack
from tests.fakes.slack_oauth import SlackWorkspaces
from tests.fakes.slack_sender import (
    ROOT,
    SECRET,
    ServeProcess,
    clean_env,
    command_body,
    event_body,
    wsgi_post,
)

DATA = ROOT / "tests" / "data"
CLIENT_ID = "1111.2222"
CLIENT_SECRET = "client-secret-5b1e9c"
STATE_COOKIE = "slack-app-oauth-state"
ARCHIVE = (DATA / "apple_ml_archive.xml").read_text()
ENTRIES = re.findall(r"<item>.*?</item>", ARCHIVE, re.S)


def feed_xml(entries: list[str]) -> str:
    head, tail = ARCHIVE[: ARCHIVE.index("<item>")], ARCHIVE[ARCHIVE.rindex("</item>") + len("</item>"):]
    return head + "".join(entries) + tail


OLD_FEED = feed_xml(ENTRIES[2:])  # the baseline: everything but the two newest entries
NEW_FEED = feed_xml(ENTRIES)  # ... and then the two newest appear


def newer_feed(tag: str) -> str:
    """OLD_FEED plus two items no other feed has (their links and guids end in `tag`)."""
    fresh = [re.sub(r"</(link|guid)>", f"-{tag}</\\1>", entry) for entry in ENTRIES[:2]]
    return feed_xml(fresh + ENTRIES[2:])


def channel_info(call: Call) -> dict[str, Any]:
    channel = str(call.params.get("channel"))
    return {"ok": True, "channel": {"id": channel, "name": channel.lower(), "is_channel": True,
                                    "is_private": False, "is_archived": False, "is_member": True}}


def oauth_env(slack: FakeSlack, db: str, feed: Path, **extra: str) -> dict[str, str]:
    return {"SLACK_CLIENT_ID": CLIENT_ID, "SLACK_CLIENT_SECRET": CLIENT_SECRET,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.url, "DATABASE_URL": db, "FEED_URL": str(feed), "POLL_INTERVAL": "0",
            **extra}


def oauth_settings(slack: FakeSlack) -> Settings:
    return Settings(slack_client_id=CLIENT_ID, slack_client_secret=CLIENT_SECRET, slack_signing_secret=SECRET,
                    slack_api_url=slack.url)


def baseline(db_url: str, feed: Path) -> Store:
    """A migrated store past its first poll of `feed` (which holds OLD_FEED)."""
    feed.write_text(OLD_FEED)
    store = open_store(db_url)
    store.migrate()
    ingest(store, str(feed), parse(feed.read_bytes()), Validators())
    return store


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Message, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def start_install(bot: ServeProcess) -> str:
    """Open /slack/install as a browser would; the state its cookie binds to this browser."""
    status, headers, page = get(bot.base + "/slack/install")
    assert status == 200, page
    cookie = headers.get("Set-Cookie") or ""
    match = re.search(STATE_COOKIE + r"=([^;]+)", cookie)
    assert match, cookie
    return match.group(1)


def finish_install(bot: ServeProcess, state: str, code: str, *, cookie: str | None = None) -> tuple[int, str]:
    cookie = state if cookie is None else cookie
    headers = {"Cookie": f"{STATE_COOKIE}={cookie}"} if cookie else {}
    status, _headers, page = get(bot.base + f"/slack/oauth_redirect?code={code}&state={state}", headers)
    return status, page


def install(bot: ServeProcess, workspaces: SlackWorkspaces, team: str, *,
            expires_in: int | None = None) -> str:
    """Install the app into `team` through the OAuth flow; its bot token."""
    status, page = finish_install(bot, start_install(bot), workspaces.code_for(team, expires_in=expires_in))
    assert status == 200, page
    return workspaces.token_of(team)


def tokens(slack: FakeSlack, method: str, channel: str | None = None) -> set[str | None]:
    return {c.token for c in slack.calls_to(method, channel)}


def wait_until(predicate: Any, timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


# --- the serve stack in OAuth mode ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        fake.handlers["conversations.info"] = channel_info
        fake.handlers["views.publish"] = lambda call: {"ok": True, "view": {"id": "V0HOME"}}
        yield fake


@pytest.fixture(scope="module")
def workspaces(slack: FakeSlack) -> SlackWorkspaces:
    return SlackWorkspaces(slack, CLIENT_ID, CLIENT_SECRET)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oauth")


@pytest.fixture(scope="module")
def store(home: Path) -> Store:
    return baseline(f"sqlite:///{home / 'bot.db'}", home / "feed.xml")


@pytest.fixture(scope="module")
def bot(home: Path, store: Store, slack: FakeSlack, workspaces: SlackWorkspaces) -> Iterator[ServeProcess]:
    with ServeProcess(oauth_env(slack, f"sqlite:///{home / 'bot.db'}", home / "feed.xml"), home) as process:
        yield process
    out = process.output()
    for secret in [CLIENT_SECRET, SECRET, *workspaces.secrets()]:
        assert secret not in out, f"a secret reached the log: {secret[:12]}…"


def test_install_page_links_to_slack_with_a_state_bound_to_the_browser(bot: ServeProcess) -> None:
    status, headers, page = get(bot.base + "/slack/install")
    assert status == 200 and headers.get_content_type() == "text/html"
    state = re.search(STATE_COOKIE + r"=([^;]+)", headers.get("Set-Cookie") or "")
    assert state is not None
    link = re.search(r'href="(https://slack\.com/oauth/v2/authorize\?[^"]+)"', page)
    assert link is not None, page
    query = parse_qs(urlsplit(link.group(1).replace("&amp;", "&")).query)
    assert query["state"] == [state.group(1)] and query["client_id"] == [CLIENT_ID]
    assert query["scope"] == [",".join(DEFAULT_SLACK_SCOPES)]


def test_the_redirect_stores_the_installation(bot: ServeProcess, store: Store, slack: FakeSlack,
                                              workspaces: SlackWorkspaces) -> None:
    token = install(bot, workspaces, "T0A")
    record = store.find_installation("T0A", None)
    assert record is not None
    installation = from_record(record)
    assert installation.bot_token == token and installation.bot_user_id == "UBOTT0A"
    assert installation.bot_id == "BT0A" and installation.team_name == "Workspace T0A"
    assert set(installation.bot_scopes or []) == set(DEFAULT_SLACK_SCOPES)
    assert installation.bot_refresh_token is None and installation.bot_token_expires_at is None
    (exchange,) = [c for c in slack.calls_to("oauth.v2.access")
                   if str(c.params.get("code", "")).startswith("code-T0A")]
    assert exchange.headers["Authorization"].startswith("Basic ")  # the client secret never in the body
    assert "client_secret" not in exchange.params
    wait_until(lambda: "event=installed team=T0A" in bot.output(), what="the install log line")


@pytest.mark.parametrize("case", ["unknown", "no_cookie", "expired", "reused", "bad_code"])
def test_a_bad_state_or_code_shows_an_error_and_stores_nothing(
    case: str, bot: ServeProcess, store: Store, workspaces: SlackWorkspaces
) -> None:
    team = f"T0BAD{case.upper()}"[:12]
    code = workspaces.code_for(team)
    cookie: str | None = None
    if case == "unknown":
        state = "never-issued-state"
    elif case == "no_cookie":
        state, cookie = start_install(bot), ""
    elif case == "expired":
        state = "expired-state-1"
        store.issue_oauth_state(state, utcnow() - timedelta(seconds=1))
    elif case == "reused":
        state = start_install(bot)
        assert finish_install(bot, state, workspaces.code_for("T0REUSE"))[0] == 200
    else:
        state, code = start_install(bot), "code-that-slack-never-issued"
    status, page = finish_install(bot, state, code, cookie=cookie)
    assert status in (400, 401) and "Something Went Wrong" in page
    expected = {"no_cookie": "invalid_browser", "bad_code": "invalid_code"}.get(case, "invalid_state")
    assert expected in page
    assert store.find_installation(team, None) is None
    if case != "bad_code":
        assert code in workspaces.codes  # never exchanged


def test_without_an_encryption_key_serve_says_so_once_at_start(bot: ServeProcess) -> None:
    assert bot.output().count("event=config_warning variable=TOKEN_ENCRYPTION_KEY") == 1


def test_an_error_on_the_redirect_forges_no_log_fields(bot: ServeProcess) -> None:
    before = len(bot.output())
    forged = "x%20event%3Dinstalled%20team%3DTEVIL"
    status, _headers, page = get(bot.base + f"/slack/oauth_redirect?error={forged}")
    assert status == 200 and "Something Went Wrong" in page
    status, _headers, _page = get(bot.base + "/slack/oauth_redirect?error=access_denied")
    assert status == 200
    wait_until(lambda: "reason=access_denied" in bot.output()[before:], what="the second failure's line")
    lines = [line for line in bot.output()[before:].splitlines() if "event=install_failed" in line]
    assert "TEVIL" not in bot.output()[before:] and "event=installed" not in bot.output()[before:]
    assert [line.split("event=install_failed ")[1] for line in lines] == [
        "reason=unrecognized status=200", "reason=access_denied status=200"]


def test_an_org_wide_install_is_refused_with_a_page_that_says_what_to_do(
    bot: ServeProcess, store: Store, workspaces: SlackWorkspaces
) -> None:
    """Enterprise Grid: everything is keyed by workspace, so an org-wide install would be accepted and then
    every delivery would fail `not_installed`. It is refused, and its token revoked."""
    before = len(bot.output())
    status, page = finish_install(bot, start_install(bot), workspaces.code_for("E0ORG", org_wide=True))
    assert status == 400 and "install it from a workspace" in page.replace("\n", " ")
    assert store.find_installation(None, "E0ORG") is None and store.find_installation("E0ORG", None) is None
    token = workspaces.token_of("E0ORG")
    assert token not in workspaces.tokens  # revoked: Slack does not keep it installed
    wait_until(lambda: "event=install_refused reason=org_wide enterprise=E0ORG revoked=yes"
               in bot.output()[before:], what="the refusal's log line")
    assert "event=installed" not in bot.output()[before:]


def test_a_command_is_served_with_its_workspace_token(
    bot: ServeProcess, store: Store, slack: FakeSlack, workspaces: SlackWorkspaces
) -> None:
    token = install(bot, workspaces, "T0B")
    status, answer = bot.command("subscribe privacy", team="T0B", channel="C0B")
    assert status == 200 and "Subscribed" in answer["text"], answer
    assert tokens(slack, "conversations.info", "C0B") == {token}
    assert token in {c.token for c in slack.calls_to("auth.test")}
    sub = store.get_subscription("T0B", "C0B")
    assert sub is not None and list(sub.keywords) == ["privacy"]


def test_workspaces_never_see_each_others_subscriptions(
    bot: ServeProcess, store: Store, slack: FakeSlack, workspaces: SlackWorkspaces
) -> None:
    token_c, token_d = install(bot, workspaces, "T0C"), install(bot, workspaces, "T0D")
    assert token_c != token_d
    assert bot.command("subscribe speech", team="T0C", channel="CSHARED")[0] == 200
    _status, status_d = bot.command("status", team="T0D", channel="CSHARED")
    assert "speech" not in json.dumps(status_d)
    _status, unsub = bot.command("unsubscribe", team="T0D", channel="CSHARED")
    assert "isn't subscribed" in unsub["text"]
    sub = store.get_subscription("T0C", "CSHARED")
    assert sub is not None and list(sub.keywords) == ["speech"]
    assert store.get_subscription("T0D", "CSHARED") is None
    assert tokens(slack, "conversations.info", "CSHARED") == {token_c}


def test_a_workspace_without_an_installation_is_asked_to_install(
    bot: ServeProcess, store: Store, slack: FakeSlack
) -> None:
    before = len(slack.calls)
    with Recorder() as hooks:
        body = command_body("subscribe", team="T0NONE", channel="C0NONE", response_url=hooks.url("/none"))
        status, _raw = bot.post(body, "application/x-www-form-urlencoded")
        assert status == 200
        assert hooks.wait_for(lambda r: bool(r.to("/none")))
        assert "install" in hooks.to("/none")[0].json["text"].lower()
    assert store.get_subscription("T0NONE", "C0NONE") is None
    assert [c.method for c in slack.calls[before:]] == []  # no token to call Slack with


def test_an_expiring_token_is_refreshed_on_a_request(
    bot: ServeProcess, store: Store, slack: FakeSlack, workspaces: SlackWorkspaces
) -> None:
    first = install(bot, workspaces, "T0R", expires_in=60)  # expires within the refresh window
    old_refresh = workspaces.refresh_token_of("T0R")
    status, answer = bot.command("subscribe", team="T0R", channel="C0R")
    assert status == 200 and "Subscribed" in answer["text"]
    assert workspaces.refreshes == ["T0R"]
    refresh = [c for c in slack.calls_to("oauth.v2.access") if c.params.get("grant_type") == "refresh_token"]
    assert [c.params["refresh_token"] for c in refresh] == [old_refresh]
    fresh = workspaces.token_of("T0R")
    assert fresh != first and tokens(slack, "conversations.info", "C0R") == {fresh}
    saved = from_record(store.find_installation("T0R", None) or {})
    assert saved.bot_token == fresh and saved.bot_refresh_token == workspaces.refresh_token_of("T0R")
    assert saved.bot_token_expires_at is not None and saved.bot_token_expires_at > time.time() + 40000
    # the next request uses the refreshed token without refreshing again
    assert bot.command("status", team="T0R", channel="C0R")[0] == 200
    assert workspaces.refreshes == ["T0R"]


@pytest.mark.parametrize("event", ["app_uninstalled", "tokens_revoked"])
def test_an_uninstall_forgets_the_workspace(
    event: str, bot: ServeProcess, store: Store, workspaces: SlackWorkspaces, home: Path
) -> None:
    team, other = f"T0U{event[:3].upper()}", f"T0K{event[:3].upper()}"
    install(bot, workspaces, team)
    install(bot, workspaces, other)
    for t in (team, other):
        assert bot.command("subscribe", team=t, channel=f"C{t}")[0] == 200
    # a poll finds new items: pending rows for both workspaces
    feed = home / f"{event}.xml"
    feed.write_text(newer_feed(event))
    assert len(ingest(store, str(home / "feed.xml"), parse(feed.read_bytes()), Validators()).new) == 2
    assert {d.team_id for d in store.open_deliveries()} >= {team, other}
    body = {"type": event, **({"tokens": {"bot": ["UBOT" + team]}} if event == "tokens_revoked" else {})}
    status, _raw = bot.event(body, team=team, bot_user="UBOT" + team)
    assert status == 200
    wait_until(lambda: store.find_installation(team, None) is None, what="the installation to go")
    assert store.subscriptions(team) == []
    assert [d for d in store.open_deliveries() if d.team_id == team] == []
    # the other workspace keeps everything
    assert store.find_installation(other, None) is not None
    assert store.get_subscription(other, f"C{other}") is not None
    assert [d for d in store.open_deliveries() if d.team_id == other]
    assert f"event=workspace_forgotten team={team} reason={event}" in bot.output()
    for row in store.open_deliveries():  # leave nothing pending for the other tests
        store.mark_failed(row.id, "test cleanup")


def test_without_client_credentials_there_is_no_install_route(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'single.db'}")
    store.migrate()
    router = Router(None, store)
    answers: list[str] = []
    for path in OAUTH_PATHS:
        router({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, lambda status, headers: answers.append(status))
    assert answers == ["404 Not Found", "404 Not Found"]
    assert OAUTH_PATHS == (oauth.INSTALL_PATH, oauth.REDIRECT_PATH)
    routed = Router(None, store, oauth=lambda environ, start: [b"bolt"])
    router_answers: list[str] = []
    routed({"PATH_INFO": OAUTH_PATHS[0], "REQUEST_METHOD": "POST"}, lambda s, h: router_answers.append(s))
    assert router_answers == ["405 Method Not Allowed"]
    assert routed({"PATH_INFO": OAUTH_PATHS[1], "REQUEST_METHOD": "GET"}, lambda s, h: None) == [b"bolt"]


# --- delivery: each workspace with its own token ---------------------------------------------------------


def test_serve_installs_two_workspaces_and_posts_to_each_with_its_own_token(tmp_path: Path) -> None:
    """The whole path, as on Heroku: install two workspaces, subscribe a channel in each, a poll finds new
    items, the poller posts to each channel with its workspace's token; the log has one key=value line per
    event (installs, the poll summary, the failure) and no token or secret."""
    feed = tmp_path / "feed.xml"
    db = f"sqlite:///{tmp_path / 'bot.db'}"
    baseline(db, feed)
    with FakeSlack() as slack:
        slack.handlers["conversations.info"] = channel_info
        workspaces = SlackWorkspaces(slack, CLIENT_ID, CLIENT_SECRET)
        slack.fault("chat.postMessage", channel="C1GONE", error="channel_not_found", times=None)
        with ServeProcess(oauth_env(slack, db, feed, POLL_INTERVAL="1"), tmp_path) as bot:
            token_1 = install(bot, workspaces, "T01")
            install(bot, workspaces, "T02", expires_in=60)  # this one rotates
            for team, channel in (("T01", "C1"), ("T01", "C1GONE"), ("T02", "C2")):
                status, answer = bot.command("subscribe", team=team, channel=channel)
                assert status == 200 and "Subscribed" in answer["text"], answer
            token_2 = workspaces.token_of("T02")
            feed.write_text(NEW_FEED)
            both = slack.wait_for(lambda s: len(s.posts("C1")) == 2 and len(s.posts("C2")) == 2, timeout=30)
            assert both, bot.output()
            wait_until(lambda: "event=subscription_paused team=T01 channel=C1GONE" in bot.output(),
                       what="the failure log line")
        out = bot.output()
    assert tokens(slack, "chat.postMessage", "C1") == {token_1}
    assert tokens(slack, "chat.postMessage", "C2") == {token_2}
    assert token_1 != token_2
    lines = out.splitlines()
    assert any("event=installed team=T01" in line for line in lines)
    assert any(re.search(r"event=poll fetched=\d+ new=2 .*delivered=4", line) for line in lines), out
    assert any("event=delivery_failed team=T01 channel=C1GONE" in line for line in lines)
    assert all(re.match(r"^\S+ \S+ level=[A-Z]+ logger=\S+ event=\w+", line) for line in lines if line), out
    assert "Traceback" not in out
    for secret in [CLIENT_SECRET, SECRET, *workspaces.secrets()]:
        assert secret not in out


@pytest.fixture
def local(database_url: str, tmp_path: Path) -> Iterator[tuple[Store, FakeSlack, SlackWorkspaces, Path]]:
    """On each store backend: a store past its baseline, a Slack stand-in, and a feed file."""
    feed = tmp_path / "feed.xml"
    store = baseline(database_url, feed)
    with FakeSlack() as slack:
        yield store, slack, SlackWorkspaces(slack, CLIENT_ID, CLIENT_SECRET), feed


def installed(store: Store, workspaces: SlackWorkspaces, team: str, *,
              expires_at: float | None = None) -> str:
    token, refresh = workspaces.issue(team, rotating=expires_at is not None)
    StoreInstallations(store).save(Installation(
        app_id="A0MLRESEARCH", team_id=team, bot_token=token, bot_id=f"B{team}", bot_user_id=f"UBOT{team}",
        bot_scopes=list(DEFAULT_SLACK_SCOPES), bot_refresh_token=refresh, bot_token_expires_at=(
            int(expires_at) if expires_at is not None else None), user_id="U0INSTALLER"))
    return token


def new_items(store: Store, feed: Path) -> int:
    feed.write_text(NEW_FEED)
    return len(ingest(store, str(feed), parse(feed.read_bytes()), Validators()).new)


def test_deliveries_use_each_workspace_token_and_skip_a_workspace_without_one(
    local: tuple[Store, FakeSlack, SlackWorkspaces, Path], caplog: pytest.LogCaptureFixture
) -> None:
    store, slack, workspaces, feed = local
    token_a, token_b = installed(store, workspaces, "TA"), installed(store, workspaces, "TB")
    for team in ("TA", "TB", "TGONE"):  # TGONE subscribed, but never installed (or its row was lost)
        store.subscribe(team, f"C{team}", "U1")
    assert new_items(store, feed) == 2
    deliverer = deliver.from_settings(oauth_settings(slack), store)
    assert deliverer is not None
    deliverer.pace = 0
    with caplog.at_level(logging.INFO):
        report = deliverer(store)
    assert (report.delivered, report.failed) == (4, 2)
    assert tokens(slack, "chat.postMessage", "CTA") == {token_a}
    assert tokens(slack, "chat.postMessage", "CTB") == {token_b}
    assert slack.posts("CTGONE") == [] and slack.calls_to("chat.postMessage", "CTGONE") == []
    failed = [d for d in store.deliveries(channel_id="CTGONE")]
    assert {d.state for d in failed} == {"failed"} and all("not_installed" in (d.error or "") for d in failed)
    assert "event=workspace_unavailable team=TGONE" in caplog.text
    assert store.workspace_disabled("TGONE") is None  # installing later resumes delivery


def test_delivery_refreshes_an_expiring_token_once(
    local: tuple[Store, FakeSlack, SlackWorkspaces, Path]
) -> None:
    store, slack, workspaces, feed = local
    old = installed(store, workspaces, "TR", expires_at=time.time() + 60)
    for channel in ("CR1", "CR2", "CR3"):
        store.subscribe("TR", channel, "U1")
    new_items(store, feed)
    deliverer = deliver.from_settings(oauth_settings(slack), store)
    assert deliverer is not None
    deliverer.pace = 0
    assert deliverer(store).delivered == 6
    assert workspaces.refreshes == ["TR"]  # one refresh for the workspace, not one per channel
    fresh = workspaces.token_of("TR")
    assert fresh != old and tokens(slack, "chat.postMessage") == {fresh}
    saved = from_record(store.find_installation("TR", None) or {})
    assert saved.bot_token == fresh and saved.bot_token_expires_at is not None
    assert saved.bot_token_expires_at > time.time() + 40000


def test_a_refused_refresh_disables_the_workspace_until_it_is_reinstalled(
    local: tuple[Store, FakeSlack, SlackWorkspaces, Path]
) -> None:
    store, slack, workspaces, feed = local
    installed(store, workspaces, "TX", expires_at=time.time() - 10)
    workspaces.revoke("TX")  # the refresh token no longer works
    store.subscribe("TX", "CX", "U1")
    new_items(store, feed)
    deliverer = deliver.from_settings(oauth_settings(slack), store)
    assert deliverer is not None
    report = deliverer(store)
    assert (report.delivered, report.failed) == (0, 2)
    assert slack.calls_to("chat.postMessage") == []
    assert (store.workspace_disabled("TX") or "").startswith("token_rotation_failed: invalid_refresh_token")
    installed(store, workspaces, "TX")  # reinstalled
    assert store.workspace_disabled("TX") is None


def test_poll_delivers_with_installation_tokens(local: tuple[Store, FakeSlack, SlackWorkspaces, Path],
                                                database_url: str, tmp_path: Path) -> None:
    store, slack, workspaces, feed = local
    token = installed(store, workspaces, "TP")
    store.subscribe("TP", "CP", "U1")
    feed.write_text(NEW_FEED)
    env = clean_env(**oauth_env(slack, database_url, feed))
    done = subprocess.run([sys.executable, "-m", "bot", "poll", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["delivered"] == 2
    assert tokens(slack, "chat.postMessage", "CP") == {token}
    assert CLIENT_SECRET not in done.stdout + done.stderr and token not in done.stdout + done.stderr


# --- the stores Bolt uses ------------------------------------------------------------------------------


@pytest.fixture
def fresh(database_url: str) -> Iterator[Store]:
    """A migrated, empty store on each backend in turn (the module's `store` is the served one)."""
    store = open_store(database_url)
    store.migrate()
    yield store
    store.close()


def test_an_installation_survives_the_store_with_its_rotation_fields(fresh: Store) -> None:
    store = fresh
    installations = StoreInstallations(store)
    original = Installation(
        app_id="A1", enterprise_id="E1", team_id="T1", team_name="One", bot_token="xoxb-1", bot_id="B1",
        bot_user_id="U1BOT", bot_scopes="commands,chat:write", bot_refresh_token="xoxe-1-r",
        bot_token_expires_at=1_900_000_000, user_id="U1", installed_at=1_700_000_000.5,
        custom_values={"note": "kept"})
    installations.save(original)
    assert json.loads(json.dumps(to_record(original))) == to_record(original)  # plain JSON
    # a workspace is found by its team id alone (deliveries know only the team)
    for enterprise in ("E1", None):
        found = installations.find_installation(enterprise_id=enterprise, team_id="T1")
        assert found is not None
        assert to_record(found) == to_record(original)
        assert found.bot_token_expires_at == 1_900_000_000 and found.bot_refresh_token == "xoxe-1-r"
        assert found.get_custom_value("note") == "kept"
    bot = installations.find_bot(enterprise_id="E1", team_id="T1")
    assert bot is not None and bot.bot_token == "xoxb-1" and bot.bot_token_expires_at == 1_900_000_000
    assert installations.find_installation(enterprise_id=None, team_id="T1", user_id="USOMEONE") is None
    assert installations.find_installation(enterprise_id=None, team_id="T2") is None
    installations.delete_installation(enterprise_id=None, team_id="T1", user_id="U1")  # user token only
    assert installations.find_bot(enterprise_id=None, team_id="T1") is not None
    installations.delete_all(enterprise_id="E1", team_id="T1")
    assert store.find_installation("T1", None) is None


def test_saving_an_installation_reenables_a_disabled_workspace(fresh: Store) -> None:
    store = fresh
    store.disable_workspace("T1", "invalid_auth")
    StoreInstallations(store).save(Installation(team_id="T1", bot_token="xoxb-2", user_id="U1"))
    assert store.workspace_disabled("T1") is None


def test_oauth_states_are_good_once_and_expire(fresh: Store) -> None:
    store = fresh
    states = StoreStates(store)
    state = states.issue()
    assert len(state) >= 24 and state != states.issue()
    assert states.consume(state) is True
    assert states.consume(state) is False
    assert states.consume("") is False and states.consume("never-issued") is False
    short = StoreStates(store, expiration_seconds=-1)
    assert short.consume(short.issue()) is False


# --- configuration -------------------------------------------------------------------------------------


def test_oauth_mode_needs_both_client_credentials() -> None:
    settings = Settings.from_env({"SLACK_CLIENT_ID": CLIENT_ID, "SLACK_CLIENT_SECRET": CLIENT_SECRET})
    assert settings.oauth_enabled and settings.slack_scopes == DEFAULT_SLACK_SCOPES
    assert settings.missing_slack() == ["SLACK_SIGNING_SECRET"]  # no SLACK_BOT_TOKEN needed
    assert Settings.from_env({"SLACK_CLIENT_ID": CLIENT_ID, "SLACK_CLIENT_SECRET": CLIENT_SECRET,
                              "SLACK_APP_TOKEN": "xapp-1"}).missing_slack() == []
    assert not Settings.from_env({}).oauth_enabled
    with pytest.raises(ConfigError) as only_id:
        Settings.from_env({"SLACK_CLIENT_ID": CLIENT_ID})
    assert only_id.value.variable == "SLACK_CLIENT_SECRET" and "SLACK_CLIENT_ID" in str(only_id.value)
    with pytest.raises(ConfigError) as only_secret:
        Settings.from_env({"SLACK_CLIENT_SECRET": CLIENT_SECRET})
    assert only_secret.value.variable == "SLACK_CLIENT_ID"
    assert CLIENT_SECRET not in str(only_secret.value)


def test_scopes_default_to_the_manifest_and_can_be_set() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert tuple(manifest["oauth_config"]["scopes"]["bot"]) == DEFAULT_SLACK_SCOPES
    assert Settings.from_env({"SLACK_SCOPES": " chat:write, commands ,,chat:write"}).slack_scopes == (
        "chat:write", "commands")
    for bad in ("chat write", ",", "Chat:Write"):
        with pytest.raises(ConfigError) as error:
            Settings.from_env({"SLACK_SCOPES": bad})
        assert error.value.variable == "SLACK_SCOPES"


def test_serve_with_half_the_client_credentials_is_a_one_line_error(tmp_path: Path) -> None:
    env = clean_env(SLACK_CLIENT_ID=CLIENT_ID, SLACK_SIGNING_SECRET=SECRET)
    done = subprocess.run([sys.executable, "-m", "bot", "serve"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "SLACK_CLIENT_SECRET" in lines[0], done.stderr


# --- logs ------------------------------------------------------------------------------------------------


def test_every_log_record_is_one_key_value_line() -> None:
    from bot.cli import OneLineFormatter

    formatter = OneLineFormatter()

    def line(name: str, message: str, exc: bool = False) -> str:
        record = logging.LogRecord(name, logging.WARNING, __file__, 1, message, (), None)
        if exc:
            try:
                raise ValueError("boom\nsecond line")
            except ValueError:
                record.exc_info = sys.exc_info()
        return formatter.format(record)

    library = line("slack_bolt", "Failed to fetch oauth.v2.access result\nThe server responded with: {}")
    assert "\n" not in library
    assert re.search(r'level=WARNING logger=slack_bolt event=log message="Failed to fetch .*\\n.*"$', library)
    ours = line("bot.oauth", "event=install_failed reason=invalid_state status=401")
    assert ours.endswith("logger=bot.oauth event=install_failed reason=invalid_state status=401")
    crashed = line("bot.poller", "event=poll_crashed", exc=True)
    assert "\n" not in crashed and ' exc="Traceback' in crashed
    assert "ValueError: boom\\nsecond line" in crashed


def test_the_app_home_of_each_workspace_shows_only_its_own_subscriptions_saves_and_follows(
    local: tuple[Store, FakeSlack, SlackWorkspaces, Path]
) -> None:
    """Two installed workspaces, each with the same person (one user id, as in an org) subscribed in the
    same Slack Connect channel: each App Home is published with its workspace's token and lists only that
    workspace's subscription, reading list and follows."""
    store, slack, workspaces, _feed = local
    slack.handlers["views.publish"] = lambda call: {"ok": True, "view": {"id": "V0HOME"}}
    slack.members = {"C0SHARED": {"U0SAME"}}
    tokens_of = {"TA": installed(store, workspaces, "TA"), "TB": installed(store, workspaces, "TB")}
    archived = store.latest(10)
    saved = {"TA": archived[-1], "TB": archived[-2]}
    for team, word in (("TA", "alpha"), ("TB", "beta")):
        store.subscribe(team, "C0SHARED", "U0SAME", [f"{word}-keyword"])
        store.follow(team, "U0SAME", [f"{word}-follow"])
        assert store.save_item(team, "U0SAME", saved[team].id) == "saved"
    with ThreadPoolExecutor(max_workers=2) as executor:
        bolt = build_app(oauth_settings(slack), store, executor=executor)
        app = Router(SlackRequestHandler(bolt, path=EVENTS_PATH), store, None, SECRET)
        for team in ("TA", "TB"):
            event = {"type": "app_home_opened", "user": "U0SAME", "channel": "D0SAME", "tab": "home",
                     "event_ts": "1700000000.000100"}
            assert wsgi_post(app, event_body(event, team=team)) == 200
            assert slack.wait_for(lambda s, team=team: any(
                c.token == tokens_of[team] for c in s.calls_to("views.publish")), 20)
    publishes = slack.calls_to("views.publish")
    assert len(publishes) == 2
    for team, other in (("TA", "TB"), ("TB", "TA")):
        [call] = [c for c in publishes if c.token == tokens_of[team]]
        view = call.params["view"]
        view = json.loads(view) if isinstance(view, str) else view
        removes = [b["accessory"]["value"] for b in view["blocks"]
                   if (b.get("accessory") or {}).get("action_id") == "unsave_item"]
        assert removes == [saved[team].id]
        text = json.dumps(view)
        mine, theirs = ("alpha", "beta") if team == "TA" else ("beta", "alpha")
        assert f"{mine}-keyword" in text and f"{mine}-follow" in text
        assert f"{theirs}-keyword" not in text and f"{theirs}-follow" not in text, other
