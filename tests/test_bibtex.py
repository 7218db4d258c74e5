"""Items as BibTeX (bot.bibtex), read back by a BibTeX parser from PyPI (bibtexparser): the fields, the
escaping of what LaTeX and BibTeX treat specially, keys that are stable and unique within one export, and
the same reference in plain text."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import bibtexparser
import pytest
from bibtexparser import Library
from bibtexparser.model import Entry
from msgspec.structs import replace

from bot import bibtex
from bot.models import Item
from tests.fakes.archive import corpus_items

LINK = "https://machinelearning.apple.com/research/scaling-speech"
ITEM = Item(id=LINK, guid="scaling-speech", title="Scaling Laws for Speech Recognition", link=LINK,
            summary="About speech.", published=datetime(2025, 12, 3, tzinfo=UTC), kind="research",
            authors=("Awni Hannun", "Jane Doe", "Kim Roe"))
HOSTILE = "Scaling {LLMs & Diffusion} to 100% on iPhone: $5 #1 a_b ~x^2 \\emph{no} } Café Schrödinger Łódź"


def parsed(text: str) -> Library:
    """The text as bibtexparser reads it; no block it could not read, no key given twice."""
    library = bibtexparser.parse_string(text)
    assert library.failed_blocks == [], [type(b).__name__ for b in library.failed_blocks]
    return library


def one(text: str) -> Entry:
    (found,) = parsed(text).entries
    return found


def fields(found: Entry) -> dict[str, str]:
    return {f.key: f.value for f in found.fields}


def balanced(value: str) -> bool:
    """BibTeX counts every brace, a backslash before it or not: the value's must never close more than
    were opened, and must all close."""
    depth = 0
    for char in value:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def test_an_item_without_a_venue_is_a_misc_entry_with_its_url_and_the_publisher() -> None:
    found = one(bibtex.entry(ITEM))
    assert (found.entry_type, found.key) == ("misc", "hannun2025scaling")
    assert fields(found) == {
        "title": "Scaling Laws for Speech Recognition",
        "author": "Awni Hannun and Jane Doe and Kim Roe",
        "howpublished": rf"\url{{{LINK}}}",
        "year": "2025",
        "month": "dec",  # BibTeX's own macro, unquoted: styles print the month's name
        "url": LINK,
        "note": "Apple Machine Learning Research",
    }
    assert "month = dec," in bibtex.entry(ITEM)


def test_an_item_with_a_venue_is_inproceedings_with_the_venue_as_booktitle_and_its_year() -> None:
    found = one(bibtex.entry(ITEM, venue="ICML 2024"))
    assert found.entry_type == "inproceedings"
    assert fields(found) == {"title": "Scaling Laws for Speech Recognition",
                             "author": "Awni Hannun and Jane Doe and Kim Roe", "booktitle": "ICML 2024",
                             "year": "2024", "month": "dec", "url": LINK}
    workshop = fields(one(bibtex.entry(ITEM, venue="NeurIPS workshop on speech")))
    assert workshop["booktitle"] == "NeurIPS workshop on speech" and workshop["year"] == "2025"


def test_special_characters_braces_accents_and_a_5000_character_title_are_escaped_and_parse() -> None:
    long = replace(ITEM, title=HOSTILE + " word" * 1000, authors=("Oğuzhan Fatih Kar", "Adam Goliński",
                                                                  "Input & Intelligence — NLP Team"))
    assert len(long.title) > 5000
    text = bibtex.entry(long, venue="Workshop on 100% {Broken & Bad} Venues " + "x" * 5000)
    values = fields(one(text))
    title = values["title"]
    for raw in ("& ", "% ", "$5", "#1", "a_b", "~", "^", "\\emph"):
        assert raw not in title.replace("\\" + raw[0], ""), raw  # each special character escaped
    for escaped in (r"\&", r"\%", r"\$5", r"\#1", r"a\_b", r"\textasciitilde{}x\textasciicircum{}2",
                    r"\textbackslash{}emph\textbraceleft{}no\textbraceright{}"):
        assert escaped in title
    assert all(balanced(v) for v in values.values())  # the lone "}" of the title among them
    assert "Café Schrödinger Łódź" in title  # accents kept, as UTF-8
    assert "{iPhone}" in title and "{LLMs}" in title  # capitals a style must not lower
    assert len(title) <= bibtex.FIELD_CHARS and title.endswith("…")
    assert len(values["booktitle"]) <= bibtex.FIELD_CHARS and r"100\% \textbraceleft{}Broken" in \
        values["booktitle"]
    assert values["author"] == "Oğuzhan Fatih Kar and Adam Goliński and {Input \\& Intelligence — NLP Team}"
    assert len(text) < 8000 and "\n" not in title


def test_every_field_of_every_real_post_parses_and_balances() -> None:
    """The 72 real posts (accents and all), exported together: every entry read back, keys unique."""
    items = corpus_items()
    library = parsed(bibtex.bibliography(items))
    assert len(library.entries) == len(items)
    keys = [e.key for e in library.entries]
    assert len(set(keys)) == len(keys) and all(re.fullmatch(r"[a-z0-9]+", k) for k in keys)
    for found in library.entries:
        assert all(balanced(value) for value in fields(found).values()), found.key


def test_keys_are_surname_year_and_first_significant_title_word_in_ascii() -> None:
    def key(title: str, *authors: str, year: int = 2025) -> str:
        return bibtex.key_for(replace(ITEM, title=title, authors=authors,
                                      published=datetime(year, 1, 5, tzinfo=UTC)))

    assert key("Scaling Laws", "Awni Hannun") == "hannun2025scaling"
    assert key("The Hidden Cost of a Tokenizer", "Adam Goliński") == "golinski2025hidden"
    assert key("Towards 3D Vision", "Laurens van der Maaten") == "vandermaaten20253d"
    assert key("On Ordering: What Matters", "Doe, Jane", year=2019) == "doe2019ordering"
    assert key("Über Schrödinger", "Oğuzhan Fatih Kar") == "kar2025uber"
    assert key("Privacy-Preserving ML", "Input & Intelligence — NLP Team") == "input2025privacy"
    assert key("Updates from WWDC") == "apple2025updates"  # no author named: the publisher
    assert key("「日本語」", "山田 太郎") == "apple2025item"  # nothing ASCII: the fallbacks
    assert key("Scaling Laws", "Awni Hannun") == key("Scaling Laws", "Awni Hannun")  # the same each time


def test_keys_that_collide_in_one_export_get_a_b_suffixes_and_stay_unique() -> None:
    twins = [replace(ITEM, id=f"{LINK}-{n}", link=f"{LINK}-{n}", title=f"Scaling laws, part {n}",
                     published=datetime(2025, 12, n + 1, tzinfo=UTC)) for n in range(4)]
    library = parsed(bibtex.bibliography(reversed(twins)))
    assert [e.key for e in library.entries] == ["hannun2025scaling", "hannun2025scalinga",
                                                "hannun2025scalingb", "hannun2025scalingc"]
    assert [fields(e)["url"] for e in library.entries] == [t.link for t in twins]  # oldest keeps the key
    assert bibtex.unique_key("k", {"k", *(f"k{c}" for c in "abcdefghijklmnopqrstuvwxyz")}) == "kaa"


def test_an_export_holds_each_item_once() -> None:
    assert parsed(bibtex.bibliography([ITEM, ITEM, replace(ITEM)])).entries[0].key == "hannun2025scaling"
    assert len(parsed(bibtex.bibliography([ITEM, ITEM])).entries) == 1
    assert bibtex.bibliography([]) == ""


def test_a_link_that_is_not_a_plain_web_url_is_left_out_not_guessed() -> None:
    for link in ("javascript:alert(1)", "https://machinelearning.apple.com/a b", "/research/relative",
                 "https://machinelearning.apple.com/" + "x" * 600):
        values = fields(one(bibtex.entry(replace(ITEM, link=link))))
        assert "url" not in values and "howpublished" not in values
    braces = fields(one(bibtex.entry(replace(ITEM, link="https://machinelearning.apple.com/a{b}\\c"))))
    assert braces["url"] == "https://machinelearning.apple.com/a%7Bb%7D%5Cc"


def test_many_authors_end_with_and_others() -> None:
    crowd = replace(ITEM, authors=tuple(f"Author Number{n}" for n in range(80)))
    author = fields(one(bibtex.entry(crowd)))["author"]
    names = author.split(" and ")
    assert names[-1] == "others" and len(names) == bibtex.AUTHORS + 1


def test_the_plain_reference_names_authors_title_where_when_and_the_link() -> None:
    assert bibtex.plain(ITEM) == ("Awni Hannun, Jane Doe, and Kim Roe. Scaling Laws for Speech Recognition. "
                                  f"Apple Machine Learning Research, December 2025. {LINK}")
    assert bibtex.plain(replace(ITEM, authors=("Awni Hannun",)), venue="ICML 2025") == (
        f"Awni Hannun. Scaling Laws for Speech Recognition. In ICML 2025. Apple Machine Learning Research, "
        f"December 2025. {LINK}")
    many = bibtex.plain(replace(ITEM, authors=tuple(f"A{n} B" for n in range(12)), title="Why?"))
    assert many.startswith("A0 B, A1 B,") and " et al. Why? " in many


@pytest.mark.parametrize("title", ["", "   ", "\x00\x1b[31m", "}}}{{{", "\\" * 400])
def test_odd_titles_still_make_an_entry_that_parses(title: str) -> None:
    values = fields(one(bibtex.entry(replace(ITEM, title=title))))
    assert balanced(values["title"]) and "\x1b" not in values["title"]
    assert len(values["title"]) <= bibtex.FIELD_CHARS
