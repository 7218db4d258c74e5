"""The field's abbreviations and their long forms, used both ways (bot/search/glossary.json, shipped in the
package): a query saying "LLM" also searches for "large language model", one saying "speech recognition" also
for "ASR".

    expand(["what", "is", "an", "llm"]) -> [Expansion(said="LLM", adds=(("larg", "languag", "model"),), ...)]

Abbreviations match a query's words case-insensitively (a plural "LLMs" too), except entries marked `case`
(an abbreviation that is also a common word, like HE), which match only as typed in capitals; long forms match
by their analyzed terms, in order (so "large language models" is "large language model").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from bot.search.analysis import terms

GLOSSARY_FILE = Path(__file__).with_name("glossary.json")


@dataclass(frozen=True)
class Entry:
    short: str
    long: tuple[str, ...]
    case: bool = False

    @property
    def forms(self) -> tuple[str, ...]:
        return (self.short, *self.long)


@dataclass(frozen=True)
class Expansion:
    entry: Entry
    said: str  # the form the query used
    adds: tuple[tuple[str, ...], ...]  # the other forms, as analyzed terms (each one phrase)
    shown: tuple[str, ...]  # the other forms as written


@lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    data = json.loads(GLOSSARY_FILE.read_text(encoding="utf-8"))
    return tuple(Entry(e["short"], tuple(e["long"]), bool(e.get("case"))) for e in data["entries"])


def _short_words(entry: Entry) -> tuple[str, ...]:
    return tuple(w.lower() for w in entry.short.split())


def _contains(seq: list[str], part: tuple[str, ...]) -> bool:
    n = len(part)
    return n > 0 and any(tuple(seq[i : i + n]) == part for i in range(len(seq) - n + 1))


def expand(words: list[str], typed: str | None = None) -> list[Expansion]:
    """The glossary entries the query's words (`words`: as typed, any case) name, each with the forms it did
    not use. `typed` (the raw text) decides case-sensitive entries; without it they never match."""
    lowered = [w.lower() for w in words]
    singular = [w[:-1] if len(w) > 2 and w.endswith("s") else w for w in lowered]
    stems = terms(" ".join(lowered))
    raw = (typed or "").split()
    found: list[Expansion] = []
    first = _by_first()
    named = {n for word in {*lowered, *singular, *stems} for n in first.get(word, ())}
    for n in sorted(named):  # only entries a word of the query begins; in the glossary's order
        entry = entries()[n]
        short = _short_words(entry)
        if entry.case:
            said_short = _contains([w.strip("?!.,;:()\"'") for w in raw], tuple(entry.short.split()))
        else:
            said_short = _contains(lowered, short) or _contains(singular, short)
        said = entry.short if said_short else next(
            (form for form in entry.long if _contains(stems, tuple(terms(form)))), None)
        if said is None:
            continue
        others = [form for form in entry.forms if form != said]
        if said != entry.short:  # a long form said: the other long forms are usually its variants
            others = [entry.short]
        found.append(Expansion(entry, said, tuple(_analyzed(form) for form in others), tuple(others)))
    return found


@lru_cache(maxsize=1)
def _by_first() -> dict[str, tuple[int, ...]]:
    """The entries (by position) each word can begin: an abbreviation's first word in lower case, and the
    first term of each long form. An entry none of a query's words, their singulars or terms begins cannot
    match it, so `expand` looks at no other (it looked at all of them for every search)."""
    index: dict[str, list[int]] = {}
    for n, entry in enumerate(entries()):
        keys = {_short_words(entry)[0]} | {analyzed[0] for form in entry.long if (analyzed := terms(form))}
        for key in keys:
            index.setdefault(key, []).append(n)
    return {key: tuple(ns) for key, ns in index.items()}


def _analyzed(form: str) -> tuple[str, ...]:
    return tuple(terms(form))


def shown(expansions: list[Expansion]) -> str | None:
    """What the query was searched as, for the user: "LLM, large language model" (None: nothing added)."""
    if not expansions:
        return None
    return "; ".join(", ".join((e.said, *e.shown)) for e in expansions)


def suggest(words: Sequence[str], limit: int = 2) -> list[str]:
    """Topics of the glossary near `words` (an entry one of whose forms shares a term with them), to try when
    nothing matched: their long forms, as written."""
    wanted = {t for w in words for t in terms(w)}
    found: list[str] = []
    for entry in entries():
        if any(wanted & set(terms(form)) for form in entry.forms):
            found += [form for form in (entry.long[0], entry.short) if form.lower() not in words][:1]
        if len(found) >= limit:
            break
    return found
