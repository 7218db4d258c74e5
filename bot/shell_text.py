"""What the shell says, in its own words (a console, not a Slack thread), and Slack's Block Kit as terminal
text. `bot.shell` runs the console; this module only words and renders.

The shell says once, in its welcome, that a question builds on the one before it and that `new` starts over;
its answers carry no Slack-only sentence ("Reply in this thread…", "only visible to you", "Share in
channel"). When the feed cannot be reached and the archive is empty, it offers the demo archive in one line
(`bot.demo`); it suggests `backfill` only once the feed has answered (offline, a backfill fails too).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from bot import demo
from bot.blocks import counted
from bot.commands import Reply
from bot.models import PollResult
from bot.views import help_reply

SHELL_CHANNEL_ID = "CSHELL"
SHELL_CHANNEL_NAME = "shell"  # shown as #shell everywhere, as Slack shows a channel by its name
RULE = "-" * 60
ASKED_BEFORE = "your last question's"  # where a follow-up's topic came from ("keeping your last question's")
CONSOLE_WORDS = "`poll`, `backfill [URL]`, `demo`, `new`, `exit`"

BANNER = (
    f"mlresearch-bot shell: this console stands in for a Slack channel, #{SHELL_CHANNEL_NAME}.\n"
    "Type /mlresearch help (the /mlresearch prefix is optional), `poll` to fetch the feed now, `exit` to "
    "leave; anything else is a question (“what's new in speech recognition this year?”). A question builds "
    "on the one before it (“only the on-device ones”, “and on vision?”); `new` starts over."
)
ASK_HELP = (
    "Ask about Apple's machine learning research in plain words, e.g. “what's new in speech recognition this "
    "year?” or “summarize diffusion models”; a question builds on the one before it (“only the on-device "
    "ones”), and `new` starts over. `help` lists the commands."
)
HELP_INTRO = (
    "*Apple Machine Learning Research, in this console.* I keep an archive of every paper and update Apple "
    "publishes, print new ones here once #shell subscribes, and search and summarize the archive for you. "
    "Type a command below (the /mlresearch prefix is optional) or ask in plain words: a question builds on "
    f"the one before it. The console's own: {CONSOLE_WORDS}."
)
OFFER_DEMO = f"Type `demo` to load {demo.POSTS} real posts and try it offline."
STARTED_OVER = "Starting over: your next question stands on its own."
OFFLINE_EMPTY = f"The archive is empty because the feed could not be reached. {OFFER_DEMO}"


def shell_help() -> Reply:
    """`help` in the shell: every command, under the console's own introduction."""
    return Reply(*help_reply(HELP_INTRO))


def offline_note(error: str) -> str:
    """The first screen when the feed could not be read and the archive is empty: the reason, then the
    demo offered in one line."""
    return f"The feed could not be reached, so the archive is still empty ({error}); `poll` tries again.\n" \
           f"{OFFER_DEMO}"


def empty_note(where: str = "") -> str:
    """The archive is empty (`where`: " (no database at ./x.db yet)"): how to fill it, online or off."""
    return (f"The archive is empty{where}: type `poll` to fetch the feed's newest items (that creates it), "
            f"or `demo` to load {demo.POSTS} real posts and try it offline.")


def describe(result: PollResult, subscribed: bool, replaced_demo: bool = False) -> str:
    """A poll's result as one [poll] line (`replaced_demo`: the poll replaced the demo archive)."""
    if result.error:
        return f"[poll] the feed failed: {result.error}"
    if result.not_modified:
        return "[poll] the feed has not changed"
    if result.baseline:
        then = "" if subscribed else " once this channel is subscribed (/mlresearch subscribe)"
        was = "the demo archive is replaced: " if replaced_demo else ""
        return (
            f"[poll] first poll: {was}{counted(result.fetched, 'item')} archived as already seen; new items "
            f"from now on print here{then}. `backfill` brings in every past post."
        )
    return f"[poll] fetched {result.fetched}, {result.new} new, {result.delivered} printed here"


# --- Block Kit -> text -----------------------------------------------------------------------------------

_ANGLE = re.compile(r"<([^<>\n]*)>")
_FORMAT = [
    re.compile(rf"(?<![\w{m}]){m}(?=\S)([^{m}\n]*?\S){m}(?![\w{m}])") for m in (r"\*", "_", "~")
]


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
    """Block Kit as readable text: sections, context (indented), headers, dividers, link buttons (a button
    that acts in Slack, such as "Share in channel", is left out)."""
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
