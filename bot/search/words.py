"""The words a query can hold that say nothing about its topic, one list for search, summaries and questions.

    STOPWORDS  common English words: a query of only these is refused in one line ("the", "how")
    FILLER     STOPWORDS, question words, politeness, words every item shares ("apple", "paper",
               "published") and time words ("recently", "this year"): dropped from what decides the ranking
               when the query holds any other word ("what has apple published on privacy?" ranks by
               "privacy"), kept when it holds nothing else ("search apple" searches for "apple").

    content(["what", "has", "apple", "published", "on", "privacy"]) -> ["privacy"]
    english("apart") -> True: a word English spells so (never corrected to "part")
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import re
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from bot.search.analysis import terms

_STOP = """a about an and any are as at be by can do does for from has have how i if in into is it its me of
on or our say says show shows tell than that the their there these this to was we what when where which who
why with you your"""
STOPWORDS = frozenset(_STOP.split())

# Question words, filler, words that every item of the archive shares, and time words (the date filters a
# question's time phrase becomes are bot.ask's business: here they are only kept out of the ranking).
_FILLER = """
a about abt all am an and any anybody anyone anything appear appeared are around articles as ask
asking at be been being blog blogs by came can come comes coming concerning could curious did do does doing
done find for from get give got had has have help how i i'd i'm id im in interested into is it
it's its know lately like list look looking lookup may me mention mentions might more most my need needs new
news not of on or out paper papers please post posts publication publications publish published publishes
publishing re recent recently regarding related released research said say says search searching see shall
should show showed some something stuff tell than thank thanks that the their them there these they thing
things this those to topic topics up us via want wanted was we were what what's whats when where which who
whom whose why will with wonder wondering work works would you your
also only just but now then same ok okay plus
today yesterday week weeks month months year years latest newest lately ago last past since until
anything everything else there's here's been
make makes making made better best good improve improves improving improved way ways use uses using used
looked worked someone somebody everyone everybody going gonna actually really very quite maybe probably
especially particularly specifically bot guys folks put much many lot lots so own other another each every
wrote written authored author authors release releases releasing explain explains explained explaining
attend attends attended attending
ones items
don doesn didn isn aren wasn weren haven hasn hadn won wouldn shouldn couldn
"""
# Filler beyond STOPWORDS is dropped only from a question or a longer query: two words typed as a search are
# meant as typed ("hey siri", "apple privacy").
MIN_FILLER_WORDS = 3
GREETINGS = frozenset({"hey", "hi", "hello", "yo", "hiya"})  # dropped as a question's first word only
# The publisher's name: every item of this archive is Apple's, so it never says what a query, or two related
# items, are about.
PUBLISHER = frozenset({"apple", "apples"})
FILLER = STOPWORDS | frozenset(_FILLER.split()) | PUBLISHER
# Names of Apple's platforms, devices and features, as people type them in Slack (lower case): words as
# written, like English ones, though no dictionary holds them ("memoji" is no typo of "memory", nor
# "visionos" of "vision").
_APPLE_NAMES = """
ios ipados macos watchos tvos visionos xros iphone ipad macbook imac airpods homepod appletv applewatch
memoji animoji genmoji facetime imessage icloud siri spotlight quicktype faceid touchid truedepth
airtag carplay healthkit arkit coreml createml mlx swiftui xcode wwdc
"""
APPLE_NAMES = frozenset(_APPLE_NAMES.split())


def content(words: Sequence[str], question: bool = True) -> list[str]:
    """`words` (lower case) without FILLER (only STOPWORDS unless `question` or MIN_FILLER_WORDS words or
    more); all of them when nothing else is left."""
    dropped = FILLER if question or len(words) >= MIN_FILLER_WORDS else STOPWORDS
    if question and len(words) > 1 and words[0] in GREETINGS:
        words = words[1:]
    kept = [w for w in words if w not in dropped]
    return kept or list(words)


# The bundled model (bot.search.embed) and its tokenizer (Llama 2's, in the wordllama wheel), whose whole-word
# tokens of three letters or more are about 9,000 common English words.
BUNDLED_CONFIG = "l2_supercat"
TOKENIZER = ("tokenizers", f"{BUNDLED_CONFIG}_tokenizer_config.json")
_WHOLE_WORD = re.compile(r"▁([a-z]{3,})")


def package_root(name: str) -> Path | None:
    """Where an installed package's files are, without importing it (None: not installed)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@cache
def _dictionary() -> frozenset[str]:
    root = package_root("wordllama")
    if root is None:
        return frozenset()
    vocab = json.loads(root.joinpath(*TOKENIZER).read_text(encoding="utf-8"))["model"]["vocab"]
    return frozenset(m.group(1) for token in vocab if (m := _WHOLE_WORD.fullmatch(token)))


# pyspellchecker's English word list (MIT): about 128,000 words as written, inflections included, each seen
# at least 50 times in its corpora (subtitles and word lists), no common misspelling among them ("recieve",
# "captoning"). Only its file is read, from the installed package, as the tokenizer's is.
SPELLING_LIST = ("resources", "en.json.gz")  # in the spellchecker package
_LISTED = re.compile(r'^"([a-z]+)": \d+,?$', re.MULTILINE)  # the file's lines: "word": count,


def english(word: str) -> bool:
    """Whether `word` (lower case) is an English word as written: one the bundled tokenizer holds whole
    ("apart", "whole", "never"), an inflection of one (stemmed alike: "farms", "lifting", "barely"), a
    filler word, one of the English word list ("accents", "pottery"), or a name of Apple's (APPLE_NAMES).
    Such a word is never taken for a misspelling of another ("accents" is not "accept")."""
    return word in FILLER or word in APPLE_NAMES or word in _dictionary() \
        or _stem(word) in _dictionary_stems() or f"\n{word}\n" in _listed()


# How English words end after the stem the stemmer keeps, inflections and derivations alike ("normal|izing",
# "photograph|y", "learn|able").
_ENDING_WORDS = """
    s es ies ied ier iest ily y ly e ed edly er ers est en ing ingly ings al ally als ation ational
    ationally ations ative atively ator ators ize izes ized izer izers izing ization izations ise ises ised
    ising isation isations ic ics ical ically ity ities ive ively iveness ives ness nesses ment ments ful
    fully fulness less lessly lessness able ably ability abilities ible ibly ibility ance ances ence ences
    ant ants ent ently ents ency ancy ous ously ousness ism isms ist ists istic ion ions ional ionally or ors
    ure ures ate ated ates ating ately
"""
_ENDINGS = tuple(_ENDING_WORDS.split())
MIN_PART_CHARS = 3  # what follows a start of a word is a word of its own when it is an English word this long


def form_of(typed: str, start: str) -> bool:
    """Whether `typed`, a word no item holds, may be a form of the word whose stem is `start`, one of its
    starts (cut short, misspelt or inflected): unless what follows the start is an English word of its own
    that begins no English ending. "normalizin" (cut short), "federatd" (misspelt), "photography" and
    "learnable" may be forms of "normal", "feder", "photograph" and "learn"; "blockchain" is no form of
    "block", nor "speechrecognition" of "speech"."""
    rest = typed[len(start):]
    if not typed.startswith(start):
        return False
    ends = any(ending.startswith(rest) for ending in _ENDINGS)
    return len(rest) < MIN_PART_CHARS or ends or not english(rest)


@cache
def _listed() -> str:
    """The English word list as one string, each word between line breaks: ~1.2 MB, where a set of its words
    would hold ~12 MB (a word is looked up only when a query holds a word no item does)."""
    root = package_root("spellchecker")
    try:
        text = "" if root is None else gzip.decompress(root.joinpath(*SPELLING_LIST).read_bytes()).decode()
    except (OSError, EOFError, UnicodeDecodeError):  # gzip.BadGzipFile is an OSError
        text = ""  # without the list, the tokenizer's words still guard the common ones
    kept = io.StringIO()
    kept.write("\n")
    for found in _LISTED.finditer(text):  # one word at a time: no list of 128,000 strings, even for a moment
        kept.write(found.group(1) + "\n")
    return kept.getvalue()


def _stem(word: str) -> str | None:
    found = terms(word)  # the index's own analysis
    return found[0] if len(found) == 1 else None


@cache
def _dictionary_stems() -> frozenset[str]:
    return frozenset(stem for word in _dictionary() if (stem := _stem(word)))


def edits(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions costing one (as tantivy's fuzzy query counts them)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, previous2[j - 2] + 1)
            row.append(cost)
        previous2, previous = previous, row
    return previous[-1]
