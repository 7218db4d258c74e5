"""What people type in Slack's and the web's search boxes does what it does there. On both stores, with the
72 real posts; each failed before 2026-12-06:

- a word or quoted phrase typed after a minus is left out: `siri -privacy` lists the Siri posts that never
  say privacy (the minus was a separator, so it searched for Siri *and* privacy, and listed the posts it was
  typed to leave out); an abbreviation left out leaves out its long form too (`diffusion -LLM` listed posts
  saying "large language models");
- a star after the last word asks for every word it starts: `priv*` (the star was a separator, and *priv*
  a word no item holds); after fewer than three letters (`pr*`) it is one line asking for more;
- an underscore joins no words: `image_captioning` is `image captioning` (it was one word, and listed 13
  items, most of them only about images);
- `type:paper` or `type:update` alone lists the newest of that kind, as `since:` and `author:` alone do (it
  asked for words);
- a link pasted in lists the item at it (it searched the address's words, and said "No item holds “https”,
  “machinelearning”, “com”"); a link to no item searches the words of its address and says so;
- without a star, a last word the archive holds is that word alone: `vision pro` lists the one post saying
  Apple Vision Pro first (it listed CVPR 2026, which says "proud", ahead of it)."""

from __future__ import annotations

import re
from datetime import date

import pytest

from bot.ask import understand
from bot.commands import Invocation, Services, handle
from bot.config import Settings
from bot.errors import NothingFound, SearchError
from bot.models import Item
from bot.search.index import Found
from bot.search.query import Query, parse_query, search
from bot.store import Store
from bot.summarize import Summarizer
from tests.fakes.archive import corpus_index, corpus_items


def holds(item: Item, pattern: str) -> bool:
    text = f"{item.title} {item.summary} {' '.join(item.authors)}"
    return re.search(pattern, text, re.IGNORECASE) is not None


def titles(found: Found) -> list[str]:
    return [hit.item.title for hit in found.hits]


def test_a_word_or_phrase_after_a_minus_is_left_out_and_not_searched_for() -> None:
    query = parse_query('siri -privacy -"differential privacy" -on-device -“hey siri”')
    assert query.terms == ("siri",)
    assert query.without == (("privacy",), ("differential", "privacy"), ("on", "device"), ("hey", "siri"))
    assert "privacy" not in query.text and query.phrases == ()
    # a hyphen inside a word, a minus standing alone and a minus inside quotes are no minus
    assert parse_query("state-of-the-art siri - privacy").without == ()
    quoted = parse_query('"siri -privacy" voice')
    assert quoted.without == () and quoted.phrases == (("siri", "privacy"),)
    # a filter with only words to leave out lists the filter's items without them
    dated = parse_query("since:2025-01-01 -privacy")
    assert dated.terms == () and dated.without == (("privacy",),)


def test_only_words_to_leave_out_is_one_line_asking_for_words() -> None:
    with pytest.raises(SearchError) as raised:
        parse_query('-privacy -"hey siri"')
    assert str(raised.value) == "Type some words to search for beside those to leave out, for example: " \
                                "search siri -privacy"


@pytest.mark.parametrize("meaning", [False, True])
def test_no_result_holds_a_word_typed_after_a_minus(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    everything = search(index, "siri", 100)
    assert any(holds(hit.item, r"\bprivacy\b") for hit in everything.hits)  # there is something to leave out
    left = search(index, "siri -privacy", 100)
    assert left.hits and not any(holds(hit.item, r"\bprivacy\b") for hit in left.hits)
    assert left.total == len(left.hits)
    if not meaning:  # the same order, less what holds the word
        assert titles(left) == [t for hit in everything.hits if not holds(hit.item, r"\bprivacy\b")
                                for t in [hit.item.title]]
    phrase = search(index, 'siri -"hey siri"', 100)
    # only the phrase is left out: every item found holds "siri", so leaving out its words would leave none
    assert phrase.hits and not any(holds(hit.item, r"\bhey\W+siri\b") for hit in phrase.hits)


@pytest.mark.parametrize("meaning", [False, True])
def test_an_abbreviation_after_a_minus_leaves_out_its_long_form_too(corpus: Store, meaning: bool) -> None:
    """The glossary works both ways after a minus as before it: `diffusion -LLM` listed DiffuCoder and the
    Residual Context Diffusion post, which say "large language models" (until 2026-12-06)."""
    index = corpus_index(corpus, meaning)
    llm = r"\bLLMs?\b|large language models?"
    assert sum(holds(hit.item, llm) for hit in search(index, "diffusion", 100).hits) >= 2
    for left_out in ("-LLM", "-llms", '-"large language models"'):
        left = search(index, f"diffusion {left_out}", 100)
        assert left.hits and not any(holds(hit.item, llm) for hit in left.hits), left_out
    # only a whole form stands for the abbreviation: "-language" leaves the LLM post that never says it
    assert [hit.item.title for hit in search(index, "mlx -language", 100).hits][:1] == \
        ["Exploring LLMs with MLX and the Neural Accelerators in the M5 GPU"]
    speech = search(index, 'siri -"speech recognition"', 100)
    assert speech.hits and not any(holds(hit.item, r"\bASR\b|speech recognition") for hit in speech.hits)


def test_an_item_close_in_meaning_alone_is_left_out_too(corpus: Store) -> None:
    """Leaving a phrase out of the words' search alone is not enough: the Hey Siri post is so close in meaning
    to the other Siri posts that `siri -"hey siri"` listed it last, "related by meaning"."""
    found = search(corpus_index(corpus, True), 'siri -"hey siri"', 100)
    assert found.hits and not any(holds(hit.item, r"\bhey\W+siri\b") for hit in found.hits)
    assert found.total == len(found.hits)


@pytest.mark.parametrize("meaning", [False, True])
def test_a_filter_with_words_to_leave_out_lists_its_newest_items_without_them(corpus: Store, meaning: bool
                                                                              ) -> None:
    index = corpus_index(corpus, meaning)
    dated = search(index, "since:2024-01-01", 100)
    left = search(index, "since:2024-01-01 -privacy", 100)
    assert any(holds(hit.item, r"\bprivacy\b") for hit in dated.hits)
    assert titles(left) == [hit.item.title for hit in dated.hits if not holds(hit.item, r"\bprivacy\b")]


def test_a_corrected_search_says_what_it_left_out(corpus: Store) -> None:
    found = search(corpus_index(corpus, True), "captoning -mobileclip", 100)
    assert found.searched_for == "captioning -mobileclip"
    assert found.hits and not any(holds(hit.item, r"mobileclip") for hit in found.hits)
    assert search(corpus_index(corpus, True), 'captoning -"neural engine"', 100).searched_for == \
        'captioning -"neural engine"'


def test_a_slack_search_leaves_the_word_out_and_only_a_minus_is_one_line(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=corpus_index(corpus, True))
    reply = handle(Invocation(text="search siri -privacy", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert "Personalized Hey Siri" in reply.text and "Differential Privacy" not in reply.text
    assert "Understanding Aggregate Trends" not in reply.text
    alone = handle(Invocation(text="search -privacy", team_id="T1", channel_id="C1", user_id="U1"), services)
    assert "\n" not in alone.text and "beside those to leave out" in alone.text


def test_a_question_keeps_what_it_leaves_out() -> None:
    """A question asked in plain words (a mention, a DM, the shell) leaves out what follows a minus too; a
    quoted phrase after one was searched as the phrase until 2026-12-06."""
    said = understand('what has Apple published on siri -privacy -"hey siri"?', None, now=date(2026, 12, 6))
    asked: Query = parse_query(said.query)
    assert asked.terms == ("siri",) and set(asked.without) == {("privacy",), ("hey", "siri")}


@pytest.mark.parametrize("meaning", [False, True])
def test_a_star_after_the_last_word_asks_for_every_word_it_starts(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    starred = search(index, "priv*", 100)
    assert starred.hits and starred.missing == ()
    assert all(holds(hit.item, r"\bpriv") for hit in starred.hits if not hit.by_meaning)
    assert {"Learning with Privacy at Scale", "Learning Iconic Scenes with Differential Privacy"} \
        <= set(titles(starred))
    assert any(holds(hit.item, r"\bprivate\b") for hit in starred.hits)
    assert parse_query("priv* ").prefix_last and parse_query("SER*").prefix_last  # an abbreviation too
    assert not parse_query("SER").prefix_last


@pytest.mark.parametrize("meaning", [False, True])
def test_a_star_after_fewer_than_three_letters_is_one_line(corpus: Store, meaning: bool) -> None:
    """`pr*` said "No item holds “pr”" (until 2026-12-06): the star asked for nothing, and *pr* was searched
    as a word."""
    for typed in ("pr*", "siri pr*", "siri p**"):
        with pytest.raises(SearchError) as raised:
            search(corpus_index(corpus, meaning), typed, 10)
        short = typed.split()[-1].rstrip("*")
        assert str(raised.value) == f"Type at least 3 letters before a star ({short}* is too short), for " \
                                    "example: search priv*"
    services = Services(store=corpus, settings=Settings(), index=corpus_index(corpus, meaning))
    reply = handle(Invocation(text="search pr*", team_id="T1", channel_id="C1", user_id="U1"), services)
    assert reply.text.startswith("Type at least 3 letters before a star") and "\n" not in reply.text


@pytest.mark.parametrize("meaning", [False, True])
def test_an_underscore_joins_no_words(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    assert parse_query("image_captioning").terms == ("image", "captioning")
    assert titles(search(index, "image_captioning", 100)) == titles(search(index, "image captioning", 100))


@pytest.mark.parametrize("meaning", [False, True])
def test_a_type_alone_lists_the_newest_of_that_kind(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    for typed, kind in (("type:update", "update"), ("type:paper", "research")):
        found = search(index, typed, 5)
        made = sorted((i for i in corpus_items() if i.kind == kind), key=lambda i: (i.published, i.id),
                      reverse=True)
        assert [hit.item.published for hit in found.hits] == [i.published for i in made[:5]]
        assert all(hit.item.kind == kind for hit in found.hits)
        assert found.total == len(made)


EPICACHE = "https://machinelearning.apple.com/research/epicache"
PPML = "https://machinelearning.apple.com/updates/ppml-2026"


@pytest.mark.parametrize("meaning", [False, True])
def test_a_pasted_link_lists_the_item_at_it(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    for typed in (EPICACHE, f" {EPICACHE}/?utm_source=slack ", f"<{EPICACHE}|EpiCache>", f"<{EPICACHE}>"):
        found = search(index, typed, 10)
        assert [hit.item.link for hit in found.hits] == [EPICACHE] and found.total == 1
        assert not found.hits[0].by_meaning and found.note is None
    both = search(index, f"{EPICACHE} <{PPML}> {EPICACHE}", 10)
    assert [hit.item.link for hit in both.hits] == [EPICACHE, PPML] and both.total == 2


@pytest.mark.parametrize("meaning", [False, True])
def test_a_link_to_no_item_searches_the_words_of_its_address(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    found = search(index, "https://machinelearning.apple.com/research/image-captioning", 10)
    assert found.note == "That link is not in the archive; searched the words of its address: image " \
                         "captioning"
    assert titles(found) == titles(search(index, "image captioning", 10)) != []
    for nothing in ("https://example.com/", "https://arxiv.org/abs/2401.12345", "https://example.com/a/"):
        with pytest.raises(NothingFound) as raised:  # no words in the address, or only common ones
            search(index, nothing, 10)
        assert str(raised.value) == f"That link is not in the archive: {nothing.rstrip('/')}"


@pytest.mark.parametrize("meaning", [False, True])
def test_a_link_among_words_is_no_word_of_the_search(corpus: Store, meaning: bool) -> None:
    index = corpus_index(corpus, meaning)
    among = search(index, f"privacy {EPICACHE}", 10)
    assert titles(among) == titles(search(index, "privacy", 10)) and among.missing == ()


@pytest.mark.parametrize("meaning", [False, True])
def test_a_filter_beside_a_link_applies_to_the_item_at_it(corpus: Store, meaning: bool) -> None:
    """`<link> type:paper` dropped the link and listed every paper (67 results); a summary of `<link>
    type:update` quoted the newest update, and `related` compared against it."""
    index = corpus_index(corpus, meaning)
    for typed in (f"{EPICACHE} type:paper", f"<{EPICACHE}> since:2024-01-01", f"type:paper <{EPICACHE}|x>"):
        found = search(index, typed, 10)
        assert [hit.item.link for hit in found.hits] == [EPICACHE] and found.total == 1, typed
    for typed in (f"<{EPICACHE}> type:update", f"{EPICACHE} until:2017-01-01"):
        found = search(index, typed, 10)
        assert not found.hits and found.total == 0 and found.unfiltered == 1, typed
    services = Services(store=corpus, settings=Settings(), index=index)

    def ask(text: str) -> str:
        return handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services).text

    assert ask(f"search <{EPICACHE}> type:update") == (
        f"No results for “{EPICACHE}”. Without type:update there is 1 result: "
        f"`/mlresearch search {EPICACHE}`.")
    assert ask(f"summarize <{EPICACHE}> type:update") == (
        f"Nothing in the archive is about “{EPICACHE}”. Without type:update there is 1 result: "
        f"`/mlresearch summarize {EPICACHE}`.")
    assert ask(f"summarize <{EPICACHE}> type:paper").startswith(
        "What Apple ML Research says about “EpiCache: Episodic KV Cache")
    assert "Related to" not in ask(f"related <{EPICACHE}> type:update")


def test_a_slack_search_of_a_link_shows_its_item(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=corpus_index(corpus, True))
    reply = handle(Invocation(text=f"search <{EPICACHE}>", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert reply.text.startswith(f"1 result for “{EPICACHE}”: EpiCache: Episodic KV Cache"), reply.text
    gone = handle(Invocation(text="search https://example.com/a/", team_id="T1", channel_id="C1",
                             user_id="U1"), services)
    assert gone.text == "That link is not in the archive: https://example.com/a"


def test_a_question_with_a_pasted_link_asks_about_the_item_at_it(corpus: Store) -> None:
    """Slack sends a link in a message as <https://…>, which a question dropped: a DM of a post's link, or
    "summarize <link>", got the help (until 2026-12-06)."""
    index = corpus_index(corpus, True)
    for said in (f"<@U0BOT> what is this <{EPICACHE}> about?", f"<{EPICACHE}>", f"summarize <{EPICACHE}>",
                 f"is {EPICACHE}?"):
        understood = understand(said, None, now=date(2026, 12, 6))
        assert understood.action == ("summarize" if said.startswith("summarize") else "search")
        found = search(index, understood.query, 10)
        assert [hit.item.link for hit in found.hits] == [EPICACHE]
    labelled = understand(f"anything on <{EPICACHE}|federated learning>", None, now=date(2026, 12, 6))
    assert labelled.words == ("federated", "learning")  # a link with a label is its label, as it was


def test_a_summary_of_a_link_is_that_items_own_titled_by_it(corpus: Store) -> None:
    """`summarize <link>` quoted the one sentence of the item holding most of its address's words (EpiCache's
    first), under the address, and a link to no item was said back as `&lt;https://…&gt;` (until
    2026-12-06)."""
    services = Services(store=corpus, settings=Settings(), index=corpus_index(corpus, True))
    reply = handle(Invocation(text=f"summarize <{EPICACHE}>", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    epicache = next(item for item in corpus_items() if item.link == EPICACHE)
    assert reply.text.startswith("What Apple ML Research says about “EpiCache: Episodic KV Cache"), reply.text
    quoted = reply.text.split("”: ", 1)[1]
    assert quoted.startswith(epicache.summary.split(". ")[0]) and quoted.count(". ") >= 2
    cited = [block for block in reply.blocks if "↳" in str(block)]
    assert len(cited) >= 3 and all(EPICACHE in str(block) for block in cited)
    hey_siri = "https://machinelearning.apple.com/research/hey-siri"
    summary = Summarizer().summarize(services.index, hey_siri)
    assert summary is not None and [item.link for item in summary.items] == [hey_siri]
    assert summary.bullets[0].text == "The “Hey Siri” feature allows users to invoke Siri hands-free."
    assert any(bullet.text.startswith("This article") for bullet in summary.bullets)  # what the post does
    gone = handle(Invocation(text="summarize <https://example.com/nothing-here>", team_id="T1",
                             channel_id="C1", user_id="U1"), services)
    assert "“https://example.com/nothing-here”" in gone.text and "&lt;" not in gone.text


VOICE_TRIGGER = "Voice Trigger System for Siri"  # the one post saying "Apple Vision Pro"


@pytest.mark.parametrize("meaning", [False, True])
def test_a_word_typed_last_that_the_archive_holds_is_meant_whole(corpus: Store, meaning: bool) -> None:
    """`vision pro` listed CVPR 2026 first (it says "vision" and "proud") and ICML 2025, ahead of the one post
    saying Apple Vision Pro (until 2026-12-06): the last word typed stood for every word it starts. A start
    typed on purpose still is one: a star after it, or a start no item holds as a word (`capt`)."""
    index = corpus_index(corpus, meaning)
    found = search(index, "vision pro", 100)
    assert titles(found)[0] == VOICE_TRIGGER and found.whole
    by_words = [hit.item for hit in found.hits if not hit.by_meaning]
    assert by_words and all(holds(item, r"\bpro\b") for item in by_words)
    starred = search(index, "vision pro*", 100)
    assert any(holds(hit.item, r"\bproud\b") for hit in starred.hits if not hit.by_meaning)
    assert not starred.whole
    cut = search(index, "capt", 100)
    assert not cut.whole and any(holds(hit.item, r"\bcaptioning\b") for hit in cut.hits if not hit.by_meaning)


def test_a_word_meant_whole_bolds_and_quotes_no_word_it_starts(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=corpus_index(corpus, True))
    reply = handle(Invocation(text="search vision pro", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    shown = " ".join(str(block) for block in reply.blocks)
    assert reply.text.startswith(f"2 results for “vision pro”: {VOICE_TRIGGER}") and "*Pro*" in shown
    assert not re.search(r"\*pro\w+\*", shown, re.IGNORECASE), shown
    summary = handle(Invocation(text="summarize vision pro", team_id="T1", channel_id="C1", user_id="U1"),
                     services)
    assert "Apple Vision Pro" in summary.text and not re.search(r"\bpro\w+", summary.text, re.IGNORECASE)
