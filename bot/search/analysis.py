"""The one analysis of text that search, subscription keywords and highlighting share: words split on anything
that is not a letter or digit, lower-cased, accents folded (Chloé is chloe), English-stemmed (tantivy's
Snowball stemmer). The index registers the same analyzer under ANALYZER_NAME, so "the words a search matched"
means the same everywhere.

    terms("Image Captioning with Diffusion") -> ["imag", "caption", "with", "diffus"]
"""

from __future__ import annotations

from functools import lru_cache

import tantivy

ANALYZER_NAME = "mlr_en"


def analyzer() -> tantivy.TextAnalyzer:
    """A fresh analyzer (to register on an index, or to analyze text)."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(100))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


_ANALYZER = analyzer()
CACHED_CHARS = 200  # texts this short (words, queries, titles) keep their terms; an abstract is analyzed anew


@lru_cache(maxsize=4096)
def _terms(text: str) -> tuple[str, ...]:
    return tuple(_ANALYZER.analyze(text))


def terms(text: str) -> list[str]:
    """The indexed terms of `text`, in order (repeats kept). Only short texts are remembered: 4,096 abstracts
    with their terms would hold tens of MB."""
    return list(_terms(text)) if len(text) <= CACHED_CHARS else _ANALYZER.analyze(text)


_INFLECTIONS = ("ies", "es", "s", "ing", "ed")


def base(word: str) -> str:
    """`word` lower-cased without an inflection (plural, -ing, -ed): "captions" and "captioning" are
    "caption", but "aligns" ("align") is not "alignment". Stricter than the stemmer, for quoting a sentence
    as about a word: it must hold the word itself, not a word that merely shares its stem."""
    word = word.lower().replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    for ending in _INFLECTIONS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            stem = word[: -len(ending)]
            if ending == "ies":
                return stem + "y"
            if ending == "es" and not stem.endswith(("s", "x", "z", "ch", "sh")):
                return stem + "e"
            if ending in ("ing", "ed") and len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] not in "lsz":
                return stem[:-1]  # "running" -> "run"
            return stem
    return word
