"""Every Bolt listener, registered in one place (`register`); the listeners themselves live in one module per
surface, each a small class over the dependencies they share (`deps.Deps`: the services, the model lane).
Bolt injects a listener's arguments by name.

| module | surface |
|---|---|
| `slash_command` | `/mlresearch`: fast commands answered in the ack, slow ones from the model lane |
| `questions` | mentions, DMs, the assistant pane and the Messages tab (agent sessions, Slack's stop button) |
| `buttons` | the buttons and menus on items and answers: Share, Save, Related, Cite, More by…, feedback |
| `app_home` | the App Home (`app_home_opened`) and its buttons: Remove, Export .bib |
| `links` | `link_shared` (unfurls) and `entity_details_requested` (a paper card's flexpane) |
| `lifecycle` | uninstall, revoked tokens, archived, left and deleted channels |
| `deps` | what they share: `Deps`, the workspace a request is for, who clicked what, the logger |

Everything is keyed by the workspace Bolt authorized the request for (`context.team_id`: for an event, its
`authorizations`, not the body's `team_id`, which in a Slack Connect channel can name another workspace);
in OAuth mode the Web API client a handler uses is the one Bolt built for the request, holding that
workspace's token. A request without one never reads or writes a workspace's data (not even under team ''):
a command or share click gets a one-line answer, the App Home lists no subscriptions, a lifecycle event is
ignored. A listener that raises is logged in one line (`_on_error`); Slack's user sees no trace.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_bolt import Ack, App, Assistant

from bot import answers, blocks, commands, home
from bot.commands import Services
from bot.lanes import ModelLane
from bot.listeners.app_home import AppHome
from bot.listeners.buttons import Buttons
from bot.listeners.deps import Deps, log, one_line
from bot.listeners.lifecycle import Lifecycle
from bot.listeners.links import Links
from bot.listeners.questions import Questions, is_direct_message
from bot.listeners.slash_command import COMMAND, WORKING, SlashCommand

__all__ = ["COMMAND", "SHARE_ACTION_ID", "WORKING", "Deps", "register"]

SHARE_ACTION_ID = commands.SHARE_ACTION_ID


def register(app: App, services: Services, lane: ModelLane | None = None) -> None:
    """Attach every listener to `app`; work that calls the model runs on `lane` (one is made if none is
    given)."""
    deps = Deps(services, lane)
    slash, questions, buttons = SlashCommand(deps), Questions(deps), Buttons(deps)
    app_home = AppHome(deps, messages_tab=questions.messages_opened)
    links, lifecycle = Links(deps), Lifecycle(deps)
    # Bolt runs the first listener that matches: a fast command is answered in the ack with no lazy hand-off
    # (no request copy, no extra thread), and is matched first (each listener tried costs a match); what
    # is left, a slow command, gets the lazy pair.
    app.command(COMMAND, matchers=[slash.is_fast])(slash.fast)
    app.command(COMMAND)(slash.deferred)  # answered from the model lane
    app.action(SHARE_ACTION_ID)(ack=_ack, lazy=[buttons.share])
    app.action(blocks.SAVE_ACTION_ID)(ack=_ack, lazy=[buttons.save])
    app.action(home.REMOVE_ACTION_ID)(ack=_ack, lazy=[app_home.remove])
    app.action(blocks.OPEN_ACTION_ID)(_ack)  # a link button: Slack opens the link, and expects an ack
    app.action(blocks.RELATED_ACTION_ID)(ack=_ack, lazy=[buttons.related])
    app.action(blocks.CITE_ACTIONS)(ack=_ack, lazy=[buttons.cite])
    app.action(home.EXPORT_ACTION_ID)(ack=_ack, lazy=[app_home.export_bib])
    app.action(blocks.AUTHOR_ACTION_ID)(ack=_ack, lazy=[buttons.more_by])  # More by…: search author:"…"
    app.event("app_home_opened")(ack=_ack, lazy=[app_home.opened])
    app.event("app_context_changed")(ack=_ack, lazy=[questions.context_changed])
    app.event("agent_session_stopped")(questions.session_stopped)  # at once, in the request: a stop waits
    app.action(answers.FEEDBACK_ACTION_ID)(ack=_ack, lazy=[buttons.feedback])
    app.event("link_shared")(ack=_ack, lazy=[links.unfurl])
    app.event("entity_details_requested")(ack=_ack, lazy=[links.entity_details])
    app.event("app_uninstalled")(lifecycle.uninstalled)
    app.event("tokens_revoked")(lifecycle.tokens_revoked)
    for name in ("channel_archive", "group_archive"):
        app.event(name)(lifecycle.archived)
    for name in ("channel_deleted", "group_deleted"):
        app.event(name)(lifecycle.deleted)
    for name in ("channel_left", "group_left"):
        app.event(name)(lifecycle.left)
    app.event("member_left_channel")(lifecycle.member_left)
    assistant = Assistant(logger=logging.getLogger("slack_bolt"))
    assistant.thread_started(lazy=[questions.assistant_started])(_nothing)
    assistant.thread_context_changed(_nothing)  # the pane's context (the channel in view) is not used
    assistant.user_message(lazy=[questions.assistant_message])(questions.claim)
    app.use(assistant)
    app.event("app_mention")(ack=questions.claim_and_ack, lazy=[questions.answer])
    app.event("message", matchers=[is_direct_message])(ack=questions.claim_and_ack, lazy=[questions.answer])
    app.event("message")(_ack)  # edits, deletions, this bot's own replies in a DM: nothing to do
    app.error(_on_error)


def _ack(ack: Ack) -> None:
    ack()


def _nothing() -> None:
    """An Assistant listener's ack part (the middleware acks by itself)."""


def _on_error(error: Exception, body: dict[str, Any]) -> None:
    kind = body.get("type") or body.get("command") or "?"
    log.error("event=listener_error request=%s error=%s: %s", kind, type(error).__name__, one_line(error))
