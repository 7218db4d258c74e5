"""What the archive says about a topic, as a few bullets, each citing the items it comes from.

    summary = Summarizer().summarize(index, "image captioning")          # extractive, offline
    summary = Summarizer.from_settings(settings).summarize(index, topic)   # abstractive when configured

Retrieval is the archive's own search (the best few items, by BM25). The extractive summary quotes whole
sentences from those items' abstracts, chosen by how many topic words they hold: nothing is invented. A
post's link pasted in ("summarize <link>") is a summary of that item, titled by it (`opening`). With an
OpenAI-compatible endpoint, the model sees only the retrieved items, numbered, and must cite them as [1], [2];
the topic and each item are fenced and marked as data (bot.modeltext). A bullet citing a number that was not
retrieved, or citing nothing, is dropped; any address or link markup in a bullet is removed (a bullet with
fewer than three words left is dropped). Any error, an empty answer, an answer over 1 MiB, or no answer
within `timeout` seconds (bot.modelstream: per read) falls back to the extractive summary.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from msgspec import Struct

from bot.config import Settings
from bot.errors import SummaryError
from bot.models import UNDATED, Item
from bot.modelstream import ModelStreams
from bot.modeltext import fence_rule, fence_token, fenced, item_text, sensible, unlinked
from bot.search.analysis import base
from bot.search.highlight import matching_words, words
from bot.search.index import SearchIndex
from bot.search.query import parse_query, split_filters

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("bot.summarize")

MAX_ITEMS = 6
MAX_BULLETS = 4
MAX_BULLET_CHARS = 600
MIN_SENTENCE_CHARS = 30
RELEVANCE_FLOOR = 0.25  # keep items scoring at least this share of the best item's score
TIMEOUT = 20.0
MAX_RESPONSE_BYTES = 1024 * 1024  # a chat completion of 600 tokens is a few KB
_ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "etc.", "vs.", "fig.", "eq.", "approx.", "cf.", "no.")
_BOUNDARY = re.compile(r"(?<=[.!?])[\"”’)]?\s+(?=[\"“(\[]?[A-Z0-9])")
_CITATION = re.compile(r"\[(\d+(?:\s*[,;]\s*\d+)*)\]")
_BULLET = re.compile(r"^\s*(?:[-*•·]|\d{1,2}[.)])\s+")
# A sentence about who the text is for, not about its subject: "It is aimed primarily at readers who know
# something of machine learning but less about speech recognition." names the topic and says nothing of it.
# ("screen readers" are a subject.)
_FOR_THE_READER = re.compile(r"\b(?<!screen[ -])(?:readers?|audiences?)\b", re.IGNORECASE)
# A sentence saying what the work itself does, as abstracts say it
_THE_WORK = re.compile(r"\b(?:we|our|this (?:paper|work|post|article|study)|here)\b", re.IGNORECASE)


class Bullet(Struct, frozen=True):
    text: str  # plain text, not escaped
    sources: tuple[int, ...]  # 1-based positions in Summary.items


class Summary(Struct, frozen=True):
    topic: str
    bullets: tuple[Bullet, ...]
    items: tuple[Item, ...]  # the cited items, in order of first citation
    method: str  # "extractive" | "abstractive"
    model: str | None = None
    searched_for: str | None = None  # the topic as searched, when a misspelt word was searched as another
    note: str | None = None  # what the search said beside its results (bot.search.index.Found.note)

    @property
    def about(self) -> str:
        """The topic as searched: typed right when a misspelt word was searched as another; its words, without
        the filters (`filters`)."""
        return self.searched_for or split_filters(self.topic)[0] or self.topic

    @property
    def filters(self) -> str:
        """The filters typed with the topic ("type:update"), said beside it, not as words of it ("" when it is
        only filters: then they are the topic)."""
        words, filters = split_filters(self.topic)
        return filters if words else ""

    @property
    def first_day(self) -> date:
        """The first day of the items whose date is known (UNDATED's when none is)."""
        return min(self._dated, default=UNDATED).date()

    @property
    def last_day(self) -> date:
        return max(self._dated, default=UNDATED).date()

    @property
    def span(self) -> str:
        """The days the items span, as people read them: "2026-10-02", "2024-01-08 to 2026-10-02", with
        " (3 of unknown date)" when some dates are not known (some demo posts: bot.demo)."""
        dated = self._dated
        unknown = len(self.items) - len(dated)
        if not dated:
            return "dates unknown"
        first, last = f"{self.first_day:%Y-%m-%d}", f"{self.last_day:%Y-%m-%d}"
        return (first if first == last else f"{first} to {last}") + \
            (f" ({unknown} of unknown date)" if unknown else "")

    @property
    def _dated(self) -> list[datetime]:
        return [item.published for item in self.items if item.published != UNDATED]

    def text(self) -> str:
        """The bullets as plain text with [n] citations."""
        return "\n".join(f"- {b.text} " + "".join(f"[{n}]" for n in b.sources) for b in self.bullets)

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "summary": self.text(),
            "items": [{"id": i.id, "title": i.title, "link": i.link} for i in self.items],
        }


class Retrieved(NamedTuple):
    items: list[Item]  # the items most about the topic, best first
    terms: list[str]  # the terms the sentences quoted are chosen by
    prefix_last: bool  # whether the last term is a prefix
    searched_for: str | None  # the topic as searched when a misspelt word was searched as another
    note: str | None = None  # what the search said beside its results (Found.note): an open quote, say
    named: Item | None = None  # the one item a link pasted in names: the summary is of it
    about: str = ""  # the topic as a person reads it: the named item's title, a link's address (Slack sends
    # <https://…>), else the topic as typed (`retrieve` always says)


def retrieve(index: SearchIndex, topic: str, limit: int = MAX_ITEMS) -> Retrieved:
    """The items most about the topic (from the search index), and how their sentences are chosen."""
    query = parse_query(topic)  # raises SearchError with a one-line message
    found = index.search(query, limit)
    hits = found.hits
    about = " ".join(query.links) or topic
    if len(hits) == 1 and hits[0].item.link in query.links:  # "summarize <link>": that item
        return Retrieved([hits[0].item], [], False, None, found.note, hits[0].item, hits[0].item.title)
    # the sentences quoted hold the words searched (a misspelt one as typed right), the last as it matched
    terms, prefix_last = list(found.as_searched(query).content), found.last_as_prefix(query)
    if not hits:
        return Retrieved([], terms, prefix_last, found.searched_for, found.note, about=about)
    best = hits[0].score
    items = [h.item for h in hits if best <= 0 or h.score >= best * RELEVANCE_FLOOR]
    return Retrieved(items, terms, prefix_last, found.searched_for, found.note, about=about)


def sentences(text: str) -> list[str]:
    """The complete sentences of an abstract, verbatim (a fragment cut off by the feed is left out)."""
    found: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        start = 0
        for boundary in _BOUNDARY.finditer(paragraph):
            head = paragraph[start : boundary.start()].rstrip()
            if head.lower().endswith(_ABBREVIATIONS) or re.search(r"(?:^|\s)[A-Z]\.$", head):
                continue
            found.append(paragraph[start : boundary.end()].strip())
            start = boundary.end()
        found.append(paragraph[start:].strip())
    return [s for s in found if len(s) >= MIN_SENTENCE_CHARS and s[-1] in ".!?\"”’)" and not s.endswith("…")]


def quotable(item: Item) -> list[str]:
    """The sentences of an item's abstract a summary may quote: complete, at most MAX_BULLET_CHARS, and not
    about the text's readers."""
    return [said for said in sentences(item.summary)
            if len(said) <= MAX_BULLET_CHARS and not _FOR_THE_READER.search(said)]


def opening(item: Item, limit: int = MAX_BULLETS) -> list[Bullet]:
    """An item's own summary, for "summarize <link>": its abstract's first sentence (what it is about), then
    those saying what the work does ("We propose", "In this paper", "our"), or else the next ones, in the
    abstract's order, `limit` at most, each citing it."""
    found = quotable(item)
    chosen = found[:1] + [s for s in found[1:] if _THE_WORK.search(s)][: limit - 1]
    chosen += [s for s in found if s not in chosen][: limit - len(chosen)]
    return [Bullet(s, (1,)) for s in found if s in chosen]


def extractive(
    items: list[Item], terms: list[str], prefix_last: bool, limit: int = MAX_BULLETS
) -> list[Bullet]:
    """One quoted sentence per item (the one holding most topic words, earlier items and sentences first;
    never one about the text's readers), citing the item by its 1-based position in `items`."""
    candidates: list[tuple[float, int, int, str]] = []
    for rank, item in enumerate(items):
        found = quotable(item)
        if not found:
            continue
        vocabulary = set(words(" ".join(found)))
        per_term = [
            matching_words(vocabulary, [t], prefix_last=prefix_last and i == len(terms) - 1)
            for i, t in enumerate(terms)
        ]
        # a word counts when it is the term itself, inflected ("captions" for "captioning"), not one that
        # merely shares its stem ("aligns" is not about "alignment")
        bases = [{base(t)} for t in terms]
        best: tuple[float, int, str] | None = None
        for position, sentence in enumerate(found):
            present = {w.lower() for w in words(sentence)}
            covered = sum(1 for n, hits in enumerate(per_term)
                          if any(base(w) in bases[n] or (prefix_last and n == len(terms) - 1
                                                          and w.startswith(terms[n].lower()))
                                 for w in hits & present))
            score = covered * 10 - position * 0.5
            if best is None or score > best[0]:
                best = (score, covered, sentence)
        assert best is not None
        candidates.append((best[0] - rank, rank, best[1], best[2]))
    if any(c[2] for c in candidates):  # some sentence holds a topic word: leave out those holding none
        candidates = [c for c in candidates if c[2]]
    candidates.sort(key=lambda c: (-c[0], c[1]))
    bullets: list[Bullet] = []
    for _score, rank, _covered, sentence in candidates:
        same = next((b for b in bullets if b.text == sentence), None)
        if same is not None:
            bullets[bullets.index(same)] = Bullet(sentence, (*same.sources, rank + 1))
        elif len(bullets) < limit:
            bullets.append(Bullet(sentence, (rank + 1,)))
    return bullets


def cite(topic: str, bullets: list[Bullet], retrieved: list[Item], method: str, model: str | None,
         searched_for: str | None = None, note: str | None = None) -> Summary:
    """Renumber citations to the cited items only, in order of first citation."""
    order: list[int] = []
    for bullet in bullets:
        for n in bullet.sources:
            if n not in order:
                order.append(n)
    renumber = {old: new for new, old in enumerate(order, 1)}
    return Summary(
        topic=topic,
        bullets=tuple(Bullet(b.text, tuple(renumber[n] for n in b.sources)) for b in bullets),
        items=tuple(retrieved[n - 1] for n in order),
        method=method,
        model=model,
        searched_for=searched_for,
        note=note,
    )


class Summarizer:
    """Extractive by default; abstractive through an OpenAI-compatible chat-completions endpoint when
    `api_url` is set. `client` (an httpx.Client) and `timeout` are injectable for tests. Every request to the
    model (a summary's, a written answer's) is open in `streams` while it runs: `streams.close_all()` ends
    them all at once (serve's shutdown)."""

    def __init__(
        self,
        api_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        *,
        client: httpx.Client | None = None,
        timeout: float = TIMEOUT,
    ) -> None:
        self.api_url = api_url.rstrip("/") if api_url else None
        self.api_key = api_key
        self.model = model or "gpt-4o-mini"
        self.client = client
        self.timeout = timeout
        self.streams = ModelStreams()

    @classmethod
    def from_settings(cls, settings: Settings, **kwargs: Any) -> Summarizer:
        return cls(settings.summary_api_url, settings.summary_api_key, settings.summary_model, **kwargs)

    @property
    def abstractive(self) -> bool:
        return self.api_url is not None

    def summarize(self, index: SearchIndex, topic: str) -> Summary | None:
        """The summary, or None when nothing in the archive matches the topic. Raises SearchError for a
        topic that is not a usable query (too long, no words)."""
        retrieved = retrieve(index, topic)
        items, searched_for, note = retrieved.items, retrieved.searched_for, retrieved.note
        if not items:
            return None
        about = retrieved.about  # a link pasted in: the item's title, or its address
        if self.abstractive:
            try:
                bullets = self.ask_model(split_filters(about)[0] or about, items)  # the words, not type:
                return cite(about, bullets, items, "abstractive", self.model, searched_for, note)
            except SummaryError as exc:
                log.warning("event=summary_fallback reason=%r", str(exc))
        named = retrieved.named  # a link pasted in: the summary is of that item
        bullets = opening(named) if named else extractive(items, retrieved.terms, retrieved.prefix_last)
        if not bullets:  # abstracts without a complete sentence: cite the items by title alone
            bullets = [Bullet(item.title, (n,)) for n, item in enumerate(items[:MAX_BULLETS], 1)]
        return cite(about, bullets, items, "extractive", None, searched_for, note)

    # the model ------------------------------------------------------------------------------------------

    def ask_model(self, topic: str, items: list[Item]) -> list[Bullet]:
        """Bullets from the model, every citation checked against the retrieved items."""
        content = self._complete(prompt(topic, items))
        bullets = parse_bullets(content, len(items))
        if not bullets:
            raise SummaryError("the model's answer had no bullet citing a retrieved item")
        return bullets

    def _complete(self, messages: list[dict[str, str]]) -> str:
        """One chat completion, read in the calling thread: `timeout` seconds in all (connecting, the headers
        and the body; a watchdog ends a read still waiting at the deadline) and at most MAX_RESPONSE_BYTES of
        body, checked per read, so a slow or endless endpoint costs neither a thread nor memory."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = {"model": self.model, "messages": messages, "temperature": 0.2, "max_tokens": 600}
        url = f"{self.api_url}/chat/completions"
        with self.streams.post(self.client, url, body, headers, seconds=self.timeout,
                               max_bytes=MAX_RESPONSE_BYTES) as reading:
            raw = reading.body()
        try:
            content = json.loads(raw)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise SummaryError("the summary endpoint's answer is not a chat completion") from None
        if not isinstance(content, str) or not content.strip():
            raise SummaryError("the summary endpoint gave an empty answer")
        return content


def prompt(topic: str, items: list[Item]) -> list[dict[str, str]]:
    """The model's messages: the topic and each item fenced as data (bot.modeltext), the rules first."""
    token = fence_token()
    sources = "\n\n".join(fenced(f"ITEM {n}", item_text(item), token) for n, item in enumerate(items, 1))
    system = (
        "You summarize what Apple Machine Learning Research has published about a topic. Use only the "
        f"numbered items given; never add facts from elsewhere. Write 2 to {MAX_BULLETS} bullets, one per "
        "line, each starting with '- ', one or two sentences long, and ending with the numbers of the items "
        f"it is based on, in square brackets, like [1] or [2][3]. Only numbers from 1 to {len(items)} exist. "
        f"{fence_rule(token, 'the topic')} No heading, no other text."
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Topic:\n{fenced('TOPIC', ' '.join(topic.split()), token)}\n\n"
                                    f"Items:\n\n{sources}"},
    ]


def parse_bullets(content: str, retrieved: int) -> list[Bullet]:
    """Bullets from a model's answer. A bullet citing nothing, or citing a number outside 1..retrieved, is
    dropped (logged): what it says is not grounded in the retrieved items. So is one that lost a link and has
    too little left or sent its reader to it (bot.modeltext)."""
    bullets: list[Bullet] = []
    for line in content.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        numbers = [int(n) for group in _CITATION.findall(line) for n in re.findall(r"\d+", group)]
        text = " ".join(_CITATION.sub("", line).replace("**", "").split()).rstrip(" ,;")
        if not numbers or not text:
            log.info("event=summary_bullet_dropped reason=no_citation")
            continue
        bad = [n for n in numbers if not 1 <= n <= retrieved]
        if bad:
            log.warning("event=summary_bullet_dropped reason=cites_unretrieved numbers=%s", bad)
            continue
        text, links, sends_away = unlinked(text)
        if links:  # a bullet links only to the items it cites (listed under it)
            kept = sensible(text) and not sends_away
            log.warning("event=summary_links_removed links=%d bullet=%s", links,
                        "kept" if kept else "dropped")
            if not kept:
                continue
        if len(text) > MAX_BULLET_CHARS:
            text = text[: MAX_BULLET_CHARS - 1].rsplit(" ", 1)[0] + "…"
        bullets.append(Bullet(text, tuple(dict.fromkeys(numbers))))
        if len(bullets) == MAX_BULLETS:
            break
    return bullets
