"""The workspace's and its channels' lifecycle: uninstall and token revocation forget the workspace (its
installation, subscriptions and undelivered items); an archived or left channel is paused, a deleted one
unsubscribed, so the bot never posts where it is no longer welcome. An event without a workspace is ignored.
Each is handled in the request (no lazy listener).
"""

from __future__ import annotations

from typing import Any

from slack_bolt import BoltContext

from bot.listeners.deps import Deps, log, team


class Lifecycle:
    """The listeners of uninstalls, revoked tokens and archived, left or deleted channels."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def uninstalled(self, event: dict[str, Any], context: BoltContext) -> None:
        team_id = team(context, event)
        if not team_id:
            return
        self.deps.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=app_uninstalled", team_id)

    def tokens_revoked(self, body: dict[str, Any], event: dict[str, Any], context: BoltContext) -> None:
        revoked = (event.get("tokens") or {}).get("bot")
        if not revoked:
            return  # only user tokens went away; the bot token still works
        team_id = team(context, event)
        if not team_id:
            return
        if not isinstance(revoked, list) or not _revokes_own_bot(body, context, team_id, revoked):
            log.info("event=tokens_revoked_ignored team=%s reason=not_this_workspaces_bot", team_id)
            return  # another workspace's bot user (a shared channel's): this one's token still works
        self.deps.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=tokens_revoked", team_id)

    def archived(self, event: dict[str, Any], context: BoltContext) -> None:
        self._pause(team(context, event), _channel(event), "channel archived")

    def left(self, event: dict[str, Any], context: BoltContext) -> None:
        self._pause(team(context, event), _channel(event), "bot removed from channel")

    def member_left(self, event: dict[str, Any], context: BoltContext) -> None:
        if event.get("user") and event.get("user") == context.get("bot_user_id"):
            self._pause(team(context, event), _channel(event), "bot removed from channel")

    def deleted(self, event: dict[str, Any], context: BoltContext) -> None:
        team_id, channel_id = team(context, event), _channel(event)
        if team_id and channel_id and self.deps.services.store.unsubscribe(team_id, channel_id):
            log.info("event=unsubscribed team=%s channel=%s reason=channel_deleted", team_id, channel_id)

    def _pause(self, team_id: str, channel_id: str, reason: str) -> None:
        store = self.deps.services.store
        if team_id and channel_id and store.get_subscription(team_id, channel_id) is not None:
            store.pause_subscription(team_id, channel_id, reason)
            log.info("event=paused team=%s channel=%s reason=%r", team_id, channel_id, reason)


def _revokes_own_bot(body: dict[str, Any], context: BoltContext, team_id: str, revoked: list[Any]) -> bool:
    """Whether `revoked` (tokens_revoked's `tokens.bot`: user IDs) holds our bot user in the workspace Bolt
    authorized (`team_id`): Bolt's `bot_user_id`, or, as Bolt authorizes this event without a token, the bot
    authorization Slack signed into the body for that workspace (its installation's bot user); none there
    (authorizations of people only): not known to be ours. A body without authorizations is authorized for
    its own `team_id`, the workspace whose token went."""
    own = context.get("bot_user_id")
    if own:
        return own in revoked
    grants = [g for g in body.get("authorizations") or [] if isinstance(g, dict)]
    if not grants:
        return True
    bots = {g.get("user_id") for g in grants if g.get("team_id") == team_id and g.get("is_bot")}
    return any(user in bots for user in revoked if user)


def _channel(event: dict[str, Any]) -> str:
    channel = event.get("channel")
    if isinstance(channel, dict):  # some events carry a channel object
        return str(channel.get("id") or "")
    return str(channel or "")
