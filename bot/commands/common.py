"""What every `/mlresearch` handler gets and gives: the `Invocation` (what a slash command carries), the
`Services` (store, settings, Slack client, summarizer, search index, clock) and the `Reply`, with `line` (a
one-line answer) and `shareable` (content that gets the "Share in channel" button).

Every handler is `(rest, invocation, services) -> Reply`; `bot.commands.dispatch` names them all in one table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from msgspec import Struct, field

from bot import views
from bot.config import Settings
from bot.search.index import SearchIndex
from bot.store import Store, utcnow
from bot.summarize import Summarizer
from bot.views import Blocks

C = views.COMMAND


class Invocation(Struct, frozen=True):
    """What a slash command carries."""

    text: str
    team_id: str
    channel_id: str
    user_id: str
    channel_name: str | None = None
    response_url: str | None = None
    shown: int | None = None  # a question's count ("the latest 3 on privacy"): results shown, at most five


class Reply(Struct, frozen=True):
    text: str  # plain-text fallback (escaped feed text)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    share_value: str | None = None  # when set, `blocks` end with the "Share in channel" button
    searched_for: str | None = None  # a misspelt word was searched as typed right: what was (`dispatch` opens
    # a command's reply with it; a thread's answer says it in its header)


class Services(Struct):
    store: Store
    settings: Settings
    slack: Any = None  # a slack_sdk.WebClient, for conversations.info
    summarizer: Summarizer | None = None  # None: extractive summaries only
    index: SearchIndex = None  # type: ignore[assignment]  # None: one built from the store on first search
    clock: Callable[[], datetime] = utcnow  # what digest schedules count from

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = SearchIndex(self.store)


def line(message: str) -> Reply:
    """A one-line answer; `message` is mrkdwn the caller has already escaped."""
    return Reply(*views.one_line(message))


def shareable(message: tuple[str, Blocks], searched_for: str | None = None) -> Reply:
    """Content worth sharing, marked by an empty `share_value`: `dispatch` fills it in and adds the button
    (or, when the reply is being shared, the "shared by" line)."""
    return Reply(message[0], message[1], share_value="", searched_for=searched_for)
