"""The channel post for an item: Block Kit built by pure functions, escaped, and within Slack's limits."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from bot import blocks
from bot.models import Item

EVIL = "<!channel> <@U123> <https://evil.example|click>"
LINK = "https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning"


def make(title: str = "BalCapRL: Image Captioning", summary: str = "Image captioning is fundamental.",
         link: str = LINK, kind: str = "research") -> Item:
    return Item(id=link, guid=None, title=title, link=link, summary=summary,
                published=datetime(2026, 5, 11, 9, 30, tzinfo=UTC), kind=kind)  # type: ignore[arg-type]


def texts(message: dict[str, Any]) -> list[str]:
    """Every mrkdwn/plain text in the blocks, and the fallback text."""
    found = [message["text"]]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text"):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message.get("blocks", []))
    return found


def test_the_post_has_a_linked_title_day_kind_snippet_and_read_related_and_cite_buttons() -> None:
    message = blocks.item_message(make())
    title, context, snippet, actions = message["blocks"]
    assert title["text"]["text"] == f"*<{LINK}|BalCapRL: Image Captioning>*"
    assert context["type"] == "context" and context["elements"][0]["text"] == "Paper · 2026-05-11"
    assert snippet["text"]["text"] == "Image captioning is fundamental."
    read, save, related, cite = actions["elements"]
    assert read["type"] == "button" and read["text"]["text"] == "Read" and read["url"] == LINK
    assert save["text"]["text"] == "Save" and save["action_id"] == "save_item" and save["value"] == LINK
    assert "url" not in save
    assert related["text"]["text"] == "Related" and related["action_id"] == blocks.RELATED_ACTION_ID
    assert related["value"] == LINK and "url" not in related
    assert (cite["text"]["text"], cite["action_id"], cite["value"]) == ("Cite", "cite_item", LINK)


def test_fallback_text_unfurls_and_metadata() -> None:
    message = blocks.item_message(make())
    assert message["text"] == f"BalCapRL: Image Captioning {LINK}"
    assert message["unfurl_links"] is False and message["unfurl_media"] is False
    assert message["metadata"] == {"event_type": "mlresearch_item", "event_payload": {"item_id": LINK}}


def test_an_update_is_labelled_as_such() -> None:
    link = "https://machinelearning.apple.com/updates/apple-at-cvpr-2026"
    message = blocks.item_message(make(link=link, kind="update"))
    assert message["blocks"][1]["elements"][0]["text"] == "Update · 2026-05-11"


def test_matched_keywords_are_shown_only_for_keyword_subscriptions() -> None:
    assert "Matched" not in json.dumps(blocks.item_message(make()))
    message = blocks.item_message(make(), ["caption", "<b>rl</b>"])
    context = message["blocks"][-1]["elements"][0]["text"]
    assert context == "Matched your keywords: caption, &lt;b&gt;rl&lt;/b&gt;"


@pytest.mark.parametrize("field", ["title", "summary"])
def test_mentions_and_links_in_feed_text_arrive_inert(field: str) -> None:
    message = blocks.item_message(make(**{field: f"{EVIL} & more"}))
    wire = json.dumps(message)
    for live in ("<!channel>", "<@U123>", "<https://evil.example"):
        assert live not in wire
    assert any("&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt; &amp; more" in t
               for t in texts(message))


def test_the_fallback_text_is_escaped_too() -> None:
    text = blocks.item_message(make(title=EVIL))["text"]
    assert text == f"&lt;!channel&gt; &lt;@U123&gt; &lt;https://evil.example|click&gt; {LINK}"


def test_a_link_that_could_break_out_of_its_brackets_is_not_linked() -> None:
    message = blocks.item_message(make(link="https://example.com/a|<!channel>"))
    [actions] = [b for b in message["blocks"] if b["type"] == "actions"]
    [save, cite] = actions["elements"]  # no Read or Related button: the link is not a safe URL
    assert save["action_id"] == "save_item" and "url" not in save
    assert cite["action_id"] == "cite_item" and "url" not in cite  # its entry just has no url
    save.pop("value")  # the item's id, handed back on a click, never rendered (nor is the metadata)
    cite.pop("value")
    wire = json.dumps([message["text"], message["blocks"]])  # what Slack renders
    assert "<!channel>" not in wire and "|<" not in wire


def test_the_snippet_is_about_300_characters_cut_on_a_word() -> None:
    words = " ".join(f"word{n}" for n in range(200))
    snippet = blocks.item_message(make(summary=words))["blocks"][2]["text"]["text"]
    assert 250 <= len(snippet) <= 300 and snippet.endswith("…")
    assert snippet[:-1].split()[-1] in words.split()  # the last word is whole


@pytest.mark.parametrize("title, summary", [
    ("T" * 20_000, "S" * 100_000),
    ("word " * 5_000, "<&> " * 30_000),  # escaping makes the text longer: still within the limits
])
def test_over_long_title_and_summary_are_cut_to_slack_limits(title: str, summary: str) -> None:
    message = blocks.item_message(make(title=title, summary=summary), ["k" * 500] * 30)
    assert len(message["text"]) <= 3000
    assert len(message["blocks"]) <= 50
    for block in message["blocks"]:
        if block["type"] == "section":
            assert len(block["text"]["text"]) <= 3000
        if block["type"] == "context":
            assert all(len(e["text"]) <= 3000 for e in block["elements"])
    assert len(json.dumps(message["blocks"])) < 12_000


def test_text_only_message_keeps_text_and_metadata() -> None:
    item = make(title=EVIL)
    message = blocks.item_text(item)
    assert "blocks" not in message
    assert message["text"] == blocks.item_message(item)["text"]
    assert message["metadata"]["event_payload"]["item_id"] == LINK
    assert message["unfurl_links"] is False and message["unfurl_media"] is False


def test_an_item_without_summary_has_no_snippet() -> None:
    types = [b["type"] for b in blocks.item_message(make(summary=""))["blocks"]]
    assert types == ["section", "context", "actions"]
