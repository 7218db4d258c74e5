"""`/mlresearch` text -> one handler per subcommand -> a `Reply` (Block Kit). Independent of Bolt: the app and
the shell call the same `handle`.

    handle(Invocation("search captioning", team_id="T1", channel_id="C1", user_id="U1"), services) -> Reply

`handle` never raises: bad input gets a one-line answer and changes nothing; a store or Slack failure gets a
one-line apology (and a log line), never a trace. Search, latest and summarize replies carry a "Share in
channel" button whose value is the command text; `shared(value, ...)` rebuilds that reply to post visibly.

Where each subcommand lives (`dispatch.HANDLERS` is the one table of them):

    search, latest, related, summarize             bot/commands/archive.py    the archive's reads
    subscribe, unsubscribe, follow, unfollow,      bot/commands/following.py  who gets new items: a channel,
    follows                                                                   a person
    help, status, trending, cite                   bot/commands/info.py       the bot, this workspace, an item
    (text -> handler, refusals, the share button)  bot/commands/dispatch.py
    (Invocation, Services, Reply)                  bot/commands/common.py
"""

from __future__ import annotations

from bot.commands.common import Invocation, Reply, Services
from bot.commands.dispatch import HANDLERS, NO_WORKSPACE, converse, handle, is_slow, shared, split
from bot.views import SHARE_ACTION_ID

__all__ = ["HANDLERS", "NO_WORKSPACE", "SHARE_ACTION_ID", "Invocation", "Reply", "Services", "converse",
           "handle", "is_slow", "shared", "split"]
