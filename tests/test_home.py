"""The App Home view: its sections, an empty store, hostile titles."""

from __future__ import annotations

import json
from pathlib import Path

from bot import home
from bot.store import SQLiteStore
from tests.fakes.archive import filled_store, make_item


def texts(view: dict) -> str:
    return json.dumps(view, ensure_ascii=False)


def test_home_view_has_latest_items_subscriptions_health_and_usage(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    store.subscribe("T1", "C111", "U1", ["vision"])
    store.subscribe("T1", "C222", "U1")
    store.pause_subscription("T1", "C222", "not_in_channel")
    store.subscribe("T2", "C999", "U2")  # another workspace: not shown
    view = home.home_view(store, "T1")
    assert view["type"] == "home" and len(view["blocks"]) <= 100
    body = texts(view)
    headers = [b["text"]["text"] for b in view["blocks"] if b["type"] == "header"]
    assert headers == [
        "Apple Machine Learning Research",
        "Your reading list",
        "Your follows",
        "What the team is reading",
        "Latest",
        "Subscribed channels",
        "Feed health",
        "How to use",
    ]
    assert (
        "<https://machinelearning.apple.com/research/introducing-third-generation-of-apple-foundation-models|"
        in body
    )
    assert body.count("Paper · ") + body.count("Update · ") == 5
    assert "<#C111>: only new items matching `vision`" in body
    assert "<#C222>: every new item" in body and "*paused*: not_in_channel" in body
    assert "C999" not in body
    assert "*Feed:* OK" in body and "*Archive:* 16 items" in body
    assert "`/mlresearch search image captioning since:2026-01-01`" in body


def test_home_view_on_an_empty_store_and_hostile_titles(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "empty.db")
    store.migrate()
    body = texts(home.home_view(store, "T1"))
    assert "Nothing archived yet" in body and "No channel here is subscribed yet" in body
    assert "not polled yet" in body
    store.add_items([make_item("x", "<!everyone> & <@U1>", "<!here> body")])
    body = texts(home.home_view(store, "T1"))
    assert "<!everyone>" not in body and "<!here>" not in body and "<@U1>" not in body
    assert "&lt;!everyone&gt; &amp; &lt;@U1&gt;" in body
