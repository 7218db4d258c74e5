"""Fetching and parsing the feed.

    fetch(client, url, validators) -> Fetched | NotModified     (httpx; conditional GET; size and time caps)
    parse(content) -> list[Item]                                 (feedparser; oldest first)

Every failure is a `FeedError` subclass (bot.errors): FeedNetworkError, FeedTimeout, FeedHTTPError
(`status`), FeedTooLarge, FeedNotAFeed, FeedMalformed; its `kind` names it in log lines.
Its message is one line, suitable for a log, a CLI error or a Slack reply.
"""

from __future__ import annotations

import calendar
import hashlib
import html
import ipaddress
import re
import socket
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlencode, urljoin, urlsplit, urlunsplit

from bot import __version__
from bot.addresses import is_public_address
from bot.config import redact_url
from bot.errors import (
    FeedHTTPError,
    FeedMalformed,
    FeedNetworkError,
    FeedNotAFeed,
    FeedTimeout,
    FeedTooLarge,
)
from bot.models import Fetched, Item, Kind, NotModified, Validators

if TYPE_CHECKING:  # httpx and feedparser are imported when first used: `serve` answers before it polls
    import httpx

USER_AGENT = f"mlresearch-bot/{__version__} (+https://github.com/mlresearch-bot/mlresearch-bot)"
MAX_FEED_BYTES = 5 * 1024 * 1024
CONNECT_TIMEOUT = 5.0
TOTAL_TIMEOUT = 20.0
MAX_REDIRECTS = 5
ACCEPT = "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.8, */*;q=0.1"
MAX_TITLE_CHARS = 1_000
MAX_SUMMARY_CHARS = 20_000

Resolver = Callable[[str], Iterable[str]]  # a host name -> its IP addresses, as strings
NO_VALIDATORS = Validators()
TRACKING_PARAMS = frozenset(
    {"fbclid", "gclid", "dclid", "msclkid", "mc_cid", "mc_eid", "igshid", "ref_src", "_hsenc", "_hsmi"}
)


def make_client(
    *,
    max_bytes: int = MAX_FEED_BYTES,
    total_timeout: float = TOTAL_TIMEOUT,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> httpx.Client:
    """The one HTTP client of a process: redirects (at most 5), timeouts, gzip, a User-Agent.

    `max_bytes` is accepted for symmetry with `fetch`, which enforces the cap while streaming; `fetch` follows
    redirects itself, hop by hop, so each is checked and counted against one deadline."""
    import httpx

    return httpx.Client(
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
        timeout=httpx.Timeout(total_timeout, connect=min(connect_timeout, total_timeout)),
        headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
    )


def resolve_host(host: str) -> list[str]:
    """The addresses the system resolver gives for `host` (none when it does not resolve)."""
    try:
        return [str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)]
    except (OSError, UnicodeError):
        return []


def public_addresses(host: str, resolve: Resolver = resolve_host) -> list[str]:
    """The addresses of `host` (a name or an IP literal) when it resolves, and only to public addresses
    (`is_public_address`); else none."""
    try:
        addresses = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        try:
            addresses = [ipaddress.ip_address(a.partition("%")[0]) for a in resolve(host)]
        except ValueError:
            return []
    if not addresses or not all(is_public_address(a) for a in addresses):
        return []
    return [str(a) for a in addresses]


def is_public_host(host: str, resolve: Resolver = resolve_host) -> bool:
    """Whether `host` (a name or an IP literal) resolves, and only to public addresses."""
    return bool(public_addresses(host, resolve))


def fetch(
    client: httpx.Client,
    url: str,
    validators: Validators = NO_VALIDATORS,
    *,
    max_bytes: int = MAX_FEED_BYTES,
    total_timeout: float | None = None,
    accept: str = ACCEPT,
    resolve: Resolver = resolve_host,
) -> Fetched | NotModified:
    """Fetch `url` (http(s), file:// or a path), sending back the stored validators.

    One deadline (`total_timeout`, by default the client's) covers connecting, headers, every redirect and the
    body; each network wait is given at most the time left. Redirects are followed here, at most
    MAX_REDIRECTS; when `url`'s host is public (`resolve` says which addresses a name has), a redirect to a
    loopback, private or link-local address is refused, and one to a public host is connected to at the
    address that was checked (`_pinned`). Messages show the URL with `redact_url`."""
    import httpx

    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("http", "https"):
        return _fetch_file(url, validators, max_bytes)
    shown = redact_url(url)
    headers = {"Accept": accept}
    if validators.etag:
        headers["If-None-Match"] = validators.etag
    if validators.last_modified:
        headers["If-Modified-Since"] = validators.last_modified
    if total_timeout is None:  # the client's budget (make_client(total_timeout=...))
        total_timeout = client.timeout.read if client.timeout.read is not None else TOTAL_TIMEOUT
    deadline = Deadline(total_timeout, shown)
    connect = client.timeout.connect if client.timeout.connect is not None else CONNECT_TIMEOUT
    from_public: bool | None = None  # whether url's host is public: looked up at the first redirect
    address: str | None = None  # where a redirect from a public host goes: the address its check found
    try:
        request = client.build_request("GET", url, headers=headers)
        for _hop in range(MAX_REDIRECTS + 1):
            left = deadline.left()
            request.extensions["timeout"] = httpx.Timeout(left, connect=min(connect, left)).as_dict()
            sent = request if address is None else _pinned(request, address)
            response = client.send(sent, stream=True, follow_redirects=False)
            try:
                if response.next_request is None:
                    return _answer(response, validators, shown, max_bytes, deadline)
                request = _unpinned(response.next_request, sent, request)
            finally:
                response.close()
            if from_public is None:
                from_public = is_public_host(urlsplit(url).hostname or "", resolve)
            if from_public:  # the redirect's host is checked, and connected to at the address checked
                checked = public_addresses(request.url.host, resolve)
                if not checked:
                    target = redact_url(str(request.url))
                    raise FeedNetworkError(f"{shown} redirected to {target}, which is not a public address")
                address = checked[0]
        raise FeedNetworkError(f"{shown} redirected more than {MAX_REDIRECTS} times")
    except httpx.TimeoutException:
        raise FeedTimeout(f"{shown} timed out after {total_timeout:g} s") from None
    except httpx.DecodingError as exc:
        reason = _shown(exc)
        raise FeedMalformed(f"{shown} sent a body that could not be decoded ({reason})") from None
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        raise FeedNetworkError(f"{shown} could not be reached: {_shown(exc)}") from None


def _pinned(request: httpx.Request, address: str) -> httpx.Request:
    """`request` sent to `address` (an IP literal) instead of its host name, so the connection goes where the
    check looked (a second lookup could answer differently: DNS rebinding). The Host header and, for https,
    the TLS server name and certificate check stay the name's."""
    import httpx

    url = request.url
    if url.host == address.strip("[]"):
        return request
    extensions = {**request.extensions}
    if url.scheme == "https":
        extensions["sni_hostname"] = url.host
    headers = httpx.Headers(request.headers)
    headers["Host"] = url.netloc.decode("ascii")
    return httpx.Request(request.method, url.copy_with(host=address), headers=headers, extensions=extensions)


def _unpinned(following: httpx.Request, sent: httpx.Request, asked: httpx.Request) -> httpx.Request:
    """The redirect `following` as it would be from `asked` (by name) rather than `sent` (pinned to an
    address): a relative Location keeps the name, and no TLS server name is carried to another host."""
    if sent is not asked and following.url.host == sent.url.host and following.url.port == sent.url.port:
        following.url = following.url.copy_with(host=asked.url.host)
    # a new dict, not a pop: before httpx 0.28 a redirect shares its extensions with the request that was sent
    following.extensions = {k: v for k, v in following.extensions.items() if k != "sni_hostname"}
    return following


class Deadline:
    """One monotonic deadline for a whole fetch."""

    def __init__(self, seconds: float, shown: str) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self.shown = shown

    def left(self) -> float:
        """The seconds left; a FeedTimeout when there are none."""
        left = self.at - time.monotonic()
        if left <= 0:
            raise FeedTimeout(f"{self.shown} timed out after {self.seconds:g} s")
        return left


def _answer(
    response: httpx.Response, validators: Validators, shown: str, max_bytes: int, deadline: Deadline
) -> Fetched | NotModified:
    """What the final (non-redirect) response says: not modified, an HTTP error, or a capped body."""
    if response.status_code == 304:
        return NotModified(
            Validators(
                response.headers.get("ETag") or validators.etag,
                response.headers.get("Last-Modified") or validators.last_modified,
            )
        )
    if response.status_code >= 300:
        raise FeedHTTPError(f"{shown} answered HTTP {response.status_code}", status=response.status_code)
    declared = response.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise FeedTooLarge(f"{shown} is {int(declared)} bytes, over the {max_bytes}-byte cap")
    content = read_capped(response, max_bytes, deadline, shown)
    return Fetched(content, Validators(response.headers.get("ETag"), response.headers.get("Last-Modified")))


def read_capped(response: httpx.Response, max_bytes: int, deadline: Deadline, shown: str) -> bytes:
    """A streamed response's (decoded) body, in the calling thread: a FeedTooLarge past `max_bytes`,
    a FeedTimeout past the deadline (checked between chunks; each read waits at most the time left)."""
    import httpx

    # The read timeout of the body is taken from the request when its first chunk is asked for (httpcore's
    # documented "timeout" extension): give it what is left now, not what was left before the headers.
    left = deadline.left()
    response.request.extensions["timeout"] = httpx.Timeout(left).as_dict()
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise FeedTooLarge(f"{shown} passed the {max_bytes}-byte cap while downloading")
        deadline.left()
        chunks.append(chunk)
    return b"".join(chunks)


def _fetch_file(url: str, validators: Validators, max_bytes: int) -> Fetched | NotModified:
    path = Path(unquote(urlsplit(url).path)) if url.lower().startswith("file:") else Path(url)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise FeedTooLarge(f"{path} is {size} bytes, over the {max_bytes}-byte cap")
        content = path.read_bytes()
    except OSError as exc:
        raise FeedNetworkError(f"{path} could not be read: {exc.strerror or exc}") from None
    digest = '"' + hashlib.sha256(content).hexdigest()[:32] + '"'
    if validators.etag == digest:
        return NotModified(validators)
    return Fetched(content, Validators(etag=digest))


# --- parsing -----------------------------------------------------------------------------------------

_ENTITY_DECL = re.compile(rb"<!ENTITY", re.IGNORECASE)
# The same declaration in the wide encodings an XML document may use (a bomb need not be UTF-8).
_WIDE_ENTITY_DECLS = tuple(
    "<!ENTITY".encode(enc) for enc in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
)


def _declares_entities(content: bytes) -> bool:
    if _ENTITY_DECL.search(content):
        return True
    return (b"\x00" in content[:4096]) and any(pattern in content for pattern in _WIDE_ENTITY_DECLS)


def parse(content: bytes) -> list[Item]:
    """Parse feed bytes into Items, oldest first; same-day ties keep reversed feed order."""
    import feedparser

    head = content[:65536]
    if _declares_entities(content):
        raise FeedMalformed("the feed declares XML entities, which are refused (entity expansion)")
    # No base URL on purpose: with one, feedparser turns bare-slug guids into wrong absolute URLs.
    parsed: Any = feedparser.parse(
        content, response_headers={}, sanitize_html=True, resolve_relative_uris=False
    )
    version = parsed.get("version") or ""
    if parsed.get("bozo"):
        exc = parsed.get("bozo_exception")
        if not isinstance(exc, feedparser.CharacterEncodingOverride | feedparser.NonXMLContentType):
            if not version or not parsed.entries:
                if _looks_like_html(head):
                    raise FeedNotAFeed("the answer is an HTML page, not an RSS or Atom feed")
                raise FeedMalformed(f"the feed is not well-formed XML ({_one_line(exc)})")
            raise FeedMalformed(f"the feed is not well-formed XML ({_one_line(exc)})")
    if not version:
        raise FeedNotAFeed("the answer is not an RSS or Atom feed")
    base = parsed.feed.get("link") or ""
    now = datetime.now(UTC)
    ordered: list[tuple[int, Item]] = []
    for position, entry in enumerate(parsed.entries):
        item = _item(entry, base, now)
        if item is not None:
            ordered.append((position, item))
    ordered.sort(key=lambda pair: (pair[1].published, -pair[0]))
    seen: set[str] = set()
    result = []
    for _, item in ordered:
        if item.id not in seen:
            seen.add(item.id)
            result.append(item)
    return result


def _item(entry: Any, base: str, now: datetime) -> Item | None:
    guid = (entry.get("id") or "").strip() or None
    raw_link = (entry.get("link") or "").strip()
    if not raw_link and guid and guid.startswith(("http://", "https://")):
        raw_link = guid
    if not raw_link:
        return None
    if not urlsplit(raw_link).scheme and base.startswith(("http://", "https://")):
        raw_link = urljoin(base, raw_link)
    link = canonical_link(raw_link)
    if link is None:
        return None
    title = _text(entry.get("title") or "", entry.get("title_detail"))
    summary = _text(entry.get("summary") or "", entry.get("summary_detail"))
    stamp = entry.get("published_parsed") or entry.get("updated_parsed")
    published = datetime.fromtimestamp(calendar.timegm(stamp), UTC) if stamp else now
    authors = tuple(
        a.get("name", "").strip() for a in entry.get("authors") or [] if (a.get("name") or "").strip()
    )
    return Item(
        id=link,
        guid=guid,
        title=_cap(title or link, MAX_TITLE_CHARS),
        link=link,
        summary=_cap(summary, MAX_SUMMARY_CHARS),
        published=published,
        kind=kind_of(link),
        authors=authors,
    )


def kind_of(link: str) -> Kind:
    return "update" if urlsplit(link).path.startswith("/updates/") else "research"


def canonical_link(url: str) -> str | None:
    """https, lower-case host, no fragment, no tracking parameters, no trailing slash;
    None if `url` is not a web URL."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname.lower()
    try:
        port = parts.port
    except ValueError:
        return None
    if port and port not in (80, 443):
        host = f"{host}:{port}"
    path = re.sub(r"/{2,}", "/", parts.path or "").rstrip("/")
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if not k.lower().startswith("utm_") and k.lower() not in TRACKING_PARAMS
    ]
    return urlunsplit(("https", host, path, urlencode(query), ""))


class _TextExtractor(HTMLParser):
    BLOCK = frozenset(
        {"p", "br", "div", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "blockquote"}
        | {"section", "article"}
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "style"):
            self.skip += 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self.skip:
            self.skip -= 1
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skip:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """Plain text from HTML: tags dropped, entities decoded, whitespace tidied, paragraphs kept. Linear time
    (html.parser after `_defused`), so hostile markup costs what its length does."""
    extractor = _TextExtractor()
    extractor.feed(_defused(markup))
    extractor.close()
    return _tidy("".join(extractor.parts))


def _defused(markup: str) -> str:
    """The markup with its unterminated constructs made text: a `<` that no `>` follows, a `<!--` that no
    `-->` follows, and `<![`. Python 3.11's html.parser rescans the rest of the input for each of those
    when it reaches the end (quadratic time: 40 KB of `<!--` takes seconds), and fails on a bad `<![`."""
    markup = markup.replace("<![", "&lt;![")
    closed = markup.rfind("-->") + 1  # 0 when there is none
    markup = markup[:closed] + markup[closed:].replace("<!--", "&lt;!--")
    end = markup.rfind(">") + 1
    return markup[:end] + markup[end:].replace("<", "&lt;")


def _text(value: str, detail: Any) -> str:
    kind = (detail or {}).get("type", "text/html")
    if kind in ("text/html", "application/xhtml+xml"):
        return html_to_text(value)
    return _tidy(html.unescape(value) if "&" in value else value)


def _tidy(text: str) -> str:
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n|\n", text)]
    return "\n\n".join(p for p in paragraphs if p)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _looks_like_html(head: bytes) -> bool:
    lowered = head[:2048].lower()
    return b"<html" in lowered or b"<!doctype html" in lowered


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())[:200] or type(exc).__name__


def _shown(exc: object) -> str:
    """An exception as one line, any URL in it redacted."""
    return re.sub(r"[A-Za-z][\w+.-]{0,20}://[^\s'\"<>]+", lambda m: redact_url(m.group()), _one_line(exc))
