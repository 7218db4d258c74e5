"""What the bot says about a search, a summary and a related list: the one place their words are decided, for
every surface (Slack, the shell, the command line). Each surface only renders the lines: Slack and the shell
as mrkdwn (`SLACK`: user text escaped; the shell turns mrkdwn into text), the command line as text
(`TERMINAL`: nothing escaped, commands typed `mlresearch-bot …`).

    searched(TERMINAL, "captioning", "captoning")  -> "Searched for “captioning” (you typed “captoning”)"
    also_searched(SLACK, "LLM, large language model") -> "Also searched: “LLM” as large language model"
    results(TERMINAL, 4, 2, "llm")                -> "4 results for “llm” · the best 2"
    no_results(TERMINAL, "zzqx", missing=["zzqx"]) -> "No results for “zzqx”. No item holds “zzqx”. Try …"

One quote style everywhere: what a person typed is echoed in curly quotes (“…”), as Slack shows it; a
command or a topic to type is in backticks. Every line is informational: the command line prints them on
stdout (stderr is for errors only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from msgspec import Struct

from bot.blocks import counted, cut, escape
from bot.models import SearchFilters, SearchHit
from bot.search import glossary
from bot.search.highlight import WordMatcher, matcher_for_text
from bot.search.query import Query, parse_query, split_filters, without_open_quote
from bot.search.words import content

if TYPE_CHECKING:
    from bot.search.index import Found

Suggest = Callable[[Query, Sequence[str]], Sequence[str]]  # (query, words no item holds) -> topics to try

FALLBACK_TOPICS = ("vision", "privacy", "speech")  # suggested when the archive suggests none
BY_MEANING = "related by meaning: it does not use your words"
BY_MEANING_SOME = "related by meaning: it holds only some of your words"
NEAR_IN_MEANING = "Near in meaning"  # a related item that shares none of the item's rarer words


class Surface(Struct, frozen=True):
    """How a surface renders the shared words: how a command is typed there, and how user and feed text is
    made safe for its markup."""

    command: str  # "/mlresearch" (Slack and the shell) or "mlresearch-bot" (the command line)
    escape: Callable[[str], str]

    def quote(self, text: str, limit: int = 80) -> str:
        """What a person typed, echoed on one line, cut, in curly quotes (a text that is one quoted phrase in
        those quotes alone: “image captioning”, not “"image captioning"”; a quote mark left open is left
        out)."""
        text = without_open_quote(text)
        if len(text) > 2 and text[0] == text[-1] == '"' and text.count('"') == 2:
            text = text[1:-1]
        return "“" + self.escape(cut(text, limit)) + "”"

    def code(self, text: str, limit: int = 200) -> str:
        """Something to type, in backticks."""
        return f"`{self.escape(cut(text.replace('`', ''), limit))}`"

    def run(self, words: str = "") -> str:
        """A command to run there: `/mlresearch latest` in Slack, `mlresearch-bot latest` in a terminal."""
        return self.code(f"{self.command} {words}".strip())


SLACK = Surface("/mlresearch", escape)  # mrkdwn; the shell renders it as text
TERMINAL = Surface("mlresearch-bot", lambda text: text)


def corrected(searched: str, typed: str) -> str:
    """What was searched when a misspelt word was searched as typed right, both already quoted:
    "“captioning” (you typed “captoning”)" (a reply's opening and a thread's header alike)."""
    return f"{searched} (you typed {typed})"


def searched(surface: Surface, searched_for: str, typed: str | None = None) -> str:
    """The opening of a reply whose misspelt words were searched typed right, naming what was typed (so the
    lines under it need not echo the query): "Searched for “captioning” (you typed “captoning”)"."""
    said = surface.quote(searched_for)
    return f"Searched for {corrected(said, surface.quote(typed)) if typed else said}"


def also_searched(surface: Surface, expanded: str | None) -> str | None:
    """The glossary's forms a search used too: "Also searched: “LLM” as large language model" (None: none)."""
    also = glossary.also(expanded, lambda said: f"“{said}”")
    return f"Also searched: {surface.escape(cut(also, 300))}" if also else None


def results(surface: Surface, total: int, shown: int, text: str | None = None) -> str:
    """How many results earned a place, "for" the query `text` (None when the reply opened with what was
    searched), and how many are shown: "12 results for “privacy” · the best 5"."""
    total = max(total, shown)
    said = counted(total, "result") + (f" for {surface.quote(text)}" if text is not None else "")
    return said + (f" · the best {shown}" if total > shown else "")


def by_meaning(some: bool) -> str:
    """Under a result listed for its meaning: whether it holds some of the words (`some`) or none."""
    return BY_MEANING_SOME if some else BY_MEANING


def topics_to_try(surface: Surface, topics: Sequence[str]) -> str:
    """Suggested topics (`SearchIndex.suggest`), at most two, to type: "`automatic speech recognition`"."""
    return ", ".join(surface.code(topic, 60) for topic in topics[:2])


def no_results(surface: Surface, text: str | None, missing: Sequence[str] = (), topics: Sequence[str] = (),
               meant: Sequence[tuple[str, str]] = (), unfiltered: tuple[int, str, str] | None = None,
               filtered: bool = False) -> str:
    """Nothing earned a place: one line saying so ("for" the query `text`; None when the reply opened with
    what was searched), which words no item holds, which quoted phrase was most likely meant, and what to
    try: the words without their filters when that finds some (`unfiltered`: how many, the words, the
    filters); dropping a filter only when the query has one (`filtered`)."""
    echoed = f" for {surface.quote(text)}" if text is not None else ""
    if unfiltered is not None:
        return f"No results{echoed}. {without_filters(surface, 'search', *unfiltered)}"
    absent = f" No item holds {', '.join(surface.quote(w, 40) for w in missing[:3])}." if missing else ""
    absent += "".join(f" No item says {surface.quote(typed, 60)}: did you mean {surface.quote(right, 60)}?"
                      for typed, right in meant[:2])
    related = topics_to_try(surface, topics) or ", ".join(map(surface.code, FALLBACK_TOPICS))
    drop = " drop the since:, until:, type:, author:, venue: or has: filter," if filtered else ""
    return (f"No results{echoed}.{absent} Try fewer or broader words, or a related topic (e.g. {related}), "
            f"check the spelling,{drop} or see {surface.run('latest')}.")


def nothing_found(surface: Surface, typed: str, found: Found, suggest: Suggest,
                  newest_day: Callable[[], str | None]) -> str:
    """The one line of a search that listed nothing (`found`, of the query `typed`), as every surface says it:
    filters alone that match nothing (`no_filtered`, naming the newest item's day for a date filter), the
    words without their filters when that finds some, else `no_results` with the topics `suggest` gives. The
    query is not echoed when the reply opened with what was searched (`searched`)."""
    query = parse_query(typed)
    if not (query.terms or query.links):
        dated = query.filters.since or query.filters.until
        return no_filtered(surface, typed, newest_day() if dated else None)
    echoed = None if found.searched_for else (" ".join(query.links) or typed)  # a link as its address
    if found.unfiltered:  # the filters left nothing the words alone find
        return no_results(surface, echoed, unfiltered=(found.unfiltered, *_words_and_filters(typed, query)))
    topics = suggest(query, found.missing)
    return no_results(surface, echoed, found.missing, topics, found.meant,
                      filtered=query.filters != SearchFilters())


def nothing_to_summarize(surface: Surface, typed: str, found: Found, suggest: Suggest) -> str:
    """The one line of a summary that found nothing (`found`: its search of `typed`), as `nothing_found`."""
    query = parse_query(typed)
    said = " ".join(query.links) or typed  # a link as its address
    if found.unfiltered:
        return no_summary(surface, said, unfiltered=(found.unfiltered, *_words_and_filters(typed, query)))
    return no_summary(surface, said, suggest(query, found.missing))


def _words_and_filters(typed: str, query: Query) -> tuple[str, str]:
    """`typed`'s words and filters (`split_filters`), a link's words as its address."""
    words, filters = split_filters(typed)
    return " ".join(query.links) or words, filters


def result_matcher(found: Found, query: Query, hits: Sequence[SearchHit]) -> WordMatcher:
    """Which words of the results a reply marks as searched (in bold in Slack; "holds only some of your
    words" under a result found by meaning): the words that decided the search, not the filler around them
    ("what has apple published about privacy": privacy, not "what" or "Apple") nor the filler of a glossary
    form ("on" of "on the phone"); the last word typed comes last, as it may be a prefix."""
    forms = content(parse_query(found.expanded).terms) if found.expanded else []
    summaries = " ".join(hit.item.summary for hit in hits)
    return matcher_for_text(summaries, [*forms, *found.as_searched(query).content],
                            prefix_last=found.last_as_prefix(query))


def no_filtered(surface: Surface, text: str, newest_day: str | None) -> str:
    """A search of filters alone (since:, until:, type:, author:) that no item matches: one line saying so,
    and, for dates, when the newest item was published (`newest_day`)."""
    then = f" The newest item is from {newest_day}: {surface.run('latest')} lists the newest." \
        if newest_day else ""
    return f"No results for {surface.quote(text)}: no item matches the filter; widen or drop it.{then}"


def without_filters(surface: Surface, verb: str, count: int, words: str, filters: str) -> str:
    """What the words alone find when the filters left nothing, and the command to run: "Without
    since:2024-01-01 there are 2 results: `/mlresearch search federated learning`." """
    return (f"Without {surface.escape(cut(filters, 100))} there {'is' if count == 1 else 'are'} "
            f"{counted(count, 'result')}: {surface.run(f'{verb} {cut(words, 200)}')}.")


def no_summary(surface: Surface, topic: str, topics: Sequence[str] = (),
               unfiltered: tuple[int, str, str] | None = None) -> str:
    """Nothing to summarize: one line saying so, and what to try (`topics`: related ones items hold; or,
    `unfiltered`, what the words find without the filters, as `no_results` says it)."""
    if unfiltered is not None:
        alone = without_filters(surface, "summarize", *unfiltered)
        return f"Nothing in the archive is about {surface.quote(topic)}. {alone}"
    related = topics_to_try(surface, topics)
    also = f" or a related topic (e.g. {related})" if related else ""
    return (f"Nothing in the archive is about {surface.quote(topic)}, so there is nothing to summarize. "
            f"Try broader words{also}, or {surface.run('search')} to see what is there.")


def summary_about(surface: Surface, about: str, filters: str | None = None) -> str:
    """A summary's title: "What Apple ML Research says about “diffusion” (since 2025-01-01)"."""
    narrowed = f" ({surface.escape(cut(filters, 100))})" if filters else ""
    return f"What Apple ML Research says about {surface.quote(about)}{narrowed}"


def related_to(title: str) -> str:
    """A related list's heading; `title` as the surface shows an item's title (a link in Slack)."""
    return f"Related to {title}"


def shares(words: str, surface: Surface) -> str:
    """What a related item shares with the item ("Shares: Siri, wake word"), or that it is near in meaning
    alone."""
    return f"Shares: {surface.escape(cut(words, 200))}" if words else NEAR_IN_MEANING


def nothing_near(surface: Surface, title: str, topics: Sequence[str] = ()) -> str:
    """No item is close to `title`'s: one line, and what to search instead (`topics`: of the glossary, named
    in its title)."""
    example = f" (e.g. {topics_to_try(surface, topics)})" if topics else ""
    return (f"Nothing in the archive is near {surface.quote(title, 120)} yet: no other item is close enough "
            f"to it. Try {surface.run('search')} with words of its topic{example}.")
