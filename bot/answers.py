"""What an answer in a thread is made of, and how a written answer is streamed into Slack.

    shown_items(understood, services)        # the items the answer lists (the search API's, as it is), and
                                             # the topic as searched when a misspelt word was put right
    feedback_block()                         # 👍/👎 (`context_actions` with `feedback_buttons`), last
    stream_written(client, q, understood, shown, services, metadata, fallback)
        # with a model endpoint: the header and the progress at once (chat.startStream: task chunks, the
        # archive searched with the papers found as its sources, the answer being written), each checked
        # sentence as the model writes it (chat.appendStream), then the cited items, the tasks complete and
        # the feedback buttons (chat.stopStream); each cited item has a Cite button

Streaming that Slack refuses (startStream fails: an old workspace, a missing scope) is not retried: the
finished answer is posted once (chat.postMessage) when the model is done. A stream that breaks after it
started is finished by chat.update of the streamed message (or, when that fails too, posted once). A model
stream that fails keeps the sentences already written (each checked) and says the answer was cut short; with
none written the answer is the extractive one (`fallback`), as without a model. A stop (Slack's stop button,
`bot.sessions`) closes the model request at once and ends the stream the same way, with a line saying it was
stopped. An answer posted whole carries the cited papers' cards (`bot.entities.with_papers`) in its metadata;
a streamed one carries the event metadata alone, the only metadata Slack documents for chat.stopStream and
chat.update.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from msgspec import Struct
from slack_sdk.errors import SlackApiError
from slack_sdk.models.blocks import (
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
)
from slack_sdk.models.blocks.block_elements import UrlSourceElement
from slack_sdk.models.messages.chunk import TaskUpdateChunk

from bot import entities, views
from bot.ask import Understood, clean
from bot.blocks import ACTION_VALUE_LIMIT, CITE_ACTION_ID, author_menu, cut, escape, links_line, title_link
from bot.commands import Services
from bot.commands.archive import LATEST_DEFAULT, LATEST_MAX, SEARCH_RESULTS, shown_count
from bot.errors import SearchError, SummaryError, SummaryStopped
from bot.models import Item, shown_day
from bot.search.query import parse_query
from bot.summarize import retrieve
from bot.written import Sentence, written_sentences

log = logging.getLogger("bot.answers")

FEEDBACK_ACTION_ID = "answer_feedback"
CUT_SHORT = "The written answer was cut short; the items above are what it drew on."
STOPPED = "Stopped: you pressed stop, so the answer ends here; the items above are what it drew on so far."
SOURCES = 5  # papers named as the search task's sources
STREAM_BUFFER = 1  # characters buffered before a stream call: each append is a whole checked sentence


class Streamed(Struct, frozen=True):
    """How a written answer went: the reply's ts (None: nothing reached Slack), "streamed" or "posted",
    and the items it cited (or listed)."""

    ts: str | None
    how: str
    items: tuple[Item, ...]


def feedback_block() -> dict[str, Any]:
    """The feedback buttons every answer ends with (their clicks: bot.listeners.buttons, bot.store.agent)."""
    return ContextActionsBlock(elements=[FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION_ID,
        positive_button=FeedbackButtonObject(text="Good answer", value="up",
                                             accessibility_label="This answer was useful"),
        negative_button=FeedbackButtonObject(text="Bad answer", value="down",
                                             accessibility_label="This answer missed"),
    )]).to_dict()


class Shown(NamedTuple):
    items: list[Item]  # what the answer lists
    searched_for: str | None = None  # the topic as searched, when a misspelt word was searched as typed right
    note: str | None = None  # what the search said beside its results (Found.note): an open quote, say


def shown_items(understood: Understood, services: Services) -> Shown:
    """The items an answer to `understood` lists: the search's results (nothing filtered here), the newest
    items, or those a summary draws on."""
    store, index = services.store, services.index
    try:
        if understood.action == "latest":
            return Shown(store.latest(min(understood.count or LATEST_DEFAULT, LATEST_MAX)))
        if understood.action == "search":
            found = index.search(parse_query(understood.query), SEARCH_RESULTS + 1, store)
            shown = found.hits[: shown_count(understood.count)]
            return Shown([hit.item for hit in shown], found.searched_for, found.note)
        if understood.action == "summarize":
            retrieved = retrieve(index, understood.query)
            return Shown(retrieved.items, retrieved.searched_for, retrieved.note)
    except SearchError:
        return Shown([])
    return Shown([])


def shown_json(items: list[Item] | tuple[Item, ...]) -> list[dict[str, str]]:
    return [{"id": item.id, "title": item.title, "link": item.link} for item in items]


def stream_written(
    client: Any,
    question: Any,  # a bot.conversation.Question
    understood: Understood,
    shown: Shown,
    services: Services,
    metadata: dict[str, Any],
    fallback: Callable[[], tuple[str, list[dict[str, Any]]]],
    started: Callable[[str], None] | None = None,
    *,
    say_stream: Callable[..., Any] | None = None,
    stop: threading.Event | None = None,
) -> Streamed:
    """Write the answer with the model and stream it into the question's thread (see the module
    docstring). `say_stream` is Bolt's (a ChatStream for the request's thread); without it, the client's.
    When `stop` is set (Slack's stop button), the model request is closed and the stream ends with what was
    checked so far and a line saying it was stopped. Raises SlackApiError only when the finished answer could
    not be posted either."""
    q = question
    assert services.summarizer is not None
    items = shown.items
    said = understood.describe(shown.searched_for)
    if say_stream is not None:
        stream = say_stream(buffer_size=STREAM_BUFFER)
    else:
        stream = client.chat_stream(channel=q.channel_id, thread_ts=q.thread_ts, recipient_team_id=q.team_id,
                                    recipient_user_id=q.user_id, buffer_size=STREAM_BUFFER)
    streaming = _send(lambda: stream.append(markdown_text=f"_{said}_\n\n", chunks=progress(items, "writing")),
                      "start", q)
    if streaming and stream.ts and started is not None:  # recorded at once: a takeover finishes this message
        started(str(stream.ts))
    sentences: list[Sentence] = []
    failed = stopped = False
    asked = f"{clean(q.text)[:500]} (searched for: {understood.topic or 'the newest items'})"
    try:
        for sentence in written_sentences(services.summarizer, asked, items, stop=stop):
            sentences.append(sentence)
            if streaming:
                streaming = _send(partial(stream.append, markdown_text=sentence.markdown() + " "), "append",
                                  q)
    except SummaryStopped:
        stopped = True
        log.info("event=written_answer_stopped sentences=%d team=%s channel=%s ts=%s", len(sentences),
                 q.team_id, q.channel_id, q.ts)
    except SummaryError as exc:
        failed = True
        log.warning("event=written_answer_failed reason=%r team=%s channel=%s ts=%s", str(exc)[:200],
                    q.team_id, q.channel_id, q.ts)
    ending = [views.context(STOPPED)] if stopped else [views.context(CUT_SHORT)] if failed else []
    if sentences:
        cited = _cited(sentences, items)
        listed = [views.section(_cited_list(cited, items))]
        if cited:
            listed.append(_cite_buttons(cited, items))
        menu = author_menu([author for item in cited for author in item.authors])
        if menu:  # the cited papers' authors, each leading to their other items
            listed.append({"elements": [menu], "type": "actions"})
        if shown.note:  # as the search's own reply says it
            listed.append(views.context(escape(shown.note)))
        listed += ending
        paragraph = " ".join(s.markdown() for s in sentences)
        text = cut(f"{said} {paragraph}", 3000)
        whole = [views.context(said), views.section(paragraph), *listed, feedback_block()]
        tail = [*listed, feedback_block()]
    else:  # nothing written that the items support: the answer without the model
        cited = list(items)
        text, blocks = fallback()
        extra = [views.context(STOPPED)] if stopped else []
        whole = [*blocks, *extra, feedback_block()]
        tail = [*blocks[1:], *extra, feedback_block()]  # the header (blocks[0]) was streamed already
    done = progress(cited, "stopped" if stopped else "failed" if failed and not sentences else "done")
    if streaming and _send(lambda: stream.stop(blocks=tail, metadata=metadata, chunks=done), "stop", q):
        return Streamed(stream.ts, "streamed", tuple(cited))
    if stream.ts:  # the stream started, then broke: its message gets the finished answer
        try:
            client.chat_update(channel=q.channel_id, ts=stream.ts, text=text, blocks=whole, metadata=metadata)
            return Streamed(stream.ts, "updated", tuple(cited))
        except SlackApiError as exc:
            log.warning("event=stream_update_failed error=%s", _error(exc))
    posted = client.chat_postMessage(channel=q.channel_id, thread_ts=q.thread_ts, text=text, blocks=whole,
                                     parse="none", unfurl_links=False, unfurl_media=False,
                                     metadata=entities.with_papers(metadata, cited))
    return Streamed(str(posted.get("ts") or "") or None, "posted", tuple(cited))


def progress(items: list[Item], stage: str) -> list[TaskUpdateChunk]:
    """The answer's progress as Slack's task chunks: the archive searched (the papers found are its sources),
    then the answer written ("writing", "done", "stopped" or "failed")."""
    found = f"{len(items)} {'paper' if len(items) == 1 else 'papers'} found"
    sources = [UrlSourceElement(url=item.link, text=cut(item.title, 150)) for item in items[:SOURCES]]
    write_status = {"writing": "in_progress", "done": "complete", "stopped": "complete",
                    "failed": "error"}[stage]
    write_output = {"stopped": "Stopped", "failed": "Cut short"}.get(stage)
    return [
        TaskUpdateChunk(id="search", title="Searching the archive", status="complete", output=found,
                        sources=sources or None),
        TaskUpdateChunk(id="write", title="Writing the answer", status=write_status, output=write_output),
    ]


def _send(call: Callable[[], Any], stage: str, q: Any) -> bool:
    """One stream call; False (one log line) when Slack refuses it: the answer is then posted whole."""
    try:
        call()
        return True
    except SlackApiError as exc:
        log.warning("event=stream_refused stage=%s error=%s team=%s channel=%s ts=%s", stage, _error(exc),
                    q.team_id, q.channel_id, q.ts)
    except OSError as exc:
        log.warning("event=stream_refused stage=%s error=%s team=%s channel=%s ts=%s", stage,
                    type(exc).__name__, q.team_id, q.channel_id, q.ts)
    return False


def _error(exc: SlackApiError) -> str:
    return str((exc.response or {}).get("error") or "unknown_error")[:60] if exc.response is not None \
        else "unknown_error"


def _cited(sentences: list[Sentence], items: list[Item]) -> list[Item]:
    order: list[int] = []
    for sentence in sentences:
        order.extend(n for n in sentence.sources if n not in order)
    return [items[n - 1] for n in order]


def _cite_buttons(cited: list[Item], items: list[Item]) -> dict[str, Any]:
    """A Cite button for each cited item ("Cite [2]": its BibTeX entry, to the clicker), in one actions
    block; each action id ends with the item's number (ids must differ within a block)."""
    numbers = [items.index(item) + 1 for item in cited[:25]]
    buttons = [views.button(f"Cite [{n}]", f"{CITE_ACTION_ID}_{n}", items[n - 1].id[:ACTION_VALUE_LIMIT])
               for n in numbers]
    return {"elements": buttons, "type": "actions"}


def _cited_list(cited: list[Item], items: list[Item]) -> str:
    """The cited items, each with its number in the text, link and date, and the line of its paper, code and
    venue under it when known."""
    lines = []
    for item in cited:
        line = links_line(item)
        lines.append(f"[{items.index(item) + 1}] {title_link(item)} · {shown_day(item.published)}"
                     + (f"\n      {line}" if line else ""))
    return "\n".join(lines)
