"""`mlresearch-bot shell`: a console in place of Slack, over the same handlers and store.

Type `/mlresearch search captioning` (or just `search captioning`); the reply prints as readable text. The
shell is a workspace and channel of its own (team TSHELL, channel CSHELL): `/mlresearch subscribe` there, and
new items print as they would post, through the store's delivery ledger (claim -> print -> mark_sent). Poll
cycles run in the background every POLL_INTERVAL seconds; with POLL_INTERVAL=0 only when you type `poll`.
`exit`, `quit` or end of input ends the shell. No Slack credentials are needed.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterable
from typing import Any, TextIO

import httpx

from bot import feed
from bot.blocks import item_message
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.deliver import LOCAL_TEAM_ID as SHELL_TEAM_ID
from bot.poller import DeliveryReport, Poller, PollResult, poll_once
from bot.store import LockTimeout, Store, StoreError, open_store, utcnow
from bot.summarize import Summarizer

SHELL_CHANNEL_ID = "CSHELL"
SHELL_USER_ID = "USHELL"
PROMPT = "mlresearch> "
RULE = "-" * 60

_ANGLE = re.compile(r"<([^<>\n]*)>")
_FORMAT = [
    re.compile(rf"(?<![\w{m}]){m}(?=\S)([^{m}\n]*?\S){m}(?![\w{m}])") for m in (r"\*", "_", "~")
]


# --- Block Kit -> text -----------------------------------------------------------------------------------


def mrkdwn_to_text(text: str) -> str:
    """Slack mrkdwn as terminal text: `<url|title>` -> `title (url)`, `<#C1>` -> `#C1`, `<@U1>` -> `@U1`,
    bold/italic/strike markers dropped, entities (`&amp;` `&lt;` `&gt;`) unescaped last."""
    links: list[str] = []

    def angle(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target[:1] in "#@!":
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
    """stdout shared by the reading loop and the background poller, one whole message at a time."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()

    def prompt(self) -> None:
        with self.lock:
            self.stream.write(PROMPT)
            self.stream.flush()


class ShellDeliverer:
    """Delivers the shell channel's pending items by printing them, through the ledger."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __call__(self, store: Store) -> DeliveryReport:
        delivered = failed = 0
        for delivery in store.open_deliveries():
            mine = (delivery.team_id, delivery.channel_id) == (SHELL_TEAM_ID, SHELL_CHANNEL_ID)
            if not mine or delivery.state != "pending" or not store.claim(delivery.id):
                continue
            item = store.get_item(delivery.item_id)
            if item is None:
                store.mark_failed(delivery.id, "item not in the archive")
                failed += 1
                continue
            message = item_message(item, delivery.matched)
            self.console.write(f"{RULE}\nNew in #shell:\n{render(message['blocks'])}\n{RULE}")
            store.mark_sent(delivery.id, f"shell-{utcnow().timestamp():.6f}")
            delivered += 1
        return DeliveryReport(delivered=delivered, failed=failed)


def describe(result: PollResult) -> str:
    if result.error:
        return f"[poll] the feed failed: {result.error}"
    if result.not_modified:
        return "[poll] the feed has not changed"
    if result.baseline:
        return (
            f"[poll] first poll: {result.fetched} item(s) archived as already seen; new items from now on "
            "print here once this channel is subscribed (/mlresearch subscribe)"
        )
    return f"[poll] fetched {result.fetched}, {result.new} new, {result.delivered} printed here"


BANNER = (
    "mlresearch-bot shell: this console stands in for a Slack channel (team TSHELL, channel CSHELL).\n"
    "Type /mlresearch help (the /mlresearch prefix is optional), `poll` to fetch the feed now, "
    "`exit` to leave."
)


def run(
    settings: Settings,
    stdin: TextIO,
    stdout: TextIO,
    *,
    http_client: httpx.Client | None = None,
    summarizer: Summarizer | None = None,
) -> int:
    """The read-reply loop until `exit`, `quit` or end of input. Returns the exit status."""
    store = open_store(settings.database_url)
    store.migrate()
    if summarizer is None and settings.summary_enabled:
        summarizer = Summarizer.from_settings(settings)
    services = Services(store=store, settings=settings, slack=None, summarizer=summarizer)
    console = Console(stdout)
    deliver = ShellDeliverer(console)
    client = http_client or feed.make_client()
    interactive = _isatty(stdin)
    console.write(BANNER)
    poller: Poller | None = None
    if settings.poll_interval > 0:
        console.write(f"Polling {settings.feed_url} every {settings.poll_interval} s in the background.")

        def report(result: PollResult) -> None:
            if result.error or result.new or result.baseline:
                console.write(describe(result))

        poller = Poller(
            store, client, settings.feed_url, settings.poll_interval, deliver=deliver, on_result=report
        )
        poller.start()
    try:
        while True:
            if interactive:
                console.prompt()
            raw = stdin.readline()
            if not raw:
                break
            text = " ".join(raw.split())
            if not text:
                continue
            bare = text.lower().removeprefix("/mlresearch").strip()
            if bare in ("exit", "quit"):
                break
            if bare == "poll":
                console.write(_poll(store, client, settings.feed_url, deliver))
                continue
            invocation = Invocation(
                text=text, team_id=SHELL_TEAM_ID, channel_id=SHELL_CHANNEL_ID, user_id=SHELL_USER_ID,
                channel_name="shell",
            )
            console.write(render_reply(handle(invocation, services)))
            console.write("")
    except KeyboardInterrupt:
        console.write("")
    finally:
        if poller is not None:
            poller.stop(timeout=5)
        if http_client is None:
            client.close()
    return 0


def _poll(store: Store, client: httpx.Client, feed_url: str, deliver: ShellDeliverer) -> str:
    try:
        return describe(poll_once(store, client, feed_url, deliver=deliver, lock_timeout=5))
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
