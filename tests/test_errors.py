"""The one error tree: exit codes and lines by class, one-line messages, and the import circles it broke."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from bot import errors
from bot.cli import main
from bot.errors import (
    BotError,
    ConfigError,
    Failure,
    FeedHTTPError,
    FeedTimeout,
    LockTimeout,
    SearchError,
    SearchUnavailable,
    StoreError,
    SummaryError,
    UsageError,
    WorkspaceUnavailable,
    report,
)


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (UsageError("no such command"), 2, "no such command"),
        (ConfigError("PORT", "must be a number"), 2, "configuration error: PORT: must be a number"),
        (SearchError("since: needs a date"), 2, "since: needs a date"),
        (SearchUnavailable("still building"), 2, "still building"),
        (Failure("poll failed: HTTP 503"), 1, "poll failed: HTTP 503"),
        (FeedHTTPError("HTTP 503", status=503), 1, "HTTP 503"),
        (FeedTimeout("the feed timed out\nafter 20 s"), 1, "the feed timed out after 20 s"),
        (LockTimeout("another process is polling"), 1, "another process is polling"),
        (SummaryError("no answer"), 1, "no answer"),
        (WorkspaceUnavailable("not_installed", disable=True), 1, "not_installed"),
    ],
)
def test_each_class_maps_to_an_exit_code_and_one_line(error, code, line):
    assert report(error) == (code, line)


def test_every_error_class_is_a_bot_error_with_a_row_in_the_table():
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert len(classes) > 15 and all(issubclass(c, BotError) for c in classes)
    assert issubclass(LockTimeout, StoreError) and issubclass(SearchError, ValueError)


def test_the_cli_prints_a_bot_errors_line_and_exits_with_its_code(capsys):
    assert main(["search"]) == 2  # argparse: the query is missing
    err = capsys.readouterr().err
    assert err.startswith("mlresearch-bot: ") and err.count("\n") == 1


def imported_modules(module: str) -> set[str]:
    """Every module `module`'s source imports, anywhere in the file (in functions, under TYPE_CHECKING)."""
    path = Path(__file__).parent.parent / (module.replace(".", "/") + ".py")
    nodes = ast.walk(ast.parse(path.read_text()))
    return {n.module or "" for n in nodes if isinstance(n, ast.ImportFrom)}


@pytest.mark.parametrize(
    ("module", "other"),
    [
        ("bot.oauth", "bot.deliver"),
        ("bot.store.base", "bot.store.ledger"),
        ("bot.store.merge", "bot.store.archive"),
    ],
)
def test_the_old_import_circles_are_gone(module, other):
    assert module in imported_modules(other)  # one direction stays (deliver loads OAuth lazily)
    assert other not in imported_modules(module)


def test_records_import_nothing_of_the_bot():
    code = "import sys, bot.models, bot.errors; print(sorted(m for m in sys.modules if m.startswith('bot.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['bot.errors', 'bot.models']"
