"""The README and docs/ hold together: every link from README.md into docs/ (and between the pages) leads
to a file and, with a #fragment, to a heading there; every page of docs/ is linked from the README;
docs/commands.md names every command of the command line and docs/configuration.md every variable the
configuration reads; the module map in docs/architecture.md names every module of bot/. (The README's own
commands are run by tests/test_readme.py.)"""

from __future__ import annotations

import json
import re
from datetime import date
from pathlib import Path

import pytest

from bot import demo
from bot.ask import understand
from bot.cli import build_parser
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.conversation import Question, reply_for
from bot.shell import render
from bot.store import Store
from tests.fakes.archive import corpus_index
from tests.test_deploy import config_variables

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without its fenced code blocks (a path in a shell comment is not a link)."""
    return re.sub(r"^ *```.*?^ *```", "", path.read_text(), flags=re.MULTILINE | re.DOTALL)


def local_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z]+:", t)]


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", prose(path), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def test_the_docs_folder_has_pages() -> None:
    assert len(PAGES) > 1, "docs/ holds no page"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_local_link_leads_to_a_file_and_heading(page: Path) -> None:
    for target in local_links(page):
        file, _, fragment = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        assert linked.is_file(), f"{page.name}: ({target}) leads to no file"
        if fragment and linked.suffix == ".md":
            assert fragment in anchors(linked), f"{page.name}: ({target}) names no heading of {linked.name}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in local_links(ROOT / "README.md")}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"docs pages not linked from README.md: {unlinked}"


def test_the_readme_links_into_docs() -> None:
    into_docs = [t for t in local_links(ROOT / "README.md") if t.startswith("docs/")]
    assert into_docs


def test_the_commands_page_names_every_command_of_the_command_line() -> None:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and a.dest == "command"]
    page = (DOCS / "commands.md").read_text()
    missing = [c for c in sub.choices if not re.search(rf"mlresearch-bot {c}\b", page)]
    assert not missing, f"commands missing from docs/commands.md: {missing}"


def test_the_configuration_page_names_every_variable_the_configuration_reads() -> None:
    page = (DOCS / "configuration.md").read_text()
    missing = sorted(v for v in config_variables() if f"`{v}`" not in page)
    assert not missing, f"variables missing from docs/configuration.md: {missing}"


def test_the_module_map_names_every_module() -> None:
    architecture = (DOCS / "architecture.md").read_text()
    modules = [p.relative_to(ROOT).as_posix() for p in (ROOT / "bot").rglob("*.py")
               if p.name not in ("__init__.py", "__main__.py")]
    missing = sorted(m for m in modules if f"`{m}`" not in architecture)
    assert not missing, f"modules missing from docs/architecture.md's module map: {missing}"


# what an answer that found nothing, or refused, says (views, commands, home)
NOTHING = ("No results", "Nothing in the archive", "archive is empty", "I don't know", "Usage:",
           "nothing was changed", "nothing to summarize", "no other item is close", "can't")


def readme_examples() -> list[str]:
    """The commands of the README's command table, in its order (`/mlresearch …`, `@mlresearch …`), an
    optional `[part]` left out."""
    examples = []
    for row in re.findall(r"^\| (.+?) \| ", (ROOT / "README.md").read_text(), flags=re.MULTILINE):
        for code in re.findall(r"`([^`]+)`", row):
            if code.startswith(("/mlresearch ", "@mlresearch ")):
                examples.append(" ".join(re.sub(r"\[[^\]]*\]", " ", code).split()))
    return examples


def test_every_readme_example_answers_something_real_on_the_demo_archive(store: Store) -> None:
    examples = readme_examples()
    assert len(examples) >= 12 and any(e.startswith("@mlresearch ") for e in examples)
    demo.load(store)
    services = Services(store, Settings(), index=corpus_index(store))
    empty: dict[str, str] = {}
    for example in examples:
        if example.startswith("@mlresearch "):  # a mention in a channel, answered in its thread
            asked = Question("T1", "C1", "U1", example.replace("@mlresearch", "<@UBOT>", 1), "1.0", "1.0", "")
            _text, blocks = reply_for(understand(asked.text, now=date.today()), asked, services)
        else:
            blocks = handle(Invocation(example, "T1", "C1", "U1", channel_name="general"), services).blocks
        answer = render(blocks)
        # a list of items holds one that has the words, not only ones related by meaning
        texts = [json.dumps(block, ensure_ascii=False) for block in blocks]
        items = sum('"text": "*<https://' in t for t in texts if t.startswith('{"text"'))
        listed = not items or items > sum("related by meaning" in t for t in texts)
        if not answer.strip() or not listed or any(said in answer for said in NOTHING):
            empty[example] = answer[:300]
        if example.endswith((" status", " related hey siri")):  # what each says on the demo
            assert "bundled demo archive" in answer if "status" in example else "Related to" in answer
    assert not empty, f"README examples that find nothing on the demo archive: {empty}"
