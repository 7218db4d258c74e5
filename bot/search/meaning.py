"""Search by meaning's state beside the index: the embedding model and the archive's vectors that
bot.search.index's `SearchIndex` searches with (the tantivy index is bot.search.engine's), derived from the
store like the index, and kept in step with it.

    meaning = Meaning(store, loader, current)    # loader: SearchIndex(model=...); current: the fresh snapshot
    meaning.ready(snapshot, store) -> (model, vectors, None) | (None, None, "why these results match words")

In serve (after `start`) nothing is computed in a request thread: the model loads and the archive's vectors
are read (or computed) in the background (`load`), and new items are embedded there. A search matches words
only, and its note says why, while the model loads (LOADING_NOTE), while the vectors lack any of the archive's
items (CATCHING_UP_NOTE: new items, a failed load, a rebuild; completed in the background), and while the
embeddings endpoint is out (`unavailable`: the archive's vectors are the endpoint's, so no other model may
embed the query; bot.search.breaker retries it). When the endpoint was out at start the bundled model stands
in (`embed.Standby`, its own vectors of the archive) and search moves to the endpoint's vectors once it
answers (`follow_endpoint`). numpy, the model and the vectors are imported when first used.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.errors import BotError, EmbeddingError
from bot.search.engine import Snapshot
from bot.store import Store

if TYPE_CHECKING:
    from bot.search.embed import Embedder
    from bot.search.vectors import Progress, Vectors

log = logging.getLogger("bot.search")

LOADING_NOTE = ("Search by meaning is still starting up: these results match your words only (nothing is "
                "lost; ask again in a minute to also match by meaning).")
CATCHING_UP_NOTE = ("Search by meaning is catching up with the archive: these results match your words only "
                    "(nothing is lost; ask again in a minute to also match by meaning).")


class Meaning:
    """The model and vectors of one SearchIndex (see the module docstring); safe to share between threads.

    `loader` returns the Embedder (called once, when first needed, or in the background after `start`; None:
    search by meaning is not configured); `current` returns the index's snapshot as fresh as the archive, for
    the background threads."""

    def __init__(self, store: Store, loader: Callable[[], Embedder] | None,
                 current: Callable[[], Snapshot]) -> None:
        self.store = store
        self._loader = loader
        self._current = current
        self._model: Embedder | None = None
        self._model_error: str | None = None
        self._vectors: Vectors | None = None
        self._vector_lock = threading.Lock()
        self._background = False  # start() was called: the model loads there, searches never wait for it
        self._loading = threading.Event()  # start()'s thread is loading the model and the vectors
        self._refreshing = threading.Event()  # a background thread is embedding new items (or switching)
        self._refresh_lock = threading.Lock()

    @property
    def configured(self) -> bool:
        """Whether search by meaning is configured."""
        return self._loader is not None

    @property
    def held(self) -> Vectors | None:
        """The vectors in memory now (the answers SearchIndex keeps are good only while these are)."""
        return self._vectors

    def start(self) -> None:
        """serve's start-up: from now on the model and vectors load in the background (`load`), and searches
        meanwhile match words only."""
        self._background = True
        if self.configured:
            self._loading.set()

    def load(self) -> None:
        """After `start`, in its thread once the index is built: load the model, read (or compute) the vectors
        of every item, then drop other models' vectors."""
        try:
            vectors = self.vectors(self._current())
        except BotError as exc:  # searches match words, and the next one tries again (in the background)
            log.warning("event=vectors_unavailable reason=%r", str(exc))
            return
        finally:
            self._loading.clear()
        self._drop_other_models(vectors)

    def _drop_other_models(self, vectors: Vectors | None) -> None:
        """At serve's start, once every item has its vector for the model in use: the vectors of other models
        (an earlier EMBEDDINGS_MODEL, the bundled model before an endpoint was set) are dead weight, deleted.
        Only here: a one-shot command (`search`, `related`, the shell) run with other settings against the
        same database never deletes what the server uses; `reindex` drops them too. Never while the bundled
        model stands in for an endpoint that is out (`embed.Standby`): the endpoint's are wanted back."""
        from bot.search.embed import Standby

        if vectors is None or isinstance(self._model, Standby):
            return
        try:
            dropped = self.store.drop_item_vectors(vectors.model)
        except BotError as exc:
            log.warning("event=old_vectors_kept reason=%r", str(exc))
            return
        if dropped:
            log.info("event=old_vectors_dropped kept_model=%s count=%d", vectors.model, dropped)

    def model(self) -> Embedder:
        """The embedding model, loaded on first use (EmbeddingError, one line, when it cannot be)."""
        if self._model is not None:
            return self._model
        if self._model_error is not None or self._loader is None:
            raise EmbeddingError(self._model_error or "search by meaning is not configured")
        with self._vector_lock:
            if self._model is None and self._model_error is None:
                try:
                    self._model = self._loader()
                except EmbeddingError as exc:
                    self._model_error = str(exc)
                    log.warning("event=embedding_model_failed reason=%r", str(exc))
                    raise
            if self._model is None:
                raise EmbeddingError(self._model_error or "the embedding model is not loaded")
            return self._model

    def vectors(self, snapshot: Snapshot, store: Store | None = None, progress: Progress | None = None,
                wait: bool = True, recompute: bool = False) -> Vectors | None:
        """The vectors of `snapshot`'s items (computed for those without one; for all with `recompute`).
        None when another thread is computing them and `wait` is false."""
        from bot.search.vectors import sync

        model = self.model()
        current = self._vectors
        if current is not None and current.marker == snapshot.marker and current.model == model.name \
                and not recompute:
            return current
        if not self._vector_lock.acquire(blocking=wait):
            return None
        try:
            current, model = self._vectors, self._model or model  # the endpoint's, if it came back meanwhile
            if current is None or current.marker != snapshot.marker or current.model != model.name \
                    or recompute:
                current = self._vectors = sync(store or self.store, model, snapshot.entries, snapshot.marker,
                                               None if recompute else current, progress, recompute)
            return current
        finally:
            self._vector_lock.release()

    def _claim_refresh(self) -> bool:
        """Whether this caller may start the one background refresh (none is running)."""
        with self._refresh_lock:
            if self._refreshing.is_set():
                return False
            self._refreshing.set()
            return True

    def _refresh_in_background(self) -> None:
        if not self._claim_refresh():
            return

        def refresh() -> None:
            try:
                self.vectors(self._current())
            except BotError as exc:
                log.warning("event=vectors_refresh_failed reason=%r", str(exc))
            finally:
                self._refreshing.clear()

        threading.Thread(target=refresh, name="search-vectors", daemon=True).start()

    def follow_endpoint(self) -> None:
        """In serve, before a search: when the bundled model stands in for an endpoint that was out at start
        (`embed.Standby`) and the endpoint answers again, its vectors of the archive are read (or computed)
        in the background, then searches move to the endpoint and its vectors together."""
        if self._background and self._model is not None:
            self._back_to_the_endpoint(self._model)

    def _back_to_the_endpoint(self, model: Embedder) -> None:
        from bot.search.embed import Standby
        from bot.search.vectors import sync

        if not isinstance(model, Standby) or model.endpoint.breaker.out is not None \
                or not self._claim_refresh():
            return
        endpoint = model.endpoint

        def switch() -> None:
            try:
                snapshot = self._current()
                with self._vector_lock:
                    vectors = sync(self.store, endpoint, snapshot.entries, snapshot.marker)
                    self._model, self._vectors = endpoint, vectors
                log.info("event=embeddings_endpoint_in_use model=%s items=%d", endpoint.name,
                         len(vectors.ids))
            except BotError as exc:  # out again: the bundled model goes on standing in
                log.warning("event=embeddings_endpoint_not_used reason=%r", str(exc))
            finally:
                self._refreshing.clear()

        threading.Thread(target=switch, name="search-vectors", daemon=True).start()

    def usable(self, snapshot: Snapshot, store: Store | None = None) -> Vectors | None:
        """The vectors to use now for `snapshot`: in serve (after `start`) those already in memory, never
        computed in the calling thread (new items are embedded in the background: they have none meanwhile,
        and none at all while the model loads); else computed here. None while there are none."""
        if not self._background:
            return self.vectors(snapshot, store)
        current, model = self._vectors, self._model
        if self._loading.is_set() or self._model_error is not None or _endpoint_out(model):
            return current  # (an endpoint that is out embeds nothing: its breaker retries it)
        if current is None or model is None or current.marker != snapshot.marker \
                or current.model != model.name:
            self._refresh_in_background()
        if model is not None:
            self._back_to_the_endpoint(model)
        return current

    def ready(self, snapshot: Snapshot, store: Store | None
              ) -> tuple[Embedder | None, Vectors | None, str | None]:
        """The model and vectors to search `snapshot` with, or None and a note saying why not: still starting
        up, or catching up (no vectors, or fewer than the items: a failed load, new items, a rebuild)."""
        if not self.configured:
            return None, None, None
        if self._model_error is not None:
            return None, None, unavailable(self._model_error)
        if self._background and self._loading.is_set():
            return None, None, LOADING_NOTE
        if out := _endpoint_out(self._model):  # the archive's vectors are the endpoint's: words only
            return None, None, unavailable(out)
        try:
            vectors = self.usable(snapshot, store)
            model = self._model if self._background else self.model()  # serve loads it in the background
        except BotError as exc:
            return None, None, unavailable(exc)
        if model is None or vectors is None or vectors.model != model.name or not _covers(vectors, snapshot):
            return None, None, CATCHING_UP_NOTE
        return model, vectors, None


def unavailable(error: BotError | str) -> str:
    """The note of results that match words only because search by meaning failed (one line)."""
    return f"Search by meaning is unavailable ({' '.join(str(error).split())[:150]}); these results match " \
           "your words only."


def _endpoint_out(model: Embedder | None) -> str | None:
    """Why the embeddings endpoint `model` is out (bot.search.breaker); None when in use or no endpoint."""
    if model is None:
        return None
    from bot.search.embed import RemoteModel  # loaded with the model

    return model.breaker.out if isinstance(model, RemoteModel) else None


def _covers(vectors: Vectors, snapshot: Snapshot) -> bool:
    """Whether `vectors` hold a row for every item of `snapshot` (those of its marker do)."""
    return vectors.marker == snapshot.marker or snapshot.entries.keys() <= vectors.position.keys()
