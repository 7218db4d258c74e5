"""Which words of a text match a query, and a snippet with those words in bold, safe for mrkdwn.

Matching agrees with the archive's search: words are compared through SQLite FTS5's porter tokenizer (so
"captions" matches "captioning"), and the last term may match as a prefix, exactly as `Store.search` ranks.

    is_match = word_matcher(["caption"], prefix_last=False)
    highlighted_snippet("Image captioning & <b>", is_match)   ->  "Image *captioning* &amp; &lt;b&gt;"

Bolding happens on whole word tokens, each escaped on its own, so a marker can never land inside an entity
(`&amp;`), and the characters that pair up as mrkdwn formatting in feed text (`*`, `` ` ``, `~`) are replaced
by look-alikes, so they cannot swallow or break the bold markers we add.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence

from bot.blocks import escape

_WORD = re.compile(r"\w+", re.UNICODE)
_TOKENS = re.compile(r"(\w+)", re.UNICODE)
# Look-alikes for the characters that pair up as mrkdwn formatting.
_INERT = str.maketrans({"*": "\u2217", "`": "\u02cb", "~": "\u223c"})

WordMatcher = Callable[[str], bool]


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def matching_words(candidates: Iterable[str], terms: Sequence[str], *, prefix_last: bool = False) -> set[str]:
    """The candidates (compared lower case) that match any term the way the archive's search does."""
    unique = sorted({w.lower() for w in candidates if w})
    cleaned = [re.sub(r"[^\w]", "", t.lower()) for t in terms]
    if not unique or not any(cleaned):
        return set()
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE w USING fts5(word, tokenize='porter unicode61')")
        conn.executemany("INSERT INTO w(rowid, word) VALUES (?, ?)", list(enumerate(unique, 1)))
        found: set[str] = set()
        for index, term in enumerate(cleaned):
            if not term:
                continue
            expression = f'"{term}"' + ("*" if prefix_last and index == len(cleaned) - 1 else "")
            for (rowid,) in conn.execute("SELECT rowid FROM w WHERE w MATCH ?", (expression,)):
                found.add(unique[rowid - 1])
        return found
    finally:
        conn.close()


def word_matcher(terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """A predicate `word -> bool`, with answers cached per word."""
    cache: dict[str, bool] = {}

    def is_match(word: str) -> bool:
        key = word.lower()
        if key not in cache:
            cache[key] = bool(matching_words([key], terms, prefix_last=prefix_last))
        return cache[key]

    return is_match


def matcher_for_text(text: str, terms: Sequence[str], *, prefix_last: bool = False) -> WordMatcher:
    """Like `word_matcher`, answering for every word of `text` with one lookup."""
    hits = matching_words(words(text), terms, prefix_last=prefix_last)
    fallback = word_matcher(terms, prefix_last=prefix_last)
    known = {w.lower() for w in words(text)}
    return lambda word: word.lower() in hits if word.lower() in known else fallback(word)


def inert(text: str) -> str:
    """Feed text made unable to mention, link, ping or pair with our formatting markers."""
    return escape(text.translate(_INERT))


def highlighted_snippet(text: str, is_match: WordMatcher, limit: int = 300) -> str:
    """At most `limit` characters of `text` (before escaping) around the first matching word, escaped for
    mrkdwn, with every matching word in bold."""
    text = " ".join(text.split())
    tokens = _TOKENS.split(text)  # odd indexes are words
    first = next((i for i in range(1, len(tokens), 2) if is_match(tokens[i])), None)
    start = 0
    if first is not None:
        offset = sum(len(t) for t in tokens[:first])
        if offset + len(tokens[first]) > limit * 2 // 3:
            # Start a little before the first match, on a word.
            start = max(1, first - 16)
            if start % 2 == 0:  # land on a word token
                start -= 1
    prefix = "…" if start > 0 else ""
    chosen: list[str] = []
    used = len(prefix)
    truncated = False
    for index in range(start, len(tokens)):
        token = tokens[index]
        if used + len(token) > limit - 1:
            truncated = True
            break
        chosen.append(token)
        used += len(token)
    if truncated:
        while chosen and not _WORD.fullmatch(chosen[-1]):
            chosen.pop()
    out = []
    for token in chosen:
        if _WORD.fullmatch(token) and is_match(token):
            out.append(f"*{escape(token)}*")
        else:
            out.append(inert(token))
    body = "".join(out).strip()
    if truncated:
        body = body.rstrip(" ,.;:") + "…"
    return prefix + body
