"""The Slack Web API as the bot uses it: a WebClient with retry handlers, and Slack's error strings sorted by
what they mean for a post.

Retries: on 429, wait Retry-After (slack_sdk's RateLimitErrorRetryHandler, up to 4 times); on 5xx and broken
connections, back off exponentially (up to 2 times). A post is never retried blindly after a 5xx or a broken
connection (`posting_client`): it may have landed, so the deliverer looks before it posts again.
"""

from __future__ import annotations

import copy
import http.client
import re
from collections.abc import Callable

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.http_retry.handler import RetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

# the channel is gone or closed to the bot: pause its subscription
CHANNEL_ERRORS = frozenset({
    "channel_not_found", "is_archived", "not_in_channel", "restricted_action",
    "restricted_action_read_only_channel", "restricted_action_thread_only_channel",
})
# the token no longer works (or lacks chat:write): stop delivering to the workspace
WORKSPACE_ERRORS = frozenset({
    "invalid_auth", "token_revoked", "account_inactive", "not_authed", "token_expired", "team_not_found",
    "missing_scope", "ekm_access_denied",
})
# Slack refused a message's metadata (chat.postMessage's errors, and entity.presentDetails' invalid_metadata):
# a post's Work Object entities (bot.entities) are dropped and the event metadata kept
METADATA_ERRORS = frozenset({"invalid_metadata", "invalid_metadata_format", "invalid_metadata_schema",
                             "metadata_too_large"})
# Slack refused the blocks, or the metadata: post once more as text only, with the event metadata alone
BLOCKS_ERRORS = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long",
                           *METADATA_ERRORS})
# the post may or may not have landed
UNKNOWN_FATE_ERRORS = frozenset({"internal_error", "fatal_error"})
# the post did not land; try again later
NOT_SENT_ERRORS = frozenset({"ratelimited", "rate_limited", "service_unavailable", "request_timeout"})
# conversations.history cannot be read: reconciliation is impossible
NO_HISTORY_ERRORS = frozenset({
    "missing_scope", "not_allowed_token_type", "no_permission", "not_in_channel", "channel_not_found",
    "access_denied",
})
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)  # URLError, resets and timeouts are OSErrors


def make_client(token: str, base_url: str, *, backoff: float = 0.5, timeout: int = 15) -> WebClient:
    """A WebClient for one workspace: honours Retry-After on 429, retries 5xx and connection errors with
    exponential backoff (the deliverer does its own, reconciling, retries for chat.postMessage)."""
    interval = BackoffRetryIntervalCalculator(backoff_factor=backoff)
    return WebClient(
        token=token,
        base_url=base_url,
        timeout=timeout,
        retry_handlers=[
            RateLimitErrorRetryHandler(max_retry_count=4),
            ServerErrorRetryHandler(max_retry_count=2, interval_calculator=interval),
            ConnectionErrorRetryHandler(max_retry_count=2, interval_calculator=interval),
        ],
    )


def posting_client(client: WebClient, on_ratelimited: Callable[[float], None] | None = None) -> WebClient:
    """The same client for chat.postMessage: it keeps the 429 retries (nothing was posted) but not blind
    retries of 5xx and broken connections (something may have been posted; the deliverer reconciles). With
    `on_ratelimited`, a 429 is not waited out in the calling thread: it is handed Retry-After (seconds) and
    the call fails with the 429 at once (workers share the wait through the database)."""
    clone = copy.copy(client)
    if on_ratelimited is not None:
        clone.retry_handlers = [SharedRateLimit(on_ratelimited)]
    else:
        clone.retry_handlers = [h for h in client.retry_handlers if isinstance(h, RateLimitErrorRetryHandler)]
    return clone


def fate_unknown(code: str, status: int) -> bool:
    """Whether a failed post may have landed all the same: a 5xx, a broken connection or timeout (status
    below 0: no answer), or Slack's internal_error / fatal_error. Such a post is never repeated blindly: the
    channel's history is read first."""
    return status >= 500 or status < 0 or code in UNKNOWN_FATE_ERRORS
class SharedRateLimit(RetryHandler):
    """A 429 is reported (its Retry-After, 1 s when absent) and never retried here."""

    def __init__(self, on_ratelimited: Callable[[float], None]) -> None:
        super().__init__(max_retry_count=0)
        self.on_ratelimited = on_ratelimited

    def can_retry(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                   error: Exception | None = None) -> bool:
        if response is not None and response.status_code == 429:
            values = next((v for k, v in response.headers.items() if k.lower() == "retry-after"), None)
            try:
                seconds = float((values or ["1"])[0])
            except ValueError:
                seconds = 1.0
            self.on_ratelimited(min(max(seconds, 0.0), 3600.0))
        return False


def error_code(exc: SlackApiError) -> tuple[str, int]:
    """(Slack's error string, HTTP status) of a failed call."""
    response = exc.response
    data = response.data if isinstance(response.data, dict) else {}
    code, status = str(data.get("error") or "unknown_error"), int(response.status_code or 0)
    return (code if re.fullmatch(r"[a-z0-9_]+", code) else f"http_{status}"), status
