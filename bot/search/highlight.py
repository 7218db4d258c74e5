"""Which words of a text match a query, and a snippet with those words in bold, safe for mrkdwn.

A word matches when one of its analyzed terms (`bot.search.analysis`, the search index's own analysis) is
one of the query's analyzed terms, so "captions" matches "captioning"; with `prefix_last`, a word also matches
when one of its terms is one the search expands the last word typed to (see `WordMatcher`).

    is_match = word_matcher(["caption"])                      # is_match("Captions") -> True
    highlighted_snippet("Image captioning & <b>", is_match)   ->  "Image *captioning* &amp; &lt;b&gt;"

Bolding happens on whole word tokens (letters, digits, `_`), each escaped on its own, so a marker can never
land inside an entity (`&amp;`), and the characters that pair up as mrkdwn formatting in feed text (`*`,
`` ` ``, `~`) are replaced by look-alikes, so they cannot swallow or break the bold markers we add.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence, Set
from functools import lru_cache
from itertools import accumulate

from bot.blocks import escape
from bot.search.analysis import KEPT_TERMS
from bot.search.analysis import terms as analyze
from bot.search.glossary import numbers
from bot.search.words import form_of

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKENS = re.compile(r"(\w+)", re.UNICODE)
# Look-alikes for the characters that pair up as mrkdwn formatting.
_INERT = str.maketrans({"*": "\u2217", "`": "\u02cb", "~": "\u223c"})
MAX_ANSWERS = 20_000  # words remembered per set of query terms (_answers)
MIN_STEM_CHARS = 4  # as bot.search.keywords': a typed prefix also stands for an indexed start of it this long


def words(text: str) -> list[str]:
    return _WORD.findall(text)


class WordMatcher:
    """Whether a word matches the query terms (call it: `word -> bool`); `among` answers for many words.

    With `prefix_last`, the last word typed also stands for the terms the search expands it to: every term
    that starts with it, and (unless its own term is among the `known` ones, or starts one of them) the
    longest start of it (of MIN_STEM_CHARS or more) among them that it may be a form of (`form_of`), as the
    search takes the longest among the index's ("normalizin" stands for "normal", the term of
    "normalizing"; "mobileclip" is never "mobile", nor "blockchain" "block")."""

    def __init__(self, terms: Sequence[str], prefix_last: bool, known: Collection[str] = ()) -> None:
        self.terms = tuple(terms)
        self.prefix_last = prefix_last
        exact = {term for query_term in self.terms for term in analyze(query_term)}
        # an abbreviation in either number, as the search takes it ("LLM" bolds "LLMs", and back)
        exact |= {term for query_term in self.terms for form in numbers(query_term) for term in analyze(form)}
        typed = self.terms[-1].lower() if prefix_last and self.terms else ""
        self._typed = typed if analyze(typed) else ""  # "": no prefix matching
        starts = (self._typed[:end] for end in range(len(self._typed) - 1, MIN_STEM_CHARS - 1, -1))
        whole = any(term in known for term in analyze(self._typed))  # typed whole
        # typed whole, or the start of a known term: no shorter start of it
        starting = not self._typed or whole or any(term.startswith(self._typed) for term in known)
        longest = None if starting else \
            next((start for start in starts if start in known and form_of(self._typed, start)), None)
        # a word typed whole stands for no word kept apart from it ("object" is never "objective")
        self._apart = KEPT_TERMS if whole else frozenset()
        self._exact = frozenset(exact if longest is None else exact | {longest})
        self._seen = _answers(self._exact, self._typed, self._apart)  # shared by matchers of the same terms
        # A word whose first character is ASCII can only match a term that begins with it lower-cased (folding
        # and lower-casing leave it so, and the stemmer keeps a word's first letter); `among` asks only those,
        # and words holding non-ASCII characters or "_" (which the analysis may fold or split).
        firsts = {term[0] for term in self._exact if term} | ({self._typed[0]} if self._typed else set())
        self._firsts = frozenset(firsts | {first.upper() for first in firsts})

    def __call__(self, word: str) -> bool:
        seen = self._seen.get(word)
        if seen is None:
            if len(self._seen) >= MAX_ANSWERS:
                self._seen.clear()
            seen = self._seen[word] = self._matches(word)
        return seen

    def _matches(self, word: str) -> bool:
        exact, typed, apart = self._exact, self._typed, self._apart
        return any(term in exact or (typed and term.startswith(typed) and term not in apart)
                   for term in analyze(word))

    def among(self, words: Collection[str]) -> Set[str]:
        """Those of `words` that match."""
        firsts = self._firsts
        return {word for word in words
                if (word[:1] in firsts or not word.isascii() or "_" in word) and self(word)}


@lru_cache(maxsize=256)
def _answers(exact: frozenset[str], typed: str, apart: frozenset[str]) -> dict[str, bool]:
    """word -> whether it matches these terms: one dict for every matcher of the same terms (a reply's five
    snippets, and the next search of the same topic), so each word is analyzed and compared once."""
    return {}


def word_matcher(terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """A predicate `word -> bool`: whether the word matches any of `terms`."""
    return WordMatcher(terms, prefix_last)


def matcher_for_text(text: str, terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """Like `word_matcher`, knowing the terms of `text` (the longest start of a prefix: see WordMatcher)."""
    typed = terms[-1].lower() if prefix_last and terms else ""
    if len(typed) <= MIN_STEM_CHARS:  # no start of it is long enough
        return WordMatcher(terms, prefix_last)
    # Only a word that begins as the typed word does can have a term that is a start of it (stemming keeps
    # a word's first two letters).
    lowered = text.lower()
    starting = re.compile(re.escape(typed[:2]) + r"[^\W_]*").finditer(lowered)
    return WordMatcher(terms, prefix_last, _known(
        {found.group() for found in starting if not lowered[found.start() - 1 : found.start()].isalnum()}))


def matching_words(candidates: Iterable[str], terms: Sequence[str], *, prefix_last: bool = False) -> set[str]:
    """The candidates (compared lower case) that match any of `terms`."""
    unique = {w.lower() for w in candidates if w}
    is_match = WordMatcher(terms, prefix_last, _known(unique) if prefix_last else ())
    return {word for word in unique if is_match(word)}


def _known(unique_words: set[str]) -> set[str]:
    """The terms of these words (each analyzed alone: the analysis caches words, not whole texts)."""
    return {term for word in unique_words for term in analyze(word)}


def _first_of(words: Set[str], text: str) -> re.Match[str] | None:
    """The first whole-word occurrence in `text` of any of `words`."""
    if not words:
        return None
    # the text's words are whole \w runs, as `words` were found: no pattern to compile for each answer
    return next((found for found in _WORD.finditer(text) if found.group() in words), None)


def inert(text: str) -> str:
    """Feed text made unable to mention, link, ping or pair with our formatting markers."""
    return escape(text.translate(_INERT))


def highlighted_snippet(text: str, is_match: WordMatcher, limit: int = 300) -> str:
    """At most `limit` characters of `text` (before escaping) around the first matching word, escaped for
    mrkdwn, with every matching word in bold. Each distinct word is asked of `is_match` once; the text is
    then searched for the matching words by a regular expression."""
    text = " ".join(text.split())
    matching = is_match.among(set(_WORD.findall(text)))
    first = _first_of(matching, text)
    late = first is not None and first.end() > limit * 2 // 3
    recent = [0]
    if late and first is not None:  # where the 8 words before the first match begin, and the match
        recent = [word.start() for word in _WORD.finditer(text, 0, first.start())][-8:] + [first.start()]
    # Start at the text, or (the first match being late) 8 words before the first match.
    start, prefix = (recent[0], "…") if late else (0, "")
    budget = limit - 1 - len(prefix)  # the last character is for "…"
    tokens = _TOKENS.split(text[start : start + budget + 1])  # odd indexes are words
    # As many tokens as fit in `budget` characters.
    end = bisect_right(list(accumulate(map(len, tokens), initial=0)), budget) - 1
    truncated = end < len(tokens)
    if truncated and end % 2 == 1:  # do not end on what lies between two words
        end -= 1
    # A word (\w+) holds none of the characters that escaping or `inert` change.
    body = "".join(
        (f"*{token}*" if token in matching else token) if index % 2 else token if token == " "
        else inert(token)
        for index, token in enumerate(tokens[:end])
    ).strip()
    if truncated:
        body = body.rstrip(" ,.;:") + "…"
    return prefix + body
