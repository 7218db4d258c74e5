"""Left from earlier notes (issue 21): one rule for a post whose fate is unknown, `poll --dry-run` naming the
channels that would get a burst, `unsubscribe` dropping the items waiting for a channel's digest, old models'
vectors dropped at serve's start, and the search index after a delete plus an insert."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bot.errors import EmbeddingError
from bot.models import Validators
from bot.route import ingest
from bot.search.embed import StaticModel
from bot.search.engine import build
from bot.search.index import SearchIndex
from bot.search.query import search
from bot.slackweb import fate_unknown
from bot.store import Store, open_store
from tests.fakes.archive import ARCHIVE, RSS, make_item
from tests.test_newcomer import bot

FEED = "https://machinelearning.apple.com/rss.xml"


# --- one rule for "the post may have landed" -------------------------------------------------------------


@pytest.mark.parametrize(("code", "status", "unknown"), [
    ("http_500", 500, True), ("http_503", 503, True), ("connection_error:TimeoutError", -1, True),
    ("internal_error", 200, True), ("fatal_error", 200, True),
    ("ratelimited", 429, False), ("channel_not_found", 200, False), ("invalid_blocks", 200, False),
    ("invalid_auth", 200, False), ("ok", 200, False),
])
def test_a_post_of_unknown_fate_is_one_rule(code: str, status: int, unknown: bool) -> None:
    assert fate_unknown(code, status) is unknown


def test_the_rule_is_written_once() -> None:
    bot_dir = Path(__file__).resolve().parent.parent / "bot"
    written = [p.name for p in bot_dir.rglob("*.py") if "status >= 500" in p.read_text()]
    assert written == ["slackweb.py"]


# --- poll --dry-run names the channels a burst would reach -----------------------------------------------


def test_a_dry_run_says_which_channels_would_get_a_burst(tmp_path: Path, database_url: str) -> None:
    feed = tmp_path / "feed.xml"  # one feed: the baseline is per feed
    feed.write_bytes(RSS.read_bytes())
    env = {"DATABASE_URL": database_url, "BURST_THRESHOLD": "5", "FEED_URL": str(feed)}
    assert bot(tmp_path, "poll", **env).returncode == 0  # the baseline: 10 items
    store = open_store(database_url)
    store.subscribe("T1", "C0ALL", "U1", [])  # every item: 6 new ones, a burst
    store.subscribe("T1", "C0FEW", "U1", ["qwertyuiop"])  # matches none
    store.subscribe("T1", "C0DIGEST", "U1", [])
    store.set_digest("T1", "C0DIGEST", "daily")  # a digest: no burst
    store.subscribe("T1", "C0PAUSED", "U1", [])
    store.pause_subscription("T1", "C0PAUSED", "channel_not_found")
    store.subscribe("T2", "C0OFF", "U2", [])
    store.disable_workspace("T2", "invalid_auth")
    store.close()
    feed.write_bytes(ARCHIVE.read_bytes())  # the feed now holds 6 more
    text = bot(tmp_path, "poll", "--dry-run", **env)
    assert text.returncode == 0, text.stderr
    assert "6 new items would be posted" in text.stdout
    bursts = [line for line in text.stdout.splitlines() if "burst" in line]
    assert bursts == ["T1/C0ALL would get a burst: one message, its 6 items in its thread (more than "
                      "BURST_THRESHOLD=5)"]
    listed = json.loads(bot(tmp_path, "poll", "--dry-run", "--json", **env).stdout)
    assert listed["bursts"] == [{"team_id": "T1", "channel_id": "C0ALL", "items": 6}]
    fewer = bot(tmp_path, "poll", "--dry-run", "--json", **{**env, "BURST_THRESHOLD": "6"})
    assert json.loads(fewer.stdout)["bursts"] == []  # six items one by one


def test_a_dry_run_of_a_baseline_poll_names_no_burst(tmp_path: Path) -> None:
    listed = json.loads(bot(tmp_path, "poll", "--dry-run", "--json", FEED_URL=str(ARCHIVE)).stdout)
    assert listed["baseline"] is True and listed["bursts"] == []


# --- unsubscribe drops what waits for the channel's digest -----------------------------------------------


def test_unsubscribe_drops_the_items_waiting_for_the_channels_digest(store: Store) -> None:
    store.subscribe("T1", "C1", "U1", [])
    store.set_digest("T1", "C1", "daily")
    store.subscribe("T1", "C2", "U1", [])
    store.set_digest("T1", "C2", "daily")
    ingest(store, FEED, [make_item("old", "Old", "An abstract.")], Validators())  # the baseline
    new = make_item("new", "New", "An abstract.")
    ingest(store, FEED, [make_item("old", "Old", "An abstract."), new], Validators())
    assert store.waiting_digest_items("T1", "C1") == [new.id] == store.waiting_digest_items("T1", "C2")
    assert store.unsubscribe("T1", "C1")
    assert store.waiting_digest_items("T1", "C1") == []
    assert store.waiting_digest_items("T1", "C2") == [new.id]  # another channel's are its own
    store.subscribe("T1", "C1", "U1", [])  # back, with a digest: nothing from before it left
    store.set_digest("T1", "C1", "daily")
    assert store.waiting_digest_items("T1", "C1") == []


# --- old models' vectors ---------------------------------------------------------------------------------


def test_serve_drops_other_models_vectors_at_start(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    items = [make_item(f"v{n}", f"Vector {n}", "About embeddings.") for n in range(3)]
    store.add_items(items)
    store.put_item_vectors("old-model", [(i.id, "digest", bytes(16)) for i in items])
    one_shot = SearchIndex(store, model=StaticModel.bundled)
    search(one_shot, "embeddings")  # a one-shot command (search, the shell) keeps them
    model = StaticModel.bundled().name
    assert len(store.item_vectors("old-model")) == 3 and len(store.item_vectors(model)) == 3
    with caplog.at_level(logging.INFO, logger="bot.search"):
        SearchIndex(store, model=StaticModel.bundled).start().join(60)  # serve's start
    assert store.item_vectors("old-model") == {}
    assert len(store.item_vectors(model)) == 3
    assert f"event=old_vectors_dropped kept_model={model} count=3" in caplog.text


def test_a_model_that_cannot_load_drops_nothing(store: Store) -> None:
    def broken() -> StaticModel:
        raise EmbeddingError("no such model")

    store.add_items([make_item("v", "Vector", "About embeddings.")])
    store.put_item_vectors("old-model", [(make_item("v", "", "").id, "digest", bytes(16))])
    SearchIndex(store, model=broken).start().join(60)
    assert len(store.item_vectors("old-model")) == 1


# --- the index after a delete plus an insert ---------------------------------------------------------------


def test_a_delete_plus_an_insert_between_two_refreshes_leaves_no_deleted_item(store: Store) -> None:
    store.add_items([make_item(slug, f"Title {slug}", words) for slug, words in
                     (("zebra", "Zebra stripes."), ("quokka", "Quokka smiles."), ("llama", "Llama wool."))])
    index = SearchIndex(store)
    first = index.current()
    assert [h.item.guid for h in search(index, "quokka", 5).hits] == ["quokka"]
    with store._write() as db:  # an operator's delete (the bot never deletes an item)
        db.execute("DELETE FROM aliases WHERE item_id = ?", [make_item("quokka", "", "").id])
        db.execute("DELETE FROM items WHERE id = ?", [make_item("quokka", "", "").id])
    store.add_items([make_item("okapi", "Title okapi", "Okapi forest.")])  # as many items as before
    assert store.count_items() == len(first.entries)
    refreshed = index.current()
    assert sorted(refreshed.entries) == sorted(make_item(s, "", "").id for s in ("zebra", "llama", "okapi"))
    assert refreshed.searcher.num_docs == 3
    assert search(index, "quokka", 5).hits == []
    assert [h.item.guid for h in search(index, "okapi", 5).hits] == ["okapi"]
    again = build(store, refreshed)  # and a refresh with nothing new changes nothing
    assert sorted(again.entries) == sorted(refreshed.entries)
