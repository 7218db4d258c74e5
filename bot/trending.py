"""What the team is reading: `/mlresearch trending`, a section of the App Home and the end of a weekly digest.

    report = trending(store, "T1", now)  # the workspace's last 30 days, and what Apple published this month
    lines(report) -> ["*Saved most:* <…|Title> (3 saves) · …",
                      "*👍 most in answers:* <…|Title> (2) · …",
                      "*Opened most through Related:* <…|Title> (5 opens) · …",
                      "*Apple's topics in December 2026* (9 items): large language model (4) · …"]

Counts are per workspace, over the last WINDOW_DAYS days: saves (items on people's reading lists, saved in
the window), 👍 on the bot's answers (each vote counts once for every item the answer showed; a vote changed
to 👎 no longer counts) and opens through Related (the button and the `related` command, recorded by
`record_open` per workspace, item and day, with no user id). A line with nothing to count is left out; a
workspace with nothing at all gets one line saying so. No person is named or stored with a count. An item
saved once is listed, as one with more saves is: a threshold would hide all of a small team's reading and
still not hide who saved what from a colleague who watches a count move (from 2 to 3 as from 0 to 1).

The topics: of the items published this calendar month (UTC; while it has none yet, the latest month that
has), the glossary's topics (`bot.search.glossary.topics_named`) named by most of them, a few words of the
field too general to say what a paper is about left out (GENERAL).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta

from msgspec import Struct

from bot.blocks import counted, title_link
from bot.errors import StoreError
from bot.models import Item
from bot.search.glossary import topics_named
from bot.store import Store, utcnow
from bot.store.trending import month_of

log = logging.getLogger("bot.trending")

WINDOW_DAYS = 30
SHOWN = 3  # items on each line
SPARE = 2  # more counted than shown, in case an item is no longer archived
TOPICS_SHOWN = 3
TITLE_CHARS = 70
GENERAL = frozenset({"state of the art", "application programming interface", "user interface",
                     "software development kit"})
QUIET = ("Nothing saved, 👍'd in answers or opened through *Related* in this workspace in the last "
         f"{WINDOW_DAYS} days yet: *Save* and *Related* are on every item I post or find.")


class Trending(Struct, frozen=True):
    """One workspace's counts over the window, and Apple's topics of one month."""

    saved: Sequence[tuple[Item, int]]
    liked: Sequence[tuple[Item, int]]
    opened: Sequence[tuple[Item, int]]
    month: datetime  # the first instant of the month the topics are of (UTC)
    published: int  # items published in that month
    topics: Sequence[tuple[str, int]]  # (topic, items naming it), most first
    latest: bool = False  # `month` is not this month but the latest with items

    @property
    def quiet(self) -> bool:
        """Nothing saved, liked or opened in the window."""
        return not (self.saved or self.liked or self.opened)


def trending(store: Store, team_id: str, now: datetime | None = None) -> Trending:
    """What `team_id` saved, liked and opened most in the WINDOW_DAYS days before `now`, and Apple's topics
    of `now`'s month (while it has none yet, of the latest month with items): `Store.reading`, one query
    while the process's kept reading of the workspace holds, a few when a save, a vote, an open or the
    archive changed it."""
    now = now or utcnow()
    got = store.reading(team_id, now - timedelta(days=WINDOW_DAYS), month_of(now), SHOWN + SPARE)
    saved, liked, opened = ([(got.items[i], n) for i, n in kind if i in got.items][:SHOWN]
                            for kind in (got.saved, got.liked, got.opened))
    return Trending(
        saved=saved,
        liked=liked,
        opened=opened,
        month=got.month,
        published=len(got.texts),
        topics=_topics(got.texts),
        latest=got.latest,
    )


def _topics(texts: Sequence[str]) -> list[tuple[str, int]]:
    """The topics most of the items' `texts` name (each item counts once per topic), ties in alphabetical
    order."""
    counts = Counter(t for text in texts for t in topics_named(text) if t not in GENERAL)
    return sorted(counts.items(), key=lambda tc: (-tc[1], tc[0].lower()))[:TOPICS_SHOWN]


def lines(report: Trending) -> list[str]:
    """The report as mrkdwn lines (titles escaped, as links): one per kind of count that has any (or the
    one line saying there is none), then the month's topics."""
    found = [
        _items_line("Saved most", report.saved, "save"),
        _items_line("👍 most in answers", report.liked, ""),
        _items_line("Opened most through Related", report.opened, "open"),
    ]
    said = [line for line in found if line] or [QUIET]
    return [*said, topics_line(report)]


def _items_line(label: str, counts: Sequence[tuple[Item, int]], noun: str) -> str:
    if not counts:
        return ""
    shown = " · ".join(f"{title_link(item, TITLE_CHARS)} ({counted(n, noun) if noun else n})"
                       for item, n in counts)
    return f"*{label}:* {shown}"


def topics_line(report: Trending) -> str:
    if not report.published:
        return "*Apple's topics:* no item published yet."
    month = f"{report.month:%B %Y}" + (", the latest month with items" if report.latest else "")
    head = f"*Apple's topics in {month}* ({counted(report.published, 'item')})"
    if not report.topics:
        return f"{head}: none of the glossary's topics stands out."
    return f"{head}: " + " · ".join(f"{topic} ({n})" for topic, n in report.topics)


def record_open(store: Store, team_id: str, item_id: str) -> None:
    """Count an open of `item_id` through Related in `team_id` (no workspace: nothing). A store that fails
    here costs a log line, never the reply the person asked for."""
    if not team_id:
        return
    try:
        store.record_related_open(team_id, item_id)
    except StoreError as exc:
        log.warning("event=related_open_not_counted team=%s error=%r", team_id[:20],
                    " ".join(str(exc).split()))


def digest_lines(store: Store, team_id: str, now: datetime) -> list[str]:
    """What a weekly digest ends with: `lines` under a title; [] when the store fails (the digest goes out
    without them, and a log line says so)."""
    try:
        report = trending(store, team_id, now)
    except StoreError as exc:
        log.warning("event=trending_failed team=%s error=%r", team_id[:20], " ".join(str(exc).split()))
        return []
    return [f"*What the team is reading* (the last {WINDOW_DAYS} days)", *lines(report)]
