"""The buttons and menus on items and answers: Share in channel, Save, Related, Cite, More by…, and the
feedback on answers (the App Home's own buttons, Remove and Export .bib, are in `bot.listeners.app_home`).
Each is acked at once and answered by a lazy listener.

- The "Share in channel" button re-posts the same content visibly through `response_url`, then deletes the
  ephemeral original (a summary the model writes again goes on the model lane). A click without a workspace
  gets a one-line answer.
- Save (on every item message and search result) puts the item on the clicker's reading list and says so
  ephemerally (through `response_url`, else `chat.postEphemeral`). Related and Cite answer ephemerally the
  same way (`related` and `cite` of the item), and so does an author chosen in a **More by…** menu
  (`search author:"…"`).
- Feedback: a click on an answer's feedback buttons is stored (bot.store.agent: the last vote counts) and
  thanked ephemerally; a click on anything else gets one line.
"""

from __future__ import annotations

from typing import Any

from slack_bolt import BoltContext, Respond
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import commands, home
from bot.commands import Invocation
from bot.errors import StoreError
from bot.lanes import BUSY
from bot.listeners.deps import SORRY, Deps, clicked, log, one_line, team


class Buttons:
    """The listeners of the buttons and menus on items and answers."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    # the share button -------------------------------------------------------------------------------

    def share(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
              context: BoltContext) -> None:
        """Post the shared content visibly through response_url and delete the ephemeral original; when the
        response_url no longer works (it expires after 30 minutes), post as the bot instead."""
        action = (body.get("actions") or [{}])[0]
        user_id = str((body.get("user") or {}).get("id") or "")
        team_id = team(context)
        channel_id = str((body.get("channel") or {}).get("id") or "")
        if not team_id:
            if respond is not None:
                _respond_ok(respond, response_type="ephemeral", replace_original=False,
                            text=commands.NO_WORKSPACE)
            log.info("event=share_refused reason=no_workspace channel=%s", channel_id[:20])
            return
        value = str(action.get("value") or "")
        if not (self.deps.model_writes() and commands.split(value)[0] == "summarize"):
            self._share(value, user_id, team_id, channel_id, respond, client)
        elif not self.deps.lane.submit(team_id, user_id, self._share, value, user_id, team_id, channel_id,
                                       respond, client):  # a summary is written again: on the model lane
            if respond is not None:
                _respond_ok(respond, response_type="ephemeral", replace_original=False, text=BUSY)
            log.info("event=share_refused reason=busy team=%s user=%s", team_id[:20], user_id[:20])

    def _share(self, value: str, user_id: str, team_id: str, channel_id: str, respond: Respond | None,
               client: WebClient) -> None:
        reply = commands.shared(value, user_id, self.deps.for_request(client), team_id, channel_id)
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

    # Save: the reading list -------------------------------------------------------------------------

    def save(self, body: dict[str, Any], respond: Respond | None, client: WebClient,
             context: BoltContext) -> None:
        """Save the clicked item to the clicker's reading list; one ephemeral line says how it went."""
        team_id, user_id, channel_id, item_id = clicked(body, context)
        store = self.deps.services.store.thread_view()
        if not (team_id and user_id):
            message = "I can't tell who you are in which workspace, so nothing was saved."
        else:
            try:
                outcome = store.save_item(team_id, user_id, item_id) if item_id else "missing"
                message = home.saved_reply(outcome, store.get_item(item_id) if item_id else None)
            except StoreError as exc:
                outcome = "store_error"
                log.error("event=save_failed team=%s user=%s error=%r", team_id, user_id, one_line(exc))
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
                            one_line(exc))

    # Related, Cite, More by… -----------------------------------------------------------------------

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
        team_id = team(context)
        channel_id = str((body.get("channel") or {}).get("id") or "")
        said = value if value is not None else str(action.get("value") or "")[:2000]
        inv = Invocation(text=f"{name} {said}", team_id=team_id, channel_id=channel_id, user_id=user_id)
        reply = commands.handle(inv, self.deps.for_request(client))
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

    # feedback on answers ----------------------------------------------------------------------------

    def feedback(self, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        """Store a 👍/👎 on an answer (the last vote counts) and thank the person ephemerally."""
        team_id, user_id, channel_id, vote = clicked(body, context)
        container = body.get("container") or {}
        message_ts = str(container.get("message_ts") or (body.get("message") or {}).get("ts") or "")
        thread_ts = str(container.get("thread_ts") or (body.get("message") or {}).get("thread_ts") or "")
        if not (team_id and user_id and channel_id and message_ts) or vote not in ("up", "down"):
            log.info("event=feedback_refused reason=malformed team=%s", team_id[:20])
            return
        store = self.deps.services.store.thread_view()
        outcome: str
        try:
            outcome = store.record_feedback(team_id, channel_id, message_ts, user_id, vote)
        except StoreError as exc:
            log.error("event=feedback_failed team=%s user=%s error=%r", team_id, user_id, one_line(exc))
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
                        one_line(exc.response.get("error")))


def _respond_ok(respond: Respond, **message: Any) -> bool:
    try:
        return respond(**message).status_code == 200
    except (OSError, ValueError) as exc:  # the response_url could not be reached (or there is none)
        log.warning("event=respond_failed error=%s", type(exc).__name__)
        return False
