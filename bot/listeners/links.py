"""Links shared in Slack (`bot.unfurls`) and the paper cards they open (Work Objects).

- `link_shared`: the event's links to machinelearning.apple.com are looked up in the archive by a lazy
  listener and unfurled with `chat.unfurl` (title, date, authors, the abstract's start, Save and Related, as
  Block Kit and as a paper card, a Work Object); links to other hosts, links beyond the cap and links the
  archive does not hold are left to Slack.
- `entity_details_requested` (a paper card opened) is answered with its flexpane (`bot.flexpane`).
"""

from __future__ import annotations

from typing import Any

from slack_bolt import BoltContext
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from bot import flexpane, unfurls
from bot.errors import StoreError
from bot.listeners.deps import Deps, log, one_line, team
from bot.slackweb import TRANSPORT_ERRORS


class Links:
    """The listeners of shared links and of the paper cards they open."""

    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    def unfurl(self, event: dict[str, Any], context: BoltContext, client: WebClient) -> None:
        """Unfurl the event's links to our site that the archive holds; one log line says what was done."""
        links = unfurls.apple_links(event)
        team_id = team(context)[:20]
        channel_id = str(event.get("channel") or "")[:20]
        where = f"team={team_id} channel={channel_id}"
        counts = (f"links={links.seen} ours={len(links.wanted)} other_hosts={links.other_hosts} "
                  f"over_cap={links.over_cap}")
        into = unfurls.target(event)
        if not links.wanted or into is None:
            log.info("event=unfurl_skipped %s %s target=%s", where, counts, into is not None)
            return
        try:
            found = unfurls.unfurls_for(links, self.deps.services.store.thread_view())
        except StoreError as exc:
            log.error("event=unfurl_failed stage=archive %s error=%r", where, one_line(exc))
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
        flexpane.present(event, team(context), self.deps.for_request(client), client)
