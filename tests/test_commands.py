"""`/mlresearch` handlers against a Store filled from the feed fixtures: every command, hostile input,
escaping, the share button, limits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace
from slack_sdk.errors import SlackApiError

from bot.commands import SHARE_ACTION_ID, Invocation, Reply, Services, handle, is_slow, shared
from bot.config import Settings
from bot.errors import StoreError
from bot.store import SQLiteStore, Store
from bot.summarize import Summarizer
from tests.fakes.archive import filled_store, make_item

TEAM, CHANNEL, USER = "T1", "C1", "U1"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return filled_store(tmp_path)


@pytest.fixture
def services(store: Store) -> Services:
    return Services(store=store, settings=Settings())


def ask(services: Services, text: str, **kw: Any) -> Reply:
    fields = {"team_id": TEAM, "channel_id": CHANNEL, "user_id": USER, **kw}
    return handle(Invocation(text=text, **fields), services)


def mrkdwn(reply: Reply) -> str:
    """Every text of the reply (blocks and fallback), as Slack would read it."""
    texts = [reply.text]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text"):
                texts.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(reply.blocks)
    return "\n".join(texts)


def share_buttons(reply: Reply) -> list[dict[str, Any]]:
    return [
        e
        for b in reply.blocks
        if b["type"] == "actions"
        for e in b["elements"]
        if e.get("action_id") == SHARE_ACTION_ID
    ]


def assert_inert(text: str) -> None:
    """No mention, broadcast or foreign link can come out of this text."""
    for token in re.findall(r"<([^>]*)>", text):
        assert not token.startswith(("!", "@")), token
        assert token.startswith(("https://machinelearning.apple.com/", "#C")), token


# --- help and unknown words ------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "help", "  HELP ", "/mlresearch", "/mlresearch help"])
def test_help_lists_every_command_with_an_example(services: Services, text: str) -> None:
    body = mrkdwn(ask(services, text))
    for command in ("search", "summarize", "latest", "subscribe", "unsubscribe", "status", "help"):
        assert f"`/mlresearch {command}" in body
    assert "e.g. `/mlresearch search image captioning" in body
    assert "&lt;terms&gt;" in body and "<terms>" not in body


def test_unknown_word_gets_a_short_usage_reply(services: Services) -> None:
    reply = ask(services, "frobnicate everything")
    assert "frobnicate" in reply.text and "/mlresearch help" in reply.text
    assert len(reply.blocks) == 1 and reply.share_value is None
    hostile = ask(services, "<!channel>" * 500)
    assert len(hostile.text) < 300
    assert_inert(mrkdwn(hostile))


# --- search ----------------------------------------------------------------------------------------------


def test_search_shows_top_results_with_link_day_kind_and_bold_matches(services: Services) -> None:
    reply = ask(services, "search image captioning")
    sections = [b["text"]["text"] for b in reply.blocks if b["type"] == "section"]
    contexts = [b["elements"][0]["text"] for b in reply.blocks if b["type"] == "context"]
    assert 1 <= len(sections) <= 5
    first = sections[0]
    assert first.startswith("*<https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning|")
    assert "*captioning*" in first and "*Image*" in first
    assert "Paper · 2026-05-11" in contexts
    assert "BalCapRL" in reply.text


def test_search_caps_results_at_five_and_says_so(services: Services) -> None:
    reply = ask(services, "search models")
    sections = [b for b in reply.blocks if b["type"] == "section"]
    assert len(sections) == 5
    assert "results for “models” · the best 5" in mrkdwn(reply)  # how many there are, and that these are 5


def test_search_filters_since_and_type(services: Services) -> None:
    updates = ask(services, "search apple type:update")
    kinds = [b["elements"][0]["text"] for b in updates.blocks if b["type"] == "context"][1:]
    assert kinds and all(k.startswith("Update") for k in kinds)
    recent = ask(services, "search models since:2026-01-01")
    days = re.findall(r"· (\d{4}-\d\d-\d\d)", mrkdwn(recent))
    assert days and all(d >= "2026-01-01" for d in days)
    assert "2025-07" not in mrkdwn(recent)


def test_search_share_button_carries_the_command(services: Services) -> None:
    reply = ask(services, "search   image captioning")
    (button,) = share_buttons(reply)
    assert reply.share_value == button["value"] == "search image captioning"
    assert button["text"]["text"] == "Share in channel"


def test_no_results_suggests_what_to_try_and_has_no_share_button(services: Services) -> None:
    reply = ask(services, "search zyxwvut")
    assert "No results" in reply.text and "latest" in reply.text
    assert reply.share_value is None and not share_buttons(reply)


@pytest.mark.parametrize(
    "text",
    [
        'search "unbalanced quote',
        "search NEAR(a b) OR * AND -x ^y",
        "search " + "x" * 5000,
        "search 🚀🔥",
        "search <!channel> <@U123> <https://evil.example|click>",
        "search since:yesterday models",
        "search type:video models",
        "search since:<!here>",
        "search ` *bold* ~strike~ _it_",
    ],
)
def test_hostile_search_strings_get_a_clear_answer(services: Services, store: Store, text: str) -> None:
    before = store.count_items()
    reply = ask(services, text)
    body = mrkdwn(reply)
    assert "Traceback" not in body and "Error" not in body
    assert_inert(body)
    assert store.count_items() == before
    if len(text) > 1000:  # its first words are searched: one line says so (and nothing matches them)
        assert "No results" in reply.text and len(reply.text) < 400


def test_search_with_no_words_gets_usage(services: Services) -> None:
    assert "Usage" in ask(services, "search").text


def test_feed_text_is_escaped_and_bold_never_breaks_an_entity(services: Services, store: Store) -> None:
    store.add_items(
        [
            make_item(
                "hostile",
                "<!channel> Tom & Jerry <https://evil.example|click> *boom*",
                "Ampersands & amp lt gt: <@U999> said *hi* and `code` ~x~ <!here> then amp again.",
            )
        ]
    )
    reply = ask(services, "search lt amp*")  # "amp*": a prefix, so "Ampersands" matches too
    body = mrkdwn(reply)
    assert_inert(body)
    assert "&lt;!channel&gt; Tom &amp; Jerry &lt;https://evil.example|click&gt;" in body
    section = next(b["text"]["text"] for b in reply.blocks if "hostile" in str(b))
    snippet = section.split("\n", 1)[1]
    assert snippet.startswith("*Ampersands* &amp; *amp* *lt* gt")
    assert "&*amp*;" not in snippet and "*&amp;*" not in snippet
    # feed asterisks and backticks cannot pair with our markers
    assert "*hi*" not in snippet and "`" not in snippet and "~x~" not in snippet
    assert snippet.count("*") == 2 * len(re.findall(r"\*(?:Ampersands|amp|lt)\*", snippet))


def test_search_results_show_authors_escaped(services: Services, store: Store) -> None:
    item = replace(make_item("authored", "Speech synthesis study", "About speech."), authors=("Jane <Doe>",))
    store.add_items([item])
    reply = ask(services, "search speech synthesis")
    assert "Paper · 2026-07-01 · J. &lt;Doe&gt;" in mrkdwn(reply)


# --- latest ----------------------------------------------------------------------------------------------


def test_latest_defaults_to_five_newest(services: Services) -> None:
    reply = ask(services, "latest")
    sections = [b["text"]["text"] for b in reply.blocks if b["type"] == "section"]
    assert len(sections) == 5
    assert "introducing-third-generation" in sections[0]
    assert share_buttons(reply)[0]["value"] == "latest"


def test_latest_n_and_the_cap(services: Services) -> None:
    three = ask(services, "latest 3")
    assert len([b for b in three.blocks if b["type"] == "section"]) == 3
    capped = ask(services, "latest 50")
    assert len([b for b in capped.blocks if b["type"] == "section"]) == 16  # the whole archive, under 20
    assert "at most 20" in mrkdwn(capped)
    assert len(capped.blocks) <= 50


def test_latest_never_shows_more_than_twenty(services: Services, store: Store) -> None:
    store.add_items(
        [make_item(f"extra-{i}", f"Extra {i}", "Words.", day=f"2026-08-{i + 1:02d}") for i in range(10)]
    )
    reply = ask(services, "latest 20")
    assert len([b for b in reply.blocks if b["type"] == "section"]) == 20
    assert len(reply.blocks) <= 50


@pytest.mark.parametrize("n", ["0", "-1", "abc", "3 papers", "1.5", "9" * 30])
def test_latest_bad_n_is_a_usage_line(services: Services, n: str) -> None:
    reply = ask(services, f"latest {n}")
    assert reply.text.startswith("Usage: `/mlresearch latest [n]`")
    assert len(reply.blocks) == 1 and reply.share_value is None


def test_latest_on_an_empty_archive(tmp_path: Path) -> None:
    empty = SQLiteStore(tmp_path / "empty.db")
    empty.migrate()
    reply = ask(Services(store=empty, settings=Settings()), "latest")
    assert "empty" in reply.text and reply.share_value is None


# --- summarize -------------------------------------------------------------------------------------------


def test_summarize_cites_items_with_title_links_and_a_date_range(services: Services) -> None:
    reply = ask(services, "summarize diffusion models")
    body = mrkdwn(reply)
    assert "What Apple ML Research says about “diffusion models”" in body
    assert "<https://machinelearning.apple.com/research/projective-composition-diffusion|" in body
    assert re.search(r"\d{4}-\d\d-\d\d to \d{4}-\d\d-\d\d", body)
    assert share_buttons(reply)[0]["value"] == "summarize diffusion models"


def test_summarize_nothing_matching_is_one_line(services: Services) -> None:
    reply = ask(services, "summarize qwertyuiop")
    assert "Nothing in the archive" in reply.text and len(reply.blocks) == 1 and reply.share_value is None
    assert "Usage" in ask(services, "summarize").text


def test_is_slow_only_for_a_model_summary(services: Services, store: Store) -> None:
    inv = Invocation("summarize diffusion", TEAM, CHANNEL, USER)
    assert not is_slow(inv, services)
    remote = Services(store=store, settings=Settings(), summarizer=Summarizer("http://127.0.0.1:9/v1"))
    assert is_slow(inv, remote)
    assert not is_slow(Invocation("search diffusion", TEAM, CHANNEL, USER), remote)
    assert not is_slow(
        Invocation("summarize x", TEAM, CHANNEL, USER), Services(store, Settings(), None, Summarizer())
    )


# --- share -----------------------------------------------------------------------------------------------


def test_shared_rebuilds_the_content_without_a_button(services: Services) -> None:
    private = ask(services, "search captioning")
    public = shared(private.share_value or "", "U777", services, TEAM, CHANNEL)
    assert not share_buttons(public) and public.share_value is None
    assert public.blocks[:-1] == private.blocks[:-1]
    assert public.blocks[-1]["elements"][0]["text"] == "Shared by <@U777>"


def test_shared_refuses_what_is_not_shareable_and_odd_user_ids(services: Services, store: Store) -> None:
    assert "can't be shared" in shared("subscribe everything", "U1", services, TEAM, CHANNEL).text
    assert store.get_subscription(TEAM, CHANNEL) is None
    odd = shared("latest 2", "<!channel>", services, TEAM, CHANNEL)
    assert_inert(mrkdwn(odd))
    assert "Shared by someone" in mrkdwn(odd)


# --- subscribe / unsubscribe -----------------------------------------------------------------------------


def test_subscribe_with_keywords_confirms_the_filter(services: Services, store: Store) -> None:
    reply = ask(services, 'subscribe privacy "Speech Recognition", vision')
    sub = store.get_subscription(TEAM, CHANNEL)
    assert sub is not None and sub.keywords == ("privacy", "speech recognition", "vision")
    assert "Subscribed <#C1>" in reply.text and "`speech recognition`" in reply.text
    again = ask(services, "subscribe")
    assert "Updated" in again.text and "every new item" in again.text
    assert store.get_subscription(TEAM, CHANNEL).keywords == ()  # type: ignore[union-attr]


def test_subscribe_with_no_usable_keyword_changes_nothing(services: Services, store: Store) -> None:
    reply = ask(services, "subscribe 🚀 ✨")
    assert "nothing was changed" in reply.text
    assert store.get_subscription(TEAM, CHANNEL) is None


def test_a_dm_cannot_be_subscribed(services: Services, store: Store) -> None:
    reply = ask(services, "subscribe", channel_id="D123")
    assert "direct message" in reply.text
    assert store.subscriptions() == []


class FakeSlackClient:
    def __init__(self, error: str | None = None, channel: dict[str, Any] | None = None) -> None:
        self.error, self.channel, self.calls = error, channel or {"id": CHANNEL}, []

    def conversations_info(self, channel: str) -> dict[str, Any]:
        self.calls.append(channel)
        if self.error:
            raise SlackApiError("failed", {"ok": False, "error": self.error})
        return {"ok": True, "channel": self.channel}


@pytest.mark.parametrize(
    ("client", "channel_name"),
    [
        (None, "privategroup"),
        (FakeSlackClient(error="channel_not_found"), "secret"),
        (FakeSlackClient(error="not_in_channel"), "secret"),
        (FakeSlackClient(channel={"id": CHANNEL, "is_private": True, "is_member": False}), "secret"),
    ],
)
def test_a_private_channel_without_the_bot_explains_how_to_invite(
    store: Store, client: Any, channel_name: str
) -> None:
    services = Services(store=store, settings=Settings(), slack=client)
    reply = ask(services, "subscribe", channel_name=channel_name)
    assert "/invite" in reply.text and "nothing was changed" in reply.text
    assert store.subscriptions() == []


def test_subscribe_goes_ahead_when_the_bot_can_post(store: Store) -> None:
    client = FakeSlackClient(channel={"id": CHANNEL, "is_private": True, "is_member": True})
    reply = ask(Services(store=store, settings=Settings(), slack=client), "subscribe")
    assert client.calls == [CHANNEL]
    assert store.get_subscription(TEAM, CHANNEL) is not None and "Subscribed" in reply.text
    flaky = FakeSlackClient(error="ratelimited")  # the check is advisory: other errors don't block
    ask(Services(store=store, settings=Settings(), slack=flaky), "subscribe", channel_id="C2")
    assert store.get_subscription(TEAM, "C2") is not None


def test_unsubscribe(services: Services, store: Store) -> None:
    assert "isn't subscribed" in ask(services, "unsubscribe").text
    ask(services, "subscribe")
    assert "nothing was changed" in ask(services, "unsubscribe everything").text
    assert store.get_subscription(TEAM, CHANNEL) is not None
    assert "Unsubscribed <#C1>" in ask(services, "unsubscribe").text
    assert store.get_subscription(TEAM, CHANNEL) is None


# --- status ----------------------------------------------------------------------------------------------


def test_status_shows_feed_health_and_this_channels_subscription(store: Store) -> None:
    polled = store.latest_feed_state()
    assert polled is not None
    services = Services(store=store, settings=Settings(feed_url=polled.url))  # the feed status reports on
    body = mrkdwn(ask(services, "status"))
    assert "*Feed:* OK" in body and "*Archive:* 16 items" in body and "not subscribed" in body
    assert "Introducing the Third Generation" in body
    ask(services, "subscribe vision")
    store.pause_subscription(TEAM, CHANNEL, "channel_not_found <!channel>")
    store.record_failure(polled.url, "HTTP 503 <@U1>")
    body = mrkdwn(ask(services, "status"))
    assert "failing" in body and "1 in a row" in body and "HTTP 503" in body
    assert "`vision`" in body and "*paused*: channel_not_found" in body
    assert_inert(body)


def test_status_on_a_fresh_store(tmp_path: Path) -> None:
    fresh = SQLiteStore(tmp_path / "fresh.db")
    fresh.migrate()
    body = mrkdwn(ask(Services(store=fresh, settings=Settings()), "status"))
    assert "not polled yet" in body and "0 items" in body


# --- failures never leak ---------------------------------------------------------------------------------


def test_a_store_failure_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "dir.db").mkdir()
    broken = Services(store=SQLiteStore(tmp_path / "dir.db"), settings=Settings())
    for text in ("search vision", "latest", "subscribe", "status", "summarize vision"):
        reply = ask(broken, text)
        assert reply.text.startswith("I can't reach the archive right now"), text


def test_an_unexpected_error_is_one_line(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(services.store, "latest", explode)
    reply = ask(services, "latest")
    assert "Something went wrong" in reply.text and "secret" not in reply.text
    monkeypatch.setattr(
        services.store, "subscribe", lambda *a, **k: (_ for _ in ()).throw(StoreError("locked"))
    )
    assert "nothing was changed" in ask(services, "subscribe").text


def test_every_reply_is_valid_block_kit_json(services: Services) -> None:
    for text in ("help", "search vision", "latest 20", "summarize privacy", "subscribe x", "status", "zzz"):
        reply = ask(services, text)
        json.dumps(reply.blocks)
        assert 1 <= len(reply.blocks) <= 50
        for block in reply.blocks:
            if block["type"] == "section":
                assert len(block["text"]["text"]) <= 3000
