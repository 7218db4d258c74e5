"""Search quality on a judged query set: nDCG@10 per kind of query, keyword-only and hybrid side by side.

    .venv/bin/python benchmarks/bench_quality.py [--queries tests/data/judged_queries.json] [--detail]

The archive is tests/data/apple_ml_corpus.json (72 real Apple ML Research posts) in a temporary SQLite store;
the queries (acronyms, descriptions in other words, questions, keywords) and their graded relevance were
judged from the post texts before any ranking was looked at. Keyword-only is the SearchIndex without a
model (BM25 with the glossary); hybrid adds the bundled embedding model. No asserts: it reports.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.search.embed import StaticModel  # noqa: E402
from bot.search.index import SearchIndex  # noqa: E402
from bot.search.query import parse_query  # noqa: E402
from bot.store import open_store  # noqa: E402
from tests.fakes.archive import CORPUS, corpus_items  # noqa: E402

QUERIES = ROOT / "tests" / "data" / "judged_queries.json"
KINDS = ("acronym", "description", "question", "keyword")


def ndcg(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    gain = sum((2 ** relevant.get(i, 0) - 1) / math.log2(n + 2) for n, i in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    best = sum((2**g - 1) / math.log2(n + 2) for n, g in enumerate(ideal))
    return gain / best if best else 0.0


def evaluate(index: SearchIndex, queries: list[dict], detail: bool = False) -> dict[str, float]:
    per_kind: dict[str, list[float]] = defaultdict(list)
    for q in queries:
        hits = index.search(parse_query(q["query"]), 10).hits
        score = ndcg([h.item.id for h in hits], q["relevant"])
        per_kind[q["kind"]].append(score)
        if detail:
            print(f"  {score:.2f} {q['kind']:<11} {q['query']}")
    return {kind: sum(v) / len(v) for kind, v in per_kind.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, default=QUERIES)
    parser.add_argument("--detail", action="store_true", help="print each query's nDCG@10")
    args = parser.parse_args()
    queries = json.loads(args.queries.read_text(encoding="utf-8"))["queries"]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/quality.db")
        store.migrate()
        store.add_items(corpus_items())
        model = StaticModel.bundled()
        keyword = evaluate(SearchIndex(store), queries, args.detail)
        hybrid = evaluate(SearchIndex(store, model=lambda: model), queries, args.detail)
    counts = defaultdict(int)
    for q in queries:
        counts[q["kind"]] += 1
    print(f"nDCG@10 over {len(queries)} judged queries, {CORPUS.name} ({model.name})")
    print(f"{'kind':<12}{'queries':>8}{'keyword':>10}{'hybrid':>10}")
    for kind in KINDS:
        if kind in keyword:
            print(f"{kind:<12}{counts[kind]:>8}{keyword[kind]:>10.3f}{hybrid[kind]:>10.3f}")
    print(f"{'all':<12}{len(queries):>8}{sum(keyword.values()) / len(keyword):>10.3f}"
          f"{sum(hybrid.values()) / len(hybrid):>10.3f}")


if __name__ == "__main__":
    main()
