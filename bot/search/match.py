"""Keyword matching for subscriptions: a keyword matches an item when it occurs in the title or summary as a
word, stemmed (Porter, as the archive's search), case-insensitive.

It runs through an in-memory SQLite FTS5 table with the porter tokenizer, so subscriptions and search agree on
what a word is, whichever store holds the archive.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Sequence

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_KEYWORDS = 20
MAX_KEYWORD_CHARS = 60


def normalize_keywords(raw: Iterable[str]) -> list[str]:
    """Keywords as stored: lower case, words only (a quoted phrase keeps its words), no duplicates."""
    result: list[str] = []
    for keyword in raw:
        words = _WORD.findall(keyword.lower())
        if not words:
            continue
        phrase = " ".join(words)[:MAX_KEYWORD_CHARS]
        if phrase not in result:
            result.append(phrase)
    return result[:MAX_KEYWORDS]


def split_keywords(text: str) -> list[str]:
    """Split `subscribe` text into keywords: words, or "quoted phrases"; commas separate too."""
    parts = re.findall(r'"([^"]*)"|“([^”]*)”|([^\s,"]+)', text)
    return normalize_keywords(next(p for p in group if p) for group in parts if any(group))


def matched_keywords(title: str, summary: str, keywords: Sequence[str]) -> list[str]:
    """The keywords (as given) that occur in the title or summary."""
    if not keywords:
        return []
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE doc USING fts5(title, summary, tokenize='porter unicode61')")
        conn.execute("INSERT INTO doc(title, summary) VALUES (?, ?)", (title, summary))
        found = []
        for keyword in keywords:
            words = _WORD.findall(keyword.lower())
            if not words:
                continue
            phrase = '"' + " ".join(words) + '"'
            if conn.execute("SELECT 1 FROM doc WHERE doc MATCH ?", (phrase,)).fetchone():
                found.append(keyword)
        return found
    finally:
        conn.close()
