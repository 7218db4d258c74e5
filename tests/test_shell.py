"""`mlresearch-bot shell`: piped stdin through the real entry point, and `shell.run` with in-memory streams:
replies as text, the shell's own channel, new items printed through the delivery ledger."""

from __future__ import annotations

import io
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.config import Settings
from bot.shell import SHELL_CHANNEL_ID, SHELL_TEAM_ID, mrkdwn_to_text, render, run
from bot.store import SQLiteStore
from tests.fakes.archive import ARCHIVE, RSS, filled_store

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
    assert "first poll: 16 item(s)" in out
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
    assert "first poll: 10 item(s)" in first.getvalue()
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
    assert "[poll] the feed failed:" in text and "could not be read" in text
    assert "Type some words to search for" in text
    assert "Traceback" not in text


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
