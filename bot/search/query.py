"""Turning any user string into a safe, ranked query over the archive.

    parse_query("captioning since:2026-01-01 type:paper") -> Query(terms=["captioning"], filters=...)
    parse_query("captioning until:2025-12-31")  -> items published on or before that day
    parse_query("since:2026-01-01")             -> no words: the items in that span, newest first
    parse_query('"image captioning" diffusion') -> Query(terms=["image", "captioning", "diffusion"],
                                                         phrases=[("image", "captioning")])
    search(index, "captioning", limit=5) -> Found(hits=[SearchHit, ...], searched_for=None)
    parse_query('author:"Jane Doe" diffusion')  -> items by Jane Doe matching diffusion (authors are searched
                                                   too; author: alone lists that author's items newest first)
    parse_query('siri -privacy -"speech synthesis"') -> Query(terms=["siri"],
                                                         without=[("privacy",), ("speech", "synthesis")])
    parse_query("diffusion venue:icml has:code") -> items whose venue says ICML and whose page links their
                                                   code (has:paper, has:venue alike; alone: the newest)

Terms are words only (operators, a hyphen, an underscore, emoji become separators; a star after the last word
asks for every word it starts: `priv*`); words in "double quotes" (or Slack's smart quotes) are also a phrase;
a quote mark left open quotes nothing (its words are loose, and `unclosed` says so). A word or quoted phrase
typed right after a minus that starts a word (`-privacy`, `-"hey siri"`, as in Slack's own search) is left
out: no item holding it is listed, and it is not searched for. A query of nothing but links (a post's address
pasted in) is answered with the items at them (`links`), else the words of their addresses.
bot.search.keywords builds the engine's query from these parts with tantivy's query constructors, so no input
can be a syntax error. Too long or empty input raises `SearchError` with a one-line message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol, TypeVar

from bot.errors import SearchError
from bot.feed import canonical_link
from bot.models import SearchFilters
from bot.search import authors, glossary
from bot.search.words import MIN_FILLER_WORDS, STOPWORDS, content

MAX_QUERY_CHARS = 256
MAX_TERMS = 16
MAX_LIMIT = 100
MIN_PREFIX_CHARS = 3
MAX_LINKS = 5  # a query of links: the items at the first five
MAX_LINKS_CHARS = 5_000  # links are looked for in the first 5,000 characters of a query

_WORD = re.compile(r"[^\W_]+")  # an underscore joins no words: image_captioning is image captioning
_STARRED = re.compile(r"[^\W_]\*+\s*$")  # a last word typed with a star (priv*) asks for a prefix
# An English clitic ("someone else's", "don't", "who've"): dropped, so it never becomes a word of its own
# ("s", "t") and the word it leans on is searched as itself ("apple's" is "apple"; "don" is filler).
_CLITIC = re.compile(r"(?<=[^\W\d_])['’](?:s|t|m|re|ve|ll|d)(?![^\W_])", re.IGNORECASE)
_FILTER = re.compile(r"(?<!\S)(since|until|type):(\S*)", re.IGNORECASE)
# author:"First Last", author:“First Last” (Slack's smart quotes) or author:Name; matches authors only.
_PHRASE = re.compile(r"\"([^\"]*)\"|“([^”]*)”")
_QUOTE_MARK = re.compile(r"[\"“”]")
_PHRASE_OR_MARK = re.compile(f"{_PHRASE.pattern}|{_QUOTE_MARK.pattern}")  # a closed phrase, else a lone mark
# A word (its hyphenated parts too: -on-device) or a quoted phrase right after a minus at the start of a word.
_WITHOUT = re.compile(r"(?<!\S)-(?:\"[^\"]*\"|“[^”]*”|[^\W_][\w'’-]*)")
_PHRASE_OR_WITHOUT = re.compile(f"{_PHRASE.pattern}|{_WITHOUT.pattern}")  # a phrase's minus is its own
# a web address as typed (https://…) or as Slack sends one in a message (<https://…|label>)
LINK = re.compile(r"<(https?://[^\s|>]+)(?:\|[^>]*)?>|(?<!\S)(https?://\S+)", re.IGNORECASE)
_AFTER_LINK = ".,;:!?)]}'\"”’"  # punctuation typed after a link (is this https://…?) is no part of it
_AUTHOR = authors.AUTHOR_PART
MAX_AUTHORS = 5
# venue:icml, venue:"neurips 2025" (where the paper appeared, its page says: bot.item_pages); has:code
_VENUE = re.compile(r"(?<!\S)venue:(?:\"([^\"]*)\"?|“([^”]*)”?|(\S*))", re.IGNORECASE)
_HAS = re.compile(r"(?<!\S)has:(\S*)", re.IGNORECASE)
HAS_ALIASES = {"code": "code", "paper": "paper", "pdf": "paper", "venue": "venue"}
MAX_VENUES = 3
KIND_ALIASES = {
    "paper": "research",
    "papers": "research",
    "research": "research",
    "update": "update",
    "updates": "update",
}


@dataclass(frozen=True)
class Query:
    terms: tuple[str, ...]
    prefix_last: bool
    filters: SearchFilters = field(default_factory=SearchFilters)
    phrases: tuple[tuple[str, ...], ...] = ()  # quoted words of two or more (their words are in terms too)
    text: str = ""  # the words as typed, without filters
    content: tuple[str, ...] = ()  # the terms that decide the ranking: without filler (bot.search.words)
    cut: bool = False  # the text was longer than MAX_QUERY_CHARS: its first words were searched
    unclosed: bool = False  # a quote mark was left open: its words were searched loose
    left_out: tuple[str, ...] = ()  # quoted phrases of only common words ("of the"), searched loose
    without: tuple[tuple[str, ...], ...] = ()  # the words of each word or phrase typed after a minus: items
    # holding one are left out
    links: tuple[str, ...] = ()  # a query of nothing but links: their canonical forms; the items at them are
    # the answer, and the words of their addresses (`terms`) are searched when no item is at any of them
    starred: bool = False  # a star after the last word (priv*) asked for a prefix, even of a word meant whole

    def __post_init__(self) -> None:
        if not self.content and self.terms:
            object.__setattr__(self, "content", tuple(content(self.terms, question=False)))

    @property
    def last_is_prefix(self) -> bool:
        """Whether the last of `content` stands for every word it starts: it is the last word typed, typed as
        a prefix (a filler word typed last makes no word of `content` a prefix)."""
        return self.prefix_last and bool(self.content) and self.content[-1] == self.terms[-1]


def split_filters(text: str) -> tuple[str, str]:
    """`text`'s words and its filters (since:, until:, type:, author:, venue:, has:) as typed, each on one
    line: what to search instead when the filters left nothing ("federated learning since:2024-01-01" ->
    ("federated learning", "since:2024-01-01"))."""
    patterns = (_FILTER, _AUTHOR, _VENUE, _HAS)
    filters = [found.group(0) for pattern in patterns for found in pattern.finditer(text)]
    return " ".join(_without_filters(text).split()), " ".join(filters)


def _without_filters(text: str) -> str:
    return _HAS.sub(" ", _VENUE.sub(" ", _AUTHOR.sub(" ", _FILTER.sub(" ", text))))


def parse_query(text: str, *, every_word: bool = False) -> Query:
    """`text` as a Query; `every_word` keeps filler words in `content` (a title looked up by its words)."""
    links, text = _links(text)
    cut = len(text) > MAX_QUERY_CHARS
    if cut:  # searched up to the last whole word that fits (one ending at the limit fits)
        head = text[:MAX_QUERY_CHARS]
        if not text[MAX_QUERY_CHARS].isspace() and " " in head:  # a word runs past the limit: not it
            head = head.rsplit(None, 1)[0]
        text = head
    dates: dict[str, date] = {}
    kind: str | None = None
    for name, value in _FILTER.findall(text):
        name = name.lower()
        if name in ("since", "until"):
            try:
                dates[name] = date.fromisoformat(value)
            except ValueError:
                raise SearchError(f"{name}: needs a date as YYYY-MM-DD, got {value[:20]!r}.") from None
        else:
            kind = KIND_ALIASES.get(value.lower())
            if kind is None:
                raise SearchError(f"type: must be paper or update, got {value[:20]!r}.")
    authors = _authors(text)
    venues, has = _venues(text), _has(text)
    rest, without = _without(_CLITIC.sub("", _without_filters(text)))
    words = [w.lower() for w in _WORD.findall(rest)]
    unique = list(dict.fromkeys(words))[:MAX_TERMS]
    phrases = []
    left_out: list[str] = []
    for groups in _PHRASE.findall(rest):
        quoted = tuple(w.lower() for w in _WORD.findall("".join(groups)))
        if quoted and all(w in STOPWORDS for w in quoted):  # "of the" says nothing: its words stay loose
            left_out.append(" ".join(quoted))
        elif len(quoted) > 1 and all(w in unique for w in quoted) and quoted not in phrases:
            phrases.append(quoted)
    unclosed = bool(_QUOTE_MARK.search(_PHRASE.sub(" ", rest)))
    since, until = dates.get("since"), dates.get("until")
    if not unique and links:  # an address without words (https://example.com): the item at it, or none
        return Query((), False, cut=cut, links=links)
    if not unique and not authors and not (since or until or kind or venues or has):
        if without:
            raise SearchError("Type some words to search for beside those to leave out, for example: search "
                              "siri -privacy")
        raise SearchError("Type some words to search for, for example: search image captioning")
    if not unique:
        return Query((), False, SearchFilters(since=since, until=until, kind=kind, authors=authors,
                                              venues=venues, has=has), cut=cut, without=without)
    starred = bool(_STARRED.search(rest))
    if starred and len(words[-1]) < MIN_PREFIX_CHARS:  # pr* would be every word starting pr: too many to mean
        raise SearchError(f"Type at least {MIN_PREFIX_CHARS} letters before a star ({words[-1][:20]}* is too "
                          "short), for example: search priv*")
    # A prefix match on the last word (as typed, not followed by a space), once it is long enough to mean it,
    # unless it is an abbreviation, meant whole; a star after it asks for one, even after an abbreviation.
    prefix_last = len(words[-1]) >= MIN_PREFIX_CHARS and (
        starred or bool(_WORD.search(rest[-1])) and not glossary.is_abbreviation(_WORD.findall(rest)[-1]))
    filters = SearchFilters(since=since, until=until, kind=kind, authors=authors, venues=venues, has=has)
    typed = " ".join(_WORD.findall(rest))[:MAX_QUERY_CHARS]
    in_phrases = {w for phrase in phrases for w in phrase}
    loose = [w for w in unique if w not in in_phrases]
    question = "?" in rest or len(unique) >= MIN_FILLER_WORDS
    worth = content(loose, question)
    kept = tuple(unique) if every_word else tuple(w for w in unique if w in in_phrases or w in worth)
    return Query(tuple(unique), prefix_last, filters, tuple(phrases[:MAX_TERMS]), typed, kept, cut, unclosed,
                 tuple(dict.fromkeys(left_out)), without, links, starred and prefix_last)


def _links(text: str) -> tuple[tuple[str, ...], str]:
    """The links in `text` and the text to search. A text of nothing but links: their canonical forms (as
    items hold them), each once, and the words of the last part of each address (`hey siri` of
    …/research/hey-siri, an Apple post's title words; not an arXiv number), with any filters typed beside
    them (`<link> type:paper`). Links among other words: none, and the text without them (an address is no
    word of a search)."""
    typed = [(found.group(1) or found.group(2)).rstrip(_AFTER_LINK)
             for found in LINK.finditer(text, 0, MAX_LINKS_CHARS)]
    if not typed:
        return (), text
    rest = LINK.sub(" ", text)
    words, filters = split_filters(rest)
    if words:
        return (), rest
    links = tuple(dict.fromkeys(link for address in typed[:MAX_LINKS] if (link := canonical_link(address))))
    ends = (link.rsplit("/", 1)[-1].split("?")[0] if link.count("/") > 2 else "" for link in links)
    said = [end for end in ends if re.search(r"[^\W\d_]", end)]  # words, not numbers
    return links, " ".join([*said, filters]).strip()  # the filters (type:paper) apply to the linked items


def _without(text: str) -> tuple[str, tuple[tuple[str, ...], ...]]:
    """`text` without the words and phrases typed after a minus (`_WITHOUT`; a minus inside a closed quoted
    phrase is the phrase's), and their words, lower-cased, each once, at most MAX_TERMS."""
    left: list[tuple[str, ...]] = []

    def taken(found: re.Match[str]) -> str:
        if not found.group(0).startswith("-"):
            return found.group(0)  # a quoted phrase, kept whole
        words = tuple(w.lower() for w in _WORD.findall(found.group(0)))  # the minus and quotes are no words
        if words and words not in left:
            left.append(words)
        return " "

    return _PHRASE_OR_WITHOUT.sub(taken, text), tuple(left[:MAX_TERMS])


def without_open_quote(text: str) -> str:
    """`text` on one line without the quote marks no other mark closes, for quoting it back: their words were
    searched loose (`"image captioning` searched and echoed as image captioning); closed "phrases" stay as
    typed, and so does a text of nothing but quote marks (there is nothing else to echo)."""
    kept = _PHRASE_OR_MARK.sub(lambda found: found.group(0) if len(found.group(0)) > 1 else " ", text)
    return " ".join(kept.split()) or " ".join(text.split())


def _authors(text: str) -> tuple[str, ...]:
    """The names of author: filters, tidied and checked (`bot.search.authors.typed`: SearchError for a name
    without a word, of only initials or too long), each once."""
    found = _AUTHOR.findall(text)
    if len(found) > MAX_AUTHORS:
        raise SearchError(f"Search for at most {MAX_AUTHORS} authors at once.")
    names: dict[tuple[str, ...], str] = {}
    for groups in found:
        name = authors.typed("".join(groups))
        names.setdefault(name.words, name.name)
    return tuple(names.values())


def _venues(text: str) -> tuple[str, ...]:
    """The venue: filters' words, lower-cased ("venue:ICML" -> "icml", venue:"NeurIPS 2025" -> "neurips
    2025"); a filter without a word is an error."""
    venues: list[str] = []
    for groups in _VENUE.findall(text):
        said = " ".join(w.lower() for w in _WORD.findall("".join(groups)))[:100]
        if not said:
            raise SearchError('venue: needs a name, for example venue:icml or venue:"neurips 2025".')
        if said not in venues:
            venues.append(said)
    if len(venues) > MAX_VENUES:
        raise SearchError(f"Search for at most {MAX_VENUES} venues at once.")
    return tuple(venues)


def _has(text: str) -> tuple[str, ...]:
    """What has: filters ask an item to hold (code, paper, venue); anything else is an error."""
    wanted: list[str] = []
    for value in _HAS.findall(text):
        found = HAS_ALIASES.get(value.lower().strip(".,;"))
        if found is None:
            raise SearchError(f"has: must be code, paper or venue, got {value[:20]!r}.")
        if found not in wanted:
            wanted.append(found)
    return tuple(wanted)


_Found = TypeVar("_Found", covariant=True)


class Searcher(Protocol[_Found]):
    """What `search` runs a query on: bot.search.index.SearchIndex (named by what it does, not imported,
    so the index can import this module and nothing here imports it back)."""

    def search(self, query: Query, limit: int) -> _Found: ...


def search(index: Searcher[_Found], text: str, limit: int = 10) -> _Found:
    """Ranked results for a user's query string (see bot.search.index for the ranking)."""
    if limit < 1 or limit > MAX_LIMIT:
        raise SearchError(f"limit must be between 1 and {MAX_LIMIT}.")
    return index.search(parse_query(text), limit)
