"""Every error the bot reports to a person, in one tree. Each message is one line (for a log line, a CLI
error or a Slack reply); `REPORTS` maps a class to its exit status and to the line the CLI prints.

    BotError                    (exit 1)
    ├── UsageError              bad usage of the command line (exit 2)
    ├── ConfigError             a missing or malformed setting; `variable` names it (exit 2)
    ├── Failure                 an operation failed; the message says what and why
    ├── FeedError               a feed (or a page read like one) could not be fetched or parsed
    │   ├── FeedNetworkError    DNS, refused connection, TLS, too many redirects, a redirect to a local host
    │   ├── FeedTimeout         connect or total time exceeded
    │   ├── FeedHTTPError       a 4xx/5xx answer (`status` holds the code)
    │   ├── FeedTooLarge        the body passed the size cap (checked while streaming)
    │   ├── FeedNotAFeed        the body parsed but is not RSS/Atom (an HTML page, say)
    │   └── FeedMalformed       broken XML, declared entities (an entity bomb), an undecodable body
    ├── IndexReadError          the research index could not be fetched or read
    │   └── ItemPageError       an item's own page could not be fetched or read (nothing of it is stored)
    ├── StoreError              the store could not be opened, read or written
    │   ├── LockTimeout         another process holds the poll lock
    │   └── RoutesStale         ingest's routing was decided before a subscription or follow changed
    ├── SearchError             a query that cannot be run (also a ValueError; exit 2)
    │   ├── SearchUnavailable   the search index is still being built
    │   └── NothingFound        no archive item is the one asked for (`related`: the CLI exits 0, as search)
    ├── SummaryError            the summary endpoint's answer cannot be used (the extractive summary is)
    │   └── SummaryStopped      the person stopped the answer (Slack's stop button): what was written stays
    ├── EmbeddingError          no vectors from the embedding model or endpoint (search uses keywords only)
    ├── SecretError             a sealed installation opens with none of the keys; never holds a token or key
    ├── WorkspaceUnavailable    no Slack client for a workspace (`reason`; `disable` stops the workspace)
    ├── InstallsBusy            /slack/install cannot issue a state now: as many installs as it keeps are open
    └── ServeError              `serve` could not start

A FeedError's `kind` ("network", "timeout", "http", "too_large", "not_a_feed", "malformed") names its class
in log lines (`event=feed_error kind=...`).
"""

from __future__ import annotations

from typing import ClassVar

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class BotError(Exception):
    """What the bot reports to a person: `str()` is the message on one line."""

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class UsageError(BotError):
    """Bad usage of the command line."""


class ConfigError(BotError):
    """A missing or malformed configuration value; `variable` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class Failure(BotError):
    """An operation failed; the message is the one line the user reads."""


class FeedError(BotError):
    """A feed could not be fetched or parsed. Raise one of the subclasses; `kind` names it in log lines."""

    kind: ClassVar[str] = "feed"

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class FeedNetworkError(FeedError):
    """DNS, a refused connection, TLS, too many redirects, a redirect to a local address, a missing file."""

    kind = "network"


class FeedTimeout(FeedError):
    """Connecting or the whole fetch took longer than allowed."""

    kind = "timeout"


class FeedHTTPError(FeedError):
    """A 4xx/5xx answer; `status` holds the code."""

    kind = "http"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message, status=status)


class FeedTooLarge(FeedError):
    """The body passed the size cap."""

    kind = "too_large"


class FeedNotAFeed(FeedError):
    """The body parsed but is not RSS or Atom."""

    kind = "not_a_feed"


class FeedMalformed(FeedError):
    """Broken XML, declared entities, or a body that could not be decoded."""

    kind = "malformed"


class IndexReadError(BotError):
    """The research index could not be read."""


class ItemPageError(IndexReadError):
    """An item's own page on the site (for its paper, code and venue) could not be fetched or read: nothing
    the page would have said is stored, and it is tried again later (`bot.item_pages`). `transient`: the
    site itself failed (a timeout, no connection, 429 or 5xx), so no other page is asked for now."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class StoreError(BotError):
    """The store could not be opened or written."""


class LockTimeout(StoreError):
    """Another process holds the poll lock."""


class RoutesStale(StoreError):
    """Ingest found the routing it was given out of date (the audience changed, or an item is new that was
    not routed): nothing was written; route again (`bot.route.ingest` does, a few times)."""


class SearchError(BotError, ValueError):
    """A query that cannot be run; the message is one line for the user."""


class SearchUnavailable(SearchError):
    """The index is still being built (start-up) after READY_WAIT seconds."""


class NothingFound(SearchError):
    """No archive item is the one a `related` asks for (a link not in the archive, words that find nothing):
    "nothing found", which the CLI answers with its message (or `[]`) and exit status 0."""


class SummaryError(BotError):
    """The abstractive summary could not be used; the extractive one is used instead."""


class SummaryStopped(SummaryError):
    """The written answer was stopped (Slack's stop button, its `stop` signal): the model's response was
    closed within a second and nothing more of it is read; the sentences already written stay."""


class EmbeddingError(BotError):
    """The embedding model could not be loaded, or the embeddings endpoint gave no usable answer; search by
    meaning falls back to keywords (or to the bundled model)."""


class SecretError(BotError):
    """A sealed record cannot be opened (no key, or none of the keys is the one it was sealed with). The
    message is one line and never holds a token or a key."""


class WorkspaceUnavailable(BotError):
    """`client_for(team_id)` has no client for a workspace (not installed, or Slack refused to refresh its
    token): its rows fail with `reason`; with `disable`, the workspace is disabled until it is reinstalled."""

    def __init__(self, reason: str, *, disable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.disable = disable


class InstallsBusy(BotError):
    """No OAuth state can be issued now: as many installs as the store keeps are in progress (a flood of
    /slack/install requests); the ones in progress are never pushed out."""


class ServeError(BotError):
    """`serve` could not start; the message is one line for the operator."""


# The exit status and the prefix of the line the CLI prints, by class; an error takes its nearest class's row.
REPORTS: dict[type[BotError], tuple[int, str]] = {
    UsageError: (EXIT_USAGE, ""),
    ConfigError: (EXIT_USAGE, "configuration error: "),
    SearchError: (EXIT_USAGE, ""),
    BotError: (EXIT_FAILED, ""),
}


def report(exc: BotError) -> tuple[int, str]:
    """The exit status for `exc` and the one line a person reads."""
    cls = next(c for c in type(exc).__mro__ if c in REPORTS)
    code, prefix = REPORTS[cls]
    return code, prefix + str(exc)
