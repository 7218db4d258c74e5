"""Topic subscriptions by meaning: `subscribe about:"on-device efficiency"` matches a new item when the
topic's vector and the item's are similar enough, or when the item holds every word of the topic.

    matcher = TopicMatcher(loader)                     # loader: () -> Embedder (bot.search.embed.load)
    matcher(item, ["on-device efficiency"]) -> ["on-device efficiency (similarity 0.47; shares: on-device)"]

The poll's routing step (`bot.route`) calls it before ingest, once for all new items and every topic of
the audience; the label it returns is kept in the delivery row and shown on the post, so the post says why
it matched.
THRESHOLD was tuned on tests/data/judged_queries.json (its first 58 queries, before those added on
2026-12-04): every (query, post) pair, relevant when judged 2 or 3,
cosine similarity of the bundled model with the glossary's forms added to the query; 0.42 gives the best F1
(precision 0.61, recall 0.45; 0.40: 0.57 / 0.49; 0.46: 0.74 / 0.38). When the model cannot be loaded, topics
match by their words only (and the label says so).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bot.errors import BotError
from bot.models import Item
from bot.search import glossary
from bot.search.analysis import terms

if TYPE_CHECKING:
    from bot.search.embed import Embedder

log = logging.getLogger("bot.search.topics")

THRESHOLD = 0.42


def topic_text(topic: str) -> str:
    """What a topic's vector is computed from: its words and the glossary's other forms of them."""
    expansions = glossary.expand(topic.split(), topic)
    return " ".join([topic] + [" ".join(e.shown) for e in expansions])


def has_words(item: Item, topic: str) -> bool:
    """Whether the item's title and abstract hold every word of the topic (analyzed: stems)."""
    wanted = set(terms(topic))
    return bool(wanted) and wanted <= set(terms(f"{item.title} {item.summary}"))


class TopicMatcher:
    """Matches items to topics by meaning; the model loads on first use (shared with search when the
    loader returns the same model). `match` embeds what it has not seen, items and topics, in one call and
    keeps each vector (up to MAX_CACHED, per model): an item is embedded once however many people and topics
    it is matched against (and when routing runs again), a topic once for every poll to come. When
    the model fails (a slow or failing endpoint), that is one log line and topics match by their words for
    the next RETRY_AFTER seconds without asking the model again."""

    MAX_CACHED = 4096  # vectors kept, items' and topics' (a workspace holds at most MAX_WORKSPACE_TOPICS)
    RETRY_AFTER = 60.0  # seconds

    def __init__(self, model: Callable[[], Embedder], threshold: float = THRESHOLD,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._loader = model
        self.threshold = threshold
        self._model: Embedder | None = None
        self._failed = False
        self._lock = threading.Lock()
        self._clock = clock
        self._resting_until = 0.0
        self._vectors: dict[str, Any] = {}  # text -> its unit vector, for the model named _vectors_of
        self._vectors_of = ""

    def _embedder(self) -> Embedder | None:
        with self._lock:
            if self._model is None and not self._failed:
                try:
                    self._model = self._loader()
                except BotError as exc:
                    self._failed = True
                    log.warning("event=topic_model_failed reason=%r", str(exc))
            return self._model

    def __call__(self, item: Item, topics: Sequence[str]) -> list[str]:
        """The labels of the topics `item` matches: "topic (similarity 0.47)" or "topic (its words)"."""
        return self.match([item], topics)[0]

    def match(self, items: Sequence[Item], topics: Sequence[str]) -> list[list[str]]:
        """For each of `items`, the labels of the `topics` it matches (as `__call__`)."""
        if not topics or not items:
            return [[] for _ in items]
        similarities = self._similarities(items, topics)
        labels: list[list[str]] = []
        for i, item in enumerate(items):
            mine: list[str] = []
            for n, topic in enumerate(topics):
                if similarities is not None and similarities[i][n] >= self.threshold:
                    mine.append(f"{topic} (similarity {float(similarities[i][n]):.2f})")
                elif has_words(item, topic):
                    mine.append(f"{topic} (its words)")
            labels.append(mine)
        return labels

    def _similarities(self, items: Sequence[Item], topics: Sequence[str]) -> Any:
        """The (items x topics) cosine similarities, or None when the model gives none."""
        if self._clock() < self._resting_until:
            return None
        model = self._embedder()
        if model is None:
            return None
        import numpy as np  # the embedding model's boundary: numpy comes with it

        from bot.search.engine import item_text

        item_texts = [item_text(item.title, item.summary) for item in items]
        topic_texts = [topic_text(t) for t in topics]
        with self._lock:
            if self._vectors_of != model.name:
                self._vectors, self._vectors_of = {}, model.name
            missing = [t for t in dict.fromkeys(item_texts + topic_texts) if t not in self._vectors]
        try:
            matrix: Any = model.embed(missing) if missing else []
        except BotError as exc:
            self._resting_until = self._clock() + self.RETRY_AFTER
            log.warning("event=topic_match_fallback reason=%r retry_in=%ds", str(exc), self.RETRY_AFTER)
            return None
        fresh = dict(zip(missing, matrix, strict=True))
        with self._lock:
            known = {**self._vectors, **fresh}
            if len(self._vectors) + len(fresh) > self.MAX_CACHED:
                self._vectors.clear()
            self._vectors.update(fresh)
        return np.stack([known[t] for t in item_texts]) @ np.stack([known[t] for t in topic_texts]).T


def words_only(item: Item, topics: Sequence[str]) -> list[str]:
    """The matcher without a model: topics match by their words."""
    return [f"{topic} (its words)" for topic in topics if has_words(item, topic)]
