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
`bot.conversation.reply_for` (the same reply, headed by what was understood), rendered as text. The session
is one thread: a follow-up ("and on vision?", "only the on-device ones") builds on the question before it.

The archive is created by the first write (a poll, a subscribe), never by starting the shell or reading: on a
fresh clone with POLL_INTERVAL=0 the banner says the archive is empty and `poll` fills it. With polling on and
an empty archive, the first screen waits (up to FIRST_POLL_WAIT seconds) for the first poll: when the feed
cannot be reached it says so, and how to try the bundled snapshot instead (`offline_note`); until the archive
holds items, reads and questions get that same note rather than "the archive is empty". On a terminal, log
lines and background news are written through the console, above the prompt, never onto its line.
"""

from __future__ import annotations

import html
import logging
import re
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import httpx

from bot import digest, research_index
from bot.ask import Understood, understand
from bot.blocks import counted, follow_message, item_message
from bot.commands import HANDLERS, Invocation, Reply, Services, handle, split
from bot.config import Settings, redact_url
from bot.conversation import Question, reply_for
from bot.deliver import LOCAL_TEAM_ID as SHELL_TEAM_ID
from bot.errors import IndexReadError, LockTimeout, StoreError
from bot.models import DeliveryReport, PollResult
from bot.pipeline import Pipeline
from bot.poller import Poller
from bot.search.index import SearchIndex, meaning_model
from bot.store import SQLiteStore, Store, open_store, utcnow
from bot.summarize import Summarizer

SHELL_CHANNEL_ID = "CSHELL"
SHELL_CHANNEL_NAME = "shell"  # shown as #shell everywhere, as Slack shows a channel by its name
SHELL_USER_ID = "USHELL"
PROMPT = "mlresearch> "
RULE = "-" * 60
FIRST_POLL_WAIT = 15.0  # seconds the first screen waits for the first poll of an empty archive
SNAPSHOT = "tests/data/apple_ml_rss.xml"  # the feed as it stood once, bundled with the repository

_ANGLE = re.compile(r"<([^<>\n]*)>")
_FORMAT = [
    re.compile(rf"(?<![\w{m}]){m}(?=\S)([^{m}\n]*?\S){m}(?![\w{m}])") for m in (r"\*", "_", "~")
]


# --- Block Kit -> text -----------------------------------------------------------------------------------


def mrkdwn_to_text(text: str) -> str:
    """Slack mrkdwn as terminal text: `<url|title>` -> `title (url)`, `<#C1>` -> `#C1` (the shell's own
    channel by its name, `#shell`, as Slack shows a channel), `<@U1>` -> `@U1`, bold/italic/strike markers
    dropped, entities (`&amp;` `&lt;` `&gt;`) unescaped last."""
    links: list[str] = []

    def angle(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target == f"#{SHELL_CHANNEL_ID}":
            rendered = f"#{SHELL_CHANNEL_NAME}"
        elif target[:1] in "#@!":
            shown = label or target[1:].split("^")[0]
            rendered = (target[0] if target[0] != "!" else "@") + shown
        elif label and label != target:
            rendered = f"{label} ({target})"
        else:
            rendered = target
        links.append(html.unescape(rendered))
        return f"\x00{len(links) - 1}\x00"

    text = _ANGLE.sub(angle, text.replace("\x00", ""))
    for pattern in _FORMAT:
        text = pattern.sub(r"\1", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return re.sub("\x00(\\d+)\x00", lambda m: links[int(m.group(1))], text)


def _text_of(obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    text = str(obj.get("text", ""))
    return mrkdwn_to_text(text) if obj.get("type") == "mrkdwn" else text


def render(blocks: Iterable[dict[str, Any]]) -> str:
    """Block Kit as readable text: sections, context (indented), headers, dividers, link buttons."""
    out: list[str] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "header":
            out.append(f"== {_text_of(block.get('text'))} ==")
        elif kind == "section":
            parts = [_text_of(block.get("text"))] + [_text_of(f) for f in block.get("fields") or []]
            out.append("\n".join(p for p in parts if p))
        elif kind == "context":
            texts = [_text_of(e) or str(e.get("alt_text", "")) for e in block.get("elements") or []]
            out.append("   " + "  ".join(t for t in texts if t))
        elif kind == "divider":
            out.append(RULE)
        elif kind == "actions":
            for element in block.get("elements") or []:
                if element.get("url"):
                    out.append(f"   [{_text_of(element.get('text'))}] {element['url']}")
    return "\n".join(out)


def render_reply(reply: Reply) -> str:
    return render(reply.blocks) or mrkdwn_to_text(reply.text)


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
    """Delivers the shell channel's pending items, and the direct messages of the shell user's follows, by
    printing them, through the ledger."""

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


def describe(result: PollResult, subscribed: bool) -> str:
    if result.error:
        return f"[poll] the feed failed: {result.error}"
    if result.not_modified:
        return "[poll] the feed has not changed"
    if result.baseline:
        then = "" if subscribed else " once this channel is subscribed (/mlresearch subscribe)"
        return (
            f"[poll] first poll: {counted(result.fetched, 'item')} archived as already seen; new items from "
            f"now on print here{then}"
        )
    return f"[poll] fetched {result.fetched}, {result.new} new, {result.delivered} printed here"


# they create the archive first; every other command only reads it
WRITES = ("subscribe", "unsubscribe", "follow", "unfollow")

BANNER = (
    f"mlresearch-bot shell: this console stands in for a Slack channel, #{SHELL_CHANNEL_NAME}.\n"
    "Type /mlresearch help (the /mlresearch prefix is optional), `poll` to fetch the feed now, "
    "`backfill` for every past post, `exit` to leave; anything else is a question "
    "(“what's new in speech recognition this year?”)."
)


def offline_note(error: str, cwd: Path | None = None) -> str:
    """What the shell says when the feed could not be read and the archive is empty: the reason, and how to
    try the bot on the bundled snapshot instead (the exact command in a clone of the repository)."""
    here = (cwd or Path.cwd()) / SNAPSHOT
    if here.is_file():
        how = f"to try the bot offline on the bundled snapshot, start it with `FEED_URL={SNAPSHOT} make run`"
    else:
        how = ("to try the bot offline, set FEED_URL to a saved copy of the feed (a path works) and start "
               "again")
    return (f"The feed could not be reached, so the archive is still empty ({error}). Type `poll` to try "
            f"again, or {how}.")


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
        return (
            f"The archive is empty{where}: type `poll` to fetch the feed's newest items (that creates it); "
            "`mlresearch-bot backfill` brings in every past post."
        )


class Session:
    """What the shell remembers between lines: the question before (the session is one thread) and the last
    poll's error (while the archive is empty, reads answer with the offline note)."""

    def __init__(self) -> None:
        self.previous: Understood | None = None
        self.feed_error: str | None = None
        self.first_poll = threading.Event()


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
    session = Session()
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
            session.feed_error = result.error
            if result.error and archive.empty() and not session.first_poll.is_set():
                console.write(offline_note(result.error))  # once; later failures are one [poll] line each
            elif result.error or result.new or result.baseline:
                console.write(describe(result, archive.subscribed()))
            session.first_poll.set()

        poller = pipeline.start(settings.poll_interval, on_result=report)
        if empty_at_start:  # the first screen says whether the feed could be read
            session.first_poll.wait(first_poll_wait)
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
            if bare == "poll":
                console.write(_poll(archive, pipeline, session))
                continue
            word, rest = split(text)
            if word == "backfill":
                console.write(_backfill(archive, pipeline, rest, console))
                continue
            command = word in HANDLERS or text.lower().startswith("/mlresearch")
            if word in WRITES:
                archive.ensure()
            elif (not command or word != "help") and not archive.ready:
                console.write(archive.empty_note() + "\n")  # a read creates no file
                continue
            elif (not command or word != "help") and session.feed_error and archive.empty():
                console.write(offline_note(session.feed_error) + "\n")
                continue
            if command:
                invocation = Invocation(
                    text=text, team_id=SHELL_TEAM_ID, channel_id=SHELL_CHANNEL_ID, user_id=SHELL_USER_ID,
                    channel_name=SHELL_CHANNEL_NAME,
                )
                console.write(render_reply(handle(invocation, services)))
            else:
                console.write(_ask(text, services, session, clock()))
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


def _ask(text: str, services: Services, session: Session, now: datetime) -> str:
    """A question, answered as a direct message is (`conversation.reply_for`), as text; the session is one
    thread, so the question before is what a follow-up builds on."""
    understood = understand(text, session.previous, now=now.date())
    stamp = f"{now.timestamp():.6f}"
    question = Question(SHELL_TEAM_ID, SHELL_CHANNEL_ID, SHELL_USER_ID, text, stamp, stamp, "")
    try:
        said, blocks = reply_for(understood, question, services)
    except Exception as exc:  # noqa: BLE001 - the shell stays up; one line, no trace
        return f"Sorry, I couldn't answer that: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    session.previous = understood
    return render(blocks) or mrkdwn_to_text(said)


def _backfill(archive: Archive, pipeline: Pipeline, url: str, console: Console) -> str:
    """`backfill [URL]`: the research index (beside a web feed, else Apple's) merged into the archive, as
    `mlresearch-bot backfill` does; nothing is printed as new."""
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
        result = pipeline.poll_once(lock_timeout=5)
        session.feed_error = result.error
        if result.error and archive.empty():
            return offline_note(result.error)
        return describe(result, archive.subscribed())
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
