"""Which words of a text match a query, and a snippet with those words in bold, safe for mrkdwn.

Matching agrees with the archive's search: words are compared through SQLite FTS5's porter tokenizer (so
"captions" matches "captioning"), and the last term may match as a prefix, exactly as `Store.search` ranks.

    is_match = word_matcher(["caption"], prefix_last=False)   # is_match("Captions") -> True
    highlighted_snippet("Image captioning & <b>", is_match)   ->  "Image *captioning* &amp; &lt;b&gt;"

Bolding happens on whole word tokens, each escaped on its own, so a marker can never land inside an entity
(`&amp;`), and the characters that pair up as mrkdwn formatting in feed text (`*`, `` ` ``, `~`) are replaced
by look-alikes, so they cannot swallow or break the bold markers we add.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence, Set
from functools import lru_cache
from itertools import accumulate
from typing import NamedTuple

from bot.blocks import escape

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKENS = re.compile(r"(\w+)", re.UNICODE)
_NOT_WORD = re.compile(r"[^\w]", re.UNICODE)
# Look-alikes for the characters that pair up as mrkdwn formatting.
_INERT = str.maketrans({"*": "\u2217", "`": "\u02cb", "~": "\u223c"})
# How much the shared vocabulary (below) holds before it starts afresh: words (~200 bytes each, in memory),
# their characters, and search terms whose matching words it remembers.
VOCABULARY_WORDS = 20_000
VOCABULARY_CHARS = 1_000_000
VOCABULARY_TERMS = 4_096
# Summaries whose layout is kept (`_layout`), and texts (a reply's summaries) whose words and matching words
# are (`_lowered`, `_matches_in`; ~20-40 KB each).
TOKENIZED_TEXTS = 256
LOWERED_TEXTS = 128


class _Vocabulary:
    """Every word asked about so far, one per row of an in-memory FTS5 table tokenized as the archive's index
    is, shared by all threads (one lock). Whether a word matches a term is a question about that word's row
    alone, so keeping the rows between calls answers exactly as a table of just this call's words would,
    without building a database per reply; and since rows are only ever added, the rows matching a term
    are remembered and only newer rows are asked about the next time (a page of results asks about the same
    few hundred words, for the same few terms)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.conn: sqlite3.Connection | None = None
        self.rowids: dict[str, int] = {}
        self.words: list[str] = []  # rowid - 1 -> word
        self.chars = 0
        self.matches: dict[str, tuple[int, frozenset[int]]] = {}  # expression -> (rows asked about, matches)

    def matching(self, unique: set[str], expressions: Sequence[str]) -> set[str]:
        with self.lock:
            try:
                return self._matching(unique, expressions)
            except sqlite3.Error:
                self._reset()  # start afresh next time rather than trust a half-done insert
                raise

    def _matching(self, unique: set[str], expressions: Sequence[str]) -> set[str]:
        new = list(unique - self.rowids.keys())
        chars = sum(map(len, new))
        if self.conn is None or len(self.words) + len(new) > VOCABULARY_WORDS or \
                self.chars + chars > VOCABULARY_CHARS:
            self._reset()
            self.conn = sqlite3.connect(":memory:", check_same_thread=False)
            self.conn.execute("CREATE VIRTUAL TABLE w USING fts5(word, tokenize='porter unicode61')")
            new, chars = list(unique), sum(map(len, unique))
        conn, rowids, by_rowid = self.conn, self.rowids, self.words
        if new:
            rows = list(enumerate(new, len(by_rowid) + 1))
            conn.executemany("INSERT INTO w(rowid, word) VALUES (?, ?)", rows)
            rowids.update((w, rowid) for rowid, w in rows)
            by_rowid.extend(new)
            self.chars += chars
        size = len(by_rowid)
        found: set[str] = set()
        for expression in expressions:
            upto, hits = self.matches.get(expression, (0, frozenset()))
            if upto < size:
                sql = "SELECT rowid FROM w WHERE w MATCH ? AND rowid > ?"
                hits = hits.union(rowid for (rowid,) in conn.execute(sql, (expression, upto)))
                if len(self.matches) >= VOCABULARY_TERMS:
                    self.matches.clear()
                self.matches[expression] = (size, hits)
            found.update(by_rowid[rowid - 1] for rowid in hits)
        return found & unique

    def _reset(self) -> None:
        conn, self.conn = self.conn, None
        self.rowids, self.words, self.matches, self.chars = {}, [], {}, 0
        if conn is not None:
            conn.close()


_VOCABULARY = _Vocabulary()


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def matching_words(candidates: Iterable[str], terms: Sequence[str], *, prefix_last: bool = False) -> set[str]:
    """The candidates (compared lower case) that match any term the way the archive's search does."""
    return _matching_lowered({w.lower() for w in candidates if w}, terms, prefix_last)


def _matching_lowered(unique: set[str], terms: Sequence[str], prefix_last: bool) -> set[str]:
    """`matching_words` for candidates already in lower case, none empty."""
    cleaned = [_NOT_WORD.sub("", t.lower()) for t in terms]
    if not unique or not any(cleaned):
        return set()
    last = len(cleaned) - 1
    expressions = [f'"{term}"' + ("*" if prefix_last and index == last else "")
                   for index, term in enumerate(cleaned) if term]
    return _VOCABULARY.matching(unique, expressions)


class WordMatcher:
    """Whether a word matches the terms as the archive's search would (call it: `word -> bool`), answers
    cached per word; `among` answers for many words at once."""

    def __init__(self, terms: Sequence[str], prefix_last: bool) -> None:
        self.terms = tuple(terms)
        self.prefix_last = prefix_last
        self._cache: dict[str, bool] = {}

    def __call__(self, word: str) -> bool:
        key = word.lower()
        if key not in self._cache:
            self._cache[key] = bool(matching_words([key], self.terms, prefix_last=self.prefix_last))
        return self._cache[key]

    def among(self, words: Collection[str]) -> Set[str]:
        """Those of `words` that match."""
        return {word for word in words if self(word)}


class _TextMatcher(WordMatcher):
    """A WordMatcher that knows at once which words of one text match (see `matcher_for_text`)."""

    def __init__(self, text: str, terms: Sequence[str], prefix_last: bool) -> None:
        super().__init__(terms, prefix_last)
        self._words = _lowered(text)  # the words of the text as written -> lower case
        self._written = _matches_in(text, self.terms, prefix_last)  # those of them that match

    def __call__(self, word: str) -> bool:
        if word in self._written:
            return True
        return word not in self._words and super().__call__(word)

    def among(self, words: Collection[str]) -> Set[str]:
        found = self._written.intersection(words)
        if all(map(self._words.__contains__, words)):
            return found
        ask = super().__call__  # words not in the text: asked on their own
        return found.union(word for word in words if word not in self._words and ask(word))


def word_matcher(terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """A predicate `word -> bool`, with answers cached per word."""
    return WordMatcher(terms, prefix_last)


def matcher_for_text(text: str, terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """Like `word_matcher`, answering for every word of `text` with one lookup."""
    return _TextMatcher(text, terms, prefix_last)


@lru_cache(maxsize=LOWERED_TEXTS)
def _matches_in(text: str, terms: tuple[str, ...], prefix_last: bool) -> frozenset[str]:
    """The words of `text`, as they are written, that match (kept: a word's answer never changes, and the
    results of a recurring search are highlighted for the same terms again)."""
    lowered = _lowered(text)
    hits = _matching_lowered(set(lowered.values()), terms, prefix_last)
    return frozenset(word for word, low in lowered.items() if low in hits)


@lru_cache(maxsize=LOWERED_TEXTS)
def _lowered(text: str) -> dict[str, str]:
    """Each distinct word of `text` as written -> in lower case (kept, as `_layout` is; never changed)."""
    return {word: word.lower() for word in set(words(text))}


@lru_cache(maxsize=TOKENIZED_TEXTS)
def _layout(text: str) -> _Layout:
    """`text` split into what lies between words and words, kept (the results a search shows recur, and
    each snippet of a summary would split, measure and escape it again)."""
    tokens = tuple(_TOKENS.split(" ".join(text.split())))
    shown = tuple(token if index % 2 or token == " " else inert(token) for index, token in enumerate(tokens))
    first_at: dict[str, int] = {}
    for index in range(len(tokens) - 2, 0, -2):  # the words, last to first: the first index of each stays
        first_at[tokens[index]] = index
    return _Layout(tokens, shown, tuple(accumulate(map(len, tokens), initial=0)), first_at)


class _Layout(NamedTuple):
    tokens: tuple[str, ...]  # `text` with its white space made single spaces: odd indexes are words
    shown: tuple[str, ...]  # the same, what lies between words made `inert`
    before: tuple[int, ...]  # the characters before each token (one more at the end: the whole)
    first_at: dict[str, int]  # each distinct word -> the index of its first token


def inert(text: str) -> str:
    """Feed text made unable to mention, link, ping or pair with our formatting markers."""
    return escape(text.translate(_INERT))


def highlighted_snippet(text: str, is_match: WordMatcher, limit: int = 300) -> str:
    """At most `limit` characters of `text` (before escaping) around the first matching word, escaped for
    mrkdwn, with every matching word in bold."""
    tokens, shown, before, first_at = _layout(text)
    hits = is_match.among(first_at.keys())
    first = min(map(first_at.__getitem__, hits), default=0)
    start = 0
    if first and before[first + 1] > limit * 2 // 3:
        # Start a little before the first match, on a word.
        start = max(1, first - 16)
        if start % 2 == 0:  # land on a word token
            start -= 1
    prefix = "…" if start > 0 else ""
    # As many tokens as fit in limit - 1 characters (the last one for "…"), after the prefix.
    end = max(start, bisect_right(before, limit - 1 - len(prefix) + before[start], lo=start) - 1)
    truncated = end < len(tokens)
    if truncated and end > start and end % 2 == 1:  # do not end on what lies between two words
        end -= 1
    window = list(shown[start:end])  # what lies between words already inert
    words_at = 0 if start % 2 else 1  # where the first word of the window is
    # A word (\w+) holds none of the characters that escaping or `inert` change.
    window[words_at::2] = [f"*{word}*" if word in hits else word for word in window[words_at::2]]
    body = "".join(window).strip()
    if truncated:
        body = body.rstrip(" ,.;:") + "…"
    return prefix + body
