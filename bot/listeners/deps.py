"""What every listener shares: the services and the model lane (`Deps`, one per app), the workspace a
request is for (`team`), who clicked what (`clicked`), and the one logger they all write to.

Everything is keyed by the workspace Bolt authorized the request for (`context.team_id`: for an event, its
`authorizations`, not the body's `team_id`, which in a Slack Connect channel can name another workspace);
in OAuth mode the Web API client a handler uses is the one Bolt built for the request, holding that
workspace's token (`Deps.for_request`).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec.structs
from slack_bolt import BoltContext
from slack_sdk import WebClient

from bot.commands import Services
from bot.lanes import ModelLane

log = logging.getLogger("bot.listeners")  # one logger for every surface: its lines read logger=bot.listeners

SORRY = "Sorry, something went wrong on our side; please try again in a minute."


class Deps:
    """The dependencies of every listener: the services, and the model lane that runs the work calling the
    model (one is made if none is given)."""

    def __init__(self, services: Services, lane: ModelLane | None = None) -> None:
        self.services = services
        self.lane = lane if lane is not None else ModelLane()

    def model_writes(self) -> bool:
        """Whether answers are written by the model endpoint (then they run on the model lane)."""
        summarizer = self.services.summarizer
        return summarizer is not None and summarizer.abstractive

    def for_request(self, client: WebClient | None) -> Services:
        """The services for one request: over the store's view for this thread (`Store.thread_view`), and in
        OAuth mode with the request's client (its workspace's token)."""
        services = self.services
        store = services.store.thread_view()
        slack = client if client is not None and services.settings.oauth_enabled else services.slack
        if store is services.store and slack is services.slack:
            return services
        return msgspec.structs.replace(services, store=store, slack=slack)


def team(context: dict[str, Any], event: dict[str, Any] | None = None) -> str:
    """The workspace Bolt authorized the request for (`context.team_id`), or '' (logged when `event` is
    given) when there is none: nothing is read or written for it."""
    team_id = str(context.get("team_id") or "")
    if not team_id and event is not None:
        log.info("event=no_workspace type=%s", str(event.get("type"))[:40])
    return team_id


def clicked(body: dict[str, Any], context: BoltContext) -> tuple[str, str, str, str]:
    """(team_id, user_id, channel_id, the button's value) of a block_actions request ('' when absent)."""
    user = body.get("user") or {}
    team_id = team(context)
    channel_id = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
                     or "")
    value = str(((body.get("actions") or [{}])[0] or {}).get("value") or "")
    return team_id, str(user.get("id") or ""), channel_id, value


def one_line(error: object, limit: int = 200) -> str:
    return " ".join(str(error).split())[:limit]
