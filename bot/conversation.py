"""Answering a question asked in Slack (a mention, a direct message, the assistant pane) in its thread.

    question = question_from_event(body, bot_user_id)  # None: nothing to answer (a bot's message, an edit)
    claimed = claim(question, store)                   # in the ack: Slack's retries find the claim
    answer(question, services, client, claimed)        # later (a lazy listener): in its thread, once

The answer goes through the store before Slack (`claim`, in the request that acks the event, so the claims of
one thread are in the order Slack sent them): Slack's retries of the event
(`X-Slack-Retry-Num`, same event id and message) and a second process find the claim and stay silent. A claim
left by a process that died is taken over after `STALE_AFTER` seconds, and then the thread is read first
(`conversations.replies`, the answer's metadata names the question's ts) so an answer that reached Slack is
not posted again. Questions in one thread are answered in order: an answer waits (up to ORDER_WAIT seconds)
while an earlier question of the thread is still being answered, and a follow-up builds on the question
before it as understood then (kept in the store with the claim: no history scope or extra call needed, and it
is the understood query, not a re-reading of old text).

The reply is what `/mlresearch` would answer (`commands.converse`: the same handlers), headed once by what
was searched for so a person can correct it (`understood_reply`, which the shell renders in its own words),
posted with `parse: none`, no unfurls, every text escaped and cut, and ending with feedback buttons. With a
model endpoint (`SUMMARY_API_*`), a search or summary that finds items is answered instead by a paragraph the
model writes from them, streamed as it is written (`bot.answers`). "What's new here?" takes its topic from the
channel asked in or looked at (`in_context`).
The items an answer showed are kept with its claim, for the votes on it (`bot.store.agent`), and carry their
paper cards (`bot.entities`: Work Objects, in the message's metadata beside the answer's event).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec.structs
from msgspec import Struct
from msgspec.structs import replace
from slack_sdk.errors import SlackApiError

from bot import answers, commands, entities, views
from bot.ask import Understood, understand, with_topic
from bot.blocks import cut
from bot.commands import Invocation, Services
from bot.search.match import TOPIC_PREFIX
from bot.sessions import Session, Stops
from bot.store import Store
from bot.store.conversations import Claim

log = logging.getLogger("bot.conversation")

EVENT_TYPE = "mlresearch_answer"
ORDER_WAIT = 30.0  # seconds an answer waits for the thread's earlier questions
MAX_BLOCKS = 50
TEXT_LIMIT = 3000
HELP = (
    "Ask me about Apple's machine learning research in plain words, e.g. “what's new in speech recognition "
    "this year?”, “summarize diffusion models” or “latest 5”; reply in the thread to follow up (“and "
    "on diffusion?”, “only the on-device ones”). Everything else: `/mlresearch help`."
)
PROMPTS = (
    ("What's new?", "What's new in Apple's machine learning research?"),
    ("Speech this year", "What has Apple published on speech recognition this year?"),
    ("Summarize a topic", "Summarize Apple's research on diffusion models"),
    ("What's new here?", "What's new here?"),  # the channel in view (the Messages tab's context)
)
GREETING = (
    "Hi! I follow Apple's machine learning research. Ask me in plain words (“what's new in speech "
    "recognition this year?”, “summarize diffusion models”), each question in its own thread; reply there "
    "to follow up. Looking at a channel? Ask “what's new here?” and I'll use the topics it subscribes to."
)
PROMPTS_TITLE = "Ask about Apple's machine learning research"
WORKING = "is searching the archive…"
LOADING = ("Searching the archive…", "Reading the abstracts…", "Writing the answer…")  # Slack rotates them
STOPPED_EARLY = "Stopped: you pressed stop before the answer was ready. Ask again any time."
CHANNEL_ID = re.compile(r"[CG][A-Z0-9]{2,30}")
ANY_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,30}")  # a channel, a private channel or a DM
SORRY = "Sorry, I couldn't answer that just now; please ask again in a minute."


class Question(Struct, frozen=True):
    """A message to answer, and where: `thread_ts` is its thread, or the message itself."""

    team_id: str
    channel_id: str
    user_id: str
    text: str
    ts: str
    thread_ts: str
    event_id: str


def question_from_event(body: dict[str, Any], bot_user_id: str | None = None,
                        team_id: str | None = None) -> Question | None:
    """The question in an `app_mention` or `message` event, or None when there is none to answer: a message
    from a bot (this one or another), an edit, a deletion or any other subtype, or one without a workspace,
    channel or timestamp. `team_id` is the workspace the request was authorized for (Bolt's
    `context.team_id`); without it, the body's."""
    event = body.get("event")
    if not isinstance(event, dict):
        return None
    if event.get("bot_id") or event.get("bot_profile") or event.get("subtype") not in (None, "file_share"):
        return None
    user = str(event.get("user") or "")
    if not user or (bot_user_id and user == bot_user_id):
        return None
    team = str(body.get("team_id") or event.get("team") or "") if team_id is None else team_id
    channel, ts = str(event.get("channel") or ""), str(event.get("ts") or "")
    if not (team and channel and ts):
        return None
    text = event.get("text")
    return Question(team, channel, user, text if isinstance(text, str) else "", ts,
                    str(event.get("thread_ts") or ts), str(body.get("event_id") or "")[:100])


def claim(question: Question, store: Store) -> Claim:
    """Claim the answer to `question` (see `Store.claim_question`); only "claimed" and "reclaimed" answer."""
    q = question
    claimed = store.claim_question(q.team_id, q.channel_id, q.ts, q.thread_ts, q.event_id)
    if claimed in ("answered", "busy"):
        reason = "duplicate" if claimed == "answered" else "busy"
        log.info("event=question_skipped reason=%s team=%s channel=%s ts=%s", reason, q.team_id, q.channel_id,
                 q.ts)
    return claimed


def answer(
    question: Question,
    services: Services,
    client: Any,
    claimed: str,
    *,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    status: Callable[..., Any] | None = None,
    title: Callable[[str], Any] | None = None,
    say_stream: Callable[..., Any] | None = None,
    stops: Stops | None = None,
    order_wait: float = ORDER_WAIT,
) -> str:
    """Answer `question` in its thread if `claimed` (what `claim` said) lets it; returns what happened (for
    the log and tests): "answered", "stopped", "skipped", "already_posted", "failed". The question is an agent
    session (`bot.sessions`): processing at once (titled by a thread's first question), active when done.
    `status`, `title` and `say_stream` are Bolt's (the loading messages shown while working, a legacy
    assistant thread's title, a stream into the request's thread); `stops` is where Slack's stop button finds
    this answer (one is made when none is given)."""
    if claimed not in ("claimed", "reclaimed"):
        return "skipped"
    q = question
    session = Session(client, q.team_id, q.channel_id, q.thread_ts, q.user_id)
    first = _first_in_thread(q, services.store)
    session.processing(_title(q) if first else None)
    if status is not None:
        _quietly(lambda: status(WORKING, loading_messages=list(LOADING)))
    if title is not None and first:
        _quietly(lambda: title(_title(q)))
    with (stops or Stops()).watch(services.store, q.team_id, q.channel_id, q.thread_ts, q.ts) as stop:
        try:
            return _answer(q, services, client, claimed, now, say_stream, stop, order_wait)
        finally:
            session.active()


def _answer(q: Question, services: Services, client: Any, claimed: str, now: Callable[[], datetime],
            say_stream: Callable[..., Any] | None, stop: threading.Event, order_wait: float) -> str:
    store = services.store
    where = f"team={q.team_id} channel={q.channel_id} ts={q.ts}"
    metadata = {"event_type": EVENT_TYPE, "event_payload": {"message_ts": q.ts}}  # found by _posted_before
    if claimed == "reclaimed" and _posted_before(client, q):
        store.settle_question(q.team_id, q.channel_id, q.ts, state="answered")
        log.info("event=question_skipped reason=already_posted %s", where)
        return "already_posted"
    # a streamed answer whose process died before it finished: that message gets the answer, no second one
    unfinished = store.started_reply(q.team_id, q.channel_id, q.ts) if claimed == "reclaimed" else None
    try:
        _wait_for_earlier(services, q, order_wait)
        previous = None
        if q.thread_ts != q.ts:
            stored = store.previous_question(q.team_id, q.channel_id, q.thread_ts, q.ts)
            previous = Understood.from_json(stored)
        understood = in_context(understand(q.text, previous, now=now().date()), q, store)
        shown = answers.shown_items(understood, services)
        items = shown.items
        written = bool(items) and understood.action in ("search", "summarize") and \
            services.summarizer is not None and services.summarizer.abstractive and unfinished is None
        if stop.is_set():  # stopped while the archive was searched: nothing more is done
            text, blocks, written = STOPPED_EARLY, [views.context(STOPPED_EARLY)], False
        elif not written:
            text, blocks = reply_for(understood, q, services)
    except Exception:  # noqa: BLE001 - one line for the person, the trace in the log
        log.exception("event=question_failed stage=reply %s", where)
        try:
            client.chat_postMessage(channel=q.channel_id, thread_ts=q.thread_ts, text=SORRY, parse="none",
                                    metadata=metadata)
            store.settle_question(q.team_id, q.channel_id, q.ts, state="failed")
        except Exception as exc:  # noqa: BLE001 - Slack or the store is down too: a late retry may answer
            log.warning("event=question_sorry_failed error=%s %s", type(exc).__name__, where)
        return "failed"
    try:
        if written:
            extractive = msgspec.structs.replace(services, summarizer=None)
            done = answers.stream_written(
                client, q, understood, shown, services, metadata,
                lambda: reply_for(understood, q, extractive),
                started=lambda ts: store.note_reply(q.team_id, q.channel_id, q.ts, ts),
                say_stream=say_stream, stop=stop)
            reply_ts, items, how = done.ts, list(done.items), done.how
        elif unfinished is not None:
            whole = [*blocks[: MAX_BLOCKS - 1], answers.feedback_block()]
            client.chat_update(channel=q.channel_id, ts=unfinished, text=text, blocks=whole,
                               metadata=metadata)
            reply_ts, how = unfinished, "finished"
        else:
            posted = client.chat_postMessage(
                channel=q.channel_id, thread_ts=q.thread_ts, text=text,
                blocks=[*blocks[: MAX_BLOCKS - 1], answers.feedback_block()], parse="none",
                unfurl_links=False, unfurl_media=False, metadata=entities.with_papers(metadata, items),
            )
            reply_ts, how = str(posted.get("ts") or "") or None, "posted"
    except SlackApiError as exc:
        error = str(exc.response.get("error") or "unknown_error") if exc.response is not None else "unknown"
        store.settle_question(q.team_id, q.channel_id, q.ts, state="failed", understood=understood.as_json())
        log.warning("event=question_failed stage=post error=%s %s", error[:60], where)
        return "failed"
    except Exception as exc:  # noqa: BLE001 - the outcome is unknown: the claim stays, a late retry checks
        log.warning("event=question_failed stage=post error=%s %s", type(exc).__name__, where)
        return "failed"
    store.settle_question(q.team_id, q.channel_id, q.ts, state="answered", understood=understood.as_json(),
                          reply_ts=reply_ts, shown=json.dumps(answers.shown_json(items)))
    outcome = "stopped" if stop.is_set() else "answered"
    log.info("event=question_%s action=%s followup=%s how=%s %s", outcome, understood.action,
             understood.followup, how, where)
    return outcome


def busy(question: Question, services: Services, client: Any, claimed: str, line: str) -> str:
    """Say `line` (the model is busy: try again in a minute) in the question's thread instead of answering,
    and settle the claim as failed; returns what happened, as `answer` does."""
    q = question
    if claimed not in ("claimed", "reclaimed"):
        return "skipped"
    where = f"team={q.team_id} channel={q.channel_id} ts={q.ts}"
    metadata = {"event_type": EVENT_TYPE, "event_payload": {"message_ts": q.ts}}
    try:
        client.chat_postMessage(channel=q.channel_id, thread_ts=q.thread_ts, text=line, parse="none",
                                metadata=metadata)
        services.store.settle_question(q.team_id, q.channel_id, q.ts, state="failed")
    except Exception as exc:  # noqa: BLE001 - Slack or the store is down too: a late retry may answer
        log.warning("event=question_busy_failed error=%s %s", type(exc).__name__, where)
        return "failed"
    log.info("event=question_busy %s", where)
    return "busy"


THREAD_HINT = (" Reply in this thread to narrow it down (“only the on-device ones”) or ask about something "
               "else (“and on vision?”).")


def reply_for(understood: Understood, q: Question, services: Services) -> tuple[str, list[dict[str, Any]]]:
    """(text, blocks) answering `understood` in Slack: `understood_reply` rendered, its header saying how to
    follow up in the thread."""
    said, reply = understood_reply(understood, q, services)
    if reply is None:
        return HELP, [views.section(HELP)]
    if not said:
        return reply.text, reply.blocks
    blocks = [views.context(said + THREAD_HINT), *reply.blocks][:MAX_BLOCKS]
    return cut(f"{said} {reply.text}", TEXT_LIMIT), blocks


def understood_reply(understood: Understood, q: Question, services: Services,
                     asked_before: str = "this thread's") -> tuple[str, commands.Reply | None]:
    """What was understood (escaped mrkdwn, "" when there is nothing to say) and the command's reply to it,
    for any surface to render (Slack: `reply_for`; the shell its own way). None for help, which each surface
    words its own way. One header: a `latest` reply's count line is said as what was understood."""
    if understood.slash:
        word = understood.slash
        line = (f"`{word}` is a job for the slash command: type `/mlresearch {word} …` here "
                "(`/mlresearch help` lists what it takes).")
        return "", commands.Reply(*views.one_line(line))
    if understood.action == "help":
        return "", None
    inv = Invocation(text=understood.command(), team_id=q.team_id, channel_id=q.channel_id, user_id=q.user_id,
                     shown=understood.count if understood.action == "search" else None)
    reply = commands.converse(inv, services)
    head = None
    first = reply.blocks[0] if reply.blocks else {}
    if understood.action == "latest" and first.get("type") == "context":  # "The 5 newest items"
        head = str(first["elements"][0].get("text") or "") or None
        reply = replace(reply, blocks=reply.blocks[1:]) if head else reply
    # "Searched for “speech recognition” (you typed …)"
    return understood.describe(reply.searched_for, head=head, asked_before=asked_before), reply


def in_context(understood: Understood, q: Question, store: Store) -> Understood:
    """ "What's new here?": the topic of the channel asked in (a mention) or looked at (the Messages tab,
    `app_context_changed`), from that channel's subscription keywords and topics; the answer says so."""
    if not understood.here:
        return understood
    channel = q.channel_id if q.channel_id[:1] in ("C", "G") else store.viewing(q.team_id, q.user_id)
    if not channel or not CHANNEL_ID.fullmatch(channel):
        return replace(understood, note="I can't tell which channel you're looking at, so this is the whole "
                                        "archive; open the channel beside this conversation and ask again")
    sub = store.get_subscription(q.team_id, channel)
    if sub is None or not sub.keywords:
        return replace(understood,
                       note=f"<#{channel}> has no subscription keywords, so this is the whole archive")
    words: list[str] = []
    for keyword in sub.keywords:
        if keyword.startswith(TOPIC_PREFIX):
            words.extend(w for w in keyword[len(TOPIC_PREFIX):].split() if w not in words)
        elif keyword not in words:
            words.append(f'"{keyword}"' if " " in keyword else keyword)
    return with_topic(understood, words, f"the keywords and topics <#{channel}> subscribes to")


def prompts() -> list[dict[str, str]]:
    """The assistant pane's suggested prompts."""
    return [{"title": title, "message": message} for title, message in PROMPTS]


def _wait_for_earlier(services: Services, q: Question, limit: float) -> None:
    deadline = time.monotonic() + limit
    while services.store.questions_before(q.team_id, q.channel_id, q.thread_ts, q.ts):
        if time.monotonic() >= deadline:
            log.warning("event=question_order_wait_expired team=%s channel=%s ts=%s", q.team_id, q.channel_id,
                        q.ts)
            return
        time.sleep(0.05)


def _posted_before(client: Any, q: Question) -> bool:
    """Whether the thread already holds this question's answer (found by its metadata)."""
    cursor = None
    for _ in range(10):
        try:
            page = client.conversations_replies(channel=q.channel_id, ts=q.thread_ts, oldest=q.ts, limit=200,
                                                include_all_metadata=True, cursor=cursor)
        except SlackApiError:
            return False
        for message in page.get("messages") or []:
            meta = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == EVENT_TYPE and payload.get("message_ts") == q.ts:
                return True
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not cursor:
            return False
    return False


def _first_in_thread(q: Question, store: Store) -> bool:
    """Whether `q` is its thread's first question (the thread is the message itself, or no question of it was
    answered before): it names the session."""
    if q.thread_ts == q.ts:
        return True
    try:
        return store.previous_question(q.team_id, q.channel_id, q.thread_ts, q.ts) is None
    except Exception as exc:  # noqa: BLE001 - cosmetic (the title): the answer says what went wrong, if anything
        log.warning("event=thread_unknown error=%s", type(exc).__name__)
        return False


def _title(q: Question) -> str:
    return cut(" ".join(q.text.split()) or "Question", 120)


def _quietly(call: Callable[[], Any]) -> None:
    """A cosmetic call (status, title): a failure is logged, never in the way of the answer."""
    try:
        call()
    except Exception as exc:  # noqa: BLE001
        log.warning("event=assistant_call_failed error=%s", type(exc).__name__)
