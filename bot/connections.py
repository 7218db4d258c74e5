"""The HTTP server's connections, bounded, so that a slow or idle client never costs another request its time
(Slack waits 3 s for an answer).

waitress alone keeps at most `connection_limit` connections (100) and closes one only after
`channel_timeout` (120 s) without a byte: 100 clients that each send a request line and nothing more held
every connection for two minutes, and /healthz and Slack's requests waited behind them. `BoundedServer`
(waitress's server, three rules added):

- at most `max_connections` (MAX_CONNECTIONS) at once. A new connection past that takes the place of the one
  that has waited longest without a whole request (idle, or still sending its head or body); a connection
  whose request is being answered is never closed for another. When every connection is being answered, new
  ones wait in the kernel's queue (waitress's `backlog`) until one is done;
- a request's head and body must arrive within `request_seconds` (REQUEST_SECONDS) of its first byte, else
  its connection is closed without an answer (waitress has no such deadline; a client sending a byte now and
  then kept its connection for as long as it liked);
- a connection with no request in progress is closed after `idle_seconds` (IDLE_SECONDS) without a byte
  (waitress's `channel_timeout`): longer than Heroku's router keeps an idle connection to a dyno (90 s), so
  the router always closes first and never sends a request down a connection being closed.

The rules are checked every `check_seconds` (waitress's `cleanup_interval`). waitress hands a request to a
thread only once its head and body have arrived, so a slow client never holds one of the threads. The loop
uses poll(), not select(), which cannot watch a descriptor numbered past 1023. Connections closed by the
deadline or to make room are counted in one log line per check (`event=connections_closed`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from msgspec import Struct
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer

log = logging.getLogger("bot.connections")

MAX_CONNECTIONS = 200
REQUEST_SECONDS = 10.0  # Slack sends a request of a few KB at once; Heroku's router sends it once it has it
IDLE_SECONDS = 95  # Heroku's router (Router 2.0) closes an idle keep-alive connection after 90 s
CHECK_SECONDS = 1


class ConnectionLimits(Struct, frozen=True):
    max_connections: int = MAX_CONNECTIONS
    request_seconds: float = REQUEST_SECONDS
    idle_seconds: int = IDLE_SECONDS  # whole seconds, as waitress takes them
    check_seconds: int = CHECK_SECONDS


class _Parser(HTTPRequestParser):
    """waitress's request parser, remembering when the request's first byte arrived."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.started = time.time()  # waitress's own clock (channel.last_activity)


class _Channel(HTTPChannel):
    parser_class = _Parser

    def waiting_since(self) -> float | None:
        """When this connection began waiting for a whole request: the first byte of the one it is receiving,
        else its last activity (it is idle); None while a request of it is being answered."""
        if self.requests or self.total_outbufs_len or self.will_close or self.close_when_flushed:
            return None
        request = self.request
        return request.started if isinstance(request, _Parser) else self.last_activity


class BoundedServer(TcpWSGIServer):
    """waitress's TCP server with the limits of `ConnectionLimits` (see the module's docstring)."""

    channel_class = _Channel

    def __init__(self, application: Any, limits: ConnectionLimits, **adjustments: Any) -> None:
        self.limits = limits
        self.closed = {"slow": 0, "evicted": 0}
        # waitress's own limit (it stops accepting) is only a backstop: `readable` stops first. Its map also
        # holds the listening socket and the trigger, and a connection closed to make room is counted until
        # it has closed (in the loop's next turn).
        adj = Adjustments(connection_limit=limits.max_connections + 4, channel_timeout=limits.idle_seconds,
                          cleanup_interval=limits.check_seconds, asyncore_use_poll=True, **adjustments)
        super().__init__(application, adj=adj, sockinfo=adj.listen[0])

    def open_connections(self) -> list[_Channel]:
        """The connections not already closing."""
        return [channel for channel in list(self.active_channels.values()) if not channel.will_close]

    def readable(self) -> bool:
        """Accept a connection while there is room, or one connection to close for it."""
        if not super().readable():  # waitress's maintenance runs here, every check_seconds
            return False
        connections = self.open_connections()
        return len(connections) < self.limits.max_connections or any(
            channel.waiting_since() is not None for channel in connections)

    def handle_accept(self) -> None:
        connections = self.open_connections()
        if len(connections) >= self.limits.max_connections:
            self._make_room(connections)
        super().handle_accept()

    def _make_room(self, connections: list[_Channel]) -> None:
        """Close the connection that has waited longest without a whole request (none is closed while every
        one is being answered). It closes in the loop's next turn, as waitress closes connections: closed now,
        its descriptor could be the new connection's while this turn still has events of the old one."""
        waiting = [(since, channel) for channel in connections
                   if (since := channel.waiting_since()) is not None]
        if waiting:
            _since, oldest = min(waiting, key=lambda pair: pair[0])
            oldest.will_close = True
            self.closed["evicted"] += 1

    def maintenance(self, now: float) -> None:
        """waitress's (idle connections close after idle_seconds), then requests whose head and body did not
        arrive within request_seconds; one log line for what was closed to keep the limits."""
        super().maintenance(now)
        cutoff = now - self.limits.request_seconds
        for channel in list(self.active_channels.values()):
            request = channel.request
            if (not channel.requests and not channel.will_close and isinstance(request, _Parser)
                    and request.started < cutoff):
                channel.will_close = True
                self.closed["slow"] += 1
        if any(self.closed.values()):
            log.warning("event=connections_closed slow=%d evicted=%d open=%d max=%d", self.closed["slow"],
                        self.closed["evicted"], len(self.active_channels), self.limits.max_connections)
            self.closed = {"slow": 0, "evicted": 0}
