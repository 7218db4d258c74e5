"""The one analysis of text that search, subscription keywords and highlighting share: words split on anything
that is not a letter or digit, lower-cased, accents folded (Chloé is chloe), English-stemmed (tantivy's
Snowball stemmer). The index registers the same analyzer under ANALYZER_NAME, so "the words a search matched"
means the same everywhere. Words the stemmer would join to others of another meaning are kept apart first
(`kept_apart`: "accessibility" is not "access", "objective" not "object"), in the index and in every query.

    terms("Image Captioning with Diffusion") -> ["imag", "caption", "with", "diffus"]
    terms("accessibility and access")        -> ["accessibl", "and", "access"]
"""

from __future__ import annotations

import os
import re
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


# Words the English stemmer joins to words of another meaning, kept apart: a search for "accessibility" listed
# posts about access to data, one for "experiments" posts about user experience, for "object" ones about a
# training objective. Each line's words (lower case) are written, before analysis, as the term after its
# colon: one the stemmer leaves as it is, and no other word's (a test checks both). Only families a search of
# this field would trip on: "person" stays "personal", "active" stays "activity".
_APART = """
accessibility accessibilities accessible accessibly: accessibl
experiment experiments experimented experimenting experimental experimentally experimentation: experimen
personalize personalizes personalized personalizing personalization personalise personalised personalisation:
    personaliz
generalize generalizes generalized generalizing generalization generalizations generalizable generalise
    generalised generalisation: generaliz
engineer engineers engineered engineering: engineerin
objective objectives: objectiv
multiplication multiplications multiplicative: multiplicat
utility utilities: utilit
activation activations activate activates activated activating: activat
initialization initializations initialize initializes initialized initializing initialisation: initializ
differentiable differentiability differentiate differentiates differentiated differentiating differentiation
    differentiator: differentiat
animation animations animate animates animated animating: animat
"""
_FAMILIES = [(words.split(), term.strip()) for words, term in
             (entry.split(":") for entry in re.sub(r"\n\s+", " ", _APART).strip().splitlines())]
KEPT_APART = {word: term for words, term in _FAMILIES for word in words}  # word -> the term it is analyzed as
KEPT_TERMS = frozenset(KEPT_APART.values())
_STARTS = tuple(os.path.commonprefix(words) for words, _ in _FAMILIES)  # how each family's words all begin
_APART_WORD = re.compile(r"(?<![^\W_])(?:" + "|".join(map(re.escape, _STARTS)) + r")[^\W_]*")


def kept_apart(text: str) -> str:
    """`text` with each word of KEPT_APART written as its term (lower-cased then, as the analysis would), or
    `text` itself when it holds none: the index writes every item's text so, and `terms` every query's. A
    substring test first: most abstracts hold none of the words' beginnings (~17 µs an abstract in all)."""
    lowered = text.lower()
    if not any(start in lowered for start in _STARTS):
        return text
    return _APART_WORD.sub(lambda found: KEPT_APART.get(found.group(), found.group()), lowered)


_ANALYZER = analyzer()
CACHED_CHARS = 200  # texts this short (words, queries, titles) keep their terms; an abstract is analyzed anew


@lru_cache(maxsize=4096)
def _terms(text: str) -> tuple[str, ...]:
    return tuple(_ANALYZER.analyze(kept_apart(text)))


def terms(text: str) -> list[str]:
    """The indexed terms of `text`, in order (repeats kept). Only short texts are remembered: 4,096 abstracts
    with their terms would hold tens of MB."""
    return list(_terms(text)) if len(text) <= CACHED_CHARS else _ANALYZER.analyze(kept_apart(text))


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
