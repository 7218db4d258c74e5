"""The real `mlresearch-bot` command (python -m bot) in a subprocess: exit codes, one-line errors,
JSON shapes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.feed_server import Reply

DATA = Path(__file__).parent / "data"
RSS_PATH = DATA / "apple_ml_rss.xml"
ARCHIVE_PATH = DATA / "apple_ml_archive.xml"
ROOT = Path(__file__).resolve().parent.parent


def run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT")}
    base["PYTHONPATH"] = str(ROOT)
    base.update(env)
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], cwd=cwd, env=base, capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.fixture
def cwd(tmp_path):
    return tmp_path


def test_poll_then_search_shows_the_archive_working(cwd):
    first = run(cwd, "poll", "--json", FEED_URL=str(RSS_PATH))
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "fetched": 10,
        "new": 10,
        "delivered": 0,
        "failed": 0,
        "not_modified": False,
        "left_to_others": 0,
    }
    assert (cwd / "mlresearch.db").exists()
    found = run(cwd, "search", "captioning", "--json")
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits and set(hits[0]) == {"id", "title", "link", "published", "score", "by_meaning"}  # contract
    assert hits[0]["by_meaning"] is False  # it holds the word
    assert hits[0]["link"] == "https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning"
    assert hits[0]["published"].startswith("2026-05-11")
    assert isinstance(hits[0]["score"], float)


def test_an_unchanged_file_feed_polls_as_not_modified(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    again = run(cwd, "poll", "--json", FEED_URL=str(RSS_PATH))
    assert again.returncode == 0
    assert json.loads(again.stdout)["not_modified"] is True


def test_a_file_url_and_a_sqlite_url_work(cwd):
    (cwd / "sub").mkdir()  # the folder must exist (a missing one is refused: test_first_hour)
    proc = run(
        cwd, "poll", "--json", FEED_URL=ARCHIVE_PATH.as_uri(), DATABASE_URL=f"sqlite:///{cwd}/sub/db.sqlite"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fetched"] == 16
    assert (cwd / "sub" / "db.sqlite").exists()


def test_poll_over_http_then_304(cwd, feed_server):
    url = feed_server.feed("/rss.xml", RSS_PATH.read_bytes(), etag='"v1"')
    assert json.loads(run(cwd, "poll", "--json", FEED_URL=url).stdout)["fetched"] == 10
    second = json.loads(run(cwd, "poll", "--json", FEED_URL=url).stdout)
    assert second == {"fetched": 0, "new": 0, "delivered": 0, "failed": 0, "not_modified": True,
                      "left_to_others": 0}
    assert feed_server.requests_to("/rss.xml")[1].header("If-None-Match") == '"v1"'


def test_the_second_poll_reports_only_what_is_new(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "poll", "--json", FEED_URL=str(ARCHIVE_PATH))
    assert json.loads(proc.stdout)["new"] == 6


def test_search_prints_ranked_title_date_and_link(cwd):
    run(cwd, "poll", FEED_URL=str(ARCHIVE_PATH))
    proc = run(cwd, "search", "normalizing", "flows", "--limit", "2")
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0] == "1 result for “normalizing flows”:"  # only the one paper holds both
    assert "Normalizing Flows are Capable Generative Models" in proc.stdout.splitlines()[1]
    assert (
        "2025-07-09" in proc.stdout
        and "https://machinelearning.apple.com/research/normalizing-flows" in proc.stdout
    )
    assert len(json.loads(run(cwd, "search", "apple", "--limit", "2", "--json").stdout)) == 2


def test_dry_run_on_a_fresh_directory_creates_no_database(cwd):
    proc = run(cwd, "poll", "--dry-run", "--json", FEED_URL=str(RSS_PATH))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert (out["fetched"], out["new"], out["delivered"]) == (10, 10, 0)
    assert list(cwd.iterdir()) == []
    text = run(cwd, "poll", "--dry-run", FEED_URL=str(RSS_PATH))
    assert text.returncode == 0 and "first poll" in text.stdout
    assert list(cwd.iterdir()) == []


def test_dry_run_on_an_existing_database_writes_nothing(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    db = cwd / "mlresearch.db"

    def snapshot() -> tuple:
        conn = sqlite3.connect(db)
        try:
            return tuple(
                conn.execute(f"SELECT * FROM {t}").fetchall() for t in ("items", "feed_state", "meta")
            )
        finally:
            conn.close()

    before = snapshot()
    proc = run(cwd, "poll", "--dry-run", "--json", FEED_URL=str(ARCHIVE_PATH))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["new"] == 6 and len(out["items"]) == 6
    assert snapshot() == before
    assert json.loads(run(cwd, "poll", "--json", FEED_URL=str(ARCHIVE_PATH)).stdout)["new"] == 6


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POLL_INTERVAL", "soon"),
        ("POLL_INTERVAL", "-5"),
        ("DATABASE_URL", "postgres://u@h"),
        ("DATABASE_URL", "mysql://x"),
        ("FEED_URL", "ftp://example.com/rss"),
        ("LOG_LEVEL", "chatty"),
        ("SLACK_BOT_TOKEN", "xoxp-user-token"),
        ("SLACK_API_URL", "not a url"),
    ],
)
def test_a_malformed_config_value_is_a_one_line_error_naming_it_exit_2(cwd, variable, value):
    proc = run(cwd, "poll", **{"FEED_URL": str(RSS_PATH), variable: value})
    assert_one_line_error(proc, 2, variable)
    assert not (cwd / "mlresearch.db").exists()


def test_a_dotenv_file_is_read_and_the_environment_wins(cwd):
    (cwd / ".env").write_text(f"FEED_URL={RSS_PATH}\nPOLL_INTERVAL=oops\n")
    assert_one_line_error(run(cwd, "poll"), 2, "POLL_INTERVAL")
    proc = run(cwd, "poll", "--json", POLL_INTERVAL="60")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["fetched"] == 10


def test_a_missing_feed_file_fails_with_exit_1(cwd):
    proc = run(cwd, "poll", FEED_URL=str(cwd / "nope.xml"))
    assert_one_line_error(proc, 1, "nope.xml")


def test_an_http_500_fails_with_exit_1_and_still_prints_json(cwd, feed_server):
    url = feed_server.route("/rss.xml", Reply(status=500))
    proc = run(cwd, "poll", "--json", FEED_URL=url)
    assert_one_line_error(proc, 1, "500")
    assert json.loads(proc.stdout)["fetched"] == 0


def test_an_html_page_fails_with_exit_1(cwd, feed_server):
    url = feed_server.feed(
        "/rss.xml", b"<!DOCTYPE html><html><body>hi</body></html>", content_type="text/html"
    )
    assert_one_line_error(run(cwd, "poll", FEED_URL=url), 1, "not an RSS")


def test_a_pasted_link_lists_the_item_at_it_and_one_not_in_the_archive_is_one_line(cwd):
    """A link searched as words said "no item holds 'https', 'machinelearning', 'com'" (until 2026-12-06)."""
    run(cwd, "poll", FEED_URL=str(ARCHIVE_PATH))
    proc = run(cwd, "search", "https://machinelearning.apple.com/research/normalizing-flows/?utm_source=x")
    assert proc.returncode == 0 and proc.stdout.splitlines()[0] == \
        "1 result for “https://machinelearning.apple.com/research/normalizing-flows”:"
    assert "Normalizing Flows are Capable Generative Models" in proc.stdout.splitlines()[1]
    gone = run(cwd, "search", "https://arxiv.org/abs/2401.12345")
    assert (gone.returncode, gone.stdout, gone.stderr) == \
        (0, "That link is not in the archive: https://arxiv.org/abs/2401.12345\n", "")
    assert run(cwd, "search", "https://example.com/", "--json").stdout == "[]\n"


@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_search_is_a_one_line_usage_error(cwd, query):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    assert_one_line_error(run(cwd, "search", query), 2)


@pytest.mark.parametrize("query", ["captioning " * 40, "y" * 5000])
def test_an_over_long_search_searches_its_first_words_and_says_so_in_one_line(cwd, query):
    """The line saying so is information, on stdout above the answer (stderr is for errors only)."""
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "search", query)
    assert (proc.returncode, proc.stderr) == (0, "")
    said, line = proc.stdout.splitlines()[:2]
    assert said == "Your search was longer than 256 characters; I searched its first words."
    if query.startswith("captioning"):
        assert "BalCapRL" in proc.stdout
    else:  # nothing found: the reply names the query, cut as Slack's reply cuts it, not all 5,000 characters
        assert line.startswith("No results for “yyy") and "…”" in line and len(line) < 300


@pytest.mark.parametrize(("command", "answered"), [
    ("search", lambda out: "BalCapRL" in out),
    ("summarize", lambda out: out.startswith("What Apple ML Research says about “image captioning” (")),
])
def test_a_quote_left_open_is_said_in_one_line(cwd, command, answered):
    """A search and a summary of the words loose, one line above the answer saying why (on stdout: it is no
    error), and the words quoted back without the open mark."""
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, command, '"image captioning')
    assert (proc.returncode, proc.stderr) == (0, "")
    said, answer = proc.stdout.split("\n", 1)
    assert said == ("A quote mark was not closed, so I searched its words loose, not as a phrase; close it "
                    "to search the phrase.")
    assert answered(answer), proc.stdout


def test_a_summary_of_a_misspelt_topic_says_what_it_searched_for(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "summarize", "captoning")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Searched for “captioning” (you typed “captoning”)\n"
                                  "What Apple ML Research says about “captioning” (")


def test_a_misspelt_quoted_phrase_finds_nothing_and_says_what_was_meant(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "search", '"image captoning"')
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1
    assert proc.stdout.startswith("No results for “image captoning”. No item says “image captoning”: did you "
                                  "mean “image captioning”? Try")


def test_a_filtered_search_that_finds_nothing_says_to_drop_the_filter(cwd):
    """As a Slack reply does; a search of only a filter is not told to check its spelling. (When the words
    alone find items, the line says how many: tests/test_cli_meaning.py.)"""
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "search", "since:2030-01-01", "zzqqxx")
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1, proc.stdout
    assert proc.stdout.rstrip().endswith("check the spelling, drop the since:, until:, type:, author:, "
                                         "venue: or has: filter, or see `mlresearch-bot latest`.")
    proc = run(cwd, "search", "until:1999-01-01")
    assert proc.stdout == ("No results for “until:1999-01-01”: no item matches the filter; widen or drop "
                           "it. The newest item is from 2026-06-08: `mlresearch-bot latest` lists the "
                           "newest.\n")
    assert run(cwd, "search", "zzqqxx").stdout.rstrip().endswith("check the spelling, or see `mlresearch-bot "
                                                                 "latest`.")


NO_WORDS = "Type some words to search for, for example: search image captioning"


@pytest.mark.parametrize(("query", "said"), [
    ("AND(", "Those are all common words"), ('"', NO_WORDS), ("NEAR/3 *", []), ("-", NO_WORDS),
    ("🙂", NO_WORDS), ("title:x", []),
])
def test_fts_syntax_never_escapes_the_cli(cwd, query, said):
    """Search syntax of other engines is words here: alone, it is a one-line usage error (exit 2) or words
    no item holds (an empty list, exit 0), never an operator, a field or a traceback."""
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    proc = run(cwd, "search", "--json", "--", query)
    if isinstance(said, str):
        assert_one_line_error(proc, 2, said)
        assert proc.stderr.startswith("mlresearch-bot: ") and proc.stdout == ""
    else:
        assert proc.returncode == 0 and proc.stderr == "" and json.loads(proc.stdout) == said


def test_fts_syntax_around_a_word_finds_what_the_word_finds(cwd):
    """Operators, fields, boosts and brackets typed around "captioning" change nothing: each finds the
    captioning paper, as the word alone does."""
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    alone = run(cwd, "search", "--json", "captioning")
    links = [hit["link"] for hit in json.loads(alone.stdout)]
    assert links == ["https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning"]
    for query in ("captioning AND(", '"captioning', "captioning NEAR/3 *", "title:captioning", "captioning^2",
                  "{captioning}", "captioning)", "captioning 🙂", "(captioning OR)"):
        proc = run(cwd, "search", "--json", "--", query)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (query, proc.stderr)
        assert [hit["link"] for hit in json.loads(proc.stdout)] == links, query


@pytest.mark.parametrize(
    "args", [["bogus"], ["search"], ["search", "x", "--limit", "many"], ["poll", "--nope"]]
)
def test_bad_usage_exits_2_with_one_line(cwd, args):
    assert_one_line_error(run(cwd, *args), 2, "--help")


def test_a_bad_limit_exits_2(cwd):
    run(cwd, "poll", FEED_URL=str(RSS_PATH))
    assert_one_line_error(run(cwd, "search", "apple", "--limit", "0"), 2, "limit")


def test_a_database_that_is_not_sqlite_fails_with_exit_1(cwd):
    (cwd / "mlresearch.db").write_bytes(b"this is not a database" * 100)
    proc = run(cwd, "search", "captioning")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("level", "shown"), [("INFO", False), ("WARNING", False), ("DEBUG", True)])
def test_waitress_queue_depth_warnings_are_logged_only_at_debug(level, shown):
    """waitress warns "Task queue depth is N" for every request that waits for a thread: a line per request
    in a burst. Logged with LOG_LEVEL=DEBUG only; waitress's other warnings stay."""
    import io
    import logging

    from bot.cli import setup_logging
    from bot.config import Settings

    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging(Settings.from_env({"LOG_LEVEL": level}), io.StringIO())
        assert logging.getLogger("waitress.queue").isEnabledFor(logging.WARNING) is shown
        assert logging.getLogger("waitress").isEnabledFor(logging.WARNING)
    finally:
        root.handlers[:], level_before = saved
        root.setLevel(level_before)


# --- the parser: one subcommand built at a time -----------------------------------------------------------

ARGUMENTS = {  # each command with every option it takes
    "serve": ["--or-shell"], "poll": ["--dry-run", "--json", "--no-deliver"], "worker": ["--once"],
    "backfill": ["--url", "x", "--dry-run", "--json", "--pages"],
    "search": ["a", "b", "--limit", "3", "--json"],
    "summarize": ["a", "--json"], "related": ["a", "--limit", "2", "--json"], "latest": ["3", "--json"],
    "status": ["--json"], "reindex": ["--json"], "feedback": ["--since", "2026-01-01", "--json"],
    "cite": ["a", "b"], "export": ["--bibtex", "--saved-by", "U1", "--since", "2026-01-01"], "shell": [],
    "demo": ["--json"], "migrate": [],
}


def test_every_command_has_a_handler_and_one_built_alone_parses_as_the_whole_parser() -> None:
    from bot.cli import HANDLERS, build_parser

    whole = build_parser()
    (sub,) = [a for a in whole._actions if a.dest == "command"]
    assert set(sub.choices) == set(HANDLERS) == set(ARGUMENTS)
    for command, arguments in ARGUMENTS.items():
        alone = build_parser(only=command)
        (one,) = [a for a in alone._actions if a.dest == "command"]
        assert list(one.choices) == [command]
        assert alone.parse_args([command, *arguments]) == whole.parse_args([command, *arguments])


def test_a_subcommands_help_and_the_whole_help_still_list_what_they_should(cwd) -> None:
    whole = run(cwd, "--help")
    assert whole.returncode == 0 and all(command in whole.stdout for command in ARGUMENTS)
    one = run(cwd, "export", "--help")
    assert one.returncode == 0 and "--saved-by" in one.stdout and "--bibtex" in one.stdout
    wrong = run(cwd, "export", "--bibtx")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
    assert "unrecognized arguments: --bibtx" in wrong.stderr
