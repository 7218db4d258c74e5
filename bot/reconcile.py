"""Finding a message we posted earlier, by its metadata, in a channel's recent history.

A post whose fate is unknown (the process died after claiming its ledger row, Slack answered 5xx, the
connection broke) is looked for before it is posted again: the deliverer's items and bursts
(`bot.posting`) and the digest (`bot.digest`) each tag their messages with metadata (an `event_type` and a
payload key naming the row) and read the history since a little before the row was claimed. Only a message
our own bot posted counts (its `bot_id`, or `app_id`, is the one auth.test gives for the token): anyone in
the channel can post a message carrying our metadata, and must not make a row count as sent. Reading may
fail; what a failure means is the caller's policy (the deliverer defers the channel, the digest looks again
at the next poll), so Slack's errors are raised to it unsorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from msgspec import Struct
from slack_sdk import WebClient

RECONCILE_MARGIN = timedelta(minutes=2)  # read history from this long before the row was claimed
HISTORY_PAGES = 5  # pages of 200 messages read before a post is taken to be absent


class Poster(Struct, frozen=True):
    """Who posts with a token: its bot's id, and the app's when auth.test says it."""

    bot_id: str
    app_id: str = ""

    @classmethod
    def of(cls, client: WebClient) -> Poster:
        """The poster of `client`'s token (auth.test). Raises Slack's errors."""
        answer = client.auth_test()
        return cls(str(answer.get("bot_id") or ""), str(answer.get("app_id") or ""))

    def posted(self, message: dict[str, Any]) -> bool:
        """Whether `message` was posted by this bot (or app), not by a person or another app."""
        return bool(self.bot_id and message.get("bot_id") == self.bot_id
                    or self.app_id and message.get("app_id") == self.app_id)


def posted_ts(messages: Sequence[dict[str, Any]], wanted: str, *, event_type: str, key: str,
              poster: Poster) -> str | None:
    """The ts of our message among channel messages (read with include_all_metadata): posted by `poster`,
    its metadata `event_type` with `key` = `wanted` (an item's: mlresearch_item, item_id); or None."""
    for message in messages:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == event_type and payload.get(key) == wanted and poster.posted(message):
            return str(message["ts"])
    return None


def find_posted(
    client: WebClient, channel: str, claimed_at: datetime, *, event_type: str, key: str, wanted: str,
    thread_ts: str | None = None,
) -> str | None:
    """The ts of our message tagged `event_type`/`key` = `wanted` in `channel` (in the thread of
    `thread_ts`: conversations.replies) since shortly before `claimed_at`, or None when it is not in the
    first HISTORY_PAGES pages. Only our bot's messages count (`Poster`, from auth.test). Raises Slack's errors
    (SlackApiError, `bot.slackweb.TRANSPORT_ERRORS`)."""
    poster = Poster.of(client)
    oldest = f"{(claimed_at - RECONCILE_MARGIN).timestamp():.6f}"
    cursor = None
    for _ in range(HISTORY_PAGES):
        if thread_ts is not None:
            page = client.conversations_replies(
                channel=channel, ts=thread_ts, oldest=oldest, limit=200, include_all_metadata=True,
                cursor=cursor,
            )
        else:
            page = client.conversations_history(
                channel=channel, oldest=oldest, limit=200, include_all_metadata=True, cursor=cursor,
            )
        found = posted_ts(page.get("messages") or [], wanted, event_type=event_type, key=key, poster=poster)
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if found is not None or not page.get("has_more") or not cursor:
            return found
    return None
