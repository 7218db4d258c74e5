"""The house as drawn from its imports: no circle anywhere in bot/ (module-level, TYPE_CHECKING and lazy
imports in functions all count: a lazy import is still a dependency), and the store imports nothing from
search (it stores decisions; bot.route makes them)."""

from __future__ import annotations

import ast
from pathlib import Path

BOT = Path(__file__).resolve().parent.parent / "bot"


def modules(root: Path = BOT) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name (a package by its own name)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def import_graph(root: Path = BOT) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports anywhere in its file (`from bot import memory`
    counts as importing bot.memory, `from bot.store.models import x` as importing bot.store.models)."""
    mods = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle_and_only_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "bot"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bot.sub import b\n"
    )
    (pkg / "sub" / "b.py").write_text("def f():\n    from bot import a\n")
    (pkg / "sub" / "c.py").write_text("from .b import f\nimport bot.a\n")
    graph = import_graph(pkg)
    assert graph["bot.a"] == {"bot.sub", "bot.sub.b"}
    assert graph["bot.sub.b"] == {"bot", "bot.a"}
    assert graph["bot.sub.c"] == {"bot.sub.b", "bot.a"}
    assert circles(graph) == [["bot.a", "bot.sub.b"]]


def test_the_import_graph_of_bot_has_no_circle() -> None:
    assert circles(import_graph()) == []


def test_the_store_imports_nothing_from_search() -> None:
    graph = import_graph()
    reached = {
        (name, target) for name, targets in graph.items() if name.startswith("bot.store")
        for target in targets if target.startswith("bot.search")
    }
    assert reached == set()
