"""Questions asked in Slack, end to end: signed Events API requests into the real app (the Router, Bolt and
our listeners behind waitress, in this process) over each store, with the Web API played by FakeSlack.

Every answer runs as a lazy listener on the app's executor; `Bot.drain()` waits until all of them are done,
so a test can assert that something was *not* posted without sleeping."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.app import build_app, make_services, web_client
from bot.config import Settings
from bot.conversation import EVENT_TYPE, HELP, SORRY, Question, answer, claim
from bot.models import Item
from bot.server import EVENTS_PATH, Router, create_http_server, run_until, wake
from bot.store import Store, open_store
from tests.fakes.slack_api import BOT_ID, BOT_USER, FakeSlack
from tests.fakes.slack_sender import SECRET, TEAM, TOKEN, event_body, http, signed_headers

TODAY = datetime.now(UTC).date()
THIS_YEAR = datetime(TODAY.year, 1, 1, 6, tzinfo=UTC)
LAST_YEAR = datetime(TODAY.year - 1, 6, 1, tzinfo=UTC)


def make(slug: str, title: str, summary: str, published: datetime) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(id=link, guid=slug, title=title, link=link, summary=summary, published=published,
                kind="research")


ITEMS = [
    make("speech-cloud", "Speech Recognition at Scale", "Large speech recognition models trained on servers.",
         THIS_YEAR),
    make("speech-on-device", "On-Device Speech Recognition", "Speech recognition that runs on-device, "
         "privately and fast.", THIS_YEAR + timedelta(hours=1)),
    make("speech-old", "Speech Recognition of Old", "An older speech recognition paper.", LAST_YEAR),
    make("diffusion", "Diffusion Models for Images", "Diffusion models generate images step by step.",
         THIS_YEAR + timedelta(hours=2)),
]


class TrackingExecutor(ThreadPoolExecutor):
    """The lazy listeners' executor, remembering what it was given so a test can wait for all of it."""

    def __init__(self, workers: int) -> None:
        super().__init__(max_workers=workers, thread_name_prefix="lazy")
        self.futures: list[Future[Any]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.futures.append(future)
        return future


class Bot:
    def __init__(self, url: str, executor: TrackingExecutor, slack: FakeSlack) -> None:
        self.url = url
        self.executor = executor
        self.slack = slack
        self._ts = 1700000000

    def next_ts(self) -> str:
        self._ts += 1
        return f"{self._ts}.000100"

    def send(self, event: dict[str, Any], *, event_id: str | None = None,
             headers: dict[str, str] | None = None) -> int:
        body = event_body(event, event_id=event_id)
        sent = signed_headers(body, "application/json")
        sent.update(headers or {})
        status, _ = http("POST", self.url, body, sent)
        return status

    def mention(self, text: str, *, channel: str = "C0TALK", thread_ts: str | None = None,
                **fields: Any) -> dict[str, Any]:
        event = {**mention_event(text, channel, self.next_ts()), **fields}
        if thread_ts:
            event["thread_ts"] = thread_ts
        assert self.send(event) == 200
        return event

    def drain(self) -> None:
        """Wait for every lazy listener started so far (and any they started)."""
        while True:
            pending = [f for f in self.executor.futures if not f.done()]
            if not pending:
                return
            wait(pending, timeout=30)

    def answers(self, channel: str) -> list[dict[str, Any]]:
        posts = self.slack.posts(channel)
        return [m for m in posts if (m.get("metadata") or {}).get("event_type") == EVENT_TYPE]


def mention_event(text: str, channel: str, ts: str) -> dict[str, Any]:
    return {"type": "app_mention", "user": "U0ALICE", "text": f"<@{BOT_USER}> {text}", "ts": ts,
            "channel": channel, "event_ts": ts}


@pytest.fixture
def bot(store: Store, slack_api: FakeSlack) -> Iterator[Bot]:
    store.add_items(ITEMS)
    settings = Settings(slack_bot_token=TOKEN, slack_signing_secret=SECRET, slack_api_url=slack_api.url,
                        poll_interval=0)
    executor = TrackingExecutor(4)
    app = build_app(settings, store, client=web_client(settings), executor=executor)
    router = Router(SlackRequestHandler(app, path=EVENTS_PATH), store, None, SECRET)
    server = create_http_server(router, 0, host="127.0.0.1")
    stopping = threading.Event()
    thread = threading.Thread(target=run_until, args=(server, stopping), daemon=True)
    thread.start()
    try:
        yield Bot(f"http://127.0.0.1:{server.effective_port}{EVENTS_PATH}", executor, slack_api)
    finally:
        stopping.set()
        wake(server)
        thread.join(10)
        executor.shutdown(wait=True)


def mrkdwn(message: dict[str, Any]) -> str:
    return json.dumps(message.get("blocks") or [], ensure_ascii=False)


# --- mentions ---------------------------------------------------------------------------------------------


def test_a_mention_is_answered_in_its_thread_with_links(bot: Bot) -> None:
    asked = bot.mention("what has Apple published on speech recognition this year?")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    assert reply["thread_ts"] == asked["ts"]
    body = mrkdwn(reply)
    assert f"Searched for “speech recognition” published since {TODAY.year}-01-01 (“this year”)" in body
    assert "<https://machinelearning.apple.com/research/speech-on-device|" in body
    assert "<https://machinelearning.apple.com/research/speech-cloud|" in body
    assert "speech-old" not in body  # last year's: outside "this year"
    assert "share_reply" not in body  # already visible: no share button
    params = reply["params"]
    assert params["parse"] == "none" and params["unfurl_links"] in (False, "false", "0", 0)
    assert all(b.get("text", {}).get("verbatim", True) for b in reply["blocks"] if b.get("type") == "section")
    assert reply["metadata"]["event_payload"] == {"message_ts": asked["ts"]}
    assert reply["text"] and len(reply["text"]) <= 3000


def test_a_misspelt_question_says_once_what_was_searched_and_what_was_typed(bot: Bot) -> None:
    """The header named the words as typed and the reply under it the words as searched ("Searched for
    “speech recogniton”", then "Searched for “speech recognition”"): now the header says both, once."""
    bot.mention("anything on speech recogniton this year?")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    body = mrkdwn(reply)
    assert "Searched for “speech recognition” (you typed “speech recogniton”) published since" in body
    assert body.count("Searched for “") == 1 and reply["text"].count("Searched for “") == 1
    assert body.count("Searched for") == 1  # the glossary's line says what it added, not "Searched for" again
    assert "Also searched: “speech recognition” as ASR" in body
    assert "<https://machinelearning.apple.com/research/speech-on-device|" in body


def test_a_follow_up_in_the_thread_keeps_the_topic(bot: Bot) -> None:
    first = bot.mention("what has Apple published on speech recognition this year?")
    bot.drain()
    bot.mention("only the on-device ones", thread_ts=first["ts"])
    bot.drain()
    replies = bot.answers("C0TALK")
    assert len(replies) == 2 and all(r["thread_ts"] == first["ts"] for r in replies)
    body = mrkdwn(replies[1])
    assert "Searched for “speech recognition &quot;on-device&quot;”" in body or \
        "Searched for “speech recognition \\\"on-device\\\"”" in body
    assert "keeping this thread's topic" in body
    first_link = body.index("<https://machinelearning.apple.com/research/")
    assert body[first_link:].startswith("<https://machinelearning.apple.com/research/speech-on-device|")


def test_a_follow_up_that_changes_the_topic_says_so_and_an_abbreviation_keeps_its_case(
        bot: Bot, store: Store) -> None:
    store.add_items([
        make("encrypted", "Computing on Encrypted Data", "Homomorphic encryption lets a server compute on "
             "data that stays encrypted.", THIS_YEAR + timedelta(hours=3)),
        make("voices", "Neural Voices", "Speech synthesis for the assistant's voice.",
             THIS_YEAR + timedelta(hours=4)),
    ])
    first = bot.mention("any work on HE?")  # homomorphic encryption: in capitals only, as the glossary says
    bot.drain()
    bot.mention("what about TTS?", thread_ts=first["ts"])
    bot.drain()
    replies = bot.answers("C0TALK")
    assert len(replies) == 2
    he, tts = (mrkdwn(r) for r in replies)
    assert "Searched for “HE”." in he and "Also searched: “HE” as homomorphic encryption" in he
    assert "<https://machinelearning.apple.com/research/encrypted|" in he
    assert "Searched for “TTS”, in place of this thread's topic." in tts
    assert "keeping this thread's topic" not in tts
    assert "<https://machinelearning.apple.com/research/voices|" in tts and "encrypted" not in tts


SONGBIRDS = [
    make("zebrafinch", "How Zebrafinch Song Is Learned",
         "Young zebrafinch birds learn their song from a tutor.", THIS_YEAR + timedelta(hours=5)),
    make("audio-diffusion", "Diffusion for Audio", "Diffusion models that generate speech and music.",
         THIS_YEAR + timedelta(hours=6)),
]


def links(body: str) -> list[str]:
    """The archive items a reply links to, by slug, in order."""
    return re.findall(r"<https://machinelearning\.apple\.com/research/([\w-]+)\|", body)


def test_and_on_x_in_a_thread_asks_about_x_and_only_the_x_ones_narrows(bot: Bot, store: Store) -> None:
    """In a thread that asked "what has apple published on zebrafinch song?", "and on diffusion?" searched
    "zebrafinch song diffusion" and answered one item (until 2026-12-06): it asks about diffusion now, and
    "only the ones on images" narrows that to the diffusion items about images."""
    store.add_items(SONGBIRDS)
    first = bot.mention("what has apple published on zebrafinch song?")
    bot.drain()
    bot.mention("and on diffusion?", thread_ts=first["ts"])
    bot.drain()
    bot.mention("only the ones on images", thread_ts=first["ts"])
    bot.drain()
    song, diffusion, images = (mrkdwn(r) for r in bot.answers("C0TALK"))
    assert links(song) == ["zebrafinch"]
    assert "Searched for “diffusion”, in place of this thread's topic." in diffusion
    assert sorted(links(diffusion)) == ["audio-diffusion", "diffusion"]
    assert "Searched for “diffusion images”, keeping this thread's topic." in images
    assert links(images) == ["diffusion"]


def test_a_follow_up_builds_on_its_own_thread_not_the_channels_last_question(bot: Bot, store: Store) -> None:
    """Two threads in one channel: a follow-up in the first builds on the first thread's question, though the
    other thread's was answered after it."""
    store.add_items(SONGBIRDS)
    songs = bot.mention("what has apple published on zebrafinch song?")
    bot.drain()
    speech = bot.mention("anything on speech recognition?")
    bot.drain()
    bot.mention("only the ones about tutors", thread_ts=songs["ts"])
    bot.drain()
    replies = bot.answers("C0TALK")
    assert [r["thread_ts"] for r in replies] == [songs["ts"], speech["ts"], songs["ts"]]
    body = mrkdwn(replies[2])
    assert "Searched for “zebrafinch song tutors”, keeping this thread's topic." in body
    assert links(body) == ["zebrafinch"]


def test_a_retried_event_gets_no_second_reply(bot: Bot) -> None:
    event = mention_event("diffusion", "C0RETRY", bot.next_ts())
    assert bot.send(event, event_id="Ev0RETRY") == 200
    bot.drain()
    for attempt in ("1", "2"):
        assert bot.send(event, event_id="Ev0RETRY", headers={"X-Slack-Retry-Num": attempt,
                                                             "X-Slack-Retry-Reason": "http_timeout"}) == 200
    bot.drain()
    assert len(bot.answers("C0RETRY")) == 1


def test_a_retry_arriving_while_the_answer_is_being_written_is_ignored(bot: Bot) -> None:
    bot.slack.fault("chat.postMessage", channel="C0SLOW", delay=1.0)  # the first answer is slow to post
    event = mention_event("diffusion", "C0SLOW", bot.next_ts())
    assert bot.send(event, event_id="Ev0SLOW") == 200
    assert bot.send(event, event_id="Ev0SLOW", headers={"X-Slack-Retry-Num": "1"}) == 200
    bot.drain()
    assert len(bot.answers("C0SLOW")) == 1


def test_the_bots_own_messages_and_other_bots_are_never_answered(bot: Bot) -> None:
    ts = bot.next_ts()
    own = {"type": "message", "channel_type": "im", "channel": "D0SELF", "user": BOT_USER, "bot_id": BOT_ID,
           "text": "speech recognition", "ts": ts, "event_ts": ts}
    other = {"type": "app_mention", "channel": "C0BOTS", "user": "U0OTHERBOT", "bot_id": "B0OTHER",
             "text": f"<@{BOT_USER}> speech recognition", "ts": bot.next_ts(), "event_ts": "1.1"}
    subtype = {"type": "message", "channel_type": "im", "channel": "D0SELF", "subtype": "bot_message",
               "text": "speech recognition", "ts": bot.next_ts(), "event_ts": "1.1"}
    edited = {"type": "message", "channel_type": "im", "channel": "D0SELF", "subtype": "message_changed",
              "message": {"text": "speech", "user": "U0ALICE", "ts": ts}, "ts": bot.next_ts(),
              "event_ts": "1.1"}
    for event in (own, other, subtype, edited):
        assert bot.send(event) == 200
    bot.drain()
    assert bot.slack.posts("D0SELF") == [] and bot.slack.posts("C0BOTS") == []


def test_a_mention_with_no_question_gets_one_line_of_help(bot: Bot) -> None:
    asked = bot.mention("")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    assert reply["thread_ts"] == asked["ts"] and reply["text"] == HELP and "\n" not in HELP


def test_a_settings_command_in_a_mention_points_to_the_slash_command(bot: Bot, store: Store) -> None:
    bot.mention("subscribe speech")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    assert "`/mlresearch subscribe …`" in reply["text"]
    assert store.get_subscription(TEAM, "C0TALK") is None


def test_a_flood_of_mentions_in_one_thread_is_answered_in_order(bot: Bot) -> None:
    first = bot.mention("speech recognition", channel="C0FLOOD")
    asked = [first] + [bot.mention(text, channel="C0FLOOD", thread_ts=first["ts"])
                       for text in ("and on-device?", "diffusion", "what about privacy?", "latest 2",
                                    "summarize diffusion", "and this year?")]
    bot.drain()
    replies = bot.answers("C0FLOOD")
    assert [r["metadata"]["event_payload"]["message_ts"] for r in replies] == [a["ts"] for a in asked]
    assert all(r["thread_ts"] == first["ts"] for r in replies)
    assert "Summarized “diffusion”" in mrkdwn(replies[5])
    assert f"Summarized “diffusion” published since {TODAY.year}-01-01" in mrkdwn(replies[6])


def test_a_long_question_is_cut_not_refused(bot: Bot) -> None:
    bot.mention("speech " + "recognition " * 2000)
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    body = mrkdwn(reply)
    assert "your question was long" in body and "speech-cloud" in body


def test_feed_text_in_an_answer_is_inert(bot: Bot, store: Store) -> None:
    title = "<!channel> Speech <@U123> <https://evil.example|click>"
    store.add_items([make("evil", title, "speech", THIS_YEAR)])
    bot.mention("&lt;!channel&gt; speech")
    bot.drain()
    (reply,) = bot.answers("C0TALK")
    body, text = mrkdwn(reply), reply["text"]
    for raw in ("<!channel>", "<@U123>", "<https://evil.example"):
        assert raw not in body and raw not in text


# --- direct messages and the assistant pane ----------------------------------------------------------------


def test_a_direct_message_is_answered_in_its_thread(bot: Bot) -> None:
    ts = bot.next_ts()
    event = {"type": "message", "channel_type": "im", "channel": "D0ALICE", "user": "U0ALICE",
             "text": "latest 2", "ts": ts, "event_ts": ts}
    assert bot.send(event) == 200
    bot.drain()
    (reply,) = bot.answers("D0ALICE")
    assert reply["thread_ts"] == ts
    assert "The 2 newest items" in mrkdwn(reply)


def test_the_assistant_pane_suggests_prompts_then_answers_with_status_and_title(bot: Bot) -> None:
    thread_ts = bot.next_ts()
    started = {"type": "assistant_thread_started", "event_ts": thread_ts,
               "assistant_thread": {"user_id": "U0ALICE", "context": {}, "channel_id": "D0PANE",
                                    "thread_ts": thread_ts}}
    assert bot.send(started) == 200
    bot.drain()
    (prompts,) = bot.slack.calls_to("assistant.threads.setSuggestedPrompts")
    assert prompts.params["channel_id"] == "D0PANE" and prompts.params["thread_ts"] == thread_ts
    assert prompts.params["prompts"] and all(p["title"] and p["message"] for p in prompts.params["prompts"])

    ts = bot.next_ts()
    asked = {"type": "message", "channel_type": "im", "channel": "D0PANE", "user": "U0ALICE",
             "text": "summarize diffusion models", "ts": ts, "thread_ts": thread_ts, "event_ts": ts}
    assert bot.send(asked) == 200
    bot.drain()
    (status,) = bot.slack.calls_to("assistant.threads.setStatus")
    (title,) = bot.slack.calls_to("assistant.threads.setTitle")
    (reply,) = bot.answers("D0PANE")
    assert status.params["channel_id"] == "D0PANE" and status.params["thread_ts"] == thread_ts
    assert status.params["status"]
    assert title.params["title"] == "summarize diffusion models"
    assert reply["thread_ts"] == thread_ts and "Summarized “diffusion models”" in mrkdwn(reply)
    assert status.at < [c for c in bot.slack.calls_to("chat.postMessage") if c.channel == "D0PANE"][0].at


# --- the claim, on both stores -----------------------------------------------------------------------------


def question(ts: str = "1700000001.000100", thread_ts: str | None = None) -> Question:
    return Question(TEAM, "C0UNIT", "U0ALICE", "diffusion", ts, thread_ts or ts, "Ev1")


def test_a_claim_is_won_once_and_a_second_process_stays_silent(database_url: str) -> None:
    first, second = open_store(database_url), open_store(database_url)
    first.migrate()
    assert claim(question(), first) == "claimed"
    assert claim(question(), second) == "busy"  # another process, while the first answers
    first.settle_question(TEAM, "C0UNIT", question().ts, state="answered", understood=None)
    assert claim(question(), second) == "answered"


def test_a_claim_left_by_a_dead_process_is_taken_over_once(store: Store) -> None:
    q = question()
    assert store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1") == "claimed"
    taken = store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1", stale_after=-1)
    assert taken == "reclaimed"
    assert store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1") == "busy"


def test_a_taken_over_claim_is_not_answered_again_when_its_answer_reached_slack(
    store: Store, slack_api: FakeSlack
) -> None:
    settings = Settings(slack_bot_token=TOKEN, slack_api_url=slack_api.url)
    client = web_client(settings)
    services = make_services(settings, store, client)
    store.add_items(ITEMS)
    q = question()
    slack_api.add_message("C0UNIT", "diffusion", ts=q.ts, user="U0ALICE")
    assert claim(q, store) == "claimed"
    # the process that claimed it posted the answer, then died before settling the claim
    client.chat_postMessage(channel=q.channel_id, thread_ts=q.ts, text="the answer",
                            metadata={"event_type": EVENT_TYPE, "event_payload": {"message_ts": q.ts}})
    taken = store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, "Ev1", stale_after=-1)
    assert answer(q, services, client, taken) == "already_posted"
    assert len(slack_api.posts("C0UNIT")) == 1
    assert claim(q, store) == "answered"
    other = question("1700000002.000100")  # taken over with no answer in its thread: answered now
    slack_api.add_message("C0UNIT", "diffusion", ts=other.ts, user="U0ALICE")
    store.claim_question(other.team_id, other.channel_id, other.ts, other.thread_ts, "Ev2")
    taken = store.claim_question(other.team_id, other.channel_id, other.ts, other.thread_ts, "Ev2",
                                 stale_after=-1)
    assert answer(other, services, client, taken) == "answered"
    assert len(slack_api.posts("C0UNIT")) == 2


def test_an_answer_that_cannot_be_built_is_one_line_for_the_person(
    store: Store, slack_api: FakeSlack
) -> None:
    settings = Settings(slack_bot_token=TOKEN, slack_api_url=slack_api.url)
    client = web_client(settings)

    def broken_clock() -> datetime:
        raise RuntimeError("no time")

    q = question()
    outcome = answer(q, make_services(settings, store, client), client, claim(q, store), now=broken_clock)
    assert outcome == "failed"
    (reply,) = slack_api.posts("C0UNIT")
    assert reply["text"] == SORRY and reply["thread_ts"] == q.ts and "Traceback" not in reply["text"]
    assert claim(q, store) == "answered"  # settled: not tried again


def test_the_thread_remembers_the_last_question_answered_before_a_message(store: Store) -> None:
    asked = ((1, '{"action": "search", "words": ["a"]}'), (3, '{"action": "search", "words": ["c"]}'))
    for n, understood in asked:
        ts = f"170000000{n}.000100"
        store.claim_question(TEAM, "C0UNIT", ts, "1700000001.000100", f"Ev{n}")
        store.settle_question(TEAM, "C0UNIT", ts, state="answered", understood=understood)
    assert store.previous_question(TEAM, "C0UNIT", "1700000001.000100", "1700000002.000100") == \
        '{"action": "search", "words": ["a"]}'
    assert store.previous_question(TEAM, "C0UNIT", "1700000001.000100", "1700000009.000100") == \
        '{"action": "search", "words": ["c"]}'
    assert store.previous_question(TEAM, "C0OTHER", "1700000001.000100", "1700000009.000100") is None
    # another thread of the same channel, answered later: each thread keeps its own question
    store.claim_question(TEAM, "C0UNIT", "1700000004.000100", "1700000004.000100", "Ev4")
    store.settle_question(TEAM, "C0UNIT", "1700000004.000100", state="answered",
                          understood='{"action": "search", "words": ["d"]}')
    assert store.previous_question(TEAM, "C0UNIT", "1700000001.000100", "1700000009.000100") == \
        '{"action": "search", "words": ["c"]}'
    assert store.previous_question(TEAM, "C0UNIT", "1700000004.000100", "1700000009.000100") == \
        '{"action": "search", "words": ["d"]}'
    store.claim_question(TEAM, "C0UNIT", "1700000005.000100", "1700000001.000100", "Ev5")
    assert store.questions_before(TEAM, "C0UNIT", "1700000001.000100", "1700000006.000100") == 1
    assert store.questions_before(TEAM, "C0UNIT", "1700000001.000100", "1700000005.000100") == 0
