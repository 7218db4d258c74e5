"""`mlresearch-bot related` and `reindex`, and search by meaning on the command line (a subprocess)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.search.embed import BUNDLED_NAME
from bot.store import open_store
from tests.test_cli import RSS_PATH, assert_one_line_error, run


@pytest.fixture(scope="module")
def cwd(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("cli")
    proc = run(home, "poll", "--json", FEED_URL=str(RSS_PATH))
    assert proc.returncode == 0, proc.stderr
    return home


def test_related_json_is_shaped_like_search_json(cwd: Path) -> None:
    first = json.loads(run(cwd, "search", "gaussian head", "--json").stdout)[0]
    proc = run(cwd, "related", first["link"], "--limit", "3", "--json")
    assert proc.returncode == 0, proc.stderr
    hits = json.loads(proc.stdout)  # of the feed's ten items, only Velox is close to the Gaussian heads
    keys = {"id", "title", "link", "published", "score", "by_meaning"}  # search --json's (the contract)
    assert len(hits) == 1 and all(set(h) == keys for h in hits)
    assert hits[0]["by_meaning"] is False  # it shares words with the Gaussian heads (its text says which)
    assert hits[0]["title"].startswith("Velox") and first["id"] not in [h["id"] for h in hits]
    words = run(cwd, "related", *first["title"].split()[:4], "--limit", "3", "--json")
    assert json.loads(words.stdout) == hits


def test_related_prints_what_the_items_share(cwd: Path) -> None:
    proc = run(cwd, "related", "gaussian head")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Related to Large-Scale High-Quality 3D Gaussian Head") and \
        "\n    Shares: " in proc.stdout


def test_related_to_an_item_nothing_is_close_to_says_so(cwd: Path) -> None:
    """As search: nothing close is a line (or [] under --json) and exit status 0, not the nearest anyway; the
    line is Slack's, in a terminal's words."""
    proc = run(cwd, "related", "captioning")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == [  # its title's RL: RVPO says RLHF, which holds "reinforcement
        # learning" since issue 54 (a narrower term's abbreviation)
        "Nothing in the archive is near “BalCapRL: A Balanced Framework for RL-Based MLLM Image Captioning” "
        "yet: no other item is close enough to it. Try `mlresearch-bot search` with words of its topic (e.g. "
        "`reinforcement learning`)."]
    proc = run(cwd, "related", "captioning", "--json")
    assert (proc.returncode, proc.stdout.strip(), proc.stderr) == (0, "[]", "")


def test_related_to_a_link_or_words_naming_no_item_says_so_unlike_nothing_close(cwd: Path) -> None:
    """No item to start from is nothing found (exit status 0, as the contract has it), said in one line; under
    --json `[]` with that line on stderr, so a script tells it from an item nothing is close to (`[]` alone).
    Until 2026-12-06 both printed `[]` and nothing else."""
    proc = run(cwd, "related", "https://machinelearning.apple.com/research/not-in-the-archive")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == [
        "That link is not in the archive: https://machinelearning.apple.com/research/not-in-the-archive"]
    proc = run(cwd, "related", "zyxwv qqqqq", "--json")
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]")
    (line,) = proc.stderr.splitlines()
    assert line.startswith("mlresearch-bot: No item in the archive matches “zyxwv qqqqq”")
    close = run(cwd, "related", "captioning", "--json")
    assert (close.returncode, close.stdout.strip(), close.stderr) == (0, "[]", "")


def test_related_without_words_is_a_usage_error(cwd: Path) -> None:
    assert_one_line_error(run(cwd, "related", "🙂 ?!"), 2, "Give a link")


def test_reindex_stores_every_items_vector_quietly(cwd: Path) -> None:
    proc = run(cwd, "reindex")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # no terminal: no progress
    assert proc.stdout.startswith("reindexed 10 items (" + BUNDLED_NAME)
    store = open_store(f"sqlite:///{cwd / 'mlresearch.db'}")
    assert len(store.item_vectors(BUNDLED_NAME)) == 10


def test_search_says_what_the_glossary_added(cwd: Path) -> None:
    proc = run(cwd, "search", "LLMs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Also searched: “LLM” as large language model\n")


def test_a_misspelt_search_says_once_what_it_searched_for_then_what_the_glossary_added(cwd: Path) -> None:
    proc = run(cwd, "search", "speech", "recogniton")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Searched for “speech recognition” (you typed “speech recogniton”)\n"
                                  "Also searched: “speech recognition” as ASR")


def test_a_search_the_filters_left_empty_says_what_the_words_alone_find(cwd: Path) -> None:
    total = len(json.loads(run(cwd, "search", "captioning", "--json").stdout))
    proc = run(cwd, "search", "captioning since:2099-01-01")
    assert proc.returncode == 0, proc.stderr
    found = "is 1 result" if total == 1 else f"are {total} results"
    assert proc.stdout == (f"No results for “captioning since:2099-01-01”. Without since:2099-01-01 there "
                           f"{found}: `mlresearch-bot search captioning`.\n")


def test_stop_words_only_are_a_one_line_usage_error(cwd: Path) -> None:
    assert_one_line_error(run(cwd, "search", "the", "of", "and"), 2, "common words")
