"""bot.config: Settings from an explicit mapping; a malformed value is a ConfigError naming its variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Settings, load_environment, sqlite_path
from bot.errors import ConfigError


def test_defaults_need_no_environment():
    s = Settings.from_env({})
    assert s.feed_url == "https://machinelearning.apple.com/rss.xml"
    assert s.database_url == "sqlite:///mlresearch.db"
    assert (s.poll_interval, s.port, s.log_level) == (600, 3000, "INFO")
    assert s.slack_api_url == "https://slack.com/api/"
    assert s.slack_bot_token is None and not s.summary_enabled


def test_values_are_read_and_normalized():
    s = Settings.from_env(
        {
            "FEED_URL": " https://example.com/feed.xml ",
            "POLL_INTERVAL": "0",
            "PORT": "8080",
            "LOG_LEVEL": "debug",
            "SLACK_API_URL": "http://127.0.0.1:9000/api",
            "SLACK_BOT_TOKEN": "xoxb-1",
            "SLACK_APP_TOKEN": "xapp-1",
        }
    )
    assert s.feed_url == "https://example.com/feed.xml"
    assert (s.poll_interval, s.port, s.log_level) == (0, 8080, "DEBUG")
    assert s.slack_api_url == "http://127.0.0.1:9000/api/"


def test_blank_values_fall_back_to_defaults():
    assert Settings.from_env({"PORT": "  ", "FEED_URL": ""}).port == 3000


@pytest.mark.parametrize(
    "feed_url",
    [
        "https://machinelearning.apple.com/rss.xml",
        "http://127.0.0.1:8000/rss.xml",
        "file:///tmp/rss.xml",
        "/tmp/rss.xml",
        "tests/data/apple_ml_rss.xml",
        "rss.xml",
    ],
)
def test_feed_url_may_be_http_a_file_url_or_a_plain_path(feed_url):
    assert Settings.from_env({"FEED_URL": feed_url}).feed_url == feed_url


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("POLL_INTERVAL", "ten"),
        ("POLL_INTERVAL", "-1"),
        ("POLL_INTERVAL", "1.5"),
        ("FEED_URL", "ftp://example.com/rss"),
        ("FEED_URL", "https://"),
        ("FEED_URL", "gopher://x"),
        ("DATABASE_URL", "postgres://u@h"),
        ("DATABASE_URL", "postgresql://u:pw@:5432/db"),
        ("DATABASE_URL", "postgres://u:pw@h:port/db"),
        ("DATABASE_URL", "mysql://x"),
        ("DATABASE_URL", "sqlite:///"),
        ("DATABASE_URL", "sqlite:///dir/"),
        ("DATABASE_URL", "sqlite:///:memory:"),
        ("DATABASE_URL", "x.db"),
        ("LOG_LEVEL", "LOUD"),
        ("SLACK_BOT_TOKEN", "xoxp-123"),
        ("SLACK_APP_TOKEN", "xoxb-123"),
        ("SLACK_API_URL", "slack.com/api"),
        ("SUMMARY_API_URL", "ftp://x"),
    ],
)
def test_a_malformed_value_is_a_one_line_error_naming_the_variable(variable, value):
    with pytest.raises(ConfigError) as err:
        Settings.from_env({variable: value})
    assert err.value.variable == variable
    assert str(err.value).startswith(variable)
    assert "\n" not in str(err.value)


def test_sqlite_urls_name_relative_and_absolute_files():
    assert sqlite_path("sqlite:///mlresearch.db") == Path("mlresearch.db")
    assert sqlite_path("sqlite:////var/data/bot.db") == Path("/var/data/bot.db")
    assert Settings.from_env({"DATABASE_URL": "sqlite:///data/x.db"}).sqlite_path == Path("data/x.db")


@pytest.mark.parametrize("url", [
    "postgres://u:pw@ec2-1-2-3-4.compute-1.amazonaws.com:5432/d8abc",  # as Heroku Postgres sets it
    "postgresql://postgres@127.0.0.1:5432/test",
    "postgresql://postgres@127.0.0.1/test?options=-csearch_path%3Dbot",
])
def test_postgres_urls_are_accepted(url):
    assert Settings.from_env({"DATABASE_URL": url}).database_url == url


def test_a_bad_postgres_url_never_shows_its_password():
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"DATABASE_URL": "postgres://u:s3cret@h:port/db"})
    assert "s3cret" not in str(err.value)


def test_missing_slack_values_are_named_for_serve():
    assert Settings.from_env({}).missing_slack() == ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"]
    assert Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}).missing_slack() == []


def test_dotenv_is_read_and_the_real_environment_wins(tmp_path, monkeypatch):
    env = tmp_path / ".env"
    env.write_text("FEED_URL=/from/dotenv.xml\nPORT=4000\n# comment\nLOG_LEVEL=DEBUG\n")
    monkeypatch.setenv("PORT", "5000")
    monkeypatch.delenv("FEED_URL", raising=False)
    merged = load_environment(env)
    assert merged["FEED_URL"] == "/from/dotenv.xml"
    assert merged["PORT"] == "5000"
    assert Settings.from_env(merged).port == 5000


def test_a_missing_dotenv_is_fine(tmp_path, monkeypatch):
    monkeypatch.setenv("PORT", "5001")
    assert load_environment(tmp_path / "absent.env")["PORT"] == "5001"
