"""The `mlresearch-bot` command: argument parsing, `.env` loading, exit codes, the log's one-line format.
Nothing else: every subcommand's handler lives beside the library calls it wraps, named in `HANDLERS`:

    search, summarize, related, latest, status, feedback   bot/cli_archive.py  the archive's reads
    poll, backfill                                         bot/cli_feed.py     the feed and index, written in
    serve, shell, worker                                   bot/cli_run.py      the long-running processes
    migrate, reindex, demo                                 bot/cli_admin.py    the database's upkeep
    cite, export                                           bot/cli_cite.py     BibTeX

Exit status: 0 success, 1 an operation failed, 2 bad usage or configuration (by error class:
bot.errors.REPORTS). Errors are one line on stderr; no traceback reaches the terminal (set LOG_LEVEL=DEBUG
to log one).

Each subcommand imports its modules (the store, the pipeline, the search index, the server, the shell) when it
runs, so `--help`, `--version` and a usage error pay for none of them.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from bot import __version__, cli_admin, cli_archive, cli_cite, cli_feed, cli_run
from bot.cli_common import err as _err
from bot.config import Settings, load_environment
from bot.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, BotError, UsageError, report

__all__ = ["HANDLERS", "OneLineFormatter", "build_parser", "main", "setup_logging"]
log = logging.getLogger("bot")

HANDLERS: dict[str, Callable[[Settings, argparse.Namespace], int]] = {
    "serve": cli_run.cmd_serve,
    "poll": cli_feed.cmd_poll,
    "backfill": cli_feed.cmd_backfill,
    "search": cli_archive.cmd_search,
    "summarize": cli_archive.cmd_summarize,
    "related": cli_archive.cmd_related,
    "latest": cli_archive.cmd_latest,
    "status": cli_archive.cmd_status,
    "reindex": cli_admin.cmd_reindex,
    "feedback": cli_archive.cmd_feedback,
    "cite": cli_cite.cmd_cite,
    "export": cli_cite.cmd_export,
    "shell": cli_run.cmd_shell,
    "demo": cli_admin.cmd_demo,
    "migrate": cli_admin.cmd_migrate,
    "worker": cli_run.cmd_worker,
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = " ".join(["mlresearch-bot", *self.prog.split()[1:], "--help"])
        raise UsageError(f"{message} (see: {command})")


class _NotBuilt:
    """A subcommand's parser left out (`build_parser(only=…)`): the arguments given to it go nowhere."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `only` the one subcommand to be parsed: each parser argparse builds
    costs about half a millisecond (its messages are looked up through gettext), a twentieth of `serve`'s
    start-up for the sixteen."""
    parser = _Parser(prog="mlresearch-bot", description="Follow Apple Machine Learning Research from Slack.")
    parser.add_argument("--version", action="version", version=f"mlresearch-bot {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def add(name: str, **kwargs: Any) -> Any:
        return subparsers.add_parser(name, **kwargs) if only in (None, name) else _NotBuilt()

    serve = add("serve", help="run the Slack app (HTTP or Socket Mode) and the poller")
    serve.add_argument("--or-shell", action="store_true", help="without Slack credentials, start the shell")

    poll = add("poll", help="one poll cycle: fetch, store, deliver")
    poll.add_argument("--dry-run", action="store_true", help="write nothing, post nothing; print what is new")
    poll.add_argument("--json", action="store_true", help="print one JSON object")
    poll.add_argument("--no-deliver", action="store_true",
                      help="fetch, store and queue only; worker processes deliver (PostgreSQL)")

    worker = add("worker", help="deliver queued posts until stopped; several may run (PostgreSQL)")
    worker.add_argument("--once", action="store_true", help="deliver what is open now, then exit")

    backfill = add("backfill", help="merge every post of the research index into the archive")
    backfill.add_argument("--url", help="the research index page (default: /research on the feed's site)")
    backfill.add_argument("--dry-run", action="store_true", help="write nothing; say what would change")
    backfill.add_argument("--json", action="store_true", help='print {"found", "added", "enriched"}')
    backfill.add_argument("--pages", action="store_true",
                          help="then read each post's own page not read yet (paper, code, venue), 1 a second")

    search = add("search", help="search the archive")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--limit", type=int, default=10, help="at most this many results (default 10)")
    search.add_argument("--json", action="store_true", help="print a JSON list")

    summarize = add("summarize", help="summarize what the archive says about a topic")
    summarize.add_argument("topic", nargs="+")
    summarize.add_argument("--json", action="store_true")

    related = add("related", help="the items nearest to an archive item")
    related.add_argument("item", nargs="+", help="a link to an archive item, or words of its title")
    related.add_argument("--limit", type=int, default=5, help="at most this many items (default 5)")
    related.add_argument("--json", action="store_true", help="print a JSON list (as search --json does)")

    latest = add("latest", help="the newest items of the archive")
    latest.add_argument("n", nargs="?", default=None, help="how many (1 to 20, default 5)")
    latest.add_argument("--json", action="store_true", help="print a JSON list (as search --json does)")

    status = add("status", help="the feed's health, the archive and the subscriptions")
    status.add_argument("--json", action="store_true", help="print one JSON object")

    reindex = add("reindex", help="rebuild what search derives from the archive (index, vectors)")
    reindex.add_argument("--json", action="store_true", help='quiet; print {"items", "model", "seconds"}')
    feedback = add("feedback", help="people's votes on the bot's answers (which questions fail)")
    feedback.add_argument("--since", metavar="YYYY-MM-DD", help="only votes cast on or after this day (UTC)")
    feedback.add_argument("--json", action="store_true", help="print a JSON list")
    cite = add("cite", help="an archive item's BibTeX entry")
    cite.add_argument("item", nargs="+", help="a link to an archive item, or words of its title")
    export = add("export", help="BibTeX entries for the archive, or one person's reading list")
    export.add_argument("--bibtex", action="store_true", help="as BibTeX (the one format so far)")
    export.add_argument("--saved-by", metavar="USER", help="one person's reading list: a Slack user ID")
    export.add_argument("--since", metavar="YYYY-MM-DD", help="only items published on or after this day")
    add("shell", help="a local console in place of Slack")
    demo = add("demo", help="load the bundled archive of real posts into an empty database")
    demo.add_argument("--json", action="store_true", help='print {"demo", "loaded", "items"}')
    add("migrate", help="create or upgrade the database schema (Heroku's release phase runs it)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BotError as exc:  # exit status and line by class: bot.errors.REPORTS
        code, line = report(exc)
        _err(line)
        return code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback for the user
        log.debug("unexpected error", exc_info=True)
        _err(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return EXIT_FAILED


def _main(argv: list[str]) -> int:
    _check_command(argv)
    parser = build_parser(only=argv[0] if argv and argv[0] in HANDLERS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    environ = load_environment()
    settings = Settings.from_env(environ)
    if args.command == "serve" or (args.command == "worker" and not args.once):
        setup_logging(settings, sys.stdout)
    else:
        # A one-shot command's stderr is for its one-line error: logs only when LOG_LEVEL asks for them.
        quiet = not (environ.get("LOG_LEVEL") or "").strip()
        setup_logging(settings, sys.stderr, minimum=logging.ERROR if quiet else logging.NOTSET)
    return HANDLERS[args.command](settings, args)


def _check_command(argv: list[str]) -> None:
    """A first word that is no command: one line naming the nearest command ("did you mean search"),
    rather than argparse's list of every choice."""
    word = argv[0] if argv else ""
    if not word or word.startswith("-"):
        return
    commands = list(HANDLERS)
    if word in commands:
        return
    import difflib

    close = difflib.get_close_matches(word.lower(), commands, n=1, cutoff=0.6)
    shown = " ".join(word.split())[:40]
    hint = f": did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown command {shown!r}{hint} (see: mlresearch-bot --help)")


def setup_logging(settings: Settings, stream: Any, *, minimum: int = logging.NOTSET) -> None:
    """One line per event, key=value: on stdout for `serve` (as Heroku collects it), on stderr for the
    one-shot commands, whose stdout is their answer. `minimum` raises the level (quiet one-shot commands)."""
    level = max(settings.logging_level, minimum)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "slack_sdk", "slack_bolt", "waitress"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    # "Task queue depth is N": a WARNING for every request that waits for a free thread, so a burst of
    # commands writes a line each, at the moment the server is busiest (~4% of its CPU under 20 concurrent
    # searches). Shown with LOG_LEVEL=DEBUG only.
    logging.getLogger("waitress.queue").setLevel(logging.DEBUG if level <= logging.DEBUG else logging.ERROR)


class OneLineFormatter(logging.Formatter):
    """Every record on one line of key=value pairs: our messages already are `event=... key=value`; a
    library's message (Bolt, slack_sdk, waitress) becomes `event=log message="..."`, and a traceback is
    appended as `exc="..."`, both JSON-quoted so that no newline splits an event. Whatever a value holds (feed
    text, a request's fields, a library's message), the line holds no control character (C0, DEL, C1), no
    line or paragraph separator and no bidi override: each is written as a visible escape (`\\n`, `\\x1b`,
    `\\u2028`), so nothing can end a line early, forge the next one or repaint the terminal."""

    ESCAPES = {
        **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
        **{c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A))},
        ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
    }

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # arguments that do not fit the format: log what there is
            message = f"event=log message={json.dumps(str(record.msg), ensure_ascii=False)} args=" \
                      f"{json.dumps(repr(record.args), ensure_ascii=False)}"
        if not message.startswith("event="):
            message = "event=log message=" + json.dumps(message, ensure_ascii=False)
        line = f"{self.formatTime(record)} level={record.levelname} logger={record.name} {message}"
        if record.exc_info:
            line += " exc=" + json.dumps(self.formatException(record.exc_info), ensure_ascii=False)
        if record.stack_info:
            line += " stack=" + json.dumps(self.formatStack(record.stack_info), ensure_ascii=False)
        return line.translate(self.ESCAPES)
