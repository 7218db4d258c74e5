"""The SQLite database (it holds the workspaces' tokens in multi-workspace mode) is created readable and
writable by its owner only, with its WAL and lock files; a file that already exists keeps its mode."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import SQLiteStore


@pytest.fixture
def usual_umask() -> Iterator[None]:
    """The common umask (group and others may read), so that only the store's own choice can hide the file."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_and_its_companions_are_private(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "data" / "bot.db"
    path.parent.mkdir()  # the store makes no folder (issue 21)
    store = SQLiteStore(path)
    store.migrate()
    store.set_meta("k", "v")
    with store.poll_lock():
        created = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert {p.name for p in created} >= {"bot.db", "bot.db-wal", "bot.db-shm", "bot.db.poll.lock",
                                             "bot.db.migrate.lock"}
        assert {p.name: mode(p) for p in created} == {p.name: 0o600 for p in created}
    store.close()


def test_an_existing_database_file_keeps_its_mode(tmp_path: Path, usual_umask: None) -> None:
    path = tmp_path / "bot.db"
    path.touch(mode=0o640)
    path.chmod(0o640)
    store = SQLiteStore(path)
    store.migrate()
    store.close()
    assert mode(path) == 0o640
