"""The poll pipeline wired once (bot.pipeline): `poll`, `serve`'s poller and the shell run the same cycle
(fetch -> ingest -> deliver -> enrich -> `after` hooks), over a local feed and research index, both stores."""

from __future__ import annotations

import argparse
import io
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bot import cli_feed, server, shell
from bot import research_index as ri
from bot.config import Settings
from bot.models import DeliveryReport, PollResult
from bot.pipeline import Pipeline
from bot.store import Store, open_store
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE
from tests.test_backfill import DATA, FEED, NEWEST, feed_without_newest  # the feed before its newest item


@pytest.fixture
def site() -> Iterator[FeedServer]:
    """A feed that gains its newest item at the second fetch, and the research index beside it."""
    with FeedServer() as fake:
        fake.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
        fake.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        yield fake


@pytest.fixture
def archive(database_url: str) -> Iterator[Store]:
    """A migrated store on each backend, marked as backfilled (so `serve`'s first-run backfill, which would
    fill in every item from the index, stays out of what is measured here)."""
    store = open_store(database_url)
    store.migrate()
    store.set_meta(ri.META_BACKFILLED, "2026-01-01T00:00:00+00:00")
    yield store
    store.close()


# --- the three entry points, each polling twice ----------------------------------------------------------


def through_cli(settings: Settings, capsys: pytest.CaptureFixture[str]) -> str:
    for _ in range(2):
        assert cli_feed.cmd_poll(settings, argparse.Namespace(dry_run=False, json=True)) == 0
    last = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert last["new"] == 1
    return "poll"


def through_serve(settings: Settings, capsys: pytest.CaptureFixture[str]) -> str:
    store = open_store(settings.database_url)
    background = server.start_poller(settings, store)
    assert background is not None
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            item = store.get_item(NEWEST)
            if item is not None and "[fixture continuation]" in item.summary:
                break
            time.sleep(0.05)
    finally:
        background.stop(timeout=10)
        store.close()
    return "serve"


def through_shell(settings: Settings, capsys: pytest.CaptureFixture[str]) -> str:
    out = io.StringIO()
    assert shell.run(settings, io.StringIO("poll\npoll\n"), out) == 0
    assert "[poll] fetched 10, 1 new, 0 printed here" in out.getvalue()
    return "shell"


@pytest.mark.parametrize("entry", [through_cli, through_serve, through_shell], ids=["poll", "serve", "shell"])
def test_every_entry_point_enriches_a_new_item_from_the_research_index(
    entry: Callable[[Settings, pytest.CaptureFixture[str]], str],
    site: FeedServer,
    archive: Store,
    database_url: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    interval = 0 if entry is through_shell else 1  # the shell polls when told; serve every second
    settings = Settings(database_url=database_url, feed_url=site.url("/rss.xml"), poll_interval=interval)
    entry(settings, capsys)
    assert len(site.requests_to("/rss.xml")) >= 2
    item = archive.get_item(NEWEST)
    assert item is not None and "[fixture continuation]" in item.summary, "enriched from the index"
    assert item.authors == ("Ada Example", "Ben Sample")
    assert len(site.requests_to("/research")) == 1, "the baseline poll is not enriched; the new item is, once"
    assert len(archive.latest(limit=100)) == 10, "enrichment adds no items"


def test_the_pipeline_is_built_from_settings_the_same_way_for_a_web_and_a_file_feed(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'bot.db'}")
    web = Settings(database_url="sqlite:///unused.db", feed_url="https://ml.example/rss.xml")
    with Pipeline.from_settings(web, store) as pipeline:
        assert pipeline.index_url == "https://ml.example/research" and pipeline.enrich is not None
        assert pipeline.owns_client
    assert pipeline.client.is_closed, "the client the pipeline made is closed with it"
    file_feed = Settings(database_url="sqlite:///unused.db", feed_url=str(DATA / "apple_ml_rss.xml"))
    printer = lambda s: DeliveryReport(delivered=7)  # noqa: E731
    with Pipeline.from_settings(file_feed, store, deliver=printer) as pipeline:
        assert pipeline.index_url is None and pipeline.enrich is None, "no research index beside a file"
        assert pipeline.deliver is printer


def test_after_hooks_run_after_each_cycle_and_one_that_raises_breaks_nothing(
    tmp_path: Path, archive: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(database_url=database_url, feed_url=str(DATA / "apple_ml_rss.xml"))
    seen: list[tuple[str, PollResult]] = []

    def boom(result: PollResult) -> None:
        raise RuntimeError("index refresh failed")

    with Pipeline.from_settings(settings, archive, deliver=lambda s: DeliveryReport(delivered=2)) as pipeline:
        pipeline.after += [lambda r: seen.append(("first", r)), boom, lambda r: seen.append(("last", r))]
        with caplog.at_level(logging.ERROR, logger="bot.pipeline"):
            result = pipeline.poll_once(lock_timeout=5)
        assert result.baseline and result.fetched == 10 and result.delivered == 2
        assert [(name, r) for name, r in seen] == [("first", result), ("last", result)]
        assert "event=after_poll_crashed hook=boom" in caplog.text

        seen.clear()
        results: list[PollResult] = []
        done = threading.Event()

        def on_result(result: PollResult) -> None:
            results.append(result)
            done.set()

        background = pipeline.start(3600, on_result=on_result)
        assert done.wait(20)
        background.stop(timeout=10)
        assert results[0].new == 0 and not results[0].baseline
        assert [name for name, _ in seen] == ["first", "last"], "the hooks ran before on_result"
        assert seen[0][1] is results[0]


def test_a_dry_run_writes_nothing_and_builds_no_deliverer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "absent.db"
    settings = Settings(database_url=f"sqlite:///{path}", feed_url=str(DATA / "apple_ml_rss.xml"))
    store = open_store(settings.database_url)
    with caplog.at_level(logging.INFO), Pipeline.from_settings(settings, store) as pipeline:
        new, baseline, fetched = pipeline.preview()
    assert (len(new), baseline, fetched) == (10, True, 10)
    assert not path.exists()
    assert "delivery_disabled" not in caplog.text, "Slack's deliverer is built by a poll, not by a dry run"
