"""`mlresearch-bot shell`: piped stdin through the real entry point, and `shell.run` with in-memory streams:
replies as text, the shell's own channel, new items printed through the delivery ledger."""

from __future__ import annotations

import io
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.ask import understand
from bot.commands import Services
from bot.config import Settings
from bot.conversation import Question, reply_for, understood_reply
from bot.models import Validators
from bot.route import ingest
from bot.search.index import SearchIndex, meaning_model
from bot.shell import SHELL_CHANNEL_ID, SHELL_TEAM_ID, SHELL_USER_ID, mrkdwn_to_text, render, run
from bot.store import SQLiteStore, Store
from tests.fakes.archive import ARCHIVE, RSS, filled_store, fixture_items
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE

ROOT = Path(__file__).resolve().parent.parent


def shell_env(tmp_path: Path, feed: Path, interval: int = 0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "SUMMARY_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'shell.db'}",
        FEED_URL=str(feed),
        POLL_INTERVAL=str(interval),
        LOG_LEVEL="INFO",
    )
    return env


def test_python_m_bot_shell_with_piped_stdin(tmp_path: Path) -> None:
    lines = "poll\n/mlresearch help\nsearch captioning\nlatest 2\nsearch <!channel>\n/mlresearch bogus\n"
    lines += "exit\nstatus\n"
    done = subprocess.run(
        [sys.executable, "-m", "bot", "shell"],
        input=lines,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=shell_env(tmp_path, ARCHIVE),
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "first poll: 16 items" in out
    assert "/mlresearch summarize <topic>" in out  # help, unescaped for the terminal
    assert (
        "BalCapRL: A Balanced Framework for RL-Based MLLM Image Captioning "
        "(https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning)"
    ) in out
    assert "Image captioning is one of the most fundamental tasks" in out  # bold markers dropped
    assert "Paper · 2026-05-11" in out
    assert "No results for “<!channel>”" in out
    assert "I don't know “bogus”" in out
    assert "Feed:" not in out  # `status` came after `exit`
    assert "Traceback" not in out + done.stderr
    assert "&lt;" not in out and "&amp;" not in out


def test_end_of_input_ends_the_shell(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    out = io.StringIO()
    settings = Settings(database_url=f"sqlite:///{store.path}", feed_url=str(ARCHIVE), poll_interval=0)
    assert run(settings, io.StringIO("latest 1\n\n   \n"), out) == 0
    assert "Introducing the Third Generation of Apple’s Foundation Models (https://" in out.getvalue()
    assert "mlresearch>" not in out.getvalue()  # no prompt when stdin is not a terminal


def test_the_shell_is_its_own_channel_and_prints_new_items_through_the_ledger(tmp_path: Path) -> None:
    feed = tmp_path / "feed.xml"
    feed.write_bytes(RSS.read_bytes())
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'bot.db'}", feed_url=str(feed), poll_interval=0)
    first = io.StringIO()
    run(settings, io.StringIO("poll\nsubscribe diffusion flows\nquit\n"), first)
    assert "first poll: 10 items" in first.getvalue()
    assert "Subscribed #shell" in first.getvalue()
    store = SQLiteStore(tmp_path / "bot.db")
    sub = store.get_subscription(SHELL_TEAM_ID, SHELL_CHANNEL_ID)
    assert sub is not None and sub.keywords == ("diffusion", "flows")

    feed.write_bytes(ARCHIVE.read_bytes())  # six items the archive had not seen
    second = io.StringIO()
    run(settings, io.StringIO("poll\npoll\n"), second)
    text = second.getvalue()
    assert text.count("New in #shell:") == 2  # only the two items matching the keywords
    assert "Mechanisms of Projective Composition of Diffusion Models (https://" in text
    assert "Normalizing Flows are Capable Generative Models" in text
    assert "Matched your keywords: diffusion" in text
    assert "fetched 16, 6 new, 2 printed here" in text
    assert "the feed has not changed" in text
    states = {d.item_id.rsplit("/", 1)[1]: d.state for d in store.deliveries(channel_id=SHELL_CHANNEL_ID)}
    assert states == {"projective-composition-diffusion": "sent", "normalizing-flows": "sent"}


class SlowStdin:
    """A stdin that hands out lines only when the test says so (as a person typing would)."""

    def __init__(self) -> None:
        self.lines: queue.Queue[str] = queue.Queue()

    def readline(self) -> str:
        return self.lines.get(timeout=30)

    def isatty(self) -> bool:
        return False


def test_background_polls_print_new_items_as_they_would_post(tmp_path: Path) -> None:
    feed = tmp_path / "feed.xml"
    feed.write_bytes(RSS.read_bytes())
    store = filled_store(tmp_path, feed)  # this feed's baseline already taken
    store.subscribe(SHELL_TEAM_ID, SHELL_CHANNEL_ID, "USHELL")
    feed.write_bytes(ARCHIVE.read_bytes())
    settings = Settings(database_url=f"sqlite:///{store.path}", feed_url=str(feed), poll_interval=1)
    stdin, out = SlowStdin(), io.StringIO()
    worker = threading.Thread(target=run, args=(settings, stdin, out), daemon=True)
    worker.start()
    deadline = time.monotonic() + 20
    while out.getvalue().count("New in #shell:") < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    stdin.lines.put("exit\n")
    worker.join(10)
    assert not worker.is_alive()
    assert out.getvalue().count("New in #shell:") == 6
    assert "[poll] fetched 16, 6 new, 6 printed here" in out.getvalue()
    assert all(d.state == "sent" for d in store.deliveries(channel_id=SHELL_CHANNEL_ID))


def test_a_feed_failure_is_one_line(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'bot.db'}",
        feed_url=str(tmp_path / "missing.xml"),
        poll_interval=0,
    )
    out = io.StringIO()
    assert run(settings, io.StringIO("poll\nsearch 🚀\n" + "x" * 5000 + "\n"), out) == 0
    text = out.getvalue()
    assert "The feed could not be reached, so the archive is still empty (" in text
    assert "could not be read" in text
    assert text.count("The feed could not be reached") == 1  # the poll; then each read says why in one line
    assert text.count("The archive is empty because the feed could not be reached.") == 2
    assert "Traceback" not in text


# --- questions, backfill, offline ------------------------------------------------------------------------


def test_a_line_that_is_not_a_command_is_a_question_answered_as_a_dm_would_be(
    store: Store, database_url: str
) -> None:
    ingest(store, str(ARCHIVE), fixture_items(ARCHIVE), Validators(etag='"fixture"'))
    settings = Settings(database_url=database_url, feed_url=str(ARCHIVE), poll_interval=0)
    out = io.StringIO()
    lines = ("what is new?\nwhat has apple published on captioning?\nonly the on-device ones\n"
             "and on privacy?\n/mlresearch bogus\n")
    assert run(settings, io.StringIO(lines), out) == 0
    text = out.getvalue()
    assert "I don't know “what”" not in text
    assert "I don't know “bogus”" in text  # a line starting with /mlresearch is always a command
    # the very reply a direct message gets (the same understanding and handlers), rendered as text
    today = datetime.now(UTC)
    dm = Question(SHELL_TEAM_ID, SHELL_CHANNEL_ID, SHELL_USER_ID, "what is new?", "1.0", "1.0", "")
    index = SearchIndex(store, model=meaning_model(settings))
    services = Services(store=store, settings=settings, index=index)
    for question in ("what is new?", "what has apple published on captioning?"):
        said, reply = understood_reply(understand(question, now=today.date()), dm, services)
        assert reply is not None and f"   {mrkdwn_to_text(said)}\n{render(reply.blocks)}" in text
    assert "The 5 newest items." in text
    assert "Searched for “captioning”." in text
    assert "BalCapRL: A Balanced Framework for RL-Based MLLM Image Captioning (https://" in text
    # a follow-up builds on the question before it, said in the shell's words (no thread here)
    assert 'Searched for “captioning "on-device"”, keeping your last question\'s topic.' in text
    assert "Searched for “privacy”, in place of your last question's topic." in text  # "and on X?": X
    assert "Traceback" not in text


def test_backfill_works_in_the_shell(database_url: str) -> None:
    with FeedServer() as server:
        server.route("/rss.xml", Reply(body=RSS.read_bytes()))
        server.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        settings = Settings(database_url=database_url, feed_url=server.url("/rss.xml"), poll_interval=0)
        out = io.StringIO()
        assert run(settings, io.StringIO("backfill\nlatest 1\n"), out) == 0
    text = out.getvalue()
    assert "[backfill] reading http://127.0.0.1:" in text
    assert "[backfill] 14 posts in the index: 14 added, 0 enriched" in text
    assert "I don't know “backfill”" not in text
    assert [r.path for r in server.requests] == ["/research"]  # beside the feed; the feed itself untouched
    assert "The archive is empty" not in text.split("[backfill] 14")[1]


def offline_shell(tmp_path: Path, lines: str) -> str:
    """`mlresearch-bot shell` in a fresh folder (no clone around it), its feed refused at once, polling."""
    with socket.socket() as probe:  # a port nothing listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = shell_env(tmp_path, tmp_path / "unused.xml", interval=600)
    env["FEED_URL"] = f"http://127.0.0.1:{port}/rss.xml"
    done = subprocess.run([sys.executable, "-m", "bot", "shell"], input=lines, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    return done.stdout.replace(str(port), "PORT")


def test_offline_the_first_screen_offers_the_demo_in_one_line_and_no_backfill(tmp_path: Path) -> None:
    out = offline_shell(tmp_path, "what is new?\nlatest\nsearch privacy\nqwerty zxcv\nstatus\n")
    first_screen, *answers = out.split("\n\n")  # each answer ends with a blank line
    assert "The feed could not be reached, so the archive is still empty (" in first_screen
    assert "127.0.0.1:PORT/rss.xml could not be reached" in first_screen
    assert "\nType `demo` to load 72 real posts and try it offline.\n" in first_screen + "\n"
    assert "backfill" not in first_screen  # it fails offline too
    assert "A question builds on the one before it" in first_screen and "`new` starts over" in first_screen
    reads, status = answers[:4], answers[4]
    assert reads == ["The archive is empty because the feed could not be reached. Type `demo` to load 72 "
                     "real posts and try it offline."] * 4
    # status shows the feed's health, not the same line again
    assert status.startswith("Feed: failing · last poll ") and "Errors: 1 in a row; last: " in status
    assert "Archive: 0 items" in status and "demo" not in status


def test_demo_in_the_shell_loads_real_posts_and_status_says_it_is_the_demo(tmp_path: Path) -> None:
    out = offline_shell(tmp_path, "demo\nlatest 2\nsearch privacy\nstatus\ndemo\n")
    _first, loaded, latest, privacy, status, again, *_ = out.split("\n\n")
    assert loaded.startswith("[demo] loaded the demo archive: 72 real posts of Apple ML Research")
    assert latest.startswith("   The 2 newest items\nNegotiating Ontological Boundaries in User-Authored")
    assert "results for “privacy”" in privacy and "Learning with Privacy at Scale" in privacy
    assert "Archive: 72 items (the bundled demo archive: real posts for trying the bot offline, never" \
        in status and "Feed: failing" in status
    assert again.startswith("[demo] the demo archive is already loaded (72 real posts); nothing changed")


def test_latest_one_names_one_item_in_the_singular(tmp_path: Path) -> None:
    out = offline_shell(tmp_path, "demo\nlatest 1\n")
    latest = out.split("\n\n")[2]
    assert latest.startswith("   The newest item\nNegotiating Ontological Boundaries"), latest
    assert "1 newest" not in out
    assert SQLiteStore(tmp_path / "shell.db").count_items() == 72


SLACK_ONLY = ("Reply in this thread", "in the thread", "only visible to you", "Share in channel",
              "this thread's")


def test_the_shell_speaks_as_a_console_with_one_header_and_a_way_to_start_over(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    settings = Settings(database_url=f"sqlite:///{store.path}", feed_url=str(ARCHIVE), poll_interval=0)
    out = io.StringIO()
    lines = ["show me the latest 2", "what is new?", "new", "what has apple published on captioning?",
             "only the on-device ones", "new", "only the on-device ones", "qwerty zxcv", "new", "hi", "help"]
    assert run(settings, io.StringIO("\n".join(lines) + "\n"), out) == 0
    banner, *answers = out.getvalue().split("\n\n")
    said = dict(zip(range(len(lines)), answers, strict=False))
    assert "A question builds on the one before it" in banner and "`new` starts over" in banner  # said once
    for slack_only in SLACK_ONLY:
        assert slack_only not in out.getvalue(), slack_only
    assert said[0].startswith("   The 2 newest items.\nIntroducing the Third Generation")
    assert said[0].count("newest item") == 1  # one header
    assert said[1].startswith("   The 5 newest items.\n")  # nothing of "latest 2" was a topic to keep
    assert said[2] == "Starting over: your next question stands on its own."
    assert said[4].startswith('   Searched for “captioning "on-device"”, keeping your last question\'s')
    assert said[6].startswith('   Searched for “"on-device"”.\n')  # after `new`: a question of its own
    assert "No results for “qwerty zxcv”" in said[7]
    assert said[9].startswith("Ask about Apple's machine learning research in plain words")  # "hi"
    assert said[10].startswith("Apple Machine Learning Research, in this console.")
    assert "/mlresearch summarize <topic>" in said[10] and "`demo`, `new`, `exit`" in said[10]


def test_slack_keeps_its_thread_wording_and_says_the_header_once(tmp_path: Path) -> None:
    store = filled_store(tmp_path)
    settings = Settings(database_url=f"sqlite:///{store.path}")
    services = Services(store=store, settings=settings)
    dm = Question(SHELL_TEAM_ID, "D1", SHELL_USER_ID, "show me the latest 2", "1.0", "1.0", "")
    text, blocks = reply_for(understand(dm.text, now=datetime.now(UTC).date()), dm, services)
    shown = render(blocks)
    assert shown.startswith("   The 2 newest items. Reply in this thread to narrow it down")
    assert shown.count("newest item") == 1 and text.startswith("The 2 newest items. The 2 newest: ")


# --- Block Kit -> text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mrkdwn", "text"),
    [
        ("*<https://a.example/x?a=1&amp;b=2|Tom &amp; Jerry>*", "Tom & Jerry (https://a.example/x?a=1&b=2)"),
        ("&lt;!channel&gt; &lt;https://evil|x&gt; &amp;lt;", "<!channel> <https://evil|x> &lt;"),
        ("Subscribed <#C123>, hi <@U1> <!here>", "Subscribed #C123, hi @U1 @here"),
        (
            "an *Image* and *captioning* here, snake_case_name",
            "an Image and captioning here, snake_case_name",
        ),
        ("<https://plain.example>", "https://plain.example"),
    ],
)
def test_mrkdwn_to_text(mrkdwn: str, text: str) -> None:
    assert mrkdwn_to_text(mrkdwn) == text


def test_render_blocks() -> None:
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "Latest"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "*<https://x.example|A &amp; B>*"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "Paper · 2026-01-01"}]},
        {"type": "divider"},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Read"},
                    "url": "https://x.example",
                },
                {
                    "type": "button",
                    "text": {"type": "plain_text", "text": "Share in channel"},
                    "value": "latest",
                },
            ],
        },
    ]
    assert render(blocks).splitlines() == [
        "== Latest ==",
        "A & B (https://x.example)",
        "   Paper · 2026-01-01",
        "-" * 60,
        "   [Read] https://x.example",
    ]
