"""Pages in the shape of https://machinelearning.apple.com/research for tests and benchmarks.

    index_page(posts) -> bytes           # a Next.js-style HTML page, posts at props.pageProps.posts
    post(slug, title, body, published, authors=...) -> dict
    synthetic_posts(n) -> list[dict]     # n distinct made-up posts, newest first
    item_page(title, body, publication=..., event=..., code=...) -> bytes   # an item's own page, in
                                         # the structure of tests/data/item_pages/normalizing-flows.html (its
                                         # notes say what stored copies of the site confirm of it)

The shape follows a third-party scraper's description of the real page (slug, title, body as HTML or markdown,
published, authors[], authorsOrdered, documentId); it is not a saved copy of the page.
"""

from __future__ import annotations

import html
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATA = Path(__file__).resolve().parent.parent / "data"
INDEX_FIXTURE = DATA / "apple_ml_research.html"
PAGES = DATA / "item_pages"


def index_page(posts: list[dict[str, Any]], *, extra: dict[str, Any] | None = None, pad: int = 0) -> bytes:
    """An HTML page whose __NEXT_DATA__ script holds `posts`; `pad` adds that many bytes of markup."""
    data = {
        "props": {"pageProps": {"posts": posts, **(extra or {})}, "__N_SSG": True},
        "page": "/research",
        "query": {},
        "buildId": "test",
    }
    script = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    links = "".join(
        f'<li><a href="/research/{html.escape(str(p.get("slug")))}">'
        f"{html.escape(str(p.get('title')))}</a></li>"
        for p in posts[:50]
        if isinstance(p, dict)
    )
    padding = f"<!-- {'x' * pad} -->" if pad else ""
    return (
        '<!DOCTYPE html><html lang="en-US"><head><meta charSet="utf-8"/><title>Research</title></head>'
        f'<body><div id="__next"><ul>{links}</ul>{padding}</div>'
        f'<script id="__NEXT_DATA__" type="application/json">{script}</script></body></html>'
    ).encode()


def post(
    slug: str,
    title: str,
    body: str,
    published: Any,
    *,
    authors: list[str] | None = None,
    authors_ordered: str | None = None,
    document_id: str | None = None,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "documentId": document_id or f"doc-{slug}",
        "slug": slug,
        "title": title,
        "body": body,
        "published": published,
        "authors": authors or [],
    }
    if authors_ordered is not None:
        entry["authorsOrdered"] = authors_ordered
    return entry


_WORDS = tuple(
    [
        "diffusion",
        "transformer",
        "caption",
        "retrieval",
        "speech",
        "privacy",
        "federated",
        "vision",
        "language",
        "model",
        "tokenizer",
        "attention",
        "sparse",
        "quantization",
        "robustness",
        "alignment",
        "reward",
        "agent",
        "planning",
        "graph",
        "kernel",
        "flow",
    ]
)


def synthetic_posts(
    n: int, *, start: datetime | None = None, prefix: str = "synthetic"
) -> list[dict[str, Any]]:
    """`n` made-up posts with distinct slugs, dates a day apart (newest first), 2-6 authors, ~1,500-char
    HTML abstracts."""
    start = start or datetime(2026, 6, 1, tzinfo=UTC)
    posts = []
    for i in range(n):
        words = [_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(12)]
        sentence = " ".join(words).capitalize() + "."
        body = "".join(f"<p>{sentence} Paragraph {p} of post {i} studies {words[p]}.</p>" for p in range(8))
        authors = [f"Author{(i + k) % 997} Surname{(i * 3 + k) % 991}" for k in range(2 + i % 5)]
        posts.append(
            post(
                f"{prefix}-{i}",
                f"{words[0].capitalize()} {words[1]} for {words[2]} ({prefix} {i})",
                body,
                (start - timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                authors=authors,
            )
        )
    return posts


def item_page(title: str, body: str, *, publication: str | None = None, related: str = "",
              authors: str = "Ada Example, Bo Fixture", event: str | None = None,
              code: str | None = None) -> bytes:
    """An item's own page as the site serves it (the structure of
    tests/data/item_pages/normalizing-flows.html): the site's navigation; the header: a research area, the
    conference tag of `event` ("conference ICML" to /research/?event=ICML; "Workshop at ICLR" for the event
    "ICLR Workshop"), "content type paper", the title, the authors, "View publication" (`publication`) and
    "View source code (GitHub)" (`code`) when given, "Copy Bibtex"; `body` (HTML paragraphs); "Related
    readings and updates." with `related` (other posts' teasers); the footer; the page's __NEXT_DATA__
    script."""
    tags = ('<a href="/research/?domain=Methods%20and%20Algorithms"><span>research area</span> '
            "Methods and Algorithms</a>")
    if event is not None:
        words = (f"Workshop at {html.escape(event.removesuffix(' Workshop'))}" if event.endswith(" Workshop")
                 else f"<span>conference</span> {html.escape(event)}")
        tags += f' | <a href="/research/?event={quote(event)}">{words}</a>'
    links = "".join(f'<a class="button" href="{html.escape(href)}">{words}</a> ' for href, words in
                    ((publication, "View publication"), (code, "View source code (GitHub)")) if href)
    data = json.dumps({"props": {"pageProps": {"post": {"title": title}}}, "page": "/research/[slug]"})
    return (
        '<!DOCTYPE html><html lang="en-US"><head><meta charSet="utf-8"/>'
        f"<title>{html.escape(title)} - Apple Machine Learning Research</title></head>"
        '<body><div id="__next"><nav><a href="/">Machine Learning Research</a> '
        '<a href="/research/">Publications</a>'
        f'</nav><main><article><div class="post-header"><p>{tags}</p>'
        '<p><a href="/research/"><span>content type</span> paper</a> | published June 2026</p>'
        f"<h1>{html.escape(title)}</h1><p><span>Authors</span>{html.escape(authors)}</p>"
        f'<div>{links}<button type="button">Copy Bibtex</button></div></div>'
        f'<div class="post-body">{body}</div></article>'
        f"<section><h2>Related readings and updates.</h2>{related}</section></main>"
        '<footer><a href="https://www.apple.com/legal/">Legal</a></footer></div>'
        f'<script id="__NEXT_DATA__" type="application/json">{data}</script></body></html>'
    ).encode()
