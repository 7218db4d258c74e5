"""The App Home view and the reply builders' escaping and highlighting."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

from bot import views
from bot.highlight import highlighted_snippet, inert, matching_words, word_matcher
from bot.store import SQLiteStore, utcnow
from tests.fakes.archive import filled_store, make_item


def texts(view: dict) -> str:
    return json.dumps(view, ensure_ascii=False)


def test_home_view_has_latest_items_subscriptions_health_and_usage(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    store.subscribe("T1", "C111", "U1", ["vision"])
    store.subscribe("T1", "C222", "U1")
    store.pause_subscription("T1", "C222", "not_in_channel")
    store.subscribe("T2", "C999", "U2")  # another workspace: not shown
    view = views.home_view(store, "T1")
    assert view["type"] == "home" and len(view["blocks"]) <= 100
    body = texts(view)
    headers = [b["text"]["text"] for b in view["blocks"] if b["type"] == "header"]
    assert headers == [
        "Apple Machine Learning Research",
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
    assert "*Feed:* OK" in body and "*Archive:* 16 item(s)" in body
    assert "`/mlresearch search image captioning since:2026-01-01`" in body


def test_home_view_on_an_empty_store_and_hostile_titles(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "empty.db")
    store.migrate()
    body = texts(views.home_view(store, "T1"))
    assert "Nothing archived yet" in body and "No channel here is subscribed yet" in body
    assert "not polled yet" in body
    store.add_items([make_item("x", "<!everyone> & <@U1>", "<!here> body")])
    body = texts(views.home_view(store, "T1"))
    assert "<!everyone>" not in body and "<!here>" not in body and "<@U1>" not in body
    assert "&lt;!everyone&gt; &amp; &lt;@U1&gt;" in body


def test_when_reads_naturally() -> None:
    now = utcnow()
    assert views.when(None) == "never"
    assert views.when(now - timedelta(seconds=30), now).endswith("(just now)")
    assert views.when(now - timedelta(minutes=10), now).endswith("(10 min ago)")
    assert views.when(now - timedelta(hours=5), now).endswith("(5 h ago)")
    assert views.when(now - timedelta(days=3), now).endswith("(3 days ago)")


def test_references_only_for_real_ids() -> None:
    assert views.channel_ref("C0123ABC") == "<#C0123ABC>"
    assert views.channel_ref("C1|x><!channel") == "this channel"
    assert views.user_ref("U0AB") == "<@U0AB>" and views.user_ref("!here") == "someone"


def test_matching_agrees_with_search_stemming_and_prefix() -> None:
    assert matching_words(["Captions", "captioning", "capital", "cap"], ["caption"]) == {
        "captions",
        "captioning",
    }
    assert matching_words(["captioning"], ["capt"], prefix_last=True) == {"captioning"}
    assert not matching_words(["captioning"], ["capt"], prefix_last=False)


def test_highlighted_snippet_bolds_words_never_entities() -> None:
    is_match = word_matcher(["amp", "gt", "b"])
    out = highlighted_snippet("a & b <b> amp gt; *x* `y`", is_match)
    assert out == "a &amp; *b* &lt;*b*&gt; *amp* *gt*; ∗x∗ ˋyˋ"
    assert re.findall(r"&\w*;?", out) == ["&amp;", "&lt;", "&gt;"]  # every entity whole


def test_highlighted_snippet_starts_near_a_late_match_and_cuts() -> None:
    text = "filler " * 80 + "the captioning result " + "tail " * 80
    out = highlighted_snippet(text, word_matcher(["captioning"]), limit=120)
    assert out.startswith("…") and out.endswith("…")
    assert "*captioning*" in out and len(out) <= 125


def test_inert_neutralizes_formatting_and_markup() -> None:
    assert inert("*b* `c` ~s~ <!here> &") == "∗b∗ ˋcˋ ∼s∼ &lt;!here&gt; &amp;"
