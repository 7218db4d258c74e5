"""Text -> unit vectors, for search by meaning. Imported lazily (numpy and the model cost start-up time): by
bot.search.vectors, when the index first wants vectors.

    model = load(settings)                # the bundled model, or the endpoint when EMBEDDINGS_API_URL is set
    model.name                            # stored beside every vector: a different name re-embeds the archive
    model.embed(["text", ...])            # float32 array (n, dim), rows of unit length

The bundled model is wordllama's 256-dimension static model (token embeddings, averaged): its weights and
tokenizer ship inside the wordllama wheel and are read from there explicitly. wordllama's own `load()` looks
for the tokenizer elsewhere and may download it; its package is never imported here (importing it also
configures the root logger), only its files are read, so loading never reaches the network.

The endpoint (OpenAI-compatible `/embeddings`) follows the summary endpoint's rules: TIMEOUT seconds in all
(QUERY_TIMEOUT for a single text), a capped answer, one-line failures (EmbeddingError). A single text (a
search's query) is asked on a thread of the model's own and waited for at most QUERY_BUDGET seconds, so a slow
endpoint never holds a request thread longer. After a failure or a timeout the endpoint is out
(bot.search.breaker): nobody asks it, `embed` fails at once (search then matches words only: the archive's
vectors are the endpoint's, and a query embedded by another model cannot be compared with them), and a
background thread asks it again every RETRY_EVERY seconds until it answers.

`load` checks the endpoint once with a short probe; when that fails, it logs one line and the bundled model
stands in (`Standby`: the archive's vectors and the queries' are then the bundled model's) while the endpoint
is retried in the background; bot.search.meaning moves search to the endpoint's vectors once it answers.
"""

from __future__ import annotations

import json
import logging
import mmap
import struct
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from bot.errors import EmbeddingError, FeedError
from bot.feed import Deadline, read_capped
from bot.search.breaker import RETRY_EVERY, Breaker
from bot.search.words import BUNDLED_CONFIG, TOKENIZER, package_root

if TYPE_CHECKING:
    import httpx

    from bot.config import Settings

log = logging.getLogger("bot.embed")

BUNDLED_DIM = 256
BUNDLED_NAME = f"wordllama-{BUNDLED_CONFIG}-{BUNDLED_DIM}"
MAX_TEXT_CHARS = 4000  # of one text embedded (a title and an abstract fit)
BATCH = 64  # texts per request to an endpoint
TIMEOUT = 20.0
QUERY_TIMEOUT = 2.0  # one text's request to the endpoint ends after this (on the model's own thread) ...
QUERY_BUDGET = 1.0  # ... and a request thread waits for it at most this: Slack wants an answer within 3 s,
# and a thread waiting on the endpoint is one of serve's two HTTP threads (bot.server.HTTP_THREADS)
QUERY_THREADS = 2  # threads asking the endpoint for single texts (a hung request holds one QUERY_TIMEOUT)
MAX_RESPONSE_BYTES = 32 * 1024 * 1024  # 64 vectors of 3,072 floats as JSON are ~4 MB


class Embedder(Protocol):
    name: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


def unit(rows: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero)."""
    rows = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms == 0, 1, norms)


def bundled_files() -> tuple[Path, Path]:
    """The bundled model's weights and tokenizer, in the installed wordllama package (not imported)."""
    root = package_root("wordllama")
    if root is None:
        raise EmbeddingError("the bundled embedding model is not installed (no wordllama package)")
    return (root / "weights" / f"{BUNDLED_CONFIG}_{BUNDLED_DIM}.safetensors",
            root.joinpath(*TOKENIZER))


SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32}
DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # where the system has madvise


def mapped_table(path: Path, name: str) -> np.ndarray:
    """A 2-D tensor of a safetensors file (8 bytes of header length, a JSON header, then the data), mapped
    read-only rather than read: a query touches only its tokens' rows, so the 16 MB table costs resident
    memory only for the rows used (the whole of it while an archive is being embedded). The file's pages are
    the kernel's to drop and share between processes."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if not 2 <= length <= 1 << 20:
            raise ValueError(f"not a safetensors file (header of {length} bytes)")
        header = json.loads(f.read(length))
    spec = header.get(name) if isinstance(header, dict) else None
    if not isinstance(spec, dict) or spec.get("dtype") not in SAFETENSORS_DTYPES:
        raise ValueError(f"no {name} tensor of a known type in {path.name}")
    rows, dim = (int(n) for n in spec["shape"])
    start, end = (int(n) for n in spec["data_offsets"])
    dtype = np.dtype(SAFETENSORS_DTYPES[spec["dtype"]])
    if end - start != rows * dim * dtype.itemsize:
        raise ValueError(f"{name} in {path.name}: {end - start} bytes for a {rows}x{dim} table")
    return np.memmap(path, dtype=dtype, mode="r", offset=8 + length + start, shape=(rows, dim))


class StaticModel:
    """A static embedding model: a text's vector is the mean of its tokens' vectors, scaled to unit length."""

    def __init__(self, weights: Path, tokenizer: Path, name: str = BUNDLED_NAME) -> None:
        from tokenizers import Tokenizer

        try:
            table = mapped_table(weights, "embedding.weight")
            self.tokenizer = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:  # noqa: BLE001 - any failure to read the files is one line
            raise EmbeddingError(f"the embedding model could not be loaded: {type(exc).__name__}: "
                                 f"{' '.join(str(exc).split())[:200]}") from None
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        self.table = table  # float16 as shipped, mapped from the file: only the rows read are resident
        self.name = name
        self.dim = int(self.table.shape[1])

    @classmethod
    def bundled(cls) -> StaticModel:
        """The bundled model, loaded once per process (search and topic matching share it)."""
        return _bundled()

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encoded = self.tokenizer.encode_batch([t[:MAX_TEXT_CHARS] for t in texts], add_special_tokens=False)
        for row, enc in enumerate(encoded):
            ids = np.asarray(enc.ids, dtype=np.int64)
            if ids.size:
                np.clip(ids, 0, self.table.shape[0] - 1, out=ids)
                out[row] = self.table[ids].mean(axis=0, dtype=np.float32)
        self._let_go()
        return unit(out)

    def _let_go(self) -> None:
        """Drop the table's pages from this process's resident memory (they stay in the kernel's page cache,
        so the next text's rows are found there at once): the rows a text used are not needed again, and
        otherwise a busy server keeps most of the 16 MB resident (serve under bench_app's two realistic loads
        on PostgreSQL peaked at 136.9 MB with this, 143.6 MB without)."""
        mapping = getattr(self.table, "_mmap", None)  # numpy.memmap's mmap.mmap
        if mapping is not None and DONTNEED is not None:
            mapping.madvise(DONTNEED)


@cache
def _bundled() -> StaticModel:
    weights, tokenizer = bundled_files()
    return StaticModel(weights, tokenizer)


class RemoteModel:
    """An OpenAI-compatible embeddings endpoint, behind a breaker (`breaker`: out after a failure or a
    timeout, retried every `retry_every` seconds in the background). `client` (an httpx.Client) is
    injectable for tests."""

    def __init__(self, api_url: str, api_key: str | None, model: str | None, *,
                 client: httpx.Client | None = None, timeout: float = TIMEOUT, budget: float = QUERY_BUDGET,
                 retry_every: float = RETRY_EVERY) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_key = api_key
        self.model = model or "text-embedding-3-small"
        self.name = f"api:{self.model}"
        self.client = client
        self.timeout = timeout
        self.budget = budget
        self.breaker = Breaker(lambda: self._request(["probe"]), "the embeddings endpoint",
                               retry_every=retry_every)
        self._queries = ThreadPoolExecutor(max_workers=QUERY_THREADS, thread_name_prefix="embed-query")

    def embed(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of `texts`; EmbeddingError (one line) at once while the endpoint is out, and when it
        fails or takes longer than its budget (then it is out)."""
        self.breaker.check()
        try:
            if len(texts) == 1:
                return unit(self._within_budget(texts[0][:MAX_TEXT_CHARS] or " "))
            rows: list[np.ndarray] = []
            for start in range(0, len(texts), BATCH):
                rows.append(self._request([t[:MAX_TEXT_CHARS] or " " for t in texts[start : start + BATCH]]))
        except EmbeddingError as exc:
            self.breaker.trip(str(exc))
            raise
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return unit(np.vstack(rows))

    def _within_budget(self, text: str) -> np.ndarray:
        """One text's vector, asked on the model's own thread: the caller waits at most `budget` seconds."""
        try:
            future = self._queries.submit(self._request, [text])
        except RuntimeError:  # the interpreter is shutting down
            raise EmbeddingError("the embeddings endpoint is not asked while the bot stops") from None
        try:
            return future.result(timeout=self.budget)
        except FutureTimeout:
            raise EmbeddingError(f"no answer from the embeddings endpoint in {self.budget:g} s") from None

    def _request(self, texts: list[str]) -> np.ndarray:
        import httpx  # imported when an endpoint is first asked, not when `serve` starts

        timeout = min(self.timeout, QUERY_TIMEOUT) if len(texts) == 1 else self.timeout
        deadline = Deadline(timeout, "the embeddings endpoint")
        try:
            if self.client is not None:
                raw = self._post(self.client, texts, deadline)
            else:
                with httpx.Client() as client:
                    raw = self._post(client, texts, deadline)
        except FeedError as exc:
            raise EmbeddingError(str(exc)) from None
        except httpx.TimeoutException:
            raise EmbeddingError(f"no answer from the embeddings endpoint in {timeout:g} s") from None
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            raise EmbeddingError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}") from None
        try:
            data = sorted(json.loads(raw)["data"], key=lambda d: d["index"])
            matrix = np.asarray([d["embedding"] for d in data], dtype=np.float32)
        except (ValueError, KeyError, TypeError):
            raise EmbeddingError("the embeddings endpoint's answer is not a list of embeddings") from None
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or not matrix.shape[1] \
                or not np.isfinite(matrix).all():
            raise EmbeddingError("the embeddings endpoint's answer does not hold one vector per text")
        return matrix

    def _post(self, client: httpx.Client, texts: list[str], deadline: Deadline) -> bytes:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        body = {"model": self.model, "input": texts}
        url = f"{self.api_url}/embeddings"
        with client.stream("POST", url, json=body, headers=headers, timeout=deadline.left()) as response:
            if response.status_code != 200:
                raise EmbeddingError(f"HTTP {response.status_code} from the embeddings endpoint")
            return read_capped(response, MAX_RESPONSE_BYTES, deadline, "the embeddings endpoint")


class Standby:
    """The bundled model standing in for an embeddings endpoint that was out when search by meaning loaded
    (`endpoint`, retried in the background): the archive's vectors and the queries' are the bundled model's,
    so a query is only ever compared with items embedded by the same model."""

    def __init__(self, model: Embedder, endpoint: RemoteModel) -> None:
        self.model = model
        self.endpoint = endpoint
        self.name = model.name

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.embed(texts)


def load(settings: Settings | None = None, *, client: httpx.Client | None = None,
         retry_every: float = RETRY_EVERY) -> Embedder:
    """The model search uses: the endpoint when configured and answering, else the bundled model (standing
    in for the endpoint while it is retried, when one is configured). Raises EmbeddingError (one line) when
    the bundled model cannot be loaded either."""
    if settings is not None and settings.embeddings_api_url:
        remote = RemoteModel(settings.embeddings_api_url, settings.embeddings_api_key,
                             settings.embeddings_model, client=client, retry_every=retry_every)
        try:
            remote.embed(["probe"])
            return remote
        except EmbeddingError as exc:  # the endpoint is out now, retried in the background
            log.warning("event=embeddings_fallback reason=%r model=%s", str(exc), BUNDLED_NAME)
            return Standby(StaticModel.bundled(), remote)
    return StaticModel.bundled()
