"""The demo archive: real posts to try the bot on offline (`mlresearch-bot demo`, the shell's `demo`).

    result = load(store)   # DemoResult: "loaded" (72 items) or "already" (nothing changes); Failure when the
                           # database holds a real archive (nothing changes)

The archive is bot/data/demo_archive.json, shipped in the package (`[tool.setuptools.package-data]`): 72 posts
of Apple Machine Learning Research with their real titles, abstracts, authors and days published (36 of them
kept no day: they sort last and show "date unknown", `bot.models.UNDATED`). It loads only into a database that
holds no real archive, marked there as the demo (`Store.demo_loaded_at`; `status` says so on every surface).
Its items are never posted: they are not polled, so nothing is queued for them. The first poll or backfill
that succeeds replaces it, in its own transaction (`bot.store.demo`): a demo is never mixed with real items,
and that poll is the feed's first (it records what is there and posts nothing).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from msgspec import Struct

from bot.errors import Failure
from bot.feed import kind_of
from bot.models import UNDATED, Item
from bot.store import Store

DEMO_FILE = Path(__file__).with_name("data") / "demo_archive.json"
POSTS = 72  # what the file holds (a test checks it): the number the shell offers


class DemoResult(Struct, frozen=True):
    """What loading did: "loaded" or "already" (the demo was there), and how many items the archive holds."""

    outcome: str
    items: int

    def as_json(self) -> dict[str, Any]:
        return {"demo": True, "loaded": self.outcome == "loaded", "items": self.items}

    def line(self) -> str:
        """The one line a person reads."""
        if self.outcome == "already":
            return f"the demo archive is already loaded ({self.items} real posts); nothing changed"
        return (f"loaded the demo archive: {self.items} real posts of Apple ML Research, for trying the bot "
                "offline (never posted to a channel; the first poll or backfill that reaches the feed "
                "replaces it)")


def posts(path: Path = DEMO_FILE) -> list[Item]:
    """The bundled posts as Items."""
    items = []
    for post in json.loads(path.read_text(encoding="utf-8"))["posts"]:
        day = post.get("published")
        published = datetime.fromisoformat(day).replace(tzinfo=UTC) if day else UNDATED
        items.append(Item(id=post["link"], guid=post["link"], title=post["title"], link=post["link"],
                          summary=post["abstract"], published=published, kind=kind_of(post["link"]),
                          authors=tuple(post["authors"])))
    return items


def load(store: Store) -> DemoResult:
    """Load the demo archive into `store` (migrated). Raises Failure, changing nothing, when the store holds a
    real archive."""
    outcome, held = store.load_demo(posts())
    if outcome == "refused":
        raise Failure(
            f"this database holds a real archive ({held} items), so the demo archive was not loaded: it goes "
            f"only into an empty database (e.g. DATABASE_URL=sqlite:///demo.db mlresearch-bot demo)"
        )
    return DemoResult(outcome, held)
