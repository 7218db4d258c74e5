"""An endpoint that failed is left alone for a while: a circuit breaker, so one slow or broken endpoint costs
one request its budget, not every request after it.

    breaker = Breaker(probe, "the embeddings endpoint")   # probe: asks the endpoint once, raises BotError
    breaker.check()           # EmbeddingError (one line, the failure) at once while the endpoint is out
    breaker.trip("reason")    # after a failure or a timeout: out, and `probe` retried in the background
    breaker.out               # the reason while out, else None

While out, nobody asks the endpoint: `check` answers at once, and one background thread runs `probe` every
RETRY_EVERY seconds; the first probe that answers closes the breaker (one log line each way). bot.search.embed
puts the embeddings endpoint behind one; bot.search.index answers searches by their words meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from bot.errors import BotError, EmbeddingError

log = logging.getLogger("bot.search.breaker")

RETRY_EVERY = 30.0  # seconds between background probes of an endpoint that is out


class Breaker:
    def __init__(self, probe: Callable[[], object], shown: str, *, retry_every: float = RETRY_EVERY) -> None:
        self.probe = probe
        self.shown = shown
        self.retry_every = retry_every
        self.out: str | None = None
        self.back = threading.Event()  # set while the endpoint is in use (not out)
        self.back.set()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def check(self) -> None:
        """EmbeddingError, at once, while the endpoint is out."""
        reason = self.out
        if reason is not None:
            raise EmbeddingError(reason)

    def trip(self, reason: str) -> None:
        """The endpoint failed (`reason`, one line): out until a background probe answers."""
        with self._lock:
            if self.out is not None or self._stop.is_set():
                return
            self.out = reason
            self.back.clear()
        log.warning("event=endpoint_out endpoint=%r reason=%r retry_every=%gs", self.shown, reason,
                    self.retry_every)
        threading.Thread(target=self._retry, name="endpoint-retry", daemon=True).start()

    def close(self) -> None:
        """Stop retrying (a process or test that is done with the endpoint)."""
        self._stop.set()

    def _retry(self) -> None:
        while not self._stop.wait(self.retry_every):
            try:
                self.probe()
            except BotError as exc:
                log.debug("event=endpoint_still_out endpoint=%r reason=%r", self.shown, str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - whatever the probe hit, the retries go on
                log.debug("event=endpoint_still_out endpoint=%r reason=%s", self.shown, type(exc).__name__)
                continue
            with self._lock:
                self.out = None
                self.back.set()
            log.info("event=endpoint_back endpoint=%r", self.shown)
            return
