"""Code, paper and venue beside every item (issue 55, point 3): the line under the title in posts, search
results, unfurls, answers, the shell and the CLI (links only to plain http(s) addresses, the venue escaped),
and the `venue:` and `has:` filters, the same results on both stores, by words and by meaning."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from bot import answers, blocks, views
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.errors import SearchError
from bot.models import Item
from bot.search.index import SearchIndex
from bot.search.query import search, split_filters
from bot.shell import render
from bot.store import Store
from bot.unfurls import unfurl_blocks
from tests.fakes.archive import corpus_index, corpus_items

PAPER = "https://arxiv.org/abs/2605.01234"
CODE = "https://github.com/apple/ml-vsas-bench"
ITEMS = corpus_items()
A, B, C, D = ITEMS[2], ITEMS[3], ITEMS[4], ITEMS[9]  # VSAS-Bench, EpiCache, BalCapRL, image compression
FACTS = {
    A.id: ("ICML 2025", PAPER, CODE),
    B.id: ("NeurIPS 2025 workshop", "https://openreview.net/forum?id=AbCd1234", None),
    C.id: ("NeurIPS 2024", None, "https://github.com/apple/ml-balcaprl"),
    D.id: ("Interspeech 2025", None, None),
}


def with_facts(item: Item, venue: str | None = "ICML 2025", paper: str | None = PAPER,
               code: str | None = CODE) -> Item:
    return replace(item, venue=venue, paper_url=paper, code_url=code)


@pytest.fixture
def facts(corpus: Store) -> Store:
    for item_id, (venue, paper, code) in FACTS.items():
        corpus.record_page(item_id, venue=venue, paper_url=paper, code_url=code)
    return corpus


# --- the line under the title ------------------------------------------------------------------------------

LINE = f"<{PAPER}|Paper> · <{CODE}|Code> · ICML 2025"


def test_a_post_says_paper_code_and_venue_under_its_title() -> None:
    message = blocks.item_message(with_facts(A))
    assert message["blocks"][0]["text"]["text"] == f"*{blocks.title_link(A)}*\n{LINE}"
    plain = blocks.item_message(A)["blocks"][0]["text"]["text"]
    assert plain == f"*{blocks.title_link(A)}*", "nothing known: no line"


def test_each_part_only_when_known() -> None:
    assert blocks.links_line(with_facts(A, paper=None, code=None)) == "ICML 2025"
    assert blocks.links_line(with_facts(A, venue=None, paper=None)) == f"<{CODE}|Code>"
    assert blocks.links_line(with_facts(A, venue="  ")) == f"<{PAPER}|Paper> · <{CODE}|Code>"


def test_the_line_is_inert() -> None:
    """A venue is text, escaped; a link that is not a plain http(s) address is never put in <…|…>."""
    hostile = with_facts(A, venue="<!channel> & <https://evil.example|win>",
                         paper="javascript:alert(1)", code="https://github.com/apple/x|<!here>")
    line = blocks.links_line(hostile)
    assert line == "&lt;!channel&gt; &amp; &lt;https://evil.example|win&gt;"
    long = blocks.links_line(with_facts(A, venue="V" * 5000, paper=None, code=None))
    assert len(long) <= blocks.VENUE_CHARS


def test_search_results_unfurls_and_the_app_home_show_the_line() -> None:
    item = with_facts(A)
    title = f"*{blocks.title_link(item)}*"
    assert views.item_blocks(item, "text")[0]["text"]["text"].startswith(f"{title}\n{LINE}")
    assert LINE in unfurl_blocks(item)[0]["text"]["text"]
    assert "Paper (https://arxiv.org/abs/2605.01234) · Code (https://github.com/apple/ml-vsas-bench) · " \
        "ICML 2025" in render(blocks.item_message(item)["blocks"]), "the shell shows it too"


def test_a_written_answer_lists_each_cited_items_line() -> None:
    listed = answers._cited_list([with_facts(A), B], [with_facts(A), B])
    first, second, third = listed.split("\n")
    assert first.startswith("[1] ") and second.strip() == LINE and third.startswith("[2] ")


def test_a_search_reply_in_slack_shows_the_line(facts: Store) -> None:
    services = Services(facts, Settings(), index=SearchIndex(facts))
    reply = handle(Invocation("search venue:icml", "T1", "C1", "U1"), services)
    assert LINE in reply.blocks[1]["text"]["text"] or any(LINE in str(b) for b in reply.blocks)


# --- venue: and has: ---------------------------------------------------------------------------------------


def newest_first(*items: Item) -> list[str]:
    return [i.id for i in sorted(items, key=lambda i: i.published, reverse=True)]


@pytest.mark.parametrize("meaning", [False, True])
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("venue:icml", [A]),
        ("venue:ICML", [A]),
        ("venue:neurips", [B, C]),
        ("venue:nips", [B, C]),
        ('venue:"neurips 2025"', [B]),
        ("venue:“NeurIPS 2024”", [C]),
        ("venue:workshop", [B]),
        ("venue:cvpr", []),  # an update's title says CVPR, and an ICML 2025 post's title ICML: no venue does
        ("has:code", [A, C]),
        ("has:paper", [A, B]),
        ("has:venue", [A, B, C, D]),
        ("has:code venue:neurips", [C]),
        ("has:code has:paper", [A]),
        ("venue:interspeech since:2026-05-01", [D]),
        ("venue:interspeech until:2026-05-01", []),
    ],
)
def test_filters_alone_list_the_newest_items_they_select(facts: Store, meaning: bool, query: str,
                                                         expected: list[Item]) -> None:
    index = corpus_index(facts, meaning)
    found = search(index, query, limit=10)
    assert [h.item.id for h in found.hits] == newest_first(*expected)


@pytest.mark.parametrize("meaning", [False, True])
def test_filters_with_words_keep_only_the_items_they_select(facts: Store, meaning: bool) -> None:
    index = corpus_index(facts, meaning)
    words = search(index, "image captioning", limit=10).hits
    assert C.id in [h.item.id for h in words] and len(words) > 1
    kept = search(index, "image captioning has:code", limit=10).hits
    assert [h.item.id for h in kept] == [C.id]
    assert search(index, "image captioning venue:icml", limit=10).hits == []
    streaming = search(index, "streaming assistant venue:icml has:code", limit=10).hits
    assert [h.item.id for h in streaming] == [A.id]


def test_bad_filters_are_one_line(facts: Store) -> None:
    index = SearchIndex(facts)
    for query, said in (("has:nothing", "has: must be code, paper or venue"),
                        ("venue:", "venue: needs a name"),
                        ("venue:a venue:b venue:c venue:d", "at most 3 venues")):
        with pytest.raises(SearchError) as caught:
            search(index, query, limit=5)
        assert said in str(caught.value) and "\n" not in str(caught.value)
    services = Services(facts, Settings(), index=index)
    reply = handle(Invocation("search has:nothing", "T1", "C1", "U1"), services)
    assert "has: must be code, paper or venue" in reply.text


def test_the_filters_are_said_apart_from_the_words() -> None:
    assert split_filters('diffusion venue:"neurips 2025" has:code') == ("diffusion",
                                                                         'venue:"neurips 2025" has:code')


def test_a_filter_that_leaves_nothing_says_what_the_words_find(facts: Store) -> None:
    services = Services(facts, Settings(), index=SearchIndex(facts))
    reply = handle(Invocation("search image captioning venue:cvpr", "T1", "C1", "U1"), services)
    assert "Without venue:cvpr there" in reply.text


def test_cite_and_export_name_the_venue_the_page_gave(facts: Store, database_url: str,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """/mlresearch cite and `export --bibtex`: `@inproceedings` with the venue as booktitle for an item whose
    page named one (bot.bibtex, given `item.venue`), `@misc` for one without."""
    from bot import cli

    services = Services(facts, Settings(), index=SearchIndex(facts))
    reply = handle(Invocation(f"cite {A.link}", "T1", "C1", "U1"), services)
    shown = " ".join(str(b) for b in reply.blocks)
    assert "@inproceedings" in shown and "booktitle = {ICML 2025}" in shown
    plain = handle(Invocation(f"cite {ITEMS[5].link}", "T1", "C1", "U1"), services)
    assert "@misc" in " ".join(str(b) for b in plain.blocks)
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert cli.main(["export", "--bibtex", "--since", "2026-05-11"]) == 0
    exported = capsys.readouterr().out
    assert "booktitle = {NeurIPS 2024}" in exported and "booktitle = {ICML 2025}" in exported
    assert cli.main(["cite", A.link]) == 0
    assert "booktitle = {ICML 2025}" in capsys.readouterr().out
