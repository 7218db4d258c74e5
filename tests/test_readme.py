"""Every command the README shows is run here, as a newcomer would type it, and its picture of a post and an
answer is what the bot makes of the demo archive.

A command is a line of a fenced `sh` block or an inline code span that starts a command (`make`,
`mlresearch-bot`, `.venv/bin/mlresearch-bot`, `heroku`, `git`, `curl`, `/invite`); the command table's
`/mlresearch …` examples are answered on the demo archive by tests/test_docs.py. A command no runner here
knows fails `test_every_readme_command_has_a_runner`, so a new line in the README needs a test. What cannot
run on this machine is Heroku's side: those lines are checked against what they rely on in the repository
(app.json, the manifest, the Procfile), and `git push heroku main` is the buildpack's build, release and web
that tests/test_buildpack.py runs from a clean clone.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pytest

from bot import demo
from bot.ask import understand
from bot.blocks import item_message
from bot.commands import Services
from bot.config import Settings
from bot.conversation import Question, reply_for
from bot.shell import render
from bot.store import Store
from tests.fakes.archive import corpus_index
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import ServeProcess, http
from tests.test_deploy import config_variables
from tests.test_newcomer import clean_env

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
BOT = ROOT / ".venv" / "bin" / "mlresearch-bot"
STARTS = ("make", "mlresearch-bot", ".venv/bin/mlresearch-bot", "heroku ", "git ", "curl ", "/invite ",
          "POLL_INTERVAL=")


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.MULTILINE | re.DOTALL)


def readme_commands() -> list[str]:
    """Each command of the README once, in its order: the fenced `sh` lines without their comments, then the
    inline spans that start a command."""
    found: list[str] = []
    for block in fenced("sh"):
        for line in block.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                found.append(command)
    prose = re.sub(r"^```.*?^```", "", README, flags=re.MULTILINE | re.DOTALL)
    found += [span for span in re.findall(r"`([^`\n]+)`", prose) if span.startswith(STARTS)]
    return list(dict.fromkeys(found))


def offline_env(tmp_path: Path, **env: str) -> dict[str, str]:
    """No Slack, no model, a feed nobody answers, the database in `tmp_path`: an empty value of each variable
    wins over a developer's `.env` (the real environment wins, and empty is unset)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    unset = dict.fromkeys(config_variables(), "")
    return clean_env(**{**unset, "FEED_URL": f"http://127.0.0.1:{closed}/rss.xml",
                        "DATABASE_URL": f"sqlite:///{tmp_path / 'mlresearch.db'}", **env})


def run(argv: list[str], cwd: Path, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


# --- runners: what each README command does, run -------------------------------------------------------


def make_run(command: str, tmp_path: Path) -> None:
    """`make run`: the local shell; offline, its first screen offers the demo, and `demo` loads it. With
    POLL_INTERVAL=0 (after `mlresearch-bot demo`, as the README has it) the shell answers from the demo
    without trying the feed."""
    assignments = dict(word.split("=", 1) for word in shlex.split(command) if "=" in word)
    env = offline_env(tmp_path, **assignments)
    if assignments:
        assert run([str(BOT), "demo"], tmp_path, env).returncode == 0
    typed = "latest 1\nstatus\nexit\n" if assignments else "demo\nlatest 1\nexit\n"
    proc = run(["make", "run"], ROOT, env, stdin=typed)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mlresearch-bot shell" in proc.stdout and "The newest item\n" in proc.stdout
    if assignments:
        assert "the bundled demo archive" in proc.stdout and "could not be reached" not in proc.stdout
    else:
        assert "type `demo`" in proc.stdout.lower()
        assert "loaded the demo archive: 72 real posts" in proc.stdout


def make_test(_command: str, _tmp_path: Path) -> None:
    """`make test` runs this suite, so it is not run from inside it (.ci/run runs it for real); its recipe is
    what the README says it is: the lock's check, the whole suite, ruff and mypy."""
    proc = run(["make", "-n", "test"], ROOT, clean_env())
    assert proc.returncode == 0, proc.stderr
    for step in ("uv lock --check", "-m pytest", "ruff check", "mypy"):
        assert step in proc.stdout, f"make test does not run {step}: {proc.stdout}"


def make_help(_command: str, tmp_path: Path) -> None:
    proc = run(["make"], ROOT, clean_env())
    assert proc.returncode == 0 and "make run" in proc.stdout and "make test" in proc.stdout
    assert "is up to date" not in proc.stdout


def cli(command: str, tmp_path: Path) -> None:
    """`.venv/bin/mlresearch-bot …` (or bare `mlresearch-bot …`, the venv active) in a fresh folder holding
    the demo archive, the command first if it is `demo`."""
    words = shlex.split(command)
    env = offline_env(tmp_path)
    args = words[1:] or ["--help"]
    if args == ["serve"]:
        return serve_answers_healthz(command, tmp_path)
    if args[0] not in ("demo", "--help"):
        assert run([str(BOT), "demo"], tmp_path, env).returncode == 0
    proc = run([str(BOT), *args], tmp_path, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), f"{command} printed nothing"
    if args == ["search", "captioning"]:
        assert "results for “captioning”" in proc.stdout
    if args == ["demo"]:
        assert "loaded the demo archive: 72 real posts" in proc.stdout


def serve_answers_healthz(_command: str, tmp_path: Path) -> None:
    """`mlresearch-bot serve` with a token and a signing secret, then `curl …/healthz` against it (Slack's
    Web API played on loopback)."""
    with FakeSlack() as slack:
        env = offline_env(tmp_path, SLACK_BOT_TOKEN="xoxb-readme-0000", SLACK_SIGNING_SECRET="readme-secret",
                          SLACK_API_URL=slack.url, POLL_INTERVAL="0")
        with ServeProcess({k: v for k, v in env.items() if v}, tmp_path, argv=[str(BOT), "serve"]) as process:
            status, body = http("GET", process.base + "/healthz", timeout=5)[:2]
    assert status == 200
    assert {"status", "items", "subscriptions", "last_poll", "feed_ok"} <= set(json.loads(body))


def heroku_create(_command: str, _tmp_path: Path) -> None:
    """The URL it prints goes into the manifest in place of its placeholder, as the README's step 2 says."""
    manifest = (ROOT / "manifest.json").read_text()
    assert "https://YOUR-APP.example.com/slack/events" in manifest


def heroku_addon(command: str, _tmp_path: Path) -> None:
    """The plan the README creates is app.json's (the Deploy button's); a postgres:// DATABASE_URL, as the
    add-on sets, is what tests/test_buildpack.py serves from."""
    plan = command.split()[-1]
    addons = json.loads((ROOT / "app.json").read_text())["addons"]
    assert plan in [a["plan"] for a in addons]
    Settings.from_env({"DATABASE_URL": "postgres://u:p@host:5432/db"})


def heroku_config(command: str, _tmp_path: Path) -> None:
    """Each variable set is one the bot reads and app.json offers, and the values shown are the shapes the
    configuration accepts."""
    offered = json.loads((ROOT / "app.json").read_text())["env"]
    pairs = dict(word.split("=", 1) for word in command.split()[2:])
    assert pairs and set(pairs) <= set(config_variables()) & set(offered)
    Settings.from_env({name: value.replace("…", "readme") for name, value in pairs.items()})


def git_push(_command: str, _tmp_path: Path) -> None:
    """Heroku's build from uv.lock, its release phase and `web` run in tests/test_buildpack.py (from a clean
    clone); here, the README's sentence about them is the Procfile's."""
    procfile = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line)
    assert procfile["release"] == "mlresearch-bot migrate" and procfile["web"] == "mlresearch-bot serve"


def invite(command: str, _tmp_path: Path) -> None:
    """Slack's own command: the name invited is the bot user's."""
    bot_user = json.loads((ROOT / "manifest.json").read_text())["features"]["bot_user"]
    assert command == f"/invite @{bot_user['display_name']}"


RUNNERS: list[tuple[str, Callable[[str, Path], None]]] = [
    (r"(POLL_INTERVAL=0 )?make run", make_run),
    (r"make test", make_test),
    (r"make", make_help),
    (r"(\.venv/bin/)?mlresearch-bot( [a-z]+( [a-z]+)?)?", cli),
    (r"heroku create( <app>)?", heroku_create),
    (r"heroku addons:create heroku-postgresql:[a-z0-9-]+", heroku_addon),
    (r"heroku config:set( [A-Z_]+=\S+)+", heroku_config),
    (r"git push heroku main", git_push),
    (r"curl https://<app>-<hash>\.herokuapp\.com/healthz", serve_answers_healthz),
    (r"/invite @\w+", invite),
]


def runner_for(command: str) -> Callable[[str, Path], None] | None:
    return next((r for pattern, r in RUNNERS if re.fullmatch(pattern, command)), None)


def test_every_readme_command_has_a_runner() -> None:
    commands = readme_commands()
    assert {"make run", "make test", ".venv/bin/mlresearch-bot demo", "git push heroku main"} <= set(commands)
    unknown = [c for c in commands if runner_for(c) is None]
    assert not unknown, f"README commands no test runs: {unknown}"


def test_the_readme_is_read_in_ten_minutes() -> None:
    assert len(README.splitlines()) <= 150


@pytest.mark.parametrize("command", [c for c in readme_commands() if runner_for(c)])
def test_each_readme_command_runs(command: str, tmp_path: Path) -> None:
    runner = runner_for(command)
    assert runner is not None
    runner(command, tmp_path)


# --- the picture ----------------------------------------------------------------------------------------


def picture() -> tuple[list[str], list[str]]:
    """The README's picture as its post's lines (below the channel's name) and its answer's (the question
    first), bars and speakers taken off."""
    (text,) = fenced("text")
    post, answer = text.strip().split("\n\n")
    strip: Callable[[str], str] = lambda line: re.sub(r"^(│|you|mlresearch) +", "", line).strip()  # noqa: E731
    return [strip(line) for line in post.splitlines()[1:]], [strip(line) for line in answer.splitlines()]


def flat(text: str) -> str:
    return " ".join(text.split())


def shown(lines: list[str]) -> Iterator[str]:
    """The picture's lines that show text the bot writes (a cut line up to its "…")."""
    for line in lines:
        if not line.startswith(("[", "…")):
            yield line.removesuffix("…")


@pytest.fixture
def demo_store(store: Store) -> Store:
    demo.load(store)
    return store


def test_the_picture_of_a_post_is_what_the_bot_posts(demo_store: Store) -> None:
    post, _answer = picture()
    (item,) = [i for i in demo_store.latest(100) if i.title == post[0]]
    message = item_message(item)
    rendered = flat(render(message["blocks"]))
    assert flat(" ".join(shown(post[2:]))) in rendered  # the abstract's start, over two lines
    for line in shown(post[:2]):
        assert flat(line) in rendered, line
    labels = re.findall(r"\[([^\]]+?)(?: ▾)?\]", post[-1])
    actions = [b for b in message["blocks"] if b["type"] == "actions"]
    elements = [e for b in actions for e in b["elements"]]
    named = [(e.get("text") or e.get("placeholder") or {}).get("text") for e in elements]
    assert labels == named


def test_the_picture_of_an_answer_is_what_the_bot_answers(demo_store: Store) -> None:
    post, answer = picture()
    question = re.sub(r"^@mlresearch ", "<@UBOT> ", answer[0])
    asked = Question("T1", "C1", "U1", question, "1.0", "1.0", "")
    services = Services(demo_store, Settings(), index=corpus_index(demo_store))
    _text, blocks = reply_for(understand(asked.text, now=date.today()), asked, services)
    rendered = render(blocks)
    for line in shown(answer[1:]):
        assert flat(line) in flat(rendered), line
    listed = re.findall(r"^\S.*\(https://machinelearning\.apple\.com/research/", rendered, flags=re.MULTILINE)
    assert len(listed) == 5 and "the best 5" in rendered


def test_the_commands_run_without_a_venv_on_path() -> None:
    """The README never shows a bare `mlresearch-bot` in a fenced block: it is not on PATH until the venv is
    active, and the README says so where it names it."""
    bare = [c for block in fenced("sh") for c in block.splitlines() if c.startswith("mlresearch-bot")]
    assert not bare
    assert "with the venv active" in README
    assert os.access(BOT, os.X_OK), "the console script the README names is not where it says"
