"""The shape of a request from Slack, checked before any listener runs: over HTTP by `bot.server.Router`
(after the signature), over Socket Mode by `bot.server`'s handler (before Bolt reads the envelope's
payload). A request that fails is refused with one log line naming the reason, never a field of its body:
400 over HTTP, an empty ack over Socket Mode (so Slack does not send it again). The reasons:

- `body_not_json`, `body_not_an_object`: not what Bolt parses into a JSON object (the body, or a form's
  `payload`);
- `too_deep`: arrays and objects nested more than MAX_DEPTH deep (Slack's own payloads nest about a dozen;
  100,000 `[` made the JSON parser raise RecursionError, and a 900-deep object failed inside Bolt);
- `bad_id`, `bad_ts`: a Slack id or message timestamp, where Slack sends one (ID_FIELDS), that is not of
  Slack's shape: a team `T…` (or an organization's `E…`), a user `U…`/`W…`, a channel `C…`/`G…`/`D…`, an
  enterprise `E…`: its letter, then 1 to ID_CHARS capitals and digits; a message's timestamp
  `digits.digits` (at most 12 and 9 digits); an event's `event_ts` digits (at most 16), with or without a
  dot and up to 9 more. So nothing stores or logs an id of 200,000 characters, and PostgreSQL never refuses
  the index row of a 500,000-digit `ts`;
- `unexpected_shape`: a part Bolt or a listener reads is not of the type Slack sends (`_parts_fit`), or Bolt
  fails to read the request (its context and each listener argument are read here, as Bolt will).
"""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.context import BoltContext
from slack_bolt.request.internals import build_context, parse_body
from slack_bolt.request.payload_utils import (
    to_action,
    to_command,
    to_event,
    to_message,
    to_options,
    to_shortcut,
    to_step,
    to_view,
)

MAX_DEPTH = 48  # arrays and objects nested in a body (Slack's rich text in a message in a click: about 12)
ID_CHARS = 31  # after an id's letter (Slack's ids are 9 to 11 characters today, and may grow)
_ID = f"[A-Z0-9]{{1,{ID_CHARS}}}"
TEAM_ID = re.compile(f"[TE]{_ID}")
USER_ID = re.compile(f"[UW]{_ID}")
CHANNEL_ID = re.compile(f"[CGD]{_ID}")
ENTERPRISE_ID = re.compile(f"E{_ID}")
TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")  # a message's: seconds.micros
EVENT_TS = re.compile(r"[0-9]{1,16}(?:\.[0-9]{1,9})?")  # Slack's examples also show "1515449522000016"

# Where Slack sends an id or a timestamp (a path of keys; "*": each element of a list) and its shape. A
# value there is None, "", an object (another shape: `event.user` in user_change, checked where it is read),
# or a string of that shape.
ID_FIELDS: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    # a slash command's form, an event's envelope
    (("team_id",), TEAM_ID), (("user_id",), USER_ID), (("channel_id",), CHANNEL_ID),
    (("enterprise_id",), ENTERPRISE_ID),
    (("authorizations", "*", "team_id"), TEAM_ID), (("authorizations", "*", "user_id"), USER_ID),
    (("authorizations", "*", "enterprise_id"), ENTERPRISE_ID),
    # an interactive payload (a click, a submission, a shortcut)
    (("team", "id"), TEAM_ID), (("enterprise", "id"), ENTERPRISE_ID), (("user", "id"), USER_ID),
    (("user", "team_id"), TEAM_ID), (("channel", "id"), CHANNEL_ID),
    (("container", "channel_id"), CHANNEL_ID), (("container", "message_ts"), TS),
    (("container", "thread_ts"), TS), (("message", "ts"), TS), (("message", "thread_ts"), TS),
    # an event
    (("event", "user"), USER_ID), (("event", "team"), TEAM_ID), (("event", "channel"), CHANNEL_ID),
    (("event", "channel", "id"), CHANNEL_ID), (("event", "ts"), TS), (("event", "thread_ts"), TS),
    (("event", "event_ts"), EVENT_TS),
    (("event", "assistant_thread", "user_id"), USER_ID),
    (("event", "assistant_thread", "channel_id"), CHANNEL_ID),
    (("event", "assistant_thread", "thread_ts"), TS),
    (("event", "assistant_thread", "context", "channel_id"), CHANNEL_ID),
    (("event", "assistant_thread", "context", "team_id"), TEAM_ID),
)

# Where Slack always sends an object; Bolt's middleware and our listeners rely on it.
OBJECTS = ("event", "view")
# In an interactive payload (a click, a submission, a shortcut): objects when present and not null.
INTERACTIVE_OBJECTS = ("user", "team", "channel", "container", "message", "enterprise")
# Events whose `assistant_thread` Bolt's Assistant middleware reads.
ASSISTANT_EVENTS = ("assistant_thread_started", "assistant_thread_context_changed")
INTERACTIVE_TYPES = frozenset({"block_actions", "block_suggestion", "interactive_message", "view_submission",
                               "view_closed", "shortcut", "message_action"})
BOLT_READERS = (to_options, to_shortcut, to_action, to_view, to_command, to_event, to_message, to_step)


def misshapen_text(text: str, content_type: str | None) -> str | None:
    """Why a signed HTTP body must not reach Bolt (the reason, see the module's docstring), or None: parsed as
    Bolt parses it, then `misshapen`."""
    try:
        body = parse_body(text, content_type.split(";")[0] if content_type else None)
    except RecursionError:  # deeper than the parser's stack: far past MAX_DEPTH
        return "too_deep"
    except ValueError:  # JSONDecodeError, in the body or in its `payload` field
        return "body_not_json"
    return misshapen(body)


def misshapen(body: Any) -> str | None:
    """Why a request's parsed body (an HTTP body as Bolt parses it, or a Socket Mode envelope's payload) must
    not reach Bolt (the reason), or None."""
    if not isinstance(body, dict):
        return "body_not_an_object"
    if _deeper_than(body, MAX_DEPTH):
        return "too_deep"
    misfit = _ids_misfit(body)
    if misfit is not None:
        return misfit
    if any(key in body and not isinstance(body[key], dict) for key in OBJECTS) or not _parts_fit(body):
        return "unexpected_shape"
    try:
        build_context(BoltContext(), body)
        parts = [read(body) for read in BOLT_READERS]
    except Exception:  # noqa: BLE001 - any failure here is the body's shape, answered as such
        return "unexpected_shape"
    if any(part is not None and not isinstance(part, dict) for part in parts):
        return "unexpected_shape"
    return None


def _deeper_than(body: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` deep in `body` (without recursion)."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _ids_misfit(body: dict[str, Any]) -> str | None:
    """`bad_id` or `bad_ts` when a value in ID_FIELDS is not of its shape, else None."""
    for path, shape in ID_FIELDS:
        for value in _at(body, path):
            if value is None or value == "" or isinstance(value, dict):
                continue
            if not (isinstance(value, str) and shape.fullmatch(value)):
                return "bad_ts" if shape in (TS, EVENT_TS) else "bad_id"
    return None


def _at(value: Any, path: tuple[str, ...]) -> list[Any]:
    """The values at `path` in `value` (none where a key is missing or a step is not an object or a list)."""
    found = [value]
    for key in path:
        step: list[Any] = []
        for here in found:
            if key == "*" and isinstance(here, list):
                step.extend(here)
            elif key != "*" and isinstance(here, dict) and key in here:
                step.append(here[key])
        found = step
    return found


def _parts_fit(body: dict[str, Any]) -> bool:
    """Whether the parts of a body that Bolt's matchers and our listeners read have the shapes Slack sends:
    its `type` is a string and its `response_url` (if any) an http(s) URL; an interactive payload's user,
    team, channel... are objects, and each of its `actions` an object with a string `action_id`; an assistant
    thread event's `assistant_thread` is an object with a string `channel_id` and `thread_ts`; an
    `app_context_changed` event's `context` is an object and its `entities` a list (entities of odd shapes
    in it are the listener's to skip: one log line, a 2xx ack, as issue 52 asks); a
    `tokens_revoked` event's `tokens` is an object of lists of strings."""
    kind = body.get("type")
    if kind is not None and not isinstance(kind, str):
        return False
    url = body.get("response_url")
    if url not in (None, "") and not (isinstance(url, str) and url.startswith(("https://", "http://"))):
        return False
    if kind in INTERACTIVE_TYPES:
        if any(body.get(key) is not None and not isinstance(body[key], dict) for key in INTERACTIVE_OBJECTS):
            return False
        actions, key = body.get("actions"), "action_id" if kind == "block_actions" else "name"
        if actions is not None and not (isinstance(actions, list) and all(
                isinstance(a, dict) and isinstance(a.get(key), str) for a in actions)):
            return False
    event = body.get("event")
    if not isinstance(event, dict):
        return True
    if event.get("type") in ASSISTANT_EVENTS:
        thread = event.get("assistant_thread")
        if not (isinstance(thread, dict) and isinstance(thread.get("context", {}), dict)
                and all(isinstance(thread.get(key), str) for key in ("channel_id", "thread_ts"))):
            return False
    if event.get("type") == "app_context_changed":
        context = event.get("context")
        entities = context.get("entities") if isinstance(context, dict) else None
        if not (context is None or isinstance(context, dict)):
            return False
        if entities is not None and not isinstance(entities, list):
            return False
    if "tokens" in event:
        tokens = event["tokens"]
        if not (isinstance(tokens, dict) and all(
                isinstance(v, list) and all(isinstance(x, str) for x in v) for v in tokens.values())):
            return False
    return True
