"""Questions to the bot (`bot.conversation`): mentions, direct messages, the assistant pane and the Messages
tab, each an agent session, and Slack's stop button.

- A mention (`app_mention`), a direct message (`message` with `channel_type` `im`) or a reply in a DM thread
  (Bolt's `Assistant` middleware takes every one: `user_message`) is claimed in the request (`claim`), acked
  at once and answered in its thread by a lazy listener (handed to the model lane when a model writes
  answers; over a cap, the thread gets `lanes.BUSY`). Each is an agent session (`bot.sessions`): processing
  at once with a title and Bolt's loading messages (`set_status`), streamed with Bolt's `say_stream`, active
  when done. Slack's stop button (`agent_session_stopped`) is handled in the request itself, so the answer
  stops within a second. `thread_started` (the legacy assistant pane) suggests prompts. Messages of bots
  (this one included), edits and the like are acked and left alone (`bot.listeners.register`).
- The Messages tab (the agent messaging experience, `features.agent_view`): a top-level message there is a
  direct message, answered in its own thread like the others; `app_home_opened` with tab `messages` (routed
  here by `bot.listeners.app_home`) greets the person once (stored) and sets suggested prompts (Bolt's
  `set_suggested_prompts`, no thread_ts); `app_context_changed` remembers the channel the person (the
  envelope's authorization, as Slack documents it) is looking at (when the bot can see it:
  conversations.info), for "what's new here?". Workspaces installed with `assistant_view` keep the assistant
  pane's `thread_started` until they update.
"""

from __future__ import annotations

import re
from typing import Any

from slack_bolt import Ack, BoltContext
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import conversation
from bot.lanes import BUSY
from bot.listeners.deps import Deps, log, one_line, team
from bot.sessions import Stops
from bot.slackweb import TRANSPORT_ERRORS

CLAIM = "mlresearch_question_claim"  # the request context's key for conversation.claim's outcome
_TS = re.compile(r"\d{1,12}\.\d{1,8}")  # a Slack message timestamp


def is_direct_message(event: dict[str, Any]) -> bool:
    return event.get("channel_type") == "im"


class Questions:
    """The listeners of questions; `stops` holds the questions this process is answering, for Slack's stop
    button."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        self.stops = Stops()

    # mentions, direct messages, the assistant pane ----------------------------------------------------

    def claim(self, body: dict[str, Any], context: dict[str, Any]) -> None:
        """In the request, before the ack goes out: claim the question (the lazy answer reads the outcome
        from the request's context, which its copy carries)."""
        question = conversation.question_from_event(body, context.get("bot_user_id"), team(context))
        if question is not None:
            context[CLAIM] = conversation.claim(question, self.deps.services.store.thread_view())

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
        question = conversation.question_from_event(body, context.get("bot_user_id"), team(context))
        claimed = context.get(CLAIM)
        if question is None or claimed is None:
            return

        def answer() -> None:
            conversation.answer(question, self.deps.for_request(client), client, str(claimed),
                                stops=self.stops, **pane)

        if not self.deps.model_writes():
            answer()
        elif not self.deps.lane.submit(question.team_id, question.user_id, answer):
            conversation.busy(question, self.deps.for_request(client), client, str(claimed), BUSY)

    # the Messages tab -------------------------------------------------------------------------------

    def messages_opened(self, event: dict[str, Any], client: WebClient, context: BoltContext,
                        set_suggested_prompts: Any) -> None:
        """Suggested prompts on every open (Bolt's `set_suggested_prompts`, no thread_ts: the tab's); the
        greeting on the first only."""
        team_id, user_id = team(context, event), str(event.get("user") or "")
        channel = str(event.get("channel") or "")
        if not (team_id and user_id and channel):
            return
        _suggest(set_suggested_prompts)
        store = self.deps.services.store.thread_view()
        if not store.greet_once(team_id, user_id):
            return
        try:
            client.chat_postMessage(channel=channel, text=conversation.GREETING, parse="none",
                                    blocks=[{"type": "section", "text": {"type": "mrkdwn",
                                                                         "text": conversation.GREETING}}])
            log.info("event=greeted team=%s user=%s", team_id, user_id)
        except SlackApiError as exc:
            log.warning("event=greeting_failed team=%s user=%s error=%s", team_id, user_id,
                        one_line(exc.response.get("error")))

    def context_changed(self, body: dict[str, Any], event: dict[str, Any], client: WebClient,
                        context: BoltContext) -> None:
        """Remember the channel the person is looking at, if the bot can see it (else forget: one line).
        The person is the envelope's authorization (Slack's documented payload has no `event.user`)."""
        team_id, user_id = team(context, event), _viewer(body, event)
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
        store = self.deps.services.store.thread_view()
        if not conversation.CHANNEL_ID.fullmatch(channel):
            store.set_viewing(team_id, user_id, None)
            return
        try:
            client.conversations_info(channel=channel)
        except SlackApiError as exc:
            log.info("event=context_unseen team=%s user=%s channel=%s error=%s", team_id, user_id, channel,
                     one_line(exc.response.get("error")))
            store.set_viewing(team_id, user_id, None)
            return
        store.set_viewing(team_id, user_id, channel)

    # agent sessions: the stop button ------------------------------------------------------------------

    def session_stopped(self, event: dict[str, Any], context: BoltContext) -> None:
        """Slack's stop button (`agent_session_stopped`): end the work on that thread's question, here or in
        the process answering it (bot.sessions); that answer ends its stream and leaves processing."""
        team_id = team(context, event)
        channel, thread_ts = str(event.get("channel") or ""), str(event.get("thread_ts") or "")
        if not (team_id and conversation.ANY_CHANNEL_ID.fullmatch(channel) and _TS.fullmatch(thread_ts)):
            log.info("event=session_stop_ignored reason=malformed team=%s", team_id[:20])
            return
        found = self.stops.request_stop(self.deps.services.store.thread_view(), team_id, channel, thread_ts)
        log.info("event=session_stop team=%s channel=%s thread=%s found=%d", team_id, channel, thread_ts,
                 found)


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
                    one_line(exc.response.get("error") if exc.response is not None else "?"))
    except TRANSPORT_ERRORS as exc:
        log.warning("event=suggested_prompts_failed error=%s", type(exc).__name__)
