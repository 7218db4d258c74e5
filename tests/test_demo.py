"""The demo archive (issue 54): 72 real posts shipped in the package, loaded by `mlresearch-bot demo` into a
database that holds no real archive, marked as the demo everywhere `status` is said, never posted, and
replaced (never mixed) by the first real poll or backfill; on both stores."""

from __future__ import annotations

import json
import subprocess
import tomllib
import zipfile
from datetime import UTC, datetime
from fnmatch import fnmatch
from pathlib import Path

import httpx
from uv import find_uv_bin

from bot import demo, research_index
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.models import UNDATED, Validators
from bot.route import ingest
from bot.search.index import SearchIndex
from bot.search.query import parse_query
from bot.store import Store, open_store
from tests.fakes.archive import CORPUS, RSS, fixture_items
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE
from tests.test_buildpack import clean_clone
from tests.test_newcomer import bot, one_line_error

ROOT = Path(__file__).resolve().parent.parent
VOICE_TRIGGER = "https://machinelearning.apple.com/research/voice-trigger"  # a demo post of unknown date


def test_the_bundled_archive_is_the_72_real_posts_with_their_authors_and_dates() -> None:
    posts = {item.link: item for item in demo.posts()}
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))
    assert len(posts) == len(corpus) == demo.POSTS == 72
    for post in corpus:
        item = posts[post["link"]]
        assert (item.title, item.summary) == (post["title"], post["abstract"])
        assert list(item.authors) == post["authors"]
        known = post["published"]
        assert item.published == (datetime.fromisoformat(known).replace(tzinfo=UTC) if known else UNDATED)
    assert posts[VOICE_TRIGGER].published == UNDATED
    assert demo.DEMO_FILE.relative_to(ROOT).parts[0] == "bot"  # in the package, never read from tests/


def test_a_built_wheel_ships_the_demo_archive(tmp_path: Path) -> None:
    """A non-editable install has the file: it is in the wheel, where bot.demo reads it."""
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert any(fnmatch("data/demo_archive.json", pattern) for pattern in package_data.get("bot", []))
    app = clean_clone(tmp_path / "app")
    built = subprocess.run([find_uv_bin(), "build", "--wheel", "--no-progress", "-o",
                            str(tmp_path / "dist"), str(app)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("mlresearch_bot-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = archive.read(demo.DEMO_FILE.relative_to(ROOT).as_posix())
    assert shipped == demo.DEMO_FILE.read_bytes()


# --- mlresearch-bot demo --------------------------------------------------------------------------------


def test_demo_loads_into_an_empty_database_once_and_status_says_it_is_the_demo(
    tmp_path: Path, database_url: str
) -> None:
    first = bot(tmp_path, "demo", DATABASE_URL=database_url)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    assert first.stdout.startswith("loaded the demo archive: 72 real posts of Apple ML Research")
    again = bot(tmp_path, "demo", "--json", DATABASE_URL=database_url)  # loading twice is harmless
    assert again.returncode == 0 and json.loads(again.stdout) == {"demo": True, "loaded": False, "items": 72}
    store = open_store(database_url)
    assert store.count_items() == 72 and store.demo_loaded_at() is not None
    assert store.deliveries() == []  # nothing queued: demo items are never posted
    text = bot(tmp_path, "status", DATABASE_URL=database_url).stdout
    assert "Archive: 72 items (the bundled demo archive: real posts for trying the bot offline" in text
    assert json.loads(bot(tmp_path, "status", "--json", DATABASE_URL=database_url).stdout)["demo"] is True
    latest = json.loads(bot(tmp_path, "latest", "20", "--json", DATABASE_URL=database_url).stdout)
    assert latest[0]["published"] == "2026-10-05"
    found = json.loads(bot(tmp_path, "search", "voice trigger", "--json", DATABASE_URL=database_url).stdout)
    assert [hit["published"] for hit in found if hit["link"] == VOICE_TRIGGER] == [None]  # no made-up day
    listed = bot(tmp_path, "search", "voice trigger", DATABASE_URL=database_url).stdout
    assert f"date unknown  {VOICE_TRIGGER}" in listed


def test_demo_refuses_a_database_that_holds_a_real_archive(tmp_path: Path, database_url: str) -> None:
    assert bot(tmp_path, "poll", DATABASE_URL=database_url, FEED_URL=str(RSS)).returncode == 0
    line = one_line_error(bot(tmp_path, "demo", DATABASE_URL=database_url), 1)
    assert "holds a real archive (10 items)" in line and "demo archive was not loaded" in line
    store = open_store(database_url)
    assert store.count_items() == 10 and store.demo_loaded_at() is None
    assert json.loads(bot(tmp_path, "status", "--json", DATABASE_URL=database_url).stdout)["demo"] is False


def test_the_slash_command_status_says_it_is_the_demo(store: Store) -> None:
    demo.load(store)
    reply = handle(Invocation("status", "T1", "C1", "U1"), Services(store, Settings()))
    assert "*Archive:* 72 items (the bundled demo archive" in json.dumps(reply.blocks, ensure_ascii=False)
    assert "the bundled demo archive" in reply.text


# --- never mixed with a real archive ----------------------------------------------------------------------


def test_the_first_real_poll_replaces_the_demo_and_posts_nothing(tmp_path: Path, database_url: str) -> None:
    store = open_store(database_url)
    store.migrate()
    store.subscribe("T1", "C1", "U1")  # a channel that takes every new item
    demo.load(store)
    store.put_item_vectors("a-model", [(VOICE_TRIGGER, "digest", b"\0" * 8)])
    index = SearchIndex(store)
    assert any(hit.item.link == VOICE_TRIGGER for hit in index.search(parse_query("voice trigger"), 10).hits)
    polled = bot(tmp_path, "poll", DATABASE_URL=database_url, FEED_URL=str(RSS))
    assert polled.returncode == 0, polled.stderr
    assert "first poll: recorded as seen, nothing posted" in polled.stdout
    assert "the demo archive was replaced" in polled.stdout
    assert store.count_items() == 10 and store.demo_loaded_at() is None
    assert {i.id for i in store.latest(20)} == {i.id for i in fixture_items(RSS)}  # the feed's, only
    assert store.deliveries() == []  # the feed's first poll records what is there and posts nothing
    found = index.search(parse_query("voice trigger"), 10).hits  # the search index saw the change
    assert all(hit.item.link != VOICE_TRIGGER for hit in found)
    assert store.item_vectors("a-model") == {}  # the demo's vectors went with it


def test_a_backfill_replaces_the_demo(tmp_path: Path, database_url: str) -> None:
    bot(tmp_path, "demo", DATABASE_URL=database_url)
    with FeedServer() as server:
        url = server.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        dry = bot(tmp_path, "backfill", "--url", url, "--dry-run", DATABASE_URL=database_url)
        assert "14 would be added, 0 enriched" in dry.stdout  # the demo counts for nothing
        done = bot(tmp_path, "backfill", "--url", url, "--json", DATABASE_URL=database_url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["added"] == 14
    store = open_store(database_url)
    assert store.count_items() == 14 and store.demo_loaded_at() is None
    assert store.item_by_link(VOICE_TRIGGER) is None


def test_serves_first_run_backfill_treats_the_demo_as_empty(store: Store) -> None:
    demo.load(store)  # 72 items: more than a sparse archive's 50
    with FeedServer() as server, httpx.Client() as client:
        url = server.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        result = research_index.backfill_if_sparse(store, client, url)
    assert result is not None and result.added == 14
    assert store.count_items() == 14 and store.demo_loaded_at() is None


def test_a_poll_into_the_store_replaces_the_demo_in_its_own_transaction(store: Store) -> None:
    demo.load(store)
    done = ingest(store, str(RSS), fixture_items(RSS), Validators(etag='"x"'))
    assert done.baseline and done.queued == 0
    assert store.count_items() == 10 and store.demo_loaded_at() is None
    assert store.load_demo(demo.posts())[0] == "refused"  # now a real archive
