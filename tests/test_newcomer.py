"""What a newcomer met (issue 11): the real `mlresearch-bot` in a fresh directory. An empty or missing archive
says so and how to fill it; reads create no file; "nothing found" is exit 0; a failed `poll --json` still
prints its object; PORT stops only `serve`; the shell keeps its prompt line clean and has one channel name."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.errors import ConfigError
from bot.shell import PROMPT, Console, run
from bot.store import SQLiteStore
from tests.fakes.archive import ARCHIVE, RSS, filled_store

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT")}
    base["PYTHONPATH"] = str(ROOT)
    base.update(env)
    return base


def bot(cwd: Path, *args: str, stdin: str = "", **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=clean_env(**env), input=stdin,
        capture_output=True, text=True, timeout=120,
    )


def one_line_error(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def screen(raw: str) -> list[str]:
    """What a terminal shows: a carriage return starts its line over, ESC[K clears the rest of it."""
    return [line.split("\r")[-1].replace("\x1b[K", "") for line in raw.replace("\r\n", "\n").split("\n")]


# --- an empty or missing archive -------------------------------------------------------------------------


def test_search_on_an_empty_archive_says_so_and_how_to_fill_it(tmp_path: Path) -> None:
    assert bot(tmp_path, "migrate").returncode == 0  # the archive exists and holds nothing
    text = bot(tmp_path, "search", "captioning")
    assert text.returncode == 0 and text.stderr == ""
    assert "archive is empty" in text.stdout and "poll" in text.stdout and "backfill" in text.stdout
    assert "spelling" not in text.stdout
    listed = bot(tmp_path, "search", "captioning", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []
    summary = bot(tmp_path, "summarize", "captioning")
    assert summary.returncode == 0 and "archive is empty" in summary.stdout and "backfill" in summary.stdout


def test_check_the_spelling_only_when_there_is_an_archive_to_search(tmp_path: Path) -> None:
    bot(tmp_path, "poll", FEED_URL=str(RSS))
    proc = bot(tmp_path, "search", "qwertyuiop")
    assert proc.returncode == 0 and "No results for “qwertyuiop”" in proc.stdout and "spelling" in proc.stdout
    assert "empty" not in proc.stdout


def test_the_slash_command_search_on_an_empty_archive_says_how_to_fill_it(tmp_path: Path) -> None:
    empty = SQLiteStore(tmp_path / "empty.db")
    empty.migrate()
    reply = handle(Invocation("search captioning", "T1", "C1", "U1"), Services(empty, Settings()))
    assert "archive is empty" in reply.text and "poll" in reply.text and "backfill" in reply.text
    assert "spelling" not in reply.text
    filled = Services(filled_store(tmp_path), Settings())
    assert "check the spelling" in handle(Invocation("search qwertyuiop", "T1", "C1", "U1"), filled).text


@pytest.mark.parametrize("database", ["default", "sqlite:///no/such/folder/bot.db", "absolute"])
@pytest.mark.parametrize(
    "args",
    [["search", "captioning"], ["search", "x", "--json"], ["summarize", "x"], ["summarize", "x", "--json"],
     ["status"], ["status", "--json"]],
)
def test_a_read_on_a_missing_sqlite_file_says_so_and_creates_nothing(
    tmp_path: Path, args: list[str], database: str
) -> None:
    """A file that does not exist yet: `poll` makes it, and the line says so. A folder that does not exist:
    the line names it, as `poll` would (until 2026-12-06 it advised `poll`, which then refused the folder)."""
    env = {} if database == "default" else {"DATABASE_URL": database}
    if database == "absolute":
        env["DATABASE_URL"] = f"sqlite:///{tmp_path}/deeper/bot.db"
    if database == "default":
        message = one_line_error(bot(tmp_path, *args, **env), 1)
        assert "no archive at ./mlresearch.db" in message and "mlresearch-bot poll" in message
        assert "backfill" in message
    else:
        message = one_line_error(bot(tmp_path, *args, **env), 2)
        assert "DATABASE_URL" in message and "folder" in message and "does not exist" in message
        assert "poll" not in message
        assert message == one_line_error(bot(tmp_path, "poll", FEED_URL=str(RSS), **env), 2)  # the same line
    assert list(tmp_path.iterdir()) == []


def test_writes_still_create_the_archive(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()  # the file, not its folder (a missing folder is refused: test_first_hour)
    (tmp_path / "b").mkdir()
    assert bot(tmp_path, "migrate", DATABASE_URL="sqlite:///a/m.db").returncode == 0
    assert bot(tmp_path, "poll", FEED_URL=str(RSS), DATABASE_URL="sqlite:///b/p.db").returncode == 0
    assert (tmp_path / "a" / "m.db").exists() and (tmp_path / "b" / "p.db").exists()


# --- one rule for "nothing found" ------------------------------------------------------------------------


def test_summarize_finding_nothing_exits_0_with_a_null_summary(tmp_path: Path) -> None:
    bot(tmp_path, "poll", FEED_URL=str(ARCHIVE))
    text = bot(tmp_path, "summarize", "qwertyuiop")
    assert text.returncode == 0 and text.stderr == "" and "Nothing in the archive" in text.stdout
    listed = bot(tmp_path, "summarize", "qwertyuiop", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"topic": "qwertyuiop", "summary": None, "items": []}
    found = bot(tmp_path, "search", "qwertyuiop", "--json")
    assert found.returncode == 0 and json.loads(found.stdout) == []


def test_a_failed_poll_json_still_prints_its_object_with_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.xml")
    proc = bot(tmp_path, "poll", "--json", FEED_URL=missing)
    assert "nope.xml" in one_line_error(proc, 1)
    out = json.loads(proc.stdout)
    assert out["fetched"] == 0 and "nope.xml" in out["error"]
    dry = bot(tmp_path, "poll", "--json", "--dry-run", FEED_URL=missing)
    assert "nope.xml" in one_line_error(dry, 1)
    out = json.loads(dry.stdout)
    assert out["dry_run"] is True and "nope.xml" in out["error"] and out["new"] == 0
    good = bot(tmp_path, "poll", "--json", FEED_URL=str(RSS))
    assert "error" not in json.loads(good.stdout)


# --- PORT is the server's ---------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ["abc", "0", "65536"])
def test_a_bad_port_does_not_stop_poll_or_search_only_serve(tmp_path: Path, port: str) -> None:
    poll = bot(tmp_path, "poll", "--json", FEED_URL=str(RSS), PORT=port)
    assert poll.returncode == 0, poll.stderr
    search = bot(tmp_path, "search", "captioning", PORT=port)
    assert search.returncode == 0 and "BalCapRL" in search.stdout
    elsewhere = tmp_path / "serve"
    elsewhere.mkdir()
    serve = bot(elsewhere, "serve", PORT=port, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s")
    message = one_line_error(serve, 2)
    assert "PORT" in message and port in message
    assert list(elsewhere.iterdir()) == []  # stopped before anything started


@pytest.mark.parametrize("port", ["0", "65536", "80a"])
def test_port_is_checked_where_it_is_used(port: str) -> None:
    settings = Settings.from_env({"PORT": port})
    with pytest.raises(ConfigError) as err:
        _ = settings.port
    assert err.value.variable == "PORT" and "\n" not in str(err.value)
    assert Settings.from_env({"PORT": " 8080 "}).port == 8080


# --- the shell --------------------------------------------------------------------------------------------


def test_make_run_on_a_fresh_clone_starts_a_friendly_shell_and_creates_nothing_until_it_polls(
    tmp_path: Path,
) -> None:
    env = {"FEED_URL": str(RSS), "POLL_INTERVAL": "0", "PORT": "not-a-port"}
    first = bot(tmp_path, "serve", "--or-shell", stdin="search captioning\nlatest\nstatus\nhelp\n", **env)
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    assert first.stdout.count("The archive is empty (no database at ./mlresearch.db yet)") == 4  # banner + 3
    assert "type `poll`" in first.stdout and "/mlresearch summarize" in first.stdout  # help still answers
    assert "can't reach the archive" not in first.stdout
    assert list(tmp_path.iterdir()) == []
    second = bot(tmp_path, "shell", stdin="poll\nsearch captioning\n", **env)
    assert second.returncode == 0, second.stderr
    assert "first poll: 10 items" in second.stdout and "BalCapRL" in second.stdout
    assert (tmp_path / "mlresearch.db").exists()
    failing = bot(tmp_path, "shell", stdin="poll\n", **{**env, "FEED_URL": str(tmp_path / "gone.xml")})
    assert failing.stdout.count("gone.xml could not be read") == 1  # the [poll] line, not a log line too
    assert "event=feed_error" not in failing.stdout + failing.stderr


def shell_out(tmp_path: Path, lines: str) -> str:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'bot.db'}", feed_url=str(RSS), poll_interval=0)
    out = io.StringIO()
    assert run(settings, io.StringIO(lines), out) == 0
    return out.getvalue()


def test_the_shell_channel_has_one_name_everywhere(tmp_path: Path) -> None:
    feed = tmp_path / "feed.xml"
    feed.write_bytes(RSS.read_bytes())
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'bot.db'}", feed_url=str(feed), poll_interval=0)
    first, news = io.StringIO(), io.StringIO()
    run(settings, io.StringIO("poll\nstatus\nsubscribe\nunsubscribe\nsubscribe\n"), first)
    feed.write_bytes(ARCHIVE.read_bytes())  # six new items
    run(settings, io.StringIO("poll\n"), news)
    text = first.getvalue() + news.getvalue()
    assert "CSHELL" not in text and "TSHELL" not in text
    assert "stands in for a Slack channel, #shell" in text
    for said in ("get new items in #shell", "Subscribed #shell", "Unsubscribed #shell"):
        assert said in text
    assert news.getvalue().count("New in #shell:") == 6


def test_the_first_poll_tells_only_an_unsubscribed_shell_to_subscribe(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    subscribed = shell_out(tmp_path / "a", "subscribe\npoll\n")
    first = next(line for line in subscribed.splitlines() if "first poll" in line)
    assert "subscribe" not in first and "print here" in first
    unsubscribed = shell_out(tmp_path, "poll\n")
    first = next(line for line in unsubscribed.splitlines() if "first poll" in line)
    assert "/mlresearch subscribe" in first


# --- the prompt line --------------------------------------------------------------------------------------


def test_console_news_while_the_prompt_waits_goes_above_it() -> None:
    out = io.StringIO()
    console = Console(out)
    console.prompt()
    console.write("[poll] fetched 16, 6 new, 0 printed here")
    assert screen(out.getvalue()) == ["[poll] fetched 16, 6 new, 0 printed here", PROMPT]
    console.answered()
    console.write("reply")
    assert screen(out.getvalue())[-2:] == [PROMPT + "reply", ""]


class TerminalStdin:
    """A stdin on a terminal; before each line is "typed", the poller logs a warning (as a background poll
    whose feed fails would, while the prompt waits)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def isatty(self) -> bool:
        return True

    def readline(self) -> str:
        record = logging.makeLogRecord(
            {"name": "bot.poller", "levelno": logging.WARNING, "levelname": "WARNING",
             "msg": "event=feed_error kind=http error='503 from the feed'"}
        )
        logging.getLogger("bot.poller").handle(record)  # to the root's handlers, whatever the levels are now
        return self.lines.pop(0) if self.lines else ""


def test_on_a_terminal_the_log_is_written_through_the_console(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'bot.db'}", feed_url=str(RSS), poll_interval=0)
    root = logging.getLogger()
    before = root.handlers[:]
    out = io.StringIO()
    assert run(settings, TerminalStdin(["help\n", "exit\n"]), out) == 0
    shown = screen(out.getvalue())
    logged = [line for line in shown if "event=feed_error" in line]
    assert len(logged) == 2 and not any(line.startswith(PROMPT) for line in logged)
    assert all(shown[shown.index(line) + 1].startswith(PROMPT) for line in logged)  # the prompt is back
    assert root.handlers == before  # the log is given back when the shell ends


def test_log_lines_never_land_on_the_prompt_line_of_a_real_terminal(tmp_path: Path) -> None:
    """`mlresearch-bot shell` on a pseudo-terminal, its feed failing on every background poll: each failure
    logs a warning and prints a [poll] line while the prompt waits."""
    master, slave = pty.openpty()
    env = clean_env(
        FEED_URL=str(tmp_path / "missing.xml"), POLL_INTERVAL="1", LOG_LEVEL="WARNING",
        DATABASE_URL=f"sqlite:///{tmp_path / 'bot.db'}",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "shell"], stdin=slave, stdout=slave, stderr=slave, cwd=tmp_path, env=env
    )
    os.close(slave)
    raw = b""

    def read_until(done: bool, deadline: float) -> None:
        nonlocal raw
        while time.monotonic() < deadline and not (done and raw.count(b"event=feed_error") >= 3):
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the other end closed
                    return
                if not chunk:
                    return
                raw += chunk

    try:
        read_until(True, time.monotonic() + 90)
        os.write(master, b"exit\n")
        proc.wait(timeout=60)
        read_until(False, time.monotonic() + 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    assert proc.returncode == 0
    shown = screen(raw.decode("utf-8", "replace"))
    assert sum("event=feed_error" in line for line in shown) >= 3, shown
    assert any(line.startswith("[poll] the feed failed") for line in shown), shown
    on_prompt = [line for line in shown if line.startswith(PROMPT) and line not in (PROMPT, PROMPT + "exit")]
    assert on_prompt == [], on_prompt
    assert "Traceback" not in raw.decode("utf-8", "replace")


def test_plain_make_lists_the_targets_and_runs_nothing() -> None:
    # as a person runs it: not under another make (CI runs this suite from `make test`, whose MAKEFLAGS and
    # MAKELEVEL would make the inner make announce its directory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    done = subprocess.run(["make", "-n", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0 and done.stdout.startswith("echo ")  # the default target only prints
    shown = subprocess.run(["make", "--no-print-directory"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60, env=env)
    assert shown.returncode == 0
    assert [line.split()[1] for line in shown.stdout.splitlines()] == ["run", "test", "test-lowest", "lint",
                                                                       "lock", "bench", "clean"]
