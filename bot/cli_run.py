"""The command line's long-running processes: `serve` (the Slack app and the poller; with `--or-shell`, the
shell when Slack is not configured), `shell` (a local console in place of Slack) and `worker` (delivering
queued posts beside other workers), beside what they run (`bot.server`, `bot.shell`, `bot.worker`), each
imported when its command runs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from bot.cli_common import err, out
from bot.config import Settings
from bot.errors import EXIT_OK, Failure, ServeError, UsageError

log = logging.getLogger("bot")


def cmd_serve(settings: Settings, args: argparse.Namespace) -> int:
    missing = settings.missing_slack()
    if missing:
        what = f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set"
        if args.or_shell:
            err(f"{what}; starting the local shell instead of Slack (see .env.example to connect Slack)")
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
        out(f"{report.delivered} delivered, {report.failed} failed")
    return EXIT_OK
