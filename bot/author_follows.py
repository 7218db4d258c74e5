"""`author:"name"` in `/mlresearch follow`, `subscribe` and `unfollow`: the names taken out of the text,
checked, and resolved against the archive's authors (bot.search.authors, the rule search and routing share)
into the keywords stored (`author:Awni Hannun`), or one line saying why not; and how many archive items each
matches (a reply says "author: Awni Hannun (4 items so far)", `bot.views.keyword_label`).

    rest, names = author_parts('speech author:"A. Hannun"')     # ("speech", ["A. Hannun"])
    resolve(names, directory) -> Resolved(keywords=["author:Awni Hannun"], problem=None)

A typed name that matches one person of the archive is stored as that person's name (its most used form
without middle initials), so "Hannun", "A. Hannun" and "awni hannun" all follow "Awni Hannun", and every form
of the name matches a new item. One that matches several people stores nothing and lists them (at most
LISTED), unless it is written exactly as one of them. One that matches nobody stores nothing when the archive
holds close names (a "did you mean" with them), else it is stored as typed (tidied): an author who has not
published yet, said as "0 items so far".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from msgspec import Struct, field

from bot.blocks import counted, escape
from bot.errors import SearchError, StoreError
from bot.models import AUTHOR_PREFIX
from bot.search.authors import AUTHOR_PART, Directory, Person, Typed, matches, stored, typed
from bot.search.engine import authors_of
from bot.search.index import SearchIndex
from bot.store import Store

log = logging.getLogger("bot.author_follows")

MAX_AT_ONCE = 3  # author: names in one command
LISTED = 5  # people listed when a name is ambiguous


class Resolved(Struct, frozen=True):
    keywords: list[str] = field(default_factory=list)  # author: keywords to store
    problem: str | None = None  # mrkdwn, escaped: why nothing was stored


def author_parts(text: str) -> tuple[str, list[str]]:
    """`text` without its author: parts, and their names as typed. SearchError (one line) for more than
    MAX_AT_ONCE of them, or a quote mark inside a quoted name (`author:"Awni "Y" Hannun"`), counted and
    checked before any name is looked at."""
    found = list(AUTHOR_PART.finditer(text))
    if len(found) > MAX_AT_ONCE:
        raise SearchError(f"Name at most {MAX_AT_ONCE} authors at once; nothing was changed.")
    for part in found:
        if part.end() < len(text) and not text[part.end()].isspace():
            raise SearchError('An author\'s name can\'t hold quote marks; nothing was changed. Type it as '
                              'author:"Awni Hannun".')
    names = ["".join(group or "" for group in part.groups()) for part in found]
    return " ".join(AUTHOR_PART.sub(" ", text).split()), names


def checked(names: Sequence[str]) -> list[Typed]:
    """The names, each checked (`bot.search.authors.typed`: SearchError, one line) and once."""
    unique: dict[tuple[str, ...], Typed] = {}
    for name in names:
        found = typed(name)
        unique.setdefault(found.words, found)
    return list(unique.values())


def resolve(names: Sequence[Typed], directory: Directory) -> Resolved:
    """The author: keywords to store for `names`, or the one line saying why none is (see the module
    docstring)."""
    keywords: list[str] = []
    for name in names:
        people = directory.people(name)
        exact = [p for p in people if any(_same_words(name, form) for form in p.forms)]
        if len(people) == 1 or len(exact) == 1:
            keywords.append(AUTHOR_PREFIX + (people[0] if len(people) == 1 else exact[0]).name)
        elif people:
            listed = ", ".join(_person(p) for p in people[:LISTED])
            more = f" and {counted(len(people) - LISTED, 'other')}" * (len(people) > LISTED)
            return Resolved(problem=(
                f"Several authors in the archive are {_quoted(name.name)}: {listed}{more}. Nothing was "
                f'changed; say which, e.g. `author:"{escape(people[0].name)}"`.'))
        else:
            near = directory.suggest(name)
            if near:
                meant = " or ".join(_person(p) for p in near)
                return Resolved(problem=(
                    f"No item in the archive has an author named {_quoted(name.name)}; did you mean {meant}? "
                    f'Nothing was changed; follow the one you mean with `author:"{escape(near[0].name)}"`.'))
            keywords.append(AUTHOR_PREFIX + name.name)
    return Resolved(list(dict.fromkeys(keywords)))


def as_followed(keywords: Sequence[str], followed: Sequence[str]) -> list[str]:
    """`keywords` with each author: one already followed under another spelling ("author:awni hannun" when
    "author:Awni Hannun" is) written as it is followed, so following it again changes nothing."""
    have = {_words(k): k for k in followed if k.startswith(AUTHOR_PREFIX)}
    return [have.get(_words(k), k) if k.startswith(AUTHOR_PREFIX) else k for k in keywords]


def unfollowed(names: Sequence[Typed], followed: Sequence[str]) -> list[str]:
    """The author: keywords `unfollow author:"…"` stops: each followed author a typed name matches (the
    name as typed when none is, so the reply can say it is not followed)."""
    gone: list[str] = []
    for name in names:
        hits = [k for k in followed if k.startswith(AUTHOR_PREFIX) and matches(name, k[len(AUTHOR_PREFIX):])]
        gone += hits or [AUTHOR_PREFIX + name.name]
    return list(dict.fromkeys(gone))


def resolved(names: Sequence[str], index: SearchIndex, store: Store) -> Resolved:
    """The author: keywords to store for `names` as typed (`checked`, then `resolve`d against the archive's
    authors as the search index holds them), or the one line saying why none is."""
    if not names:
        return Resolved()
    found = checked(names)
    return resolve(found, authors_of(index.current(store)))


def counted_in(keywords: Sequence[str], index: SearchIndex, store: Store) -> dict[str, int] | None:
    """`counts` of the archive's authors as the search index holds them; None when `keywords` hold no
    author: keyword (the index is not read) or the archive can't be read now (a reply then goes without
    the counts: one log line)."""
    if not any(k.startswith(AUTHOR_PREFIX) for k in keywords):
        return None
    try:
        return counts(keywords, authors_of(index.current(store)))
    except (SearchError, StoreError) as exc:
        log.info("event=author_counts_skipped reason=%r", " ".join(str(exc).split())[:100])
        return None


def counts(keywords: Sequence[str], directory: Directory) -> dict[str, int]:
    """How many archive items each author: keyword of `keywords` matches."""
    found: dict[str, int] = {}
    for keyword in keywords:
        if keyword.startswith(AUTHOR_PREFIX):
            try:
                found[keyword] = directory.count(stored(keyword[len(AUTHOR_PREFIX):]))
            except SearchError:  # a stored name no rule accepts any more: it matches nothing
                found[keyword] = 0
    return found


def _person(person: Person) -> str:
    return f"{_quoted(person.name)} ({counted(len(person.items), 'item')})"


def _quoted(name: str) -> str:
    return f"“{escape(name)}”"


def _words(keyword: str) -> tuple[str, ...]:
    try:
        return stored(keyword[len(AUTHOR_PREFIX):]).words
    except SearchError:
        return (keyword,)


def _same_words(name: Typed, form: str) -> bool:
    try:
        return typed(form).words == name.words
    except SearchError:
        return False
