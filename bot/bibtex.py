"""Archive items as BibTeX, and as the same reference in plain text: pure functions, no I/O.

    entry(item)                      # @misc{hannun2025scaling, title = {...}, author = {A and B}, ...}
    entry(item, venue="ICML 2025")   # @inproceedings{..., booktitle = {ICML 2025}, year = {2025}, ...}
    plain(item)                      # "Awni Hannun and Jane Doe. Scaling .... Apple Machine Learning
                                     #  Research, December 2025. https://machinelearning.apple.com/..."
    bibliography(items)              # a .bib file: one entry per item, keys unique within it

What an entry holds: `@inproceedings` with `booktitle` (the venue) when the item has a venue (its `year` is
the venue's when the venue names one, else the publication year), `@misc` otherwise, with `howpublished =
{\\url{...}}`, `url` and `note = {Apple Machine Learning Research}`; both with `title`, `author` (the
authors joined with " and ", at most AUTHORS of them, then "and others"), `year`, `month` (BibTeX's `jan` ...
`dec` macros) and `url`. Fields the item lacks (no authors, a link that is not a plain http(s) URL) are left
out, never guessed.

Keys are stable: the first author's surname, the year and the first significant word of the title, in lower
case ASCII (`hannun2025scaling`; `vandermaaten2024visualizing` for "Laurens van der Maaten"; `apple` when
the item names no author). Within one file, a key already taken gets a suffix, a, b, ... (items are written
oldest first, so an item keeps its key when a newer one collides with it later).

Text is escaped for BibTeX and LaTeX: `& % $ # _` get a backslash, `~ ^ \\` become `\\textasciitilde{}`,
`\\textasciicircum{}`, `\\textbackslash{}`, and braces `\\textbraceleft{}` / `\\textbraceright{}` (BibTeX
counts every brace, escaped or not, so a title with one `{` would break the file: these commands hold none
of their own). Letters stay as written, accents included: the file is UTF-8, which biber, bibtexparser and
LaTeX (its default input encoding since 2018) read as is. A title's words with a capital after their first
letter (LLM, iPhone, MobileCLIP, 3D) are wrapped in braces, so a style that lowercases titles keeps them.
Sizes are capped (TITLE_CHARS, NAME_CHARS, VENUE_CHARS, URL_CHARS, and each escaped field at FIELD_CHARS):
an entry is a few kilobytes at most, whatever the feed holds.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlsplit

from bot.blocks import cut
from bot.models import Item

PUBLISHER = "Apple Machine Learning Research"
AUTHORS = 50  # names in an entry's author field; more: "and others"
TITLE_CHARS = 300  # of a title as written, cut on a word with "…"
NAME_CHARS = 100  # of one author's name
VENUE_CHARS = 200
URL_CHARS = 500  # a longer link is left out (a cut URL would be a wrong one)
FIELD_CHARS = 2000  # of any field once escaped
PLAIN_AUTHORS = 10  # names in the plain-text reference; more: "et al."
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
               "October", "November", "December")

_ESCAPES = {
    "\\": r"\textbackslash{}", "{": r"\textbraceleft{}", "}": r"\textbraceright{}", "&": r"\&", "%": r"\%",
    "$": r"\$", "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
}
_UNSAFE_URL = re.compile(r"[\s<>|\"]")
# Words that do not start a key: articles, prepositions, conjunctions, question words.
_MINOR = frozenset({
    "a", "an", "the", "on", "of", "in", "for", "to", "and", "or", "with", "at", "by", "from", "via", "into",
    "onto", "over", "under", "as", "is", "are", "be", "do", "does", "can", "how", "what", "when", "why",
    "which", "who", "towards", "toward", "vs", "versus", "we", "our", "your", "its", "it", "this", "that",
    "these", "those"})
_PARTICLES = frozenset({"van", "von", "der", "den", "de", "del", "della", "da", "di", "du", "la", "le", "ter",
                        "ten", "bin", "dos", "das", "zu", "af"})
_SUFFIXES = frozenset({"jr", "jr.", "sr", "sr.", "ii", "iii", "iv"})
_GROUP_WORDS = frozenset({"team", "teams", "group", "lab", "labs", "research", "apple", "committee"})
_FOLD = {"ß": "ss", "æ": "ae", "Æ": "AE", "ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D",
         "þ": "th", "Þ": "TH", "œ": "oe", "Œ": "OE", "ı": "i"}


# --- one item ------------------------------------------------------------------------------------------


def entry(item: Item, venue: str | None = None, *, key: str | None = None) -> str:
    """The item's BibTeX entry (see the module docstring): `@inproceedings` when `venue` names where it
    appeared, else `@misc`. `key`: the citation key to use (default `key_for(item)`)."""
    venue = _clean(venue or "")[:VENUE_CHARS].strip() or None
    url = bib_url(item.link)
    fields: list[tuple[str, str]] = [("title", title_field(item.title))]
    authors = author_field(item.authors)
    if authors:
        fields.append(("author", authors))
    if venue is not None:
        kind = "inproceedings"
        fields.append(("booktitle", escape(venue)))
        fields.append(("year", venue_year(venue) or str(item.published.year)))
    else:
        kind = "misc"
        if url:
            fields.append(("howpublished", rf"\url{{{url}}}"))
        fields.append(("year", str(item.published.year)))
    lines = [f"@{kind}{{{key or key_for(item)},"]
    lines += [f"  {name} = {{{value}}}," for name, value in fields]
    lines.append(f"  month = {MONTHS[item.published.month - 1]},")
    if url:
        lines.append(f"  url = {{{url}}},")
    if venue is None:
        lines.append(f"  note = {{{PUBLISHER}}},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join([*lines, "}"])


def plain(item: Item, venue: str | None = None) -> str:
    """The same reference in plain text, for people who paste references: authors, title, where and when,
    and the link ("Awni Hannun and Jane Doe. Scaling Laws. Apple Machine Learning Research, December 2025.
    https://…"). Plain text: escape it for wherever it goes."""
    names = [_name(a) for a in item.authors if a and a.strip()]
    if len(names) > PLAIN_AUTHORS:
        who = ", ".join(names[:PLAIN_AUTHORS]) + " et al."
    elif len(names) > 2:
        who = ", ".join(names[:-1]) + f", and {names[-1]}"
    else:
        who = " and ".join(names)
    title = cut(_clean(item.title), TITLE_CHARS) or "Untitled"
    when = f"{MONTH_NAMES[item.published.month - 1]} {item.published.year}"
    venue = _clean(venue or "")[:VENUE_CHARS].strip()
    where = f"In {venue}. {PUBLISHER}, {when}." if venue else f"{PUBLISHER}, {when}."
    parts = [_sentence(who) if who else "", _sentence(title), where, bib_url(item.link) or ""]
    return " ".join(p for p in parts if p)


def key_for(item: Item) -> str:
    """The item's citation key: surname, year, first significant title word (`hannun2025scaling`)."""
    first = next((a for a in item.authors if a and a.strip()), "")
    who = surname_key(first) if first else ""
    return f"{who or 'apple'}{item.published.year}{title_word(item.title) or 'item'}"


# --- a file -----------------------------------------------------------------------------------------------


def bibliography(items: Iterable[Item], venues: Mapping[str, str] | None = None) -> str:
    """A .bib file of `items` (each once, by id), oldest first, keys unique within it; `venues` maps an
    item's id to its venue. "" for no items."""
    entries = list(keyed_entries(items, venues))
    return "\n\n".join(text for _key, text in entries) + "\n" if entries else ""


def keyed_entries(items: Iterable[Item], venues: Mapping[str, str] | None = None
                  ) -> Iterable[tuple[str, str]]:
    """(key, entry) of each item, oldest first (then by id), each key unique among them."""
    unique = {item.id: item for item in items}
    taken: set[str] = set()
    for item in sorted(unique.values(), key=lambda i: (i.published, i.id)):
        key = unique_key(key_for(item), taken)
        taken.add(key)
        yield key, entry(item, (venues or {}).get(item.id), key=key)


def unique_key(key: str, taken: set[str]) -> str:
    """`key`, or the first of key+a, key+b, ..., key+z, key+aa, ... not in `taken`."""
    if key not in taken:
        return key
    letters = "abcdefghijklmnopqrstuvwxyz"
    for first in ("", *letters):
        for last in letters:
            if key + first + last not in taken:
                return key + first + last
    n = 1
    while f"{key}{n}" in taken:
        n += 1
    return f"{key}{n}"


# --- fields -----------------------------------------------------------------------------------------------


def escape(text: str, limit: int = FIELD_CHARS) -> str:
    """Text as a BibTeX field's value: on one line, LaTeX's special characters escaped (braces as
    commands, so the value's braces always balance), at most `limit` characters (cut between characters,
    never inside an escape, with "…")."""
    out: list[str] = []
    size = 0
    for char in _clean(text):
        piece = _ESCAPES.get(char, char)
        if size + len(piece) > limit - 1:
            out.append("…")
            break
        out.append(piece)
        size += len(piece)
    return "".join(out)


def title_field(title: str) -> str:
    """A title escaped, cut at TITLE_CHARS as written (and FIELD_CHARS escaped), each word with a capital
    after its first letter in braces ({LLM}s, {iPhone})."""
    words = cut(_clean(title), TITLE_CHARS).split(" ")
    out: list[str] = []
    size = 0
    for word in words:
        piece = _protected(word)
        if size + len(piece) + 1 > FIELD_CHARS - 1:
            out.append("…" if out else escape(word))  # one huge word: cut as plain text
            break
        out.append(piece)
        size += len(piece) + 1
    return " ".join(out)


def author_field(authors: Sequence[str]) -> str:
    """The authors joined with " and " (at most AUTHORS, and FIELD_CHARS escaped; then "and others"); a
    group's name ("Input & Intelligence Team") in braces, so BibTeX keeps it whole."""
    names = [cut(_clean(a), NAME_CHARS) for a in authors if a and a.strip()]
    out: list[str] = []
    size = 0
    for n, name in enumerate(names):
        whole = _is_group(name) or re.search(r"\sand\s", name, re.IGNORECASE) or name.count(",") > 1
        piece = f"{{{escape(name)}}}" if whole else escape(name)
        if n >= AUTHORS or size + len(piece) + 5 > FIELD_CHARS - 11:
            out.append("others")
            break
        out.append(piece)
        size += len(piece) + 5
    return " and ".join(out)


def bib_url(link: str) -> str | None:
    """The link as an entry's URL: a plain http(s) URL of at most URL_CHARS, its characters outside URLs'
    own percent-encoded (so no brace or backslash reaches the file); None otherwise."""
    link = link.strip()
    try:
        parts = urlsplit(link)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.netloc or _UNSAFE_URL.search(link):
        return None
    safe = quote(link, safe=":/?#[]@!$&'()*+,;=%-._~")
    return safe if len(safe) <= URL_CHARS else None


def venue_year(venue: str) -> str | None:
    """The year a venue names ("ICML 2025" -> "2025"), or None."""
    found = re.findall(r"(?<!\d)(19\d\d|20\d\d)(?!\d)", venue)
    return found[-1] if found else None


def surname_key(name: str) -> str:
    """An author's surname for a key, in lower-case ASCII letters and digits: "Awni Hannun" -> "hannun",
    "Doe, Jane" -> "doe", "Laurens van der Maaten" -> "vandermaaten", "Adam Goliński" -> "golinski"; a
    group's name gives its first word ("Input & Intelligence Team" -> "input")."""
    name = _clean(name)
    if _is_group(name):
        words = [w for w in (ascii_word(w) for w in name.split()) if w]
        return words[0][:30] if words else ""
    if "," in name:
        return ascii_word(name.partition(",")[0])[:30]
    words = [w for w in name.split() if w]
    while len(words) > 1 and words[-1].lower() in _SUFFIXES:
        words.pop()
    start = len(words) - 1
    while start > 1 and (words[start - 1].lower() in _PARTICLES or words[start - 1][:1].islower()):
        start -= 1
    return ascii_word("".join(words[start:]))[:30]


def title_word(title: str) -> str:
    """The first word of a title that is not an article, preposition or the like, in lower-case ASCII."""
    words = [ascii_word(w) for w in re.split(r"[\s\-–—:/]+", _clean(title))]
    words = [w for w in words if w]
    return next((w for w in words if w not in _MINOR), words[0] if words else "")[:30]


def ascii_word(text: str) -> str:
    """Lower-case ASCII letters and digits of `text`, accents folded ("Goliński" -> "golinski")."""
    folded = "".join(_FOLD.get(c, c) for c in text)
    folded = unicodedata.normalize("NFKD", folded)
    return "".join(c for c in folded.lower() if c.isascii() and c.isalnum())


# --- helpers ----------------------------------------------------------------------------------------------


def _clean(text: str) -> str:
    """One line: whitespace runs as one space, control characters (and lone surrogates) dropped."""
    kept = "".join(" " if c.isspace() else c for c in text
                   if c.isspace() or unicodedata.category(c) not in ("Cc", "Cs"))
    return " ".join(kept.split())


def _protected(word: str) -> str:
    """A title's word escaped; its core (the word without the punctuation around it) in braces when a
    capital follows the first character of one of its parts (LLMs, iPhone, 3D, RL-Based; not Large-Scale)."""
    found = re.search(r"[^\W_](?:.*[^\W_])?", word)
    if found is None:
        return escape(word)
    core = found.group(0)
    if not any(c.isupper() for part in re.split(r"[-–/]", core) for c in part[1:]):  # Large-Scale: no
        return escape(word)
    return escape(word[: found.start()]) + "{" + escape(core) + "}" + escape(word[found.end():])


def _is_group(name: str) -> bool:
    """Whether an author is a group, not a person: "&", a dash or colon, "Team"-like words, or many words."""
    words = name.lower().split()
    return (any(c in name for c in "&—–:/") or len(words) > 5
            or any(w.strip(".,") in _GROUP_WORDS for w in words))


def _name(author: str) -> str:
    return cut(_clean(author), NAME_CHARS)


def _sentence(title: str) -> str:
    return title if title.endswith(("?", "!", ".", "…")) else f"{title}."
