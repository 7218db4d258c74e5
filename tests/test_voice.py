"""One voice on every surface (issue 54): the command line, the shell and Slack say the same things about a
search in the same words (`bot.voice` decides them), informational lines go to stdout, and `--json` carries
what the text says (`by_meaning`, the words searched for)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.search.index import SearchIndex, meaning_model
from bot.shell import render, run
from bot.store import SQLiteStore
from tests.fakes.archive import corpus_items
from tests.test_cli import run as cli

# What each search says beside its results, in every surface's words ({run}: how a command is typed there).
SAID = {
    "captoning": ["Searched for “captioning” (you typed “captoning”)"],
    "speech recognition topological": [
        "Also searched: “speech recognition” as ASR",
        "No item holds “topological”: these were found without it.",
        "related by meaning: it holds only some of your words",
    ],
    "zzqx": ["No results for “zzqx”. No item holds “zzqx”. Try fewer or broader words, or a related topic "
             "(e.g. `vision`, `privacy`, `speech`), check the spelling, or see `{run} latest`."],
    "privacy since:2099-01-01": ["No results for “privacy since:2099-01-01”. Without since:2099-01-01 there "
                                 "are 18 results: `{run} search privacy`."],
}


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose ./mlresearch.db holds the 72 real posts."""
    folder = tmp_path_factory.mktemp("voice")
    store = SQLiteStore(folder / "mlresearch.db")
    store.migrate()
    store.add_items(corpus_items())
    return folder


def slack_lines(home: Path, text: str) -> list[str]:
    """What Slack shows for `/mlresearch <text>`, block by block, as text."""
    store = SQLiteStore(home / "mlresearch.db")
    settings = Settings(database_url=f"sqlite:///{store.path}")
    index = SearchIndex(store, model=meaning_model(settings))
    services = Services(store=store, settings=settings, index=index)
    return [line.strip() for line in render(handle(Invocation(text, "T1", "C1", "U1"), services).blocks)
            .splitlines()]


def shell_lines(home: Path, lines: list[str]) -> list[str]:
    out = io.StringIO()
    settings = Settings(database_url=f"sqlite:///{home / 'mlresearch.db'}", poll_interval=0)
    assert run(settings, io.StringIO("\n".join(lines) + "\n"), out) == 0
    return [line.strip() for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("query", list(SAID))
def test_the_command_line_the_shell_and_slack_say_the_same_in_the_same_words(home: Path, query: str) -> None:
    """Until 2026-12-06 the command line said "searched for 'captioning'" without "(you typed …)", printed
    "No item holds …" on stderr, and quoted in straight quotes where Slack and the shell use curly ones."""
    proc = cli(home, "search", *query.split())
    assert (proc.returncode, proc.stderr) == (0, "")  # every line is information, none an error
    printed = [line.strip() for line in proc.stdout.splitlines()]
    slack = slack_lines(home, f"search {query}")
    shell = shell_lines(home, [f"search {query}"])
    for said in SAID[query]:
        assert said.format(run="mlresearch-bot") in printed, proc.stdout
        assert said.format(run="/mlresearch") in slack, slack
        assert said.format(run="/mlresearch") in shell, shell
    assert "'" not in "\n".join(line for line in printed if "“" in line or query in line)  # one quote style


def test_a_summary_and_a_related_list_say_the_same_on_every_surface(home: Path) -> None:
    summary = cli(home, "summarize", "captoning")
    assert summary.stdout.startswith("Searched for “captioning” (you typed “captoning”)\n"
                                     "What Apple ML Research says about “captioning” (")
    assert "Searched for “captioning” (you typed “captoning”)" in slack_lines(home, "summarize captoning")
    nothing = ("Nothing in the archive is about “zzqx”, so there is nothing to summarize. Try broader "
               "words, or `{run} search` to see what is there.")
    assert cli(home, "summarize", "zzqx").stdout == nothing.format(run="mlresearch-bot") + "\n"
    assert slack_lines(home, "summarize zzqx") == [nothing.format(run="/mlresearch")]
    near = cli(home, "related", "epicache")
    said = ("Nothing in the archive is near “EpiCache: Episodic KV Cache Management for Long-Term "
            "Conversation on Resource-Constrained Environments” yet: no other item is close enough to it. "
            "Try `{run} search` with words of its topic (e.g. `key-value cache`).")
    assert (near.returncode, near.stdout, near.stderr) == (0, said.format(run="mlresearch-bot") + "\n", "")
    assert slack_lines(home, "related epicache") == [said.format(run="/mlresearch")]
    shares = cli(home, "related", "personalized", "hey", "siri").stdout.splitlines()
    assert shares[0] == "Related to Personalized Hey Siri:" and shares[3].strip().startswith("Shares: ")
    assert slack_lines(home, "related personalized hey siri")[0] == "Related to Personalized Hey Siri " \
        "(https://machinelearning.apple.com/research/personalized-hey-siri)"


def test_json_rows_carry_what_the_text_says(home: Path) -> None:
    """Each row says whether it was listed for its meaning (as the text's "related by meaning" line), and a
    search whose misspelt words were searched typed right says what was searched (the "Searched for" line)."""
    text = cli(home, "search", "speech", "recognition", "topological").stdout
    rows = json.loads(cli(home, "search", "speech", "recognition", "topological", "--json").stdout)
    marked = text.count("related by meaning:")
    assert marked and [row["by_meaning"] for row in rows].count(True) == marked
    assert all("searched_for" not in row for row in rows)  # nothing was misspelt
    corrected = json.loads(cli(home, "search", "captoning", "--json").stdout)
    assert corrected and {row["searched_for"] for row in corrected} == {"captioning"}
    assert corrected[0]["by_meaning"] is False
    keys = {"id", "title", "link", "published", "score", "by_meaning"}
    related = json.loads(cli(home, "related", "personalized", "hey", "siri", "--json").stdout)
    assert related and all(set(row) == keys for row in related)
    nothing = cli(home, "search", "zzqx", "--json")
    assert (nothing.returncode, nothing.stdout, nothing.stderr) == (0, "[]\n", "")

