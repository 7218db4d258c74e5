"""Citing in one click: `/mlresearch cite`, the **Cite** button, and the reading list as a .bib file.

    item, words = find("<https://machinelearning.apple.com/research/x>", index, store)  # or title words
    cite_reply(item, words)            # the BibTeX entry (a code block) and the same reference in plain text
    send_reading_list(client, store, team_id, user_id)   # the App Home's button: the .bib file, in a DM

The entry and the plain text are `bot.bibtex`'s. Words pick the item the search ranks first (as `related`
does), and the reply names it; a link no item has, words that find nothing, or only punctuation are one line
(`NothingFound`, `SearchError`). A reply is ephemeral: the command's and the button's alike.

The reading list goes to the person's direct message with the app as one file, `reading-list-DATE.bib`
(UTF-8, one entry per saved item, keys unique within it), uploaded with slack_sdk's `files_upload_v2`:
files.getUploadURLExternal (filename, length), the bytes POSTed to the URL it gives, then
files.completeUploadExternal (the file's id and title, the DM's `channel_id`, a one-line comment). That needs
the `files:write` scope; an install without it gets a line in the DM saying to reinstall, and an empty
reading list a line and no file.
"""

from __future__ import annotations

import logging
import re
from datetime import date
from typing import Any
from urllib.parse import urlsplit

from slack_sdk.errors import SlackApiError, SlackRequestError

from bot import bibtex
from bot.blocks import cut, escape, title_link
from bot.errors import NothingFound, StoreError
from bot.models import Item
from bot.search.index import SearchIndex
from bot.search.related import find_item
from bot.slackweb import TRANSPORT_ERRORS
from bot.store import Store
from bot.views import Blocks, context, quoted, section

log = logging.getLogger("bot.cite")

SITE_HOST = "machinelearning.apple.com"
CODE_CHARS = 2900  # of one code block's text (a section holds 3,000); a longer entry spans two, cut on a line
_LINK = re.compile(r"(?i)^<?(https?://[^\s|>]+)(?:\|[^>]*)?>?$")


def find(text: str, index: SearchIndex, store: Store) -> tuple[Item, str | None]:
    """The item `text` names (a link to it, or words of its title: the search's first) and the words when
    words found it (None for a link). NothingFound (one line) for a link no item has, or words that find
    nothing; SearchError for a text with no word."""
    said = " ".join(text.split())
    link = _LINK.match(said)
    if link is None:
        return find_item(index, said, store), said
    try:
        return find_item(index, link.group(1), store), None
    except NothingFound:
        host = (urlsplit(link.group(1)).hostname or "").lower()
        if host and host != SITE_HOST:
            raise NothingFound(f"That link is to {host[:60]}, not to a post I have archived: cite takes a "
                               f"link to a {SITE_HOST} post, or words of its title.") from None
        raise


def cite_reply(item: Item, words: str | None = None, venue: str | None = None) -> tuple[str, Blocks]:
    """The reply to a cite: which item (the first match for `words`, when words found it), its BibTeX entry
    in a code block, the same reference in plain text, and where the whole reading list is."""
    entry, reference = bibtex.entry(item, venue), bibtex.plain(item, venue)
    which = f"*{title_link(item, 150)}*"
    head = f"BibTeX for {which}" if words is None else f"The first match for {quoted(words, 80)}: {which}"
    blocks: Blocks = [context(head), *code_blocks(entry), context("The same, in plain text:"),
                      section(escape(reference))]
    blocks.append(context("Your whole reading list as a .bib file: *Export .bib* in my App Home (the Home "
                          "tab)."))
    return cut(f"BibTeX for {escape(cut(item.title, 100))}: {escape(reference)}", 3000), blocks


def code_blocks(text: str) -> Blocks:
    """`text` in mrkdwn code blocks (escaped): one section, or more, cut between lines, when it is longer
    than CODE_CHARS. A line of three backticks would end the block early: it is broken with a zero-width
    space (shown only; the file and the command line hold the text as is)."""
    lines = escape(text).replace("```", "``\u200b`").split("\n")
    chunks: list[list[str]] = [[]]
    for line in lines:
        line = line[: CODE_CHARS - 10]
        if chunks[-1] and sum(len(n) + 1 for n in chunks[-1]) + len(line) > CODE_CHARS - 8:
            chunks.append([])
        chunks[-1].append(line)
    return [section("```\n" + "\n".join(chunk) + "\n```") for chunk in chunks]


# --- the reading list as a .bib file, in a DM --------------------------------------------------------------

EMPTY = ("Your reading list is empty, so there is nothing to export: click *Save* on any item I post or "
         "find, then *Export .bib* in my App Home.")
NO_SCOPE = ("I can't upload files in this workspace yet: the app needs the `files:write` scope. Ask an admin "
            "to reinstall it (Settings → Install App), then click *Export .bib* again.")
FAILED = "Sorry, I couldn't upload your reading list just now; please try again in a minute."


def send_reading_list(client: Any, store: Store, team_id: str, user_id: str,
                      today: date | None = None) -> str:
    """The person's reading list (this workspace's) as a .bib file in their DM with the app; a line
    instead when it is empty or the upload fails. Returns the outcome ("sent", "empty", "no_scope",
    "failed", "store_error"), logged in one line."""
    where = f"team={team_id[:20]} user={user_id[:20]}"
    try:
        saved = store.saved_items(team_id, user_id)
    except StoreError as exc:
        log.error("event=bib_export_failed stage=store %s error=%r", where, " ".join(str(exc).split())[:200])
        _tell(client, user_id, "I can't reach the archive right now; please try again in a minute.")
        return "store_error"
    try:
        opened = client.conversations_open(users=user_id)
        dm = str((opened.get("channel") or {}).get("id") or user_id)
    except SlackApiError as exc:
        log.warning("event=bib_export_failed stage=conversations.open %s error=%s", where, _code(exc))
        dm = user_id  # chat.postMessage to a user ID lands in the app's DM
    except TRANSPORT_ERRORS as exc:
        log.warning("event=bib_export_failed stage=conversations.open %s error=%s", where, type(exc).__name__)
        return "failed"
    if not saved:
        _tell(client, dm, EMPTY)
        log.info("event=bib_export %s outcome=empty", where)
        return "empty"
    day = (today or date.today()).isoformat()
    listed = [s.item for s in saved]
    text = bibtex.bibliography(listed, {i.id: i.venue for i in listed if i.venue})  # where each appeared
    count = len(saved)
    comment = (f"Your reading list as BibTeX: {count} {'entry' if count == 1 else 'entries'}, keys unique "
               "within the file (UTF-8; biber and LaTeX read it as is).")
    try:
        client.files_upload_v2(channel=dm, content=text, filename=f"reading-list-{day}.bib",
                               title=f"Reading list, {day}", initial_comment=comment)
    except SlackApiError as exc:
        code = _code(exc)
        log.warning("event=bib_export_failed stage=upload %s error=%s", where, code)
        _tell(client, dm, NO_SCOPE if code == "missing_scope" else FAILED)
        return "no_scope" if code == "missing_scope" else "failed"
    except (SlackRequestError, *TRANSPORT_ERRORS) as exc:
        log.warning("event=bib_export_failed stage=upload %s error=%s", where, type(exc).__name__)
        _tell(client, dm, FAILED)
        return "failed"
    log.info("event=bib_export %s outcome=sent entries=%d bytes=%d", where, count, len(text.encode()))
    return "sent"


def _tell(client: Any, channel: str, text: str) -> None:
    """One line in the person's DM (its failure is a log line)."""
    try:
        client.chat_postMessage(channel=channel, text=text, parse="none",
                                blocks=[section(text)], unfurl_links=False, unfurl_media=False)
    except SlackApiError as exc:
        log.warning("event=bib_export_reply_failed error=%s", _code(exc))
    except TRANSPORT_ERRORS as exc:
        log.warning("event=bib_export_reply_failed error=%s", type(exc).__name__)


def _code(exc: SlackApiError) -> str:
    return str((exc.response.get("error") if exc.response is not None else None) or "unknown_error")[:60]
