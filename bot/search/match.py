"""Keyword matching for subscriptions: a keyword (a word or a quoted phrase) matches an item when its analyzed
terms occur in the title's or the summary's analyzed terms, a phrase as consecutive terms. The analysis is the
search index's own (`bot.search.analysis`), so a subscription matches what a search for its keywords finds.

    matched_keywords("Normalizing Flows", "", ["flow", "image captioning"]) -> ["flow"]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

from bot.models import MAX_KEYWORDS, TOPIC_PREFIX
from bot.search import glossary
from bot.search.analysis import terms

__all__ = ["MAX_KEYWORDS", "MAX_KEYWORD_CHARS", "TOPIC_PREFIX", "matched_keywords", "matcher",
           "normalize_keywords", "split_keywords"]

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_KEYWORD_CHARS = 60


def normalize_keywords(raw: Iterable[str]) -> list[str]:
    """Keywords as stored: lower case, words only (a quoted phrase keeps its words), no duplicates; the first
    MAX_KEYWORDS (the rest is not read)."""
    result: list[str] = []
    for keyword in raw:
        words = _WORD.findall(keyword.lower())
        if not words:
            continue
        phrase = " ".join(words)[:MAX_KEYWORD_CHARS]
        if phrase not in result:
            result.append(phrase)
            if len(result) == MAX_KEYWORDS:
                break
    return result


def split_keywords(text: str) -> list[str]:
    """Split `subscribe` text into keywords: words, or "quoted phrases"; commas separate too."""
    parts = re.findall(r'"([^"]*)"|“([^”]*)”|([^\s,"]+)', text)
    return normalize_keywords(next(p for p in group if p) for group in parts if any(group))


def matched_keywords(title: str, summary: str, keywords: Sequence[str]) -> list[str]:
    """The keywords (as given) whose terms occur, consecutively, in the title or in the summary; an
    abbreviation of the glossary in either number, as search takes it ("LLM" matches "LLMs", and back)."""
    return matcher(title, summary)(keywords) if keywords else []


def matcher(title: str, summary: str) -> Callable[[Sequence[str]], list[str]]:
    """`matched_keywords` for one item, its text analyzed once: for matching many people's keywords."""
    fields = [terms(title), terms(summary)]

    def matched(keywords: Sequence[str]) -> list[str]:
        return [keyword for keyword in keywords
                if any(_occurs(phrase, field) for phrase in _phrases(keyword) for field in fields)]

    return matched


@lru_cache(maxsize=4096)
def _phrases(keyword: str) -> tuple[tuple[str, ...], ...]:
    """The keyword's terms, and an abbreviation's in the other number (the stemmer keeps "LLMs" apart)."""
    own = tuple(terms(keyword))
    other = [tuple(terms(form)) for form in glossary.numbers(keyword.strip())]
    return tuple(dict.fromkeys([own, *other]))


def _occurs(phrase: tuple[str, ...], field: list[str]) -> bool:
    """Whether `phrase` (not empty) is a run of consecutive terms of `field`."""
    if not phrase:
        return False
    n = len(phrase)
    return any(tuple(field[i : i + n]) == phrase for i, term in enumerate(field) if term == phrase[0])
