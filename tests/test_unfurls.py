"""Links to machinelearning.apple.com unfurled from the archive: signed `link_shared` events into the real app
(the Router, Bolt and our listeners behind waitress, in this process) over each store, with the Web API played
by FakeSlack (which learned `chat.unfurl`)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot import unfurls
from bot.app import build_app, web_client
from bot.blocks import AUTHOR_ACTION_ID, CITE_ACTION_ID, RELATED_ACTION_ID, SAVE_ACTION_ID
from bot.config import Settings
from bot.models import Item
from bot.server import EVENTS_PATH, Router, create_http_server, run_until, wake
from bot.store import Store
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TEAM, TOKEN, block_action_body, event_body, http, signed_headers

SITE = "https://machinelearning.apple.com/research"
HOSTILE = Item(
    id=f"{SITE}/hostile", guid="hostile", title="Pings <!channel> & <@U0BOSS> <https://evil.example|click>",
    link=f"{SITE}/hostile",
    summary=("We study @here mentions and <https://evil.example|links> in abstracts. Our method is robust to "
             "all the markup we tried. "
             "A third sentence that the unfurl leaves out, since two are enough. And a fourth one."),
    published=datetime(2026, 5, 11, tzinfo=UTC), kind="research",
    authors=("Jane Doe", "John Roe", "Ann Other", "Max Fourth"),
)
PLAIN = Item(id=f"{SITE}/plain", guid="plain", title="A Plain Paper", link=f"{SITE}/plain",
             summary="One sentence only.", published=datetime(2026, 4, 1, tzinfo=UTC), kind="research")


class TrackingExecutor(ThreadPoolExecutor):
    """The lazy listeners' executor, remembering what it was given so a test can wait for all of it."""

    def __init__(self) -> None:
        super().__init__(max_workers=4, thread_name_prefix="lazy")
        self.futures: list[Future[Any]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future

    def drain(self) -> None:
        while pending := [f for f in self.futures if not f.done()]:
            wait(pending, timeout=30)


class App:
    def __init__(self, url: str, executor: TrackingExecutor) -> None:
        self.url, self.executor = url, executor

    def share_links(self, *urls: str, **fields: Any) -> None:
        event = {"type": "link_shared", "channel": "C0LINKS", "is_bot_user_member": True, "user": "U0ALICE",
                 "message_ts": "1700000000.000200", "source": "conversations_history",
                 "unfurl_id": "C0LINKS.1700000000.000200.abc",
                 "links": [{"domain": "machinelearning.apple.com", "url": u} for u in urls], **fields}
        self.post(event_body(event), "application/json")
        self.executor.drain()

    def post(self, body: bytes, content_type: str) -> None:
        status, _ = http("POST", self.url, body, signed_headers(body, content_type))
        assert status == 200


@pytest.fixture
def app(store: Store, slack_api: FakeSlack) -> Iterator[App]:
    store.add_items([HOSTILE, PLAIN])
    settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack_api.url,
                        poll_interval=0)
    executor = TrackingExecutor()
    bolt = build_app(settings, store, client=web_client(settings), executor=executor)
    server = create_http_server(Router(SlackRequestHandler(bolt, path=EVENTS_PATH), store, None, SECRET), 0,
                                host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        yield App(f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}", executor)
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        executor.shutdown(wait=True)


def test_an_archived_link_is_unfurled_with_title_date_authors_abstract_and_buttons(
    app: App, slack_api: FakeSlack
) -> None:
    posted = "https://MachineLearning.apple.com/research/hostile/?utm_source=slack#abstract"
    app.share_links(posted)
    [call] = slack_api.unfurls
    assert call["unfurl_id"] == "C0LINKS.1700000000.000200.abc" and call["source"] == "conversations_history"
    assert list(call["unfurls"]) == [posted]  # keyed by the URL as posted, matched by its canonical form
    blocks = call["unfurls"][posted]["blocks"]
    text = json.dumps(blocks, ensure_ascii=False)
    assert "Pings &lt;!channel&gt; &amp; &lt;@U0BOSS&gt; &lt;https://evil.example|click&gt;" in text
    assert f"<{SITE}/hostile|Pings" in text  # the title links to the item
    assert "Paper · 2026-05-11 · J. Doe, J. Roe et al." in text
    assert ("We study @here mentions and &lt;https://evil.example|links&gt; in abstracts. Our method is "
            "robust to all the markup we tried.") in text
    assert "third sentence" not in text
    assert "<!channel>" not in text and "<@U0BOSS>" not in text and "<https://evil" not in text
    for block in blocks:
        for obj in [block.get("text"), *(block.get("elements") or [])]:
            if isinstance(obj, dict) and obj.get("type") == "mrkdwn":
                assert obj.get("verbatim") is True
    [actions] = [b for b in blocks if b["type"] == "actions"]
    *buttons, menu = actions["elements"]
    assert [(e["action_id"], e["value"]) for e in buttons] == [
        (SAVE_ACTION_ID, HOSTILE.id), (RELATED_ACTION_ID, HOSTILE.id), (CITE_ACTION_ID, HOSTILE.id)]
    # each author leads to `search author:"…"` (More by…)
    assert menu["type"] == "static_select" and menu["action_id"] == AUTHOR_ACTION_ID
    assert [option["value"] for option in menu["options"]] == list(HOSTILE.authors)


def test_the_unfurls_save_button_saves_through_the_existing_listener(
    app: App, slack_api: FakeSlack, store: Store
) -> None:
    app.share_links(PLAIN.link)
    [call] = slack_api.unfurls
    blocks = call["unfurls"][PLAIN.link]["blocks"]
    [save] = [e for b in blocks if b["type"] == "actions" for e in b["elements"]
              if e["action_id"] == SAVE_ACTION_ID]
    app.post(block_action_body(SAVE_ACTION_ID, save["value"], channel="C0LINKS"),
             "application/x-www-form-urlencoded")
    app.executor.drain()
    assert [s.item.id for s in store.saved_items(TEAM, "U0ALICE")] == [PLAIN.id]


def test_a_message_link_without_unfurl_id_is_unfurled_by_channel_and_ts(
    app: App, slack_api: FakeSlack
) -> None:
    app.share_links(PLAIN.link, unfurl_id=None, source=None)
    [call] = slack_api.unfurls
    assert (call["channel"], call["ts"]) == ("C0LINKS", "1700000000.000200")
    assert "unfurl_id" not in call


def test_links_the_archive_lacks_and_other_hosts_are_left_to_slack(
    app: App, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.listeners")
    app.share_links(f"{SITE}/not-archived", "https://example.com/research/plain",
                    "https://machinelearning.apple.com.evil.example/research/plain", "javascript:alert(1)")
    assert slack_api.calls_to("chat.unfurl") == []
    [line] = [r.getMessage() for r in caplog.records if "unfurl" in r.getMessage()]
    assert "links=4 ours=1 other_hosts=3 over_cap=0 not_archived=1" in line

    app.share_links(f"{SITE}/not-archived", "https://example.com/x", PLAIN.link)
    [call] = slack_api.unfurls
    assert list(call["unfurls"]) == [PLAIN.link]


def test_twenty_links_in_one_event_are_capped(
    app: App, slack_api: FakeSlack, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    many = [Item(id=f"{SITE}/paper-{n}", guid=f"p{n}", title=f"Paper {n}", link=f"{SITE}/paper-{n}",
                 summary="An abstract.", published=datetime(2026, 3, 1, tzinfo=UTC), kind="research")
            for n in range(20)]
    store.add_items(many)
    caplog.set_level(logging.INFO, logger="bot.listeners")
    app.share_links(*(f"{i.link}/" for i in many), many[0].link)  # and the first again, spelt otherwise
    [call] = slack_api.unfurls
    assert list(call["unfurls"]) == [f"{i.link}/" for i in many[: unfurls.MAX_LINKS]]
    [line] = [r.getMessage() for r in caplog.records if "unfurl" in r.getMessage()]
    assert "event=unfurled" in line and "links=21 ours=5 other_hosts=0 over_cap=15 unfurled=5" in line


def test_odd_link_shared_events_are_one_log_line_and_no_call(
    app: App, slack_api: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    app.share_links(links="not a list")  # type: ignore[arg-type]
    app.share_links(PLAIN.link, links=[None, 7, {"url": 42}, {"url": PLAIN.link}], unfurl_id=None,
                    source=None, channel=None)
    slack_api.fault("chat.unfurl", error="cannot_unfurl_url")
    app.share_links(PLAIN.link)
    assert slack_api.unfurls == []
    lines = [r.getMessage() for r in caplog.records if r.name == "bot.listeners"]
    assert len([m for m in lines if "unfurl" in m]) == 3
    assert "event=unfurl_failed stage=slack" in lines[-1] and "error=cannot_unfurl_url" in lines[-1]
    assert "Traceback" not in caplog.text


def test_abstract_start_quotes_whole_sentences_within_the_limit() -> None:
    two = "The first sentence is long enough to count. The second one is long enough too. A third."
    assert unfurls.abstract_start(two) == two.removesuffix(" A third.")
    assert unfurls.abstract_start("no sentence end, just words cut off by the feed") == \
        "no sentence end, just words cut off by the feed"
    long = "A " + "very " * 120 + "long sentence. Another."
    assert len(unfurls.abstract_start(long)) <= unfurls.ABSTRACT_CHARS
    assert unfurls.abstract_start("") == ""
