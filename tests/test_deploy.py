"""The deploy files agree with the code: every variable the config reads is documented in .env.example and
offered by app.json (but those Heroku sets itself), the Procfile runs the contract's commands, and the
manifest and app.json are valid JSON with what an admin needs."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SET_BY_HEROKU = {"DATABASE_URL", "PORT"}


def config_variables() -> set[str]:
    source = (ROOT / "bot" / "config.py").read_text()
    return set(re.findall(r'get\("([A-Z_]+)"\)', source))


def env_example_variables() -> set[str]:
    text = (ROOT / ".env.example").read_text()
    return set(re.findall(r"^([A-Z_]+)=", text, re.MULTILINE))


def test_config_reads_the_contract_variables() -> None:
    contract = {
        "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN", "SLACK_API_URL", "FEED_URL",
        "DATABASE_URL", "POLL_INTERVAL", "PORT", "LOG_LEVEL", "SUMMARY_API_URL", "SUMMARY_API_KEY",
        "SUMMARY_MODEL",
    }
    assert contract <= config_variables()


def test_env_example_documents_every_variable_with_a_comment() -> None:
    assert config_variables() <= env_example_variables()
    lines = (ROOT / ".env.example").read_text().splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^[A-Z_]+=", line):
            assert lines[index - 1].startswith("#"), f"{line.split('=')[0]} has no comment above it"


def test_env_example_holds_no_secret_values() -> None:
    for line in (ROOT / ".env.example").read_text().splitlines():
        assert not re.search(r"=(xox[abp]-|xapp-)\S+", line), line


def test_app_json_offers_every_variable_heroku_does_not_set() -> None:
    app = json.loads((ROOT / "app.json").read_text())
    assert config_variables() - SET_BY_HEROKU <= set(app["env"])
    assert all(v.get("description") for v in app["env"].values())
    assert any(a["plan"].startswith("heroku-postgresql") for a in app["addons"])


def test_app_json_deploys_before_the_slack_app_exists() -> None:
    """The deploy button comes first (the Slack app needs its URL): it may ask only for what has a default."""
    app = json.loads((ROOT / "app.json").read_text())
    needed = [name for name, v in app["env"].items()
              if v.get("required") and not ("value" in v or "generator" in v)]
    assert needed == []


def test_procfile_runs_serve_and_migrates_on_release() -> None:
    lines = dict(line.split(":", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line.strip())
    assert lines["web"].strip() == "mlresearch-bot serve"
    assert lines["release"].strip() == "mlresearch-bot migrate"
    assert lines["worker"].strip() == "mlresearch-bot worker"


def test_app_json_deploys_one_web_dyno_and_no_worker_until_scaled() -> None:
    """A one-dyno deployment is as before: the web dyno delivers until worker dynos are added."""
    formation = json.loads((ROOT / "app.json").read_text())["formation"]
    assert formation["web"]["quantity"] == 1 and formation["worker"]["quantity"] == 0


def test_manifest_declares_command_scopes_events_and_home() -> None:
    manifest = json.loads((ROOT / "manifest.json").read_text())
    assert manifest["features"]["slash_commands"][0]["command"] == "/mlresearch"
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "channels:history", "groups:history"} <= scopes
    assert manifest["features"]["app_home"]["home_tab_enabled"] is True
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_home_opened", "app_uninstalled", "tokens_revoked"} <= events
    assert manifest["settings"]["interactivity"]["is_enabled"] is True


def test_gitignore_keeps_env_and_databases_out() -> None:
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert ".env" in ignored and "*.db" in ignored
