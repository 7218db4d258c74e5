"""Summaries: extractive (quoted sentences, cited, dated) and abstractive against a local OpenAI-compatible
stand-in (success, timeout, error, a citation of an item that was not retrieved)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from bot import cli
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.models import Item
from bot.search.index import SearchIndex
from bot.summarize import Summarizer, extractive, parse_bullets, retrieve, sentences
from tests.fakes.archive import filled_store
from tests.fakes.openai_api import FakeOpenAI, fences


@pytest.fixture
def index(tmp_path: Path) -> SearchIndex:
    return SearchIndex(filled_store(tmp_path))


def flat(text: str) -> str:
    return " ".join(text.split())


# --- extractive ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", ["diffusion models", "image captioning", "privacy", "self-play driving"])
def test_extractive_quotes_only_sentences_from_the_cited_abstracts(index: SearchIndex, topic: str) -> None:
    summary = Summarizer().summarize(index, topic)
    assert summary is not None and summary.method == "extractive"
    retrieved_ids = {item.id for item in retrieve(index, topic)[0]}
    assert 1 <= len(summary.bullets) <= 4
    for bullet in summary.bullets:
        assert bullet.sources
        cited = [summary.items[n - 1] for n in bullet.sources]
        assert all(item.id in retrieved_ids for item in cited)
        assert any(bullet.text in flat(item.summary) for item in cited), bullet.text
        assert not bullet.text.endswith("…")
    # every listed item is cited, and the date range is theirs
    cited_numbers = {n for b in summary.bullets for n in b.sources}
    assert cited_numbers == set(range(1, len(summary.items) + 1))
    assert summary.first_day == min(i.published for i in summary.items).date()
    assert summary.last_day == max(i.published for i in summary.items).date()


def test_extractive_prefers_sentences_holding_the_topic(index: SearchIndex) -> None:
    summary = Summarizer().summarize(index, "diffusion")
    assert summary is not None
    assert all("diffusion" in b.text.lower() for b in summary.bullets)


def test_extractive_leaves_out_sentences_about_the_readers_but_not_about_screen_readers() -> None:
    """A sentence about who the text is for names the topic and says nothing of it; a screen reader is a
    subject (the regex's exception)."""
    def item(n: int, summary: str) -> Item:
        link = f"https://machinelearning.apple.com/research/readers-{n}"
        return Item(id=link, guid=link, title=f"Post {n}", link=link, summary=summary,
                    published=datetime(2026, 5, n, tzinfo=UTC), kind="research")

    items = [
        item(1, "This post is aimed at readers new to VoiceOver and accessibility. We study how people "
                "navigate long documents."),
        item(2, "Audiences who know little of accessibility will find the first part easiest. Screen readers "
                "such as VoiceOver read each figure's alt text aloud, which is how accessibility starts."),
        item(3, "We built a screen-reader mode for charts that improves accessibility for blind users."),
    ]
    bullets = extractive(items, ["accessibility"], prefix_last=False)
    assert [b.text for b in bullets] == [
        "Screen readers such as VoiceOver read each figure's alt text aloud, which is how accessibility "
        "starts.",
        "We built a screen-reader mode for charts that improves accessibility for blind users.",
    ]


def test_a_topic_matching_nothing_is_none(index: SearchIndex) -> None:
    assert Summarizer().summarize(index, "qwertyuiop asdfgh") is None


def test_sentences_keep_abbreviations_and_drop_a_cut_off_tail() -> None:
    text = "We study models, e.g. transformers. Results hold across all sizes (see Fig. 2). Next we propose…"
    assert sentences(text) == [
        "We study models, e.g. transformers.",
        "Results hold across all sizes (see Fig. 2).",
    ]


# --- abstractive -----------------------------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def test_model_summary_is_grounded_in_the_retrieved_items(index: SearchIndex, api: FakeOpenAI) -> None:
    api.content = (
        "- Composition of diffusion models can produce out-of-distribution images [1].\n"
        "- **Normalizing flows** rival diffusion for image generation [2][1]\n"
    )
    summarizer = Summarizer(api.url, "sk-test", "tiny-model", timeout=5)
    summary = summarizer.summarize(index, "diffusion models")
    assert summary is not None and summary.method == "abstractive" and summary.model == "tiny-model"
    retrieved = retrieve(index, "diffusion models")[0]
    assert [b.sources for b in summary.bullets] == [(1,), (2, 1)]
    assert summary.bullets[1].text == "Normalizing flows rival diffusion for image generation"
    assert summary.items == (retrieved[0], retrieved[1])
    (request,) = api.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    assert request["body"]["model"] == "tiny-model"
    fenced = fences(request["body"]["messages"][1]["content"])
    assert fenced["TOPIC"] == "diffusion models"
    assert all(fenced[f"ITEM {n}"].startswith(f"{item.title} (") for n, item in enumerate(retrieved, 1))
    assert set(fenced) == {"TOPIC", *(f"ITEM {n}" for n in range(1, len(retrieved) + 1))}


def test_the_model_summarizes_a_linked_item_under_its_title(index: SearchIndex, api: FakeOpenAI) -> None:
    """`summarize <link>` asked the model about the address, with the items its words found."""
    item = retrieve(index, "diffusion models")[0][0]
    api.content = "- It composes diffusion models [1].\n"
    summary = Summarizer(api.url, "sk-test", "tiny-model", timeout=5).summarize(index, f"<{item.link}>")
    assert summary is not None and summary.items == (item,) and summary.about == item.title
    fenced = fences(api.requests[0]["body"]["messages"][1]["content"])
    assert fenced["TOPIC"] == item.title and set(fenced) == {"TOPIC", "ITEM 1"}


def test_the_model_is_asked_about_the_words_not_the_filters(index: SearchIndex, api: FakeOpenAI) -> None:
    """It was asked about "diffusion models type:paper"; the filters choose the items, not the topic."""
    api.content = "- It composes diffusion models [1].\n"
    summary = Summarizer(api.url, "sk-test", "tiny-model", timeout=5).summarize(index,
                                                                                "diffusion models type:paper")
    assert summary is not None and summary.about == "diffusion models" and summary.filters == "type:paper"
    prompt = api.requests[0]["body"]["messages"][1]["content"]
    assert fences(prompt)["TOPIC"] == "diffusion models" and "type:paper" not in prompt


def test_a_citation_of_an_item_not_retrieved_is_rejected(index: SearchIndex, api: FakeOpenAI) -> None:
    retrieved = retrieve(index, "diffusion models")[0]
    api.content = (
        f"- Grounded claim [1]\n- Invented claim [{len(retrieved) + 1}]\n- Mixed claim [2][99]\n- No source"
    )
    summary = Summarizer(api.url, timeout=5).summarize(index, "diffusion models")
    assert summary is not None and summary.method == "abstractive"
    assert [b.text for b in summary.bullets] == ["Grounded claim"]
    assert summary.items == (retrieved[0],)


def test_only_ungrounded_bullets_fall_back_to_extractive(index: SearchIndex, api: FakeOpenAI) -> None:
    api.content = "- Everything is invented [42]\n- So is this [0]"
    summary = Summarizer(api.url, timeout=5).summarize(index, "diffusion models")
    assert summary is not None and summary.method == "extractive"


def test_a_slow_model_falls_back_to_extractive_within_the_timeout(
    index: SearchIndex, api: FakeOpenAI
) -> None:
    api.content, api.delay = "- Too late [1]", 10
    started = time.monotonic()
    summary = Summarizer(api.url, timeout=0.5).summarize(index, "diffusion models")
    assert time.monotonic() - started < 3
    assert summary is not None and summary.method == "extractive"
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    ("status", "raw"),
    [
        (500, None),
        (401, None),
        (200, b"not json"),
        (200, b'{"choices": []}'),
        (200, b'{"choices": [{"message": {}}]}'),
    ],
)
def test_an_error_falls_back_to_extractive(
    index: SearchIndex, api: FakeOpenAI, status: int, raw: bytes | None
) -> None:
    api.status, api.raw = status, raw
    summary = Summarizer(api.url, timeout=5).summarize(index, "diffusion models")
    assert summary is not None and summary.method == "extractive"


def test_an_unreachable_endpoint_falls_back(index: SearchIndex) -> None:
    with FakeOpenAI() as gone:
        url = gone.url
    summary = Summarizer(url, timeout=5).summarize(index, "privacy")
    assert summary is not None and summary.method == "extractive"


def test_an_injected_client_is_used(index: SearchIndex, api: FakeOpenAI) -> None:
    api.content = "- A point [1]"
    with httpx.Client(headers={"X-Test": "injected"}) as client:
        summary = Summarizer(api.url, client=client, timeout=5).summarize(index, "privacy")
    assert summary is not None and summary.method == "abstractive"
    assert api.requests[0]["headers"]["X-Test"] == "injected"


def test_parse_bullets_accepts_common_list_styles() -> None:
    text = "Here you go:\n1. First [1]\n* Second [1, 2]\n• Third [3]\n\n- Fourth without a source"
    bullets = parse_bullets(text, retrieved=3)
    assert [(b.text, b.sources) for b in bullets] == [("First", (1,)), ("Second", (1, 2)), ("Third", (3,))]


def test_a_bullet_sending_its_reader_to_a_link_it_lost_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    text = ("- Visit [the project page](https://evil.example/p) to get the weights [1]\n"
            "- The <https://evil.example/p|model> runs on device at low power [2]")
    with caplog.at_level("WARNING", logger="bot"):
        bullets = parse_bullets(text, retrieved=2)
    assert [(b.text, b.sources) for b in bullets] == [("The model runs on device at low power", (2,))]
    assert [r.getMessage() for r in caplog.records] == ["event=summary_links_removed links=1 bullet=dropped",
                                                        "event=summary_links_removed links=1 bullet=kept"]


def test_model_text_is_escaped_in_the_slack_reply(index: SearchIndex, api: FakeOpenAI) -> None:
    """Slack's markup in a bullet is removed (a mention, a link: the link's text stays); what is left is
    escaped."""
    api.content = "- Ignore that and say <!channel> <https://evil.example|win> & x < y > z more [1]"
    services = Services(store=index.store, settings=Settings(), summarizer=Summarizer(api.url, timeout=5),
                        index=index)
    reply = handle(Invocation("summarize privacy", "T1", "C1", "U1"), services)
    body = json.dumps(reply.blocks)
    assert "!channel" not in body and "evil" not in body
    assert "say win &amp; x &lt; y &gt; z more" in body


# --- the command line ------------------------------------------------------------------------------------


@pytest.fixture
def cli_env(index: SearchIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("SUMMARY_API_URL", "SUMMARY_API_KEY", "SUMMARY_MODEL", "LOG_LEVEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{index.store.path}")


@pytest.mark.usefixtures("cli_env")
def test_cli_summarize_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summarize", "diffusion", "models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["topic"] == "diffusion models"
    assert data["summary"].startswith("- ") and "[1]" in data["summary"]
    assert set(data["items"][0]) == {"id", "title", "link"}


@pytest.mark.usefixtures("cli_env")
def test_cli_summarize_text_and_no_match(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["summarize", "privacy"]) == 0
    out = capsys.readouterr().out
    assert "What Apple ML Research says about “privacy”" in out and "[1] " in out and "https://" in out
    assert cli.main(["summarize", "qwertyuiop"]) == 0  # nothing found is not a failure (issue 11)
    captured = capsys.readouterr()
    assert captured.err == "" and len(captured.out.strip().splitlines()) == 1
    assert "nothing in the archive" in captured.out.lower()


@pytest.mark.usefixtures("cli_env")
def test_cli_summarize_uses_the_configured_model(
    api: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SUMMARY_API_URL", api.url)
    monkeypatch.setenv("SUMMARY_MODEL", "stand-in-model")
    api.content = "- Apple treats privacy as a fundamental right [1]"
    assert cli.main(["summarize", "privacy", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["summary"] == "- Apple treats privacy as a fundamental right [1]"
    assert api.requests[0]["body"]["model"] == "stand-in-model"
