"""A Store filled from the feed fixtures in tests/data, for command, summary, view and shell tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from bot import feed
from bot.models import Item, Validators
from bot.route import ingest
from bot.search.embed import StaticModel
from bot.search.index import SearchIndex
from bot.store import SQLiteStore, Store

DATA = Path(__file__).resolve().parent.parent / "data"
RSS = DATA / "apple_ml_rss.xml"
ARCHIVE = DATA / "apple_ml_archive.xml"
CORPUS = DATA / "apple_ml_corpus.json"  # 72 real posts (link, title, published, authors, abstract)
UNDATED = datetime(2017, 1, 1, tzinfo=UTC)  # the corpus leaves some dates unknown


def corpus_items() -> list[Item]:
    """The 72 real posts of apple_ml_corpus.json as Items (for search quality and parity)."""
    items = []
    for post in json.loads(CORPUS.read_text(encoding="utf-8")):
        day = post["published"]
        published = datetime.fromisoformat(day).replace(tzinfo=UTC) if day else UNDATED
        items.append(Item(id=post["link"], guid=post["link"], title=post["title"], link=post["link"],
                          summary=post["abstract"], published=published, kind=feed.kind_of(post["link"]),
                          authors=tuple(post["authors"])))
    return items


@cache
def bundled_model() -> StaticModel:
    """The bundled embedding model, loaded once for every test that searches by meaning."""
    return StaticModel.bundled()


def corpus_index(store: Store, meaning: bool = True) -> SearchIndex:
    """A search index of `store`, by meaning with the bundled model (or by keywords only)."""
    return SearchIndex(store, model=bundled_model) if meaning else SearchIndex(store)


def fixture_items(path: Path = ARCHIVE) -> list[Item]:
    return feed.parse(path.read_bytes())


def filled_store(directory: Path, path: Path = ARCHIVE, name: str = "bot.db") -> Store:
    """A migrated store holding every item of the feed at `path` (ingested as the baseline poll)."""
    store = SQLiteStore(directory / name)
    store.migrate()
    ingest(store, str(path), fixture_items(path), Validators(etag='"fixture"'))
    return store


def make_item(slug: str, title: str, summary: str, day: str = "2026-07-01", kind: str = "research") -> Item:
    link = f"https://machinelearning.apple.com/{'research' if kind == 'research' else 'updates'}/{slug}"
    return Item(
        id=link,
        guid=slug,
        title=title,
        link=link,
        summary=summary,
        published=datetime.fromisoformat(day).replace(tzinfo=UTC),
        kind="research" if kind == "research" else "update",
    )
