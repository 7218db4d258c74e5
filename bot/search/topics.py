"""Topic subscriptions by meaning: `subscribe about:"on-device efficiency"` matches a new item when the
topic's vector and the item's are similar enough, or when the item holds every word of the topic.

    matcher = TopicMatcher(loader)                     # loader: () -> Embedder (bot.search.embed.load)
    matcher(item, ["on-device efficiency"]) -> ["on-device efficiency (similarity 0.47; shares: on-device)"]

The store calls it at ingest (`Store.topic_matcher`, set by the pipeline) for each subscription's topics;
the label it returns is kept in the delivery row and shown on the post, so the post says why it matched.
THRESHOLD was tuned on tests/data/judged_queries.json: every (query, post) pair, relevant when judged 2 or 3,
cosine similarity of the bundled model with the glossary's forms added to the query; 0.42 gives the best F1
(precision 0.61, recall 0.45; 0.40: 0.57 / 0.49; 0.46: 0.74 / 0.38). When the model cannot be loaded, topics
match by their words only (and the label says so).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

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
    loader returns the same model)."""

    def __init__(self, model: Callable[[], Embedder], threshold: float = THRESHOLD) -> None:
        self._loader = model
        self.threshold = threshold
        self._model: Embedder | None = None
        self._failed = False
        self._lock = threading.Lock()

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
        if not topics:
            return []
        from bot.search.engine import item_text

        model = self._embedder()
        similarities: list[float] = []
        if model is not None:
            try:
                text = item_text(item.title, item.summary)
                matrix = model.embed([text, *(topic_text(t) for t in topics)])
                similarities = [float(matrix[0] @ matrix[n + 1]) for n in range(len(topics))]
            except BotError as exc:
                log.warning("event=topic_match_fallback reason=%r", str(exc))
        labels: list[str] = []
        for n, topic in enumerate(topics):
            if similarities and similarities[n] >= self.threshold:
                labels.append(f"{topic} (similarity {similarities[n]:.2f})")
            elif has_words(item, topic):
                labels.append(f"{topic} (its words)")
        return labels


def words_only(item: Item, topics: Sequence[str]) -> list[str]:
    """The matcher of a store without a model: topics match by their words."""
    return [f"{topic} (its words)" for topic in topics if has_words(item, topic)]
