"""What a paper's page says about it, from its links and sentences: the paper's address, its code's, and
where it appeared. Pure functions over text (`bot.item_pages` reads the page); no I/O.

    paper_link(href, page_url) -> str | None       (a tidied link to the paper, or None)
    code_link(href, page_url) -> (url, owner) | None
    pick_paper(anchors, page_url), pick_code(anchors, page_url) -> the page's, or None
    venue_tag(href, text, page_url) -> "ICML", "ICLR workshop" (the site's conference tag), or None
    pick_venue(anchors, text, page_url) -> the page's venue, or None
    venue_in(text) / venue_of(raw) -> "ICML 2025", "NeurIPS 2024 workshop", or None
    content_type(anchors) -> "paper", "highlight", … (the site's label), or None

What counts (the site's own words, as stored copies of its pages show them: tests/data/item_pages/stored/):
- paper: a link to arXiv (kept as https://arxiv.org/abs/<id>), OpenReview, a proceedings site (PMLR, NeurIPS,
  ACL Anthology, CVF, ISCA, ACM, IEEE, JMLR, AAAI, doi.org) or a PDF on Apple's own hosts: the one a link's
  text names ("View publication", the site's, or "Paper", "PDF", "arXiv"), else the only such link on the
  page (not on a highlight: there only a named link counts, as a highlight cites other papers).
- code: a repository on github.com or gitlab.com that a link's text or the words before it call code ("View
  source code (GitHub)", the site's; "Code", "code is available at"), else the only repository under
  github.com/apple (links into one repository, its root and a folder, are that repository).
- venue: the site's conference tag, a link to the posts of one event (/research/?event=NeurIPS, words
  "conference NeurIPS"; "Workshop at ICLR" for event=ICLR%20Workshop), which names no year; and a sentence:
  what follows "accepted at / to / by", "presented at", "published at / in", "appears in" or a "Venue:" /
  "Conference:" label: a known venue and its year ("ICML 2025"; "NeurIPS 2024 workshop" for a workshop held
  there), else a short phrase naming a conference, workshop, symposium or journal. The sentence's venue is
  kept when it names the tag's conference (it says the year), the tag's otherwise; on a highlight no
  sentence counts (it tells of other papers). At most MAX_VENUE_CHARS characters, else nothing.
A relative link is resolved against the page's canonical address; one that is not http(s), has no host, or
goes to any other host is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qs, quote, urljoin, urlsplit

from msgspec import Struct

MAX_VENUE_CHARS = 80
MAX_LINK_CHARS = 500
MAX_RAW_VENUE = 300  # characters of a venue's sentence or label read at most
MAX_TEXT_CHARS = 400_000  # of a page's text, read for venues


class Anchor(Struct, frozen=True):
    """A link of a page (or an address written out in its text): where it goes, its words, and the words
    just before it."""

    href: str
    text: str
    before: str


# --- links -----------------------------------------------------------------------------------------------

PROCEEDINGS = frozenset({
    "proceedings.mlr.press", "proceedings.neurips.cc", "papers.nips.cc", "papers.neurips.cc", "neurips.cc",
    "aclanthology.org", "openaccess.thecvf.com", "isca-archive.org", "isca-speech.org", "dl.acm.org",
    "doi.org", "dx.doi.org", "ieeexplore.ieee.org", "jmlr.org", "ojs.aaai.org", "ecva.net",
    "link.springer.com", "openreview.net", "arxiv.org", "export.arxiv.org",
})
# The site, and where Apple keeps papers and media (ml-site.cdn-apple.com/papers/the-illusion-of-thinking.pdf)
APPLE_HOSTS = frozenset({
    "machinelearning.apple.com", "docs-assets.developer.apple.com", "mlr.cdn-apple.com",
    "ml-site.cdn-apple.com",
})
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


def pick_paper(anchors: Iterable[Anchor], page_url: str, *, named_only: bool = False) -> str | None:
    """The paper a link's text names, else (unless `named_only`) the only paper linked."""
    found = [(a, link) for a in anchors if (link := paper_link(a.href, page_url))]
    named = [link for a, link in found if _PAPER_WORDS.search(a.text)]
    if named or named_only:
        return named[0] if named else None
    distinct = list(dict.fromkeys(link for _, link in found))
    return distinct[0] if len(distinct) == 1 else None


def pick_code(anchors: Iterable[Anchor], page_url: str) -> str | None:
    """The repository a link's words call code, else the only repository under github.com/apple (its root
    when the page links it, as well as a folder of it)."""
    found = [(a, *made) for a in anchors if (made := code_link(a.href, page_url))]
    named = [link for a, link, _ in found if _CODE_WORDS.search(a.text) or _CODE_WORDS.search(a.before[-60:])]
    if named:
        return named[0]
    apple = list(dict.fromkeys(link for _, link, owner in found if owner.lower() == "apple"))
    repositories = {_repository(link).lower() for link in apple}
    if len(repositories) != 1:
        return None
    return next((link for link in apple if link == _repository(link)), apple[0])


def _repository(link: str) -> str:
    """https://github.com/<owner>/<repo> of a `code_link` (which may name a folder of it)."""
    return "/".join(link.split("/")[:5])


# --- venues ----------------------------------------------------------------------------------------------

# Venues known by name: (how it is written, the pattern that finds it, its flags); the one found first in
# the text wins, the longer where two start at the same place ("SIGGRAPH Asia", not "SIGGRAPH"), and a
# spelled-out name is its own venue's ("North American Chapter of the ACL" is NAACL).
_SPELLED_OUT: tuple[tuple[str, str, int], ...] = (
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
    ("COLM", r"\bCOLM\b|Conference on Language Modeling", 0),
    ("TMLR", r"\bTMLR\b|Transactions on Machine Learning Research", 0),
    ("JMLR", r"\bJMLR\b|Journal of Machine Learning Research", 0),
    ("FAccT", r"\bFAccT\b|Conference on Fairness, Accountability,? and Transparency", re.I),
    ("STOC", r"\bSTOC\b|Symposium on Theory of Computing", 0),
)
# Found as whole words only: written just so, or (the second list) in any case.
_NAMES_AS_WRITTEN = ("ICASSP", "COLING", "AISTATS", "AAAI", "IJCAI", "KDD", "SIGIR", "CHI", "UIST", "COLT",
                     "UAI", "WACV", "BMVC", "3DV", "ASRU", "SLT", "CoRL", "ICRA", "IROS", "WSDM", "CIKM",
                     "MICCAI", "ISIT")
_NAMES_IN_ANY_CASE = ("Interspeech", "SIGGRAPH Asia", "SIGGRAPH", "MLSys", "RecSys",
                      "The Web Conference")
_KNOWN: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, flags))
    for name, pattern, flags in (
        *_SPELLED_OUT,
        *((name, rf"\b{name}\b", 0) for name in _NAMES_AS_WRITTEN),
        *((name, rf"\b{name}\b", re.I) for name in _NAMES_IN_ANY_CASE),
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


def venue_in(text: str) -> str | None:
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
    text = _clean(raw)
    if not text:
        return None
    known = _first_known(text)
    if known is not None:
        start, end, name = known
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


def _clean(raw: str) -> str:
    return " ".join(_NOT_PRINTED.sub(" ", raw[:MAX_RAW_VENUE]).split()).strip(" ,:;-\u2013\u2014")


def _first_known(text: str) -> tuple[int, int, str] | None:
    """Where in `text` the first known venue is named, and its name."""
    known = [(found.start(), found.end(), name) for name, pattern in _KNOWN
             if (found := pattern.search(text)) is not None]
    return min(known, key=lambda found: (found[0], -found[1])) if known else None


# --- the site's tags ---------------------------------------------------------------------------------------

_EVENT_PATHS = frozenset({"/research", "/highlights"})  # the lists of posts a tag links to, filtered by event
_TAG_WORD = re.compile(r"\s*[Cc]onference(?![a-z])\s*")  # the word the site prints before a conference's name
_CONTENT_TYPE = re.compile(r"\s*content\s*type\s*([^\W\d_]{1,30})", re.I)
_YEARS_AND_WORKSHOPS = re.compile(r"(?<!\d)(?:19|20)\d\d(?!\d)|\bworkshops?\b", re.I)


def venue_tag(href: str, text: str, page_url: str) -> str | None:
    """The venue of the site's conference tag: a link to the site's posts of one event (/research/?event=ICML,
    /highlights?event=NeurIPS), its words "conference ICML" (the word apart or not) or "Workshop at ICLR"
    (event=ICLR%20Workshop). A known venue by its usual name ("ICML", "ICLR workshop", "FAccT" for "ACM
    Conference on Fairness, Accountability, and Transparency"), else the tag's words when short; never a year
    (a tag names none). None for any other link."""
    url = absolute(href, page_url)
    if url is None:
        return None
    parts = urlsplit(url)
    if _host(url) not in {_host(page_url)} | APPLE_HOSTS or parts.path.rstrip("/") not in _EVENT_PATHS:
        return None
    event = (parse_qs(parts.query).get("event") or [""])[0]
    if not _clean(event):
        return None
    label = text[word.end():] if (word := _TAG_WORD.match(text)) else text
    for raw in (event, label):
        if _first_known(_clean(raw)) is not None:
            return venue_of(raw)
    return next((said for raw in (label, event) if _is_label(said := _clean(raw))), None)


def _is_label(text: str) -> bool:
    return 2 <= len(text) <= MAX_VENUE_CHARS and re.search(r"[^\W\d_]", text) is not None


def pick_venue(anchors: Iterable[Anchor], text: str, page_url: str, *, sentences: bool = True) -> str | None:
    """The page's venue: its first conference tag (`venue_tag`) and, with `sentences`, the first venue its
    sentences name (`venue_in`); the sentence's when it names the tag's venue (it says the year and the
    workshop), the tag's when they differ, whichever there is otherwise."""
    tag = next((venue for a in anchors if (venue := venue_tag(a.href, a.text, page_url))), None)
    said = venue_in(text) if sentences else None
    if tag is None or said is None:
        return tag or said
    return said if _bare(said) == _bare(tag) else tag


def _bare(venue: str) -> str:
    return " ".join(_YEARS_AND_WORKSHOPS.sub(" ", venue).split()).lower()


def content_type(anchors: Iterable[Anchor]) -> str | None:
    """What the site calls the post, from its label ("content type paper", "content type highlight"):
    "paper", "highlight", …; None when the page has no such label."""
    for anchor in anchors:
        found = _CONTENT_TYPE.match(anchor.text)
        if found is not None:
            return found.group(1).lower()
    return None
