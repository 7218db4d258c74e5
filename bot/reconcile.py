"""Finding a message we posted earlier, by its metadata, in a channel's recent history.

A post whose fate is unknown (the process died after claiming its ledger row, Slack answered 5xx, the
connection broke) is looked for before it is posted again: the deliverer's items and bursts
(`bot.posting`) and the digest (`bot.digest`) each tag their messages with metadata (an `event_type` and a
payload key naming the row) and read the history since a little before the row was claimed. Reading may
fail; what a failure means is the caller's policy (the deliverer defers the channel, the digest looks again
at the next poll), so Slack's errors are raised to it unsorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from slack_sdk import WebClient

RECONCILE_MARGIN = timedelta(minutes=2)  # read history from this long before the row was claimed
HISTORY_PAGES = 5  # pages of 200 messages read before a post is taken to be absent


def posted_ts(messages: Sequence[dict[str, Any]], wanted: str, *, event_type: str, key: str) -> str | None:
    """The ts of our message among channel messages (read with include_all_metadata) whose metadata is
    `event_type` with `key` = `wanted` (an item's: mlresearch_item, item_id), or None."""
    for message in messages:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == event_type and payload.get(key) == wanted:
            return str(message["ts"])
    return None


def find_posted(
    client: WebClient, channel: str, claimed_at: datetime, *, event_type: str, key: str, wanted: str,
    thread_ts: str | None = None,
) -> str | None:
    """The ts of our message tagged `event_type`/`key` = `wanted` in `channel` (in the thread of
    `thread_ts`: conversations.replies) since shortly before `claimed_at`, or None when it is not in the
    first HISTORY_PAGES pages. Raises Slack's errors (SlackApiError, `bot.slackweb.TRANSPORT_ERRORS`)."""
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
        found = posted_ts(page.get("messages") or [], wanted, event_type=event_type, key=key)
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if found is not None or not page.get("has_more") or not cursor:
            return found
    return None
