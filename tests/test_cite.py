"""Citing in one click, on each store: `/mlresearch cite` and the Cite buttons (posts, unfurls, search
results and answers, paper cards) through the signed app with Slack's documented payloads, the App Home's
*Export .bib* uploaded to the person's DM the way slack_sdk's files_upload_v2 does it (FakeSlack plays
files.getUploadURLExternal, the upload URL and files.completeUploadExternal), and `mlresearch-bot cite` /
`export --bibtex` through the CLI's main(). Every .bib is read back with bibtexparser."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bibtexparser
import pytest
from msgspec.structs import replace

from bot import bibtex, blocks, cite, entities, home, unfurls, views
from bot.cli import main
from bot.models import Item
from bot.store import Store
from tests import slack_docs
from tests.fakes.archive import corpus_items
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import FakeSlack
from tests.test_slack_payloads import Slack, elements, no_listener_error, running

DOCUMENTED = slack_docs.parsed("block_actions")
TEAM, READER = DOCUMENTED["team"]["id"], DOCUMENTED["user"]["id"]  # the workspace and person of Slack's page


def cited() -> Item:
    """A real post with several authors (the one most replies here cite)."""
    return next(i for i in corpus_items() if len(i.authors) >= 3)


@pytest.fixture
def slack(corpus: Store, slack_api: FakeSlack) -> Iterator[Slack]:
    """The signed app (HTTP, as Slack reaches the Request URL) over the 72 real posts, on each store."""
    with running(corpus, slack_api, "http") as app:
        yield app


def code_in(reply_blocks: list[dict[str, Any]]) -> str:
    """The text of a reply's code blocks, as a person copies it (Slack shows &amp; as &)."""
    chunks = [b["text"]["text"] for b in reply_blocks if b["type"] == "section"
              and b["text"]["text"].startswith("```\n") and b["text"]["text"].endswith("\n```")]
    return html.unescape("\n".join(chunk[4:-4] for chunk in chunks))


def one_line(reply: dict[str, Any]) -> str:
    """A reply of one line: its one section's text (no code block, nothing else)."""
    assert [b["type"] for b in reply["blocks"]] == ["section"], reply["blocks"]
    text = str(reply["blocks"][0]["text"]["text"])
    assert "```" not in text and "Traceback" not in text and "\n" not in text
    return text


def entry_of(text: str) -> tuple[str, dict[str, str]]:
    library = bibtexparser.parse_string(text)
    assert library.failed_blocks == []
    (found,) = library.entries
    return found.key, {f.key: f.value for f in found.fields}


# --- /mlresearch cite -------------------------------------------------------------------------------------


def test_cite_of_a_link_answers_its_bibtex_entry_and_plain_reference_ephemerally(
    slack: Slack, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    item = cited()
    answer = slack.command(slack_docs.command(f"cite <{item.link}>", response_url=hooks.url("/c")))
    assert answer["response_type"] == "ephemeral"
    assert code_in(answer["blocks"]) == bibtex.entry(item)  # the entry exactly, in a code block
    key, fields = entry_of(code_in(answer["blocks"]))
    assert key == bibtex.key_for(item) and fields["author"] == " and ".join(item.authors)
    assert fields["year"] == str(item.published.year) and fields["url"] == item.link
    texts = [json.dumps(b, ensure_ascii=False) for b in answer["blocks"]]
    assert "BibTeX for" in texts[0] and item.title[:40] in texts[0]
    assert any(blocks.escape(bibtex.plain(item)) in t for t in texts)  # the same, for pasting
    assert all(b["text"].get("verbatim") is True for b in answer["blocks"] if b["type"] == "section")
    no_listener_error(logs)


def test_cite_of_words_cites_the_searchs_first_match_and_says_which(slack: Slack, hooks: Recorder) -> None:
    item = cited()
    words = " ".join(item.title.split()[:6])
    answer = slack.command(slack_docs.command(f"cite {words}", response_url=hooks.url("/c")))
    head = answer["blocks"][0]["elements"][0]["text"]
    assert head.startswith(f"The first match for “{words}”: ") and item.title[:40] in head
    assert code_in(answer["blocks"]) == bibtex.entry(item)


@pytest.mark.parametrize(("text", "said"), [
    ("cite <https://arxiv.org/abs/2401.00001>", "That link is to arxiv.org, not to a post I have archived"),
    ("cite https://machinelearning.apple.com/research/no-such-post", "That link is not in the archive"),
    ("cite zyxwvq qqqqqz", "No item in the archive matches"),
    ("cite 🙂 ?!", "Give a link to an item in the archive, or words of its title."),
    ("cite", "Usage: `/mlresearch cite &lt;link or title words&gt;`"),
])
def test_cite_of_another_site_of_nothing_or_of_no_words_is_one_line(
    slack: Slack, hooks: Recorder, text: str, said: str, logs: pytest.LogCaptureFixture
) -> None:
    answer = slack.command(slack_docs.command(text, response_url=hooks.url("/c")))
    assert said in one_line(answer)
    no_listener_error(logs)


def test_cite_in_an_empty_archive_is_one_line(store: Store, slack_api: FakeSlack, hooks: Recorder) -> None:
    with running(store, slack_api, "http") as app:
        answer = app.command(slack_docs.command("cite speech", response_url=hooks.url("/c")))
    assert "The archive is empty, so there is nothing to cite yet" in one_line(answer)


# --- the Cite buttons ---------------------------------------------------------------------------------


def test_posts_unfurls_search_results_and_paper_cards_carry_cite() -> None:
    item = cited()
    post = elements(blocks.item_message(item)["blocks"])
    unfurl = elements(unfurls.unfurl_blocks(item))
    result = elements([views.result_actions(item)])
    for found in (post, unfurl, result):
        _block, button = found[blocks.CITE_ACTION_ID]
        assert (button["text"]["text"], button["value"]) == ("Cite", item.id)
    card = entities.paper(item)
    assert card is not None
    actions = card.to_dict()["entity_payload"]["actions"]
    assert [a["text"] for a in actions["primary_actions"]] == ["Save", "Related"]  # a card shows two
    assert [(a["text"], a["action_id"], a["value"]) for a in actions["overflow_actions"]] == [
        ("Cite", blocks.CITE_ACTION_ID, item.id)]
    flexpane = entities.details(item, []).to_dict()["entity_payload"]["actions"]
    assert [a["action_id"] for a in flexpane["overflow_actions"]] == [blocks.CITE_ACTION_ID]


def test_cite_on_a_post_answers_the_clicker_privately_with_the_entry(
    slack: Slack, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    item = cited()
    block_id, button = elements(blocks.item_message(item)["blocks"])[blocks.CITE_ACTION_ID]
    slack.action(slack_docs.click(button, block_id=block_id, response_url=hooks.url("/cite")))
    slack.drain()
    reply = hooks.only("/cite")
    assert reply.json["response_type"] == "ephemeral" and reply.json["replace_original"] is False
    assert code_in(reply.json["blocks"]) == bibtex.entry(item)
    no_listener_error(logs)


def test_cite_on_an_item_whose_link_is_not_a_plain_url_cites_that_item(
    slack: Slack, corpus: Store, hooks: Recorder
) -> None:
    """The button's value is the item's id, looked up as it is (never read as a link or searched)."""
    odd = replace(corpus_items()[0], id="https://example.com/a|<!channel>", guid="odd-1",
                  link="https://example.com/a|<!channel>", title="A Paper Whose Link Breaks Brackets")
    corpus.add_items([odd])
    assert corpus.get_item(odd.id) is not None
    block_id, button = elements(blocks.item_message(odd)["blocks"])[blocks.CITE_ACTION_ID]
    slack.action(slack_docs.click(button, block_id=block_id, response_url=hooks.url("/odd")))
    slack.drain()
    reply = hooks.only("/odd")
    assert code_in(reply.json["blocks"]) == bibtex.entry(odd)
    assert "url" not in entry_of(code_in(reply.json["blocks"]))[1]  # not a plain URL: left out


def test_cite_on_a_written_answers_cited_item_answers_that_item(
    slack: Slack, hooks: Recorder, logs: pytest.LogCaptureFixture
) -> None:
    """A written answer's buttons are "Cite [1]", "Cite [2]", ... (action ids cite_item_1, cite_item_2: ids
    differ within a block)."""
    first, second = corpus_items()[5:7]
    from bot.answers import _cite_buttons

    buttons = _cite_buttons([second, first], [first, second])
    assert [(e["text"]["text"], e["action_id"]) for e in buttons["elements"]] == [
        ("Cite [2]", "cite_item_2"), ("Cite [1]", "cite_item_1")]
    slack.action(slack_docs.click(buttons["elements"][0], block_id="cited", response_url=hooks.url("/c2")))
    slack.drain()
    reply = hooks.only("/c2")
    assert code_in(reply.json["blocks"]) == bibtex.entry(second)
    no_listener_error(logs)


def test_cite_in_a_paper_cards_menu_answers_by_ephemeral_message_when_response_url_fails(
    slack: Slack, slack_api: FakeSlack, logs: pytest.LogCaptureFixture
) -> None:
    """Slack's documented Work Object click (an action on an unfurled card), on our card's Cite."""
    item = cited()
    card = entities.paper(item, unfurl_url=item.link)
    assert card is not None
    (button,) = card.to_dict()["entity_payload"]["actions"]["overflow_actions"]
    click = slack_docs.parsed("block_actions_work_object")
    click["container"].update(entity_url=item.link, external_ref={"id": item.id}, app_unfurl_url=item.link)
    click["actions"] = [{"type": "button", "text": {"type": "plain_text", "text": button["text"]},
                         "action_id": button["action_id"], "block_id": "TPdc", "value": button["value"],
                         "action_ts": "1748809126.803329"}]
    click["response_url"] = "http://127.0.0.1:9/unused"
    slack.action(click)
    slack.drain()
    (reply,) = slack_api.ephemerals
    assert (reply["channel"], reply["user"]) == (click["channel"]["id"], click["user"]["id"])
    assert code_in(reply["blocks"]) == bibtex.entry(item)
    lines = [r.getMessage() for r in logs.records]  # slack_sdk logs the dead response_url as an error
    assert not [line for line in lines if "listener_error" in line or "Traceback" in line]


# --- the reading list as a .bib file ------------------------------------------------------------------------


def export_click(slack: Slack, corpus: Store) -> None:
    """Open the documented person's App Home as it is now and click its *Export .bib*."""
    view = {**home.home_view(corpus, TEAM, READER), "id": "V0HOME"}
    block_id, export = elements(view["blocks"])[home.EXPORT_ACTION_ID]
    assert export["text"]["text"] == "Export .bib"
    slack.action(slack_docs.home_click(export, view, block_id=block_id))
    slack.drain()


def test_export_sends_the_reading_list_as_a_bib_file_in_a_dm(
    slack: Slack, slack_api: FakeSlack, corpus: Store, logs: pytest.LogCaptureFixture
) -> None:
    saved = [i for i in corpus_items() if i.authors][:3] + [corpus_items()[0]]
    for item in saved:
        assert corpus.save_item(TEAM, READER, item.id) == "saved"
    corpus.save_item(TEAM, "U0SOMEONE", corpus_items()[9].id)  # someone else's list stays theirs
    export_click(slack, corpus)
    methods = [c.method for c in slack_api.calls if c.method != "auth.test"]
    assert methods == ["conversations.open", "files.getUploadURLExternal", "upload",
                       "files.completeUploadExternal"]
    dm = slack_api.calls_to("conversations.open")[0].answer["channel"]["id"]  # type: ignore[index]
    (shared,) = slack_api.uploads(dm)
    data = shared["data"].decode("utf-8")
    assert data == bibtex.bibliography(saved)
    assert shared["filename"].startswith("reading-list-") and shared["filename"].endswith(".bib")
    assert "4 entries" in shared["initial_comment"]
    (asked,) = slack_api.calls_to("files.getUploadURLExternal")
    assert int(asked.params["length"]) == len(shared["data"])  # as slack_sdk measured it: bytes
    library = bibtexparser.parse_string(data)
    assert library.failed_blocks == [] and len(library.entries) == 4
    assert sorted(e["url"] for e in library.entries) == sorted(i.link for i in saved)
    assert len({e.key for e in library.entries}) == 4
    (message,) = [m for m in slack_api.posts(dm) if m.get("files")]
    assert [f["id"] for f in message["files"]] == [shared["id"]]
    no_listener_error(logs)


def test_export_of_an_empty_reading_list_is_one_line_and_no_file(
    slack: Slack, slack_api: FakeSlack, corpus: Store
) -> None:
    corpus.save_item(TEAM, READER, corpus_items()[0].id)
    view = {**home.home_view(corpus, TEAM, READER), "id": "V0HOME"}  # the Home showed the button, then
    corpus.unsave_item(TEAM, READER, corpus_items()[0].id)  # the list was emptied elsewhere
    block_id, export = elements(view["blocks"])[home.EXPORT_ACTION_ID]
    slack.action(slack_docs.home_click(export, view, block_id=block_id))
    slack.drain()
    assert [c for c in slack_api.calls if c.method.startswith("files.") or c.method == "upload"] == []
    (line,) = [m for m in slack_api.posts() if m["text"]]
    assert line["text"] == cite.EMPTY
    assert home.EXPORT_ACTION_ID not in elements(home.home_view(corpus, TEAM, READER)["blocks"])


def test_export_without_the_files_write_scope_says_to_reinstall(
    slack: Slack, slack_api: FakeSlack, corpus: Store, logs: pytest.LogCaptureFixture
) -> None:
    corpus.save_item(TEAM, READER, corpus_items()[0].id)
    slack_api.fault("files.getUploadURLExternal", error="missing_scope", needed="files:write",
                    provided="commands,chat:write")
    export_click(slack, corpus)
    assert slack_api.calls_to("files.completeUploadExternal") == []
    (line,) = [m for m in slack_api.posts() if m["text"]]
    assert line["text"] == cite.NO_SCOPE
    assert any("event=bib_export_failed stage=upload" in r.getMessage() and "missing_scope" in r.getMessage()
               for r in logs.records)
    no_listener_error(logs)


# --- the command line ------------------------------------------------------------------------------------


@pytest.fixture
def cli(corpus: Store, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Store:
    """The CLI pointed at the corpus store (DATABASE_URL, run from an empty folder: no stray .env)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", database_url)
    return corpus


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_cli_cite_prints_the_entry_and_says_which_item_words_picked(
    cli: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    item = cited()
    assert run(capsys, "cite", item.link) == (0, bibtex.entry(item) + "\n", "")
    words = item.title.split()[:6]
    code, out, err = run(capsys, "cite", *words)
    assert (code, out) == (0, bibtex.entry(item) + "\n")
    assert err == f"mlresearch-bot: cited the first match for {' '.join(words)!r}: {item.title}\n"


@pytest.mark.parametrize(("argv", "code", "said"), [
    (["cite", "https://arxiv.org/abs/2401.00001"], 0, "That link is to arxiv.org"),
    (["cite", "https://machinelearning.apple.com/research/no-such-post"], 0,
     "That link is not in the archive"),
    (["cite", "zyxwvq", "qqqqqz"], 0, "No item in the archive matches"),
    (["cite", "?!"], 2, "Give a link to an item in the archive"),
    (["export"], 2, "export needs a format: --bibtex"),
    (["export", "--bibtex", "--since", "last week"], 2, "--since must be a date like 2026-01-31"),
    (["export", "--bibtex", "--saved-by", "alice"], 2, "--saved-by takes a Slack user ID"),
    (["export", "--bibtex", "--saved-by", "U0NOBODY"], 0, "U0NOBODY has saved nothing"),
    (["export", "--bibtex", "--since", "2999-01-01"], 0, "nothing the archive holds was published on or "
                                                        "after 2999-01-01"),
])
def test_cli_bad_input_and_nothing_found_are_one_line_on_stderr_and_no_bibtex(
    cli: Store, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, said: str
) -> None:
    found, out, err = run(capsys, *argv)
    assert (found, out) == (code, "")
    assert err.count("\n") == 1 and err.startswith("mlresearch-bot: ") and said in err


def test_cli_export_writes_every_archived_item_once_with_unique_keys(
    cli: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "export", "--bibtex")
    assert (code, err) == (0, "")
    library = bibtexparser.parse_string(out)
    assert library.failed_blocks == [] and len(library.entries) == cli.count_items() == 72
    assert len({e.key for e in library.entries}) == 72
    assert out == bibtex.bibliography(corpus_items())
    code, out, err = run(capsys, "export", "--bibtex", "--since", "2026-01-01")
    recent = [i for i in corpus_items() if i.published.year >= 2026]
    assert (code, err) == (0, "") and 0 < len(recent) < 72
    assert out == bibtex.bibliography(recent)


def test_cli_export_of_a_persons_reading_list_merges_their_workspaces(
    cli: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    items = corpus_items()
    for item in items[:3]:
        cli.save_item("T0ONE", "U0ALICE", item.id)
    for item in items[2:5]:  # the third saved in both workspaces: exported once
        cli.save_item("T0TWO", "U0ALICE", item.id)
    cli.save_item("T0ONE", "U0BOB", items[10].id)
    code, out, err = run(capsys, "export", "--bibtex", "--saved-by", "U0ALICE")
    assert code == 0 and out == bibtex.bibliography(items[:5])
    assert err == ("mlresearch-bot: U0ALICE's reading lists in 2 workspaces (T0ONE, T0TWO) are merged: each "
                   "item once\n")
    code, out, err = run(capsys, "export", "--bibtex", "--saved-by", "U0BOB")
    assert (code, out, err) == (0, bibtex.bibliography(items[10:11]), "")


def test_cli_cite_and_export_of_an_empty_archive_are_one_line(
    store: Store, database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATABASE_URL", database_url)
    for argv in (["cite", "speech"], ["export", "--bibtex"]):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (0, "") and err.startswith("mlresearch-bot: the archive is empty")
