"""The named boundaries where imports stay lazy, for start-up time (the module map in docs/architecture.md
lists them): everything else is imported at the top of its module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HTTP_STACK = {"httpx", "feedparser", "bot.pipeline", "bot.poller", "bot.research_index"}
OAUTH = {"bot.oauth", "bot.secrets_at_rest", "cryptography"}


def modules_imported(*args: str, cwd: Path) -> set[str]:
    """Every module `python -X importtime *args` imported (Python reports each on stderr)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-X", "importtime", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    return {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}


def test_help_imports_no_subcommand_module(tmp_path):
    loaded = modules_imported("-m", "bot", "--help", cwd=tmp_path)
    assert "bot.cli" in loaded
    heavy = {"bot.store", "bot.server", "bot.shell", "bot.summarize", "bot.search.index", "slack_bolt",
             "slack_sdk", "tantivy", "dotenv"} | HTTP_STACK | OAUTH
    assert loaded & heavy == set()


def test_serve_starts_without_the_poller_http_stack_oauth_or_socket_mode(tmp_path):
    loaded = modules_imported("-c", "import bot.server", cwd=tmp_path)
    assert {"bot.app", "bot.commands", "bot.summarize", "waitress", "tantivy"} <= loaded
    socket_mode = {"slack_bolt.adapter.socket_mode", "slack_sdk.socket_mode"}
    assert loaded & (HTTP_STACK | OAUTH | socket_mode | {"dotenv"}) == set()
