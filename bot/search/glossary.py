"""The field's abbreviations and their long forms, used both ways (bot/search/glossary.json, shipped in the
package): a query saying "LLM" also searches for "large language model", one saying "speech recognition" also
for "ASR".

    expand(["what", "is", "an", "llm"]) -> [Expansion(said="LLM", adds=(("larg", "languag", "model"),), ...)]

Abbreviations match a query's words case-insensitively (a plural "LLMs" too), except entries marked `case`
(an abbreviation that is also a common word, like HE), which match only as typed in capitals and are never
added to a search (the index folds case: "HE" would find "he"); long forms match by their analyzed terms, in
order (so "large language models" is "large language model").

Plain words, one way: the glossary's `plain` list gives the field's terms for what people say in everyday
words ("describe photos" is image captioning, "stuttering" is dysfluent speech, "wake word" a voice trigger),
since a query in plain words shares few words with the posts, and the bundled model, averaging word vectors,
cannot bridge the two. A plain form matches by its analyzed terms in order, at most PLAIN_GAP other terms
between two of them ("describing a photo", "on your phone"); the query is then also searched for the terms
it means, as for a long form. A query already saying the term adds nothing.

    expand(["describing", "a", "photo"])
        -> [Expansion(said="describing photo", adds=(("imag", "caption"),), shown=("image captioning",))]
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from msgspec import Struct

from bot.search.analysis import terms

GLOSSARY_FILE = Path(__file__).with_name("glossary.json")


class Entry(Struct, frozen=True):
    short: str
    long: tuple[str, ...]
    case: bool = False

    @property
    def forms(self) -> tuple[str, ...]:
        return (self.short, *self.long)


class Expansion(Struct, frozen=True):
    entry: Entry
    said: str  # the form the query used
    adds: tuple[tuple[str, ...], ...]  # the other forms, as analyzed terms (each one phrase)
    shown: tuple[str, ...]  # the other forms as written
    plain: bool = False  # of the `plain` list (everyday words), not an abbreviation's forms


class Plain(Struct, frozen=True):
    means: tuple[str, ...]  # the field's terms, as written
    said: tuple[str, ...]  # everyday ways to say it, as written


PLAIN_GAP = 2  # other terms allowed between two terms of a plain form
SUGGEST_TRIED = 6  # topics searched at most, when nothing matched, for two to suggest


@lru_cache(maxsize=1)
def _data() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(GLOSSARY_FILE.read_text(encoding="utf-8"))
    return data


@lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    return tuple(Entry(e["short"], tuple(e["long"]), bool(e.get("case"))) for e in _data()["entries"])


@lru_cache(maxsize=1)
def plain() -> tuple[Plain, ...]:
    return tuple(Plain(tuple(p["means"]), tuple(p["said"])) for p in _data()["plain"])


def is_abbreviation(word: str) -> bool:
    """Whether `word`, as typed, is one of the glossary's one-word abbreviations (or its plural): a word meant
    whole, never the start of another ("SER" is speech emotion recognition, not "server"). One marked `case`
    counts only in capitals ("LID", not "lid")."""
    return bool(numbers(word))


def numbers(word: str) -> tuple[str, str] | tuple[()]:
    """The abbreviation `word` is (as `is_abbreviation`), singular and plural, lower case: ("llm", "llms") for
    "LLM" and for "LLMs", which the stemmer keeps apart (no vowel before the s); () for any other word."""
    for form in (word, _singular(word)):
        entry = _abbreviations().get(form.lower())
        if entry is not None and (not entry.case or form == entry.short):
            return form.lower(), form.lower() + "s"
    return ()


@lru_cache(maxsize=1)
def _abbreviations() -> dict[str, Entry]:
    return {entry.short.lower(): entry for entry in entries() if " " not in entry.short}


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """Every term of the glossary's forms and plain words: words it knows, never a misspelling of another
    ("aloud", of "read aloud", is not "cloud")."""
    forms = [form for entry in entries() for form in entry.forms]
    forms += [form for entry in plain() for form in (*entry.said, *entry.means)]
    return frozenset(term for form in forms for term in terms(form))


def spelled_out(words: Sequence[str], expansions: Sequence[Expansion]) -> list[str]:
    """`words` without each abbreviation said (a plural too) that one of `expansions` gives the long forms of:
    what search by meaning embeds beside those long forms. The bundled model knows an abbreviation only by its
    pieces: "GAN" lies nearer a post on 3D Gaussians than the GAN post."""
    said = sorted({tuple(map(_singular, _short_words(e.entry))) for e in expansions  # the longest first
                   if not e.plain and e.said == e.entry.short}, key=len, reverse=True)
    if not said:
        return list(words)
    kept: list[str] = []
    at = 0
    while at < len(words):
        ahead = [_singular(w.lower()) for w in words[at : at + len(said[0])]]
        n = next((len(short) for short in said if tuple(ahead[: len(short)]) == short), 0)
        kept += [] if n else [words[at]]
        at += n or 1
    return kept


def _singular(word: str) -> str:
    """`word` without a plural's "s" ("LLMs", "llms"), as abbreviations are matched; case kept."""
    return word[:-1] if len(word) > 2 and word.endswith("s") else word


def _short_words(entry: Entry) -> tuple[str, ...]:
    return tuple(w.lower() for w in entry.short.split())


def _contains(seq: list[str], part: tuple[str, ...]) -> bool:
    n = len(part)
    return n > 0 and any(tuple(seq[i : i + n]) == part for i in range(len(seq) - n + 1))


def expand(words: list[str], typed: str | None = None) -> list[Expansion]:
    """The glossary entries the query's words (`words`: as typed, any case) name, each with the forms it did
    not use. `typed` (the raw text) decides case-sensitive entries; without it they never match."""
    lowered = [w.lower() for w in words]
    singular = [_singular(w) for w in lowered]
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
            (form for form in entry.long if _contains(stems, _analyzed(form))), None)
        if said is None:
            continue
        others = [form for form in entry.forms if form != said]
        if said != entry.short:  # a long form said: the other long forms are usually its variants
            others = [] if entry.case else [entry.short]  # the index folds case: "HE" would find "he"
        if not others:
            continue
        found.append(Expansion(entry, said, tuple(_analyzed(form) for form in others), tuple(others)))
    return found + _plain(lowered, {form for e in found for form in e.adds})


@lru_cache(maxsize=256)
def narrower(form: str) -> tuple[str, ...]:
    """The abbreviations of the narrower terms of the long form `form`, those one of whose long forms holds
    its terms in a row: for "language model", LLM (large language model), MLLM, dLLM, SLM, VLM and AFM; for
    "reinforcement learning", RLHF and RLVR. An item saying "LLMs" holds "language models", as one writing
    "large language models" out does."""
    said = _analyzed(form)
    return tuple(entry.short for entry in entries() if not entry.case and any(
        _analyzed(long) != said and _contains(list(_analyzed(long)), said) for long in entry.long))


def _plain(lowered: list[str], added: set[tuple[str, ...]]) -> list[Expansion]:
    """The field's terms the query's plain words stand for (the `plain` list), but those it says itself or
    an abbreviation's expansion already adds."""
    found: list[Expansion] = []
    owners, stems = _owned(lowered)
    for entry, at in _said(stems):
        means = [form for form in _with_abbreviations(entry.means)
                 if _analyzed(form) not in added and not _contains(stems, _analyzed(form))]
        if not means:
            continue
        adds = tuple(dict.fromkeys(map(_analyzed, means)))
        added.update(adds)
        said = " ".join(lowered[w] for w in dict.fromkeys(owners[i][1] for i in at))
        shown = tuple(dict.fromkeys(means))
        term = Entry(entry.means[0], entry.means[1:])  # the term it means, as an entry
        found.append(Expansion(term, said, adds, shown, plain=True))
    return found


def plain_words(words: list[str]) -> set[int]:
    """The positions of `words` (as typed) that say one of the plain list's forms: a question's filler words
    among them ("what is in my photos", "on the phone") are kept, since they make the form (bot.ask)."""
    owners, stems = _owned([w.lower() for w in words])
    return {owners[i][1] for _, at in _said(stems) for i in at}


def _owned(lowered: list[str]) -> tuple[list[tuple[str, int]], list[str]]:
    """Each analyzed term of `lowered` with the position of its word, and the terms alone."""
    owners = [(term, n) for n, word in enumerate(lowered) for term in terms(word)]
    return owners, [term for term, _ in owners]


def _said(stems: list[str]) -> list[tuple[Plain, tuple[int, ...]]]:
    """The plain entries `stems` say, in the list's order, each with the positions of its first form said.
    Only the forms beginning with one of `stems` are tried, and of those only the ones whose every term is
    among them (`_plain_cues`)."""
    held = set(stems)
    cues = sorted(cue for stem in held for cue in _plain_cues().get(stem, ()))
    found: list[tuple[Plain, tuple[int, ...]]] = []
    done: set[int] = set()
    for n, _, cue in cues:  # each entry's forms in its order: the first said is the one found
        if n in done or not all(term in held for term in cue):
            continue
        at = _holds(stems, cue)
        if at is not None:
            found.append((plain()[n], at))
            done.add(n)
    return found


@lru_cache(maxsize=256)
def _with_abbreviations(means: tuple[str, ...]) -> tuple[str, ...]:
    """`means`, each followed by the other forms of the glossary entry it is a form of ("speech recognition",
    "ASR", "automatic speech recognition")."""
    found: list[str] = []
    for form in means:
        found.append(form)
        analyzed = _analyzed(form)
        for entry in entries():
            if any(_analyzed(other) == analyzed for other in entry.forms):
                found += [other for other in entry.forms if _analyzed(other) != analyzed
                          and not (entry.case and other == entry.short)]
    return tuple(dict.fromkeys(found))


def _holds(stems: list[str], cue: tuple[str, ...]) -> tuple[int, ...] | None:
    """Where `stems` hold the terms of `cue` in order, at most PLAIN_GAP others between two of them (the
    positions of the tightest such run: "on dictation on the phone" says "on the phone" at its end), or
    None."""
    best: list[int] | None = None
    for start, stem in enumerate(stems):
        if stem != cue[0]:
            continue
        at = [start]
        for term in cue[1:]:
            window = stems[at[-1] + 1 : at[-1] + 2 + PLAIN_GAP]
            if term not in window:
                break
            at.append(at[-1] + 1 + window.index(term))
        else:
            if best is None or at[-1] - at[0] < best[-1] - best[0]:
                best = at
    return None if best is None else tuple(best)


@lru_cache(maxsize=1)
def _plain_cues() -> dict[str, tuple[tuple[int, int, tuple[str, ...]], ...]]:
    """The plain list's forms by their first term, each as (entry's position, form's position in it, its
    terms): a query holding none of a form's first terms cannot say it (a question's "how" begins forms of
    eleven entries, and trying each of their forms was most of `expand`'s time)."""
    index: dict[str, list[tuple[int, int, tuple[str, ...]]]] = {}
    for n, entry in enumerate(plain()):
        for k, form in enumerate(entry.said):
            cue = _analyzed(form)
            if cue:
                index.setdefault(cue[0], []).append((n, k, cue))
    return {key: tuple(cues) for key, cues in index.items()}


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


@lru_cache(maxsize=4096)  # the glossary's forms, analyzed once (`_said` reads every form of an entry a query
def _analyzed(form: str) -> tuple[str, ...]:  # may say; 2,000-odd forms)
    return tuple(terms(form))


def shown(expansions: list[Expansion]) -> str | None:
    """What the query was searched as, for the user: "LLM, large language model" (None: nothing added)."""
    if not expansions:
        return None
    return "; ".join(", ".join((e.said, *e.shown)) for e in expansions)


def also(expanded: str | None, quote: Callable[[str], str]) -> str:
    """`shown`'s text as a reply says it after "Also searched: ", each form the query used `quote`d:
    "“speech recognition” as ASR; “LLM” as large language model"."""
    pairs = (part.partition(", ") for part in (expanded or "").split("; "))
    return "; ".join(f"{quote(said)} as {forms}" for said, _, forms in pairs if forms)


def suggest(words: Sequence[str], limit: int = 2, found: Callable[[str], bool] | None = None,
            whole: bool = False) -> list[str]:
    """Topics of the glossary near `words` (an entry one of whose forms shares a term with them; if `whole`,
    one of whose forms they say whole, its terms in a row), to try when nothing matched: their long forms, as
    written; given `found` (whether a search of a topic finds anything), only topics it finds, of the first
    SUGGEST_TRIED near ones, so no suggestion leads to another empty reply."""
    said = [t for w in words for t in terms(w)]
    wanted = set(said)
    found_topics: list[str] = []
    tried = 0
    for entry in entries():
        if not any(_contains(said, _analyzed(form)) if whole else wanted & set(_analyzed(form))
                   for form in entry.forms):
            continue
        topic = next((form for form in (entry.long[0], entry.short) if form.lower() not in words), None)
        if topic is None:
            continue
        if found is not None:
            if tried >= SUGGEST_TRIED:
                break
            tried += 1
            if not found(topic):
                continue
        found_topics.append(topic)
        if len(found_topics) >= limit:
            break
    return found_topics


# --- topics a text names (what Apple published most on: bot.trending) -------------------------------------

_WORD_AS_WRITTEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


@lru_cache(maxsize=4096)  # a month's items are asked about again at every trending reply
def topics_named(text: str) -> tuple[str, ...]:
    """The glossary's topics `text` names, each by its first long form ("large language model"): an entry
    one of whose long forms (or abbreviations of several words, "KV cache") it holds, the analyzed terms in a
    row, or whose one-word abbreviation it writes as the glossary does, capitals and all ("LLM", "LLMs"; "lm"
    or "Lm" is no "LM"). A topic that another
    named topic's long form holds is left out ("language model" in "large language model", "reinforcement
    learning" in "reinforcement learning from human feedback"): the most specific topic counts."""
    stems = terms(text)
    held = set(stems)
    written = {w for word in _WORD_AS_WRITTEN.findall(text) for w in (word, _singular(word))}
    named: list[Entry] = []
    for n in sorted({n for stem in held for n in _by_first().get(stem, ())} | _written_entries(written)):
        entry = entries()[n]
        if (entry.short in written and " " not in entry.short) or any(
                all(t in held for t in _analyzed(form)) and _contains(stems, _analyzed(form))
                for form in (*entry.long, *([entry.short] if " " in entry.short else []))):
            named.append(entry)
    longs = {entry.long[0]: [_analyzed(form) for form in entry.long] for entry in named}
    return tuple(name for name in longs if not any(
        other != name and any(_contains(list(form), _analyzed(name)) for form in forms)
        for other, forms in longs.items()))


def _written_entries(written: set[str]) -> set[int]:
    return {n for n, entry in enumerate(entries()) if entry.short in written}
