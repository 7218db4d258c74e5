"""`/mlresearch` text -> one handler per subcommand -> a `Reply` (Block Kit). Independent of Bolt: the app and
the shell call the same `handle`.

    handle(Invocation("search captioning", team_id="T1", channel_id="C1", user_id="U1"), services) -> Reply

`handle` never raises: bad input gets a one-line answer and changes nothing; a store or Slack failure gets a
one-line apology (and a log line), never a trace. Search, latest and summarize replies carry a "Share in
channel" button whose value is the command text; `shared(value, ...)` rebuilds that reply to post visibly.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError

from bot import author_follows, cite, digest, home, status, trending, views, voice
from bot.ask import understand
from bot.blocks import FALLBACK_TEXT_LIMIT, counted, cut, escape
from bot.config import Settings
from bot.errors import SearchError, StoreError
from bot.models import AUTHOR_PREFIX, MAX_KEYWORDS, MAX_WORKSPACE_TOPICS, Subscription
from bot.search.index import SearchIndex
from bot.search.keywords import as_spelled
from bot.search.match import MAX_KEYWORD_CHARS, TOPIC_PREFIX, split_keywords
from bot.search.query import parse_query, split_filters
from bot.search.related import find_item, related, topics_of
from bot.store import Store, utcnow
from bot.summarize import MAX_ITEMS as SUMMARY_ITEMS
from bot.summarize import Summarizer
from bot.views import SHARE_ACTION_ID, Blocks

log = logging.getLogger("bot.commands")

SEARCH_RESULTS = 5
RELATED_RESULTS = 5
LATEST_DEFAULT = 5
LATEST_MAX = 20
# Characters of keywords `subscribe`, `follow` and `unfollow` read at all: MAX_KEYWORDS of MAX_KEYWORD_CHARS,
# quoted, with about: topics and digest options, fit well within it; more is refused before any parsing.
MAX_KEYWORDS_TEXT = 2000
SHAREABLE = ("search", "latest", "summarize")
C = views.COMMAND
DIGEST_OPTION = re.compile(r"(?<![^\s,])(digest|at):(\S*)", re.IGNORECASE)
SUBSCRIBE_USAGE = (
    f"Usage: `{C} subscribe [keywords…] [digest:daily|weekly] [at:HH:MM]`, e.g. "
    f"`{C} subscribe privacy digest:weekly at:10:00`; nothing was changed."
)
COUNT = re.compile(r"[0-9]{1,3}")  # ASCII digits only: str.isdigit() also accepts "²", "٣", "１"
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
NO_WORKSPACE = "This request has no workspace, so I can't answer it; nothing was changed."
CONTROLS = (
    "That command holds control characters (such as terminal escape codes), which I don't read; nothing was "
    "changed. Type it again as plain text."
)

__all__ = ["SHARE_ACTION_ID", "Invocation", "Reply", "Services", "converse", "handle", "is_slow", "shared"]


@dataclass(frozen=True)
class Invocation:
    """What a slash command carries."""

    text: str
    team_id: str
    channel_id: str
    user_id: str
    channel_name: str | None = None
    response_url: str | None = None
    shown: int | None = None  # a question's count ("the latest 3 on privacy"): results shown, at most five


@dataclass(frozen=True)
class Reply:
    text: str  # plain-text fallback (escaped feed text)
    blocks: list[dict[str, Any]] = field(default_factory=list)
    share_value: str | None = None  # when set, `blocks` end with the "Share in channel" button
    searched_for: str | None = None  # a misspelt word was searched as typed right: what was (`_answer` opens
    # a command's reply with it; a thread's answer says it in its header)


@dataclass
class Services:
    store: Store
    settings: Settings
    slack: Any = None  # a slack_sdk.WebClient, for conversations.info
    summarizer: Summarizer | None = None  # None: extractive summaries only
    index: SearchIndex = None  # type: ignore[assignment]  # None: one built from the store on first search
    clock: Callable[[], datetime] = utcnow  # what digest schedules count from

    def __post_init__(self) -> None:
        if self.index is None:
            self.index = SearchIndex(self.store)


def line(message: str) -> Reply:
    """A one-line answer; `message` is mrkdwn the caller has already escaped."""
    return Reply(*views.one_line(message))


def split(text: str) -> tuple[str, str]:
    """(subcommand word in lower case, the rest), accepting a leading `/mlresearch`."""
    text = " ".join(text.split())
    if text.lower().startswith(C + " ") or text.lower() == C:
        text = text[len(C) :].strip()
    word, _, rest = text.partition(" ")
    return word.lower(), rest.strip()


def has_controls(text: str) -> bool:
    """Control characters (but tabs and line breaks, which are spaces), lone surrogates, or bidirectional
    overrides that would reorder how an echoed text reads."""
    return any(
        (unicodedata.category(c) in ("Cc", "Cs") and c not in "\t\n\r") or c in BIDI_CONTROLS for c in text
    )


def handle(inv: Invocation, services: Services) -> Reply:
    """The reply to one `/mlresearch` invocation. Never raises."""
    return _answer(inv, services, shared_by=None)


def converse(inv: Invocation, services: Services) -> Reply:
    """The reply to a question asked in a thread (`inv.text` is the command `bot.ask` made of it): the same
    handlers as `handle`, without the share button (the answer is posted visibly already). Never raises."""
    return _answer(inv, services, shared_by=None, button=False)


def shared(value: str, user_id: str, services: Services, team_id: str, channel_id: str) -> Reply:
    """The content of a shared reply (from its button's `value`), to post visibly: no share button, and a
    "shared by" line."""
    word, _rest = split(value)
    if word not in SHAREABLE:
        return line("That reply can't be shared.")
    inv = Invocation(text=value, team_id=team_id, channel_id=channel_id, user_id=user_id)
    return _answer(inv, services, shared_by=user_id)


def is_slow(inv: Invocation, services: Services) -> bool:
    """True when the answer may take more than a couple of seconds (a summary from a model)."""
    word, _rest = split(inv.text)
    if not inv.team_id or has_controls(inv.text):
        return False  # answered at once, in one line
    return word == "summarize" and services.summarizer is not None and services.summarizer.abstractive


def _answer(inv: Invocation, services: Services, shared_by: str | None, button: bool = True) -> Reply:
    if not inv.team_id:  # nothing is read or written under team '': it could only mix up workspaces
        log.info("event=command_refused reason=no_workspace channel=%s", inv.channel_id[:20])
        return line(NO_WORKSPACE)
    if has_controls(inv.text):  # refused, never echoed (or logged) raw
        log.info("event=command_refused reason=control_characters team=%s", inv.team_id[:20])
        return line(CONTROLS)
    word, rest = split(inv.text)
    log.info("event=command name=%s team=%s channel=%s chars=%d", word[:20] or "help", inv.team_id[:20],
             inv.channel_id[:20], len(inv.text))
    try:
        handler = HANDLERS.get(word or "help")
        if handler is None:
            return Reply(*views.usage_reply(word))
        reply = handler(rest, inv, services)
    except SearchError as exc:
        return line(escape(" ".join(str(exc).split())))
    except StoreError as exc:
        log.error("event=command_failed name=%s error=%r", word[:20], str(exc))
        return line("I can't reach the archive right now; nothing was changed. Try again in a minute.")
    except Exception:  # noqa: BLE001 - a user never sees a trace
        log.exception("event=command_crashed name=%s", word[:20])
        return line("Something went wrong on my side; nothing was changed. Try again in a minute.")
    if not button:  # a thread's answer says what was searched for in its own header (Understood.describe)
        return replace(reply, share_value=None)
    if reply.searched_for:  # a misspelt word was searched as typed right: the reply opens by saying so
        said, opened = views.searched_opening(reply.searched_for, split_filters(rest)[0] or rest)  # the words
        reply = replace(reply, text=cut(said + reply.text, FALLBACK_TEXT_LIMIT),
                        blocks=[*opened, *reply.blocks])
    if reply.share_value is None:
        return reply
    if shared_by is not None:
        blocks = [*reply.blocks, views.context(f"Shared by {views.user_ref(shared_by)}")]
        return replace(reply, blocks=blocks, share_value=None)
    value = f"{word} {rest}".strip()[: views.SHARE_VALUE_LIMIT]
    return replace(reply, blocks=[*reply.blocks, views.share_button(value)], share_value=value)


def _shareable(message: tuple[str, Blocks], searched_for: str | None = None) -> Reply:
    """Content worth sharing, marked by an empty `share_value`: `_answer` fills it in and adds the button (or,
    when the reply is being shared, the "shared by" line)."""
    return Reply(message[0], message[1], share_value="", searched_for=searched_for)


# --- handlers (rest, invocation, services) -> Reply --------------------------------------------------------


def cmd_help(rest: str, inv: Invocation, services: Services) -> Reply:
    return Reply(*views.help_reply())


def cmd_search(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} search &lt;terms&gt;`, e.g. `{C} search image captioning type:paper`.")
    query = parse_query(rest)
    found = services.index.search(query, SEARCH_RESULTS, services.store)
    hits = found.hits
    if not hits and services.store.count_items() == 0:
        return line(
            "The archive is empty, so there is nothing to search yet. It fills at the next poll; to fill "
            "it now, run `mlresearch-bot poll` (the newest items) or `mlresearch-bot backfill` (every past "
            "post)."
        )
    if not hits:  # one line, as every surface says it (bot.voice)
        newest = lambda: _newest_day(services.store)  # noqa: E731 - asked for a date filter only
        said = voice.nothing_found(voice.SLACK, rest, found, _suggest(services), newest)
        text, blocks = views.one_line(said)
        noted = [views.context(escape(found.note))] if found.note else []  # a query cut short, say
        return Reply(text, [*noted, *blocks], searched_for=found.searched_for)
    # what was searched, said back: a link as its address (Slack sends <https://…>); None when a misspelt word
    # was searched as typed right (the reply opens with what was searched, and typed)
    echoed = None if found.searched_for else (" ".join(query.links) if query.links else rest)
    shown = hits[: shown_count(inv.shown)]
    matcher = voice.result_matcher(found, query, shown)
    reply = views.search_reply(echoed, shown, matcher, found.total, expanded=found.expanded, note=found.note)
    return _shareable(reply, found.searched_for)


def shown_count(asked: int | None) -> int:
    """How many results a search reply shows: SEARCH_RESULTS, or fewer when a question asked for fewer."""
    return min(asked or SEARCH_RESULTS, SEARCH_RESULTS)


def cmd_related(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} related &lt;link or title words&gt;`, e.g. `{C} related hey siri`.")
    if services.store.count_items() == 0:
        return line("The archive is empty, so nothing is related to anything yet. It fills at the next poll.")
    item = find_item(services.index, rest, services.store)  # SearchError: one line
    near = related(services.index, item, RELATED_RESULTS, services.store)
    topics = [] if near else topics_of(services.index, item, services.store)
    trending.record_open(services.store, inv.team_id, item.id)  # the button's click and the command alike
    return Reply(*views.related_reply(item, near, topics))


def cmd_cite(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} cite &lt;link or title words&gt;`, e.g. `{C} cite hey siri`: the item's "
                    "BibTeX entry, and the same reference in plain text.")
    if services.store.count_items() == 0:
        return line("The archive is empty, so there is nothing to cite yet. It fills at the next poll.")
    item, words = services.store.get_item(rest), None  # a Cite button's value: the item's id, as it is
    if item is None:
        item, words = cite.find(rest, services.index, services.store)  # NothingFound, SearchError: one line
    return Reply(*cite.cite_reply(item, words, item.venue))


def cmd_trending(rest: str, inv: Invocation, services: Services) -> Reply:
    if rest:
        return line(f"`{C} trending` takes no words; it says what this workspace reads most.")
    report = trending.trending(services.store, inv.team_id, services.clock())
    return Reply(*views.trending_reply(trending.lines(report)))


def cmd_latest(rest: str, inv: Invocation, services: Services) -> Reply:
    usage = f"Usage: `{C} latest [n]`, where n is a number from 1 to {LATEST_MAX} (default {LATEST_DEFAULT})."
    if not rest:
        n = LATEST_DEFAULT
    elif COUNT.fullmatch(rest) and int(rest) >= 1:
        n = int(rest)
    else:
        return line(usage + _instead_of_latest(rest))
    note = f"at most {LATEST_MAX} at a time" if n > LATEST_MAX else ""
    items = services.store.latest(min(n, LATEST_MAX))
    if not items:
        return Reply(*views.latest_reply(items))
    return _shareable(views.latest_reply(items, note))


def _suggest(services: Services) -> voice.Suggest:
    """The topics a reply that found nothing suggests (`SearchIndex.suggest`)."""
    return lambda query, missing: services.index.suggest(query.content, services.store, missing)


def _newest_day(store: Store) -> str | None:
    """The day the newest item was published (what a date filter that matched nothing is told)."""
    newest = store.latest(1)
    return views.day(newest[0]) if newest else None


def _instead_of_latest(rest: str) -> str:
    """What to type for `latest` followed by words ("latest privacy", "latest 2025 papers"), read as a
    question would be (bot.ask): " Did you mean `/mlresearch search privacy`?" ("" when it names no topic or
    time)."""
    understood = understand(f"latest {rest}", now=utcnow().date())
    named = understood.since or understood.until or any(c.isalpha() for w in understood.words for c in w)
    if understood.action != "search" or not named:  # "latest 1.5": a count mistyped
        return ""
    return f" Did you mean `{C} {escape(cut(understood.command().replace('`', ''), 200))}`?"


def cmd_summarize(rest: str, inv: Invocation, services: Services) -> Reply:
    if not rest:
        return line(f"Usage: `{C} summarize &lt;topic&gt;`, e.g. `{C} summarize diffusion models`.")
    summarizer = services.summarizer if services.summarizer is not None else Summarizer()
    summary = summarizer.summarize(services.index, rest)
    if summary is None:
        # the summary's own search, answered again from the index's kept answers (the same query and limit)
        found = services.index.search(parse_query(rest), SUMMARY_ITEMS, services.store)
        return line(voice.nothing_to_summarize(voice.SLACK, rest, found, _suggest(services)))
    return _shareable(views.summary_reply(summary), summary.searched_for)


def _too_long(rest: str, command: str) -> Reply | None:
    """The one-line refusal of keywords longer than MAX_KEYWORDS_TEXT (None when they fit): refused before
    they are parsed, so a pasted wall of text costs a request thread nothing."""
    if len(rest) <= MAX_KEYWORDS_TEXT:
        return None
    return line(f"That is {len(rest):,} characters of keywords; `{C} {command}` reads at most "
                f"{MAX_KEYWORDS_TEXT:,} ({MAX_KEYWORDS} keywords of up to {MAX_KEYWORD_CHARS} characters), "
                "so nothing was changed.")


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


_ABOUT = re.compile(r'(?<!\S)about:(?:"([^"]*)"?|“([^”]*)”?|(\S*))', re.IGNORECASE)
MAX_TOPICS = 3


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


def _author_keywords(names: list[str], services: Services) -> author_follows.Resolved:
    return author_follows.resolved(names, services.index, services.store)


def _author_counts(keywords: Sequence[str], services: Services) -> dict[str, int] | None:
    return author_follows.counted_in(keywords, services.index, services.store)


def cmd_status(rest: str, inv: Invocation, services: Services) -> Reply:
    store = services.store
    newest = store.latest(1)
    sub = store.get_subscription(inv.team_id, inv.channel_id)
    follows = store.follows(inv.team_id, inv.user_id) if inv.user_id else []
    counts = _author_counts([*(sub.keywords if sub is not None else ()), *follows], services)
    summarizer = services.summarizer
    if summarizer is not None and summarizer.abstractive:
        summaries = f"written by `{escape(summarizer.model[:60])}`, extractive if it fails or is slow"
    else:
        summaries = "extractive (quoted from the abstracts, offline)"
    state = store.feed_state(services.settings.feed_url)  # FEED_URL's, not another feed's polled before
    return Reply(
        *status.status_reply(
            state if state.last_poll is not None else None,
            store.count_items(),
            newest[0] if newest else None,
            sub,
            inv.channel_id,
            store.workspace_disabled(inv.team_id),
            summaries,
            _next_digest(store, sub, services.clock()) if sub is not None else None,
            demo=store.demo_loaded_at() is not None,
            follows=follows,
            counts=counts,
        )
    )


def _next_digest(store: Store, sub: Subscription, now: datetime) -> datetime | None:
    """When the channel's next digest goes out, in the subscriber's zone: one whose time has passed but that
    the poll has not posted yet is still the next."""
    due = digest.due_digest(store, sub, now)
    if due is not None:
        schedule, _period, ends, _row = due
        return ends.astimezone(schedule.tz)
    return digest.next_digest(sub, now)


HANDLERS: dict[str, Callable[[str, Invocation, Services], Reply]] = {
    "help": cmd_help,
    "search": cmd_search,
    "latest": cmd_latest,
    "related": cmd_related,
    "cite": cmd_cite,
    "summarize": cmd_summarize,
    "subscribe": cmd_subscribe,
    "unsubscribe": cmd_unsubscribe,
    "follow": cmd_follow,
    "unfollow": cmd_unfollow,
    "follows": cmd_follows,
    "status": cmd_status,
    "trending": cmd_trending,
}


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
