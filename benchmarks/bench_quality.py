"""Search quality on four judged query sets, per kind of query: the set the ranking was tuned on and three
held-out sets nobody tuned on, keyword-only and hybrid side by side.

    .venv/bin/python benchmarks/bench_quality.py [--queries A.json B.json ...] [--detail]
        [--embeddings-url URL [--embeddings-model NAME]] [--compare REV] [--json]

--compare REV prints every figure twice, before (the code of git revision REV: its bot/ and tests/fakes/
unpacked into a scratch directory and measured there, in a second process) and after (this checkout), on
this checkout's query sets: what a change to search did to every held-out set, in one run. --json prints the
figures as one JSON object.

The archive is tests/data/apple_ml_corpus.json (72 real Apple ML Research posts) in a temporary SQLite store.
tests/data/judged_queries.json is the tuning set (the constants of bot/search/hybrid.py and keywords.py were
chosen on it); tests/data/heldout_queries.json was written and judged from the post texts before any of its
queries was run, and is never tuned on: its figures are what users get. tests/data/plain_queries.json (40
descriptions and questions in everyday words) was written and judged from the post texts by a helper session
that saw no ranking, no search code, no other query set and not the glossary's plain words, which were written
without seeing it; its figures are the cleanest measure of the plain words (the other held-out set had been
read before they were written). tests/data/heldout2_queries.json (48 Slack-style queries, 2026-12-06) was
written and judged the same way, after every rule and constant of today's search was chosen, and first run on
this code: the freshest measure of what users get. Per kind:
- nDCG@10 (grades 3 / 2 / 1);
- recall@10 of the clearly relevant items (grade 2 or 3);
- shown precision: the share of the results a reply shows (at most five) that are judged relevant (any
  grade); a query with nothing relevant counts 1.0 when nothing is shown, 0.0 otherwise; a query shown
  nothing while something is relevant counts 0.0.
By meaning alone: of the shown results marked `by_meaning` (hybrid), the share judged relevant. Queries
nothing is relevant to (about what no post covers): how many each search answers with nothing, as it should.
Related: of the (at most three) related items (bot.search.related) listed for each judged item, the share that
share a topic with it (both graded 2 or 3 for some query of the sets), and the most any ranking listing three
for each could score (some items share a topic with fewer than three others); then the same against two
judges' direct judgements of which posts share a topic (tests/data/related_judged.json, on which the floor was
chosen, and tests/data/related_judged_second.json): the share judged related at all (1 or 2), the share judged
the same specific topic (2), and how many posts had nothing close enough to list; and how far the two judges
agree. Keyword-only is the
SearchIndex without a model (BM25 with the glossary); hybrid adds the bundled embedding model. No asserts: it
reports.
"""

from __future__ import annotations

import argparse
import inspect
import io
import json
import math
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# --code DIR (what --compare runs): the bot package of another revision, unpacked there, is the one measured
sys.path.insert(0, sys.argv[sys.argv.index("--code") + 1] if "--code" in sys.argv[:-1] else str(ROOT))

from bot.errors import EmbeddingError  # noqa: E402
from bot.models import SearchHit  # noqa: E402
from bot.search.embed import Embedder, RemoteModel, StaticModel  # noqa: E402
from bot.search.index import SearchIndex  # noqa: E402
from bot.search.query import parse_query  # noqa: E402
from bot.search.related import related  # noqa: E402
from bot.store import open_store  # noqa: E402
from tests.fakes.archive import CORPUS, corpus_items  # noqa: E402

DATA = ROOT / "tests" / "data"
SETS = (DATA / "judged_queries.json", DATA / "heldout_queries.json", DATA / "plain_queries.json",
        DATA / "heldout2_queries.json")
JUDGES = (DATA / "related_judged.json", DATA / "related_judged_second.json")
RELATED = 3  # related items asked for each judged item
KINDS = ("acronym", "description", "question", "keyword")
SHOWN = 5  # results a reply shows


def ndcg(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float:
    gain = sum((2 ** relevant.get(i, 0) - 1) / math.log2(n + 2) for n, i in enumerate(ranked[:k]))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    best = sum((2**g - 1) / math.log2(n + 2) for n, g in enumerate(ideal))
    if not best:  # nothing is relevant: the best answer is none
        return 0.0 if ranked else 1.0
    return gain / best


def recall(ranked: list[str], relevant: dict[str, int], k: int = 10) -> float | None:
    clear = {i for i, g in relevant.items() if g >= 2}
    return len(clear & set(ranked[:k])) / len(clear) if clear else None


def precision(ranked: list[str], relevant: dict[str, int]) -> float:
    shown = ranked[:SHOWN]
    if not shown:
        return 0.0 if relevant else 1.0
    return sum(1 for i in shown if relevant.get(i, 0) > 0) / len(shown)


def answers(index: SearchIndex, queries: list[dict]) -> list[list[SearchHit]]:
    """Each query's hits (at most ten), searched once: every figure below is read from them."""
    return [index.search(parse_query(q["query"]), 10).hits for q in queries]


def evaluate(queries: list[dict], found: list[list[SearchHit]], detail: bool = False
             ) -> dict[str, dict[str, float]]:
    """Per kind (and "all"): the mean nDCG@10, recall@10 and shown precision."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for q, hits in zip(queries, found, strict=True):
        ranked = [h.item.id for h in hits]
        scores = {"ndcg": ndcg(ranked, q["relevant"]), "recall": recall(ranked, q["relevant"]),
                  "precision": precision(ranked, q["relevant"])}
        for kind in (q["kind"], "all"):
            for name, value in scores.items():
                if value is not None:
                    per[kind][name].append(value)
        if detail:
            print(f"  {scores['ndcg']:.2f} {scores['precision']:.2f} {len(ranked):>2} {q['kind']:<11} "
                  f"{q['query']}")
    return {kind: {name: sum(v) / len(v) for name, v in values.items()} for kind, values in per.items()}


def by_meaning_share(queries: list[dict], found: list[list[SearchHit]]) -> tuple[int, int]:
    """Of the shown results found by meaning alone (`by_meaning`): how many judged relevant, of how many."""
    shown = [(h, q) for q, hits in zip(queries, found, strict=True) for h in hits[:SHOWN] if h.by_meaning]
    return sum(1 for h, q in shown if q["relevant"].get(h.item.id, 0) > 0), len(shown)


def answered_with_nothing(queries: list[dict], found: list[list[SearchHit]]) -> tuple[int, int]:
    """Of the queries nothing is relevant to: how many are answered with no result, of how many."""
    empty = [hits for q, hits in zip(queries, found, strict=True) if not any(q["relevant"].values())]
    return sum(1 for hits in empty if not hits), len(empty)


def related_share(index: SearchIndex, store, sets: list[list[dict]]  # type: ignore[no-untyped-def]
                  ) -> tuple[float, int, float]:
    """The share of judged items' three related items that share a judged topic with them, how many were
    listed, and the most any ranking could score (an item with fewer than three others sharing a topic
    cannot fill its three)."""
    topics: dict[str, set[int]] = defaultdict(set)
    for n, q in enumerate(q for queries in sets for q in queries):
        for link, grade in q["relevant"].items():
            if grade >= 2:
                topics[link].add(n)
    shared = total = best = 0
    for item in store.get_items(sorted(topics)).values():
        for near in related(index, item, RELATED):
            total += 1
            shared += bool(topics[item.id] & topics.get(near.item.id, set()))
        kin = sum(1 for other in topics if other != item.id and topics[item.id] & topics[other])
        best += min(RELATED, kin)
    return (shared / total if total else 0.0), total, best / (RELATED * len(topics)) if topics else 0.0


def judged_share(index: SearchIndex, store, judged: dict[str, dict[str, int]]  # type: ignore[no-untyped-def]
                 ) -> tuple[float, float, int, int]:
    """Of the related items listed for each of the judged posts: the share a judge found related at all, the
    share of the same specific topic, how many were listed, and how many posts had none listed."""
    related_at_all = same_topic = total = none = 0
    for item in store.get_items(sorted(judged)).values():
        listed = related(index, item, RELATED)
        none += not listed
        for near in listed:
            grade = judged[item.id].get(near.item.id, 0)
            total += 1
            related_at_all += grade >= 1
            same_topic += grade >= 2
    return (related_at_all / total if total else 0.0), (same_topic / total if total else 0.0), total, none


def agreement(first: dict[str, dict[str, int]], second: dict[str, dict[str, int]], grade: int) -> float:
    """Of the pairs of posts either judge grades at least `grade`, the share both do (Jaccard)."""
    def pairs(judged: dict[str, dict[str, int]]) -> set[tuple[str, str]]:
        return {(a, b) for a, near in judged.items() for b, g in near.items() if a < b and g >= grade}

    one, other = pairs(first), pairs(second)
    return len(one & other) / len(one | other) if one | other else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=Path, nargs="+", default=list(SETS))
    parser.add_argument("--detail", action="store_true", help="print each query's nDCG@10 and precision")
    parser.add_argument("--embeddings-url", help="an OpenAI-compatible embeddings endpoint "
                        "(EMBEDDINGS_API_URL) instead of the bundled model")
    parser.add_argument("--embeddings-model", help="the model the endpoint is asked for (EMBEDDINGS_MODEL)")
    parser.add_argument("--compare", metavar="REV", help="print every figure for the code of git revision "
                        "REV (before) beside this checkout's (after), on the same query sets")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)  # --compare's checkout (read at import)
    args = parser.parse_args()
    if args.compare:
        before = _measured_at(args.compare, args)
        compare(before, measure(args), args.compare)
    elif args.json:
        print(json.dumps(measure(args)))
    else:
        report(measure(args))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every figure `report` prints, for the code imported (this checkout's, or --code's), as JSON data."""
    sets = [json.loads(path.read_text(encoding="utf-8"))["queries"] for path in args.queries]
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{tmp}/quality.db")
        store.migrate()
        store.add_items(corpus_items())
        model: Embedder = StaticModel.bundled() if not args.embeddings_url else endpoint(args)
        try:
            model.embed(["probe"])  # the index would fall back to keywords without a word
        except EmbeddingError as exc:
            sys.exit(f"bench_quality: {exc}")
        keyword_index = SearchIndex(store)
        hybrid_index = SearchIndex(store, model=lambda: model)
        results = []
        for path, queries in zip(args.queries, sets, strict=True):
            if args.detail:
                print(f"{path.name}: keyword, then hybrid")
            by_keyword, by_hybrid = answers(keyword_index, queries), answers(hybrid_index, queries)
            counts: dict[str, int] = defaultdict(int)
            for q in queries:
                counts[q["kind"]] += 1
            (right, marked), (k_none, empty), (h_none, _) = (by_meaning_share(queries, by_hybrid),
                                                             answered_with_nothing(queries, by_keyword),
                                                             answered_with_nothing(queries, by_hybrid))
            results.append({"name": path.name, "queries": len(queries), "counts": counts,
                            "keyword": evaluate(queries, by_keyword, args.detail),
                            "hybrid": evaluate(queries, by_hybrid, args.detail),
                            "by_meaning": [right, marked], "nothing": [k_none, h_none, empty]})
        keyword_related, hybrid_related = (related_share(keyword_index, store, sets),
                                           related_share(hybrid_index, store, sets))
        judges = [json.loads(path.read_text(encoding="utf-8"))["related"] for path in JUDGES]
        by_judge = [[path.name, *(judged_share(index, store, judged) for index in (keyword_index,
                                                                                    hybrid_index))]
                    for path, judged in zip(JUDGES, judges, strict=True)]
    out = getattr(getattr(model, "breaker", None), "out", None)
    if out:
        sys.exit(f"bench_quality: the embeddings endpoint went out during the run ({out}), so some hybrid "
                 "answers were by words alone: no figures printed; run it again on a quieter machine")
    return {"model": model.name, "sets": results, "related": [keyword_related, hybrid_related],
            "agreement": [agreement(*judges, 2), agreement(*judges, 1)], "judges": by_judge}


def endpoint(args: argparse.Namespace) -> RemoteModel:
    """The --embeddings-url endpoint, with no budget beyond its request's own timeout (the bot waits at most
    QUERY_BUDGET, 1 s, for a query's vector, and a stand-in on a busy machine can take longer: this measures
    what it answers, not how fast), and never asked again once it fails, so that `measure` refuses a run it
    went out in rather than print a mix of hybrid and words-only answers as hybrid. (An older revision's
    RemoteModel, under --compare, may take fewer of these.)"""
    wanted = {"timeout": 120.0, "budget": 120.0, "retry_every": 86400.0}
    takes = inspect.signature(RemoteModel).parameters
    return RemoteModel(args.embeddings_url, None, args.embeddings_model,
                       **{name: value for name, value in wanted.items() if name in takes})


def report(measured: dict[str, Any]) -> None:
    print(f"Search quality over {CORPUS.name} ({measured['model']}); keyword-only | hybrid")
    for found in measured["sets"]:
        keyword, hybrid, counts = found["keyword"], found["hybrid"], found["counts"]
        (right, marked), (k_none, h_none, empty) = found["by_meaning"], found["nothing"]
        print(f"\n{found['name']} ({found['queries']} queries)")
        print(f"{'kind':<12}{'queries':>8}{'nDCG@10':>16}{'recall@10':>16}{'shown precision':>20}")
        for kind in (*KINDS, "all"):
            if kind not in keyword:
                continue
            k, h = keyword[kind], hybrid[kind]
            n = found["queries"] if kind == "all" else counts[kind]
            print(f"{kind:<12}{n:>8}{k['ndcg']:>8.3f}{h['ndcg']:>8.3f}{_figure(k.get('recall'))}"
                  f"{_figure(h.get('recall'))}{k['precision']:>10.3f}{h['precision']:>10.3f}")
        print(f"shown results found by meaning alone (hybrid): {marked}, {right} of them judged relevant")
        if empty:
            print(f"queries nothing is relevant to: {empty}, answered with nothing: {k_none} keyword-only, "
                  f"{h_none} hybrid")
    (k_share, k_listed, most), (h_share, h_listed, _) = measured["related"]
    print(f"\nrelated items sharing a judged topic ({RELATED} asked per judged item): {k_share:.1%} of "
          f"{k_listed} listed keyword-only, {h_share:.1%} of {h_listed} hybrid; the most any ranking listing "
          f"{RELATED} could: {most:.1%}")
    same, either = measured["agreement"]
    print(f"the two judges agree on {same:.0%} of the pairs either judges the same topic, "
          f"{either:.0%} of those either judges related at all")
    for name, keyword, hybrid in measured["judges"]:
        print(f"related items against {name} (keyword-only | hybrid): judged related "
              f"{keyword[0]:.1%} | {hybrid[0]:.1%}, the same topic {keyword[1]:.1%} | {hybrid[1]:.1%}, "
              f"of {keyword[2]} | {hybrid[2]} listed; posts with none listed {keyword[3]} | {hybrid[3]}")


def compare(before: dict[str, Any], after: dict[str, Any], rev: str) -> None:
    """Every set's figures for REV's code (before) and this checkout's (after), side by side."""
    print(f"Search quality over {CORPUS.name} ({after['model']}): before ({rev}) -> after (this checkout)")
    for old, new in zip(before["sets"], after["sets"], strict=True):
        print(f"\n{new['name']} ({new['queries']} queries)")
        print(f"{'':<20}{'nDCG@10':^32}{'recall@10':^32}{'shown precision':^32}")
        print(f"{'kind':<12}{'queries':>8}" + f"{'keyword-only':^16}{'hybrid':^16}" * 3)
        for kind in (*KINDS, "all"):
            if kind not in new["keyword"]:
                continue
            n = new["queries"] if kind == "all" else new["counts"][kind]
            row = "".join(_change(old[how][kind].get(name), new[how][kind].get(name))
                          for name in ("ndcg", "recall", "precision") for how in ("keyword", "hybrid"))
            print(f"{kind:<12}{n:>8}{row}")
        (was_right, was_marked), (right, marked) = old["by_meaning"], new["by_meaning"]
        print(f"shown results found by meaning alone (hybrid): {was_marked} -> {marked}, judged relevant "
              f"{was_right} -> {right}")
        (was_k, was_h, empty), (k_none, h_none, _) = old["nothing"], new["nothing"]
        if empty:
            print(f"queries nothing is relevant to: {empty}, answered with nothing: {was_k} -> {k_none} "
                  f"keyword-only, {was_h} -> {h_none} hybrid")
    (was_k, was_kn, _), (was_h, was_hn, _) = before["related"]
    (k_share, k_listed, _), (h_share, h_listed, _) = after["related"]
    print(f"\nrelated items sharing a judged topic: keyword-only {was_k:.1%} of {was_kn} -> {k_share:.1%} of "
          f"{k_listed}, hybrid {was_h:.1%} of {was_hn} -> {h_share:.1%} of {h_listed}")
    for (name, was_keyword, was_hybrid), (_, keyword, hybrid) in zip(before["judges"], after["judges"],
                                                                     strict=True):
        print(f"related items judged related by {name}: keyword-only {was_keyword[0]:.1%} -> "
              f"{keyword[0]:.1%}, hybrid {was_hybrid[0]:.1%} -> {hybrid[0]:.1%}")


def _change(was: float | None, now: float | None) -> str:
    """A figure before and after, 16 characters wide ("0.804 -> 0.827"; a dash for none)."""
    if was is None and now is None:
        return f"{'-':^16}"
    said = f"{'-' if was is None else f'{was:.3f}'} -> {'-' if now is None else f'{now:.3f}'}"
    return f"{said:^16}"


def _measured_at(rev: str, args: argparse.Namespace) -> dict[str, Any]:
    """`measure` for the code of git revision `rev`: its bot/ and tests/fakes/ (with the corpus they read)
    unpacked into a scratch directory, and this script run there (--code) on this checkout's query sets."""
    with tempfile.TemporaryDirectory() as code:
        paths = ["bot", "tests/__init__.py", "tests/fakes", "tests/data/apple_ml_corpus.json"]
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True,
                                 timeout=120, check=False)
        if archive.returncode:
            sys.exit(f"bench_quality: cannot read {rev}: {archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(code, filter="data")
        command = [sys.executable, __file__, "--json", "--code", code,
                   "--queries", *(str(path.resolve()) for path in args.queries)]
        if args.embeddings_url:
            command += ["--embeddings-url", args.embeddings_url]
        if args.embeddings_model:
            command += ["--embeddings-model", args.embeddings_model]
        done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
        if done.returncode:
            sys.exit(f"bench_quality: {rev}: {done.stderr.strip()[-500:]}")
        measured: dict[str, Any] = json.loads(done.stdout)
        return measured


def _figure(value: float | None) -> str:
    """A recall, or a dash where no query of the kind has a clearly relevant item."""
    return f"{value:>8.3f}" if value is not None else f"{'-':>8}"


if __name__ == "__main__":
    main()
