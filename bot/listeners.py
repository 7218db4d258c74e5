"""Every Bolt listener, registered in one place (`register`). Listeners are plain functions over
`bot.commands` and the store; Bolt injects their arguments by name.

- `/mlresearch`: a fast command is answered in its ack (ephemeral); a slow one (`commands.is_slow`: a summary
  written by the model) is admitted to the model lane (`bot.lanes`: its own small pool, capped per person and
  per workspace), acked at once, and answered through `response_url` from the lane; over a cap, the ack is
  the one line `lanes.BUSY`. Nothing that calls the model runs on the lazy listeners' pool, so Save, Home and
  the other cheap work never wait behind it.
- The "Share in channel" button re-posts the same content visibly through `response_url`, then deletes the
  ephemeral original.
- Save (on every item message and search result) puts the item on the clicker's reading list and says so
  ephemerally (through `response_url`, else `chat.postEphemeral`); Remove (in the App Home) takes it off and
  publishes the Home again. Related and Cite answer ephemerally the same way (`related` and `cite` of the
  item), and so does an author chosen in a **More by…** menu (`search author:"…"`); *Export .bib* (in the
  App Home) sends the reading list as a .bib file in a DM (`bot.cite`).
- App Home: `app_home_opened` publishes `home.home_view` for the person who opened it.
- Questions (`bot.conversation`): a mention (`app_mention`), a direct message (`message` with `channel_type`
  `im`) or a reply in a DM thread (Bolt's `Assistant` middleware takes every one: `user_message`) is acked at
  once and answered in its thread by a lazy listener (handed to the model lane when a model writes answers;
  over a cap, the thread gets `lanes.BUSY`). Each is an agent session (`bot.sessions`): processing at once
  with a title and Bolt's loading messages (`set_status`), streamed with Bolt's `say_stream`, active when
  done. Slack's stop button (`agent_session_stopped`) is handled in the request itself, so the answer stops
  within a second. `thread_started` (the legacy assistant pane) suggests prompts. Messages of bots (this one
  included), edits and the like are acked and left alone.
- The Messages tab (the agent messaging experience, `features.agent_view`): a top-level message there is a
  direct message, answered in its own thread like the others; `app_home_opened` with tab `messages` greets
  the person once (stored) and sets suggested prompts (Bolt's `set_suggested_prompts`, no thread_ts);
  `app_context_changed` remembers the channel the person (the envelope's authorization, as Slack documents
  it) is looking at (when the bot can see it: conversations.info), for "what's new here?".
  Workspaces installed with `assistant_view` keep the assistant pane's `thread_started` until they update.
- Feedback: a click on an answer's feedback buttons is acked at once, stored (bot.store.agent: the last vote
  counts) and thanked ephemerally; a click on anything else gets one line.
- Unfurls (`bot.unfurls`): a `link_shared` event's links to machinelearning.apple.com are looked up in the
  archive by a lazy listener and unfurled with `chat.unfurl` (title, date, authors, the abstract's start, Save
  and Related, as Block Kit and as a paper card, a Work Object); links to other hosts, links beyond the cap
  and links the archive does not hold are left to Slack. `entity_details_requested` (a paper card opened)
  is answered with its flexpane (`bot.flexpane`).
- Lifecycle: uninstall and token revocation forget the workspace (its installation, subscriptions and
  undelivered items); an archived or left channel is paused, a deleted one unsubscribed, so the bot never
  posts where it is no longer welcome.

Everything is keyed by the workspace Bolt authorized the request for (`context.team_id`: for an event, its
`authorizations`, not the body's `team_id`, which in a Slack Connect channel can name another workspace);
in OAuth mode the Web API client a handler uses is the one Bolt built for the request, holding that
workspace's token. A request without one never reads or writes a workspace's data (not even under team ''):
a command or share click gets a one-line answer, the App Home lists no subscriptions, a lifecycle event is
ignored.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from typing import Any

from slack_bolt import Ack, App, Assistant, BoltContext, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import answers, blocks, cite, commands, conversation, flexpane, home, unfurls
from bot.commands import Invocation, Services
from bot.errors import StoreError
from bot.lanes import BUSY, ModelLane
from bot.sessions import Stops
from bot.slackweb import TRANSPORT_ERRORS

log = logging.getLogger("bot.listeners")

COMMAND = "/mlresearch"
SHARE_ACTION_ID = commands.SHARE_ACTION_ID
WORKING = "Working on it… the answer will appear here in a moment."
SORRY = "Sorry, something went wrong on our side; please try again in a minute."
HOME_CHANNEL_PAGES = 5  # of 200 channels: whom the App Home lists subscriptions to
CLAIM = "mlresearch_question_claim"  # the request context's key for conversation.claim's outcome
_TS = re.compile(r"\d{1,12}\.\d{1,8}")  # a Slack message timestamp


def register(app: App, services: Services, lane: ModelLane | None = None) -> None:
    """Attach every listener to `app`; work that calls the model runs on `lane` (one is made if none is
    given)."""
    listeners = _Listeners(services, lane)
    # Bolt runs the first listener that matches: a fast command is answered in the ack with no lazy hand-off
    # (no request copy, no extra thread), and is matched first (each listener tried costs a match); what
    # is left, a slow command, gets the lazy pair.
    app.command(COMMAND, matchers=[listeners.is_fast])(listeners.command_fast)
    app.command(COMMAND)(listeners.command_deferred)  # answered from the model lane
    app.action(SHARE_ACTION_ID)(ack=_ack, lazy=[listeners.share])
    app.action(blocks.SAVE_ACTION_ID)(ack=_ack, lazy=[listeners.save])
    app.action(home.REMOVE_ACTION_ID)(ack=_ack, lazy=[listeners.remove])
    app.action(blocks.OPEN_ACTION_ID)(_ack)  # a link button: Slack opens the link, and expects an ack
    app.action(blocks.RELATED_ACTION_ID)(ack=_ack, lazy=[listeners.related])
    app.action(blocks.CITE_ACTIONS)(ack=_ack, lazy=[listeners.cite])
    app.action(home.EXPORT_ACTION_ID)(ack=_ack, lazy=[listeners.export_bib])
    app.action(blocks.AUTHOR_ACTION_ID)(ack=_ack, lazy=[listeners.more_by])  # More by…: search author:"…"
    app.event("app_home_opened")(ack=_ack, lazy=[listeners.home])
    app.event("app_context_changed")(ack=_ack, lazy=[listeners.context_changed])
    app.event("agent_session_stopped")(listeners.session_stopped)  # at once, in the request: a stop waits
    app.action(answers.FEEDBACK_ACTION_ID)(ack=_ack, lazy=[listeners.feedback])
    app.event("link_shared")(ack=_ack, lazy=[listeners.unfurl])
    app.event("entity_details_requested")(ack=_ack, lazy=[listeners.entity_details])
    app.event("app_uninstalled")(listeners.uninstalled)
    app.event("tokens_revoked")(listeners.tokens_revoked)
    for name in ("channel_archive", "group_archive"):
        app.event(name)(listeners.archived)
    for name in ("channel_deleted", "group_deleted"):
        app.event(name)(listeners.deleted)
    for name in ("channel_left", "group_left"):
        app.event(name)(listeners.left)
    app.event("member_left_channel")(listeners.member_left)
    assistant = Assistant(logger=logging.getLogger("slack_bolt"))
    assistant.thread_started(lazy=[listeners.assistant_started])(_nothing)
    assistant.thread_context_changed(_nothing)  # the pane's context (the channel in view) is not used
    assistant.user_message(lazy=[listeners.assistant_message])(listeners.claim)
    app.use(assistant)
    app.event("app_mention")(ack=listeners.claim_and_ack, lazy=[listeners.answer])
    app.event("message", matchers=[_is_direct_message])(ack=listeners.claim_and_ack, lazy=[listeners.answer])
    app.event("message")(_ack)  # edits, deletions, this bot's own replies in a DM: nothing to do
    app.error(_on_error)


def _ack(ack: Ack) -> None:
    ack()


def _nothing() -> None:
    """An Assistant listener's ack part (the middleware acks by itself)."""


def _is_direct_message(event: dict[str, Any]) -> bool:
    return event.get("channel_type") == "im"


def _on_error(error: Exception, body: dict[str, Any]) -> None:
    kind = body.get("type") or body.get("command") or "?"
    log.error("event=listener_error request=%s error=%s: %s", kind, type(error).__name__, _one_line(error))


def _one_line(error: object, limit: int = 200) -> str:
    return " ".join(str(error).split())[:limit]


class _Listeners:
    def __init__(self, services: Services, lane: ModelLane | None = None) -> None:
        self.services = services
        self.lane = lane if lane is not None else ModelLane()
        self.stops = Stops()  # the questions this process is answering, for Slack's stop button

    def model_writes(self) -> bool:
        """Whether answers are written by the model endpoint (then they run on the model lane)."""
        summarizer = self.services.summarizer
        return summarizer is not None and summarizer.abstractive

    # /mlresearch ------------------------------------------------------------------------------------

    def is_fast(self, body: dict[str, Any], context: BoltContext) -> bool:
        return not commands.is_slow(_invocation(body, context), self.services)

    def command_deferred(self, ack: Ack, body: dict[str, Any], respond: Respond, client: WebClient,
                         context: BoltContext) -> None:
        """A slow command: a place on the model lane, then "working on it" (the lane answers through
        `response_url`); over a cap, the busy line instead."""
        started = time.perf_counter()
        inv = _invocation(body, context)
        slot = self.lane.admit(inv.team_id, inv.user_id)
        if slot is None:
            ack(response_type="ephemeral", text=BUSY)
            _log_command(inv, "busy", started)
            return
        try:
            ack(response_type="ephemeral", text=WORKING)
        finally:
            slot.start(self.command_lazy, body, respond, client, context)
        _log_command(inv, "deferred", started)

    def for_request(self, client: WebClient | None) -> Services:
        """The services for one request: over the store's view for this thread (`Store.thread_view`), and in
        OAuth mode with the request's client (its workspace's token)."""
        services = self.services
        store = services.store.thread_view()
        slack = client if client is not None and services.settings.oauth_enabled else services.slack
        if store is services.store and slack is services.slack:
            return services
        return dataclasses.replace(services, store=store, slack=slack)

    def command_fast(self, ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        started = time.perf_counter()
        inv = _invocation(body, context)
        try:
            reply = commands.handle(inv, self.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, _one_line(exc))
            ack(response_type="ephemeral", text=SORRY)
            return
        ack(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        _log_command(inv, "answered", started)

    def command_lazy(self, body: dict[str, Any], respond: Respond, client: WebClient,
                     context: BoltContext) -> None:
        inv = _invocation(body, context)
        started = time.perf_counter()
        try:
            reply = commands.handle(inv, self.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, _one_line(exc))
            respond(response_type="ephemeral", replace_original=True, text=SORRY)
            return
        answer = respond(response_type="ephemeral", replace_original=True, text=reply.text,
                         blocks=reply.blocks)
        if answer.status_code != 200:  # the "working" note could not be replaced: answer beside it
            answer = respond(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        outcome = "responded" if answer.status_code == 200 else f"respond_failed:{answer.status_code}"
        _log_command(inv, outcome, started)

    # questions: mentions, direct messages, the assistant pane ----------------------------------------

    def claim(self, body: dict[str, Any], context: dict[str, Any]) -> None:
        """In the request, before the ack goes out: claim the question (the lazy answer reads the outcome
        from the request's context, which its copy carries)."""
        question = conversation.question_from_event(body, context.get("bot_user_id"), _team(context))
        if question is not None:
            context[CLAIM] = conversation.claim(question, self.services.store.thread_view())

    def claim_and_ack(self, ack: Ack, body: dict[str, Any], context: dict[str, Any]) -> None:
        try:
            self.claim(body, context)
        finally:
            ack()

    def answer(self, body: dict[str, Any], client: WebClient, context: dict[str, Any],
               set_status: Any = None, say_stream: Any = None) -> None:
        self._answer(body, client, context, status=set_status, say_stream=say_stream)

    def assistant_message(self, body: dict[str, Any], client: WebClient, context: dict[str, Any],
                          set_status: Any = None, set_title: Any = None, say_stream: Any = None) -> None:
        """A reply in a DM thread (Bolt's Assistant middleware takes every one): answered as any question,
        with the legacy assistant pane's title too."""
        self._answer(body, client, context, status=set_status, title=set_title, say_stream=say_stream)

    def assistant_started(self, event: dict[str, Any], set_suggested_prompts: Any = None) -> None:
        thread = event.get("assistant_thread") or {}
        if not (isinstance(thread, dict) and thread.get("channel_id") and thread.get("thread_ts")):
            return
        _suggest(set_suggested_prompts, str(thread.get("thread_ts")))

    def _answer(self, body: dict[str, Any], client: WebClient, context: dict[str, Any], **pane: Any) -> None:
        question = conversation.question_from_event(body, context.get("bot_user_id"), _team(context))
        claimed = context.get(CLAIM)
        if question is None or claimed is None:
            return

        def answer() -> None:
            conversation.answer(question, self.for_request(client), client, str(claimed), stops=self.stops,
                                **pane)

        if not self.model_writes():
            answer()
        elif not self.lane.submit(question.team_id, question.user_id, answer):
            conversation.busy(question, self.for_request(client), client, str(claimed), BUSY)

    # the share button -------------------------------------------------------------------------------

    def share(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
              context: BoltContext) -> None:
        """Post the shared content visibly through response_url and delete the ephemeral original; when the
        response_url no longer works (it expires after 30 minutes), post as the bot instead."""
        action = (body.get("actions") or [{}])[0]
        user_id = str((body.get("user") or {}).get("id") or "")
        team_id = _team(context)
        channel_id = str((body.get("channel") or {}).get("id") or "")
        if not team_id:
            if respond is not None:
                _respond_ok(respond, response_type="ephemeral", replace_original=False,
                            text=commands.NO_WORKSPACE)
            log.info("event=share_refused reason=no_workspace channel=%s", channel_id[:20])
            return
        value = str(action.get("value") or "")
        if not (self.model_writes() and commands.split(value)[0] == "summarize"):
            self._share(value, user_id, team_id, channel_id, respond, client)
        elif not self.lane.submit(team_id, user_id, self._share, value, user_id, team_id, channel_id, respond,
                                  client):  # a summary is written again: on the model lane
            if respond is not None:
                _respond_ok(respond, response_type="ephemeral", replace_original=False, text=BUSY)
            log.info("event=share_refused reason=busy team=%s user=%s", team_id[:20], user_id[:20])

    def _share(self, value: str, user_id: str, team_id: str, channel_id: str, respond: Respond | None,
               client: WebClient) -> None:
        reply = commands.shared(value, user_id, self.for_request(client), team_id, channel_id)
        where = f"team={team_id} channel={channel_id} user={user_id}"
        if respond is not None and _respond_ok(respond, response_type="in_channel", replace_original=False,
                                               text=reply.text, blocks=reply.blocks):
            _respond_ok(respond, delete_original=True)
            log.info("event=shared %s via=response_url", where)
            return
        try:
            client.chat_postMessage(channel=channel_id, text=reply.text, blocks=reply.blocks,
                                    unfurl_links=False, unfurl_media=False, parse="none")
            log.info("event=shared %s via=chat.postMessage", where)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "unknown_error")
            log.warning("event=share_failed %s error=%s", where, error)
            invite = error in ("not_in_channel", "channel_not_found")
            hint = " (invite me to this channel first)" if invite else ""
            client.chat_postEphemeral(channel=channel_id, user=user_id,
                                      text=f"Sorry, I couldn't share that here: {error}{hint}.")

    # the reading list -------------------------------------------------------------------------------

    def save(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
             context: BoltContext) -> None:
        """Save the clicked item to the clicker's reading list; one ephemeral line says how it went."""
        team_id, user_id, channel_id, item_id = _clicked(body, context)
        store = self.services.store.thread_view()
        if not (team_id and user_id):
            message = "I can't tell who you are in which workspace, so nothing was saved."
        else:
            try:
                outcome = store.save_item(team_id, user_id, item_id) if item_id else "missing"
                message = home.saved_reply(outcome, store.get_item(item_id) if item_id else None)
            except StoreError as exc:
                outcome = "store_error"
                log.error("event=save_failed team=%s user=%s error=%r", team_id, user_id, _one_line(exc))
                message = "I can't reach the archive right now; nothing was saved. Try again in a minute."
            except Exception:  # noqa: BLE001 - a user never sees a trace
                outcome = "crashed"
                log.exception("event=save_crashed team=%s user=%s", team_id, user_id)
                message = SORRY
            log.info("event=item_saved team=%s user=%s outcome=%s", team_id, user_id, outcome)
        if respond is not None and _respond_ok(respond, response_type="ephemeral", replace_original=False,
                                               text=message):
            return
        if channel_id and user_id:
            try:
                client.chat_postEphemeral(channel=channel_id, user=user_id, text=message)
            except (SlackApiError, OSError) as exc:
                log.warning("event=save_reply_failed team=%s user=%s error=%s", team_id, user_id,
                            _one_line(exc))

    def remove(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """Take an item off the clicker's reading list (a Remove button in the App Home), then publish their
        Home again."""
        team_id, user_id, _channel_id, item_id = _clicked(body, context)
        if not (team_id and user_id):
            log.info("event=remove_refused reason=no_workspace_or_user")
            return
        store = self.services.store.thread_view()
        try:
            removed = store.unsave_item(team_id, user_id, item_id)
        except StoreError as exc:
            log.error("event=remove_failed team=%s user=%s error=%r", team_id, user_id, _one_line(exc))
            return
        log.info("event=item_removed team=%s user=%s removed=%s", team_id, user_id, removed)
        self._publish_home(client, team_id, user_id)

    # the Related and Cite buttons, the .bib export ------------------------------------------------------

    def related(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
                context: BoltContext) -> None:
        """The items nearest to the button's item, to the person who clicked, ephemerally."""
        self._button_command("related", body, respond, client, context)

    def cite(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
             context: BoltContext) -> None:
        """The button's item as BibTeX (and in plain text), to the person who clicked, ephemerally."""
        self._button_command("cite", body, respond, client, context)

    def more_by(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
                context: BoltContext) -> None:
        """The items of the author chosen in a **More by…** menu (`search author:"<name>"`), to the person
        who chose, ephemerally; a menu left empty (Slack sends a null option) asks nothing."""
        action = (body.get("actions") or [{}])[0]
        option = action.get("selected_option")
        value = option.get("value") if isinstance(option, dict) else None
        name = " ".join(str(value or "").replace('"', " ").replace("“", " ").replace("”", " ").split())
        if name:
            self._button_command("search", body, respond, client, context, f'author:"{name[:200]}"')

    def _button_command(self, name: str, body: dict[str, Any], respond: Respond | None, client: WebClient,
                        context: BoltContext, value: str | None = None) -> None:
        """`/mlresearch <name> <the button's value>` (or `value`), answered to the clicker ephemerally
        (through `response_url`, else chat.postEphemeral)."""
        action = (body.get("actions") or [{}])[0]
        user_id = str((body.get("user") or {}).get("id") or "")
        team_id = _team(context)
        channel_id = str((body.get("channel") or {}).get("id") or "")
        said = value if value is not None else str(action.get("value") or "")[:2000]
        inv = Invocation(text=f"{name} {said}", team_id=team_id, channel_id=channel_id, user_id=user_id)
        reply = commands.handle(inv, self.for_request(client))
        if respond is not None and _respond_ok(respond, response_type="ephemeral", replace_original=False,
                                               text=reply.text, blocks=reply.blocks):
            return
        if channel_id and user_id:
            try:
                client.chat_postEphemeral(channel=channel_id, user=user_id, text=reply.text,
                                          blocks=reply.blocks)
            except SlackApiError as exc:
                log.warning("event=%s_failed team=%s channel=%s error=%s", name, team_id[:20],
                            channel_id[:20], str(exc.response.get("error") or "unknown_error"))

    def export_bib(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """*Export .bib* (App Home): the clicker's reading list as a .bib file in their DM (one log line)."""
        team_id, user_id, _channel_id, _value = _clicked(body, context)
        if not (team_id and user_id):
            log.info("event=bib_export_refused reason=no_workspace_or_user")
            return
        cite.send_reading_list(client, self.services.store.thread_view(), team_id, user_id)

    # unfurls ----------------------------------------------------------------------------------------

    def unfurl(self, event: dict[str, Any], context: BoltContext, client: WebClient) -> None:
        """Unfurl the event's links to our site that the archive holds; one log line says what was done."""
        links = unfurls.apple_links(event)
        team_id = _team(context)[:20]
        channel_id = str(event.get("channel") or "")[:20]
        where = f"team={team_id} channel={channel_id}"
        counts = (f"links={links.seen} ours={len(links.wanted)} other_hosts={links.other_hosts} "
                  f"over_cap={links.over_cap}")
        into = unfurls.target(event)
        if not links.wanted or into is None:
            log.info("event=unfurl_skipped %s %s target=%s", where, counts, into is not None)
            return
        try:
            found = unfurls.unfurls_for(links, self.services.store.thread_view())
        except StoreError as exc:
            log.error("event=unfurl_failed stage=archive %s error=%r", where, _one_line(exc))
            return
        if not found.unfurls:
            log.info("event=unfurl_skipped %s %s not_archived=%d", where, counts, found.missing)
            return
        try:
            unfurls.send(client, into, found)
        except SlackApiError as exc:
            error = str(exc.response.get("error") or "unknown_error") if exc.response is not None else "?"
            log.warning("event=unfurl_failed stage=slack %s error=%s", where, error[:60])
            return
        except TRANSPORT_ERRORS as exc:
            log.warning("event=unfurl_failed stage=slack %s error=%s", where, type(exc).__name__)
            return
        log.info("event=unfurled %s %s unfurled=%d not_archived=%d", where, counts, len(found.unfurls),
                 found.missing)

    def entity_details(self, event: dict[str, Any], context: BoltContext, client: WebClient) -> None:
        """A paper card opened (a Work Object): its flexpane (`bot.flexpane`; one log line)."""
        flexpane.present(event, _team(context), self.for_request(client), client)

    # App Home ---------------------------------------------------------------------------------------

    def home(self, event: dict[str, Any], client: WebClient, context: BoltContext,
             set_suggested_prompts: Any = None) -> None:
        if event.get("tab") == "messages":
            self._messages_opened(event, client, context, set_suggested_prompts)
            return
        if event.get("tab", "home") != "home":
            return
        self._publish_home(client, _team(context, event), str(event.get("user") or ""))

    # the Messages tab -------------------------------------------------------------------------------

    def _messages_opened(self, event: dict[str, Any], client: WebClient, context: BoltContext,
                         set_suggested_prompts: Any) -> None:
        """Suggested prompts on every open (Bolt's `set_suggested_prompts`, no thread_ts: the tab's); the
        greeting on the first only."""
        team_id, user_id = _team(context, event), str(event.get("user") or "")
        channel = str(event.get("channel") or "")
        if not (team_id and user_id and channel):
            return
        _suggest(set_suggested_prompts)
        store = self.services.store.thread_view()
        if not store.greet_once(team_id, user_id):
            return
        try:
            client.chat_postMessage(channel=channel, text=conversation.GREETING, parse="none",
                                    blocks=[{"type": "section", "text": {"type": "mrkdwn",
                                                                         "text": conversation.GREETING}}])
            log.info("event=greeted team=%s user=%s", team_id, user_id)
        except SlackApiError as exc:
            log.warning("event=greeting_failed team=%s user=%s error=%s", team_id, user_id,
                        _one_line(exc.response.get("error")))

    def context_changed(self, body: dict[str, Any], event: dict[str, Any], client: WebClient,
                        context: BoltContext) -> None:
        """Remember the channel the person is looking at, if the bot can see it (else forget: one line).
        The person is the envelope's authorization (Slack's documented payload has no `event.user`)."""
        team_id, user_id = _team(context, event), _viewer(body, event)
        if not (team_id and user_id):
            log.info("event=context_ignored reason=no_person team=%s", team_id[:20])
            return
        found = event.get("context")
        entities = found.get("entities", []) if isinstance(found, dict) else None
        if not isinstance(entities, list):
            log.info("event=context_ignored reason=malformed team=%s", team_id[:20])
            return
        channels = [e.get("value") for e in entities if isinstance(e, dict)
                    and e.get("type") == "slack#/types/channel_id"]
        channel = next((c for c in channels if isinstance(c, str) and conversation.CHANNEL_ID.fullmatch(c)),
                       "")
        if channels and not channel:  # a channel named in a shape Slack does not send
            log.info("event=context_ignored reason=malformed team=%s", team_id[:20])
            return
        store = self.services.store.thread_view()
        if not conversation.CHANNEL_ID.fullmatch(channel):
            store.set_viewing(team_id, user_id, None)
            return
        try:
            client.conversations_info(channel=channel)
        except SlackApiError as exc:
            log.info("event=context_unseen team=%s user=%s channel=%s error=%s", team_id, user_id, channel,
                     _one_line(exc.response.get("error")))
            store.set_viewing(team_id, user_id, None)
            return
        store.set_viewing(team_id, user_id, channel)

    # agent sessions: the stop button ------------------------------------------------------------------

    def session_stopped(self, event: dict[str, Any], context: BoltContext) -> None:
        """Slack's stop button (`agent_session_stopped`): end the work on that thread's question, here or in
        the process answering it (bot.sessions); that answer ends its stream and leaves processing."""
        team_id = _team(context, event)
        channel, thread_ts = str(event.get("channel") or ""), str(event.get("thread_ts") or "")
        if not (team_id and conversation.ANY_CHANNEL_ID.fullmatch(channel) and _TS.fullmatch(thread_ts)):
            log.info("event=session_stop_ignored reason=malformed team=%s", team_id[:20])
            return
        found = self.stops.request_stop(self.services.store.thread_view(), team_id, channel, thread_ts)
        log.info("event=session_stop team=%s channel=%s thread=%s found=%d", team_id, channel, thread_ts,
                 found)

    # feedback on answers ----------------------------------------------------------------------------

    def feedback(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """Store a 👍/👎 on an answer (the last vote counts) and thank the person ephemerally."""
        team_id, user_id, channel_id, vote = _clicked(body, context)
        container = body.get("container") or {}
        message_ts = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
        thread_ts = str(container.get("thread_ts") or (body.get("message") or {}).get("thread_ts") or "")
        if not (team_id and user_id and channel_id and message_ts) or vote not in ("up", "down"):
            log.info("event=feedback_refused reason=malformed team=%s", team_id[:20])
            return
        store = self.services.store.thread_view()
        outcome: str
        try:
            outcome = store.record_feedback(team_id, channel_id, message_ts, user_id, vote)
        except StoreError as exc:
            log.error("event=feedback_failed team=%s user=%s error=%r", team_id, user_id, _one_line(exc))
            outcome = "store_error"
        log.info("event=feedback team=%s channel=%s user=%s vote=%s outcome=%s", team_id, channel_id, user_id,
                 vote, outcome)
        text = {"not_an_answer": "Thanks, but that message isn't one of my answers, so nothing was recorded.",
                "store_error": "Sorry, I couldn't record that just now; please try again in a minute.",
                "changed": "Thanks, I've changed your vote on that answer.",
                }.get(outcome, "Thanks for the feedback! It helps the people who run me improve my answers.")
        try:
            client.chat_postEphemeral(channel=channel_id, user=user_id, text=text,
                                      thread_ts=thread_ts or None)
        except SlackApiError as exc:
            log.warning("event=feedback_reply_failed team=%s error=%s", team_id,
                        _one_line(exc.response.get("error")))

    def _publish_home(self, client: WebClient, team_id: str, user_id: str) -> None:
        if not user_id:
            return
        visible = _channels_of(client, user_id)
        view = home.home_view(self.services.store.thread_view(), team_id, user_id, visible)
        client.views_publish(user_id=user_id, view=view)
        log.info("event=home_published team=%s user=%s blocks=%d", team_id, user_id, len(view["blocks"]))

    # lifecycle --------------------------------------------------------------------------------------

    def uninstalled(self, event: dict[str, Any], context: BoltContext) -> None:
        team_id = _team(context, event)
        if not team_id:
            return
        self.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=app_uninstalled", team_id)

    def tokens_revoked(self, body: dict[str, Any], event: dict[str, Any], context: BoltContext) -> None:
        revoked = (event.get("tokens") or {}).get("bot")
        if not revoked:
            return  # only user tokens went away; the bot token still works
        team_id = _team(context, event)
        if not team_id:
            return
        if not isinstance(revoked, list) or not _revokes_own_bot(body, context, team_id, revoked):
            log.info("event=tokens_revoked_ignored team=%s reason=not_this_workspaces_bot", team_id)
            return  # another workspace's bot user (a shared channel's): this one's token still works
        self.services.store.forget_workspace(team_id)
        log.info("event=workspace_forgotten team=%s reason=tokens_revoked", team_id)

    def archived(self, event: dict[str, Any], context: BoltContext) -> None:
        self._pause(_team(context, event), _channel(event), "channel archived")

    def left(self, event: dict[str, Any], context: BoltContext) -> None:
        self._pause(_team(context, event), _channel(event), "bot removed from channel")

    def member_left(self, event: dict[str, Any], context: BoltContext) -> None:
        if event.get("user") and event.get("user") == context.get("bot_user_id"):
            self._pause(_team(context, event), _channel(event), "bot removed from channel")

    def deleted(self, event: dict[str, Any], context: BoltContext) -> None:
        team_id, channel_id = _team(context, event), _channel(event)
        if team_id and channel_id and self.services.store.unsubscribe(team_id, channel_id):
            log.info("event=unsubscribed team=%s channel=%s reason=channel_deleted", team_id, channel_id)

    def _pause(self, team_id: str, channel_id: str, reason: str) -> None:
        store = self.services.store
        if team_id and channel_id and store.get_subscription(team_id, channel_id) is not None:
            store.pause_subscription(team_id, channel_id, reason)
            log.info("event=paused team=%s channel=%s reason=%r", team_id, channel_id, reason)


def _channels_of(client: WebClient, user_id: str) -> set[str]:
    """The channels `user_id` is in (users.conversations, which a bot token answers for the channels the bot
    is in too: every subscribed one), whose subscriptions the person's App Home lists. When Slack cannot say,
    none: the Home then only counts the workspace's subscriptions (it never shows a channel to someone who
    may not see it)."""
    found: set[str] = set()
    cursor = None
    try:
        for _ in range(HOME_CHANNEL_PAGES):
            page = client.users_conversations(user=user_id, types="public_channel,private_channel",
                                              exclude_archived=True, limit=200, cursor=cursor)
            found |= {str(c.get("id")) for c in page.get("channels") or [] if c.get("id")}
            cursor = (page.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
    except SlackApiError as exc:
        log.warning("event=home_channels_unknown user=%s error=%s", user_id[:20],
                    _one_line(exc.response.get("error") if exc.response is not None else exc))
        return set()
    except TRANSPORT_ERRORS as exc:
        log.warning("event=home_channels_unknown user=%s error=%s", user_id[:20], type(exc).__name__)
        return set()
    return found


def _viewer(body: dict[str, Any], event: dict[str, Any]) -> str:
    """The person an `app_context_changed` is about: the envelope's authorization that is not a bot (as Slack
    documents the event), else an `event.user` (an older shape)."""
    for auth in body.get("authorizations") or []:
        if isinstance(auth, dict) and not auth.get("is_bot") and isinstance(auth.get("user_id"), str):
            return str(auth["user_id"])[:40]
    user = event.get("user")
    return user[:40] if isinstance(user, str) else ""


def _suggest(set_suggested_prompts: Any, thread_ts: str | None = None) -> None:
    """The suggested prompts, through Bolt's `set_suggested_prompts` (the tab's, or a thread's)."""
    if set_suggested_prompts is None:
        return
    try:
        set_suggested_prompts(prompts=conversation.prompts(), title=conversation.PROMPTS_TITLE,
                              thread_ts=thread_ts)
    except SlackApiError as exc:
        log.warning("event=suggested_prompts_failed error=%s",
                    _one_line(exc.response.get("error") if exc.response is not None else "?"))
    except TRANSPORT_ERRORS as exc:
        log.warning("event=suggested_prompts_failed error=%s", type(exc).__name__)


def _team(context: dict[str, Any], event: dict[str, Any] | None = None) -> str:
    """The workspace Bolt authorized the request for (`context.team_id`), or '' (logged when `event` is
    given) when there is none: nothing is read or written for it."""
    team_id = str(context.get("team_id") or "")
    if not team_id and event is not None:
        log.info("event=no_workspace type=%s", str(event.get("type"))[:40])
    return team_id


def _revokes_own_bot(body: dict[str, Any], context: BoltContext, team_id: str, revoked: list[Any]) -> bool:
    """Whether `revoked` (tokens_revoked's `tokens.bot`: user IDs) holds our bot user in the workspace Bolt
    authorized (`team_id`): Bolt's `bot_user_id`, or, as Bolt authorizes this event without a token, the bot
    authorization Slack signed into the body for that workspace (its installation's bot user); none there
    (authorizations of people only): not known to be ours. A body without authorizations is authorized for
    its own `team_id`, the workspace whose token went."""
    own = context.get("bot_user_id")
    if own:
        return own in revoked
    grants = [g for g in body.get("authorizations") or [] if isinstance(g, dict)]
    if not grants:
        return True
    bots = {g.get("user_id") for g in grants if g.get("team_id") == team_id and g.get("is_bot")}
    return any(user in bots for user in revoked if user)


def _channel(event: dict[str, Any]) -> str:
    channel = event.get("channel")
    if isinstance(channel, dict):  # some events carry a channel object
        return str(channel.get("id") or "")
    return str(channel or "")


def _clicked(body: dict[str, Any], context: BoltContext) -> tuple[str, str, str, str]:
    """(team_id, user_id, channel_id, the button's value) of a block_actions request ('' when absent)."""
    user = body.get("user") or {}
    team_id = _team(context)
    channel_id = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
                     or "")
    value = str(((body.get("actions") or [{}])[0] or {}).get("value") or "")
    return team_id, str(user.get("id") or ""), channel_id, value


def _invocation(body: dict[str, Any], context: BoltContext) -> Invocation:
    return Invocation(
        text=str(body.get("text") or ""),
        team_id=_team(context),
        channel_id=str(body.get("channel_id") or ""),
        user_id=str(body.get("user_id") or ""),
        channel_name=body.get("channel_name"),
        response_url=body.get("response_url"),
    )


def _respond_ok(respond: Respond, **message: Any) -> bool:
    try:
        return respond(**message).status_code == 200
    except (OSError, ValueError) as exc:  # the response_url could not be reached (or there is none)
        log.warning("event=respond_failed error=%s", type(exc).__name__)
        return False


def _log_command(inv: Invocation, outcome: str, started: float) -> None:
    words = inv.text.split()
    sub = words[0].lower()[:20] if words else "help"
    log.info("event=slack_command outcome=%s sub=%s team=%s channel=%s user=%s ms=%.1f", outcome,
             sub if sub.isalnum() else "?", inv.team_id, inv.channel_id, inv.user_id,
             (time.perf_counter() - started) * 1000)
