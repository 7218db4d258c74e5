"""Shared pytest fixtures. Fakes live in tests/fakes/ and run over loopback; no test reaches the internet.

Store tests take the `store` fixture (or `database_url`), which runs each of them on both backends: SQLite in
a temporary file, PostgreSQL in a fresh schema of the database TEST_DATABASE_URL names (dropped afterwards).
Without TEST_DATABASE_URL the PostgreSQL half is deselected, and the summary says so; with it set and the
server unreachable, the run stops with an error.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.store import Store, open_store
from tests.fakes.archive import corpus_items
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import FakeSlack

PG_URL = os.environ.get("TEST_DATABASE_URL", "").strip()
NOT_RUN = "PostgreSQL half not run: TEST_DATABASE_URL is not set"
BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A test that runs the CLI in-process (`bot.cli.main`) sets up logging as a command does: the root
    logger's handlers and levels are put back afterwards, so a later test's `caplog` sees what it logs."""
    root = logging.getLogger()
    names = ("httpx", "httpcore", "slack_sdk", "slack_bolt", "waitress", "waitress.queue")
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    root.handlers[:], root.level = handlers, level
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


# --- the two store backends ------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: needs the PostgreSQL server at TEST_DATABASE_URL")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not PG_URL:
        return
    import psycopg

    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except psycopg.Error as exc:
        pytest.exit(f"TEST_DATABASE_URL is set but PostgreSQL is unreachable: {' '.join(str(exc).split())}",
                    returncode=3)


def _needs_postgres(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return item.get_closest_marker("postgres") is not None or (
        callspec is not None and callspec.params.get("backend") == "postgres"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if PG_URL:
        return
    deselected = [item for item in items if _needs_postgres(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if not _needs_postgres(item)]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not PG_URL:
        terminalreporter.write_line(NOT_RUN)


@pytest.fixture
def pg_schema_url() -> Iterator[str]:
    """A URL of TEST_DATABASE_URL's database whose search_path is a fresh, empty schema (dropped after)."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    separator = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A DATABASE_URL for an empty database on each backend in turn."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return str(request.getfixturevalue("pg_schema_url"))


@pytest.fixture
def store(database_url: str) -> Iterator[Store]:
    """A migrated, empty store on each backend in turn."""
    s = open_store(database_url)
    s.migrate()
    yield s
    s.close()


@pytest.fixture
def corpus(store: Store) -> Store:
    """The store on each backend in turn, holding the 72 real posts (tests/data/apple_ml_corpus.json)."""
    store.add_items(corpus_items())
    return store


# --- the local Slack Web API (tests/fakes/slack_api.py) --------------------------------------------------


@pytest.fixture
def slack_api() -> Iterator[FakeSlack]:
    """A FakeSlack on 127.0.0.1 (random port); `slack_api.url` is the SLACK_API_URL to use."""
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def hooks() -> Iterator[Recorder]:
    """Where response_url posts go (in place of hooks.slack.com): a Recorder on 127.0.0.1 that answers 200."""
    with Recorder() as recorder:
        yield recorder


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """caplog, capturing INFO and above."""
    caplog.set_level(logging.INFO)
    return caplog


# --- the local feed server (tests/fakes/feed_server.py) -------------------------------------------------

from tests.fakes.feed_server import feed_server  # noqa: E402, F401 - the `feed_server` fixture
