"""The research index reader in linear time: a 20 MiB page built to make backtracking regexes (and Python
3.11's html.parser at end of input) take quadratic time is read in seconds (issue 11)."""

from __future__ import annotations

import time

from bot import research_index as ri
from tests.fakes.research_index import INDEX_FIXTURE, index_page, post

HOSTILE_BODIES = (
    "<!--" * 25_000,  # comments that never close
    "<p" * 50_000,  # tags that never close
    "<script" * 14_000,  # a script that never ends
    "[" * 100_000 + "](",  # a markdown link that never closes
    "![" * 50_000,
    "-\n" * 50_000 + "x",  # a rule that never ends
    "<p>ok</p>" + "<![" * 30_000,  # marked sections html.parser fails on
)


def hostile_page() -> bytes:
    posts = [
        post(f"hostile-{i}", "Hostile", HOSTILE_BODIES[i % len(HOSTILE_BODIES)], "2026-01-01",
             authors_ordered="A" + " " * 50_000 + "B")
        for i in range(75)
    ]
    prefix = "<script " * 250_000  # unclosed script tags before the real one
    page = prefix.encode() + index_page(posts)
    assert 18 * 1024 * 1024 < len(page) <= ri.MAX_INDEX_BYTES
    return page


def test_a_20_mib_hostile_page_is_read_in_seconds() -> None:
    page = hostile_page()
    started = time.monotonic()
    index = ri.parse(page)
    assert time.monotonic() - started < 20  # the regex reader needs hours
    assert index.posts == 75 and len(index.items) == 75
    assert all(len(item.summary) <= ri.MAX_SUMMARY_CHARS for item in index.items)


def test_markup_in_an_abstract_is_read_by_the_html_parser() -> None:
    body = (
        "<section><p>First &amp; <em>best</em>.</p><!-- note --><script>alert(1)</script>"
        "<style>p {}</style><p>Second <![ stray</p></section><p>a < b"
    )
    (item,) = ri.parse(index_page([post("p", "T <b>bold</b>", body, "2026-01-01")])).items
    assert item.title == "T bold"
    assert item.summary == "First & best.\n\nSecond <![ stray\n\na < b"


def test_the_fixture_reads_as_before() -> None:
    index = ri.parse(INDEX_FIXTURE.read_bytes())
    assert index.posts == 14 and len(index.items) == 14
    assert all("<" not in item.summary and "&amp;" not in item.summary for item in index.items)


def test_a_next_data_script_after_other_scripts_is_found() -> None:
    page = b'<script src="/a.js"></script><script id="other">x</script>' + index_page(
        [post("p", "T", "b", "2026-01-01")]
    )
    assert [i.guid for i in ri.parse(page).items] == ["p"]
    assert ri.next_data('<script data-x="1" id=__NEXT_DATA__ >{"a": 1}</SCRIPT>') == '{"a": 1}'
    assert ri.next_data("<script id='__NEXT_DATA__'>{}") is None
    assert ri.next_data('<script id="__NEXT_DATA__x">{}</script>') is None
