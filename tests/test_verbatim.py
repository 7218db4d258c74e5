"""Feed text never pings or links by itself: every mrkdwn text object that carries feed text is `verbatim`, so
Slack neither turns `@channel` / `@here` into a mention nor auto-links a bare URL, and `<...>` stays escaped.
Checked everywhere feed text reaches Slack: the channel post, search, latest, summaries, a shared reply and
the App Home."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot import blocks, home, views
from bot.commands import Invocation, Services, handle, shared
from bot.config import Settings
from bot.models import Item
from bot.store import SQLiteStore, Store

MARKER = "zebrafish"  # in every feed field of the hostile item, so each text object carrying it is found
LINK = "https://machinelearning.apple.com/research/zebrafish-vision"
HOSTILE = Item(
    id=LINK,
    guid="zebrafish-vision",
    title=f"@channel look: https://evil.example <!here> {MARKER} vision",
    link=LINK,
    summary=(
        f"{MARKER.capitalize()} vision models learn from https://evil.example/x @here every day. "
        f"We study {MARKER} vision at scale, see <!channel> and www.evil.example for more."
    ),
    published=datetime(2026, 7, 1, tzinfo=UTC),
    kind="research",
    authors=(f"Ann {MARKER.capitalize()}", "@channel Bob", "https://evil.example Carol"),
)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = SQLiteStore(tmp_path / "bot.db")
    store.migrate()
    store.add_items([HOSTILE])
    return store


def text_objects(node: Any) -> Iterator[dict[str, Any]]:
    """Every Block Kit text object in a tree of blocks (section texts and fields, context elements, ...)."""
    if isinstance(node, dict):
        if node.get("type") in ("mrkdwn", "plain_text") and isinstance(node.get("text"), str):
            yield node
        for value in node.values():
            yield from text_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from text_objects(value)


def assert_inert(tree: Any) -> None:
    carrying = [t for t in text_objects(tree) if MARKER in t["text"].lower()]
    assert carrying, "the feed text should appear somewhere"
    for obj in carrying:
        if obj["type"] == "mrkdwn":
            assert obj.get("verbatim") is True, obj
    wire = json.dumps(tree, ensure_ascii=False)
    for live in ("<!here>", "<!channel>", "<https://evil.example"):
        assert live not in wire


def ask(services: Services, text: str) -> list[dict[str, Any]]:
    reply = handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services)
    return reply.blocks


def test_the_channel_post_keeps_feed_text_verbatim() -> None:
    message = blocks.item_message(HOSTILE, [MARKER])
    assert_inert(message["blocks"])
    assert "&lt;!here&gt;" in message["blocks"][0]["text"]["text"]
    assert message["blocks"][0]["text"]["text"].startswith(f"*<{LINK}|")  # our own link still works
    # the notification text is not parsed either (no link_names, parse none)
    assert message["parse"] == "none" and "<!here>" not in message["text"]
    assert blocks.item_text(HOSTILE)["parse"] == "none"


@pytest.mark.parametrize("command", [f"search {MARKER}", "latest", f"summarize {MARKER} vision"])
def test_command_replies_keep_feed_text_verbatim(command: str, store: Store) -> None:
    assert_inert(ask(Services(store=store, settings=Settings()), command))


def test_a_shared_reply_keeps_feed_text_verbatim(store: Store) -> None:
    reply = shared(f"search {MARKER}", "U1", Services(store=store, settings=Settings()), "T1", "C1")
    assert_inert(reply.blocks)


def test_the_app_home_keeps_feed_text_verbatim(store: Store) -> None:
    assert_inert(home.home_view(store, "T1")["blocks"])


def test_every_mrkdwn_object_of_the_builders_is_verbatim() -> None:
    for block in (views.section("x"), views.context("x")):
        assert all(t.get("verbatim") is True for t in text_objects(block) if t["type"] == "mrkdwn")
