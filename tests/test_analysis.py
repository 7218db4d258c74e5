"""The one analysis of text (bot.search.analysis), and the two uses of it outside the index: subscription
keywords (match.py) and highlighting (highlight.py) agree with it, checked over 72 real posts."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

import pytest

from bot.feed import kind_of
from bot.models import Item
from bot.search import glossary
from bot.search.analysis import KEPT_APART, terms
from bot.search.highlight import (
    WordMatcher,
    highlighted_snippet,
    matcher_for_text,
    matching_words,
    word_matcher,
    words,
)
from bot.search.index import SearchIndex
from bot.search.match import matched_keywords
from bot.search.query import parse_query, search
from bot.store import SQLiteStore

POSTS = json.loads((Path(__file__).parent / "data" / "apple_ml_corpus.json").read_text(encoding="utf-8"))
# Keywords people would subscribe to: every word of the titles, and each title's consecutive word pairs.
WORDS = sorted({w.lower() for post in POSTS for w in words(post["title"])})
PAIRS = sorted({f"{a} {b}".lower() for post in POSTS for a, b in pairwise(words(post["title"]))})


@pytest.mark.parametrize("text, expected", [
    ("captions captioning Captioned caption", ["caption"] * 4),
    ("diffusion diffusions DIFFUSION", ["diffus"] * 3),
    ("Image Captioning with Diffusion", ["imag", "caption", "with", "diffus"]),
    ("state-of-the-art GPT-4o, e.g. (3D)", ["state", "of", "the", "art", "gpt", "4o", "e", "g", "3d"]),
    ("snake_case don't", ["snake", "case", "don", "t"]),
    ("ÜNÏCODE Café naïve 日本語", ["unicod", "cafe", "naiv", "日本語"]),  # accents fold
    ("", []),
    ("*** --- !!! …", []),
])
def test_words_are_split_on_punctuation_lower_cased_and_stemmed(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


@pytest.mark.parametrize("word, other", [
    ("accessibility", "access"), ("accessible", "accessing"), ("experiments", "experience"),
    ("personalized", "person"), ("generalization", "general"), ("engineering", "engine"),
    ("objective", "object"), ("multiplication", "multiple"), ("utility", "utilize"),
    ("activations", "active"),
    ("initialization", "initial"), ("differentiable", "differential"), ("animation", "animal"),
])
def test_a_word_the_stemmer_would_join_to_another_of_another_meaning_keeps_its_own_term(
        word: str, other: str) -> None:
    """Porter's English stemmer gives each pair one term; a search for the first listed posts saying the
    second. The word keeps a term of its own, whatever its case, in a text or alone."""
    assert terms(word) != terms(other)
    assert terms(word.upper()) == terms(word) == terms(f"an {word}.")[1:]
    assert terms(f"{word} {other}") == [*terms(word), *terms(other)]


def test_each_word_kept_apart_is_analyzed_as_a_term_no_other_word_has() -> None:
    kept = set(KEPT_APART.values())
    for term in kept:
        assert terms(term) == [term], term  # the stemmer leaves it as it is
    for word, term in KEPT_APART.items():
        assert terms(word) == [term], word
    written = {w.lower() for post in POSTS for w in words(f"{post['title']} {post['abstract']}")}
    others = written - set(KEPT_APART)
    assert not {term for word in others for term in terms(word)} & kept


def test_a_subscription_and_a_highlight_keep_the_words_apart_as_search_does() -> None:
    title, summary = "Access to data", "We log what each person may access, as an engine would."
    for keyword in ("accessibility", "personalized", "engineering"):
        assert matched_keywords(title, summary, [keyword]) == []
        assert matching_words(words(f"{title} {summary}"), [keyword]) == set()
    assert matched_keywords("Accessibility on device", "", ["accessible"]) == ["accessible"]
    assert highlighted_snippet("Making apps accessible.", word_matcher(["accessibility"])) == \
        "Making apps *accessible*."


def test_tokens_of_100_bytes_or_more_are_dropped() -> None:
    assert terms("x" * 99) == ["x" * 99]
    assert terms("a " + "x" * 100 + " b") == ["a", "b"]
    assert terms("é" * 50) == []  # 50 letters, 100 bytes
    assert matched_keywords("x" * 100, "", ["x" * 100]) == []
    assert highlighted_snippet("x" * 100, word_matcher(["x" * 100])) == "x" * 100


def field_terms(post: dict[str, str]) -> list[str]:
    """Each field's terms as one space-delimited string, to find a run of terms in by plain string search."""
    return [" " + " ".join(terms(post[name])) + " " for name in ("title", "abstract")]


def test_a_keyword_matches_a_post_when_its_terms_run_consecutively_in_the_title_or_abstract() -> None:
    outcomes = []
    for post in POSTS:
        fields = field_terms(post)
        for keyword in WORDS[::3] + PAIRS[::5]:
            forms = [keyword, *glossary.numbers(keyword)]  # an abbreviation counts in either number
            expected = any(" " + " ".join(terms(form)) + " " in field for form in forms for field in fields)
            assert matched_keywords(post["title"], post["abstract"], [keyword]) == ([keyword] * expected), \
                (post["link"], keyword)
            outcomes.append(expected)
    assert 100 < sum(outcomes) < len(outcomes) - 100  # many posts matched, many not


def test_each_title_matches_its_own_word_pairs_and_not_the_reversed_pairs_it_lacks() -> None:
    for post in POSTS:
        for a, b in pairwise(words(post["title"])):
            assert matched_keywords(post["title"], "", [f"{a} {b}"]) == [f"{a} {b}"]
            reversed_in_title = " " + " ".join(terms(f"{b} {a}")) + " " in field_terms(post)[0]
            assert bool(matched_keywords(post["title"], "", [f"{b} {a}"])) == reversed_in_title


def test_why_it_matched_agrees_with_the_match() -> None:
    """A word keyword matches a text exactly when highlighting finds a word of that text matching it."""
    for post in POSTS:
        for name in ("title", "abstract"):
            candidates = words(post[name])
            for keyword in WORDS[::4]:
                matched = bool(matched_keywords(post[name], "", [keyword]))
                assert matched == bool(matching_words(candidates, [keyword])), (post["link"], name, keyword)


def test_the_snippet_bolds_exactly_the_words_whose_terms_the_query_has() -> None:
    bolded = 0
    for number, post in enumerate(POSTS):
        query = [w.lower() for w in words(POSTS[(number * 7) % len(POSTS)]["title"])[:3]]
        wanted = {t for w in query for t in terms(w)}
        snippet = highlighted_snippet(post["abstract"], word_matcher(query), limit=300)
        shown = re.sub(r"&(amp|lt|gt);", " ", snippet)  # the entities escaping added are not words
        for found in re.finditer(r"(\*?)(\w+)\*?", shown):
            assert (found.group(1) == "*") == bool(set(terms(found.group(2))) & wanted), (post["link"], found)
            bolded += found.group(1) == "*"
        if any(set(terms(w)) & wanted for w in words(post["abstract"])):
            assert "*" in snippet, (post["link"], query)  # the window holds the first match
    assert bolded > 50


def searchable(post: dict) -> str:
    return " ".join([post["title"], post["abstract"], *post["authors"]])


def test_what_is_highlighted_is_what_the_search_matched(tmp_path: Path) -> None:
    """For words typed whole, misspelt, or cut short as the last word (a prefix), the posts the search finds
    are exactly those with a word the matcher highlights (in its title, abstract or authors); where the
    glossary added a form (a plain word's term), every post found has a word highlighted as the reply
    highlights it (the typed words and the forms), and every post holding a typed word is found."""
    store = SQLiteStore(tmp_path / "corpus.db")
    store.migrate()
    store.add_items([
        Item(id=post["link"], guid=post["link"], title=post["title"], link=post["link"],
             summary=post["abstract"], kind=kind_of(post["link"]), authors=tuple(post["authors"]),
             published=datetime.fromisoformat(post["published"] or "2017-01-01").replace(tzinfo=UTC))
        for post in POSTS
    ])
    index = SearchIndex(store)
    everything = " ".join(map(searchable, POSTS))
    long_words = [w for w in WORDS if len(w) >= 6][::5]
    typed = [w + " " for w in long_words] + [w[:-1] for w in long_words] + [w[:5] for w in long_words]
    typed += ["difusion ", "captoning ", "normalizin", "diffusi", "privac", "dictation ", "stutter "]
    corrected = expanded = 0
    for text in typed:
        found = search(index, text, limit=100)
        query = parse_query(found.searched_for or text)  # a misspelt word: highlighted as corrected
        corrected += found.searched_for is not None
        prefix_last = query.prefix_last and not (found.searched_for or found.whole)
        is_match = matcher_for_text(everything, query.terms, prefix_last=prefix_last)
        highlighted = {post["link"] for post in POSTS if is_match.among(words(searchable(post)))}
        ids = {hit.item.id for hit in found.hits}
        if found.expanded is None:
            assert ids == highlighted, text
            continue
        expanded += 1
        with_forms = matcher_for_text(everything, (*query.terms, *parse_query(found.expanded).terms),
                                      prefix_last=prefix_last)
        assert highlighted <= ids <= {post["link"] for post in POSTS
                                      if with_forms.among(words(searchable(post)))}, text
    assert corrected >= 2 and expanded >= 2


def test_a_matcher_asked_many_words_at_once_answers_as_it_does_for_each() -> None:
    """`among` skips words that cannot match by their first letter; the answer is the same as asking each
    word, for words of every post, prefixes typed, and words the analysis folds, splits or stems oddly."""
    odd = ["dying", "lying", "skies", "ÉCLAIR", "éclair", "foo_bar", "Chloé", "naïve", "_x", "2024", "x2vec"]
    vocabulary = sorted({w for post in POSTS for w in words(f"{post['title']} {post['abstract']}")}) + odd
    rng = random.Random(12)
    for _ in range(1500):
        typed = rng.sample(vocabulary, rng.randint(1, 3))
        if rng.random() < 0.3:
            typed[-1] = typed[-1][: rng.randint(1, len(typed[-1]))]
        matcher = WordMatcher(typed, rng.random() < 0.5, set(rng.sample(vocabulary, 50)))
        asked = set(rng.sample(vocabulary, 200)) | set(odd)
        assert matcher.among(asked) == {word for word in asked if matcher(word)}, typed
