"""What a newcomer met on a clean clone (issue 21): the commands the README and CONTRACT name exist on the
command line (`latest`, `status`, `reindex --json`), a misspelt command names the nearest one, a typo in
DATABASE_URL or FEED_URL is one line saying what is wrong (no folder is made), and `serve` checks its token
once at start."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from bot.commands import HANDLERS
from bot.store import Store
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import ServeProcess, free_port
from tests.test_newcomer import bot, clean_env, one_line_error

ROOT = Path(__file__).resolve().parent.parent
RSS = ROOT / "tests" / "data" / "apple_ml_rss.xml"
TOKEN = "xoxb-first-hour-0000"


@pytest.fixture(scope="module")
def polled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ./mlresearch.db holds the feed's ten items."""
    home = tmp_path_factory.mktemp("polled")
    assert bot(home, "poll", FEED_URL=str(RSS)).returncode == 0
    return home


# --- commands that exist everywhere else ------------------------------------------------------------------


def test_a_misspelt_command_names_the_nearest_one(tmp_path: Path) -> None:
    line = one_line_error(bot(tmp_path, "serach", "captioning"), 2)
    assert "did you mean search?" in line and "'serach'" in line
    assert "choose from" not in line
    assert "did you mean status?" in one_line_error(bot(tmp_path, "stauts"), 2)
    far = one_line_error(bot(tmp_path, "xyzzy"), 2)
    assert "unknown command 'xyzzy'" in far and "did you mean" not in far
    assert not list(tmp_path.iterdir())  # a usage error opens nothing


def test_reindex_json_is_quiet_and_prints_one_object(polled: Path) -> None:
    proc = bot(polled, "reindex", "--json")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["items"] == 10 and answer["model"] and isinstance(answer["seconds"], float)


def test_latest_on_the_command_line_answers_as_the_slash_command(polled: Path) -> None:
    text = bot(polled, "latest", "2")
    assert text.returncode == 0 and text.stderr == ""
    assert text.stdout.startswith(" 1. Introducing the Third Generation") and " 2. " in text.stdout
    assert " 3. " not in text.stdout
    five = bot(polled, "latest", "--json")
    hits = json.loads(five.stdout)
    assert len(hits) == 5 and set(hits[0]) == {"id", "title", "link", "published", "score", "by_meaning"}
    assert not any(h["by_meaning"] for h in hits)  # search's keys; none listed for its meaning
    assert [h["published"] for h in hits] == sorted((h["published"] for h in hits), reverse=True)
    capped = bot(polled, "latest", "50", "--json")
    assert len(json.loads(capped.stdout)) == 10
    assert "1 to 20" in one_line_error(bot(polled, "latest", "two"), 2)


def test_latest_and_status_on_an_empty_archive(tmp_path: Path) -> None:
    assert bot(tmp_path, "migrate").returncode == 0
    empty = bot(tmp_path, "latest")
    assert empty.returncode == 0 and "archive is empty" in empty.stdout
    assert json.loads(bot(tmp_path, "latest", "--json").stdout) == []
    status = json.loads(bot(tmp_path, "status", "--json").stdout)
    assert status["feed"] is None and status["items"] == 0 and status["subscriptions"] == []


def test_status_on_the_command_line_says_what_the_slash_command_says(polled: Path) -> None:
    text = bot(polled, "status", FEED_URL=str(RSS))  # the feed it polled
    assert text.returncode == 0 and text.stderr == ""
    assert "Feed: OK" in text.stdout and "Archive: 10 items" in text.stdout
    assert "Subscriptions: 0" in text.stdout and "Summaries: extractive" in text.stdout
    assert "*" not in text.stdout  # mrkdwn made text
    answer = json.loads(bot(polled, "status", "--json", FEED_URL=str(RSS)).stdout)
    assert answer["feed"]["ok"] is True and answer["feed"]["error_streak"] == 0
    assert answer["items"] == 10 and answer["newest"]["title"].startswith("Introducing the Third")
    assert answer["summaries"] == "extractive"


def test_status_lists_every_channels_subscription(tmp_path: Path) -> None:
    from bot.store import SQLiteStore

    store = SQLiteStore(tmp_path / "mlresearch.db")
    store.migrate()
    store.subscribe("T1", "C1", "U1", ["privacy"])
    store.subscribe("T1", "C2", "U1", [])
    text = bot(tmp_path, "status").stdout
    assert "Subscriptions: 2" in text and "T1/C1: subscribed to items matching `privacy`" in text
    assert "T1/C2: subscribed to every new item" in text
    listed = json.loads(bot(tmp_path, "status", "--json").stdout)["subscriptions"]
    assert [(s["channel_id"], s["keywords"]) for s in listed] == [("C1", ["privacy"]), ("C2", [])]


# --- typos in the configuration ---------------------------------------------------------------------------


def test_a_sqlite_url_whose_folder_is_missing_is_refused_and_no_folder_is_made(tmp_path: Path) -> None:
    for command in (("poll",), ("migrate",), ("poll", "--dry-run"), ("shell",)):
        proc = bot(tmp_path, *command, DATABASE_URL="sqlite:///nope/dir/x.db", FEED_URL=str(RSS))
        line = one_line_error(proc, 2)
        assert "DATABASE_URL" in line and "nope/dir" in line and "does not exist" in line
    assert not (tmp_path / "nope").exists()
    (tmp_path / "file.db").write_bytes(b"")
    into_a_file = bot(tmp_path, "poll", DATABASE_URL="sqlite:///file.db/x.db")
    assert "is a file, not a folder" in one_line_error(into_a_file, 2)
    (tmp_path / "folder.db").mkdir()
    assert "is a folder" in one_line_error(bot(tmp_path, "migrate", DATABASE_URL="sqlite:///folder.db"), 2)


def test_the_store_itself_makes_no_missing_folder(tmp_path: Path) -> None:
    from bot.errors import StoreError
    from bot.store import SQLiteStore

    with pytest.raises(StoreError, match="folder does not exist"):
        SQLiteStore(tmp_path / "missing" / "x.db").migrate()
    assert not (tmp_path / "missing").exists()


def test_a_feed_url_without_a_scheme_says_so(tmp_path: Path) -> None:
    proc = bot(tmp_path, "poll", FEED_URL="machinelearning.apple.com/rss.xml")
    line = one_line_error(proc, 2)
    assert "FEED_URL" in line and "no scheme" in line and "https://machinelearning.apple.com/rss.xml" in line
    assert "No such file" not in line and proc.stdout == ""
    # a missing file that looks like one is still a missing file
    assert "could not be read" in one_line_error(bot(tmp_path, "poll", FEED_URL="rss.xml"), 1)


def test_a_database_port_out_of_range_is_blamed_on_the_port(tmp_path: Path) -> None:
    line = one_line_error(bot(tmp_path, "poll", DATABASE_URL="postgresql://u:secret@localhost:99999/x"), 2)
    assert "port" in line and "99999" in line and "host and a database" not in line
    assert "secret" not in line


def test_a_failed_poll_prints_no_counts_before_its_error(tmp_path: Path) -> None:
    proc = bot(tmp_path, "poll", FEED_URL=str(tmp_path / "missing.xml"))
    assert "could not be read" in one_line_error(proc, 1)
    assert proc.stdout == ""
    # under --json the object still prints
    listed = bot(tmp_path, "poll", "--json", FEED_URL=str(tmp_path / "missing.xml"))
    assert listed.returncode == 1 and "could not be read" in json.loads(listed.stdout)["error"]


def test_summarize_with_no_topic_asks_for_a_topic(tmp_path: Path) -> None:
    line = one_line_error(bot(tmp_path, "summarize", ""), 2)
    assert "topic" in line and "search for" not in line


def test_the_manifest_usage_hint_names_every_command() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    (command,) = manifest["features"]["slash_commands"]
    hint = command["usage_hint"]
    named = {part.split()[0] for part in hint.split("|")}
    assert named == set(HANDLERS)


# --- serve checks its token once ---------------------------------------------------------------------------


def _serve_env(tmp_path: Path, api_url: str) -> dict[str, str]:
    return clean_env(SLACK_BOT_TOKEN=TOKEN, SLACK_SIGNING_SECRET="first-hour-secret", SLACK_API_URL=api_url,
                     DATABASE_URL=f"sqlite:///{tmp_path / 'bot.db'}", POLL_INTERVAL="0",
                     PORT=str(free_port()))


def test_serve_with_a_token_slack_refuses_stops_in_one_line(tmp_path: Path, slack_api: FakeSlack) -> None:
    slack_api.fault("auth.test", error="invalid_auth", times=None)
    proc = subprocess.run([sys.executable, "-m", "bot", "serve"], cwd=tmp_path,
                          env=_serve_env(tmp_path, slack_api.url), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr and TOKEN not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid_auth" in lines[0] and "SLACK_BOT_TOKEN" in lines[0]
    assert "event=listening" not in proc.stdout
    assert len(slack_api.calls_to("auth.test")) == 1


def test_serve_with_a_good_token_asks_once_and_starts(tmp_path: Path, slack_api: FakeSlack) -> None:
    env = {k: v for k, v in _serve_env(tmp_path, slack_api.url).items() if k != "PORT"}
    with ServeProcess(env, tmp_path) as process:
        assert [c.token for c in slack_api.calls_to("auth.test")] == [TOKEN]
    assert "event=token_checked" in process.output()


def test_serve_starts_with_a_warning_when_slack_is_unreachable(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    env = {k: v for k, v in _serve_env(tmp_path, f"http://127.0.0.1:{closed}/api/").items() if k != "PORT"}
    with ServeProcess(env, tmp_path) as process:
        pass
    out = process.output()
    assert "event=token_unchecked reason=unreachable" in out and "level=WARNING" in out
    assert "Traceback" not in out


def test_serve_in_oauth_mode_asks_nothing_at_start(tmp_path: Path, slack_api: FakeSlack) -> None:
    dropped = ("PORT", "SLACK_BOT_TOKEN")
    env = {k: v for k, v in _serve_env(tmp_path, slack_api.url).items() if k not in dropped}
    env.update(SLACK_CLIENT_ID="1.2", SLACK_CLIENT_SECRET="oauth-secret")
    with ServeProcess(env, tmp_path):
        pass
    assert slack_api.calls_to("auth.test") == []


def test_serve_starts_with_a_warning_when_slack_answers_500(tmp_path: Path, slack_api: FakeSlack) -> None:
    slack_api.fault("auth.test", status=500, times=None)
    env = {k: v for k, v in _serve_env(tmp_path, slack_api.url).items() if k != "PORT"}
    with ServeProcess(env, tmp_path) as process:
        pass
    out = process.output()
    assert "event=token_unchecked reason=slack_error" in out and "status=500" in out
    assert "Traceback" not in out


# --- a worker with nothing to post with --------------------------------------------------------------------


def test_a_worker_without_a_token_is_one_line_on_both_stores(tmp_path: Path, store: Store,
                                                               database_url: str) -> None:
    """On PostgreSQL, `worker` without a token printed a timestamped WARNING (delivery_disabled) and then its
    error: two lines for one problem (until 2026-12-06). Now one line on stderr, nothing on stdout; on
    SQLite, the one line says a worker needs PostgreSQL."""
    proc = bot(tmp_path, "worker", DATABASE_URL=database_url)
    line = one_line_error(proc, 2)
    assert proc.stdout == ""
    wanted = "needs PostgreSQL" if store.backend == "sqlite" else "worker has nothing to post with: set SLACK"
    assert wanted in line
