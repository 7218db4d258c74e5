"""The listeners' per-request services: with SQLite, each thread answers its requests over one connection."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.listeners.deps import Deps
from bot.store import SQLiteStore, Store
from tests.fakes.archive import filled_store


def count_opens(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    opened: list[bool] = []
    real = SQLiteStore._open

    def counting(self: SQLiteStore, readonly: bool) -> Any:
        opened.append(readonly)
        return real(self, readonly)

    monkeypatch.setattr(SQLiteStore, "_open", counting)
    return opened


def ask(services: Services, text: str) -> str:
    return handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services).text


def test_requests_on_one_thread_share_one_sqlite_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = filled_store(tmp_path)
    reference = [ask(Services(store=store, settings=Settings()), t) for t in ("search diffus", "status")]
    opened = count_opens(monkeypatch)
    handlers = Deps(Services(store=store, settings=Settings()))
    answers = [ask(handlers.for_request(None), t) for t in ("search diffus", "status") for _ in range(3)]
    assert answers == [a for a in reference for _ in range(3)]  # the same answers
    assert len(opened) == 1  # over one connection, kept for the thread

    def other_thread() -> None:
        ask(handlers.for_request(None), "search diffus")

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(opened) == 2  # another thread, its own connection
    ask(handlers.for_request(None), "latest")
    assert len(opened) == 2
    assert ask(Services(store=store, settings=Settings()), "latest")  # the store itself is unaffected
    assert len(opened) == 3


def test_writes_through_the_thread_connection_are_seen_by_everyone(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    handlers = Deps(Services(store=store, settings=Settings()))
    assert "Subscribed" in ask(handlers.for_request(None), "subscribe vision")
    assert store.get_subscription("T1", "C1") is not None
    assert "Unsubscribed" in ask(handlers.for_request(None), "unsubscribe")
    assert store.get_subscription("T1", "C1") is None


def test_other_stores_are_used_as_they_are() -> None:
    class OtherStore(Store):
        backend = "postgres"

    services = Services(store=OtherStore(), settings=Settings())
    assert Deps(services).for_request(None) is services


def test_oauth_requests_get_their_workspace_client_and_the_thread_store(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    settings = Settings(slack_client_id="1.2", slack_client_secret="s")
    handlers = Deps(Services(store=store, settings=settings, slack="app client"))
    services = handlers.for_request("workspace client")
    assert services.slack == "workspace client" and services.store is not store
    assert services.store is handlers.for_request(None).store


def test_a_threads_sqlite_view_is_kept_for_the_thread_and_closed_when_it_ends(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    opened: list[Any] = []

    def work() -> None:
        view = store.thread_view()
        assert view is not store and store.thread_view() is view and view.thread_view() is view
        with view.connect() as db:
            opened.append(db.raw)
        with view.connect() as db:
            assert db.raw is opened[0]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    with pytest.raises(sqlite3.ProgrammingError):  # the thread ended, and with it its session
        opened[0].execute("SELECT 1")
    assert store.count_items() > 0
