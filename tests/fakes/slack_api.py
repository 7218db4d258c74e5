"""A local stand-in for the Slack Web API, spoken to by the real slack_sdk over loopback.

    with FakeSlack(latency=0.05) as slack:          # or the `slack_api` pytest fixture
        client = WebClient(token="xoxb-test", base_url=slack.url)
        slack.fault("chat.postMessage", channel="C1", status=429, retry_after=1)
        ...
        slack.posts("C1")                            # what reached the channel, in order

Methods: auth.test, chat.postMessage (kept per channel, with ts and metadata; a reply with `thread_ts`; to a
user ID it lands in the bot's DM with that person, as Slack does), conversations.history (top-level messages
newest first, `oldest`/`latest`/`limit`/`cursor`, metadata only with include_all_metadata),
conversations.replies (a thread: its parent, then its replies oldest first, the same paging and metadata),
conversations.open (a person's DM: `dm_channel(user)`), conversations.info (every channel is a public one the
bot is in unless `slack.channels[id]` says otherwise: its fields, or None for channel_not_found),
views.publish (the published view with the fields Slack adds), users.conversations (the channels of
`slack.members` a person is in),
users.info (the people in `slack.users`, user id -> profile fields such as `tz`; anyone else is
`user_not_found`), assistant.threads.setStatus / setSuggestedPrompts / setTitle (recorded in
`calls`, answered ok), chat.startStream / appendStream / stopStream (a streamed reply: its message grows
with each chunk's markdown text in `streamed`, and stopStream adds its blocks and metadata; `stream_chunks`
lists what each call carried; outside a DM startStream needs recipient_user_id and recipient_team_id, as Slack
documents), chat.update (a bot message's text, blocks, metadata), chat.postEphemeral
(kept in `ephemerals`), chat.unfurl (kept in `unfurls`: channel and ts, or unfurl_id and source, are
required, and an `unfurls` object or a `metadata` with `entities`, or both), entity.presentDetails (kept in
`presented`: a `trigger_id`, and a flexpane `metadata` (one entity) or an `error` with a documented status).
A file upload as slack_sdk's `files_upload_v2` makes it (docs.slack.dev/reference/methods/
files.getUploadURLExternal and files.completeUploadExternal): files.getUploadURLExternal needs `filename` and
`length` (the size in bytes) and answers an `upload_url` (on this fake) and a `file_id`; the bytes are POSTed
to that URL as they are (HTTP 200 when they arrived, as many as `length` said; anything else is a non-200
answer, which Slack documents as the upload's failure); files.completeUploadExternal takes `files` (a JSON
array of `{"id", "title"}`, each a file whose bytes arrived, completed once) and an optional `channel_id`,
where the file is then shared, with `initial_comment` as its message's text; `uploads(channel)` lists what
was shared there (filename, title, comment, the bytes). Slack's pages list these methods' errors in a table
the stored copies read here do not hold: `invalid_arguments` (a required argument missing or malformed, as
Slack's common errors name it), `file_not_found` and `already_completed` are this fake's names.
Work Object entities (docs.slack.dev/messaging/work-objects-implementation), in chat.postMessage's and
chat.unfurl's `metadata.entities` and as entity.presentDetails' `metadata`, must have what Slack requires:
a known `entity_type`, `url`, `external_ref.id`, `entity_payload.attributes.title.text` (and, for an
unfurl, `app_unfurl_url`); otherwise the call is answered `invalid_metadata_schema` (a post),
`invalid_metadata` (an unfurl, a flexpane), as Slack's method pages name them. `feedback_click(...)` builds
the block_actions payload of a feedback button. Add more with
`slack.handlers["views.publish"] = fn` (fn(call) -> the JSON answer); a post is by BOT_USER/BOT_ID (what
auth.test says), or by the bot `slack.bots[token]` names; every request, handled or not, is in
`slack.calls`. Faults are scripted per method and channel: an HTTP status (429 with Retry-After, 500...),
an `{"ok": false, "error": ...}` answer, a delay, or a dropped connection. `latency` delays every answer after
the call has taken effect (a message is in the channel before its post returns), as a slow Slack would.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests.fakes.loopback import Loopback

JSON_FIELDS = ("blocks", "attachments", "metadata", "view", "unfurls", "error")
ENTITY_TYPES = frozenset({"slack#/entities/task", "slack#/entities/file", "slack#/entities/item",
                          "slack#/entities/incident", "slack#/entities/content_item"})
# entity.presentDetails' `error.status` (docs.slack.dev/reference/methods/entity.presentDetails)
FLEXPANE_ERRORS = frozenset({"restricted", "internal_error", "not_found", "custom", "custom_partial_view",
                             "timeout", "edit_error"})
TEAM_ID = "T0FAKE"
BOT_USER = "UFAKEBOT"
BOT_ID = "BFAKEBOT"
BATCH_EVENT = "mlresearch_batch"


@dataclass
class Call:
    """One request as the fake saw it."""

    method: str
    params: dict[str, Any]
    token: str | None
    at: float  # time.monotonic() at arrival
    status: int = 0
    answer: dict[str, Any] | None = None
    done_at: float | None = None  # time.monotonic() when the answer was ready to send
    headers: dict[str, str] = field(default_factory=dict)  # the request's HTTP headers (Basic auth, ...)

    @property
    def channel(self) -> str | None:
        value = self.params.get("channel")
        return str(value) if value is not None else None


@dataclass
class Fault:
    """A scripted failure for `method` (or "*"), optionally for one `channel` only; `times=None`: always."""

    method: str
    channel: str | None = None
    status: int = 200
    error: str | None = None
    retry_after: int | None = None
    delay: float = 0.0
    drop: bool = False
    times: int | None = 1
    after: bool = False  # the call takes effect first (a message is posted), then the fault is answered
    extra: dict[str, Any] = field(default_factory=dict)
    skip: int = 0  # this many matching calls pass untouched before the fault applies

    def matches(self, call: Call) -> bool:
        return (
            (self.times is None or self.times > 0)
            and self.method in ("*", call.method)
            and (self.channel is None or self.channel == call.channel)
        )


Handler = Callable[[Call], dict[str, Any]]


class FakeSlack(Loopback):
    def __init__(self, *, latency: float = 0.0, team_id: str = TEAM_ID) -> None:
        super().__init__(name="fake-slack")
        self.latency = latency
        self.channel_latency: dict[str, float] = {}
        self.team_id = team_id
        self.calls: list[Call] = []
        self.messages: dict[str, list[dict[str, Any]]] = {}
        self.faults: list[Fault] = []
        self.users: dict[str, dict[str, Any]] = {}
        self.members: dict[str, set[str]] = {}  # channel id -> the people in it (users.conversations)
        self.channels: dict[str, dict[str, Any] | None] = {}  # conversations.info: fields, or None: none
        self.unfurls: list[dict[str, Any]] = []  # what chat.unfurl was given, in order
        self.sessions: dict[tuple[str, str], dict[str, Any]] = {}  # agents.sessions.setStatus, by thread
        self.presented: list[dict[str, Any]] = []  # what entity.presentDetails was given, in order
        self.bots: dict[str, tuple[str, str]] = {}  # token -> (bot user, bot id) of its posts
        self.handlers: dict[str, Handler] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "conversations.history": self._history,
            "conversations.open": self._open,
            "conversations.info": self._info,
            "views.publish": self._publish,
            "users.conversations": self._users_conversations,
            "users.info": self._users_info,
            "conversations.replies": self._replies,
            "chat.unfurl": self._unfurl,
            "entity.presentDetails": self._present_details,
            "assistant.threads.setStatus": self._ok,
            "assistant.threads.setSuggestedPrompts": self._ok,
            "assistant.threads.setTitle": self._ok,
            "agents.sessions.setStatus": self._session_status,
            "agents.sessions.rename": self._ok,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
            "chat.update": self._update,
            "chat.postEphemeral": self._post_ephemeral,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }
        self.files: dict[str, dict[str, Any]] = {}  # file id -> filename, length, data, title, channel, ...
        self.ephemerals: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._last_ts = 0.0

    @property
    def url(self) -> str:
        """The Web API base URL (SLACK_API_URL)."""
        return f"http://127.0.0.1:{self.port}/api/"

    # scripting --------------------------------------------------------------------------------------

    def fault(
        self,
        method: str,
        *,
        channel: str | None = None,
        status: int = 200,
        error: str | None = None,
        retry_after: int | None = None,
        delay: float = 0.0,
        drop: bool = False,
        times: int | None = 1,
        after: bool = False,
        skip: int = 0,
        **extra: Any,
    ) -> Fault:
        """Script a failure; the first matching fault (in the order added) applies to a call, once `skip`
        matching calls have passed."""
        if status == 200 and error is None and not drop and not delay:
            raise ValueError("a fault needs a status, an error, a delay or drop=True")
        fault = Fault(method, channel, status, error, retry_after, delay, drop, times, after, dict(extra),
                      skip)
        with self._cond:
            self.faults.append(fault)
        return fault

    def add_message(self, channel: str, text: str = "", **fields: Any) -> dict[str, Any]:
        """Put a message in a channel's history, as if someone had posted it."""
        with self._cond:
            message = {"type": "message", "ts": self._next_ts(), "text": text, **fields}
            self.messages.setdefault(channel, []).append(message)
            return message

    # reading ----------------------------------------------------------------------------------------

    def calls_to(self, method: str, channel: str | None = None) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == method and (channel is None or c.channel == channel)]

    def posts(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Messages chat.postMessage put in channels (all channels in post order, or one channel's)."""
        with self._cond:
            found = [m for ms in self.messages.values() for m in ms if m.get("posted_by_bot")]
            if channel is not None:
                found = [m for m in found if m["channel"] == channel]
            return sorted(found, key=lambda m: float(m["ts"]))

    def item_posts(self) -> Counter[tuple[str, str]]:
        """How many times each (channel, item_id) was posted, read from the message metadata."""
        counts: Counter[tuple[str, str]] = Counter()
        for message in self.posts():
            if (message.get("metadata") or {}).get("event_type") == BATCH_EVENT:
                continue
            payload = (message.get("metadata") or {}).get("event_payload") or {}
            counts[(message["channel"], str(payload.get("item_id")))] += 1
        return counts

    def batch_posts(self, channel: str | None = None) -> list[dict[str, Any]]:
        """The bursts' top-level messages (metadata event_type mlresearch_batch), in post order."""
        return [m for m in self.posts(channel) if (m.get("metadata") or {}).get("event_type") == BATCH_EVENT]

    def thread(self, channel: str, ts: str) -> list[dict[str, Any]]:
        """The replies posted in the thread of the message `ts`, oldest first."""
        return [m for m in self.posts(channel) if m.get("thread_ts") == ts and m["ts"] != ts]

    def wait_for(self, predicate: Callable[[FakeSlack], bool], timeout: float = 10.0) -> bool:
        """Block until `predicate(self)` holds (checked after every request), or the timeout passes."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self), timeout)

    # the methods ------------------------------------------------------------------------------------

    def _auth_test(self, call: Call) -> dict[str, Any]:
        return {"ok": True, "url": "https://fake.slack.com/", "team": "Fake", "user": "mlresearch",
                "team_id": self.team_id, "user_id": BOT_USER, "bot_id": BOT_ID,
                "is_enterprise_install": False}

    def _open(self, call: Call) -> dict[str, Any]:
        users = str(call.params.get("users") or "")
        if not users or "," in users:
            return {"ok": False, "error": "users_list_not_supplied" if not users else "not_implemented"}
        return {"ok": True, "channel": {"id": dm_channel(users)}}

    def _users_conversations(self, call: Call) -> dict[str, Any]:
        user = str(call.params.get("user") or "")
        with self._cond:
            channels = sorted(channel for channel, people in self.members.items() if user in people)
        return {"ok": True, "channels": [{"id": channel, "name": channel.lower(), "is_channel": True,
                                          "is_group": False, "is_im": False, "is_private": False,
                                          "is_archived": False} for channel in channels],
                "response_metadata": {"next_cursor": ""}}

    def _info(self, call: Call) -> dict[str, Any]:
        """A channel as conversations.info documents it (the fields the bot reads, and a few more)."""
        channel = str(call.params.get("channel") or "")
        with self._cond:
            known = channel in self.channels
            fields = self.channels.get(channel)
        if not channel or (known and fields is None):
            return {"ok": False, "error": "channel_not_found"}
        return {"ok": True, "channel": {
            "id": channel, "name": channel.lower(), "is_channel": channel[:1] == "C", "is_group": False,
            "is_im": channel[:1] == "D", "is_mpim": False, "is_private": False, "is_archived": False,
            "is_general": False, "is_shared": False, "is_ext_shared": False, "is_org_shared": False,
            "is_member": True, "created": 1449252889, "creator": "U0CREATOR", **(fields or {})}}

    def _publish(self, call: Call) -> dict[str, Any]:
        """The view as views.publish answers it: what was published, with the fields Slack adds."""
        view = call.params.get("view") or {}
        return {"ok": True, "view": {
            "id": "V0HOME", "team_id": self.team_id, "type": "home", "close": None, "submit": None,
            "blocks": [], "private_metadata": "", "callback_id": "", "state": {"values": {}},
            "hash": "1700000000.abcdef12", "clear_on_close": False, "notify_on_close": False,
            "root_view_id": "V0HOME", "previous_view_id": None, "app_id": "A0FAKE", "external_id": "",
            "bot_id": BOT_ID, **(view if isinstance(view, dict) else {})}}

    def _post_message(self, call: Call) -> dict[str, Any]:
        channel = call.channel
        if channel and channel[:1] in "UW":  # to a person: the app's DM with them
            channel = dm_channel(channel)
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not call.params.get("text") and not call.params.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if not _entities_ok(call.params.get("metadata"), unfurl=False):
            return {"ok": False, "error": "invalid_metadata_schema"}
        with self._cond:
            message = {
                "type": "message", "ts": self._next_ts(), "channel": channel,
                "user": self.bots.get(call.token or "", (BOT_USER, BOT_ID))[0],
                "bot_id": self.bots.get(call.token or "", (BOT_USER, BOT_ID))[1],
                "text": call.params.get("text", ""), "blocks": call.params.get("blocks"),
                "metadata": call.params.get("metadata"), "params": dict(call.params), "posted_by_bot": True,
            }
            if call.params.get("thread_ts"):
                message["thread_ts"] = str(call.params["thread_ts"])
            self.messages.setdefault(channel, []).append(message)
        return {"ok": True, "channel": channel, "ts": message["ts"],
                "message": {k: message[k] for k in ("type", "ts", "text", "user", "bot_id")}}

    def _users_info(self, call: Call) -> dict[str, Any]:
        user_id = str(call.params.get("user") or "")
        with self._cond:
            fields = self.users.get(user_id)
        if fields is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": {"id": user_id, "team_id": self.team_id, **fields}}

    def _history(self, call: Call) -> dict[str, Any]:
        p = call.params
        oldest, latest = float(p.get("oldest") or 0), float(p.get("latest") or 1e12)
        limit = max(1, min(int(p.get("limit") or 100), 999))
        offset = int(p.get("cursor") or 0)
        with_metadata = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        with self._cond:
            channel = self.messages.get(str(p.get("channel")), [])
            history = [m for m in channel if oldest < float(m["ts"]) < latest
                       and m.get("thread_ts") in (None, m["ts"])]  # replies are not in the history
        history.sort(key=lambda m: float(m["ts"]), reverse=True)
        return _page(history, offset, limit, with_metadata)

    def _replies(self, call: Call) -> dict[str, Any]:
        p = call.params
        oldest, latest = float(p.get("oldest") or 0), float(p.get("latest") or 1e12)
        limit = max(1, min(int(p.get("limit") or 100), 999))
        offset = int(p.get("cursor") or 0)
        with_metadata = str(p.get("include_all_metadata", "")).lower() in ("1", "true")
        ts = str(p.get("ts") or "")
        with self._cond:
            channel = self.messages.get(str(p.get("channel")), [])
            parent = [m for m in channel if m["ts"] == ts]
            replies = [m for m in channel if m.get("thread_ts") == ts and m["ts"] != ts
                       and oldest < float(m["ts"]) < latest]
        if not parent:
            return {"ok": False, "error": "thread_not_found"}
        replies.sort(key=lambda m: float(m["ts"]))
        return _page([*parent, *replies], offset, limit, with_metadata)

    def _unfurl(self, call: Call) -> dict[str, Any]:
        p = call.params
        if not ((p.get("channel") and p.get("ts")) or (p.get("unfurl_id") and p.get("source"))):
            return {"ok": False, "error": "invalid_arguments"}
        metadata = p.get("metadata")
        if "unfurls" in p and (not isinstance(p["unfurls"], dict) or not p["unfurls"]):
            return {"ok": False, "error": "invalid_unfurls_format"}
        if "unfurls" not in p and metadata is None:  # "Either unfurls or metadata must be provided"
            return {"ok": False, "error": "missing_unfurls"}
        if metadata is not None and (not isinstance(metadata, dict) or not metadata.get("entities")
                                     or not _entities_ok(metadata, unfurl=True)):
            return {"ok": False, "error": "invalid_metadata"}
        with self._cond:
            self.unfurls.append(dict(p))
        return {"ok": True}

    def _present_details(self, call: Call) -> dict[str, Any]:
        p = call.params
        if not isinstance(p.get("trigger_id"), str) or not p["trigger_id"]:
            return {"ok": False, "error": "invalid_trigger_id"}
        metadata, error = p.get("metadata"), p.get("error")
        if metadata is not None and (not isinstance(metadata, dict) or "entities" in metadata
                                     or "app_unfurl_url" in metadata or not _entity_ok(metadata)):
            return {"ok": False, "error": "invalid_metadata"}  # one entity, without the unfurl's URL
        if error is not None and (not isinstance(error, dict) or error.get("status") not in FLEXPANE_ERRORS):
            return {"ok": False, "error": "invalid_arguments"}
        if p.get("user_auth_required") in (True, 1, "1", "true") and not p.get("user_auth_url"):
            return {"ok": False, "error": "user_auth_url_missing"}
        with self._cond:
            self.presented.append(dict(p))
        return {"ok": True}

    def _ok(self, call: Call) -> dict[str, Any]:
        return {"ok": True}

    def _session_status(self, call: Call) -> dict[str, Any]:
        """agents.sessions.setStatus: the session of (channel_id, thread_ts) gets the status (its title is
        kept from its creation only, as Slack does); `sessions` holds each one's statuses in order."""
        status = str(call.params.get("status") or "")
        if status not in ("active", "processing", "suspended", "closed"):
            return {"ok": False, "error": "invalid_arguments"}
        key = (str(call.params.get("channel_id") or ""), str(call.params.get("thread_ts") or ""))
        with self._cond:
            session = self.sessions.setdefault(key, {"title": call.params.get("title"), "statuses": []})
            session["statuses"].append(status)
        return {"ok": True}

    def session_statuses(self, channel: str, thread_ts: str) -> list[str]:
        with self._cond:
            return list(self.sessions.get((channel, thread_ts), {}).get("statuses", []))

    # streaming, updates, ephemerals ----------------------------------------------------------------------

    def streamed(self, channel: str | None = None) -> list[dict[str, Any]]:
        """The messages made by chat.startStream (in order), each with its `markdown` so far and `stopped`."""
        return [m for m in self.posts(channel) if "markdown" in m]

    def _start_stream(self, call: Call) -> dict[str, Any]:
        channel, thread_ts = str(call.params.get("channel") or ""), str(call.params.get("thread_ts") or "")
        if not channel or not thread_ts:
            return {"ok": False, "error": "invalid_arguments"}
        if channel[:1] != "D" and not (call.params.get("recipient_user_id")
                                       and call.params.get("recipient_team_id")):
            return {"ok": False, "error": "invalid_arguments"}  # "required when streaming to channels"
        with self._cond:
            user, bot_id = self.bots.get(call.token or "", (BOT_USER, BOT_ID))
            message = {"type": "message", "ts": self._next_ts(), "channel": channel, "user": user,
                       "bot_id": bot_id, "thread_ts": thread_ts, "text": "", "markdown": "", "stopped": False,
                       "stream_chunks": [], "blocks": None, "metadata": None, "params": dict(call.params),
                       "posted_by_bot": True}
            self.messages.setdefault(channel, []).append(message)
            _add_chunks(message, call.params)
        return {"ok": True, "channel": channel, "ts": message["ts"]}

    def _streaming(self, call: Call) -> dict[str, Any] | None:
        ts, channel = str(call.params.get("ts") or ""), str(call.params.get("channel") or "")
        found = [m for m in self.messages.get(channel, []) if m["ts"] == ts and "markdown" in m]
        return found[0] if found else None

    def _append_stream(self, call: Call) -> dict[str, Any]:
        with self._cond:
            message = self._streaming(call)
            if message is None or message["stopped"]:
                return {"ok": False, "error": _not_streaming(message)}
            _add_chunks(message, call.params)
            return {"ok": True, "channel": message["channel"], "ts": message["ts"]}

    def _stop_stream(self, call: Call) -> dict[str, Any]:
        with self._cond:
            message = self._streaming(call)
            if message is None or message["stopped"]:
                return {"ok": False, "error": _not_streaming(message)}
            _add_chunks(message, call.params)
            message.update(stopped=True, blocks=call.params.get("blocks"),
                           metadata=call.params.get("metadata"), text=message["markdown"])
            return {"ok": True, "channel": message["channel"], "ts": message["ts"],
                    "message": {k: message[k] for k in ("type", "ts", "text", "user", "bot_id")}}

    def _update(self, call: Call) -> dict[str, Any]:
        ts, channel = str(call.params.get("ts") or ""), str(call.params.get("channel") or "")
        with self._cond:
            found = [m for m in self.messages.get(channel, []) if m["ts"] == ts and m.get("posted_by_bot")]
            if not found:
                return {"ok": False, "error": "message_not_found"}
            for name in ("text", "blocks", "metadata"):
                if name in call.params:
                    found[0][name] = call.params[name]
            found[0]["updated"] = True
        return {"ok": True, "channel": channel, "ts": ts}

    def _post_ephemeral(self, call: Call) -> dict[str, Any]:
        with self._cond:
            self.ephemerals.append(dict(call.params))
        return {"ok": True, "message_ts": self._next_ts()}

    # file uploads (files_upload_v2) ---------------------------------------------------------------------

    def uploads(self, channel: str) -> list[dict[str, Any]]:
        """The files shared in `channel` by files.completeUploadExternal, in order: filename, title,
        initial_comment, data (the bytes POSTed)."""
        with self._cond:
            return [dict(f) for f in self.files.values() if f.get("channel") == channel]

    def _upload_url(self, call: Call) -> dict[str, Any]:
        filename = call.params.get("filename")
        length = str(call.params.get("length") or "")
        if not isinstance(filename, str) or not filename or not length.isdigit() or int(length) < 1:
            return {"ok": False, "error": "invalid_arguments"}
        with self._cond:
            file_id = f"F{len(self.files) + 1:08d}"
            self.files[file_id] = {"id": file_id, "filename": filename, "length": int(length), "data": None,
                                   "completed": False}
        return {"ok": True, "upload_url": f"http://127.0.0.1:{self.port}/upload/v1/{file_id}",
                "file_id": file_id}

    def _receive_upload(self, request: BaseHTTPRequestHandler, file_id: str) -> None:
        """The upload URL: the bytes as they are, as long as files.getUploadURLExternal was told."""
        size = int(request.headers.get("Content-Length") or 0)
        data = request.rfile.read(size) if size else b""
        call = Call("upload", {"file_id": file_id, "bytes": len(data)}, None, time.monotonic())
        with self._cond:
            self.calls.append(call)
            known = self.files.get(file_id)
            ok = known is not None and not known["completed"] and len(data) == known["length"]
            if ok and known is not None:
                known["data"] = data
            self._cond.notify_all()
        status, body = (200, f"OK - {len(data)}".encode()) if ok else (400, b"bad upload")
        self._done(call, status, None)
        request.send_response(status)
        request.send_header("Content-Type", "text/plain")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    def _complete_upload(self, call: Call) -> dict[str, Any]:
        try:
            files = json.loads(call.params["files"]) if isinstance(call.params.get("files"), str) \
                else call.params.get("files")
        except (KeyError, ValueError):
            return {"ok": False, "error": "invalid_arguments"}
        if not isinstance(files, list) or not files or not all(isinstance(f, dict) and f.get("id")
                                                               for f in files):
            return {"ok": False, "error": "invalid_arguments"}
        channel = call.params.get("channel_id")
        with self._cond:
            found = [self.files.get(str(f["id"])) for f in files]
            if any(f is None or f["data"] is None for f in found):
                return {"ok": False, "error": "file_not_found"}
            if any(f is not None and f["completed"] for f in found):
                return {"ok": False, "error": "already_completed"}
            shared = []
            for asked, known in zip(files, found, strict=True):
                assert known is not None
                known.update(completed=True, title=asked.get("title") or known["filename"], channel=channel,
                             initial_comment=call.params.get("initial_comment"))
                shared.append({"id": known["id"], "title": known["title"], "name": known["filename"]})
            if channel:
                self.messages.setdefault(str(channel), []).append({
                    "type": "message", "subtype": "file_share", "ts": self._next_ts(), "channel": channel,
                    "user": BOT_USER, "bot_id": BOT_ID, "text": call.params.get("initial_comment") or "",
                    "files": shared, "params": dict(call.params), "posted_by_bot": True})
        return {"ok": True, "files": [{"id": f["id"], "title": f["title"]} for f in shared]}

    # plumbing ---------------------------------------------------------------------------------------

    def _next_ts(self) -> str:
        self._last_ts = max(time.time(), self._last_ts + 0.000001)
        return f"{self._last_ts:.6f}"

    def _serve(self, request: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(request.path)
        if parts.path.startswith("/upload/v1/"):
            self._receive_upload(request, parts.path[len("/upload/v1/"):])
            return
        method = parts.path.rstrip("/").rsplit("/", 1)[-1]
        params, token = _read_params(request, parts.query)
        call = Call(method, params, token, time.monotonic(), headers=dict(request.headers.items()))
        with self._cond:
            self.calls.append(call)
            fault = next((f for f in self.faults if f.matches(call)), None)
            if fault is not None and fault.skip > 0:
                fault.skip -= 1
                fault = None
            elif fault is not None and fault.times is not None:
                fault.times -= 1
            self._cond.notify_all()
        status, answer, headers = 200, None, {}
        if fault is not None and fault.after:
            self._answer(call)
        if fault is not None:
            time.sleep(fault.delay)
            if fault.drop:
                request.close_connection = True
                self._done(call, 0, None)
                return
            if fault.status != 200:
                status = fault.status
                answer = {"ok": False, "error": "ratelimited"} if status == 429 else None
                if fault.retry_after is not None:
                    headers["Retry-After"] = str(fault.retry_after)
            elif fault.error:
                answer = {"ok": False, "error": fault.error, **fault.extra}
        if status == 200 and answer is None:
            answer = self._answer(call)
        delay = self.latency + self.channel_latency.get(call.channel or "", 0.0)
        if delay:
            time.sleep(delay)
        body = json.dumps(answer).encode() if answer is not None else b"<html>upstream error</html>"
        self._done(call, status, answer)
        request.send_response(status)
        request.send_header("Content-Type", "application/json; charset=utf-8" if answer else "text/html")
        request.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            request.send_header(name, value)
        request.end_headers()
        request.wfile.write(body)

    def _answer(self, call: Call) -> dict[str, Any]:
        handler = self.handlers.get(call.method)
        return handler(call) if handler else {"ok": False, "error": "unknown_method"}

    def _done(self, call: Call, status: int, answer: dict[str, Any] | None) -> None:
        with self._cond:
            call.status, call.answer, call.done_at = status, answer, time.monotonic()
            self._cond.notify_all()


def _add_chunks(message: dict[str, Any], params: dict[str, Any]) -> None:
    """A stream call's markdown (`markdown_text`, or `chunks` of type markdown_text) added to its message."""
    texts = [str(params["markdown_text"])] if params.get("markdown_text") else []
    chunks = params.get("chunks") or []
    texts += [str(c.get("text") or "") for c in chunks
              if isinstance(c, dict) and c.get("type") == "markdown_text"]
    message["stream_chunks"].append(texts)
    message["markdown"] += "".join(texts)
    for chunk in chunks:  # task progress: each task's latest state, by id, in the order first seen
        if isinstance(chunk, dict) and chunk.get("type") == "task_update" and chunk.get("id"):
            message.setdefault("tasks", {})[str(chunk["id"])] = dict(chunk)


def _entities_ok(metadata: Any, *, unfurl: bool) -> bool:
    """Whether a message's metadata holds no entities, or well-formed ones (an unfurl's name its URL)."""
    if not isinstance(metadata, dict) or "entities" not in metadata:
        return True
    entities = metadata["entities"]
    return isinstance(entities, list) and all(
        _entity_ok(e) and (not unfurl or isinstance(e.get("app_unfurl_url"), str)) for e in entities)


def _entity_ok(entity: Any) -> bool:
    """What Slack requires of a Work Object entity: its type, URL, external reference and title."""
    if not isinstance(entity, dict) or entity.get("entity_type") not in ENTITY_TYPES:
        return False
    ref, payload = entity.get("external_ref"), entity.get("entity_payload")
    attributes = payload.get("attributes") if isinstance(payload, dict) else None
    title = attributes.get("title") if isinstance(attributes, dict) else None
    return (isinstance(entity.get("url"), str) and isinstance(ref, dict) and isinstance(ref.get("id"), str)
            and isinstance(title, dict) and isinstance(title.get("text"), str))


def _not_streaming(message: dict[str, Any] | None) -> str:
    return "message_not_in_streaming_state" if message else "message_not_found"


def feedback_click(channel: str, message_ts: str, vote: str, *, user: str = "U0ALICE", team: str = TEAM_ID,
                   action_id: str = "answer_feedback", thread_ts: str | None = None) -> dict[str, Any]:
    """The block_actions payload Slack sends when a person clicks a feedback button (`vote`: its value)."""
    return {
        "type": "block_actions", "team": {"id": team, "domain": "fake"},
        "user": {"id": user, "team_id": team}, "api_app_id": "A0FAKE", "token": "unused",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel,
                      "is_ephemeral": False, **({"thread_ts": thread_ts} if thread_ts else {})},
        "trigger_id": "1.2.3", "channel": {"id": channel, "name": "fake"},
        "message": {"type": "message", "ts": message_ts, "user": BOT_USER, "bot_id": BOT_ID},
        "response_url": "", "actions": [{
            "type": "feedback_buttons", "action_id": action_id, "block_id": "fb",
            "value": vote, "action_ts": "1700000000.000001"}],
    }


def dm_channel(user_id: str) -> str:
    """The ID of the bot's direct message with `user_id` (what conversations.open answers)."""
    return "D" + user_id[1:]
def _page(messages: list[dict[str, Any]], offset: int, limit: int, with_metadata: bool) -> dict[str, Any]:
    """One page of a history or a thread, as Slack answers it."""
    page = messages[offset : offset + limit]
    public = ("type", "ts", "text", "user", "bot_id", "blocks", "thread_ts") + (
        ("metadata",) if with_metadata else ())
    more = offset + limit < len(messages)
    return {
        "ok": True,
        "messages": [{k: m[k] for k in public if m.get(k) is not None} for m in page],
        "has_more": more,
        "response_metadata": {"next_cursor": str(offset + limit) if more else ""},
    }


def _read_params(request: BaseHTTPRequestHandler, query: str) -> tuple[dict[str, Any], str | None]:
    length = int(request.headers.get("Content-Length") or 0)
    raw = request.rfile.read(length) if length else b""
    params: dict[str, Any] = dict(parse_qsl(query))
    ctype = request.headers.get("Content-Type", "")
    if "json" in ctype and raw:
        params.update(json.loads(raw))
    elif raw:
        params.update(parse_qsl(raw.decode(), keep_blank_values=True))
        for name in JSON_FIELDS:
            if isinstance(params.get(name), str) and params[name][:1] in "[{":
                params[name] = json.loads(params[name])
    auth = request.headers.get("Authorization", "")
    token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else params.pop("token", None)
    return params, token


