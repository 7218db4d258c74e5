"""The `mlresearch-bot` command: argument parsing, `.env` loading, exit codes. Nothing else.

Exit status: 0 success, 1 an operation failed, 2 bad usage or configuration. Errors are one line on stderr;
no traceback reaches the terminal (set LOG_LEVEL=DEBUG to log one).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from bot import __version__
from bot.config import ConfigError, Settings, load_environment
from bot.feed import FeedError
from bot.search import SearchError
from bot.store import StoreError

log = logging.getLogger("bot")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Failure(Exception):
    """An operation failed; the message is the one line the user reads (exit 1)."""


class UsageError(Exception):
    """Bad usage (exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see: mlresearch-bot {self.prog.split()[-1] if ' ' in self.prog else ''} --help)".replace("  ", " "))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mlresearch-bot", description="Follow Apple Machine Learning Research from Slack.")
    parser.add_argument("--version", action="version", version=f"mlresearch-bot {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    serve = sub.add_parser("serve", help="run the Slack app (HTTP or Socket Mode) and the poller")
    serve.add_argument("--or-shell", action="store_true", help="without Slack credentials, start the shell")

    poll = sub.add_parser("poll", help="one poll cycle: fetch, store, deliver")
    poll.add_argument("--dry-run", action="store_true", help="write nothing, post nothing; print what is new")
    poll.add_argument("--json", action="store_true", help="print one JSON object")

    search = sub.add_parser("search", help="search the archive")
    search.add_argument("query", nargs="+", help="words to look for")
    search.add_argument("--limit", type=int, default=10, help="at most this many results (default 10)")
    search.add_argument("--json", action="store_true", help="print a JSON list")

    summarize = sub.add_parser("summarize", help="summarize what the archive says about a topic")
    summarize.add_argument("topic", nargs="+")
    summarize.add_argument("--json", action="store_true")

    sub.add_parser("shell", help="a local console in place of Slack")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except ConfigError as exc:
        _err(f"configuration error: {exc}")
        return EXIT_USAGE
    except (Failure, FeedError, StoreError, SearchError) as exc:
        _err(str(exc))
        return EXIT_FAILED
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
    args = build_parser().parse_args(argv)
    if args.command is None:
        build_parser().print_help()
        return EXIT_USAGE
    settings = Settings.from_env(load_environment())
    setup_logging(settings, sys.stdout if args.command == "serve" else sys.stderr)
    handler = {
        "serve": cmd_serve,
        "poll": cmd_poll,
        "search": cmd_search,
        "summarize": cmd_summarize,
        "shell": cmd_shell,
    }[args.command]
    return handler(settings, args)


def setup_logging(settings: Settings, stream: Any) -> None:
    """One line per event, key=value: on stdout for `serve` (as Heroku collects it), on stderr for the
    one-shot commands, whose stdout is their answer."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.logging_level)
    for noisy in ("httpx", "httpcore", "slack_sdk", "slack_bolt", "waitress"):
        logging.getLogger(noisy).setLevel(max(settings.logging_level, logging.WARNING))


def open_store(settings: Settings) -> Any:
    from bot.store import Store

    store = Store.from_url(settings.database_url)
    store.migrate()
    return store


def cmd_poll(settings: Settings, args: argparse.Namespace) -> int:
    from bot import feed, poller
    from bot.store import Store

    with feed.make_client() as client:
        if args.dry_run:
            store = Store.from_url(settings.database_url)
            if store.path.exists():
                store.migrate()
            new, baseline, fetched = poller.preview(store, client, settings.feed_url)
            if args.json:
                _out(json.dumps({"fetched": fetched, "new": len(new), "delivered": 0, "failed": 0,
                                 "not_modified": fetched == 0 and not new, "dry_run": True,
                                 "baseline": baseline, "items": [_item_json(i) for i in new]}))
            elif baseline:
                _out(f"first poll: {len(new)} items would be recorded as seen; nothing would be posted")
            else:
                _out(f"{len(new)} new item(s) would be posted:" if new else "nothing new")
                for item in new:
                    _out(f"  {item.published:%Y-%m-%d}  {item.title}\n              {item.link}")
            return EXIT_OK
        store = open_store(settings)
        deliver = _deliverer(settings, store)
        result = poller.poll_once(store, client, settings.feed_url, deliver=deliver)
    if args.json:
        _out(json.dumps(result.as_json()))
    else:
        state = "not modified" if result.not_modified else f"fetched {result.fetched}"
        extra = " (first poll: recorded as seen, nothing posted)" if result.baseline else ""
        _out(f"{state}, {result.new} new, {result.delivered} delivered, {result.failed} failed{extra}")
    if result.error:
        raise Failure(f"poll failed: {result.error}")
    return EXIT_OK


def _deliverer(settings: Settings, store: Any) -> Any:
    """The delivery step for `poll`, or None when there is no Slack token (items still queue)."""
    try:
        from bot import deliver
    except ImportError:
        return None
    return deliver.from_settings(settings)


def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    from bot.search import search

    store = open_store(settings)
    hits = search(store, " ".join(args.query), limit=args.limit)
    if args.json:
        _out(json.dumps([
            {"id": h.item.id, "title": h.item.title, "link": h.item.link,
             "published": h.item.published.strftime("%Y-%m-%d"), "score": h.score}
            for h in hits
        ], ensure_ascii=False))
        return EXIT_OK
    if not hits:
        _out("no results")
    for rank, hit in enumerate(hits, 1):
        _out(f"{rank:>2}. {hit.item.title}\n    {hit.item.published:%Y-%m-%d}  {hit.item.link}")
    return EXIT_OK


def cmd_summarize(settings: Settings, args: argparse.Namespace) -> int:
    raise UsageError("summarize is not built yet")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    raise UsageError("serve is not built yet")


def cmd_shell(settings: Settings, args: argparse.Namespace) -> int:
    raise UsageError("shell is not built yet")


def _item_json(item: Any) -> dict[str, str]:
    return {"id": item.id, "title": item.title, "link": item.link, "published": f"{item.published:%Y-%m-%d}"}


def _out(text: str) -> None:
    print(text, flush=True)


def _err(text: str) -> None:
    print(f"mlresearch-bot: {' '.join(text.split())}", file=sys.stderr, flush=True)
