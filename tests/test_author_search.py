"""Search over authors (issue 6): author: filters, authors in ranking, and the shortened author line."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.blocks import format_authors
from bot.errors import SearchError
from bot.models import Item
from bot.search.index import SearchIndex
from bot.search.query import parse_query
from bot.search.query import search as run_search
from bot.store import Store, open_store


def item(slug: str, title: str, summary: str, day: int, authors: tuple[str, ...]) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(link, slug, title, link, summary, datetime(2026, 1, day, tzinfo=UTC), "research", authors)


@pytest.fixture
def store(store: Store) -> Store:
    """The conftest store (each backend in turn), holding five items by a few authors."""
    s = store
    s.add_items(
        [
            item("a", "Diffusion for speech", "We study diffusion.", 1, ("Jane Doe", "Kim Lee")),
            item("b", "Captioning at scale", "Image captioning with transformers.", 2, ("Kim Lee",)),
            item("c", "Doe-like priors", "A prior named after nobody.", 3, ("Sam Roe",)),
            item("d", "Sparse diffusion", "Sparse attention for diffusion.", 4, ("Jane Doe", "Sam Roe")),
            item("e", "Unrelated", "Nothing to see.", 5, ("Doe Jane",)),
        ]
    )
    return s


def search(store: Store, text: str, limit: int = 10) -> list:  # type: ignore[type-arg]
    return run_search(SearchIndex(store), text, limit).hits


def titles(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.item.title for h in hits]


# --- parsing ---


@pytest.mark.parametrize(
    ("text", "terms", "authors"),
    [
        ('author:"Jane Doe"', (), ("Jane Doe",)),
        ("author:Doe", (), ("Doe",)),
        ('diffusion author:"Jane  Doe" speech', ("diffusion", "speech"), ("Jane Doe",)),
        ("AUTHOR:“Jane Doe”", (), ("Jane Doe",)),  # Slack's smart quotes
        ('author:"Jane Doe', (), ("Jane Doe",)),  # unterminated quote: the rest of the line
        ('author:Doe authors:"Kim Lee" x', ("x",), ("Doe", "Kim Lee")),
        ("author:Doe author:doe", (), ("Doe",)),
        ("coauthor:Doe", ("coauthor", "doe"), ()),  # only a whole word is a filter
    ],
)
def test_parse_author_filters(text: str, terms: tuple[str, ...], authors: tuple[str, ...]) -> None:
    query = parse_query(text)
    assert query.terms == terms and query.filters.authors == authors


@pytest.mark.parametrize("text", ["author:", 'author:""', "author:!!!", 'author:"   "'])
def test_an_author_filter_needs_a_name(text: str) -> None:
    with pytest.raises(SearchError, match="author: needs a name"):
        parse_query(text)


def test_too_many_authors() -> None:
    with pytest.raises(SearchError, match="at most"):
        parse_query(" ".join(f"author:N{i}" for i in range(6)))


def test_author_filters_keep_the_other_filters() -> None:
    query = parse_query("author:Doe since:2026-01-02 type:paper")
    assert query.filters.authors == ("Doe",) and query.filters.kind == "research"
    assert str(query.filters.since) == "2026-01-02"


# --- searching ---


def test_author_only_lists_their_items_newest_first(store: Store) -> None:
    assert titles(search(store, 'author:"Jane Doe"')) == ["Sparse diffusion", "Diffusion for speech"]


def test_author_filter_matches_the_name_as_a_phrase(store: Store) -> None:
    # "Doe Jane" is a different person; a bare surname matches both
    assert "Unrelated" not in titles(search(store, 'author:"Jane Doe"'))
    assert set(titles(search(store, "author:Doe"))) == {
        "Sparse diffusion",
        "Diffusion for speech",
        "Unrelated",
    }


def test_author_filter_matches_authors_only(store: Store) -> None:
    assert "Doe-like priors" not in titles(search(store, "author:Doe"))


def test_author_filter_with_terms_intersects(store: Store) -> None:
    assert titles(search(store, "diffusion author:Roe")) == ["Sparse diffusion"]
    assert titles(search(store, 'captioning author:"Jane Doe"')) == []


def test_several_authors_must_all_match(store: Store) -> None:
    assert titles(search(store, 'author:"Jane Doe" author:"Sam Roe"')) == ["Sparse diffusion"]


def test_plain_terms_match_authors_too_but_rank_below_titles(store: Store) -> None:
    hits = titles(search(store, "lee"))
    assert set(hits) == {"Captioning at scale", "Diffusion for speech"}
    ranked = titles(search(store, "doe"))
    assert ranked[0] == "Doe-like priors"  # a title match outranks an author match
    assert set(ranked) == {"Doe-like priors", "Sparse diffusion", "Diffusion for speech", "Unrelated"}


def test_author_search_respects_other_filters_and_limit(store: Store) -> None:
    assert titles(search(store, "author:Doe since:2026-01-04")) == ["Unrelated", "Sparse diffusion"]
    assert titles(search(store, "author:Doe", limit=1)) == ["Unrelated"]


def test_author_names_with_accents_and_punctuation(database_url: str) -> None:
    s = open_store(database_url)
    s.migrate()
    s.add_items([item("x", "X", "x", 1, ("Chloé O'Brien-Smith",))])
    assert titles(search(s, 'author:"Chloé O\'Brien-Smith"')) == ["X"]
    assert titles(search(s, 'author:"Chloe O\'Brien-Smith"')) == ["X"]  # accents fold, on both stores
    assert titles(search(s, "author:obrien")) == []
    assert titles(search(s, "author:Brien")) == ["X"]


@pytest.mark.parametrize(("text", "expected"), [
    ('author:"Doe OR Lee"', []),  # tantivy's query syntax would find either name
    ('author:"Lee AND Doe"', []),
    ('author:"authors:Lee"', []),  # a field name is a word here
    ("author:Do*", []),  # no wildcard
    ('author:"Do?"', []),
    ('author:"Doe~2"', []),  # no fuzzy match
    ('author:"Doe^9"', []),  # no boost
    ('author:"[a TO z]"', []),  # no range
    ('author:"NOT Doe"', []),
    ('author:"-Doe"', ["Diffusion for speech", "Sparse diffusion", "Unrelated"]),  # no exclusion: the name
    ('author:"(Doe)"', ["Diffusion for speech", "Sparse diffusion", "Unrelated"]),
])
def test_tantivy_query_syntax_in_author_names_is_only_words(
    store: Store, text: str, expected: list[str]
) -> None:
    """An author name is matched as its words, in order: the operators, fields, wildcards, fuzziness, boosts
    and ranges of tantivy's query parser mean nothing in it (nor raise)."""
    assert sorted(titles(search(store, text))) == expected


# --- format_authors ---


@pytest.mark.parametrize(
    ("authors", "expected"),
    [
        ((), ""),
        (("Jane Doe",), "J. Doe"),
        (("Jane Doe", "Kim Lee", "Sam Roe"), "J. Doe, K. Lee, S. Roe"),
        (("Jane Doe", "Kim Lee", "Sam Roe", "Ada Byron"), "J. Doe, K. Lee et al."),
        (("Jane Mary Doe", "Jean-Luc Picard", "x", "y"), "J. M. Doe, J.-L. Picard et al."),
        (("Ludwig van Beethoven",), "L. van Beethoven"),
        (("Doe, Jane",), "J. Doe"),
        (("Plato",), "Plato"),
        (("J. Doe",), "J. Doe"),
        # a team that signs a post is a name (the demo archive's 2017-2019 posts), not initials
        (("Siri Speech Recognition Team",), "Siri Speech Recognition Team"),
        (("Input & Intelligence — Natural Language Processing Team",),
         "Input & Intelligence — Natural Language Processing Team"),
        (("Jane Doe", "Machine Learning Research Group"), "J. Doe, Machine Learning Research Group"),
        (("Tim Teamster",), "T. Teamster"),
    ],
)
def test_format_authors(authors: tuple[str, ...], expected: str) -> None:
    assert format_authors(authors) == expected
