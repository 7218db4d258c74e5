"""The reader of an item's own page against stored copies of the site's real pages (issue 55, point 3):
tests/data/item_pages/stored/, each file's header saying whose rendering it is and where it was found, put
back into HTML by tests/fakes/stored_pages.py (links and text in page order; the site's element names are not
known, and the reader uses none). What a copy shows is read; what it does not show is not made up; nothing
after "Related readings and updates." (other posts' teasers) counts."""

from __future__ import annotations

import pytest

from bot.item_pages import PageFacts, parse
from bot.paper_facts import Anchor, pick_code, pick_paper, venue_tag
from tests.fakes.stored_pages import StoredCopy, as_html, load, part

SITE = "https://machinelearning.apple.com"


def facts(copy: StoredCopy) -> PageFacts:
    return parse(as_html(copy), copy.url)


def test_a_papers_header_gives_its_publication_and_its_conference_tag() -> None:
    """/research/illusion-of-thinking: "View publication" (arXiv) and "conference NeurIPS" (no year); no code
    link on this page; the teasers' tags (NeurIPS again, research areas) after the heading are not read."""
    assert facts(load("illusion-of-thinking.md")) == PageFacts(
        paper_url="https://arxiv.org/abs/2506.06941", venue="NeurIPS")


def test_view_publication_alone_is_the_paper() -> None:
    assert facts(load("rayrope-projective-ray.md")) == PageFacts(paper_url="https://arxiv.org/abs/2601.15275")


def test_the_first_line_of_the_abstract_names_the_workshop_and_its_year() -> None:
    """/research/cram-less, up to its teasers (this rendering dropped their heading, which the page has):
    "accepted at the Workshop on … at ICLR 2026"; the rendering kept no link of the post: no paper, no
    code."""
    own = part(load("cram-less.md"), stop="Trade-offs in Data Memorization")
    assert facts(own) == PageFacts(venue="ICLR 2026 workshop")


@pytest.mark.parametrize(
    ("name", "start", "stop", "venue"),
    [
        # the tag names the conference, the sentence the workshop and its year; the post is dated February
        # 13, 2023: a post's date is not its venue's year
        ("cram-less.md", "Improving Human Annotation", None, "EMNLP 2022 workshop"),
        ("cram-less.md", "Trade-offs in Data Memorization", "Improving Human Annotation", "COLT"),
        # a workshop's tag, "Workshop at ICLR" (event=ICLR%20Workshop); its sentence puts the year before ICLR
        ("ladir.md", "Thinking into the Future", "Enhancing Paragraph Generation", "ICLR 2026 workshop"),
        ("ladir.md", "Thinking into the Future", "This paper was accepted", "ICLR workshop"),
    ],
)
def test_a_posts_tags_and_first_line_as_its_teaser_shows_them(
    name: str, start: str, stop: str | None, venue: str
) -> None:
    """A teaser carries its post's date, tags and first line as the post's own header does: read as a page of
    its own (the blocks from `start` to before `stop`), each gives its post's venue."""
    copy = part(load(name), start, stop)
    assert facts(copy) == PageFacts(venue=venue)


@pytest.mark.parametrize(
    "name",
    [
        # the text of headers that do say a conference, a publication and source code: a text copy keeps no
        # link, so neither paper nor code is guessed from the words, and "conference ICML" is no sentence
        "annotator-safety-policy-interpretability.txt",
        "videoflextok.txt",
        # the abstract does not write out the code's address (the paper's does); ICML is another post's
        "normalizing-flows.txt",
        # the site's navigation, a highlight's header, teasers (one tagged "conferenceICML"), the footer
        "core-ml-on-device-llama.md",
        # a post that kept none of its links in this rendering
        "ladir.md",
    ],
)
def test_what_a_copy_does_not_show_is_not_made_up(name: str) -> None:
    copy = load(name)
    if name == "ladir.md":
        copy = part(copy, stop="Thinking into the Future")  # its teasers, without their heading, are not its
    assert facts(copy) == PageFacts()


def test_a_highlight_gives_its_code_but_not_the_venues_and_papers_it_tells_of() -> None:
    """/research/fast-vision-language-models, a highlight: its update tells that another paper was "accepted
    to Transactions on Machine Learning Research" (a JMLR listing page linked), its text that this work's
    paper was accepted to CVPR 2025, and links its code twice (the repository, and a folder of it). Only the
    code is the highlight's own to say: a sentence read as the venue would have said TMLR."""
    copy = load("fast-vision-language-models.md")
    assert facts(copy) == PageFacts(code_url="https://github.com/apple/ml-fastvlm")
    as_paper = StoredCopy(copy.name, copy.header,
                          copy.text.replace("content type highlight", "content type paper"))
    assert facts(as_paper).venue == "TMLR", "why: read as a paper's, its first sentence names another's venue"


@pytest.mark.parametrize(
    ("href", "words", "venue"),
    [
        # as the stored copies show them (illusion-of-thinking.md, cram-less.md, ladir.md,
        # core-ml-on-device-llama.md)
        ("/research/?event=NeurIPS", "conference NeurIPS", "NeurIPS"),
        ("/highlights?event=NeurIPS", "conference NeurIPS", "NeurIPS"),
        (f"{SITE}/research/?event=COLT", "conference COLT", "COLT"),
        (f"{SITE}/research/?event=EMNLP", "conference EMNLP", "EMNLP"),
        (f"{SITE}/research/?event=ICLR%20Workshop", "Workshop at ICLR", "ICLR workshop"),
        (f"{SITE}/research/?event=ICML", "conferenceICML", "ICML"),
        (f"{SITE}/research/?event=ACM%20STOC", "conference ACM STOC", "STOC"),
        # the words as annotator-safety-policy-interpretability.txt shows them (its link not kept: the event
        # here is assumed to be the name shown, as on every tag whose link was kept)
        (f"{SITE}/research/?event=ACM%20Conference%20on%20Fairness%2C%20Accountability%2C%20and%20Transparency",
         "conference ACM Conference on Fairness, Accountability, and Transparency", "FAccT"),
        # an event the reader does not know: its words, when short
        ("/research/?event=Foo%20Bar", "conference Foo Bar", "Foo Bar"),
        ("/research/?event=" + "x" * 5000, "conference " + "x" * 5000, None),
        # no tag of a conference
        (f"{SITE}/research/?domain=Privacy", "research area Privacy", None),
        ("/research/", "content type paper", None),
        ("/research/?event=", "conference", None),
        ("https://evil.example/research/?event=ICML", "conference ICML", None),
        ("/updates/?event=ICML", "conference ICML", None),
    ],
)
def test_the_sites_conference_tags(href: str, words: str, venue: str | None) -> None:
    assert venue_tag(href, words, f"{SITE}/research/x") == venue


def test_the_sites_words_for_a_papers_links_name_them() -> None:
    """The header's words (annotator-safety-policy-interpretability.txt: "View publication View source code
    (GitHub)") pick the links they are on among others; the hrefs here are assumed (a text copy keeps
    none)."""
    page_url = f"{SITE}/research/annotator-safety-policy-interpretability"
    anchors = [Anchor("https://arxiv.org/abs/2601.00001", "Prior work", ""),
               Anchor("https://arxiv.org/abs/2607.00002", "View publication", ""),
               Anchor("https://github.com/apple/ml-other", "a baseline", ""),
               Anchor("https://github.com/apple/ml-annotator-policy", "View source code (GitHub)", "")]
    assert pick_paper(anchors, page_url) == "https://arxiv.org/abs/2607.00002"
    assert pick_code(anchors, page_url) == "https://github.com/apple/ml-annotator-policy"
