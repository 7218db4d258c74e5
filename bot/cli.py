"""The `mlresearch-bot` command: argument parsing, `.env` loading, exit codes. Nothing else.

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
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from bot import __version__, cli_cite
from bot.cli_archive import cmd_feedback, cmd_latest, cmd_related, cmd_search, cmd_status, cmd_summarize
from bot.cli_common import EMPTY_ARCHIVE, open_archive, open_store
from bot.cli_common import err as _err
from bot.cli_common import item_json as _item_json
from bot.cli_common import out as _out
from bot.config import Settings, load_environment, redact_url
from bot.errors import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    BotError,
    Failure,
    IndexReadError,
    ServeError,
    UsageError,
    report,
)
from bot.models import PollResult

__all__ = ["EMPTY_ARCHIVE", "build_parser", "cmd_feedback", "cmd_latest", "cmd_related", "cmd_search",
           "cmd_status", "cmd_summarize", "main", "open_archive", "setup_logging"]
log = logging.getLogger("bot")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        command = " ".join(["mlresearch-bot", *self.prog.split()[1:], "--help"])
        raise UsageError(f"{message} (see: {command})")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mlresearch-bot", description="Follow Apple Machine Learning Research from Slack.")
    parser.add_argument("--version", action="version", version=f"mlresearch-bot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the Slack app (HTTP or Socket Mode) and the poller")
    serve.add_argument("--or-shell", action="store_true", help="without Slack credentials, start the shell")

    poll = sub.add_parser("poll", help="one poll cycle: fetch, store, deliver")
    poll.add_argument("--dry-run", action="store_true", help="write nothing, post nothing; print what is new")
    poll.add_argument("--json", action="store_true", help="print one JSON object")
    poll.add_argument("--no-deliver", action="store_true",
                      help="fetch, store and queue only; worker processes deliver (PostgreSQL)")

    worker = sub.add_parser("worker", help="deliver queued posts until stopped; several may run (PostgreSQL)")
    worker.add_argument("--once", action="store_true", help="deliver what is open now, then exit")

    backfill = sub.add_parser("backfill", help="merge every post of the research index into the archive")
    backfill.add_argument("--url", help="the research index page (default: /research on the feed's site)")
    backfill.add_argument("--dry-run", action="store_true", help="write nothing; say what would change")
    backfill.add_argument("--json", action="store_true", help='print {"found", "added", "enriched"}')
    backfill.add_argument("--pages", action="store_true",
                          help="then read each post's own page not read yet (paper, code, venue), 1 a second")

    search = sub.add_parser("search", help="search the archive")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--limit", type=int, default=10, help="at most this many results (default 10)")
    search.add_argument("--json", action="store_true", help="print a JSON list")

    summarize = sub.add_parser("summarize", help="summarize what the archive says about a topic")
    summarize.add_argument("topic", nargs="+")
    summarize.add_argument("--json", action="store_true")

    related = sub.add_parser("related", help="the items nearest to an archive item")
    related.add_argument("item", nargs="+", help="a link to an archive item, or words of its title")
    related.add_argument("--limit", type=int, default=5, help="at most this many items (default 5)")
    related.add_argument("--json", action="store_true", help="print a JSON list (as search --json does)")

    latest = sub.add_parser("latest", help="the newest items of the archive")
    latest.add_argument("n", nargs="?", default=None, help="how many (1 to 20, default 5)")
    latest.add_argument("--json", action="store_true", help="print a JSON list (as search --json does)")

    status = sub.add_parser("status", help="the feed's health, the archive and the subscriptions")
    status.add_argument("--json", action="store_true", help="print one JSON object")

    reindex = sub.add_parser("reindex", help="rebuild what search derives from the archive (index, vectors)")
    reindex.add_argument("--json", action="store_true", help='quiet; print {"items", "model", "seconds"}')
    feedback = sub.add_parser("feedback", help="people's votes on the bot's answers (which questions fail)")
    feedback.add_argument("--since", metavar="YYYY-MM-DD", help="only votes cast on or after this day (UTC)")
    feedback.add_argument("--json", action="store_true", help="print a JSON list")
    cli_cite.add_parsers(sub)  # cite, export
    sub.add_parser("shell", help="a local console in place of Slack")
    demo = sub.add_parser("demo", help="load the bundled archive of real posts into an empty database")
    demo.add_argument("--json", action="store_true", help='print {"demo", "loaded", "items"}')
    sub.add_parser("migrate", help="create or upgrade the database schema (Heroku's release phase runs it)")
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
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_USAGE
    environ = load_environment()
    settings = Settings.from_env(environ)
    if args.command == "serve" or (args.command == "worker" and not args.once):
        setup_logging(settings, sys.stdout)
    else:
        # A one-shot command's stderr is for its one-line error: logs only when LOG_LEVEL asks for them.
        quiet = not (environ.get("LOG_LEVEL") or "").strip()
        setup_logging(settings, sys.stderr, minimum=logging.ERROR if quiet else logging.NOTSET)
    handler = {
        "serve": cmd_serve,
        "poll": cmd_poll,
        "backfill": cmd_backfill,
        "search": cmd_search,
        "summarize": cmd_summarize,
        "related": cmd_related,
        "latest": cmd_latest,
        "status": cmd_status,
        "reindex": cmd_reindex,
        "feedback": cmd_feedback,
        "cite": cmd_cite,
        "export": cmd_export,
        "shell": cmd_shell,
        "demo": cmd_demo,
        "migrate": cmd_migrate,
        "worker": cmd_worker,
    }[args.command]
    return handler(settings, args)


def _check_command(argv: list[str]) -> None:
    """A first word that is no command: one line naming the nearest command ("did you mean search"),
    rather than argparse's list of every choice."""
    word = argv[0] if argv else ""
    if not word or word.startswith("-"):
        return
    commands = list(_subcommands())
    if word in commands:
        return
    import difflib

    close = difflib.get_close_matches(word.lower(), commands, n=1, cutoff=0.6)
    shown = " ".join(word.split())[:40]
    hint = f": did you mean {close[0]}?" if close else ""
    raise UsageError(f"unknown command {shown!r}{hint} (see: mlresearch-bot --help)")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


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


def cmd_migrate(settings: Settings, args: argparse.Namespace) -> int:
    """Create or upgrade the schema; one line says what was done."""
    from bot import store as stores

    store = stores.open_store(settings.database_url)
    applied = store.migrate()
    done = f"applied {len(applied)} migration(s): {', '.join(applied)}" if applied else "already up to date"
    _out(f"{store.describe()}: schema {done}")
    # OAuth installations sealed with the first key (rotation); any that no key opens fails the release
    # phase, so a wrong or missing TOKEN_ENCRYPTION_KEY is seen before every delivery fails
    from bot.oauth import reseal_installations
    from bot.secrets_at_rest import TokenCipher

    resealed, unreadable = reseal_installations(store, TokenCipher.of(settings.token_encryption_keys))
    if settings.token_encryption_keys:
        _out(f"installations: {resealed} encrypted with the first TOKEN_ENCRYPTION_KEY key")
    if unreadable:
        held = "none of the TOKEN_ENCRYPTION_KEY keys opens" if settings.token_encryption_keys else \
            "they are encrypted and TOKEN_ENCRYPTION_KEY is not set"
        raise Failure(f"{unreadable} installation(s) cannot be decrypted: {held} (set the key they were "
                      "encrypted with; to rotate, put the new key first and keep the old one after it)")
    return EXIT_OK


def cmd_poll(settings: Settings, args: argparse.Namespace) -> int:
    try:
        return _poll(settings, args)
    except (Failure, BrokenPipeError):
        raise  # the object is already out (or nobody reads it)
    except Exception as exc:
        if args.json:  # a failure before any result still prints the object, saying what went wrong
            dry = {"dry_run": True} if args.dry_run else {}
            error = " ".join(str(exc).split())[:300] or type(exc).__name__
            _out(json.dumps({**PollResult().as_json(), **dry, "error": error}, ensure_ascii=False))
        raise


def _poll(settings: Settings, args: argparse.Namespace) -> int:
    from bot.blocks import counted  # imported with the pipeline anyway
    from bot.pipeline import Pipeline, would_burst
    from bot.store import open_store as store_at

    # A dry run reads the store as it is (not created, not migrated); a poll migrates it first.
    store = store_at(settings.database_url) if args.dry_run else open_store(settings)
    with Pipeline.from_settings(settings, store, no_deliver=getattr(args, "no_deliver", False)) as pipeline:
        if args.dry_run:
            new, baseline, fetched = pipeline.preview()
            bursts = [] if baseline else would_burst(store, new, settings.burst_threshold, pipeline.router)
            if args.json:
                _out(
                    json.dumps(
                        {
                            "fetched": fetched,
                            "new": len(new),
                            "delivered": 0,
                            "failed": 0,
                            "not_modified": fetched == 0 and not new,
                            "left_to_others": 0,
                            "dry_run": True,
                            "baseline": baseline,
                            "items": [_item_json(i) for i in new],
                            "bursts": [{"team_id": sub.team_id, "channel_id": sub.channel_id, "items": count}
                                       for sub, count in bursts],
                        }
                    )
                )
            elif baseline:
                _out(f"first poll: {counted(len(new), 'item')} would be recorded as seen; "
                     "nothing would be posted")
            else:
                _out(f"{counted(len(new), 'new item')} would be posted:" if new else "nothing new")
                for item in new:
                    _out(f"  {item.published:%Y-%m-%d}  {item.title}\n              {item.link}")
                for sub, count in bursts:
                    _out(f"{sub.team_id}/{sub.channel_id} would get a burst: one message, its {count} items "
                         f"in its thread (more than BURST_THRESHOLD={settings.burst_threshold})")
            return EXIT_OK
        demo = store.demo_loaded_at() is not None  # a successful poll replaces it (bot.demo)
        result = pipeline.poll_once()
    if args.json:
        error = {"error": result.error} if result.error else {}
        _out(json.dumps({**result.as_json(), **error}, ensure_ascii=False))
    elif not result.error:  # a failed poll is its one error line, not zero counts before it
        state = "not modified" if result.not_modified else f"fetched {result.fetched}"
        extra = " (first poll: recorded as seen, nothing posted)" if result.baseline else ""
        extra += " (the demo archive was replaced)" if demo else ""
        _out(f"{state}, {result.new} new, {result.delivered} delivered, {result.failed} failed{extra}")
    if result.error:
        raise Failure(f"poll failed: {result.error}")
    return EXIT_OK


def cmd_worker(settings: Settings, args: argparse.Namespace) -> int:
    """Deliver open ledger rows beside other workers (bot.worker) until SIGTERM/SIGINT, or once."""
    import signal
    import threading

    from bot import deliver, worker
    from bot.store import open_store as store_at

    store = store_at(settings.database_url)  # never migrated here: `migrate` (the release phase) does it
    worker.check(store)
    if not (settings.oauth_enabled or settings.slack_bot_token):  # one line, before any log line says it too
        raise UsageError("worker has nothing to post with: set SLACK_BOT_TOKEN (or SLACK_CLIENT_ID and "
                         "SLACK_CLIENT_SECRET for a multi-workspace install)")
    made = deliver.from_settings(settings, store)
    assert made is not None  # a token, or OAuth's installations
    from bot import digest

    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("event=stopping signal=%s", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    running = worker.Worker(store, made, digest.from_deliverer(made), lease=settings.worker_lease)
    report = running.run(stop, once=args.once)
    if args.once:
        _out(f"{report.delivered} delivered, {report.failed} failed")
    return EXIT_OK


def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    """Merge the research index into the archive (issue 6); nothing is ever delivered. `--pages`: then read
    the own page of every post never read (its paper, code and venue: `bot.item_pages`), BACKFILL_PACE
    apart; an interrupted run keeps what it read, and the next one goes on from there."""
    from bot import feed, item_pages, research_index
    from bot.store import open_store as store_at

    url = args.url or research_index.index_url_for(settings.feed_url) or research_index.DEFAULT_INDEX_URL
    tty = sys.stderr.isatty()
    pages: Any = None

    def progress(message: str) -> None:
        if tty:
            print(f"\r\033[Kbackfill: {message}", end="", file=sys.stderr, flush=True)

    try:
        with feed.make_client() as client:
            if args.dry_run:
                progress(f"reading {redact_url(url)} …")
                index = research_index.read(client, url)
                added, enriched = store_at(settings.database_url).preview_index(index.items)
                result = research_index.BackfillResult(
                    len(index.items), added, enriched, sum(index.skipped.values()), index.skipped_note()
                )
            else:
                store = open_store(settings)
                result = research_index.backfill(store, client, url, progress=progress)
                origin = item_pages.origin_of(url)
                if args.pages and origin is not None:
                    progress("reading the posts' own pages, one a second …")
                    pages = item_pages.enrich_pages(
                        store, client, origin, (), more=None, recheck=False, pace=item_pages.BACKFILL_PACE,
                        budget=None, progress=progress)
    except IndexReadError as exc:
        raise Failure(f"backfill failed: {exc}") from None
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    if result.note:
        _err(f"warning: {result.note}")
    if not args.dry_run and (result.added or result.enriched):
        try:  # the new posts' vectors, for search by meaning, now rather than at the first search
            _embed_archive(settings, store, tty)
        except BotError as exc:
            _err(f"warning: search by meaning will embed the new posts later: {exc}")
    read = {} if pages is None else {"pages": {"read": pages.read, "changed": pages.changed,
                                                "failed": pages.failed, "left": pages.left}}
    if args.json:
        _out(json.dumps({**result.as_json(), **({"dry_run": True} if args.dry_run else {}), **read}))
    elif args.dry_run:
        _out(
            f"dry run: {result.found} posts in the index; {result.added} would be added, "
            f"{result.enriched} enriched; nothing written"
        )
    else:
        _out(f"{result.found} posts in the index: {result.added} added, {result.enriched} enriched")
        if pages is not None:
            _out(f"their own pages: {pages.read} read ({pages.changed} with a paper, code or venue), "
                 f"{pages.failed} failed" + (f", {pages.left} left for the next run" if pages.left else ""))
    return EXIT_OK


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    missing = settings.missing_slack()
    if missing:
        what = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set"
        if args.or_shell:
            _err(f"{what}; starting the local shell instead of Slack (see .env.example to connect Slack)")
            return cmd_shell(settings, args)
        raise UsageError(f"cannot serve: {what} (copy .env.example to .env and fill it in)")
    _ = settings.port  # only serve uses PORT: a malformed one stops it here (exit 2), before anything starts
    from bot.server import serve

    try:
        return serve(settings)
    except ServeError as exc:
        raise Failure(str(exc)) from None


def cmd_shell(settings: Settings, args: argparse.Namespace) -> int:
    from bot import shell

    if settings.log_level == "INFO":
        # The console is the interface: routine log lines stay off it, and a failing feed is a [poll] line
        # already. LOG_LEVEL=WARNING or DEBUG shows more.
        logging.getLogger("bot").setLevel(logging.ERROR)
    return int(shell.run(settings, sys.stdin, sys.stdout))


def cmd_demo(settings: Settings, args: argparse.Namespace) -> int:
    """The bundled archive of real posts, loaded into a database that holds no real archive (bot.demo)."""
    from bot import demo

    result = demo.load(open_store(settings))
    _out(json.dumps(result.as_json()) if args.json else result.line())
    return EXIT_OK


def cmd_cite(settings: Settings, args: argparse.Namespace) -> int:
    """An item's BibTeX entry (bot.cli_cite)."""
    return _bibtex(cli_cite.cite, settings, args)


def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    """The archive's, or one person's reading list's, BibTeX entries (bot.cli_cite)."""
    return _bibtex(cli_cite.export, settings, args)


def _bibtex(command: Any, settings: Settings, args: argparse.Namespace) -> int:
    return int(command(settings, lambda: open_archive(settings), args, _out, _err, EMPTY_ARCHIVE))


def cmd_reindex(settings: Settings, args: argparse.Namespace) -> int:
    """The search index and every item's vector, rebuilt from the archive (vectors missing for the current
    model, or computed from an older text, are computed; stored ones of other models are dropped)."""
    store = open_archive(settings)
    started = time.monotonic()
    count, model = _embed_archive(settings, store, sys.stderr.isatty() and not args.json, recompute=True)
    store.drop_item_vectors(model)
    seconds = time.monotonic() - started
    if args.json:
        _out(json.dumps({"items": count, "model": model, "seconds": round(seconds, 1)}, ensure_ascii=False))
    else:
        _out(f"reindexed {count:,} items ({model}) in {seconds:.1f} s")
    return EXIT_OK


def _embed_archive(settings: Settings, store: Any, tty: bool, *, recompute: bool = False) -> tuple[int, str]:
    """The search index built and every item's vector computed (those missing, or all with `recompute`),
    with progress on a terminal. Returns (items, model name)."""
    from bot.search.index import SearchIndex, meaning_model

    index = SearchIndex(store, model=meaning_model(settings))
    snapshot = index.current()

    def progress(done: int, total: int) -> None:
        if tty:
            print(f"\r\033[Kembedding {done:,} of {total:,} items …", end="", file=sys.stderr, flush=True)

    try:
        vectors = index.vectors(snapshot, progress=progress, recompute=recompute)
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    assert vectors is not None
    return len(snapshot.entries), vectors.model
