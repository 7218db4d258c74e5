"""bot.ask.understand: plain questions to an action, a topic and date filters, with a fixed "now"."""

from __future__ import annotations

from datetime import date

import pytest

from bot.ask import MAX_TEXT, Understood, understand
from bot.search.query import MAX_QUERY_CHARS, parse_query

NOW = date(2026, 12, 3)  # a Thursday


def ask(text: str, previous: Understood | None = None) -> Understood:
    return understand(text, previous, now=NOW)


def test_mention_markup_filler_and_question_words_are_dropped() -> None:
    said = ask("<@U0BOT> what has Apple published on speech recognition?")
    assert said.action == "search"
    assert said.words == ("speech", "recognition")
    assert said.command() == "search speech recognition"


def test_links_keep_their_label_and_broadcasts_are_dropped() -> None:
    said = ask("<!here> <@U0BOT|bot> anything on <https://example.com/x|federated learning> <#C1|general>")
    assert said.words == ("federated", "learning")


@pytest.mark.parametrize(("phrase", "since", "until"), [
    ("this year", date(2026, 1, 1), None),
    ("last year", date(2025, 1, 1), date(2025, 12, 31)),
    ("this month", date(2026, 12, 1), None),
    ("last month", date(2026, 11, 1), date(2026, 11, 30)),
    ("this week", date(2026, 11, 30), None),
    ("last week", date(2026, 11, 23), date(2026, 11, 29)),
    ("in the past week", date(2026, 11, 26), None),
    ("in the last 3 months", date(2026, 9, 3), None),
    ("the past two days", date(2026, 12, 2), None),
    ("today", date(2026, 12, 3), None),
    ("yesterday", date(2026, 12, 2), date(2026, 12, 2)),
    ("since March", date(2026, 3, 1), None),
    ("since December", date(2026, 12, 1), None),
    ("in March", date(2026, 3, 1), date(2026, 3, 31)),
    ("in March 2025", date(2025, 3, 1), date(2025, 3, 31)),
    ("since March 2024", date(2024, 3, 1), None),
    ("in 2025", date(2025, 1, 1), date(2025, 12, 31)),
    ("since 2024", date(2024, 1, 1), None),
    ("since last year", date(2025, 1, 1), None),
    ("before 2024", None, date(2023, 12, 31)),
    ("until 2025-06-30", None, date(2025, 6, 30)),
    ("after 2025", date(2026, 1, 1), None),
])
def test_each_time_phrase_becomes_its_date_filter(
    phrase: str, since: date | None, until: date | None
) -> None:
    said = ask(f"what has Apple published on privacy {phrase}?")
    assert (said.since, said.until) == (since, until)
    assert said.words == ("privacy",)
    assert said.when == phrase
    query = parse_query(said.query)  # the search language reads what understand wrote
    assert (query.filters.since, query.filters.until) == (since, until)


@pytest.mark.parametrize("text", ["papers from ICML 2025", "what may come of diffusion", "2025 roadmap"])
def test_a_bare_year_or_month_name_is_a_word_not_a_filter(text: str) -> None:
    said = ask(text)
    assert said.since is None and said.until is None


def test_the_answer_says_what_it_searched_for() -> None:
    said = ask("what has Apple published on speech recognition this year?")
    assert said.describe() == "Searched for “speech recognition” published since 2026-01-01 (“this year”)."
    # Slack sends "<" and ">" typed by a person as entities; the echo escapes them again
    echoed = ask("<@U0BOT> anything about &lt;script&gt; tags").describe()
    assert echoed == "Searched for “&lt;script&gt; tags”."


@pytest.mark.parametrize(("text", "command"), [
    ("summarize diffusion models", "summarize diffusion models"),
    ("can you give me a summary of federated learning?", "summarize federated learning"),
    ("what's new?", "latest"),
    ("What is new", "latest"),
    ("latest 3", "latest 3"),
    ("the 50 newest papers", "latest 20"),
    # a count next to "latest" is how many, never a word of the topic (until 2026-12-06 "latest 3 on privacy"
    # searched "3 privacy" and listed Llama 3.1 first, and "the three newest papers" searched "three")
    ("the three newest papers", "latest 3"),
    ("show me the 2 most recent", "latest 2"),
    ("latest 3 on privacy", "search privacy"),
    ("what are the five newest papers on speech recognition?", "search speech recognition"),
    ("latest two-tower models", 'search "two-tower" models'),
    ("the latest 3.5 models", "search 3.5 models"),
    ("show me the latest 4. on privacy", "search privacy"),
    # a year next to "latest" is when, and "updates" next to it the kind (until 2026-12-06 "latest 2025
    # papers" listed the 20 newest of any year, and "the latest 3 updates" searched the word "updates")
    ("latest 2025 papers", "search since:2025-01-01 until:2025-12-31"),
    ("the newest 2024 updates", "search type:update since:2024-01-01 until:2024-12-31"),
    ("the latest 3 updates", "search type:update"),
    ("any of the latest updates on privacy?", "search privacy"),  # with a topic, "updates" is news
    ("updates to the latest models", "search updates models"),
    ("the latest 2 papers", "latest 2"),
    ("what's new in speech recognition", "search speech recognition"),
    ("what's new this month", "search since:2026-12-01"),
    ("search image captioning", "search image captioning"),
    ('"image captioning" type:paper', 'search type:paper "image captioning"'),
    ("how does on-device training work", 'search "on-device" training'),
])
def test_the_words_pick_the_action(text: str, command: str) -> None:
    assert ask(text).command() == command


@pytest.mark.parametrize("text", ["latest ²", "latest 1²", "the latest ³ papers"])
def test_a_digit_that_is_no_number_is_no_count(text: str) -> None:
    """`int("²")` raised: a question "latest ²" crashed (until 2026-12-06), and so did `/mlresearch latest ²`
    once its usage line read the words as a question would."""
    assert ask(text).count is None
    assert ask("latest ٣").command() == "latest 3"  # a decimal digit of another script is one


def test_a_year_next_to_latest_is_said_back_as_typed() -> None:
    """It said (“in 2025”), words nobody typed (until 2026-12-06)."""
    assert ask("the latest 2025 papers").describe().endswith(" 2025-01-01 to 2025-12-31 (“2025”).")
    assert ask("papers in 2025").describe().endswith(" (“in 2025”).")


@pytest.mark.parametrize("text", ["", "<@U0BOT>", "  <@U0BOT>  ?", "hi", "hello there!", "help", "summarize"])
def test_no_question_is_help(text: str) -> None:
    assert ask(text).action == "help"
    assert ask(text).command() == "help"


@pytest.mark.parametrize(("text", "word"), [
    ("subscribe speech", "subscribe"), ("/mlresearch status", "status"), ("Follow privacy", "follow"),
])
def test_settings_subcommands_are_left_to_the_slash_command(text: str, word: str) -> None:
    said = ask(text)
    assert said.action == "help" and said.slash == word
    assert ask("how do I subscribe to speech papers?").slash == ""  # a question that mentions it is asked
    assert ask("/mlresearch search diffusion").command() == "search diffusion"


def test_a_follow_up_keeps_the_topic_and_its_dates() -> None:
    first = ask("what has Apple published on speech recognition this year?")
    said = ask("only the on-device ones", first)
    assert said.followup
    assert said.command() == 'search speech recognition "on-device" since:2026-01-01'
    assert "keeping this thread's topic" in said.describe()


def test_a_follow_up_can_change_the_dates_the_topic_or_the_action() -> None:
    first = ask("speech recognition this year")
    last_year = "search speech recognition since:2025-01-01 until:2025-12-31"
    assert ask("and last year?", first).command() == last_year
    assert ask("what about vision?", first).command() == "search vision since:2026-01-01"
    assert ask("summarize that", first).command() == "summarize speech recognition since:2026-01-01"
    assert ask("and?", first).command() == "search speech recognition since:2026-01-01"


def test_a_follow_up_asking_for_a_count_keeps_it() -> None:
    """ "show me the latest 3" in a thread about privacy searched privacy again and showed five (until
    2026-12-06): the count is how many results the answer shows, as in a first question."""
    first = ask("anything on differential privacy?")
    said = ask("show me the latest 3", first)
    assert said.command() == "search differential privacy" and said.followup and said.count == 3
    assert ask("and?", first).count is None  # the same question again: as many as before


def test_a_follow_up_that_replaces_the_topic_says_so() -> None:
    first = ask("speech recognition this year")
    said = ask("what about vision?", first)
    assert said.followup and said.replaced
    assert said.describe() == \
        "Searched for “vision” published since 2026-01-01 (“this year”), in place of this thread's topic."
    assert not ask("just on-device", first).replaced
    assert not ask("what about it?", first).replaced  # no new words: the same topic again
    newest = ask("what about the newest ones?", first)  # "ones", like "it", is no topic
    assert newest.command() == "search speech recognition since:2026-01-01" and not newest.replaced
    assert ask("which items mention privacy?").words == ("privacy",)


ZEBRAFINCH = "what has apple published on zebrafinch song?"


@pytest.mark.parametrize("text", [
    "and on diffusion?", "And on diffusion?", "what about diffusion?", "how about diffusion?",
    "and what about diffusion?", "ok, how about diffusion", "what of diffusion?", "same for diffusion",
    "also diffusion?", "and diffusion?", "and about diffusion?",
])
def test_and_on_x_asks_about_x_in_place_of_the_threads_topic(text: str) -> None:
    """ "and on diffusion?" after the zebrafinch question searched "zebrafinch song diffusion" (until
    2026-12-06): a person saying it asks what was published on diffusion."""
    said = ask(text, ask(ZEBRAFINCH))
    assert said.command() == "search diffusion"
    assert said.followup and said.replaced
    assert said.describe() == "Searched for “diffusion”, in place of this thread's topic."


@pytest.mark.parametrize("text", [
    "only the diffusion ones", "just diffusion", "of those, which are about diffusion?",
    "which of those are about diffusion?", "which of these mention diffusion?",
    "and only the diffusion ones?", "among them, any on diffusion?", "those about diffusion",
    "narrow it down to diffusion", "but just diffusion", "Only diffusion",
])
def test_only_the_x_ones_narrows_the_threads_topic(text: str) -> None:
    said = ask(text, ask(ZEBRAFINCH))
    assert said.command() == "search zebrafinch song diffusion"
    assert said.followup and not said.replaced
    assert said.describe() == "Searched for “zebrafinch song diffusion”, keeping this thread's topic."


def test_a_follow_up_keeps_the_kind_of_question_whichever_way_it_goes() -> None:
    """A summary stays a summary and the thread's dates stay (a thread about "this year" asks "and on
    diffusion?" of this year too), unless the follow-up names new ones or says "ever"; a `type:` filter is
    the question's kind too, and a filter alone narrows."""
    summary = ask("summarize zebrafinch song this year")
    assert ask("and on diffusion?", summary).command() == "summarize diffusion since:2026-01-01"
    assert ask("only the diffusion ones", summary).command() == \
        "summarize zebrafinch song diffusion since:2026-01-01"
    assert ask("what about diffusion last year?", summary).command() == \
        "summarize diffusion since:2025-01-01 until:2025-12-31"
    ever = ask("and on diffusion, ever?", summary)
    assert ever.command() == "summarize diffusion" and ever.when == "" and ever.replaced
    assert ask("any time?", summary).command() == "summarize zebrafinch song"  # the topic again, undated
    assert ask("has Apple ever published on privacy?").command() == "search privacy"  # "ever" is no word
    assert ask("any time series work?").command() == "search time series"  # "any time" only at the end
    papers = ask("what has apple published on zebrafinch song type:paper")
    assert ask("and on diffusion?", papers).command() == "search type:paper diffusion"
    assert ask("what about diffusion type:update?", papers).command() == "search type:update diffusion"
    typed = ask("and type:paper?", ask(ZEBRAFINCH))
    assert typed.command() == "search zebrafinch song type:paper" and not typed.replaced
    again = ask("and?", ask("what about diffusion?", ask(ZEBRAFINCH)))
    assert again.command() == "search diffusion" and not again.replaced  # the same question, not a change
    updates = ask("the latest updates")
    assert ask("and on speech?", updates).command() == "search type:update speech"  # updates on speech


@pytest.mark.parametrize(("text", "words"), [
    ("any work on HE?", ("HE",)),  # homomorphic encryption, a glossary form meant in capitals only
    ("what about TTS", ("TTS",)),
    ("has Apple published on LLMs and MobileCLIP?", ("LLMs", "MobileCLIP")),
    ("Diffusion models?", ("diffusion", "models")),  # a capital that only starts a sentence is dropped
    ("Apple's work on Siri", ("siri",)),
    ("TTS and tts", ("TTS",)),
])
def test_an_abbreviation_or_a_name_keeps_its_case(text: str, words: tuple[str, ...]) -> None:
    assert ask(text).words == words


def test_a_follow_up_does_not_repeat_a_word_in_another_case() -> None:
    assert ask("and TTS?", ask("tts this year")).words == ("TTS",)  # once, as typed last


def test_a_new_question_in_the_thread_starts_afresh() -> None:
    first = ask("speech recognition this year")
    said = ask("how do diffusion models work?", first)
    assert said.command() == "search diffusion models" and not said.followup


def test_a_long_question_is_cut_to_what_search_takes_and_says_so() -> None:
    long = " ".join(f"topic{i}" for i in range(200)) + " this year"
    said = ask(long)
    assert said.cut and said.action == "search"
    assert len(said.query) <= MAX_QUERY_CHARS
    assert said.words[0] == "topic0" and said.since == date(2026, 1, 1)
    parse_query(said.query)  # accepted by the search
    assert "your question was long" in said.describe()
    one_word = ask("x" * 10_000)
    assert one_word.cut and len(one_word.query) <= MAX_QUERY_CHARS
    parse_query(one_word.query)


def test_a_follow_up_that_overflows_keeps_the_new_words() -> None:
    first = ask(" ".join(f"old{i}" for i in range(15)))
    said = ask("only the newer words", first)  # narrowing: the older words go first
    assert said.words[-2:] == ("newer", "words") and said.cut


def test_control_characters_and_huge_messages_are_read_safely() -> None:
    said = ask("privacy\x1b[31m \u202edifferential\x00" + " padding" * MAX_TEXT)
    assert said.words[:2] == ("privacy", "[31m") or said.words[0] == "privacy"
    assert all("\x1b" not in w and "\u202e" not in w for w in said.words)


def test_the_stored_form_reads_back() -> None:
    first = ask("summarize speech recognition in 2025")
    again = Understood.from_json(first.as_json())
    assert again is not None and again.command() == first.command()
    assert Understood.from_json("not json") is None and Understood.from_json('{"action": "drop"}') is None


def test_one_newest_item_is_said_in_the_singular() -> None:
    assert ask("latest 1").describe() == "The newest item."
    assert ask("latest 2").describe() == "The 2 newest items."
    assert ask("latest").describe() == "The newest items."
