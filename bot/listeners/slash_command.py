"""`/mlresearch`: a fast command is answered in its ack (ephemeral); a slow one (`commands.is_slow`: a summary
written by the model) is admitted to the model lane (`bot.lanes`: its own small pool, capped per person and
per workspace), acked at once, and answered through `response_url` from the lane; over a cap, the ack is the
one line `lanes.BUSY`. Nothing that calls the model runs on the lazy listeners' pool, so Save, Home and the
other cheap work never wait behind it. A command without a workspace gets a one-line answer
(`bot.commands`)."""

from __future__ import annotations

import time
from typing import Any

from slack_bolt import Ack, BoltContext, Respond
from slack_sdk import WebClient

from bot import commands
from bot.commands import Invocation
from bot.lanes import BUSY
from bot.listeners.deps import SORRY, Deps, log, one_line, team

COMMAND = "/mlresearch"
WORKING = "Working on it… the answer will appear here in a moment."


class SlashCommand:
    """`/mlresearch`'s listeners: `is_fast` picks `fast` (answered in the ack) or `deferred` (the lane)."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def is_fast(self, body: dict[str, Any], context: BoltContext) -> bool:
        return not commands.is_slow(_invocation(body, context), self.deps.services)

    def fast(self, ack: Ack, body: dict[str, Any], client: WebClient, context: BoltContext) -> None:
        started = time.perf_counter()
        inv = _invocation(body, context)
        try:
            reply = commands.handle(inv, self.deps.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, one_line(exc))
            ack(response_type="ephemeral", text=SORRY)
            return
        ack(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        _log_command(inv, "answered", started)

    def deferred(self, ack: Ack, body: dict[str, Any], respond: Respond, client: WebClient,
                 context: BoltContext) -> None:
        """A slow command: a place on the model lane, then "working on it" (the lane answers through
        `response_url`); over a cap, the busy line instead."""
        started = time.perf_counter()
        inv = _invocation(body, context)
        slot = self.deps.lane.admit(inv.team_id, inv.user_id)
        if slot is None:
            ack(response_type="ephemeral", text=BUSY)
            _log_command(inv, "busy", started)
            return
        try:
            ack(response_type="ephemeral", text=WORKING)
        finally:
            slot.start(self.on_lane, body, respond, client, context)
        _log_command(inv, "deferred", started)

    def on_lane(self, body: dict[str, Any], respond: Respond, client: WebClient,
                context: BoltContext) -> None:
        """A slow command's answer, on the model lane: it replaces the "working on it" note."""
        inv = _invocation(body, context)
        started = time.perf_counter()
        try:
            reply = commands.handle(inv, self.deps.for_request(client))
        except Exception as exc:  # noqa: BLE001 - handle() should not raise; if it does, one line for the user
            log.error("event=command_error error=%s: %s", type(exc).__name__, one_line(exc))
            respond(response_type="ephemeral", replace_original=True, text=SORRY)
            return
        answer = respond(response_type="ephemeral", replace_original=True, text=reply.text,
                         blocks=reply.blocks)
        if answer.status_code != 200:  # the "working" note could not be replaced: answer beside it
            answer = respond(response_type="ephemeral", text=reply.text, blocks=reply.blocks)
        outcome = "responded" if answer.status_code == 200 else f"respond_failed:{answer.status_code}"
        _log_command(inv, outcome, started)


def _invocation(body: dict[str, Any], context: BoltContext) -> Invocation:
    return Invocation(
        text=str(body.get("text") or ""),
        team_id=team(context),
        channel_id=str(body.get("channel_id") or ""),
        user_id=str(body.get("user_id") or ""),
        channel_name=body.get("channel_name"),
        response_url=body.get("response_url"),
    )


def _log_command(inv: Invocation, outcome: str, started: float) -> None:
    words = inv.text.split()
    sub = words[0].lower()[:20] if words else "help"
    log.info("event=slack_command outcome=%s sub=%s team=%s channel=%s user=%s ms=%.1f", outcome,
             sub if sub.isalnum() else "?", inv.team_id, inv.channel_id, inv.user_id,
             (time.perf_counter() - started) * 1000)
