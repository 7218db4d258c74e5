"""The research index: every post Apple ML Research has published, for backfill and enrichment.

The feed holds only the ten newest items, with abstracts cut at about 600 characters and no authors. The page
https://machinelearning.apple.com/research is a Next.js page whose embedded
`<script id="__NEXT_DATA__" type="application/json">` holds all posts at `props.pageProps.posts[]`, each with
`slug`, `title`, `body` (the full abstract, HTML or markdown), `published`, `authors[]`, `authorsOrdered` and
`documentId`. An item's link is https://machinelearning.apple.com/research/<slug>, the feed's canonical link.

    read(client, url) -> Index                          (one polite request, 20 MiB cap; IndexReadError)
    parse(content) -> Index                              (bytes of the page -> Items; IndexReadError)
    backfill(store, client, url) -> BackfillResult       (merge every post; nothing is ever delivered)
    backfill_if_sparse(store, client, url) -> BackfillResult | None      (for `serve`; never raises)
    enrich(store, client, url, item_ids) -> int | None   (for the poller; never raises)
    enrich_found(store, client, url, item_ids)           (the same, and which items it found authors for)

The reader is built to the shape a third-party scraper documents, not to a saved copy of the page, so it fails
safe: a page without the script, JSON that does not parse, or posts without the fields we need is a one-line
`IndexReadError` naming what was missing, and no stored item is ever lost or overwritten with less.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from msgspec import Struct, field

from bot.config import redact_url
from bot.errors import FeedError, IndexReadError, StoreError
from bot.feed import MAX_SUMMARY_CHARS, MAX_TITLE_CHARS, canonical_link, fetch, html_to_text, kind_of
from bot.models import Fetched, Item
from bot.store import Store

log = logging.getLogger("bot.research_index")

DEFAULT_INDEX_URL = "https://machinelearning.apple.com/research"
SITE = "https://machinelearning.apple.com"
MAX_INDEX_BYTES = 20 * 1024 * 1024
MAX_BODY_CHARS = 5 * MAX_SUMMARY_CHARS  # of a post's body, read into an abstract of at most MAX_SUMMARY_CHARS
ACCEPT_HTML = "text/html, application/xhtml+xml;q=0.9, */*;q=0.1"
SPARSE_BELOW = 50
MAX_AUTHORS = 100
MAX_AUTHOR_CHARS = 200
ENRICH_ATTEMPTS = 3
META_BACKFILLED = "index_backfilled_at"
META_PENDING = "index_enrich_pending"

Progress = Callable[[str], None]


class Index(Struct, frozen=True):
    """The posts read from the index (as Items, oldest first) and what was skipped, by reason."""

    items: list[Item]
    posts: int
    skipped: dict[str, int] = field(default_factory=dict)

    def skipped_note(self) -> str | None:
        """One line about skipped posts, or None."""
        if not self.skipped:
            return None
        total = sum(self.skipped.values())
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(self.skipped.items()))
        return f"{total} of {self.posts} posts in the research index were skipped ({reasons})"


class BackfillResult(Struct, frozen=True):
    found: int
    added: int
    enriched: int
    skipped: int = 0
    note: str | None = None

    def as_json(self) -> dict[str, int]:
        return {"found": self.found, "added": self.added, "enriched": self.enriched}


def index_url_for(feed_url: str) -> str | None:
    """The research index beside a web feed (same origin, path /research), or None for a file feed."""
    parts = urlsplit(feed_url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return urlunsplit((parts.scheme, parts.netloc, "/research", "", ""))


# --- reading -------------------------------------------------------------------------------------------


def read(client: httpx.Client, url: str) -> Index:
    """Fetch the index page (one GET, the feed's timeouts, a 20 MiB cap) and parse it."""
    try:
        answer = fetch(client, url, max_bytes=MAX_INDEX_BYTES, accept=ACCEPT_HTML)
    except FeedError as exc:
        raise IndexReadError(f"research index: {exc}") from None
    if not isinstance(answer, Fetched):  # no validators are sent, so this cannot happen; be safe anyway
        shown = redact_url(url)
        raise IndexReadError(f"research index: {shown} answered 304 Not Modified to an unconditional request")
    return parse(answer.content)


_NEXT_DATA_ID = re.compile(r"""\sid\s*=\s*["']?__NEXT_DATA__["'\s/>]""", re.IGNORECASE)
MAX_TAG_CHARS = 4096  # a longer <script ...> tag is not the one we look for


def next_data(text: str) -> str | None:
    """The text of the page's `<script id="__NEXT_DATA__">`, or None. One forward scan (str.find), so a page
    of unclosed or repeated <script tags costs linear time."""
    lower = text.lower()
    start = lower.find("<script")
    while start >= 0:
        end = text.find(">", start)
        if end < 0:
            return None
        if end - start <= MAX_TAG_CHARS and _NEXT_DATA_ID.search(text, start, end + 1):
            close = lower.find("</script", end)
            return text[end + 1 : close] if close >= 0 else None
        start = lower.find("<script", end)
    return None


def parse(content: bytes | str) -> Index:
    """Posts from the page's `__NEXT_DATA__` JSON, as Items (oldest first). Posts without a slug, a title or
    a date are skipped and counted; a page with no usable post at all is an error."""
    text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
    script = next_data(text)
    if script is None:
        is_html = re.search(r"<html|<!doctype html", text[:4096], re.IGNORECASE)
        what = "an HTML page" if is_html else "the answer"
        raise IndexReadError(f"research index: {what} has no <script id=\"__NEXT_DATA__\"> element")
    try:
        data = json.loads(script)
    except (ValueError, RecursionError) as exc:
        reason = getattr(exc, "msg", None) or type(exc).__name__
        raise IndexReadError(
            f"research index: the __NEXT_DATA__ script is not valid JSON ({reason})"
        ) from None
    posts = _dig(data, ("props", "pageProps", "posts"))
    if not isinstance(posts, list):
        raise IndexReadError(f"research index: the __NEXT_DATA__ JSON has {_missing(data)}")
    skipped: dict[str, int] = {}
    by_id: dict[str, Item] = {}
    for post in posts:
        item, problem = _post_item(post)
        if item is None:
            skipped[problem] = skipped.get(problem, 0) + 1
        elif item.id not in by_id or len(item.summary) > len(by_id[item.id].summary):
            by_id[item.id] = item
    if posts and not by_id:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(skipped.items()))
        raise IndexReadError(f"research index: none of its {len(posts)} posts is usable ({reasons})")
    items = sorted(by_id.values(), key=lambda i: (i.published, i.id))
    return Index(items=items, posts=len(posts), skipped=skipped)


def _dig(data: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _missing(data: Any) -> str:
    """Which part of props.pageProps.posts is missing or of the wrong type."""
    path = ("props", "pageProps", "posts")
    for depth in range(len(path)):
        node = _dig(data, path[:depth])
        key = path[depth]
        if not isinstance(node, dict) or key not in node:
            return f"no {'.'.join(path[: depth + 1])}"
    return "props.pageProps.posts that is not a list"


def _post_item(post: Any) -> tuple[Item | None, str]:
    if not isinstance(post, dict):
        return None, "not an object"
    link = _link(post.get("slug"))
    if link is None:
        return None, "missing slug"
    title = _plain(post.get("title"), markdown=False, limit=4 * MAX_TITLE_CHARS)
    if not title:
        return None, "missing title"
    published = parse_date(post.get("published"))
    if published is None:
        return None, "missing published"
    summary = _plain(post.get("body"), markdown=True, limit=MAX_BODY_CHARS)
    return (
        Item(
            id=link,
            guid=link.rsplit("/", 1)[-1],  # the bare slug, as the feed's guid is
            title=_cap(title, MAX_TITLE_CHARS),
            link=link,
            summary=_cap(summary, MAX_SUMMARY_CHARS),
            published=published,
            kind=kind_of(link),
            authors=_authors(post),
        ),
        "",
    )


_SLUG = re.compile(r"^[\w.~-]+(?:/[\w.~-]+)*$", re.UNICODE)


def _link(slug: Any) -> str | None:
    """https://machinelearning.apple.com/research/<slug>, canonical; None for a missing or odd slug."""
    if not isinstance(slug, str):
        return None
    slug = slug.strip().strip("/")
    if slug.startswith("research/"):
        slug = slug[len("research/") :]
    if not slug or len(slug) > 300 or not _SLUG.match(slug) or ".." in slug.split("/"):
        return None
    return canonical_link(f"{SITE}/research/{quote(slug, safe='/-._~')}")


def _plain(value: Any, *, markdown: bool, limit: int) -> str:
    """Plain text of a post's field, read from at most `limit` characters of it (an item keeps less)."""
    if not isinstance(value, str) or not value.strip():
        return ""
    value = value[:limit]
    text = html_to_text(value) if ("<" in value or "&" in value) else value
    if markdown:
        text = strip_markdown(text)
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paragraphs if p)


# Every pattern is linear: a scan started at a mark stops at the next mark of its kind (link text holds no
# bracket, a rule is one line), so a body of a million brackets or dashes costs what its length does.
_MD_IMAGE = re.compile(r"!\[([^\[\]]*)\]\([^()]*\)")
_MD_LINK = re.compile(r"\[([^\[\]]+)\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+\"[^\"]*\")?\)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_MD_QUOTE = re.compile(r"^\s{0,3}>\s?", re.MULTILINE)
_MD_BULLET = re.compile(r"^\s{0,3}(?:[-*+]|\d{1,3}[.)])\s+", re.MULTILINE)
_MD_EMPHASIS = re.compile(r"(?<![\w*])(\*{1,3}|_{1,3})(?=\S)([^\n*_]{1,300}?)(?<=\S)\1(?![\w*])")
_MD_CODE = re.compile(r"`{1,3}([^`\n]{1,300})`{1,3}")
_MD_LINE_MARK = re.compile(r"^\s{0,3}(?:#|>|[-*+]\s|\d{1,3}[.)]\s|[-*_]\s*[-*_]\s*[-*_])", re.MULTILINE)
_MD_RULE = re.compile(r"^[ \t]{0,3}(?:[-*_][ \t]*){3,}$", re.MULTILINE)


def strip_markdown(text: str) -> str:
    """Basic markdown to plain text: links and images keep their text, emphasis, code ticks, headings,
    quotes, bullets and rules lose their marks. Plain text passes through unchanged."""
    if "](" in text:
        text = _MD_IMAGE.sub(r"\1", text)
        text = _MD_LINK.sub(r"\1", text)
    if _MD_LINE_MARK.search(text):
        text = _MD_RULE.sub("", text)
        text = _MD_HEADING.sub("", text)
        text = _MD_QUOTE.sub("", text)
        text = _MD_BULLET.sub("\n", text)  # each list item its own paragraph
    if "`" in text:
        text = _MD_CODE.sub(r"\1", text)
    if "*" in text or "_" in text:
        for _ in range(2):  # nested emphasis such as ***bold italic*** or **_x_**
            text = _MD_EMPHASIS.sub(r"\2", text)
    return text


def parse_date(value: Any) -> datetime | None:
    """A UTC datetime from an ISO-8601 string, a date (YYYY-MM-DD), a "June 8, 2026" style date, or epoch
    seconds or milliseconds; None when there is none."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return _from_epoch(float(value))
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if re.fullmatch(r"-?\d+(?:\.\d+)?", text):
        return _from_epoch(float(text))
    moment: datetime | None = None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        for pattern in ("%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y", "%a, %d %b %Y %H:%M:%S %Z"):
            try:
                moment = datetime.strptime(text, pattern)
                break
            except ValueError:
                continue
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _from_epoch(number: float) -> datetime | None:
    if number > 1e11:  # milliseconds (1e11 seconds is the year 5138)
        number /= 1000
    try:
        moment = datetime.fromtimestamp(number, UTC)
    except (OverflowError, OSError, ValueError):
        return None
    return moment if date(1990, 1, 1) <= moment.date() <= date(2200, 1, 1) else None


_AUTHOR_MARKS = "†‡§¶*∗"


def _authors(post: dict[str, Any]) -> tuple[str, ...]:
    """Names from authorsOrdered (a list, or a comma-separated string) or else authors[] (strings, or
    objects with a name)."""
    for key in ("authorsOrdered", "authors"):
        names = _names(post.get(key))
        if names:
            return names
    return ()


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = " ".join(value[: MAX_AUTHORS * MAX_AUTHOR_CHARS].split())  # single spaces: a linear split
        raw: list[Any] = re.split(r"\s*[,;]\s*|\s+and\s+|\s*&\s*", value)
    elif isinstance(value, list):
        raw = value
    else:
        return ()
    names: list[str] = []
    for entry in raw:
        if isinstance(entry, dict):
            entry = entry.get("name") or " ".join(
                str(entry.get(k) or "") for k in ("firstName", "lastName")
            )
        if not isinstance(entry, str):
            continue
        entry = entry[: 4 * MAX_AUTHOR_CHARS]
        if "<" in entry or "&" in entry:
            entry = html_to_text(entry)
        name = " ".join(entry.split())
        name = name.strip(_AUTHOR_MARKS + " ,;").rstrip("0123456789" + _AUTHOR_MARKS).strip()
        if name and name not in names:
            names.append(name[:MAX_AUTHOR_CHARS])
        if len(names) >= MAX_AUTHORS:
            break
    return tuple(names)


def _cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --- backfill and enrichment ---------------------------------------------------------------------------


def backfill(
    store: Store, client: httpx.Client, url: str, *, progress: Progress | None = None
) -> BackfillResult:
    """Read the index and merge every post into the archive: unknown posts are added (never delivered),
    posts the feed already brought are enriched with the full abstract and authors. Raises IndexReadError
    or StoreError."""
    if progress:
        progress(f"reading {redact_url(url)} …")
    index = read(client, url)
    if progress:
        progress(f"merging {len(index.items):,} posts …")
    added, enriched = store.merge_index(index.items, progress=progress)
    store.set_meta(META_BACKFILLED, datetime.now(UTC).isoformat(timespec="seconds"))
    note = index.skipped_note()
    if note:
        log.warning("event=index_skipped note=%r", note)
    return BackfillResult(
        found=len(index.items), added=added, enriched=enriched, skipped=sum(index.skipped.values()), note=note
    )


def backfill_if_sparse(
    store: Store, client: httpx.Client, url: str, *, threshold: int = SPARSE_BELOW, retry: str = "next_poll"
) -> BackfillResult | None:
    """For `serve`: backfill once when the archive holds fewer than `threshold` items and no backfill has
    succeeded yet (the demo archive counts as empty: a backfill replaces it). Logs the outcome and never
    raises; None when nothing was done or it failed (call it again after the next poll: it retries until one
    backfill succeeds, then does nothing). `retry` is when the next try comes, as the failure's log line says
    it: "next_poll", or "next_start" when no poller runs (POLL_INTERVAL=0)."""
    try:
        sparse = store.count_items() < threshold or store.demo_loaded_at() is not None
        if store.get_meta(META_BACKFILLED) is not None or not sparse:
            return None
        result = backfill(store, client, url)
    except (IndexReadError, StoreError) as exc:
        log.warning("event=backfill_failed error=%r retry=%s", str(exc), retry)
        return None
    except Exception as exc:  # noqa: BLE001 - a first-run backfill must never take `serve` down
        reason = f"{type(exc).__name__}: {exc}"
        log.warning("event=backfill_failed error=%r retry=%s", reason, retry, exc_info=True)
        return None
    log.info(
        "event=backfill found=%d added=%d enriched=%d skipped=%d",
        result.found, result.added, result.enriched, result.skipped,
    )
    return result


def enrich(store: Store, client: httpx.Client, url: str, item_ids: Iterable[str]) -> int | None:
    """Fill in the full abstract and authors of newly polled items from the index (one request). Items the
    index does not list yet, or all of them when the request fails, are retried at the next call, at most
    ENRICH_ATTEMPTS times in all; until then the feed's text stands. Only items under /research/ are tried
    (the index lists papers, not /updates/ posts). Never raises; returns how many items were enriched, or
    None when there was nothing to do or the index could not be read."""
    found = enrich_found(store, client, url, item_ids)
    return None if found is None else found[0]


def enrich_found(
    store: Store, client: httpx.Client, url: str, item_ids: Iterable[str]
) -> tuple[int, list[str]] | None:
    """`enrich`, also saying which items the index listed with authors (this call's or earlier polls' items
    retried): the poller routes those by their authors (`bot.route.by_authors`)."""
    try:
        pending = _pending(store)
        for item_id in item_ids:
            if kind_of(item_id) == "research":
                pending.setdefault(item_id, 0)
        if not pending:
            return None
        try:
            index = read(client, url)
        except IndexReadError as exc:
            _save_pending(store, {k: n + 1 for k, n in pending.items() if n + 1 < ENRICH_ATTEMPTS})
            log.warning("event=enrich_failed items=%d error=%r", len(pending), str(exc))
            return None
        wanted = [item for item in index.items if item.id in pending]
        _, count = store.merge_index(wanted, insert=False)
        found = {item.id for item in wanted}
        _save_pending(
            store, {k: n + 1 for k, n in pending.items() if k not in found and n + 1 < ENRICH_ATTEMPTS}
        )
        log.info("event=enrich items=%d found=%d enriched=%d", len(pending), len(found), count)
        return count, [item.id for item in wanted if item.authors]
    except Exception as exc:  # noqa: BLE001 - enrichment is a nicety: it never breaks a poll
        log.warning("event=enrich_failed error=%r", f"{type(exc).__name__}: {exc}", exc_info=True)
        return None


def enricher(url: str | None) -> Callable[[Store, httpx.Client, Sequence[str]], list[str]] | None:
    """The poller's enrichment step for an index URL (None: no enrichment): it returns the ids of the items
    it found authors for."""
    if not url:
        return None

    def step(store: Store, client: httpx.Client, item_ids: Sequence[str]) -> list[str]:
        found = enrich_found(store, client, url, item_ids)
        return [] if found is None else found[1]

    return step


def _pending(store: Store) -> dict[str, int]:
    raw = store.get_meta(META_PENDING)
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): int(v) for k, v in data.items() if isinstance(v, int)}


def _save_pending(store: Store, pending: dict[str, int]) -> None:
    if pending or store.get_meta(META_PENDING):
        store.set_meta(META_PENDING, json.dumps(pending, sort_keys=True))
