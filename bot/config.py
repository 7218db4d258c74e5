"""Settings: the only reader of the environment.

`Settings.from_env(environ)` builds a frozen `Settings` from an explicit mapping and raises `ConfigError`
(naming the variable) for a malformed value. Required values are checked where they are needed
(`require_slack`), so `poll` and `search` work without Slack credentials.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

DEFAULT_FEED_URL = "https://machinelearning.apple.com/rss.xml"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_DATABASE_URL = "sqlite:///mlresearch.db"

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class ConfigError(Exception):
    """A missing or malformed configuration value; `variable` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


@dataclass(frozen=True)
class Settings:
    slack_bot_token: str | None = None
    slack_signing_secret: str | None = None
    slack_app_token: str | None = None
    slack_api_url: str = DEFAULT_SLACK_API_URL
    feed_url: str = DEFAULT_FEED_URL
    database_url: str = DEFAULT_DATABASE_URL
    poll_interval: int = 600
    port: int = 3000
    log_level: str = "INFO"
    summary_api_url: str | None = None
    summary_api_key: str | None = None
    summary_model: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        def get(name: str) -> str | None:
            value = environ.get(name)
            if value is None:
                return None
            value = value.strip()
            return value or None

        token = get("SLACK_BOT_TOKEN")
        if token is not None and not token.startswith("xoxb-"):
            raise ConfigError("SLACK_BOT_TOKEN", "must be a bot token starting with 'xoxb-'")
        app_token = get("SLACK_APP_TOKEN")
        if app_token is not None and not app_token.startswith("xapp-"):
            raise ConfigError("SLACK_APP_TOKEN", "must be an app-level token starting with 'xapp-'")

        api_url = get("SLACK_API_URL") or DEFAULT_SLACK_API_URL
        if urlparse(api_url).scheme not in ("http", "https") or not urlparse(api_url).netloc:
            raise ConfigError("SLACK_API_URL", f"must be an http(s) URL, got {api_url!r}")
        if not api_url.endswith("/"):
            api_url += "/"

        feed_url = get("FEED_URL") or DEFAULT_FEED_URL
        _check_feed_url(feed_url)

        database_url = get("DATABASE_URL") or DEFAULT_DATABASE_URL
        _check_database_url(database_url)

        level = (get("LOG_LEVEL") or "INFO").upper()
        if level not in LOG_LEVELS:
            raise ConfigError("LOG_LEVEL", f"must be one of {', '.join(LOG_LEVELS)}, got {level!r}")

        summary_url = get("SUMMARY_API_URL")
        if summary_url is not None and urlparse(summary_url).scheme not in ("http", "https"):
            raise ConfigError("SUMMARY_API_URL", f"must be an http(s) URL, got {summary_url!r}")

        return cls(
            slack_bot_token=token,
            slack_signing_secret=get("SLACK_SIGNING_SECRET"),
            slack_app_token=app_token,
            slack_api_url=api_url,
            feed_url=feed_url,
            database_url=database_url,
            poll_interval=_int(get("POLL_INTERVAL"), "POLL_INTERVAL", 600, minimum=0),
            port=_int(get("PORT"), "PORT", 3000, minimum=1, maximum=65535),
            log_level=level,
            summary_api_url=summary_url,
            summary_api_key=get("SUMMARY_API_KEY"),
            summary_model=get("SUMMARY_MODEL"),
        )

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file named by `database_url` (relative paths are relative to the working directory)."""
        return sqlite_path(self.database_url)

    def missing_slack(self) -> list[str]:
        """The Slack variables `serve` needs that are not set."""
        missing = []
        if not self.slack_bot_token:
            missing.append("SLACK_BOT_TOKEN")
        if not self.slack_signing_secret and not self.slack_app_token:
            missing.append("SLACK_SIGNING_SECRET")
        return missing

    @property
    def summary_enabled(self) -> bool:
        return self.summary_api_url is not None

    @property
    def logging_level(self) -> int:
        return int(getattr(logging, self.log_level))


def load_environment(dotenv_path: str | os.PathLike[str] = ".env") -> dict[str, str]:
    """The process environment over the values of a `.env` file (the real environment wins)."""
    from dotenv import dotenv_values

    merged: dict[str, str] = {}
    if Path(dotenv_path).is_file():
        merged.update({k: v for k, v in dotenv_values(dotenv_path).items() if v is not None})
    merged.update(os.environ)
    return merged


def sqlite_path(database_url: str) -> Path:
    if not database_url.startswith("sqlite:///"):
        raise ConfigError("DATABASE_URL", "only sqlite:/// URLs name a SQLite file")
    rest = database_url[len("sqlite:///") :]
    return Path(rest) if rest.startswith("/") else Path(rest)


def _check_database_url(url: str) -> None:
    if url.startswith("sqlite:///"):
        rest = url[len("sqlite:///") :]
        if not rest or rest == "/" or rest.endswith("/"):
            raise ConfigError(
                "DATABASE_URL", f"needs a file name, as in sqlite:///mlresearch.db; got {url!r}"
            )
        if rest.startswith(":memory:") or "?" in rest:
            raise ConfigError(
                "DATABASE_URL", f"must name a database file (no :memory:, no options); got {url!r}"
            )
        return
    if url.startswith(("postgres://", "postgresql://")):
        raise ConfigError("DATABASE_URL", "PostgreSQL is not supported yet; use sqlite:///path.db")
    raise ConfigError(
        "DATABASE_URL",
        f"must be sqlite:///relative.db or sqlite:////absolute/path.db, got {url!r}",
    )


def _check_feed_url(url: str) -> None:
    scheme = urlparse(url).scheme
    if scheme in ("http", "https"):
        if not urlparse(url).netloc:
            raise ConfigError("FEED_URL", f"has no host: {url!r}")
        return
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        return
    raise ConfigError("FEED_URL", f"must be an http(s):// URL, a file:// URL or a path, got {url!r}")


def _int(raw: str | None, name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(name, f"must be a whole number, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise ConfigError(name, f"must be {bound}, got {value}")
    return value
