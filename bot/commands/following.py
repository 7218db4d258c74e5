"""Who gets new items: a channel's subscription (`/mlresearch subscribe`, with its digest options, and
`unsubscribe`) and a person's follows (`follow`, `unfollow`, `follows`), beside the store's calls they wrap
(`Store.subscribe`, `set_digest`, `follow`, ...). Keywords, "phrases", `about:` topics (matched by meaning,
capped per workspace) and `author:"name"` (resolved by `bot.author_follows`) are read the same way by all.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from slack_sdk.errors import SlackApiError

from bot import author_follows, digest, home, views
from bot.blocks import counted, escape
from bot.commands.common import C, Invocation, Reply, Services, line
from bot.errors import SearchError, StoreError
from bot.models import AUTHOR_PREFIX, MAX_KEYWORDS, MAX_WORKSPACE_TOPICS
from bot.search.keywords import as_spelled
from bot.search.match import MAX_KEYWORD_CHARS, TOPIC_PREFIX, split_keywords

log = logging.getLogger("bot.commands")

# Characters of keywords `subscribe`, `follow` and `unfollow` read at all: MAX_KEYWORDS of MAX_KEYWORD_CHARS,
# quoted, with about: topics and digest options, fit well within it; more is refused before any parsing.
MAX_KEYWORDS_TEXT = 2000
DIGEST_OPTION = re.compile(r"(?<![^\s,])(digest|at):(\S*)", re.IGNORECASE)
SUBSCRIBE_USAGE = (
    f"Usage: `{C} subscribe [keywords…] [digest:daily|weekly] [at:HH:MM]`, e.g. "
    f"`{C} subscribe privacy digest:weekly at:10:00`; nothing was changed."
)
_ABOUT = re.compile(r'(?<!\S)about:(?:"([^"]*)"?|“([^”]*)”?|(\S*))', re.IGNORECASE)
MAX_TOPICS = 3


def cmd_subscribe(rest: str, inv: Invocation, services: Services) -> Reply:
    refused = _too_long(rest, "subscribe")
    if refused is not None:
        return refused
    if _is_dm(inv):
        return line(
            "I can't post new items into a direct message. Run `/mlresearch subscribe` in the channel where "
            "they should appear."
        )
    rest, names = author_follows.author_parts(rest)  # author:"name": first, so its quotes stay its own
    rest, mode, at, problem = _digest_options(rest)
    if problem:
        return line(problem)
    rest, topics = about_topics(rest)
    keywords = split_keywords(rest) + topics
    if rest and not keywords:
        return line(
            f"I found no words to filter on in {views.quoted(rest, 40)}; nothing was changed. Keywords are "
            f'words or "quoted phrases", e.g. `{C} subscribe privacy "speech recognition"`.'
        )
    authors = _author_keywords(names, services)
    problem = authors.problem or _cannot_post(inv, services) or \
        _too_many_topics(inv, services, topics, inv.channel_id)
    if problem:
        return line(problem)
    keywords += authors.keywords
    sub, created = services.store.subscribe(inv.team_id, inv.channel_id, inv.user_id, keywords)
    where = views.channel_ref(inv.channel_id)
    what = views.keywords_text(sub.keywords, _author_counts(sub.keywords, services))
    if mode is not None:
        return _subscribed_digest(inv, services, mode, at or digest.DEFAULT_AT, created)
    waiting = 0
    if sub.digest is not None:  # a plain subscribe turns a digest channel back to one post per item
        waiting = len(services.store.waiting_digest_items(inv.team_id, inv.channel_id))
        services.store.set_digest(inv.team_id, inv.channel_id, None, now=services.clock())
        message = f"Updated {where}'s subscription: no more digests; I'll post {what} here, one by one."
        if waiting:
            message += (f" The {counted(waiting, 'item')} waiting for the digest will be posted at the "
                        "next poll.")
    elif created:
        message = f"Subscribed {where}: I'll post {what} here. Items already archived aren't reposted."
    else:
        message = f"Updated {where}'s subscription: I'll post {what} here."
    change = f"Change it with `{C} subscribe &lt;keywords…&gt;`, stop with `{C} unsubscribe`."
    return line(f"{message}{_misspelt(sub.keywords, services)} {change}")


def _misspelt(keywords: tuple[str, ...] | list[str], services: Services) -> str:
    """A hint for the keywords no archived item says that search takes for misspellings (" No archived item
    says `captoning`: did you mean `captioning`?"), or "". A subscription keeps what was typed: it may name
    what the archive does not hold yet."""
    hints = []
    for keyword in keywords:
        if keyword.startswith((TOPIC_PREFIX, AUTHOR_PREFIX)):  # an author's name was looked up already
            continue
        try:  # spelled only, nothing ranked
            meant = as_spelled(services.index.current(services.store), keyword, services.store)
        except (SearchError, StoreError):
            continue
        if meant:
            hints.append(f" No archived item says `{escape(keyword)}`: did you mean `{escape(meant)}`?")
    return "".join(hints[:3])


def _digest_options(rest: str) -> tuple[str, str | None, str | None, str | None]:
    """`digest:` and `at:` taken out of `subscribe` text: (the rest, mode, "HH:MM", a one-line problem)."""
    mode = at = None
    for found in DIGEST_OPTION.finditer(rest):
        name, value = found.group(1).lower(), found.group(2)
        if name == "digest":
            if mode is not None or value.lower() not in digest.MODES:
                return rest, None, None, SUBSCRIBE_USAGE
            mode = value.lower()
        else:
            if at is not None or digest.parse_at(value) is None:
                return rest, None, None, SUBSCRIBE_USAGE
            at = digest.parse_at(value)
    if at is not None and mode is None:
        problem = f"`at:` sets a digest's time: add `digest:daily` or `digest:weekly`. {SUBSCRIBE_USAGE}"
        return rest, None, None, problem
    return " ".join(DIGEST_OPTION.sub(" ", rest).split()), mode, at, None


def _subscribed_digest(inv: Invocation, services: Services, mode: str, at: str, created: bool) -> Reply:
    tz, note = _time_zone(inv, services)
    sub = services.store.set_digest(inv.team_id, inv.channel_id, mode, at, tz, now=services.clock())
    if sub is None:  # unsubscribed in between
        return line("This channel isn't subscribed any more; nothing was changed.")
    schedule = digest.Schedule.of(sub)
    nxt = digest.next_digest(sub, services.clock())
    assert schedule is not None and nxt is not None
    where = views.channel_ref(inv.channel_id)
    what = views.keywords_text(sub.keywords, _author_counts(sub.keywords, services)).replace(
        "new items", "the new items", 1)
    head = f"Subscribed {where}" if created else f"Updated {where}'s subscription"
    message = (
        f"{head}: a {mode} digest of {what}, {schedule.describe()} "
        f"({escape(tz)}), one message instead of one per item; nothing when a period brings nothing. "
        f"The next one: {digest.local_time(nxt)}."
    )
    if note:
        message += f" {note}"
    change = (f"Change the time with `{C} subscribe digest:{mode} at:HH:MM` (with your keywords), go back to "
              f"one post per item with `{C} subscribe`, stop with `{C} unsubscribe`.")
    return line(f"{message} {change}")


def _time_zone(inv: Invocation, services: Services) -> tuple[str, str]:
    """The IANA time zone of the person running the command, from Slack's `users.info` (scope users:read),
    and a note for the reply when it cannot be read (then UTC)."""
    fallback = "I couldn't read your time zone from Slack, so the time is UTC."
    if services.slack is None:
        return "UTC", fallback
    try:
        answer = services.slack.users_info(user=inv.user_id)
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        log.warning("event=users_info_failed error=%s", str(error)[:40])
        if error == "missing_scope":
            return "UTC", fallback[:-1] + " (the app needs the users:read scope: reinstall it)."
        return "UTC", fallback
    except Exception as exc:  # noqa: BLE001 - the zone is a nicety; UTC still works
        log.warning("event=users_info_failed error=%r", type(exc).__name__)
        return "UTC", fallback
    user = answer.get("user") if isinstance(answer.get("user"), dict) else {}
    name = user.get("tz") if isinstance(user.get("tz"), str) else None
    if digest.zone(name) is None:
        return "UTC", fallback
    assert name is not None
    return name, ""


def _is_dm(inv: Invocation) -> bool:
    return inv.channel_id.startswith("D") or inv.channel_name == "directmessage"


def _cannot_post(inv: Invocation, services: Services) -> str | None:
    """Why the bot could not post in this channel (a private channel it isn't in), or None."""
    invite = (
        "I'm not a member of this private channel, so I couldn't post here; nothing was changed. Invite me "
        "first (type `/invite @` and my name, or mention me and choose Invite), then run "
        f"`{C} subscribe` again."
    )
    if inv.channel_name == "privategroup":
        return invite
    if services.slack is None:
        return None
    try:
        info = services.slack.conversations_info(channel=inv.channel_id)
    except SlackApiError as exc:
        error = exc.response.get("error") if exc.response is not None else None
        if error in ("channel_not_found", "not_in_channel"):
            return invite
        log.warning("event=conversations_info_failed error=%s", error)
        return None
    except Exception as exc:  # noqa: BLE001 - the check is advisory; delivery handles what it misses
        log.warning("event=conversations_info_failed error=%r", str(exc)[:200])
        return None
    channel = info.get("channel") or {}
    if channel.get("is_archived"):
        return "This channel is archived, so I can't post here; nothing was changed."
    if channel.get("is_private") and channel.get("is_member") is False:
        return invite
    return None


def cmd_unsubscribe(rest: str, inv: Invocation, services: Services) -> Reply:
    if rest:
        return line(
            f"`{C} unsubscribe` takes no words; nothing was changed. To change the keywords instead, run "
            f"`{C} subscribe` with the new list."
        )
    where = views.channel_ref(inv.channel_id)
    if services.store.unsubscribe(inv.team_id, inv.channel_id):
        return line(f"Unsubscribed {where}: no more new items will be posted here.")
    where = "This channel" if where == "this channel" else where
    return line(f"{where} isn't subscribed; there was nothing to stop.")


# --- a person's follows ----------------------------------------------------------------------------------


def cmd_follow(rest: str, inv: Invocation, services: Services) -> Reply:
    refused = _too_long(rest, "follow")
    if refused is not None:
        return refused
    rest, names = author_follows.author_parts(rest)  # author:"name": first, so its quotes stay its own
    rest, topics = about_topics(rest)  # about:"topic": matched by meaning, as a subscription's
    keywords = split_keywords(rest) + topics
    if not keywords and not names:
        found = f"I found no words to follow in {views.quoted(rest, 40)}; nothing was changed. " * bool(rest)
        return line(
            f"{found}Usage: `{C} follow &lt;keywords…&gt;`: words or \"quoted phrases\", e.g. "
            f'`{C} follow privacy "speech recognition"`. A new item matching any of them comes to you as a '
            "direct message."
        )
    if not inv.user_id:
        return line("I can't tell who you are, so I can't follow anything for you; nothing was changed.")
    authors = _author_keywords(names, services)
    problem = authors.problem or _too_many_topics(inv, services, topics)
    if problem:
        return line(problem)
    have = services.store.follows(inv.team_id, inv.user_id)
    keywords += author_follows.as_followed(authors.keywords, have)  # as followed already, if it is
    added, over = services.store.follow(inv.team_id, inv.user_id, keywords)
    now = services.store.follows(inv.team_id, inv.user_id)
    return Reply(*home.follow_reply(added, over, now, _author_counts(now, services)))


def cmd_unfollow(rest: str, inv: Invocation, services: Services) -> Reply:
    refused = _too_long(rest, "unfollow")
    if refused is not None:
        return refused
    rest, names = author_follows.author_parts(rest)
    rest, topics = about_topics(rest)
    keywords = split_keywords(rest) + topics
    if names:  # the followed authors each name matches ("unfollow author:Hannun")
        have = services.store.follows(inv.team_id, inv.user_id)
        keywords += author_follows.unfollowed(author_follows.checked(names), have)
    if rest and not keywords:
        return line(
            f"I found no words in {views.quoted(rest, 40)}; nothing was changed. `{C} unfollow` with no "
            "words stops every follow."
        )
    removed = services.store.unfollow(inv.team_id, inv.user_id, keywords)
    now = services.store.follows(inv.team_id, inv.user_id)
    return Reply(*home.unfollow_reply(removed, keywords, now))


def cmd_follows(rest: str, inv: Invocation, services: Services) -> Reply:
    followed = services.store.follows(inv.team_id, inv.user_id)
    return Reply(*home.follows_reply(followed, _author_counts(followed, services)))


# --- what subscribe and follow read alike ----------------------------------------------------------------


def _too_long(rest: str, command: str) -> Reply | None:
    """The one-line refusal of keywords longer than MAX_KEYWORDS_TEXT (None when they fit): refused before
    they are parsed, so a pasted wall of text costs a request thread nothing."""
    if len(rest) <= MAX_KEYWORDS_TEXT:
        return None
    return line(f"That is {len(rest):,} characters of keywords; `{C} {command}` reads at most "
                f"{MAX_KEYWORDS_TEXT:,} ({MAX_KEYWORDS} keywords of up to {MAX_KEYWORD_CHARS} characters), "
                "so nothing was changed.")


def about_topics(text: str) -> tuple[str, list[str]]:
    """The text without its about: parts, and their topics as stored keywords ("about:on-device efficiency":
    lower case, words only, matched by meaning when a poll routes new items, see bot.route)."""
    topics: list[str] = []
    for groups in _ABOUT.findall(text):
        words = re.findall(r"[\w-]+", "".join(groups).lower())
        topic = " ".join(words)[:MAX_KEYWORD_CHARS]
        if topic and TOPIC_PREFIX + topic not in topics:
            topics.append(TOPIC_PREFIX + topic)
    if len(topics) > MAX_TOPICS:
        raise SearchError(f"Subscribe to at most {MAX_TOPICS} about: topics at once.")
    if _ABOUT.search(text) and not topics:
        raise SearchError('about: needs a topic, for example about:"on-device efficiency".')
    return _ABOUT.sub(" ", text).strip(), topics


def _too_many_topics(
    inv: Invocation, services: Services, topics: list[str], channel_id: str | None = None
) -> str | None:
    """The one-line refusal when `topics` would take the workspace past MAX_WORKSPACE_TOPICS distinct about:
    topics (its subscriptions' and follows' together; `channel_id`'s subscription is being replaced). Each
    topic is matched against every new item, so the workspace, not the person, is what is capped; a topic
    already in use anywhere in the workspace costs nothing more."""
    if not topics:
        return None
    have = services.store.workspace_topics(inv.team_id, except_channel=channel_id)
    if len(have | set(topics)) <= MAX_WORKSPACE_TOPICS:
        return None
    return (f"This workspace already has {len(have)} about: topics (at most {MAX_WORKSPACE_TOPICS} across "
            "its subscriptions and follows), so I can't add more; nothing was changed. Reuse a topic, or "
            "remove one first.")


def _author_keywords(names: list[str], services: Services) -> author_follows.Resolved:
    return author_follows.resolved(names, services.index, services.store)


def _author_counts(keywords: Sequence[str], services: Services) -> dict[str, int] | None:
    return author_follows.counted_in(keywords, services.index, services.store)
