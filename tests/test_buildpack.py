"""Heroku's Python buildpack in miniature: what a clean clone holds is built the way the buildpack builds a uv
project, then the Procfile's `release` and `web` commands run as a dyno would run them.

The buildpack (heroku/heroku-buildpack-python, lib/uv.sh and lib/package_manager.sh) picks uv when `uv.lock`
is the only package manager file, requires `.python-version`, and runs, with UV_PROJECT_ENVIRONMENT set to its
own Python install, UV_NO_MANAGED_PYTHON=1 and UV_PYTHON_DOWNLOADS=never:

    uv sync --locked --no-default-groups --compile-bytecode --no-progress

`--locked` refuses a lock that disagrees with pyproject.toml. Dynos then run Procfile lines through bash with
the environment's bin first on PATH, PYTHONPATH=/app and the config vars; a restart sends SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psycopg
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from uv import find_uv_bin

from tests.fakes.slack_sender import ROOT, free_port, http

BUILDPACK_SYNC = ["sync", "--locked", "--no-default-groups", "--compile-bytecode", "--no-progress"]
PACKAGE_MANAGER_FILES = ("requirements.txt", "Pipfile", "Pipfile.lock", "poetry.lock", "uv.lock")
FEED = ROOT / "tests" / "data" / "apple_ml_rss.xml"
UNUSED_SLACK_API = "http://127.0.0.1:9/api/"  # the discard port: nothing listens there


def clean_clone(destination: Path) -> Path:
    """The files a fresh clone would hold: tracked and not-ignored ones, as they are in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def procfile(app: Path) -> dict[str, str]:
    entries = (line.split(":", 1) for line in (app / "Procfile").read_text().splitlines() if line.strip())
    return {name.strip(): command.strip() for name, command in entries}


def dyno_env(app: Path, python_home: Path, **config: str) -> dict[str, str]:
    """What a dyno runs Procfile commands with: no developer environment leaks in."""
    return {"PATH": f"{python_home / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(app),
            "PYTHONPATH": str(app), "PYTHONUNBUFFERED": "true", "LANG": "C.UTF-8", **config}


def output_of(log: Path) -> str:
    return log.read_text(errors="replace") if log.exists() else ""


def test_uv_lock_is_the_one_package_manager_file_and_python_version_agrees() -> None:
    present = [name for name in PACKAGE_MANAGER_FILES if (ROOT / name).exists()]
    assert present == ["uv.lock"], f"the buildpack needs exactly one package manager file, found {present}"
    pinned = (ROOT / ".python-version").read_text().strip()
    assert re.fullmatch(r"3\.\d+", pinned), f".python-version should name a major version, not {pinned!r}"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires).contains(f"{pinned}.0"), f"Python {pinned} does not satisfy {requires}"


def test_the_build_system_floor_accepts_the_licence_string_and_the_licence_ships() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    requires = [Requirement(r) for r in pyproject["build-system"]["requires"]]
    setuptools = next(r for r in requires if r.name == "setuptools")
    # a licence given as an SPDX string (PEP 639) is an error before setuptools 77
    assert not setuptools.specifier.contains("76.99") and setuptools.specifier.contains("77.0")
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License") and "Copyright (c) 2026 mlresearch-bot contributors" in licence


@pytest.mark.postgres
def test_a_clean_clone_builds_from_the_lock_migrates_and_serves(tmp_path: Path, pg_schema_url: str) -> None:
    app = clean_clone(tmp_path / "app")
    python_home = app / ".heroku" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(python_home)], check=True)

    build_env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    build_env.update(UV_PROJECT_ENVIRONMENT=str(python_home), UV_NO_MANAGED_PYTHON="1",
                     UV_PYTHON_DOWNLOADS="never")
    build = subprocess.run([find_uv_bin(), *BUILDPACK_SYNC], cwd=app, env=build_env, capture_output=True,
                           text=True, timeout=240)
    assert build.returncode == 0, f"uv sync failed:\n{build.stdout}{build.stderr}"
    metadata = next(python_home.glob("lib/python*/site-packages/mlresearch_bot-*.dist-info/METADATA"))
    assert {"License-Expression: MIT", "License-File: LICENSE"} <= set(metadata.read_text().splitlines())

    port = free_port()
    heroku_url = re.sub(r"^postgresql:", "postgres:", pg_schema_url)  # Heroku Postgres hands out postgres://
    env = dyno_env(app, python_home, PORT=str(port), DATABASE_URL=heroku_url, SLACK_BOT_TOKEN="xoxb-test",
                   SLACK_SIGNING_SECRET="secret", POLL_INTERVAL="0", FEED_URL=str(FEED),
                   SLACK_API_URL=UNUSED_SLACK_API)
    commands = procfile(app)

    release = subprocess.run(["bash", "-c", commands["release"]], cwd=app, env=env, capture_output=True,
                             text=True, timeout=120)
    assert release.returncode == 0, f"release failed:\n{release.stdout}{release.stderr}"
    with psycopg.connect(pg_schema_url) as db:  # the release phase, not serve, made the schema
        tables = db.execute("SELECT table_name FROM information_schema.tables"
                            " WHERE table_schema = current_schema()").fetchall()
    assert tables, "the release command created no table"

    log = tmp_path / "web.log"
    with log.open("w") as out:
        web = subprocess.Popen(["bash", "-c", commands["web"]], cwd=app, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, status = time.monotonic() + 60, 0
        while web.poll() is None and time.monotonic() < deadline:
            try:
                status = http("GET", f"http://127.0.0.1:{port}/healthz", timeout=2)[0]
            except OSError:
                status = 0
            if status == 200:
                break
            time.sleep(0.2)
        assert status == 200, f"/healthz never answered 200 (web exited {web.poll()}):\n{output_of(log)}"
        os.killpg(web.pid, signal.SIGTERM)  # a dyno restart signals every process of the dyno
        assert web.wait(timeout=30) == 0, output_of(log)
        assert "Traceback" not in output_of(log)
    finally:
        if web.poll() is None:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait()
