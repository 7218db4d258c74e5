"""The model's stream, bounded per read (issue 53, point 1): an endpoint that drips bytes without a newline is
cut at the deadline, a line without a newline is refused at its cap without being held, a read that waits for
nothing ends at the deadline, `stop` closes the model's response at once (the endpoint sees its connection
close), `close_all()` ends every open request, and `serve` stops on SIGTERM while an answer drips.

Every endpoint here is FakeOpenAI over loopback, scripted to misbehave; the answers are read by the real
bot.written and bot.summarize code."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.errors import SummaryError, SummaryStopped
from bot.search.index import SearchIndex
from bot.store import open_store
from bot.summarize import Summarizer
from bot.written import MAX_LINE_BYTES, Sentence, written_sentences
from tests.fakes.openai_api import FakeOpenAI
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import SECRET, TOKEN, ServeProcess
from tests.test_conversation import ITEMS

SPEECH = ITEMS[:2]
WRITTEN = ("Apple runs speech recognition on-device, privately and fast [2]. Large speech models are trained "
           "on servers [1]. Both aim at speech recognition [1][2].")
FIRST = len("Apple runs speech recognition on-device, privately and fast [2]. L")  # and the next begun
CHUNK = 9


class Reader(threading.Thread):
    """Reads a written answer in its own thread: what it yielded, and how it ended."""

    def __init__(self, summarizer: Summarizer, stop: threading.Event | None = None) -> None:
        super().__init__(daemon=True)
        self.summarizer, self.stop = summarizer, stop
        self.sentences: list[Sentence] = []
        self.first = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for sentence in written_sentences(self.summarizer, "speech recognition", SPEECH, stop=self.stop):
                self.sentences.append(sentence)
                self.first.set()
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            self.error = exc


def ended(summarizer: Summarizer, **kwargs: Any) -> tuple[float, SummaryError]:
    """How long a written answer took to fail, and its error."""
    started = time.monotonic()
    with pytest.raises(SummaryError) as caught:
        list(written_sentences(summarizer, "speech recognition", SPEECH, **kwargs))
    return time.monotonic() - started, caught.value


# --- the deadline and the caps, per read -----------------------------------------------------------------


def test_a_stream_dripping_without_a_newline_ends_at_the_deadline() -> None:
    """`data: ` then a byte every 50 ms and never a newline: the log said "timed out after 20 s" while the
    answer stayed open a minute (the deadline was checked per whole line)."""
    with FakeOpenAI(drip=0.05, drip_for=30) as api:
        took, error = ended(Summarizer(api.url, timeout=1.0))
        assert api.gave_up.wait(10)  # the client closed its connection: the endpoint stops writing
    assert str(error) == "no answer within 1 s" and not isinstance(error, SummaryStopped)
    assert took < 10  # the drip went on for 30 s


def test_a_read_waiting_for_bytes_that_never_come_ends_at_the_deadline() -> None:
    """The headers and the role chunk, then nothing: the read waiting on the socket ends at the deadline."""
    with FakeOpenAI(WRITTEN, stall_after=0) as api:
        _, error = ended(Summarizer(api.url, timeout=1.0))
        assert api.gave_up.wait(10)
    assert str(error) == "no answer within 1 s"


def test_a_line_without_a_newline_is_refused_at_its_cap_without_holding_it() -> None:
    """48 MiB of one line with no newline: refused once it passes the line cap, reading only a little more
    (memory stays flat; it used to hold the whole line, 200 MB took a server from 107 to 496 MB)."""
    flood = 48 * 1024 * 1024
    with FakeOpenAI(flood=flood) as api:
        tracemalloc.start()
        try:
            _, error = ended(Summarizer(api.url, timeout=30))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert api.gave_up.wait(10)
    assert str(error) == f"a line of the summary endpoint's answer passed the {MAX_LINE_BYTES}-byte cap"
    assert peak < 2 * 1024 * 1024  # the line cap and a read or two, not the line
    assert MAX_LINE_BYTES < api.sent < flood  # the endpoint sent past the cap; the client stopped it


# --- stop -------------------------------------------------------------------------------------------------


def test_stop_ends_a_read_waiting_on_the_model_and_keeps_what_was_written() -> None:
    """The model wrote a sentence and then nothing: `stop` ends the waiting read, closes the connection, and
    the answer raises SummaryStopped after the sentence it yielded."""
    stop = threading.Event()
    with FakeOpenAI(WRITTEN, chunk_chars=CHUNK, stall_after=-(-FIRST // CHUNK)) as api:
        reader = Reader(Summarizer(api.url, timeout=60), stop)
        reader.start()
        assert reader.first.wait(10)
        stop.set()
        reader.join(10)
        assert not reader.is_alive()
        assert api.gave_up.wait(10)
    assert isinstance(reader.error, SummaryStopped) and str(reader.error) == "the answer was stopped"
    assert [s.markdown() for s in reader.sentences] == ["Apple runs speech recognition on-device, privately "
                                                        "and fast [2]."]


def test_stop_closes_the_connection_while_the_answer_waits_on_slack() -> None:
    """Stop pressed while the caller posts a sentence to Slack (the generator is not reading): the model's
    connection is closed by the watchdog at once, so the model stops writing; the next read raises."""
    stop = threading.Event()
    with FakeOpenAI(WRITTEN, chunk_chars=CHUNK, stall_after=-(-FIRST // CHUNK)) as api:
        answer = written_sentences(Summarizer(api.url, timeout=60), "speech recognition", SPEECH, stop=stop)
        first = next(answer)
        stop.set()
        assert api.gave_up.wait(10)  # closed while the generator was suspended
        with pytest.raises(SummaryStopped):
            next(answer)
    assert first.sources == (2,)


def test_a_stop_set_before_the_answer_asks_nothing() -> None:
    stop = threading.Event()
    stop.set()
    with FakeOpenAI(WRITTEN) as api:
        _, error = ended(Summarizer(api.url, timeout=5), stop=stop)
    assert isinstance(error, SummaryStopped) and api.requests == []


# --- closing every open request (serve's shutdown) ---------------------------------------------------------


def test_close_all_ends_every_open_request_and_refuses_new_ones(tmp_path: Path) -> None:
    """A written answer and a summary, both waiting on an endpoint that answers after 60 s: close_all() ends
    both at once (the summary falls back to the extractive one); a new answer asks nothing."""
    store = open_store(f"sqlite:///{tmp_path / 'bot.db'}")
    store.migrate()
    store.add_items(ITEMS)
    index = SearchIndex(store)
    with FakeOpenAI(WRITTEN, delay=60) as api:
        summarizer = Summarizer(api.url, timeout=90)
        reader = Reader(summarizer)
        summaries: list[Any] = []
        summary = threading.Thread(target=lambda: summaries.append(summarizer.summarize(index, "speech")),
                                   daemon=True)
        reader.start()
        summary.start()
        deadline = time.monotonic() + 20
        while (len(api.requests) < 2 or len(summarizer.streams) < 2) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(summarizer.streams) == 2
        assert summarizer.streams.close_all() == 2
        reader.join(10)
        summary.join(10)
        assert not reader.is_alive() and not summary.is_alive()
        assert str(reader.error) == "the server is stopping" and not isinstance(reader.error, SummaryStopped)
        assert summaries[0] is not None and summaries[0].method == "extractive"
        _, error = ended(summarizer)
        assert str(error) == "the server is stopping" and len(api.requests) == 2
    assert len(summarizer.streams) == 0
    store.close()


def test_sigterm_ends_serve_at_once_while_an_answer_drips(database_url: str, tmp_path: Path) -> None:
    """An answer being written by an endpoint that drips a byte at a time without a newline; SIGTERM. `serve`
    used to wait on it (87 s measured; Heroku kills at 30 s): the stream is closed at once, the answer is
    finished in Slack as without a model, and serve exits 0, well before the stream's 20 s deadline."""
    store = open_store(database_url)
    store.migrate()
    store.add_items(ITEMS)
    store.close()
    with FakeSlack() as slack, FakeOpenAI(drip=0.2, drip_for=120) as api:
        env = {"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_URL": slack.url,
               "DATABASE_URL": database_url, "POLL_INTERVAL": "0", "SUMMARY_API_URL": api.url}
        process = ServeProcess(env, tmp_path).start()
        assert process.proc is not None
        try:
            ts = "1700000001.000100"
            status, _ = process.event({"type": "message", "channel_type": "im", "channel": "D0ALICE",
                                       "user": "U0ALICE", "text": "anything on speech recognition?", "ts": ts,
                                       "event_ts": ts})
            assert status == 200
            deadline = time.monotonic() + 30
            while not (api.requests and api.sent) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert api.requests and api.requests[0]["body"]["stream"] is True, process.output()
            process.proc.send_signal(signal.SIGTERM)
            try:
                code = process.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pytest.fail(f"serve did not stop on SIGTERM while an answer dripped:\n{process.output()}")
        finally:
            process.stop()
        out = process.output()
        assert api.gave_up.wait(10)
    assert code == 0, out
    assert "event=model_streams_closed count=1" in out and "Traceback" not in out
    assert "the server is stopping" in out
    assert slack.calls_to("chat.stopStream") or slack.calls_to("chat.postMessage")  # the answer was finished


@pytest.fixture(autouse=True)
def _no_watchdog_left() -> Iterator[None]:
    """Every request's watchdog thread ends with its request."""
    yield
    assert [t for t in threading.enumerate() if t.name == "model-watchdog"] == []
