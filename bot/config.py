"""Settings: the only reader of the environment.

`Settings.from_env(environ)` builds a frozen `Settings` from an explicit mapping and raises `ConfigError`
(naming the variable) for a malformed value. Required values are checked where they are needed
(`require_slack`), so `poll` and `search` work without Slack credentials.
"""

from __future__ import annotations

import base64
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse, urlsplit, urlunsplit

from msgspec import Struct

from bot.errors import ConfigError

DEFAULT_FEED_URL = "https://machinelearning.apple.com/rss.xml"
DEFAULT_SLACK_API_URL = "https://slack.com/api/"
DEFAULT_DATABASE_URL = "sqlite:///mlresearch.db"
# The bot scopes of manifest.json (requested at a multi-workspace install unless SLACK_SCOPES says otherwise).
DEFAULT_SLACK_SCOPES = ("commands", "chat:write", "app_mentions:read", "im:history", "im:write",
                        "files:write", "assistant:write", "channels:history", "groups:history",
                        "channels:read", "groups:read", "users:read", "links:read", "links:write")

DEFAULT_BURST_THRESHOLD = 5
DEFAULT_WORKER_LEASE = 30

LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class Settings(Struct, frozen=True):
    slack_bot_token: str | None = None
    slack_signing_secret: str | None = None
    slack_app_token: str | None = None
    slack_api_url: str = DEFAULT_SLACK_API_URL
    feed_url: str = DEFAULT_FEED_URL
    database_url: str = DEFAULT_DATABASE_URL
    poll_interval: int = 600
    port_text: str | None = None  # PORT as given: checked by `port`, which only `serve` asks for
    log_level: str = "INFO"
    summary_api_url: str | None = None
    summary_api_key: str | None = None
    summary_model: str | None = None
    embeddings_api_url: str | None = None
    embeddings_api_key: str | None = None
    embeddings_model: str | None = None
    slack_client_id: str | None = None
    slack_client_secret: str | None = None
    slack_scopes: tuple[str, ...] = DEFAULT_SLACK_SCOPES
    # TOKEN_ENCRYPTION_KEY: Fernet keys, the first encrypts stored OAuth tokens, every one decrypts (rotation)
    token_encryption_keys: tuple[str, ...] = ()
    # BURST_THRESHOLD: more new items than this for one channel in one poll are posted as one message with
    # the items in its thread
    burst_threshold: int = DEFAULT_BURST_THRESHOLD
    # on Heroku (DYNO is set), requests reach `serve` only through its router, which appends the client's
    # address to X-Forwarded-For: that address is the client (the install limit counts per client)
    behind_router: bool = False
    # WORKER_LEASE: seconds a worker's channel claims outlive it (a SIGKILLed dyno); then another worker
    # reconciles and posts them (bot.worker)
    worker_lease: int = DEFAULT_WORKER_LEASE

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
        client_id, client_secret = get("SLACK_CLIENT_ID"), get("SLACK_CLIENT_SECRET")
        if (client_id is None) != (client_secret is None):
            given, missing = ("SLACK_CLIENT_ID", "SLACK_CLIENT_SECRET") if client_secret is None \
                else ("SLACK_CLIENT_SECRET", "SLACK_CLIENT_ID")
            raise ConfigError(missing, f"must be set with {given} (both for a multi-workspace install, "
                                       "or neither)")
        scopes = _scopes(get("SLACK_SCOPES"))
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

        embeddings_url = get("EMBEDDINGS_API_URL")
        if embeddings_url is not None and urlparse(embeddings_url).scheme not in ("http", "https"):
            raise ConfigError("EMBEDDINGS_API_URL", f"must be an http(s) URL, got {embeddings_url!r}")

        return cls(
            slack_bot_token=token,
            slack_signing_secret=get("SLACK_SIGNING_SECRET"),
            slack_app_token=app_token,
            slack_api_url=api_url,
            feed_url=feed_url,
            database_url=database_url,
            poll_interval=_int(get("POLL_INTERVAL"), "POLL_INTERVAL", 600, minimum=0),
            port_text=get("PORT"),
            log_level=level,
            summary_api_url=summary_url,
            summary_api_key=get("SUMMARY_API_KEY"),
            summary_model=get("SUMMARY_MODEL"),
            embeddings_api_url=embeddings_url,
            embeddings_api_key=get("EMBEDDINGS_API_KEY"),
            embeddings_model=get("EMBEDDINGS_MODEL"),
            slack_client_id=client_id,
            slack_client_secret=client_secret,
            slack_scopes=scopes,
            token_encryption_keys=_fernet_keys(get("TOKEN_ENCRYPTION_KEY")),
            burst_threshold=_int(get("BURST_THRESHOLD"), "BURST_THRESHOLD", DEFAULT_BURST_THRESHOLD,
                                 minimum=1),
            behind_router="DYNO" in environ,  # set by Heroku on every dyno: not a setting of ours
            worker_lease=_int(get("WORKER_LEASE"), "WORKER_LEASE", DEFAULT_WORKER_LEASE, minimum=5,
                              maximum=3600),
        )

    @property
    def sqlite_path(self) -> Path:
        """The SQLite file named by `database_url` (relative paths are relative to the working directory)."""
        return sqlite_path(self.database_url)

    @property
    def port(self) -> int:
        """The HTTP port of `serve`; ConfigError naming PORT for a malformed value. Checked when asked for,
        not in `from_env`: a setting only the server uses never stops `poll` or `search`."""
        return _int(self.port_text, "PORT", 3000, minimum=1, maximum=65535)

    @property
    def oauth_enabled(self) -> bool:
        """Multi-workspace mode: workspaces install the app through /slack/install (Bolt's OAuth flow), and
        each is served with its own token; SLACK_BOT_TOKEN is not used."""
        return bool(self.slack_client_id and self.slack_client_secret)

    def missing_slack(self) -> list[str]:
        """The Slack variables `serve` needs that are not set."""
        missing = []
        if not self.slack_bot_token and not self.oauth_enabled:
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
    merged: dict[str, str] = {}
    if Path(dotenv_path).is_file():
        from dotenv import dotenv_values  # ~7 ms of every start with its imports: only when there is a file

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
        parts = urlparse(url)
        try:
            port = parts.port
        except ValueError:
            given = parts.netloc.rpartition("@")[2].rpartition("]")[2].rpartition(":")[2]
            raise ConfigError(
                "DATABASE_URL", f"the port must be a number from 1 to 65535, got {given[:20]!r} in "
                f"{redact_url(url)!r}"
            ) from None
        if not parts.hostname or port == -1 or not parts.path.strip("/"):
            raise ConfigError(
                "DATABASE_URL", "a PostgreSQL URL needs a host and a database, as in "
                f"postgres://user:password@host:5432/dbname; got {redact_url(url)!r}"
            )
        return
    raise ConfigError(
        "DATABASE_URL",
        "must be sqlite:///relative.db, sqlite:////absolute/path.db or postgres://user:password@host/dbname, "
        f"got {redact_url(url)!r}",
    )


def redact_url(url: str) -> str:
    """A URL fit to show (status, logs, errors): its `user:password@` and its query string become `***`. A
    local path, or a URL with neither, is returned as is."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unparsable URL (a bad IPv6 literal): keep only what cannot hold a secret
        return "***"
    if not parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    return urlunsplit((parts.scheme, netloc, parts.path, "***" if parts.query else "", parts.fragment))


def _fernet_keys(raw: str | None) -> tuple[str, ...]:
    """TOKEN_ENCRYPTION_KEY: one or more comma-separated Fernet keys (32 bytes, url-safe base64)."""
    if raw is None:
        return ()
    keys = tuple(dict.fromkeys(k.strip() for k in raw.split(",") if k.strip()))
    for n, key in enumerate(keys, 1):
        try:
            valid = len(base64.b64decode(key, altchars=b"-_", validate=True)) == 32
        except ValueError:
            valid = False
        if not valid:
            raise ConfigError("TOKEN_ENCRYPTION_KEY",
                              f"key {n} of {len(keys)} is not a Fernet key (32 bytes in url-safe base64, "
                              "44 characters); make one with: python -c \"from cryptography.fernet import "
                              "Fernet; print(Fernet.generate_key().decode())\"")
    if not keys:
        raise ConfigError("TOKEN_ENCRYPTION_KEY",
                          "holds no key; leave it unset, or set comma-separated Fernet keys")
    return keys


def _scopes(raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return DEFAULT_SLACK_SCOPES
    scopes = tuple(dict.fromkeys(s.strip() for s in raw.split(",") if s.strip()))
    bad = [s for s in scopes if not re.fullmatch(r"[a-z][a-z0-9_.:-]*", s)]
    if not scopes or bad:
        raise ConfigError("SLACK_SCOPES", f"must be comma-separated bot scopes such as chat:write,commands; "
                                          f"got {raw!r}")
    return scopes


# A host name at the start of a FEED_URL without a scheme ("machinelearning.apple.com/rss.xml"): a web address
# missing its https://, not a file name (a name ending as a feed file does, "rss.xml", is taken for a file).
_HOST_LIKE = re.compile(
    r"(?:www\.)?(?:[a-z0-9-]+\.)+(?!(?:xml|rss|atom|json|txt|html?)(?:$|/))[a-z]{2,}(?::[0-9]+)?(?:/|$)",
    re.IGNORECASE,
)


def _check_feed_url(url: str) -> None:
    scheme = urlparse(url).scheme
    if scheme in ("http", "https"):
        if not urlparse(url).netloc:
            raise ConfigError("FEED_URL", f"has no host: {url!r}")
        return
    if scheme not in ("http", "https", "file") and _HOST_LIKE.match(url) and not Path(url).exists():
        raise ConfigError("FEED_URL", f"{url[:200]!r} has no scheme (and is no file here): write "
                                      f"https://{url[:200]}")
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
