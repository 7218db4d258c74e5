"""Posting one message exactly once: a post of unknown fate looked for before posting again, a row given up
after its attempts, blocks Slack rejects posted once as text, and a row left claimed by a killed process
reconciled by its metadata; through `Deliverer`, with real slack_sdk traffic over loopback to
tests/fakes/slack_api.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from bot import blocks
from bot.models import Item
from bot.store import Store
from tests.fakes.slack_api import BOT_ID, FakeSlack
from tests.test_deliver import TEAM, assert_exactly_once, deliverer, past_baseline, posted_items, queue


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return past_baseline(tmp_path)


# --- Slack faults on one post ----------------------------------------------------------------------------


def test_server_error_is_retried_after_checking_history(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1"], n=2)
    slack_api.fault("chat.postMessage", channel="C1", status=500)
    assert deliverer(slack_api)(store).delivered == 2
    assert len(slack_api.calls_to("conversations.history", "C1")) == 1
    assert posted_items(slack_api, "C1") == [i.id for i in items]


@pytest.mark.parametrize(
    "fault", [{"status": 500}, {"status": 503}, {"drop": True}, {"error": "internal_error"}]
)
def test_a_post_that_landed_despite_an_error_is_not_repeated(
    store: Store, slack_api: FakeSlack, fault: dict[str, Any]
) -> None:
    items = queue(store, ["C1"], n=2)
    slack_api.fault("chat.postMessage", channel="C1", after=True, **fault)
    assert deliverer(slack_api)(store).delivered == 2
    assert_exactly_once(slack_api, ["C1"], items)
    assert len(slack_api.calls_to("chat.postMessage", "C1")) == 2


def test_a_dropped_connection_before_posting_is_retried(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1"], n=1)
    slack_api.fault("chat.postMessage", channel="C1", drop=True)
    assert deliverer(slack_api)(store).delivered == 1
    assert_exactly_once(slack_api, ["C1"], items)


def test_a_row_that_keeps_failing_is_given_up_and_later_items_go_on(
    store: Store, slack_api: FakeSlack
) -> None:
    items = queue(store, ["C1"], n=3)
    slack_api.fault("chat.postMessage", channel="C1", status=500, times=2)
    report = deliverer(slack_api, max_attempts=2)(store)
    assert (report.delivered, report.failed) == (2, 1)
    first = store.deliveries(item_id=items[0].id)[0]
    assert first.state == "failed" and first.error is not None and first.error.startswith("gave_up after 2")
    assert posted_items(slack_api, "C1") == [i.id for i in items[1:]]


def test_rejected_blocks_are_posted_once_as_text(store: Store, slack_api: FakeSlack) -> None:
    [item] = queue(store, ["C1"], n=1)
    slack_api.fault("chat.postMessage", channel="C1", error="invalid_blocks")
    assert deliverer(slack_api)(store).delivered == 1
    first, second = slack_api.calls_to("chat.postMessage", "C1")
    assert "blocks" in first.params and "blocks" not in second.params
    assert item.link in second.params["text"]
    assert second.params["metadata"]["event_payload"]["item_id"] == item.id


def test_blocks_rejected_twice_fail_that_row_only(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1"], n=2)
    slack_api.fault("chat.postMessage", channel="C1", error="msg_blocks_too_long", times=2)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (1, 1)
    assert store.deliveries(item_id=items[0].id)[0].error == "msg_blocks_too_long"
    assert posted_items(slack_api, "C1") == [items[1].id]


# --- reconciling rows of unknown fate --------------------------------------------------------------------


def orphan(store: Store, item: Item, channel: str = "C1") -> int:
    """Leave a row as a killed process would: claimed (`posting`), outcome unknown."""
    [row] = store.deliveries(item_id=item.id, channel_id=channel)
    assert store.claim(row.id)
    return row.id


def test_an_orphan_already_in_history_is_marked_sent_without_posting(
    store: Store, slack_api: FakeSlack
) -> None:
    items = queue(store, ["C1"], n=2)
    row_id = orphan(store, items[0])
    landed = slack_api.add_message("C1", "x", metadata=blocks.item_message(items[0])["metadata"],
                                   bot_id=BOT_ID)
    slack_api.add_message("C1", "chatter")
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (2, 0)
    assert posted_items(slack_api, "C1") == [items[1].id]  # only the second item was posted
    assert len(slack_api.calls_to("chat.postMessage")) == 1
    [history] = slack_api.calls_to("conversations.history", "C1")
    assert str(history.params["include_all_metadata"]).lower() in ("1", "true")
    assert [r.ts for r in store.deliveries() if r.id == row_id] == [landed["ts"]]


def test_an_orphan_is_posted_when_only_someone_else_posted_its_metadata(
    store: Store, slack_api: FakeSlack
) -> None:
    [item] = queue(store, ["C1"], n=1)
    orphan(store, item)
    metadata = blocks.item_message(item)["metadata"]
    slack_api.add_message("C1", "forged", metadata=metadata, user="U0EVE")
    slack_api.add_message("C1", "another app", metadata=metadata, bot_id="B0OTHER")
    assert deliverer(slack_api)(store).delivered == 1
    assert posted_items(slack_api, "C1") == [item.id]  # posted by us, once
    [row] = store.deliveries(item_id=item.id)
    assert row.state == "sent" and row.ts == slack_api.posts("C1")[0]["ts"]


def test_an_orphan_missing_from_history_is_posted(store: Store, slack_api: FakeSlack) -> None:
    items = queue(store, ["C1"], n=2)
    orphan(store, items[0])
    assert deliverer(slack_api)(store).delivered == 2
    assert posted_items(slack_api, "C1") == [i.id for i in items]
    assert store.deliveries(item_id=items[0].id)[0].attempts == 2


def test_without_the_history_scope_an_orphan_is_posted_and_the_log_says_so(
    store: Store, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    [item] = queue(store, ["C1"], n=1)
    orphan(store, item)
    slack_api.fault("conversations.history", error="missing_scope", times=None, needed="channels:history")
    with caplog.at_level(logging.WARNING, logger="bot.deliver"):
        assert deliverer(slack_api)(store).delivered == 1
    assert posted_items(slack_api, "C1") == [item.id]
    assert "event=reconcile_unavailable channel=C1" in caplog.text and "missing_scope" in caplog.text
    assert store.workspace_disabled(TEAM) is None
