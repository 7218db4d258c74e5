"""Author names matched the way people type them: one rule for the `author:` search filter, for routing new
items to author follows and subscriptions, and for the replies that resolve a typed name against the archive,
so a search for an author lists exactly the items a follow of that name would have brought.

    name = typed('A. Hannun')                 # Typed(words=("a", "hannun")); SearchError (one line) for a
                                              # name of only initials, over MAX_NAME_CHARS, or with no word
    matches(name, "Awni Y. Hannun")           # True (routing: bot.route checks a new item's authors)
    directory = Directory.of([(item_id, authors), ...])  # the archive's author names (once per change)
    directory.ids(name)                       # the items with an author `name` matches
    directory.people(name)                    # those authors as people (forms, items), most items first
    directory.suggest(typed("Awni Hanun"))    # the closest people for a name no item holds

Folding: Unicode NFKD with the combining marks dropped, a few letters without a decomposition spelt out (ø,
ł, đ, æ, œ, ı; ß by case folding), case folded. Words are runs of letters and digits ("O'Brien-Smith": o,
brien, smith). "Doe, Jane" is Jane Doe.

Matching a typed name against an author's name:
- one word ("Hannun", "Awni") matches an author with that word anywhere in the name;
- several words: the first is the author's first word and the last the author's last (the surname), the
  others in order between, the author's other words skipped (a middle name or initial need not be typed);
  a typed initial ("A." or "A") matches any word it starts, and a typed given name matches the author's
  initial of it ("Awni Hannun" matches "A. Hannun"); the surname is matched whole.
So "A. Hannun", "Awni Hannun" and "awni hannun" all match "Awni Y. Hannun"; "Jane Doe" never matches
"Mary Jane Doe" nor "Doe Jane".

People: the matching names grouped by given name and surname ("Awni Hannun" and "Awni Y. Hannun" are one
person; a name given by initial, "A. Hannun", joins the one person it can be, else stands alone), each shown
by its most used form without middle initials (`Person.name`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

from msgspec import Struct

from bot.errors import SearchError
from bot.search.words import edits

MAX_NAME_CHARS = 100  # a typed name longer than this is refused before any work
MAX_NAME_WORDS = 8
SUGGESTIONS = 3  # people a "did you mean" names at most
SCORED = 12  # candidate names a "did you mean" compares whole at most (the closest surnames, most published)

# author:"First Last", author:“First Last” (Slack's smart quotes) or author:Name, in a search, a follow or a
# subscription (an open quote: the rest of the line)
AUTHOR_PART = re.compile(r"(?<!\S)authors?:(?:\"([^\"]*)\"?|“([^”]*)”?|(\S*))", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
_SPELT = str.maketrans({"ø": "o", "Ø": "o", "ł": "l", "Ł": "l", "đ": "d", "Đ": "d", "æ": "ae", "Æ": "ae",
                        "œ": "oe", "Œ": "oe", "ı": "i", "ð": "d", "þ": "th"})
_INITIAL_PART = re.compile(r"[^\W\d_]\.?(?:-[^\W\d_]\.?)*")  # "Y.", "Y", "J.-P."


def fold(text: str) -> str:
    """`text` without accents or case: "Chloé Ødegård" -> "chloe odegard"."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_SPELT))
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def written(name: str) -> str:
    """A name as shown: on one line, "Doe, Jane" as "Jane Doe"."""
    name = " ".join(name.split())
    if name.count(",") == 1:
        last, given = (part.strip() for part in name.split(","))
        if last and given:
            name = f"{given} {last}"
    return name


@lru_cache(maxsize=65536)
def words_of(name: str) -> tuple[str, ...]:
    """The folded words of an author's name as written (`written` first)."""
    return tuple(_WORD.findall(fold(written(name))))


class Typed(Struct, frozen=True):
    """A name as typed (`typed`): its words, folded, and the name tidied for showing and storing."""

    words: tuple[str, ...]
    name: str

    @property
    def surname(self) -> str:
        return self.words[-1]


def typed(text: str) -> Typed:
    """A typed name, checked: SearchError (one line) when it is longer than MAX_NAME_CHARS (checked first, so
    nothing long is worked on), has no word, more than MAX_NAME_WORDS words, or only initials."""
    if len(text) > MAX_NAME_CHARS:
        raise SearchError(f"An author's name is at most {MAX_NAME_CHARS} characters; that one has "
                          f"{len(text)}.")
    parts = written(unicodedata.normalize("NFC", text)).split()
    tidy = " ".join(part for part in (_tidy_part(p) for p in parts) if part)
    found = tuple(_WORD.findall(fold(tidy)))
    if not found:
        raise SearchError('author: needs a name, for example author:"Jane Doe" or author:Doe.')
    if len(found) > MAX_NAME_WORDS:
        raise SearchError(f"An author's name has at most {MAX_NAME_WORDS} words.")
    if all(len(word) == 1 for word in found):
        raise SearchError(f"“{tidy}” is only initials: add the surname, for example author:\"A. Hannun\".")
    return Typed(found, tidy)


def _tidy_part(part: str) -> str:
    """A whitespace-separated part of a typed name with only what names are made of: letters, digits and
    the marks inside names (. ' ’ -); emoji, quotes, @, <, > and the like part words, as they do in an
    author's name (`words_of`), so a name and its tidied form have the same words."""
    kept = "".join(c if c.isalnum() or c in ".'’-" else " " for c in part)
    return " ".join(w for w in (x.strip("-'’") for x in kept.split()) if any(c.isalnum() for c in w))


@lru_cache(maxsize=4096)
def _typed_cached(text: str) -> Typed:
    return typed(text)


def stored(text: str) -> Typed:
    """A stored name (an `author:` keyword's, already checked when it was followed), cached: routing reads
    the same few names for every new item."""
    return _typed_cached(text)


def matches(name: Typed, author: str) -> bool:
    """Whether the typed `name` matches an author's name as written (see the module docstring)."""
    return _matches(name.words, words_of(author))


def _matches(want: tuple[str, ...], have: tuple[str, ...]) -> bool:
    if not have:
        return False
    if len(want) == 1:
        word = want[0]
        return word in have if len(word) > 1 else any(w.startswith(word) for w in have)
    if not _same(want[0], have[0], last=False) or not _same(want[-1], have[-1], last=True):
        return False
    at = 1
    for word in want[1:-1]:  # the words between, in order, between the author's first and last
        while at < len(have) - 1 and not _same(word, have[at], last=False):
            at += 1
        if at >= len(have) - 1:
            return False
        at += 1
    return True


def _same(typed_word: str, word: str, *, last: bool) -> bool:
    """A typed word against one of the author's: the same word; an initial against a word it starts; a given
    name against the author's initial of it (never the surname, `last`)."""
    if typed_word == word:
        return True
    if len(typed_word) == 1:
        return word.startswith(typed_word)
    return not last and len(word) == 1 and typed_word.startswith(word)


def required(name: Typed) -> str | None:
    """The word an author's name must hold for `name` to match it: its surname (a lone word: that word);
    None when the surname is typed as an initial ("Awni H."), which any name may hold."""
    return name.surname if len(name.surname) > 1 else None


@lru_cache(maxsize=256)
def words_in(authors: tuple[str, ...]) -> frozenset[str]:
    """Every word of these authors' names (an item's: read once, however many follows check it)."""
    return frozenset(word for author in authors for word in words_of(author))


class Person(Struct, frozen=True):
    """Names of the archive taken for one person: its forms (most items first) and its items."""

    forms: tuple[str, ...]
    items: frozenset[str]

    @property
    def name(self) -> str:
        """The most used form, its middle initials left out ("Awni Y. Hannun" -> "Awni Hannun"): what a
        follow of this person stores, and matches every form by."""
        parts = self.forms[0].split()
        if len(parts) <= 2:
            return self.forms[0]
        middle = [p for p in parts[1:-1] if not _INITIAL_PART.fullmatch(p)]
        return " ".join([parts[0], *middle, parts[-1]])


class Directory:
    """The archive's author names: each with its folded words and its items, found by any of their words."""

    def __init__(self, names: dict[str, tuple[tuple[str, ...], list[str]]],
                 by_word: dict[str, list[str]] | None = None) -> None:
        self.names = names  # name as written -> (its folded words, the ids of its items)
        if by_word is None:
            by_word = {}
            for name, (found, _) in names.items():
                for word in set(found):
                    if len(word) > 1:
                        by_word.setdefault(word, []).append(name)
        self.by_word = by_word  # a word (two letters or more) -> the names holding it
        self._deletes: dict[str, set[str]] | None = None

    def updated(self, changes: Iterable[tuple[str, Sequence[str], Sequence[str]]]) -> Directory:
        """A new directory with the authors of changed items replaced, from (item id, its authors before,
        its authors now); this one stays as it was (a search may be reading it). It costs what the changes
        touch, not the archive: a poll's few new items leave the next author question as fast as the last."""
        names, by_word = dict(self.names), dict(self.by_word)
        own: set[str] = set()  # names whose item list is the new directory's own (copied once)
        for item_id, before, after in changes:
            was, now = {written(a) for a in before}, {written(a) for a in after}
            for name in was - now:
                entry = names.get(name)
                if entry is None:
                    continue
                ids = [i for i in entry[1] if i != item_id]
                if ids:
                    names[name] = (entry[0], ids)
                    own.add(name)
                    continue
                del names[name]
                for word in {w for w in entry[0] if len(w) > 1}:
                    left = [n for n in by_word.get(word, []) if n != name]
                    if left:
                        by_word[word] = left
                    else:
                        by_word.pop(word, None)
            for name in now - was:
                entry = names.get(name)
                if entry is not None:
                    if name not in own:
                        entry = names[name] = (entry[0], list(entry[1]))
                        own.add(name)
                    entry[1].append(item_id)
                    continue
                found = words_of(name)
                if found:
                    names[name] = (found, [item_id])
                    own.add(name)
                    for word in {w for w in found if len(w) > 1}:
                        by_word[word] = [*by_word.get(word, []), name]
        made = Directory(names, by_word)
        if self._deletes is not None:  # carried over, with the new words (a gone word's keys stay: harmless,
            deletes = dict(self._deletes)  # `suggest` finds no name under it)
            for word in by_word.keys() - self.by_word.keys():
                for key in {word, *_deletes(word)}:
                    deletes[key] = {*deletes.get(key, ()), word}
            made._deletes = deletes
        return made

    @classmethod
    def of(cls, items: Iterable[tuple[str, Sequence[str]]]) -> Directory:
        """From (item id, its authors) pairs."""
        names: dict[str, tuple[tuple[str, ...], list[str]]] = {}
        seen: dict[str, list[str]] = {}  # an author as the item holds it -> its name's items
        nameless: list[str] = []  # a list no name's: the items of an author without a word go there
        for item_id, authors in items:
            for author in authors:
                ids = seen.get(author)
                if ids is None:
                    name = written(author)
                    entry = names.get(name)
                    if entry is None:
                        found = words_of(name)
                        entry = names[name] = (found, []) if found else ((), nameless)
                    ids = seen[author] = entry[1]
                ids.append(item_id)
        return cls({name: entry for name, entry in names.items() if entry[0]})

    def matching(self, name: Typed) -> list[str]:
        """The archive's author names `name` matches, as written."""
        need = required(name)
        candidates = self.by_word.get(need, []) if need is not None else list(self.names)
        return [n for n in candidates if _matches(name.words, self.names[n][0])]

    def ids(self, name: Typed) -> set[str]:
        """The items with an author `name` matches."""
        return {item_id for n in self.matching(name) for item_id in self.names[n][1]}

    def people(self, name: Typed) -> list[Person]:
        """The people `name` matches, most items first."""
        return self._grouped(self.matching(name))

    def count(self, name: Typed) -> int:
        return len(self.ids(name))

    def suggest(self, name: Typed) -> list[Person]:
        """For a name no item holds: the closest people, at most SUGGESTIONS. Close is a surname within two
        edits of the typed one (one, for four letters or fewer), the same surname included (another given
        name); the closest surname first, then the closest whole name, then the most published."""
        surname = name.surname if len(name.surname) > 1 else max(name.words, key=len)
        limit = 1 if len(surname) <= 4 else 2
        close = {w: d for w in self._near(surname) if (d := edits(surname, w)) <= limit}
        lone = len(name.words) == 1  # one typed word matches any word of a name, so it is near any word

        def distance(n: str) -> int:
            found = self.names[n][0]
            return min(close.get(w, limit + 1) for w in found) if lone else close.get(found[-1], limit + 1)

        candidates = {n for w in close for n in self.by_word.get(w, []) if distance(n) <= limit}
        kept = sorted(candidates, key=lambda n: (distance(n), -len(self.names[n][1]), n))[:SCORED]
        whole = " ".join(name.words)
        kept.sort(key=lambda n: (distance(n), edits(whole, " ".join(self.names[n][0])),
                                 -len(self.names[n][1]), n))
        place = {n: i for i, n in enumerate(kept)}
        people = sorted(self._grouped(kept), key=lambda p: min(place[f] for f in p.forms))
        return people[:SUGGESTIONS]

    def _near(self, word: str) -> set[str]:
        """The archive's name words within two deletions of `word` each way (symmetric deletes: a superset of
        those one or two edits away, checked by `edits`)."""
        if self._deletes is None:
            index: dict[str, set[str]] = {}
            for known in self.by_word:
                for key in {known, *_deletes(known)}:
                    index.setdefault(key, set()).add(known)
            self._deletes = index
        keys = {word, *_deletes(word)}
        keys |= {d for k in list(keys) for d in _deletes(k)}
        return {w for k in keys for w in self._deletes.get(k, ())}

    def _grouped(self, names: Sequence[str]) -> list[Person]:
        """`names` as people: by (given name, surname), a given name's initial joining the one person it can
        be; each person's forms most items first; people most items first."""
        groups: dict[tuple[str, str], list[str]] = {}
        initialled: list[str] = []
        for n in names:
            found = self.names[n][0]
            if len(found[0]) == 1 and len(found) > 1:
                initialled.append(n)
            else:
                groups.setdefault((found[0], found[-1]), []).append(n)
        by_surname: dict[str, list[tuple[str, str]]] = {}
        for key in groups:
            by_surname.setdefault(key[1], []).append(key)
        for n in initialled:
            found = self.names[n][0]
            fits = [key for key in by_surname.get(found[-1], []) if key[0].startswith(found[0])
                    and len(key[0]) > 1]
            groups.setdefault(fits[0] if len(fits) == 1 else (found[0], found[-1]), []).append(n)
        people = []
        for forms in groups.values():
            items = frozenset(i for f in forms for i in self.names[f][1])
            ordered = tuple(sorted(forms, key=lambda f: (-len(self.names[f][1]), -len(f), f)))
            people.append(Person(ordered, items))
        return sorted(people, key=lambda p: (-len(p.items), p.forms[0]))


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1:] for i in range(len(word))}
