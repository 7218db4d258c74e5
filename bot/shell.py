"""`mlresearch-bot shell`: a console in place of Slack, over the same handlers and store.

Type `/mlresearch search captioning` (or just `search captioning`); the reply prints as readable text. The
shell is a channel of its own, #shell: `/mlresearch subscribe` there, and new items print as they would post,
through the store's delivery ledger (claim -> print -> mark_sent). Poll cycles (`bot.pipeline`, as `poll` and
`serve` run them: new items are enriched from the research index too) run in the background every
POLL_INTERVAL seconds; with POLL_INTERVAL=0 only when you type `poll`. `backfill [URL]` merges the research
index into the archive, as `mlresearch-bot backfill` does. `exit`, `quit` or end of input ends the shell. No
Slack credentials are needed.

A line that is not a command (its first word is none of `/mlresearch`'s, and it does not start with
`/mlresearch`) is a question, answered as a direct message would be: `bot.ask.understand`, then
`bot.conversation.understood_reply` (the same reply, headed by what was understood), rendered as text in the
shell's own words (`bot.shell_text`: no Slack-only sentence). A follow-up ("and on vision?", "only the
on-device ones") builds on the question before it, as in a Slack thread; `new` starts over.

The archive is created by the first write (a poll, a subscribe), never by starting the shell or reading: on a
fresh clone with POLL_INTERVAL=0 the banner says the archive is empty and `poll` (or `demo`) fills it. With
polling on and an empty archive, the first screen waits (up to FIRST_POLL_WAIT seconds) for the first poll:
when the feed cannot be reached it says so and offers the demo archive in one line (`demo`: 72 real posts,
`bot.demo`); until the archive holds items, reads and questions get one line saying why it is empty, and
`status` shows the feed's health. On a terminal, log lines and background news are written through the
console, above the prompt, never onto its line.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TextIO

import httpx

from bot import demo, digest, research_index
from bot.ask import Understood, understand
from bot.blocks import follow_message, followup_message, item_message
from bot.commands import HANDLERS, Invocation, Services, handle, split
from bot.config import Settings, redact_url
from bot.conversation import Question, understood_reply
from bot.deliver import LOCAL_TEAM_ID as SHELL_TEAM_ID
from bot.errors import Failure, IndexReadError, LockTimeout, StoreError
from bot.models import DeliveryReport, PollResult
from bot.pipeline import Pipeline
from bot.poller import Poller
from bot.search.index import SearchIndex, meaning_model
from bot.shell_text import (
    ASK_HELP,
    ASKED_BEFORE,
    BANNER,
    OFFLINE_EMPTY,
    RULE,
    SHELL_CHANNEL_ID,
    SHELL_CHANNEL_NAME,
    STARTED_OVER,
    describe,
    empty_note,
    mrkdwn_to_text,
    offline_note,
    render,
    render_reply,
    shell_help,
)
from bot.store import SQLiteStore, Store, open_store, utcnow
from bot.summarize import Summarizer

__all__ = ["SHELL_CHANNEL_ID", "SHELL_CHANNEL_NAME", "SHELL_TEAM_ID", "SHELL_USER_ID", "mrkdwn_to_text",
           "render", "render_reply", "run"]

SHELL_USER_ID = "USHELL"
PROMPT = "mlresearch> "
FIRST_POLL_WAIT = 15.0  # seconds the first screen waits for the first poll of an empty archive

# --- the console -----------------------------------------------------------------------------------------


class Console:
    """stdout shared by the reading loop, the background poller and (on a terminal) the log, one whole message
    at a time. While the prompt waits for a line, a message clears the prompt's line, prints, and shows the
    prompt again below it: nothing lands on the prompt line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()
        self.prompting = False

    def write(self, text: str) -> None:
        text = text if text.endswith("\n") else text + "\n"
        with self.lock:
            self.stream.write(f"\r\033[K{text}{PROMPT}" if self.prompting else text)
            self.stream.flush()

    def prompt(self) -> None:
        with self.lock:
            self.stream.write(PROMPT)
            self.stream.flush()
            self.prompting = True

    def answered(self) -> None:
        """The line was read (the cursor is at the start of a new line): the prompt is gone."""
        with self.lock:
            self.prompting = False


class ConsoleLog(logging.Handler):
    """Log records written through the console (the shell, on a terminal), formatted as before."""

    def __init__(self, console: Console, formatter: logging.Formatter | None) -> None:
        super().__init__()
        self.console = console
        self.setFormatter(formatter)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.console.write(self.format(record))
        except Exception:  # noqa: BLE001 - logging never breaks the shell
            self.handleError(record)


class ShellDeliverer:
    """Delivers the shell channel's pending items (and their follow-ups: a code release or a venue found
    later), and the direct messages of the shell user's follows, by printing them, through the ledger."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, store: Store) -> DeliveryReport:
        delivered = failed = 0
        for delivery in store.open_deliveries():
            target = SHELL_USER_ID if delivery.to_person else SHELL_CHANNEL_ID  # your follows' DMs too
            mine = (delivery.team_id, delivery.channel_id) == (SHELL_TEAM_ID, target)
            if not mine or delivery.state != "pending" or not store.claim(delivery.id):
                continue
            item = store.get_item(delivery.item_id)
            if item is None:
                store.mark_failed(delivery.id, "item not in the archive")
                failed += 1
                continue
            if delivery.followup is not None:  # a later finding: in the thread of the item's post
                found = followup_message(item, delivery.followup)
                if found is None:
                    store.mark_failed(delivery.id, "nothing_to_follow_up")
                    failed += 1
                    continue
                message, where = found, f"In the thread of “{item.title}” in #{SHELL_CHANNEL_NAME}"
            else:
                message = (follow_message if delivery.to_person else item_message)(item, delivery.matched)
                where = "A direct message to you" if delivery.to_person else f"New in #{SHELL_CHANNEL_NAME}"
            self.console.write(f"{RULE}\n{where}:\n{render(message['blocks'])}\n{RULE}")
            store.mark_sent(delivery.id, f"shell-{utcnow().timestamp():.6f}")
            delivered += 1
        return DeliveryReport(delivered=delivered, failed=failed)


class ShellDigester:
    """Prints the shell channel's due digest, through the digest ledger (claim -> print -> mark sent), at the
    time `clock` gives."""

    def __init__(self, console: Console, clock: Callable[[], datetime] = utcnow) -> None:
        self.console = console
        self.clock = clock

    def __call__(self, store: Store) -> DeliveryReport:
        delivered = 0
        for sub in store.digest_subscriptions():
            if (sub.team_id, sub.channel_id) != (SHELL_TEAM_ID, SHELL_CHANNEL_ID):
                continue
            due = digest.due_digest(store, sub, self.clock())
            if due is None:
                continue
            schedule, period, ends, row = due
            if row is None:
                row, created = digest.start_digest(store, sub, schedule, period, ends)
                if not created or row.state != "posting":
                    continue
            elif not store.claim_digest(row.id, row.state):  # left by a shell that stopped: printed again
                continue
            message = digest.digest_message(sub, row, store.digest_contents(row.id))
            self.console.write(f"{RULE}\nIn #{SHELL_CHANNEL_NAME}:\n{render(message['blocks'])}\n{RULE}")
            store.mark_digest_sent(row.id, f"shell-{utcnow().timestamp():.6f}")
            delivered += 1
        return DeliveryReport(delivered=delivered)


# they create the archive first; every other command only reads it
WRITES = ("subscribe", "unsubscribe", "follow", "unfollow")

class Archive:
    """The shell's store, created (migrated) by the first write (a poll, a subscribe) and not before: starting
    the shell and reading create no file. An archive that exists is upgraded at start, as everywhere."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.lock = threading.Lock()
        self.ready = store.exists()
        if self.ready:
            store.migrate()

    def ensure(self) -> Store:
        with self.lock:
            if not self.ready:
                self.store.migrate()
                self.ready = True
        return self.store

    def empty(self) -> bool:
        return not self.ready or self.store.count_items() == 0

    def subscribed(self) -> bool:
        return self.ready and self.store.get_subscription(SHELL_TEAM_ID, SHELL_CHANNEL_ID) is not None

    def empty_note(self) -> str:
        where = ""
        if not self.ready and isinstance(self.store, SQLiteStore):
            path = self.store.path
            shown = path if path.is_absolute() or str(path).startswith(".") else f"./{path}"
            where = f" (no database at {shown} yet)"
        return empty_note(where)

    def demo(self) -> bool:
        """Whether the archive is the demo (`bot.demo`): the first poll or backfill that works replaces it."""
        return self.ready and self.store.demo_loaded_at() is not None


class Session:
    """What the shell remembers between lines: the question before (a follow-up builds on it; `new` forgets
    it), the last poll's error (while the archive is empty, reads say why in one line) and whether the archive
    is the demo (a poll that works replaces it, and says so)."""

    def __init__(self, demo: bool = False) -> None:
        self.previous: Understood | None = None
        self.feed_error: str | None = None
        self.first_poll = threading.Event()
        self.demo = demo

    def polled(self, result: PollResult, archive: Archive) -> str:
        """The [poll] line of `result`, noting the demo archive it replaced."""
        self.feed_error = result.error
        replaced, self.demo = self.demo and not result.error and not archive.demo(), archive.demo()
        return describe(result, archive.subscribed(), replaced)


def run(
    settings: Settings,
    stdin: TextIO,
    stdout: TextIO,
    *,
    http_client: httpx.Client | None = None,
    summarizer: Summarizer | None = None,
    clock: Callable[[], datetime] = utcnow,
    first_poll_wait: float = FIRST_POLL_WAIT,
) -> int:
    """The read-reply loop until `exit`, `quit` or end of input. Returns the exit status."""
    store = open_store(settings.database_url)
    archive = Archive(store)
    polling = settings.poll_interval > 0
    if polling:
        archive.ensure()  # the first background poll starts at once
    if summarizer is None and settings.summary_enabled:
        summarizer = Summarizer.from_settings(settings)
    services = Services(store=store, settings=settings, slack=None, summarizer=summarizer,
                        index=SearchIndex(store, model=meaning_model(settings)), clock=clock)
    console = Console(stdout)
    session = Session(archive.demo())
    # The poll pipeline of `poll` and `serve` (enrichment included), delivering by printing here.
    pipeline = Pipeline.from_settings(settings, store, deliver=ShellDeliverer(console), client=http_client,
                                      digest=ShellDigester(console))
    interactive = _isatty(stdin)
    console.write(BANNER)
    empty_at_start = archive.empty()
    if empty_at_start:
        console.write("The archive is empty: the first poll, starting now, fills it." if polling
                      else archive.empty_note())
    poller: Poller | None = None
    if polling:
        shown = redact_url(settings.feed_url)
        console.write(f"Polling {shown} every {settings.poll_interval} s in the background.")

        def report(result: PollResult) -> None:
            said = session.polled(result, archive)
            if result.error and archive.empty() and not session.first_poll.is_set():
                console.write(offline_note(result.error))  # once; later failures are one [poll] line each
            elif result.error or result.new or result.baseline:
                console.write(said)
            session.first_poll.set()

        poller = pipeline.start(settings.poll_interval, on_result=report)
        if empty_at_start:  # the first screen says whether the feed could be read
            session.first_poll.wait(first_poll_wait)
    console.write("")  # the first screen ends
    saved_log = _log_through(console) if interactive else None
    try:
        while True:
            if interactive:
                console.prompt()
            raw = stdin.readline()
            console.answered()
            if not raw:
                break
            text = " ".join(raw.split())
            if not text:
                continue
            bare = text.lower().removeprefix("/mlresearch").strip()
            if bare in ("exit", "quit"):
                break
            console.write(_answer(text, archive, pipeline, console, session, services, clock()))
            console.write("")
    except KeyboardInterrupt:
        console.write("")
    finally:
        if poller is not None:
            poller.stop(timeout=5)
        pipeline.close()  # the HTTP client, unless it was given
        if saved_log is not None:
            logging.getLogger().handlers[:] = saved_log
    return 0


def _answer(text: str, archive: Archive, pipeline: Pipeline, console: Console, session: Session,
            services: Services, now: datetime) -> str:
    """The answer to a line: a console word (`poll`, `backfill`, `demo`, `new`), a command, or a question."""
    word, rest = split(text)
    said = _console_word(word, rest, archive, pipeline, console, session)
    if said is not None:
        return said
    command = word in HANDLERS or text.lower().startswith("/mlresearch")
    if command and word in ("help", ""):
        return render_reply(shell_help())
    if word in WRITES:
        archive.ensure()
    elif not archive.ready:
        return archive.empty_note()  # a read creates no file
    elif word != "status" and session.feed_error and archive.empty():
        return OFFLINE_EMPTY  # status shows the feed's health instead
    if not command:
        return _ask(text, services, session, now)
    invocation = Invocation(text=text, team_id=SHELL_TEAM_ID, channel_id=SHELL_CHANNEL_ID,
                            user_id=SHELL_USER_ID, channel_name=SHELL_CHANNEL_NAME)
    return render_reply(handle(invocation, services))


def _ask(text: str, services: Services, session: Session, now: datetime) -> str:
    """A question, answered as a direct message is (`conversation.understood_reply`), in the shell's words:
    what was understood, then the answer; a follow-up builds on the question before it."""
    understood = understand(text, session.previous, now=now.date())
    stamp = f"{now.timestamp():.6f}"
    question = Question(SHELL_TEAM_ID, SHELL_CHANNEL_ID, SHELL_USER_ID, text, stamp, stamp, "")
    try:
        said, reply = understood_reply(understood, question, services, ASKED_BEFORE)
    except Exception as exc:  # noqa: BLE001 - the shell stays up; one line, no trace
        return f"Sorry, I couldn't answer that: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    session.previous = understood
    if reply is None:
        return ASK_HELP
    header = f"   {mrkdwn_to_text(said)}\n" if said else ""  # one header: what was understood
    return header + render_reply(reply)


def _console_word(word: str, rest: str, archive: Archive, pipeline: Pipeline, console: Console,
                  session: Session) -> str | None:
    """The console's own words, not /mlresearch's: `poll`, `backfill [URL]`, `demo`, `new` (None: another)."""
    if word == "backfill":
        return _backfill(archive, pipeline, rest, console, session)
    if rest:  # "new papers on privacy" is a question
        return None
    if word == "poll":
        return _poll(archive, pipeline, session)
    if word == "demo":
        return _demo(archive, session)
    return _new(session) if word == "new" else None


def _new(session: Session) -> str:
    """`new`: the next question stands on its own."""
    session.previous = None
    return STARTED_OVER


def _demo(archive: Archive, session: Session) -> str:
    """`demo`: the bundled archive of real posts, loaded as `mlresearch-bot demo` does (never into a real
    archive)."""
    try:
        result = demo.load(archive.ensure())
    except (Failure, StoreError) as exc:
        return f"[demo] {exc}"
    session.demo = True
    return f"[demo] {result.line()}. Try `latest`, `search privacy` or a question."


def _backfill(archive: Archive, pipeline: Pipeline, url: str, console: Console, session: Session) -> str:
    """`backfill [URL]`: the research index (beside a web feed, else Apple's) merged into the archive, as
    `mlresearch-bot backfill` does (it replaces the demo archive); nothing is printed as new."""
    url = url or pipeline.index_url or research_index.DEFAULT_INDEX_URL
    try:
        store = archive.ensure()
        result = research_index.backfill(store, pipeline.client, url,
                                         progress=lambda message: console.write(f"[backfill] {message}"))
    except (IndexReadError, StoreError) as exc:
        return f"[backfill] failed: {' '.join(str(exc).split())[:300]}"
    except Exception as exc:  # noqa: BLE001 - the shell stays up; one line, no trace
        return f"[backfill] failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    note = f" ({result.note})" if result.note else ""
    replaced, session.demo = session.demo, False
    note += " (the demo archive is replaced)" if replaced else ""
    return (f"[backfill] {result.found} posts in the index: {result.added} added, {result.enriched} "
            f"enriched{note}")


def _log_through(console: Console) -> list[logging.Handler]:
    """Route the log through the console (the prompt owns the terminal's last line); returns the handlers to
    restore."""
    root = logging.getLogger()
    saved = root.handlers[:]
    formatter = next((h.formatter for h in saved if h.formatter is not None), None)
    root.handlers[:] = [ConsoleLog(console, formatter)]
    return saved


def _poll(archive: Archive, pipeline: Pipeline, session: Session) -> str:
    try:
        archive.ensure()
        said = session.polled(pipeline.poll_once(lock_timeout=5), archive)
        if session.feed_error and archive.empty():
            return offline_note(session.feed_error)
        return said
    except LockTimeout:
        return "[poll] a poll is already running; its news will print here"
    except StoreError as exc:
        return f"[poll] the store failed: {exc}"
    except Exception as exc:  # noqa: BLE001 - the shell stays up; one line, no trace
        return f"[poll] failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
