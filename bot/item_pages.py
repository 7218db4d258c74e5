"""An item's own page on the site: its paper's link, its code and where it was published.

Every research post at https://machinelearning.apple.com/research/<slug> is a page of the same Next.js site
as the research index (`bot.research_index`). What stored copies of such pages show (renderings of them as
text and Markdown, kept in tests/data/item_pages/stored/ with where each was found; no stored copy holds a
page's HTML, so its element names and classes are not known and nothing here depends on them):

- the site's navigation (Overview, Research Highlights, Publications, Events, Work with us);
- the post's header, in this order: its tags, links to the site's lists of posts ("research area Computer
  Vision" to /research/?domain=…, and for a paper of a conference "conference NeurIPS" to
  /research/?event=NeurIPS, or "Workshop at ICLR" to ?event=ICLR%20Workshop: the event's name, never a
  year); "content type paper" (or "highlight") | "published June 2025" (the post's month, not the
  conference's: a post of February 2023 tells of a workshop at EMNLP 2022); the title; "Authors" and the
  names; a "View publication" link (arXiv's abstract page, seen on every paper whose copy kept its links);
  on some, "View source code (GitHub)"; "Copy Bibtex";
- the abstract, sometimes opened by "This paper was accepted at the Workshop on … at ICLR 2026."; footnotes,
  figures;
- "Related readings and updates." and teasers of other posts, each with its own tags and "Read more";
  a closing banner, breadcrumbs and the footer.

So: the paper is the "View publication" link, the code the "View source code" link (or a repository the
text calls code), the venue the conference tag, with the year and the workshop when a sentence of the post
names the same conference (`bot.paper_facts`). Whether a post's page is rendered on the server, as the
index is, no stored copy says: a page whose HTML holds no text is read from the string fields of its
__NEXT_DATA__ script's props.pageProps.post (a shape modelled on the index's, not seen). Only what the page
says before "Related readings and updates", outside its navigation and footer, is read; on a highlight
(which tells of other papers) neither an unnamed paper link nor a sentence counts. A field the page does not
say is None; a page that cannot be fetched or parsed changes nothing stored.

    parse(content, page_url) -> PageFacts            (pure; ItemPageError for a page that is no page)
    read(client, url, page_url) -> PageFacts         (one polite request: the bot's User-Agent, 15 s, 2 MiB)
    enrich_pages(store, client, origin, item_ids) -> PagesResult       (the poll's step, and backfill's)
    enricher(index_url) -> the poll's enrichment: the index (`research_index.enrich`), then the pages

Pace: the poll reads the pages of its new items, then at most POLL_PAGES more (those of items younger than
RECHECK_WITHIN not read for RECHECK_AFTER: how a later code release or venue is found; then pages never read),
POLL_PACE seconds apart and within POLL_SECONDS; a page the site failed to serve stops the run until the next
poll. `backfill` reads every page never read, BACKFILL_PACE seconds apart.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import httpx
from msgspec import Struct

from bot import research_index
from bot.errors import FeedError, FeedHTTPError, FeedNetworkError, FeedTimeout, ItemPageError, StoreError
from bot.feed import fetch
from bot.models import Fetched
from bot.paper_facts import (
    MAX_LINK_CHARS,
    MAX_TEXT_CHARS,
    Anchor,
    content_type,
    pick_code,
    pick_paper,
    pick_venue,
)
from bot.store import Store, utcnow

log = logging.getLogger("bot.item_pages")

MAX_PAGE_BYTES = 2 * 1024 * 1024
PAGE_TIMEOUT = 15.0  # seconds for one page, connecting, redirects and body together
MAX_ANCHORS = 2_000
POLL_PAGES = 3  # pages a poll reads besides its new items'
POLL_PACE = 0.2  # seconds between two page requests in a poll (a poll reads a handful)
POLL_SECONDS = 30.0  # a poll's page reading stops after this long (the rest waits for the next poll)
BACKFILL_PACE = 1.0  # seconds between two page requests of `backfill` (hundreds of them)
RELATED = "related readings and updates"  # the heading after which a page lists other posts

Progress = Callable[[str], None]


class PageFacts(Struct, frozen=True):
    """What an item's page says: its paper's link, its code's, where it was published (None: not said)."""

    paper_url: str | None = None
    code_url: str | None = None
    venue: str | None = None


class PagesResult(Struct):
    """One run of `enrich_pages`: pages read, items whose paper, code or venue changed, pages that failed,
    follow-up replies queued, and pages left for later (the run's time was up, or the site failed)."""

    read: int = 0
    changed: int = 0
    failed: int = 0
    followups: int = 0
    left: int = 0


# --- reading a page --------------------------------------------------------------------------------------


def read(client: httpx.Client, url: str, page_url: str) -> PageFacts:
    """Fetch `url` (one GET: the client's User-Agent, PAGE_TIMEOUT, MAX_PAGE_BYTES) and parse it as the page
    of the item at `page_url`. Raises ItemPageError (`transient` when the site timed out, could not be
    reached, or answered 429 or 5xx)."""
    try:
        answer = fetch(client, url, max_bytes=MAX_PAGE_BYTES, total_timeout=PAGE_TIMEOUT,
                       accept=research_index.ACCEPT_HTML)
    except FeedError as exc:
        status = exc.status if isinstance(exc, FeedHTTPError) else None
        transient = isinstance(exc, FeedNetworkError | FeedTimeout) or status in (429, 500, 502, 503, 504)
        raise ItemPageError(f"item page: {exc}", transient=transient) from None
    if not isinstance(answer, Fetched):  # no validators are sent
        raise ItemPageError("item page: 304 Not Modified to an unconditional request")
    return parse(answer.content, page_url)


def parse(content: bytes | str, page_url: str) -> PageFacts:
    """The facts of an item's page (see the module docstring). Raises ItemPageError for what is no page: not
    HTML, a broken __NEXT_DATA__ script (a page cut short), or no text at all."""
    text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
    head = text[:4096].lower()
    if "<html" not in head and "<body" not in head and "<!doctype html" not in head:
        raise ItemPageError("item page: the answer is not an HTML page")
    script = research_index.next_data(text)
    data: Any = None
    if script is None and "__next_data__" in text[-MAX_PAGE_BYTES:].lower():
        raise ItemPageError("item page: it ends inside its __NEXT_DATA__ script (cut short)")
    if script is not None:
        try:
            data = json.loads(script)
        except (ValueError, RecursionError):
            raise ItemPageError("item page: its __NEXT_DATA__ script is not valid JSON") from None
    page = _Reader.read(text)
    if len(page.text.strip()) < 40:  # rendered in the browser only: the post's own fields, if the data has it
        post = _dig(data, ("props", "pageProps", "post"))
        if isinstance(post, dict):
            fields = [v for k, v in post.items() if isinstance(v, str) and "related" not in k.lower()]
            page = _Reader.read("\n".join(fields[:50]))
    if not page.text.strip():
        raise ItemPageError("item page: it holds no text")
    anchors = [*page.anchors, *_bare_links(page.text)]
    highlight = content_type(page.anchors) == "highlight"  # it tells of other papers: only what it names
    return PageFacts(pick_paper(anchors, page_url, named_only=highlight), pick_code(anchors, page_url),
                     pick_venue(page.anchors, page.text, page_url, sentences=not highlight))


def _dig(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class _Page(Struct):
    text: str
    anchors: list[Anchor]


class _Reader(HTMLParser):
    """A page's text and links, outside scripts, styles, the head, navigation and footer, up to the "Related
    readings and updates" heading; bounded in what it keeps. (A <header> is read: an article's own header
    may hold the link to its paper.)"""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "nav", "footer"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skipping: list[str] = []
        self.parts: list[str] = []
        self.size = 0
        self.anchors: list[Anchor] = []
        self.open: tuple[str, list[str], str] | None = None  # (href, its text, the words before it)
        self.stopped = False

    @classmethod
    def read(cls, html: str) -> _Page:
        reader = cls()
        try:
            reader.feed(html)
            reader.close()
        except (AssertionError, ValueError):  # html.parser gives up on some broken markup: keep what it read
            pass
        return _Page(" ".join(reader.parts), reader.anchors)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping.append(tag)
        elif tag == "a" and not self.skipping and not self.stopped:
            href = next((v for k, v in attrs if k == "href" and v), None)
            if href is not None and len(self.anchors) < MAX_ANCHORS:
                self.open = (href.strip()[:2 * MAX_LINK_CHARS], [], " ".join(self.parts[-12:])[-120:])
        elif tag in ("p", "div", "li", "br", "h1", "h2", "h3", "h4", "section", "span", "td"):
            self._add(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and tag in self.skipping:
            while self.skipping and self.skipping.pop() != tag:
                pass
        elif tag == "a" and self.open is not None:
            href, words, before = self.open
            self.anchors.append(Anchor(href, " ".join(" ".join(words).split())[:200], before))
            self.open = None

    def handle_data(self, data: str) -> None:
        if self.skipping or self.stopped:
            return
        if RELATED in " ".join(data.lower().split()):
            self.stopped = True
            self.open = None
            return
        if self.open is not None:
            self.open[1].append(data)
        self._add(data)

    def _add(self, data: str) -> None:
        if self.size < MAX_TEXT_CHARS:
            self.parts.append(data)
            self.size += len(data)


_BARE = re.compile(r"https?://[^\s<>\"'()\[\]{}|\\^`]+", re.IGNORECASE)


def _bare_links(text: str) -> list[Anchor]:
    """Addresses written out in the text ("code is available at https://github.com/apple/ml-x."), each with
    the words before it."""
    return [Anchor(found.group(0).rstrip(".,;:!?"), "", text[max(0, found.start() - 120):found.start()])
            for found in _BARE.finditer(text[:MAX_TEXT_CHARS])][:MAX_ANCHORS]


# --- enrichment ------------------------------------------------------------------------------------------


def page_url_for(link: str, origin: str) -> str | None:
    """Where to read the page of the item at `link`: its path under /research/ on `origin` (the research
    index's site, so pages come from where the index does); None for another kind of post."""
    path = urlsplit(link).path
    if not path.startswith("/research/") or len(path) <= len("/research/"):
        return None
    return origin.rstrip("/") + path


def origin_of(index_url: str) -> str | None:
    """The site (scheme and host) of a research index URL; None for a file."""
    parts = urlsplit(index_url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}"


def enrich_pages(
    store: Store, client: httpx.Client, origin: str, item_ids: Sequence[str] = (), *,
    more: int | None = POLL_PAGES, recheck: bool = True, pace: float = POLL_PACE,
    budget: float | None = POLL_SECONDS, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic, progress: Progress | None = None,
    now: Callable[[], datetime] = utcnow,
) -> PagesResult:
    """Read the pages of `item_ids` (research items not read yet), then of up to `more` other items (None:
    every item never read; with `recheck`, items whose page is due to be read again), `pace` seconds
    apart, for at most `budget` seconds (`now` gives the date that decides which pages are due); store what
    each says (`Store.record_page`, which queues the
    follow-up replies) or that it failed (`Store.page_failed`, nothing else changes). A failure of the site
    itself (timeout, no connection, 429, 5xx) ends the run: the rest waits. Never raises a page's error; a
    StoreError is raised."""
    result = PagesResult()
    due = store.pages_due(item_ids, more=more, recheck=recheck, at=now())
    started = clock()
    for n, item in enumerate(due):
        if budget is not None and clock() - started >= budget:
            result.left = len(due) - n
            break
        url = page_url_for(item.link, origin)
        if url is None:
            continue
        if n:
            sleep(pace)
        try:
            facts = read(client, url, item.link)
        except ItemPageError as exc:
            result.failed += 1
            store.page_failed(item.id, str(exc), at=now())
            log.warning("event=page_failed item=%s error=%r", item.id, str(exc))
            if exc.transient:
                result.left = len(due) - n - 1
                break
            continue
        changed, followups = store.record_page(item.id, venue=facts.venue, paper_url=facts.paper_url,
                                               code_url=facts.code_url, at=now())
        result.read += 1
        result.changed += changed
        result.followups += len(followups)
        if progress is not None and (n + 1) % 25 == 0:
            progress(f"read {n + 1:,} of {len(due):,} pages …")
    if due:
        log.info("event=pages read=%d changed=%d failed=%d followups=%d left=%d", result.read,
                 result.changed, result.failed, result.followups, result.left)
    return result


def enricher(
    index_url: str | None, *, pace: float = POLL_PACE, now: Callable[[], datetime] = utcnow,
) -> Callable[[Store, httpx.Client, Sequence[str]], list[str]] | None:
    """The poll's enrichment step beside a research index (None: none): the new items' full abstracts and
    authors from the index (`research_index.enricher`, whose answer, the ids of the items it found authors
    for, is the step's: the poller routes them by their authors), then their pages and a few more
    (`enrich_pages`). Never raises."""
    index_step = research_index.enricher(index_url)
    if index_step is None or not index_url:
        return None
    origin = origin_of(index_url)

    def step(store: Store, client: httpx.Client, item_ids: Sequence[str]) -> list[str]:
        authored = index_step(store, client, item_ids)
        if origin is None:
            return authored
        try:
            enrich_pages(store, client, origin, item_ids, pace=pace, now=now)
        except StoreError as exc:
            log.warning("event=pages_failed reason=database error=%r", " ".join(str(exc).split())[:300])
        except Exception as exc:  # noqa: BLE001 - a page's facts are a nicety: they never break a poll
            log.warning("event=pages_failed error=%r", f"{type(exc).__name__}: {exc}", exc_info=True)
        return authored

    return step
