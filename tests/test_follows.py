"""Personal follows and the reading list, on both stores: `/mlresearch follow|unfollow|follows`, a follow's
direct message through the delivery ledger (once per person and item, reconciled from the DM after a
crash), the Save button and the App Home (signed requests into the real app, Slack's Web API played by
FakeSlack over loopback)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace
from slack_bolt.adapter.wsgi import SlackRequestHandler
from slack_sdk import WebClient

from bot import blocks
from bot.app import build_app
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.deliver import Deliverer
from bot.feed import parse
from bot.models import Item, Validators
from bot.route import ingest
from bot.server import EVENTS_PATH, Router, create_http_server, run_until, wake
from bot.shell import SHELL_CHANNEL_ID, SHELL_TEAM_ID, SHELL_USER_ID, Console, ShellDeliverer
from bot.slackweb import make_client
from bot.store import Store, open_store
from tests.fakes.archive import make_item
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import BOT_ID, FakeSlack, dm_channel
from tests.fakes.slack_sender import SECRET, TOKEN, block_action_body, event_body, http, signed_headers

DATA = Path(__file__).parent / "data"
FEED = "https://machinelearning.apple.com/rss.xml"
TEAM, CHANNEL = "T0FAKE", "C0GENERAL"
ALICE, BOB = "U0ALICE", "U0BOB"
RSS = parse((DATA / "apple_ml_rss.xml").read_bytes())
SPEECH = make_item("speech-1", "Streaming Speech Recognition on Device",
                   "We make speech recognition run on the phone with private federated learning.")
VISION = make_item("vision-1", "Image Captioning with Less Data", "A captioning model for images.")
EVIL = make_item("evil-1", "<!channel> <@U123> speech & <https://evil.example|click>",
                 "Speech, for everyone <!here>.")
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def store(store: Store) -> Store:
    """The conftest store (each backend) past the feed's baseline poll: later items are new."""
    ingest(store, FEED, RSS, Validators())
    return store


def ask(store: Store, text: str, user: str = ALICE, team: str = TEAM, channel: str = CHANNEL) -> Reply:
    return handle(Invocation(text=text, team_id=team, channel_id=channel, user_id=user),
                  Services(store=store, settings=Settings()))


def arrive(store: Store, *items: Item) -> None:
    """A poll that finds `items` new in the feed."""
    ingest(store, FEED, [*RSS, *items], Validators())


def deliverer(slack: FakeSlack) -> Deliverer:
    client = make_client("xoxb-test", slack.url, backoff=0.01)
    return Deliverer(lambda team_id: client, pace=0.0, backoff=0.01)


def dms(slack: FakeSlack, user: str) -> list[dict[str, Any]]:
    return slack.posts(dm_channel(user))


def rendered(message: dict[str, Any]) -> str:
    """What Slack renders of a message or view: its texts (not button values or metadata)."""
    found: list[str] = [str(message.get("text") or "")]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text"):
                found.append(node["text"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(message.get("blocks") or [])
    return "\n".join(found)


# --- the commands ----------------------------------------------------------------------------------------


def test_follow_lists_and_unfollow_manage_a_persons_keywords(store: Store) -> None:
    reply = ask(store, 'follow speech "on device" speech')
    assert "Following `speech`, `on device`" in reply.text
    assert store.follows(TEAM, ALICE) == ["on device", "speech"]
    assert "already follow" in ask(store, "follow speech").text
    assert "`on device`, `speech`" in ask(store, "follows").text
    assert store.follows(TEAM, BOB) == [] and "don't follow anything" in ask(store, "follows", user=BOB).text
    assert store.follows("T0OTHER", ALICE) == []  # per workspace
    reply = ask(store, "unfollow speech")
    assert "Stopped following `speech`" in reply.text and "still follow `on device`" in reply.text
    assert "don't follow `privacy`" in ask(store, "unfollow privacy").text
    ask(store, "follow privacy")
    assert "You follow nothing now" in ask(store, "unfollow").text
    assert store.follows(TEAM, ALICE) == []
    help_text = rendered({"blocks": ask(store, "help").blocks})
    assert all(f"/mlresearch {c}" in help_text for c in ("follow privacy", "unfollow privacy", "follows"))


def test_follow_without_words_explains_and_changes_nothing(store: Store) -> None:
    assert "Usage" in ask(store, "follow").text
    assert "no words to follow" in ask(store, "follow ,,, !!").text
    assert store.follows(TEAM, ALICE) == []


@pytest.mark.parametrize("command", ["subscribe", "follow", "unfollow"])
def test_a_wall_of_keywords_is_refused_in_one_line_before_it_is_read(command: str, store: Store) -> None:
    """60,000 keywords (a paste gone wrong) took 12.6 s of a request thread, to keep 20 of them: more than
    MAX_KEYWORDS_TEXT characters are refused at once, in one line, and nothing changes."""
    ask(store, "follow privacy")
    ask(store, "subscribe privacy")
    wall = " ".join(f"kw{n}" for n in range(60_000))
    reply = ask(store, f"{command} {wall}")
    assert reply.text.count("\n") == 0 and "nothing was changed" in reply.text
    assert f"`/mlresearch {command}` reads at most 2,000" in reply.text and "20 keywords" in reply.text
    assert store.follows(TEAM, ALICE) == ["privacy"]
    assert store.get_subscription(TEAM, CHANNEL).keywords == ("privacy",)  # type: ignore[union-attr]
    near = " ".join(f"k{n:03d}" for n in range(399))  # 1,995 characters: read, the first 20 kept
    assert "nothing was changed" not in ask(store, f"subscribe {near}").text
    kept = store.get_subscription(TEAM, CHANNEL)
    assert kept is not None and kept.keywords == tuple(f"k{n:03d}" for n in range(20))


def test_follows_work_in_a_direct_message_and_survive_a_restart(store: Store, database_url: str) -> None:
    assert "Following `privacy`" in ask(store, "follow privacy", channel="D0ALICE").text
    reopened = open_store(database_url)
    assert reopened.follows(TEAM, ALICE) == ["privacy"]
    reopened.close()


# --- queueing and delivery -------------------------------------------------------------------------------


def test_a_matching_new_item_sends_one_dm_with_why_and_metadata(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow speech federated")
    ask(store, "follow captioning", user=BOB)
    arrive(store, SPEECH, VISION)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (2, 0)
    [dm] = dms(slack_api, ALICE)
    event = {k: dm["metadata"][k] for k in ("event_type", "event_payload")}
    assert event == {"event_type": "mlresearch_item", "event_payload": {"item_id": SPEECH.id}}
    assert [card["external_ref"] for card in dm["metadata"]["entities"]] == [{"id": SPEECH.id}]  # its card
    assert dm["params"]["unfurl_links"] is False and dm["params"]["parse"] == "none"
    why = dm["blocks"][-1]["elements"][0]["text"]
    assert why.startswith("You follow `federated`, `speech`")  # both keywords, one message
    assert "Streaming Speech Recognition" in dm["text"]
    assert [m["metadata"]["event_payload"]["item_id"] for m in dms(slack_api, BOB)] == [VISION.id]
    assert slack_api.calls_to("conversations.open")[0].params["users"] in (ALICE, BOB)
    assert deliverer(slack_api)(store).delivered == 0  # nothing twice


def test_a_non_matching_item_sends_nothing(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow quantum")
    arrive(store, SPEECH, VISION)
    assert deliverer(slack_api)(store).delivered == 0
    assert slack_api.posts() == []


def test_backfilled_items_are_never_sent(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow speech")
    store.merge_index([SPEECH])
    assert store.get_item(SPEECH.id) is not None
    arrive(store, SPEECH)  # the feed now carries it too: already archived, so not new
    assert deliverer(slack_api)(store).delivered == 0 and slack_api.posts() == []


def test_a_crash_after_posting_is_reconciled_from_the_dm_not_posted_again(
    store: Store, slack_api: FakeSlack, database_url: str
) -> None:
    ask(store, "follow speech")
    arrive(store, SPEECH)
    [row] = store.open_deliveries()
    assert row.to_person and row.channel_id == ALICE
    # The process that claimed the row posted it, then died before recording the post.
    assert store.claim(row.id)
    message = blocks.follow_message(SPEECH, ["speech"])
    slack_api.add_message(dm_channel(ALICE), message["text"], blocks=message["blocks"],
                          metadata=message["metadata"], user="UFAKEBOT", bot_id=BOT_ID)
    restarted = open_store(database_url)
    report = deliverer(slack_api)(restarted)
    assert (report.delivered, report.failed) == (1, 0)
    assert slack_api.calls_to("chat.postMessage") == []
    assert [d.state for d in restarted.deliveries()] == ["sent"]
    restarted.close()


def test_a_crash_before_posting_posts_once_after_the_restart(
    store: Store, slack_api: FakeSlack, database_url: str
) -> None:
    ask(store, "follow speech")
    arrive(store, SPEECH)
    [row] = store.open_deliveries()
    assert store.claim(row.id)  # claimed, then the process died before the post
    restarted = open_store(database_url)
    assert deliverer(slack_api)(restarted).delivered == 1
    assert deliverer(slack_api)(open_store(database_url)).delivered == 0
    assert len(dms(slack_api, ALICE)) == 1
    restarted.close()


def test_unfollowing_everything_drops_queued_messages(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow speech")
    arrive(store, SPEECH)
    ask(store, "unfollow")
    assert deliverer(slack_api)(store).delivered == 0 and slack_api.posts() == []
    assert [(d.state, d.error) for d in store.deliveries()] == [("failed", "unfollowed")]


def test_a_person_who_cannot_be_messaged_fails_only_their_rows(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow speech")
    ask(store, "follow speech", user=BOB)
    slack_api.handlers["conversations.open"] = lambda call: (
        {"ok": False, "error": "user_disabled"} if call.params["users"] == ALICE
        else {"ok": True, "channel": {"id": dm_channel(str(call.params["users"]))}}
    )
    arrive(store, SPEECH)
    report = deliverer(slack_api)(store)
    assert (report.delivered, report.failed) == (1, 1)
    assert len(dms(slack_api, BOB)) == 1 and dms(slack_api, ALICE) == []
    assert store.workspace_disabled(TEAM) is None


def test_an_install_without_im_write_still_gets_its_dms_and_stays_enabled(
    store: Store, slack_api: FakeSlack
) -> None:
    ask(store, "follow speech")
    slack_api.fault("conversations.open", error="missing_scope", times=None, needed="im:write")
    arrive(store, SPEECH)
    assert deliverer(slack_api)(store).delivered == 1
    [post] = slack_api.calls_to("chat.postMessage")
    assert post.params["channel"] == ALICE and len(dms(slack_api, ALICE)) == 1
    assert store.workspace_disabled(TEAM) is None


def test_titles_in_a_dm_arrive_inert(store: Store, slack_api: FakeSlack) -> None:
    ask(store, "follow speech")
    arrive(store, EVIL)
    deliverer(slack_api)(store)
    [dm] = dms(slack_api, ALICE)
    wire = rendered(dm)
    for live in ("<!channel>", "<@U123>", "<https://evil.example", "<!here>"):
        assert live not in wire
    assert "&lt;!channel&gt; &lt;@U123&gt; speech &amp;" in wire
    assert all(t.get("verbatim") for t in _mrkdwn(dm["blocks"]))


def _mrkdwn(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        found = [node] if node.get("type") == "mrkdwn" else []
        return found + [t for v in node.values() for t in _mrkdwn(v)]
    if isinstance(node, list):
        return [t for v in node for t in _mrkdwn(v)]
    return []


# --- Save and the App Home, through the real app --------------------------------------------------------


class App:
    """The Bolt app as `serve` runs it (Router, signature checks, lazy listeners) on a loopback port."""

    def __init__(self, store: Store, slack: FakeSlack) -> None:
        settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.url)
        app = build_app(settings, store, client=WebClient(token=TOKEN, base_url=slack.url))
        router = Router(SlackRequestHandler(app, path=EVENTS_PATH), store, None, SECRET)
        self.server = create_http_server(router, 0, host="127.0.0.1")
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=run_until, args=(self.server, self.stopping), daemon=True)
        self.thread.start()

    def post(self, body: bytes, content_type: str) -> int:
        url = f"http://127.0.0.1:{self.server.effective_port}{EVENTS_PATH}"
        return http("POST", url, body, signed_headers(body, content_type))[0]

    def click(self, action_id: str, value: str, **fields: Any) -> int:
        return self.post(block_action_body(action_id, value, **fields), FORM)

    def open_home(self, user: str = ALICE) -> int:
        event = {"type": "app_home_opened", "user": user, "channel": dm_channel(user), "tab": "home",
                 "event_ts": "1700000000.000300"}
        return self.post(event_body(event), "application/json")

    def stop(self) -> None:
        self.stopping.set()
        wake(self.server)
        self.thread.join(10)


@pytest.fixture
def app(store: Store, slack_api: FakeSlack) -> Iterator[App]:
    running = App(store, slack_api)
    yield running
    running.stop()


def published(slack: FakeSlack, user: str, count: int) -> dict[str, Any]:
    """The `count`-th view published to `user`'s App Home (waiting for it)."""
    def views(fake: FakeSlack) -> list[dict[str, Any]]:
        return [c.params["view"] for c in fake.calls_to("views.publish") if c.params.get("user_id") == user]

    assert slack.wait_for(lambda fake: len(views(fake)) >= count)
    view = views(slack)[count - 1]
    return view if isinstance(view, dict) else json.loads(view)


def test_save_puts_the_item_on_the_reading_list_once_and_says_so(
    store: Store, app: App, hooks: Recorder
) -> None:
    arrive(store, SPEECH)
    assert app.click("save_item", SPEECH.id, response_url=hooks.url("/save/1")) == 200
    assert hooks.wait_for(lambda r: len(r.requests) >= 1)
    answer = hooks.requests[0].json
    assert answer["response_type"] == "ephemeral" and answer["replace_original"] is False
    assert answer["text"].startswith("Saved “Streaming Speech Recognition on Device” to your reading list")
    assert app.click("save_item", SPEECH.id, response_url=hooks.url("/save/2")) == 200
    assert hooks.wait_for(lambda r: len(r.requests) >= 2)
    assert "already in your reading list" in hooks.requests[1].json["text"]
    assert [s.item.id for s in store.saved_items(TEAM, ALICE)] == [SPEECH.id]
    assert store.saved_items(TEAM, BOB) == [] and store.saved_items("T0OTHER", ALICE) == []


def test_saving_an_item_no_longer_archived_is_one_line(store: Store, app: App, hooks: Recorder) -> None:
    assert app.click("save_item", "https://machinelearning.apple.com/research/gone",
                     response_url=hooks.url("/save/gone")) == 200
    assert hooks.wait_for(lambda r: len(r.requests) >= 1)
    assert hooks.requests[0].json["text"] == "That item is no longer in the archive, so it can't be saved."
    assert store.saved_items(TEAM, ALICE) == []


def test_the_home_lists_saved_items_with_remove_follows_and_subscriptions(
    store: Store, app: App, slack_api: FakeSlack
) -> None:
    arrive(store, SPEECH, VISION, EVIL)
    for item in (SPEECH, EVIL):
        assert store.save_item(TEAM, ALICE, item.id) == "saved"
    store.save_item(TEAM, BOB, VISION.id)
    ask(store, 'follow speech "on device"')
    store.subscribe(TEAM, "C0SUBS", BOB, ["vision"])
    store.subscribe(TEAM, "C0PRIVATE", BOB, ["secret project"])  # a channel Alice is not in
    store.subscribe("T0OTHER", "C0ELSEWHERE", BOB)
    slack_api.members = {"C0SUBS": {ALICE, BOB}, "C0PRIVATE": {BOB}}
    assert app.open_home() == 200
    view = published(slack_api, ALICE, 1)
    assert view["type"] == "home" and len(view["blocks"]) <= 100
    text = rendered(view)
    headers = [b["text"]["text"] for b in view["blocks"] if b["type"] == "header"]
    assert headers[1:5] == ["Your reading list", "Your follows", "What the team is reading", "Latest"]
    removes = [b["accessory"] for b in view["blocks"] if (b.get("accessory") or {}).get("action_id")
               == "unsave_item"]
    assert {r["value"] for r in removes} == {SPEECH.id, EVIL.id}  # Alice's, not Bob's
    assert all(r["text"]["text"] == "Remove" for r in removes)
    assert "You follow `on device`, `speech`" in text
    assert "<#C0SUBS>: only new items matching `vision`" in text and "C0ELSEWHERE" not in text
    assert "C0PRIVATE" not in text and "secret" not in text and "1 channel you are not in" in text
    for live in ("<!channel>", "<@U123>", "<https://evil.example"):  # the hostile title, inert
        assert live not in text
    assert "&lt;!channel&gt; &lt;@U123&gt; speech &amp;" in text

    assert app.click("unsave_item", EVIL.id) == 200
    view = published(slack_api, ALICE, 2)
    assert [s.item.id for s in store.saved_items(TEAM, ALICE)] == [SPEECH.id]
    assert [b["accessory"]["value"] for b in view["blocks"] if (b.get("accessory") or {}).get("action_id")
            == "unsave_item"] == [SPEECH.id]


def test_a_long_reading_list_is_cut_to_fit_the_home_and_says_so(store: Store, app: App,
                                                               slack_api: FakeSlack) -> None:
    many = [replace(make_item(f"paper-{n}", f"Paper {n}", "About things."), guid=f"p{n}") for n in range(120)]
    store.add_items(many)
    for item in many:
        store.save_item(TEAM, ALICE, item.id)
    assert app.open_home() == 200
    view = published(slack_api, ALICE, 1)
    assert len(view["blocks"]) <= 100
    shown = [b for b in view["blocks"] if (b.get("accessory") or {}).get("action_id") == "unsave_item"]
    assert 0 < len(shown) < 120
    assert f"Showing the {len(shown)} most recently saved of your 120 items" in rendered(view)


def test_search_results_and_channel_posts_carry_save_and_related(store: Store, slack_api: FakeSlack) -> None:
    arrive(store, SPEECH)
    reply = ask(store, "search speech recognition")
    saves = [e for b in reply.blocks if b["type"] == "actions" for e in b["elements"]
             if e["action_id"] == "save_item"]
    assert SPEECH.id in {e["value"] for e in saves}
    post = blocks.item_message(SPEECH)
    [actions] = [b for b in post["blocks"] if b["type"] == "actions"]
    assert [e["text"]["text"] for e in actions["elements"]] == ["Read", "Save", "Related", "Cite"]


def test_the_shell_prints_its_users_follow_messages(store: Store) -> None:
    ask(store, "follow speech", team=SHELL_TEAM_ID, user=SHELL_USER_ID, channel=SHELL_CHANNEL_ID)
    arrive(store, SPEECH)
    out = StringIO()
    assert ShellDeliverer(Console(out))(store).delivered == 1
    assert "A direct message to you:" in out.getvalue() and "You follow `speech`" in out.getvalue()
    assert ShellDeliverer(Console(out))(store).delivered == 0


def test_a_burst_in_a_channel_leaves_a_followers_dms_one_per_item(store: Store, slack_api: FakeSlack) -> None:
    """Seven new items: the subscribed channel gets them as a burst (one message, the items in its thread);
    the person who follows them gets seven direct messages, never a burst, each once."""
    store.subscribe(TEAM, CHANNEL, ALICE)
    ask(store, "follow speech")
    items = [make_item(f"speech-{n}", f"Speech Recognition, Part {n}", "Speech on device.") for n in range(7)]
    arrive(store, *items)
    client = make_client("xoxb-test", slack_api.url, backoff=0.01)
    report = Deliverer(lambda team_id: client, pace=0.0, backoff=0.01, burst_threshold=5)(store)
    assert (report.delivered, report.failed) == (14, 0)
    [parent] = slack_api.batch_posts(CHANNEL)
    assert len(slack_api.thread(CHANNEL, parent["ts"])) == 7  # its replies
    assert sorted(m["metadata"]["event_payload"]["item_id"] for m in dms(slack_api, ALICE)) == \
        sorted(item.id for item in items)
    assert all("thread_ts" not in m["params"] for m in dms(slack_api, ALICE))
    assert Deliverer(lambda team_id: client, pace=0.0, backoff=0.01, burst_threshold=5)(store).delivered == 0


def test_the_home_lists_no_channel_when_slack_cannot_say_which_the_person_is_in(
    store: Store, app: App, slack_api: FakeSlack
) -> None:
    store.subscribe(TEAM, "C0SUBS", BOB, ["secret project"])
    slack_api.members = {"C0SUBS": {ALICE}}
    slack_api.handlers["users.conversations"] = lambda call: {"ok": False, "error": "missing_scope"}
    assert app.open_home() == 200
    text = rendered(published(slack_api, ALICE, 1))
    assert "C0SUBS" not in text and "secret project" not in text
    assert "Subscribed here: 1 channel, none of which you are in." in text


def test_a_follow_can_be_a_topic_matched_as_a_subscriptions_about_topic(
    store: Store, slack_api: FakeSlack
) -> None:
    """`follow about:"topic"` is matched as `subscribe about:` is (here without a model: by the topic's
    words), and the message says it matched by meaning."""
    reply = ask(store, 'follow about:"speech on device"')
    assert "`about:speech on device` (by meaning)" in reply.text
    arrive(store, SPEECH, VISION)
    assert deliverer(slack_api)(store).delivered == 1
    [dm] = dms(slack_api, ALICE)
    assert dm["metadata"]["event_payload"]["item_id"] == SPEECH.id
    assert "about:speech on device" in json.dumps(dm["blocks"])
    assert ask(store, 'unfollow about:"speech on device"').text and store.follows(TEAM, ALICE) == []
