"""Log lines: one line per record, and no value (ours, Bolt's, waitress's; in the message, its arguments or an
exception) can end the line early, forge another one or send a control sequence to the terminal."""

from __future__ import annotations

import io
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from bot.cli import OneLineFormatter, setup_logging
from bot.config import Settings

HOSTILE = "a\x1b[2J\x1b]0;pwn\x07\r\nlevel=ERROR event=forged\u2028b\u2029c\x85\x9b\x7f\x00\t\u202e"
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def record(name: str, message: str, *args: object, exc: Exception | None = None) -> logging.LogRecord:
    rec = logging.LogRecord(name, logging.ERROR, __file__, 1, message, args, None)
    if exc is not None:
        try:
            raise exc
        except type(exc):
            rec.exc_info = sys.exc_info()
    return rec


def assert_one_clean_line(line: str) -> None:
    assert not RAW_CONTROL.search(line), repr(line)  # no raw newline either: one line, whatever it holds
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} level=ERROR logger=\S+ event=", line), line


@pytest.mark.parametrize(("name", "message"), [
    ("bot.listeners", "event=listener_error request=%s error=%s"),  # ours: key=value, values as given
    ("slack_bolt", "Unhandled request (%s) %s"),  # a library's: quoted
])
def test_arguments_are_escaped(name: str, message: str) -> None:
    line = OneLineFormatter().format(record(name, message, HOSTILE, "x"))
    assert_one_clean_line(line)
    for escaped in ("\\r\\nlevel=ERROR", "\\u2028", "\\u2029", "\\x85", "\\x9b", "\\x7f", "\\t", "\\u202e"):
        assert escaped in line, (escaped, line)
    # ours are escaped as they stand, a library's message is JSON-quoted first (ESC is then \u001b)
    assert ("\\x1b[2J" if name.startswith("bot") else "\\u001b[2J") in line


def test_exception_text_is_escaped_and_stays_on_the_line() -> None:
    line = OneLineFormatter().format(record("bot.poller", "event=poll_crashed", exc=ValueError(HOSTILE)))
    assert_one_clean_line(line)
    assert ' exc="Traceback' in line and "ValueError: a\\u001b[2J" in line and "\\u2028" in line


def test_a_message_whose_arguments_do_not_fit_is_still_one_line() -> None:
    line = OneLineFormatter().format(record("waitress", "Exception while serving %s %s", HOSTILE))
    assert_one_clean_line(line)
    assert "Exception while serving" in line


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    stream = io.StringIO()
    try:
        setup_logging(Settings.from_env({}), stream)
        yield stream
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_libraries_log_through_the_same_escaping_handler(log_stream: io.StringIO) -> None:
    for name in ("waitress", "slack_bolt", "slack_sdk", "bot.server"):
        logging.getLogger(name).error("event=x value=%s" if name.startswith("bot") else "value %s", HOSTILE)
    try:
        raise RuntimeError(HOSTILE)
    except RuntimeError:
        logging.getLogger("waitress").exception("Exception while serving /slack/events")
    lines = log_stream.getvalue().splitlines()
    assert len(lines) == 5, lines
    for line in lines:
        assert_one_clean_line(line)
        assert "\\u2028" in line
