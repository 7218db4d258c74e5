"""OAuth tokens at rest: with TOKEN_ENCRYPTION_KEY set, the stored installation holds no token (read back
with plain sqlite3 / psycopg); without it, rows are stored as before; plain rows stay readable and are sealed
when saved or by `migrate`; keys rotate (the first seals, every one opens); a row no key opens is one log
line and a reason, never a traceback or a token; a malformed key is a configuration error. Both backends."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet
from slack_sdk import WebClient
from slack_sdk.oauth.installation_store import Installation

from bot import deliver, oauth
from bot.config import Settings
from bot.errors import ConfigError
from bot.oauth import StoreInstallations, WorkspaceClients
from bot.secrets_at_rest import TokenCipher
from bot.store import Store
from tests.fakes.slack_sender import ROOT, clean_env

KEY_A = Fernet.generate_key().decode()
KEY_B = Fernet.generate_key().decode()
BOT_TOKEN = "xoxb-111-secret-bot-token"
REFRESH_TOKEN = "xoxe-1-secret-refresh-token"


def installation(team: str = "T1") -> Installation:
    return Installation(app_id="A1", team_id=team, team_name="One", bot_token=BOT_TOKEN, bot_id="B1",
                        bot_user_id="UBOT", bot_scopes="commands,chat:write", bot_refresh_token=REFRESH_TOKEN,
                        bot_token_expires_at=4_000_000_000, user_id="U1")


def raw_rows(database_url: str) -> list[str]:
    """The installations' `data` column as the database holds it, read without the bot's code."""
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url[len("sqlite:///"):]) as conn:
            return [row[0] for row in conn.execute("SELECT data FROM installations")]
    with psycopg.connect(database_url) as conn:
        return [row[0] for row in conn.execute("SELECT data FROM installations")]


def installations(store: Store, *keys: str) -> StoreInstallations:
    return StoreInstallations(store, cipher=TokenCipher.of(keys))


def settings(*keys: str) -> Settings:
    return Settings(slack_client_id="1.2", slack_client_secret="s", slack_api_url="http://127.0.0.1:9/",
                    token_encryption_keys=keys)


def bot_token(store: Store, *keys: str) -> str | None:
    found = installations(store, *keys).find_installation(enterprise_id=None, team_id="T1")
    return found.bot_token if found is not None else None


def migrate(database_url: str, key: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(DATABASE_URL=database_url, TOKEN_ENCRYPTION_KEY=key)
    return subprocess.run([sys.executable, "-m", "bot", "migrate"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_with_a_key_the_stored_installation_holds_no_token(store: Store, database_url: str) -> None:
    # Saved through the OAuth flow's own installation store (oauth_settings wires the key in).
    flow = oauth.oauth_settings(settings(KEY_A), store, WebClient(base_url="http://127.0.0.1:9/"))
    flow.installation_store.save(installation())

    [row] = raw_rows(database_url)
    # Whole values, not fragments: the ciphertext's base64 may hold "xox" by chance (it did, 1 run in ~1,000).
    assert BOT_TOKEN not in row and REFRESH_TOKEN not in row and '"UBOT"' not in row and "secret-" not in row
    assert bot_token(store, KEY_A) == BOT_TOKEN
    client = WorkspaceClients(store, settings(KEY_A))("T1")
    assert client.token == BOT_TOKEN


def test_without_a_key_installations_are_stored_as_before(store: Store, database_url: str) -> None:
    flow = oauth.oauth_settings(settings(), store, WebClient(base_url="http://127.0.0.1:9/"))
    flow.installation_store.save(installation())

    [row] = raw_rows(database_url)
    assert BOT_TOKEN in row and REFRESH_TOKEN in row
    assert bot_token(store) == BOT_TOKEN


def test_a_plain_row_is_read_with_a_key_and_sealed_when_saved(store: Store, database_url: str) -> None:
    installations(store).save(installation())  # before TOKEN_ENCRYPTION_KEY was set
    assert bot_token(store, KEY_A) == BOT_TOKEN

    sealed = installations(store, KEY_A)
    found = sealed.find_installation(enterprise_id=None, team_id="T1")
    assert found is not None
    sealed.save(found)  # a token refresh or a reinstall saves it again
    assert BOT_TOKEN not in raw_rows(database_url)[0]
    assert bot_token(store, KEY_A) == BOT_TOKEN


def test_migrate_seals_plain_rows_and_rotates_to_the_first_key(store: Store, database_url: str) -> None:
    installations(store).save(installation("T1"))  # plain
    installations(store, KEY_A).save(installation("T2"))  # sealed with the old key

    done = migrate(database_url, f"{KEY_B},{KEY_A}")  # the new key first
    assert done.returncode == 0, done.stderr
    assert "2 encrypted" in done.stdout and done.stderr == ""
    assert all(BOT_TOKEN not in row for row in raw_rows(database_url))

    # The old key is dropped: everything opens with the new one alone, nothing with the old one alone.
    for team in ("T1", "T2"):
        found = installations(store, KEY_B).find_installation(enterprise_id=None, team_id=team)
        assert found is not None and found.bot_token == BOT_TOKEN
        assert installations(store, KEY_A).find_installation(enterprise_id=None, team_id=team) is None


@pytest.mark.parametrize("keys", [(), (KEY_B,)], ids=["no-key", "wrong-key"])
def test_a_row_no_key_opens_is_one_line_and_never_a_token(
    store: Store, keys: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    installations(store, KEY_A).save(installation())
    caplog.set_level(logging.DEBUG)

    assert installations(store, *keys).find_installation(enterprise_id=None, team_id="T1") is None
    with pytest.raises(deliver.WorkspaceUnavailable) as unavailable:
        WorkspaceClients(store, settings(*keys))("T1")

    assert unavailable.value.reason.startswith("installation_unreadable: ")
    assert "TOKEN_ENCRYPTION_KEY" in unavailable.value.reason
    lines = [r.getMessage() for r in caplog.records]
    assert [line for line in lines if "event=installation_unreadable" in line]
    assert all("\n" not in line for line in lines)
    assert "Traceback" not in caplog.text and "xox" not in caplog.text
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("keys", ["", KEY_B], ids=["no-key", "wrong-key"])
def test_migrate_fails_in_one_line_when_an_installation_cannot_be_decrypted(
    store: Store, database_url: str, keys: str
) -> None:
    """A release phase (`release: mlresearch-bot migrate`) must fail loudly rather than deploy a bot whose
    every delivery then fails."""
    installations(store, KEY_A).save(installation())
    before = raw_rows(database_url)

    done = migrate(database_url, keys)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "1 installation(s) cannot be decrypted" in done.stderr
    assert "TOKEN_ENCRYPTION_KEY" in done.stderr and "Traceback" not in done.stderr
    assert raw_rows(database_url) == before  # left as it was
    assert migrate(database_url, f"{KEY_B},{KEY_A}").returncode == 0  # the right key (second) opens it


def test_a_malformed_key_is_a_configuration_error(tmp_path: Path) -> None:
    for bad in ("not-a-key", KEY_A[:-2], f"{KEY_A},short", KEY_A.replace("-", "+").replace("_", "/") + "x"):
        with pytest.raises(ConfigError) as error:
            Settings.from_env({"TOKEN_ENCRYPTION_KEY": bad})
        assert error.value.variable == "TOKEN_ENCRYPTION_KEY"
    assert Settings.from_env({"TOKEN_ENCRYPTION_KEY": f" {KEY_A} , {KEY_B} "}).token_encryption_keys == (
        KEY_A, KEY_B)
    assert Settings.from_env({}).token_encryption_keys == ()

    done = migrate(f"sqlite:///{tmp_path / 'bot.db'}", "abc-not-a-key")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "TOKEN_ENCRYPTION_KEY" in done.stderr
    assert "Traceback" not in done.stderr and "abc-not-a-key" not in done.stderr
