"""Every Bolt listener, registered in one place (`register`). Listeners are plain functions over
`bot.commands` and the store; Bolt injects their arguments by name.

- `/mlresearch`: a fast command is answered in its ack (ephemeral); a slow one (`commands.is_slow`) is acked
  at once and answered through `response_url` by a lazy listener.
- The "Share in channel" button re-posts the same content visibly through `response_url`, then deletes the
  ephemeral original.
- App Home: `app_home_opened` publishes `views.home_view`.
- Lifecycle: uninstall and token revocation forget the workspace (its installation, subscriptions and
  undelivered items); an archived or left channel is paused, a deleted one unsubscribed, so the bot never
  posts where it is no longer welcome.

Everything is keyed by the request's team id. A request without one never reads or writes a workspace's data
(not even under team ''): a command or share click gets a one-line answer, the App Home lists no
subscriptions, a lifecycle event is ignored. In OAuth mode (several workspaces) the Web API client a handler
uses is the one Bolt built for the request, holding that workspace's token.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from slack_bolt import Ack, App, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import commands, views
from bot.blocks import RELATED_ACTION_ID
from bot.commands import Invocation, Services

log = logging.getLogger("bot.listeners")

COMMAND = "/mlresearch"
SHARE_ACTION_ID = commands.SHARE_ACTION_ID
WORKING = "Working on it… the answer will appear here in a moment."
SORRY = "Sorry, something went wrong on our side; please try again in a minute."


def register(app: App, services: Services) -> None:
    """Attach every listener to `app`."""
    listeners = _Listeners(services)
    # Bolt runs the first listener that matches: a fast command is answered in the ack with no lazy hand-off
    # (no request copy, no extra thread), and is matched first (each listener tried costs a match); what
    # is left, a slow command, gets the lazy pair.
    app.command(COMMAND, matchers=[listeners.is_fast])(listeners.command_fast)
    app.command(COMMAND)(ack=listeners.command_deferred, lazy=[listeners.command_lazy])
    app.action(SHARE_ACTION_ID)(ack=_ack, lazy=[listeners.share])
    app.action(RELATED_ACTION_ID)(ack=_ack, lazy=[listeners.related])
    app.event("app_home_opened")(ack=_ack, lazy=[listeners.home])
    app.event("app_uninstalled")(listeners.uninstalled)
    app.event("tokens_revoked")(listeners.tokens_revoked)
    for name in ("channel_archived", "group_archived"):
        app.event(name)(listeners.archived)
    for name in ("channel_deleted", "group_deleted"):
        app.event(name)(listeners.deleted)
    for name in ("channel_left", "group_left"):
        app.event(name)(listeners.left)
    app.event("member_left_channel")(listeners.member_left)
    app.error(_on_error)


def _ack(ack: Ack) -> None:
    ack()


def _on_error(error: Exception, body: dict[str, Any]) -> None:
    kind = body.get("type") or body.get("command") or "?"
    log.error("event=listener_error request=%s error=%s: %s", kind, type(error).__name__, _one_line(error))


def _one_line(error: object, limit: int = 200) -> str:
    return " ".join(str(error).split())[:limit]


class _Listeners:
    def __init__(self, services: Services) -> None:
        self.services = services

    # /mlresearch ------------------------------------------------------------------------------------

    def is_fast(self, body: dict[str, Any]) -> bool:
        return not commands.is_slow(_invocation(body), self.services)

    def command_deferred(self, ack: Ack, body: dict[str, Any]) -> None:
        ack(response_type="ephemeral", text=WORKING)
        _log_command(_invocation(body), "deferred", time.perf_counter())

    def for_request(self, client: WebClient | None) -> Services:
        """The services for one request: over the store's view for this thread (`Store.thread_view`), and in
        OAuth mode with the request's client (its workspace's token)."""
        services = self.services
        store = services.store.thread_view()
        slack = client if client is not None and services.settings.oauth_enabled else services.slack
        if store is services.store and slack is services.slack:
            return services
        return dataclasses.replace(services, store=store, slack=slack)

    def command_fast(self, ack: Ack, body: dict[str, Any], client: WebClient) -> None:
        started = time.perf_counter()
        inv = _invocation(body)
        try:
            reply = commands.handle(inv, self.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, _one_line(exc))
            ack(response_type="ephemeral", text=SORRY)
            return
        ack(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        _log_command(inv, "answered", started)

    def command_lazy(self, body: dict[str, Any], respond: Respond, client: WebClient) -> None:
        inv = _invocation(body)
        started = time.perf_counter()
        try:
            reply = commands.handle(inv, self.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, _one_line(exc))
            respond(response_type="ephemeral", replace_original=True, text=SORRY)
            return
        answer = respond(response_type="ephemeral", replace_original=True, text=reply.text,
                         blocks=reply.blocks)
        if answer.status_code != 200:  # the "working" note could not be replaced: answer beside it
            answer = respond(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        outcome = "responded" if answer.status_code == 200 else f"respond_failed:{answer.status_code}"
        _log_command(inv, outcome, started)

    # the share button -------------------------------------------------------------------------------

    def share(self, body: dict[str, Any], respond: Respond | None, client: WebClient) -> None:
        """Post the shared content visibly through response_url and delete the ephemeral original; when the
        response_url no longer works (it expires after 30 minutes), post as the bot instead."""
        action = (body.get("actions") or [{}])[0]
        user_id = str((body.get("user") or {}).get("id") or "")
        team_id = str((body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or "")
        channel_id = str((body.get("channel") or {}).get("id") or "")
        if not team_id:
            if respond is not None:
                _respond_ok(respond, response_type="ephemeral", replace_original=False,
                            text=commands.NO_WORKSPACE)
            log.info("event=share_refused reason=no_workspace channel=%s", channel_id[:20])
            return
        reply = commands.shared(str(action.get("value") or ""), user_id, self.for_request(client), team_id,
                                channel_id)
        where = f"team={team_id} channel={channel_id} user={user_id}"
        if respond is not None and _respond_ok(respond, response_type="in_channel", replace_original=False,
                                               text=reply.text, blocks=reply.blocks):
            _respond_ok(respond, delete_original=True)
            log.info("event=shared %s via=response_url", where)
            return
        try:
            client.chat_postMessage(channel=channel_id, text=reply.text, blocks=reply.blocks,
                                    unfurl_links=False, unfurl_media=False, parse="none")
            log.info("event=shared %s via=chat.postMessage", where)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "unknown_error")
            log.warning("event=share_failed %s error=%s", where, error)
            invite = error in ("not_in_channel", "channel_not_found")
            hint = " (invite me to this channel first)" if invite else ""
            client.chat_postEphemeral(channel=channel_id, user=user_id,
                                      text=f"Sorry, I couldn't share that here: {error}{hint}.")

    # the Related button -----------------------------------------------------------------------------

    def related(self, body: dict[str, Any], respond: Respond | None, client: WebClient) -> None:
        """The items nearest to the button's item, to the person who clicked, ephemerally."""
        action = (body.get("actions") or [{}])[0]
        user_id = str((body.get("user") or {}).get("id") or "")
        team_id = str((body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or "")
        channel_id = str((body.get("channel") or {}).get("id") or "")
        inv = Invocation(text=f"related {str(action.get('value') or '')[:2000]}", team_id=team_id,
                         channel_id=channel_id, user_id=user_id)
        reply = commands.handle(inv, self.for_request(client))
        if respond is not None and _respond_ok(respond, response_type="ephemeral", replace_original=False,
                                               text=reply.text, blocks=reply.blocks):
            return
        if channel_id and user_id:
            try:
                client.chat_postEphemeral(channel=channel_id, user=user_id, text=reply.text,
                                          blocks=reply.blocks)
            except SlackApiError as exc:
                log.warning("event=related_failed team=%s channel=%s error=%s", team_id[:20], channel_id[:20],
                            str(exc.response.get("error") or "unknown_error"))

    # App Home ---------------------------------------------------------------------------------------

    def home(self, event: dict[str, Any], body: dict[str, Any], client: WebClient) -> None:
        if event.get("tab", "home") != "home":
            return
        team_id = _team(body)
        client.views_publish(user_id=event["user"], view=views.home_view(self.services.store, team_id))
        log.info("event=home_published team=%s user=%s", team_id, event["user"])

    # lifecycle --------------------------------------------------------------------------------------

    def uninstalled(self, body: dict[str, Any]) -> None:
        team_id = _team(body)
        if not team_id:
            return
        self.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=app_uninstalled", team_id)

    def tokens_revoked(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if not (event.get("tokens") or {}).get("bot"):
            return  # only user tokens went away; the bot token still works
        team_id = _team(body)
        if not team_id:
            return
        self.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=tokens_revoked", team_id)

    def archived(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        self._pause(body, _channel(event), "channel archived")

    def left(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        self._pause(body, _channel(event), "bot removed from channel")

    def member_left(self, event: dict[str, Any], body: dict[str, Any], context: dict[str, Any]) -> None:
        if event.get("user") and event.get("user") == context.get("bot_user_id"):
            self._pause(body, _channel(event), "bot removed from channel")

    def deleted(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        team_id, channel_id = _team(body), _channel(event)
        if team_id and channel_id and self.services.store.unsubscribe(team_id, channel_id):
            log.info("event=unsubscribed team=%s channel=%s reason=channel_deleted", team_id, channel_id)

    def _pause(self, body: dict[str, Any], channel_id: str, reason: str) -> None:
        team_id = _team(body)
        store = self.services.store
        if team_id and channel_id and store.get_subscription(team_id, channel_id) is not None:
            store.pause_subscription(team_id, channel_id, reason)
            log.info("event=paused team=%s channel=%s reason=%r", team_id, channel_id, reason)


def _team(body: dict[str, Any]) -> str:
    """The event's workspace, or '' (logged) when the body names none: nothing is read or written for it."""
    team_id = str(body.get("team_id") or "")
    if not team_id:
        log.info("event=no_workspace type=%s", str((body.get("event") or {}).get("type"))[:40])
    return team_id


def _channel(event: dict[str, Any]) -> str:
    channel = event.get("channel")
    if isinstance(channel, dict):  # some events carry a channel object
        return str(channel.get("id") or "")
    return str(channel or "")


def _invocation(body: dict[str, Any]) -> Invocation:
    return Invocation(
        text=str(body.get("text") or ""),
        team_id=str(body.get("team_id") or ""),
        channel_id=str(body.get("channel_id") or ""),
        user_id=str(body.get("user_id") or ""),
        channel_name=body.get("channel_name"),
        response_url=body.get("response_url"),
    )


def _respond_ok(respond: Respond, **message: Any) -> bool:
    try:
        return respond(**message).status_code == 200
    except OSError as exc:  # the response_url could not be reached
        log.warning("event=respond_failed error=%s", type(exc).__name__)
        return False


def _log_command(inv: Invocation, outcome: str, started: float) -> None:
    words = inv.text.split()
    sub = words[0].lower()[:20] if words else "help"
    log.info("event=slack_command outcome=%s sub=%s team=%s channel=%s user=%s ms=%.1f", outcome,
             sub if sub.isalnum() else "?", inv.team_id, inv.channel_id, inv.user_id,
             (time.perf_counter() - started) * 1000)
