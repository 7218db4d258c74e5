"""An answer written by the model from the retrieved abstracts: a short paragraph whose every sentence cites
[n], a listed item; streamed sentence by sentence as the model writes it.

    for sentence in written_sentences(summarizer, question, items):   # each checked as it completes
        post(sentence.markdown())                                      # "Text of the claim [2]."

The model sees only the numbered items (title, date, abstract) and is told to write only what they support
and to end every sentence with its citation; the question and each item are fenced and marked as data
(bot.modeltext), so what they say is never an instruction. Its answer is read as an OpenAI-style event
stream (`"stream": true`, `data: {json}` lines, `data: [DONE]`); a sentence is checked once the next one
starts (or the stream ends): one citing nothing, or a number that was not listed, is dropped (logged),
because what it says is not grounded in the items. A sentence may link only to the items it cites (listed
under the answer, by the bot): any other address or link markup is removed before it is streamed, and a
sentence with fewer than three words left is dropped (one log line each).

A stream that fails (an HTTP error, no answer within the summarizer's timeout, a chunk that is not JSON, a
body past MAX_STREAM_BYTES or a line past MAX_LINE_BYTES, each checked per read, an end before `[DONE]` or a
finish reason, the server stopping) raises SummaryError after the sentences already yielded; the caller
keeps those (each was checked) and says the answer was cut short. `stop` set ends it the same way within a
second (SummaryStopped): the model's response is closed, so it stops writing.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from msgspec import Struct

from bot.errors import SummaryError, SummaryStopped
from bot.models import Item
from bot.modeltext import fence_rule, fence_token, fenced, item_text, sensible, unlinked

if TYPE_CHECKING:
    from bot.summarize import Summarizer

log = logging.getLogger("bot.written")

MAX_SENTENCES = 6
MAX_SENTENCE_CHARS = 600
MAX_STREAM_BYTES = 256 * 1024  # the whole event stream (400 tokens are some 60 KB of events)
MAX_LINE_BYTES = 16 * 1024  # one event line (a token's chunk is some 200 bytes)
_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "etc.", "vs.", "fig.", "eq.", "approx.", "cf.", "no.")
_CITATION = re.compile(r"\[(\d{1,3}(?:\s*[,;]\s*\d{1,3})*)\]")
# The end of a sentence: its stop, any citations written after it, then the start of the next sentence.
_END = re.compile(r"[.!?](?:\s*\[\d{1,3}(?:\s*[,;]\s*\d{1,3})*\])*\s+(?=[\"“(\[]?[A-Z0-9])")


class Sentence(Struct, frozen=True):
    text: str  # plain text without its citations, not escaped
    sources: tuple[int, ...]  # 1-based positions in the listed items

    def markdown(self, escape: bool = True) -> str:
        text = _inert(self.text) if escape else self.text
        cited = "".join(f"[{n}]" for n in self.sources)
        if text[-1:] in ".!?":
            return f"{text[:-1]} {cited}{text[-1]}"
        return f"{text} {cited}."


def prompt(question: str, items: list[Item]) -> list[dict[str, str]]:
    """The model's messages: the question and each item fenced as data (bot.modeltext), the rules first."""
    token = fence_token()
    sources = "\n\n".join(fenced(f"ITEM {n}", item_text(item), token) for n, item in enumerate(items, 1))
    system = (
        "You answer questions about what Apple Machine Learning Research has published, using only the "
        "numbered items given. Write one short paragraph of 2 to 4 sentences. Write only claims the items "
        "support; if they do not answer the question, say what they do cover. End every sentence with the "
        f"numbers of the items it is based on, in square brackets before the full stop, like: ... [2]. Only "
        f"numbers from 1 to {len(items)} exist. {fence_rule(token, 'the question')} No heading, no list, no "
        "other text."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Question:\n{fenced('QUESTION', ' '.join(question.split()), token)}\n\n"
                                    f"Items:\n\n{sources}"},
    ]


def written_sentences(summarizer: Summarizer, question: str, items: list[Item], *,
                      stop: threading.Event | None = None) -> Iterator[Sentence]:
    """The model's sentences, each checked (see the module docstring); raises SummaryError when the stream
    fails, and SummaryStopped once `stop` is set (the model's response closed within a second), after the
    sentences it yielded."""
    buffer = ""
    count = 0
    for delta in stream_chat(summarizer, prompt(question, items), stop=stop):
        buffer += delta
        while count < MAX_SENTENCES:
            end = _sentence_end(buffer)
            if end is None:
                break
            sentence = check(buffer[:end], len(items))
            buffer = buffer[end:]
            if sentence is not None:
                if stop is not None and stop.is_set():
                    raise SummaryStopped("the answer was stopped")
                count += 1
                yield sentence
        if count >= MAX_SENTENCES:
            return
    if buffer.strip() and count < MAX_SENTENCES:
        sentence = check(buffer, len(items))
        if sentence is not None:
            yield sentence


def _sentence_end(text: str) -> int | None:
    for match in _END.finditer(text):
        head = text[: match.start() + 1]
        if head.lower().endswith(_ABBREVIATIONS) or re.search(r"(?:^|\s)[A-Z]\.$", head):
            continue
        return match.end()
    return None


def check(raw: str, listed: int) -> Sentence | None:
    """A sentence with its citations and without any link (bot.modeltext.unlinked: it may link only to the
    items it cites, listed under the answer), or None (logged) when it cites nothing or an item not listed,
    or has too little left once its links are gone, or sent its reader to one of them."""
    numbers = [int(n) for group in _CITATION.findall(raw) for n in re.findall(r"\d+", group)]
    written = " ".join(_CITATION.sub("", raw).replace("**", "").split())
    if not written.strip(".!?,;: "):
        return None  # a stray citation or a blank between sentences
    if not numbers:
        log.info("event=written_sentence_dropped reason=no_citation")
        return None
    bad = sorted({n for n in numbers if not 1 <= n <= listed})
    if bad:
        log.warning("event=written_sentence_dropped reason=cites_unlisted numbers=%s", bad[:5])
        return None
    text, links, sends_away = unlinked(written)
    text = re.sub(r"\s+([.!?,;:])", r"\1", text).strip()
    if links:
        kept = sensible(text) and not sends_away
        log.warning("event=written_links_removed links=%d sentence=%s", links, "kept" if kept else "dropped")
        if not kept:
            return None
    if len(text) > MAX_SENTENCE_CHARS:
        text = text[: MAX_SENTENCE_CHARS - 1].rsplit(" ", 1)[0] + "…"
    return Sentence(text, tuple(dict.fromkeys(numbers)))


def _inert(text: str) -> str:
    """Model text made inert for Slack: no mention, link or markdown link can come of it."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text.replace("](", "] (").replace("@", "@\u2060")


# --- the model's event stream -----------------------------------------------------------------------------


def stream_chat(summarizer: Summarizer, messages: list[dict[str, str]], *,
                stop: threading.Event | None = None) -> Iterator[str]:
    """The content deltas of one streamed chat completion, within the summarizer's timeout in all, each read
    checked as it arrives (bot.modelstream); `stop` set closes the response within WATCH_EVERY seconds and
    raises SummaryStopped."""
    headers = {"Authorization": f"Bearer {summarizer.api_key}"} if summarizer.api_key else {}
    body = {"model": summarizer.model, "messages": messages, "temperature": 0.2, "max_tokens": 400,
            "stream": True}
    url = f"{summarizer.api_url}/chat/completions"
    with summarizer.streams.post(summarizer.client, url, body, headers, seconds=summarizer.timeout,
                                 max_bytes=MAX_STREAM_BYTES, stop=stop) as reading:
        for raw in reading.lines(MAX_LINE_BYTES):
            line = raw.decode("utf-8", errors="replace")
            if not line.startswith("data:"):
                continue  # a blank line between events, a comment, an event name
            data = line[5:].strip()
            if data == "[DONE]":
                return
            delta, finished = _chunk(data)
            if delta:
                yield delta
            if finished:
                return
        raise SummaryError("the summary endpoint's stream stopped before its end")


def _chunk(data: str) -> tuple[str, bool]:
    """(the content delta, whether the model finished) of one event's data."""
    try:
        choice = json.loads(data)["choices"][0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        if not isinstance(content, str):
            raise TypeError("content is not text")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise SummaryError("the summary endpoint sent a malformed chunk") from None
    return content, bool(choice.get("finish_reason"))
