"""Finding our earlier message by its metadata (bot/reconcile.py), as the deliverer and the digest do after a
crash: page by page through the history since shortly before the claim, or through a thread's replies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot.reconcile import HISTORY_PAGES, RECONCILE_MARGIN, find_posted
from bot.slackweb import make_client
from tests.fakes.slack_api import BOT_ID, BOT_USER, FakeSlack

CHANNEL = "C1"


def tagged(key: str, value: str, event_type: str = "mlresearch_test",
           bot_id: str = BOT_ID) -> dict[str, object]:
    """A message with our metadata, posted by our bot (by default)."""
    return {"metadata": {"event_type": event_type, "event_payload": {key: value}}, "bot_id": bot_id,
            "user": BOT_USER}


def client(slack: FakeSlack) -> WebClient:
    return make_client("xoxb-test", slack.url, backoff=0.01)


def find(slack: FakeSlack, wanted: str, claimed_at: datetime, thread_ts: str | None = None) -> str | None:
    return find_posted(client(slack), CHANNEL, claimed_at, event_type="mlresearch_test", key="period",
                       wanted=wanted, thread_ts=thread_ts)


def test_a_tagged_message_is_found_pages_back_and_only_by_its_type_and_key(slack_api: FakeSlack) -> None:
    claimed = datetime.now(UTC)
    slack_api.add_message(CHANNEL, "other type", **tagged("period", "p1", event_type="mlresearch_item"))
    ours = slack_api.add_message(CHANNEL, "ours", **tagged("period", "p1"))
    for n in range(250):  # newer messages: ours is on the second page
        slack_api.add_message(CHANNEL, f"chatter {n}")
    assert find(slack_api, "p1", claimed) == ours["ts"]
    assert find(slack_api, "p2", claimed) is None
    calls = slack_api.calls_to("conversations.history", CHANNEL)
    assert all(str(c.params["include_all_metadata"]).lower() in ("1", "true") for c in calls)
    oldest = float(calls[0].params["oldest"])
    assert oldest == pytest.approx((claimed - RECONCILE_MARGIN).timestamp(), abs=1e-5)


def test_history_is_read_from_shortly_before_the_claim_and_for_a_few_pages_only(slack_api: FakeSlack) -> None:
    slack_api.add_message(CHANNEL, "ours", **tagged("period", "p1"))
    assert find(slack_api, "p1", datetime.now(UTC) + RECONCILE_MARGIN + timedelta(seconds=5)) is None
    for n in range(200 * HISTORY_PAGES):
        slack_api.add_message(CHANNEL, f"chatter {n}")
    before = len(slack_api.calls_to("conversations.history", CHANNEL))
    assert find(slack_api, "p1", datetime.now(UTC) - timedelta(minutes=1)) is None
    assert len(slack_api.calls_to("conversations.history", CHANNEL)) - before == HISTORY_PAGES


def test_a_reply_is_found_in_its_thread_and_a_missing_thread_is_the_callers_to_sort(
    slack_api: FakeSlack,
) -> None:
    claimed = datetime.now(UTC)
    parent = slack_api.add_message(CHANNEL, "burst")
    reply = slack_api.add_message(CHANNEL, "reply", thread_ts=parent["ts"], **tagged("period", "p1"))
    assert find(slack_api, "p1", claimed, thread_ts=parent["ts"]) == reply["ts"]
    assert find(slack_api, "p1", claimed) is None, "replies are not in the channel's history"
    with pytest.raises(SlackApiError) as raised:
        find(slack_api, "p1", claimed, thread_ts="1.000001")
    assert raised.value.response["error"] == "thread_not_found"


def test_only_a_message_our_bot_posted_counts(slack_api: FakeSlack) -> None:
    """Anyone in the channel (a person, another app) can post a message carrying our metadata: it must not
    make a row count as sent. Our bot is the one auth.test names for the token."""
    claimed = datetime.now(UTC)
    slack_api.add_message(CHANNEL, "a person's", user="U0EVE",
                          metadata=tagged("period", "p1")["metadata"])
    slack_api.add_message(CHANNEL, "another app's", **tagged("period", "p1", bot_id="B0OTHER"))
    assert find(slack_api, "p1", claimed) is None
    ours = slack_api.add_message(CHANNEL, "ours", **tagged("period", "p1"))
    assert find(slack_api, "p1", claimed) == ours["ts"]
    assert {c.token for c in slack_api.calls_to("auth.test")} == {"xoxb-test"}
