"""The App Home: `app_home_opened` publishes `home.home_view` for the person who opened it (the subscriptions
of the channels they are in, their reading list, follows, what the team reads); with tab `messages` it is the
Messages tab's, handed to `bot.listeners.questions`. Its own buttons: Remove takes an item off the reading
list and publishes the Home again; *Export .bib* sends the reading list as a .bib file in a DM (`bot.cite`).
Without a workspace the Home lists no subscriptions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slack_bolt import BoltContext
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import cite, home
from bot.errors import StoreError
from bot.listeners.deps import Deps, clicked, log, one_line, team
from bot.slackweb import TRANSPORT_ERRORS

HOME_CHANNEL_PAGES = 5  # of 200 channels: whom the App Home lists subscriptions to

MessagesTab = Callable[[dict[str, Any], WebClient, BoltContext, Any], None]


class AppHome:
    """The App Home's listeners; `messages_tab` answers an `app_home_opened` of the Messages tab."""

    def __init__(self, deps: Deps, messages_tab: MessagesTab) -> None:
        self.deps = deps
        self.messages_tab = messages_tab

    def opened(self, event: dict[str, Any], client: WebClient, context: BoltContext,
               set_suggested_prompts: Any = None) -> None:
        """`app_home_opened`: the Home tab is published; the Messages tab's is `messages_tab`'s."""
        if event.get("tab") == "messages":
            self.messages_tab(event, client, context, set_suggested_prompts)
            return
        if event.get("tab", "home") != "home":
            return
        self.publish(client, team(context, event), str(event.get("user") or ""))

    def remove(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """Take an item off the clicker's reading list (a Remove button in the App Home), then publish their
        Home again."""
        team_id, user_id, _channel_id, item_id = clicked(body, context)
        if not (team_id and user_id):
            log.info("event=remove_refused reason=no_workspace_or_user")
            return
        store = self.deps.services.store.thread_view()
        try:
            removed = store.unsave_item(team_id, user_id, item_id)
        except StoreError as exc:
            log.error("event=remove_failed team=%s user=%s error=%r", team_id, user_id, one_line(exc))
            return
        log.info("event=item_removed team=%s user=%s removed=%s", team_id, user_id, removed)
        self.publish(client, team_id, user_id)

    def export_bib(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """*Export .bib* (App Home): the clicker's reading list as a .bib file in their DM (one log line)."""
        team_id, user_id, _channel_id, _value = clicked(body, context)
        if not (team_id and user_id):
            log.info("event=bib_export_refused reason=no_workspace_or_user")
            return
        cite.send_reading_list(client, self.deps.services.store.thread_view(), team_id, user_id)

    def publish(self, client: WebClient, team_id: str, user_id: str) -> None:
        """Publish `home.home_view` for `user_id` (nothing without a person)."""
        if not user_id:
            return
        visible = _channels_of(client, user_id)
        view = home.home_view(self.deps.services.store.thread_view(), team_id, user_id, visible)
        client.views_publish(user_id=user_id, view=view)
        log.info("event=home_published team=%s user=%s blocks=%d", team_id, user_id, len(view["blocks"]))


def _channels_of(client: WebClient, user_id: str) -> set[str]:
    """The channels `user_id` is in (users.conversations, which a bot token answers for the channels the bot
    is in too: every subscribed one), whose subscriptions the person's App Home lists. When Slack cannot say,
    none: the Home then only counts the workspace's subscriptions (it never shows a channel to someone who
    may not see it)."""
    found: set[str] = set()
    cursor = None
    try:
        for _ in range(HOME_CHANNEL_PAGES):
            page = client.users_conversations(user=user_id, types="public_channel,private_channel",
                                              exclude_archived=True, limit=200, cursor=cursor)
            found |= {str(c.get("id")) for c in page.get("channels") or [] if c.get("id")}
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
    except SlackApiError as exc:
        log.warning("event=home_channels_unknown user=%s error=%s", user_id[:20],
                    one_line(exc.response.get("error") if exc.response is not None else exc))
        return set()
    except TRANSPORT_ERRORS as exc:
        log.warning("event=home_channels_unknown user=%s error=%s", user_id[:20], type(exc).__name__)
        return set()
    return found
