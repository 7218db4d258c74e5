"""An item's own page on the site: its paper's link, its code and where it was published.

Every research post at https://machinelearning.apple.com/research/<slug> is a page of the same Next.js site
as the research index (`bot.research_index`). What such a page holds was found in stored copies, not guessed:
the stored text of /research/normalizing-flows (the abstract, the figures, then "Related readings and
updates": other posts), the bodies the index carries for each post ("This paper was accepted at the …
Workshop at NeurIPS 2024."), and the papers themselves ("We make our code available at
https://github.com/apple/ml-tarflow", which appeared at ICML 2025). No stored copy showed the markup around a
page's title, so this reader depends on no class name and no JSON key: it reads the page's links and
sentences as a person would, and says nothing rather than something wrong.

    parse(content, page_url) -> PageFacts            (pure; ItemPageError for a page that is no page)
    read(client, url, page_url) -> PageFacts         (one polite request: the bot's User-Agent, 15 s, 2 MiB)
    enrich_pages(store, client, origin, item_ids) -> PagesResult       (the poll's step, and backfill's)
    enricher(index_url) -> the poll's enrichment: the index (`research_index.enrich`), then the pages

What counts (only what the page says before "Related readings and updates", outside its header, navigation
and footer, is read):
- paper: a link to arXiv (kept as https://arxiv.org/abs/<id>), OpenReview, a proceedings site (PMLR, NeurIPS,
  ACL Anthology, CVF, ISCA, ACM, IEEE, JMLR, AAAI, doi.org) or a PDF on Apple's own hosts: the one a link's
  text names ("View publication", "Paper", "PDF", "arXiv"), else the only such link on the page.
- code: a repository on github.com or gitlab.com that a link's text or the words before it call code
  ("Code", "GitHub", "code is available at"), else the only repository under github.com/apple.
- venue: what follows "accepted at / to / by", "presented at", "published at / in", "appears in" or a
  "Venue:" / "Conference:" label: a known venue and its year ("ICML 2025"; "NeurIPS 2024 workshop" for a
  workshop held there), else a short phrase naming a conference, workshop, symposium or journal; at most
  MAX_VENUE_CHARS characters, else nothing.
A relative link is resolved against the page's canonical address; one that is not http(s), has no host, or
goes to any other host is dropped. A page that cannot be fetched or parsed changes nothing stored.

Pace: the poll reads the pages of its new items, then at most POLL_PAGES more (pages never read, then those of
items under RECHECK_WITHIN old not read for RECHECK_AFTER: how a later code release or venue is found),
POLL_PACE seconds apart and within POLL_SECONDS; a page the site failed to serve stops the run until the next
poll. `backfill` reads every page never read, BACKFILL_PACE seconds apart.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, quote, urljoin, urlsplit

import httpx

from bot import research_index
from bot.errors import FeedError, FeedHTTPError, FeedNetworkError, FeedTimeout, ItemPageError, StoreError
from bot.feed import fetch
from bot.models import Fetched
from bot.store import Store, utcnow

log = logging.getLogger("bot.item_pages")

MAX_PAGE_BYTES = 2 * 1024 * 1024
PAGE_TIMEOUT = 15.0  # seconds for one page, connecting, redirects and body together
MAX_VENUE_CHARS = 80
MAX_LINK_CHARS = 500
MAX_RAW_VENUE = 300  # characters of a venue's sentence or label read at most
MAX_ANCHORS = 2_000
MAX_TEXT_CHARS = 400_000
POLL_PAGES = 3  # pages a poll reads besides its new items'
POLL_PACE = 0.2  # seconds between two page requests in a poll (a poll reads a handful)
POLL_SECONDS = 30.0  # a poll's page reading stops after this long (the rest waits for the next poll)
BACKFILL_PACE = 1.0  # seconds between two page requests of `backfill` (hundreds of them)
RELATED = "related readings and updates"  # the heading after which a page lists other posts

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PageFacts:
    """What an item's page says: its paper's link, its code's, where it was published (None: not said)."""

    paper_url: str | None = None
    code_url: str | None = None
    venue: str | None = None


@dataclass
class PagesResult:
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
    return PageFacts(_pick_paper(anchors, page_url), _pick_code(anchors, page_url), _venue(page.text))


def _dig(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


@dataclass(frozen=True)
class Anchor:
    href: str
    text: str
    before: str  # the words just before it


@dataclass
class _Page:
    text: str
    anchors: list[Anchor]


class _Reader(HTMLParser):
    """A page's text and links, outside scripts, styles, the head, header, navigation and footer, up to the
    "Related readings and updates" heading; bounded in what it keeps."""

    SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "nav", "header", "footer"})

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


# --- links -----------------------------------------------------------------------------------------------

PROCEEDINGS = frozenset({
    "proceedings.mlr.press", "proceedings.neurips.cc", "papers.nips.cc", "papers.neurips.cc", "neurips.cc",
    "aclanthology.org", "openaccess.thecvf.com", "isca-archive.org", "isca-speech.org", "dl.acm.org",
    "doi.org", "dx.doi.org", "ieeexplore.ieee.org", "jmlr.org", "ojs.aaai.org", "ecva.net",
    "link.springer.com", "openreview.net", "arxiv.org", "export.arxiv.org",
})
APPLE_HOSTS = frozenset({"machinelearning.apple.com", "docs-assets.developer.apple.com", "mlr.cdn-apple.com"})
_ARXIV = re.compile(r"/(?:abs|pdf)/(\d{4}\.\d{4,5}|[a-z][a-z.-]{1,20}/\d{7})(?:v\d{1,3})?(?:\.pdf)?/?", re.I)
_OPENREVIEW_ID = re.compile(r"[A-Za-z0-9_-]{4,40}")
_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,99})")
_NOT_OWNERS = frozenset({
    "features", "topics", "orgs", "about", "marketplace", "sponsors", "settings", "login", "search",
    "collections", "trending", "explore", "apps", "site", "contact", "pricing", "enterprise", "security",
    "readme", "users", "notifications",
})
_PAPER_WORDS = re.compile(r"\b(?:publication|paper|pdf|arxiv|preprint|openreview)\b", re.I)
_CODE_WORDS = re.compile(r"\b(?:code|github|gitlab|repository|repo|implementation)\b", re.I)


def absolute(href: str, page_url: str) -> str | None:
    """`href` resolved against `page_url`: an http(s) address with a host and no spaces, at most
    MAX_LINK_CHARS long, without its #fragment; None for anything else (mailto:, javascript:, "http://")."""
    href = href.strip()
    if not href or len(href) > 2 * MAX_LINK_CHARS or any(c in href for c in "<>|\"' \t\n\r"):
        return None
    try:
        url = urljoin(page_url, href)
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    url = url.split("#", 1)[0]
    return url if len(url) <= MAX_LINK_CHARS else None


def _host(url: str) -> str:
    host = (urlsplit(url).hostname or "").lower()
    return host[4:] if host.startswith("www.") else host


def paper_link(href: str, page_url: str) -> str | None:
    """A link to the paper, tidied (arXiv as https://arxiv.org/abs/<id>, OpenReview as its forum), or None:
    another host, a page of the site that is not a PDF, or no paper's address (arxiv.org/abs/ alone)."""
    url = absolute(href, page_url)
    if url is None:
        return None
    parts, host = urlsplit(url), _host(url)
    if host in ("arxiv.org", "export.arxiv.org"):
        found = _ARXIV.fullmatch(parts.path)
        return f"https://arxiv.org/abs/{found.group(1)}" if found else None
    if host == "openreview.net":
        ids = parse_qs(parts.query).get("id") or [""]
        ok = parts.path in ("/forum", "/pdf") and _OPENREVIEW_ID.fullmatch(ids[0])
        return f"https://openreview.net/forum?id={ids[0]}" if ok else None
    own = {_host(page_url)} | APPLE_HOSTS
    if host in PROCEEDINGS and len(parts.path.strip("/")) >= 3:
        return "https://" + url.split("://", 1)[1]
    if host in own and parts.path.lower().endswith(".pdf"):
        return "https://" + url.split("://", 1)[1]
    return None


def code_link(href: str, page_url: str) -> tuple[str, str] | None:
    """A repository's address (https://github.com/<owner>/<repo>, with its /tree/… path when it names a
    folder; gitlab.com alike) and its owner, or None."""
    url = absolute(href, page_url)
    if url is None or _host(url) not in ("github.com", "gitlab.com"):
        return None
    segments = [s for s in urlsplit(url).path.split("/") if s]
    if len(segments) < 2 or segments[0].lower() in _NOT_OWNERS:
        return None
    owner, repo = segments[0], segments[1].removesuffix(".git")
    if not (_NAME.fullmatch(owner) and _NAME.fullmatch(repo)) or len(owner) > 39:
        return None
    base = f"https://{_host(url)}/{owner}/{repo}"
    if len(segments) > 3 and segments[2] == "tree" and all(_NAME.fullmatch(s) for s in segments[3:8]):
        base += "/tree/" + "/".join(quote(s) for s in segments[3:8])
    return base, owner


def _pick_paper(anchors: Iterable[Anchor], page_url: str) -> str | None:
    found = [(a, link) for a in anchors if (link := paper_link(a.href, page_url))]
    named = [link for a, link in found if _PAPER_WORDS.search(a.text)]
    if named:
        return named[0]
    distinct = list(dict.fromkeys(link for _, link in found))
    return distinct[0] if len(distinct) == 1 else None


def _pick_code(anchors: Iterable[Anchor], page_url: str) -> str | None:
    found = [(a, *made) for a in anchors if (made := code_link(a.href, page_url))]
    named = [link for a, link, _ in found if _CODE_WORDS.search(a.text) or _CODE_WORDS.search(a.before[-60:])]
    if named:
        return named[0]
    apple = list(dict.fromkeys(link for _, link, owner in found if owner.lower() == "apple"))
    return apple[0] if len(apple) == 1 else None


# --- venues ----------------------------------------------------------------------------------------------

# (how it is written, pattern): full names first, so "North American Chapter of the ACL" is NAACL, not ACL.
_KNOWN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, flags))
    for name, pattern, flags in (
        ("NeurIPS", r"\bNeurIPS\b|\bNIPS\b|Neural Information Processing Systems", re.I),
        ("ICML", r"\bICML\b|International Conference on Machine Learning\b", 0),
        ("ICLR", r"\bICLR\b|International Conference on Learning Representations", 0),
        ("NAACL", r"\bNAACL\b|North American Chapter of the Association for Computational Linguistics", 0),
        ("EACL", r"\bEACL\b|European Chapter of the Association for Computational Linguistics", 0),
        ("EMNLP", r"\bEMNLP\b|Empirical Methods in Natural Language Processing", 0),
        ("ACL", r"\bACL\b|Annual Meeting of the Association for Computational Linguistics", 0),
        ("CVPR", r"\bCVPR\b|Computer Vision and Pattern Recognition", 0),
        ("ICCV", r"\bICCV\b|International Conference on Computer Vision\b", 0),
        ("ECCV", r"\bECCV\b|European Conference on Computer Vision", 0),
        ("Interspeech", r"\bInterspeech\b", re.I),
        ("ICASSP", r"\bICASSP\b", 0),
        ("COLM", r"\bCOLM\b|Conference on Language Modeling", 0),
        ("COLING", r"\bCOLING\b", 0),
        ("AISTATS", r"\bAISTATS\b", 0),
        ("AAAI", r"\bAAAI\b", 0),
        ("IJCAI", r"\bIJCAI\b", 0),
        ("KDD", r"\bKDD\b", 0),
        ("SIGIR", r"\bSIGIR\b", 0),
        ("SIGGRAPH Asia", r"\bSIGGRAPH Asia\b", re.I),
        ("SIGGRAPH", r"\bSIGGRAPH\b", re.I),
        ("CHI", r"\bCHI\b", 0),
        ("UIST", r"\bUIST\b", 0),
        ("COLT", r"\bCOLT\b", 0),
        ("UAI", r"\bUAI\b", 0),
        ("TMLR", r"\bTMLR\b|Transactions on Machine Learning Research", 0),
        ("JMLR", r"\bJMLR\b|Journal of Machine Learning Research", 0),
        ("WACV", r"\bWACV\b", 0),
        ("BMVC", r"\bBMVC\b", 0),
        ("3DV", r"\b3DV\b", 0),
        ("ASRU", r"\bASRU\b", 0),
        ("SLT", r"\bSLT\b", 0),
        ("CoRL", r"\bCoRL\b", 0),
        ("ICRA", r"\bICRA\b", 0),
        ("IROS", r"\bIROS\b", 0),
        ("MLSys", r"\bMLSys\b", re.I),
        ("RecSys", r"\bRecSys\b", re.I),
        ("WSDM", r"\bWSDM\b", 0),
        ("CIKM", r"\bCIKM\b", 0),
        ("FAccT", r"\bFAccT\b", re.I),
        ("MICCAI", r"\bMICCAI\b", 0),
        ("ISIT", r"\bISIT\b", 0),
        ("The Web Conference", r"\bThe Web Conference\b", re.I),
    )
)
_CUE = re.compile(
    r"\b(?:accepted|presented|published|appear(?:s|ed|ing)?|will appear)\s+(?:at|to|in|by|for)\s+"
    rf"(?P<v>[^.;\n]{{2,{MAX_RAW_VENUE}}})"
    rf"|\b(?:venue|conference)\s*[:\u2013\u2014-]\s*(?P<l>[^.;\n]{{2,{MAX_RAW_VENUE}}})",
    re.IGNORECASE,
)
_YEAR = re.compile(r"(?<!\d)(19[89]\d|20\d\d)(?!\d)")
_SHORT_YEAR = re.compile(r"['’](\d\d)(?!\d)")
_WORKSHOP = re.compile(r"\bworkshops?\b", re.I)
_NAMES_A_VENUE = re.compile(r"\b(?:conference|workshop|symposium|journal|transactions|proceedings)\b", re.I)
_NOT_PRINTED = re.compile(r"[\x00-\x1f\x7f\u200b-\u200f\u2028-\u202e\ufeff]")


def _venue(text: str) -> str | None:
    """The first venue a sentence of `text` names (see `venue_of`), or None."""
    for found in _CUE.finditer(text[:MAX_TEXT_CHARS]):
        venue = venue_of(found.group("v") or found.group("l") or "")
        if venue is not None:
            return venue
    return None


def venue_of(raw: str) -> str | None:
    """Where a paper appeared, from what a page says after "accepted at" or "Venue:": "ICML 2025" (a known
    venue, with the year written next to it), "NeurIPS 2024 workshop" (a workshop held there), else the phrase
    itself when it is short (MAX_VENUE_CHARS) and names a conference, workshop, symposium or journal; None
    otherwise. Only the first MAX_RAW_VENUE characters are read."""
    text = " ".join(_NOT_PRINTED.sub(" ", raw[:MAX_RAW_VENUE]).split()).strip(" ,:;-\u2013\u2014")
    if not text:
        return None
    known = [(found.start(), found.end(), name) for name, pattern in _KNOWN
             if (found := pattern.search(text)) is not None]
    if known:
        start, end, name = min(known)
        after = text[end:end + 40]
        year = _YEAR.search(after) or _YEAR.search(text[max(0, start - 20):start]) or _YEAR.search(text)
        short = None if year else _SHORT_YEAR.match(after.lstrip())
        said = year.group(1) if year else f"20{short.group(1)}" if short else ""
        venue = f"{name} {said}".strip() + (" workshop" if _WORKSHOP.search(text) else "")
        return venue[:MAX_VENUE_CHARS]
    text = re.sub(r"^(?:the|a|an)\s+", "", text, flags=re.I)
    if len(text) <= MAX_VENUE_CHARS and _NAMES_A_VENUE.search(text) and re.search(r"[^\W\d_]", text):
        return text
    return None


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
