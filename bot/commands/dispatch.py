"""`/mlresearch` text -> its handler (one table, `HANDLERS`) -> a `Reply`: the one way in, for Slack and the
shell alike. `handle` never raises: a request without a workspace, text with control characters, an unknown
word, bad input, a store or Slack failure each get a one-line answer (and a log line), never a trace.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable

from msgspec.structs import replace

from bot import views
from bot.blocks import FALLBACK_TEXT_LIMIT, cut, escape
from bot.commands.archive import cmd_latest, cmd_related, cmd_search, cmd_summarize
from bot.commands.common import C, Invocation, Reply, Services, line
from bot.commands.following import cmd_follow, cmd_follows, cmd_subscribe, cmd_unfollow, cmd_unsubscribe
from bot.commands.info import cmd_cite, cmd_help, cmd_status, cmd_trending
from bot.errors import SearchError, StoreError
from bot.search.query import split_filters

log = logging.getLogger("bot.commands")

HANDLERS: dict[str, Callable[[str, Invocation, Services], Reply]] = {
    "help": cmd_help,
    "search": cmd_search,
    "latest": cmd_latest,
    "related": cmd_related,
    "cite": cmd_cite,
    "summarize": cmd_summarize,
    "subscribe": cmd_subscribe,
    "unsubscribe": cmd_unsubscribe,
    "follow": cmd_follow,
    "unfollow": cmd_unfollow,
    "follows": cmd_follows,
    "status": cmd_status,
    "trending": cmd_trending,
}
SHAREABLE = ("search", "latest", "summarize")
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
NO_WORKSPACE = "This request has no workspace, so I can't answer it; nothing was changed."
CONTROLS = (
    "That command holds control characters (such as terminal escape codes), which I don't read; nothing was "
    "changed. Type it again as plain text."
)


def split(text: str) -> tuple[str, str]:
    """(subcommand word in lower case, the rest), accepting a leading `/mlresearch`."""
    text = " ".join(text.split())
    if text.lower().startswith(C + " ") or text.lower() == C:
        text = text[len(C) :].strip()
    word, _, rest = text.partition(" ")
    return word.lower(), rest.strip()


def has_controls(text: str) -> bool:
    """Control characters (but tabs and line breaks, which are spaces), lone surrogates, or bidirectional
    overrides that would reorder how an echoed text reads."""
    return any(
        (unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n\r") or c in BIDI_CONTROLS for c in text
    )


def handle(inv: Invocation, services: Services) -> Reply:
    """The reply to one `/mlresearch` invocation. Never raises."""
    return _answer(inv, services, shared_by=None)


def converse(inv: Invocation, services: Services) -> Reply:
    """The reply to a question asked in a thread (`inv.text` is the command `bot.ask` made of it): the same
    handlers as `handle`, without the share button (the answer is posted visibly already). Never raises."""
    return _answer(inv, services, shared_by=None, button=False)


def shared(value: str, user_id: str, services: Services, team_id: str, channel_id: str) -> Reply:
    """The content of a shared reply (from its button's `value`), to post visibly: no share button, and a
    "shared by" line."""
    word, _rest = split(value)
    if word not in SHAREABLE:
        return line("That reply can't be shared.")
    inv = Invocation(text=value, team_id=team_id, channel_id=channel_id, user_id=user_id)
    return _answer(inv, services, shared_by=user_id)


def is_slow(inv: Invocation, services: Services) -> bool:
    """True when the answer may take more than a couple of seconds (a summary from a model)."""
    word, _rest = split(inv.text)
    if not inv.team_id or has_controls(inv.text):
        return False  # answered at once, in one line
    return word == "summarize" and services.summarizer is not None and services.summarizer.abstractive


def _answer(inv: Invocation, services: Services, shared_by: str | None, button: bool = True) -> Reply:
    if not inv.team_id:  # nothing is read or written under team '': it could only mix up workspaces
        log.info("event=command_refused reason=no_workspace channel=%s", inv.channel_id[:20])
        return line(NO_WORKSPACE)
    if has_controls(inv.text):  # refused, never echoed (or logged) raw
        log.info("event=command_refused reason=control_characters team=%s", inv.team_id[:20])
        return line(CONTROLS)
    word, rest = split(inv.text)
    log.info("event=command name=%s team=%s channel=%s chars=%d", word[:20] or "help", inv.team_id[:20],
             inv.channel_id[:20], len(inv.text))
    try:
        handler = HANDLERS.get(word or "help")
        if handler is None:
            return Reply(*views.usage_reply(word))
        reply = handler(rest, inv, services)
    except SearchError as exc:
        return line(escape(" ".join(str(exc).split())))
    except StoreError as exc:
        log.error("event=command_failed name=%s error=%r", word[:20], str(exc))
        return line("I can't reach the archive right now; nothing was changed. Try again in a minute.")
    except Exception:  # noqa: BLE001 - a user never sees a trace
        log.exception("event=command_crashed name=%s", word[:20])
        return line("Something went wrong on my side; nothing was changed. Try again in a minute.")
    if not button:  # a thread's answer says what was searched for in its own header (Understood.describe)
        return replace(reply, share_value=None)
    if reply.searched_for:  # a misspelt word was searched as typed right: the reply opens by saying so
        said, opened = views.searched_opening(reply.searched_for, split_filters(rest)[0] or rest)  # the words
        reply = replace(reply, text=cut(said + reply.text, FALLBACK_TEXT_LIMIT),
                        blocks=[*opened, *reply.blocks])
    if reply.share_value is None:
        return reply
    if shared_by is not None:
        blocks = [*reply.blocks, views.context(f"Shared by {views.user_ref(shared_by)}")]
        return replace(reply, blocks=blocks, share_value=None)
    value = f"{word} {rest}".strip()[: views.SHARE_VALUE_LIMIT]
    return replace(reply, blocks=[*reply.blocks, views.share_button(value)], share_value=value)
