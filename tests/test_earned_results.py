"""Every result earns its place (issue 19): it holds the words (both of two, a clear majority of more, every
quoted phrase) or is close in meaning above the floor, and is marked so; quotes mean the phrase; a corrected
word ranks as if typed right; a rare word's one item comes first; nothing clears the floor: one honest line.
On both stores, with the 72 real posts and with the feed's items."""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from collections.abc import Callable
from datetime import UTC, date, datetime

import pytest
from msgspec.structs import replace

from bot.answers import shown_items
from bot.ask import understand
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.conversation import Question, reply_for
from bot.errors import NothingFound, SearchError
from bot.models import Item
from bot.search import glossary, keywords
from bot.search import hybrid as blend
from bot.search.analysis import terms
from bot.search.index import UNCLOSED_NOTE, SearchIndex, absent
from bot.search.query import parse_query, search
from bot.search.related import find_item, related
from bot.search.words import form_of
from bot.store import Store
from bot.summarize import Summarizer
from tests.fakes.archive import corpus_index, corpus_items, make_item


def hybrid(store: Store) -> SearchIndex:
    return corpus_index(store)


def text_of(item: Item) -> str:
    return f"{item.title} {item.summary} {' '.join(item.authors)}"


def holds(item: Item, pattern: str) -> bool:
    return re.search(pattern, text_of(item), re.IGNORECASE) is not None


@pytest.mark.parametrize("meaning", [False, True])
def test_a_result_holds_the_word_or_is_marked_close_in_meaning(corpus: Store, meaning: bool) -> None:
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    found = search(index, "privacy", 100)
    assert found.hits and found.total == len(found.hits)
    for hit in found.hits:
        assert holds(hit.item, r"\bprivac|\bprivate") or (meaning and hit.by_meaning), hit.item.title
    # fewer than the archive: nothing pads the page
    assert len(found.hits) < 30


def test_two_words_are_both_held_and_more_words_by_a_clear_majority(corpus: Store) -> None:
    for hit in search(hybrid(corpus), "speech recognition", 100).hits:
        if not hit.by_meaning:
            assert holds(hit.item, r"\bspeech") and holds(hit.item, r"\brecogni") \
                or holds(hit.item, r"\bASR\b"), hit.item.title
    assert keywords.required(2) == 2 and keywords.required(3) == 2 and keywords.required(6) == 4


@pytest.mark.parametrize("meaning", [False, True])
def test_a_term_written_in_several_words_is_one_word_of_the_majority(corpus: Store, meaning: bool) -> None:
    """A long form of the glossary ("graph neural network", "language model", "time to first token") is one
    term: an item must hold all its words, and they count once. Until 2026-12-05 "neural networks" alone was
    two words of three: "graph neural networks" listed ten posts, none about graphs, and "can language models
    tell when they are wrong?" ten posts on language models that never say wrong."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    for asked in ("graph neural networks", "can language models tell when they are wrong?"):
        found = search(index, asked, 10)
        assert all(hit.by_meaning for hit in found.hits), [h.item.title for h in found.hits]
        assert len(found.hits) <= 2
    for hit in search(index, "time to first token", 10).hits:
        if not hit.by_meaning:
            assert holds(hit.item, r"\btime\b") and holds(hit.item, r"\bfirst\b") \
                and holds(hit.item, r"\btokens?\b") or holds(hit.item, r"\bTTFT\b"), hit.item.title
    kv = search(index, "kv cache compression", 10).hits
    assert [h.item.title.split(":")[0] for h in kv if not h.by_meaning] == ["EpiCache"]


def test_quotes_mean_the_phrase(corpus: Store) -> None:
    index = hybrid(corpus)
    found = search(index, '"image captioning"', 100)
    assert found.hits
    assert all(holds(h.item, r"image\W+caption") for h in found.hits)
    mixed = search(index, '"image captioning" reinforcement', 100)
    assert mixed.hits and all(holds(h.item, r"image\W+caption") for h in mixed.hits)
    assert mixed.hits[0].item.title.startswith("BalCapRL")
    assert search(index, '"captioning zebras"', 100).hits == []


def test_a_reply_names_a_quoted_phrase_in_one_pair_of_quotes(corpus: Store) -> None:
    """The reply says what was searched for as typed, quotes and all, but not inside a second pair."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    for typed, named in [('"image captioning"', "“image captioning”"),
                         ('"image captioning" reinforcement', '“"image captioning" reinforcement”'),
                         ('"zebra captioning"', "“zebra captioning”")]:
        asked = Invocation(text=f"search {typed}", team_id="T1", channel_id="C1", user_id="U1")
        reply = handle(asked, services)
        assert f" for {named}" in reply.text, reply.text
        assert '“"' not in reply.text.replace(named, "")


@pytest.mark.parametrize("meaning", [False, True])
def test_a_misspelt_quoted_phrase_finds_nothing_and_the_reply_says_what_was_meant(
    corpus: Store, meaning: bool
) -> None:
    """Quotes mean the phrase as typed, so a misspelt one is not searched as another; the answer names it."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    found = search(index, '"image captoning"', 100)
    assert found.hits == [] and found.meant == (("image captoning", "image captioning"),)
    assert search(index, '"zebra captioning"', 100).meant == ()
    assert search(index, '"image captioning"', 100).meant == ()
    reply = handle(Invocation(text='search "image captoning" type:paper', team_id="T1", channel_id="C1",
                              user_id="U1"), Services(store=corpus, settings=Settings(), index=index))
    assert reply.text.startswith("No results for")
    assert "No item says “image captoning”: did you mean “image captioning”?" in reply.text
    assert "\n" not in reply.text


def test_a_phrase_nobody_wrote_gets_the_usual_hint(corpus: Store) -> None:
    reply = handle(Invocation(text='search "zebra captioning"', team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    assert reply.text.startswith("No results for") and "Try fewer or broader words" in reply.text
    assert "\n" not in reply.text


@pytest.mark.parametrize("meaning", [False, True])
def test_a_corrected_word_ranks_as_if_typed_right(corpus: Store, meaning: bool) -> None:
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    typo, right = search(index, "captoning", 10), search(index, "captioning", 10)
    assert typo.searched_for == "captioning"
    assert [h.item.id for h in typo.hits] == [h.item.id for h in right.hits]
    assert typo.hits[0].item.title.startswith("BalCapRL")


@pytest.mark.parametrize("meaning", [False, True])
@pytest.mark.parametrize(("typed", "right", "expanded"), [
    ("speech recogniton", "speech recognition", "speech recognition, ASR"),  # its glossary forms too
    ("Gausian splatting", "Gaussian splatting", "Gaussian splatting, 3DGS"),
    ("federeted learning", "federated learning", "federated learning, FL"),  # stems part: "federet", "feder"
    ("homomorphic encyption", "homomorphic encryption", None),  # the word written nearest the one typed
])
def test_a_corrected_word_expands_and_ranks_exactly_as_if_typed_right(
        corpus: Store, meaning: bool, typed: str, right: str, expanded: str | None) -> None:
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    typo, good = search(index, typed, 10), search(index, right, 10)
    assert typo.searched_for == right.lower() and typo.expanded == expanded == good.expanded
    assert [(h.item.id, h.score, h.by_meaning) for h in typo.hits] == \
        [(h.item.id, h.score, h.by_meaning) for h in good.hits]
    assert typo.hits or (typed.startswith("Gausian") and not meaning)  # no post says "splatting"


def test_a_rare_word_finds_its_one_item_first(store: Store) -> None:
    """A marker word in one abstract of 56 items about the same thing: that item first, anything else only
    close in meaning (marked), never an unmarked neighbour."""
    day = datetime(2025, 3, 1, tzinfo=UTC)
    items = [Item(id=f"https://machinelearning.apple.com/research/k{n}", guid=f"k{n}",
                  title=f"Older Study {n} of Sparse Kernel Methods",
                  link=f"https://machinelearning.apple.com/research/k{n}",
                  summary="We study sparse kernel methods for regression on large data sets."
                          + (" The quillwort estimator is new." if n == 17 else ""),
                  published=day, kind="research") for n in range(56)]
    store.add_items(items)
    found = search(hybrid(store), "quillwort", 10)
    assert found.hits[0].item.id.endswith("/k17")
    assert all(h.by_meaning for h in found.hits[1:])


@pytest.mark.parametrize("meaning", [False, True])
def test_a_name_typed_whole_is_no_prefix_of_a_shorter_word(corpus: Store, meaning: bool) -> None:
    """A last word typed whole that the archive holds ("ToolSandbox", one post's name) stands for itself, not
    for a shorter word it starts with ("tool"): only the post holding it matches the words."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    for name, pattern in (("ToolSandbox", r"\bToolSandbox"), ("MobileCLIP", r"\bMobileCLIP"),
                          ("who wrote FastVLM?", r"\bFastVLM")):
        found = search(index, name, 10)
        assert found.hits and holds(found.hits[0].item, pattern), name
        assert all(holds(h.item, pattern) for h in found.hits if not h.by_meaning), name
    assert search(index, "normalizin", 10).hits  # a word cut short still stands for its stem's start


@pytest.mark.parametrize("meaning", [False, True])
def test_a_word_no_item_holds_is_no_form_of_a_shorter_word(corpus: Store, meaning: bool) -> None:
    """A last word no item holds, and no indexed word starts with, stands for a shorter start of it only when
    the rest of it could end a word ("normalizin", cut short, for "normal"): "blockchain" is no form of
    "block". Until 2026-12-06 a search for it listed the two posts that say "blocks" and "block-wise" as
    holding the word, and a summary quoted them."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    for typed in ("blockchain", "blockchains", "speechrecognition"):
        found = search(index, typed, 10)
        assert not found.hits and found.missing == (typed,), (typed, [h.item.title for h in found.hits])
    found = search(index, "normalizin", 10)
    assert found.hits and all(holds(h.item, r"\bnormali") for h in found.hits if not h.by_meaning)
    assert search(index, "photography", 10).hits  # "photograph" and a "y": a word's other form
    found = search(index, "privacy federatd", 10)  # misspelt past its stem ("feder"): still found
    assert found.hits and holds(found.hits[0].item, r"\bfederated")


@pytest.mark.parametrize("typed, start, may", [
    ("normalizin", "normal", True), ("normalizing", "normal", True), ("photography", "photograph", True),
    ("optimizatio", "optim", True), ("learnable", "learn", True), ("federatd", "feder", True),
    ("happin", "happi", True), ("blockchain", "block", False), ("speechrecognition", "speech", False),
    ("handwriting", "hand", False), ("blockchain", "chain", False),
])
def test_a_word_is_a_form_of_a_start_unless_the_rest_is_a_word_of_its_own(typed: str, start: str,
                                                                          may: bool) -> None:
    assert form_of(typed, start) is may


def test_a_summary_of_a_word_no_item_holds_quotes_nothing(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    asked = handle(Invocation(text="summarize blockchain", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert asked.text.startswith("Nothing in the archive is about “blockchain”"), asked.text
    assert "\n" not in asked.text


@pytest.mark.parametrize("typed, pattern, listed", [
    ("MobileCLIP", r"\bMobileCLIP", None), ("LoRA", r"\bLoRA\b", None),
    ("point cloud", r"\bpoint clouds?\b", None), ("POI", r"\bPOIs?\b", None),
    # "On Device Llama 3.1" matches the words: it holds two of the three terms, transformers and run
    ("how do transformers run on the Neural Engine?", r"Neural Engine",
     ["Deploying Transformers on the Apple Neural Engine", "On Device Llama 3.1 with Core ML"]),
])
def test_what_the_words_found_is_not_padded_with_items_unlike_it(corpus: Store, typed: str, pattern: str,
                                                                  listed: list[str] | None) -> None:
    """An item close in meaning alone must also be near what the words found (the query moved toward the
    best keyword hits' meaning): the post holding a name is not followed by one "related by meaning" about
    something else (MobileCLIP by a post on device-directed speech, LoRA by FastVLM, a point cloud by
    homomorphic encryption), as each was before."""
    found = search(hybrid(corpus), typed, 10)
    shown = [(hit.item.title, hit.by_meaning) for hit in found.hits]
    assert found.hits and holds(found.hits[0].item, pattern) and not any(by for _, by in shown), shown
    if listed is not None:
        assert [title for title, _ in shown] == listed
    else:
        assert all(holds(hit.item, pattern) for hit in found.hits), shown
    assert found.total == len(found.hits)


@pytest.mark.parametrize("meaning", [False, True])
def test_a_word_the_stemmer_joins_to_another_finds_only_its_own(corpus: Store, meaning: bool) -> None:
    """The English stemmer gives "accessibility" and "access" one term, "experiments" and "experience",
    "object" and "objective", "engineering" and "engine": a search for the first of each listed posts about
    access to data, user experience, training objectives and the Neural Engine among its matches. A typo of
    the word, or its start typed last, finds the word's own posts too."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    for typed, pattern in (("accessibility", r"\baccessib"), ("experiments", r"\bexperiment"),
                           ("object", r"\bobjects?\b"), ("engineering", r"\bengineer"),
                           ("accesibility", r"\baccessib"), ("accessib", r"\baccessib")):
        found = search(index, typed, 20)
        matched = [h.item for h in found.hits if not h.by_meaning]
        assert matched and all(holds(item, pattern) for item in matched), typed
    assert search(index, "accesibility", 5).searched_for == "accessibility"


def test_nothing_clears_the_floor_and_search_says_so_in_one_line(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    found = search(services.index, "zqxv wibblefrotz", 10)
    assert found.hits == [] and set(found.missing) == {"zqxv", "wibblefrotz"}
    reply = handle(Invocation(text="search zqxv wibblefrotz", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert "No item holds" in reply.text and "\n" not in reply.text


@pytest.mark.parametrize("asked", [
    "3d printing",
    "malware detection",
    "hey does apple have any research on forecasting stock prices with transformers?",
    "predicting battery degradation in electric vehicle battery packs",
    "pid controller tuning",
])
def test_a_query_about_what_no_item_covers_is_answered_with_nothing(corpus: Store, asked: str) -> None:
    """It names words no item holds (two of them, or one of at most three words): the nearest items by
    meaning are the best of a bad lot, shown only when very close (MISSING_FLOOR). Before, each showed one or
    two ("pid controller tuning", whose "pid" no item holds, a post on voice triggers until 2026-12-05)."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    found = search(services.index, asked, 10)
    assert found.hits == [] and found.total == 0 and found.missing
    reply = handle(Invocation(text=f"search {asked}", team_id="T1", channel_id="C1", user_id="U1"), services)
    assert reply.text.startswith("No results") and "No item holds" in reply.text and "\n" not in reply.text


def test_a_description_missing_an_everyday_word_still_finds_its_match_by_meaning(corpus: Store) -> None:
    """Since issue 54 the post holding its rarest words ("cutting", as cutting out, and "objects": two of
    four, not two thirds) comes first by them; the match by meaning is still listed."""
    found = search(hybrid(corpus), "cutting objects out of camera pictures", 10)
    assert found.missing == ("pictures",)
    first = found.hits[0]
    assert first.item.title.startswith("Fast Class-Agnostic Salient Object Segmentation")
    assert not first.by_meaning
    assert any(hit.by_meaning and hit.item.title.startswith("On-device Panoptic Segmentation")
               for hit in found.hits)


def test_no_result_suggests_a_related_topic_from_the_glossary(corpus: Store) -> None:
    services = Services(store=corpus, settings=Settings(), index=SearchIndex(corpus))
    reply = handle(Invocation(text="search recognition bandit", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert reply.text.startswith("No results") and "speech recognition" in reply.text


@pytest.mark.parametrize(("text", "meaning", "topic"), [
    ("search quantum computing", True, None),  # was `computer vision`, `human-computer interaction`
    ("search malware detection", True, None),  # was `voice activity detection`
    ("search pid controller tuning", True, None),  # was `supervised fine-tuning`
    ("search supply chain forecasting", True, None),  # was `chain of thought`
    ("search recognition zqxvw", False, None),  # was `automatic speech recognition`
    ("search ASR zqxvw", False, "automatic speech recognition"),  # the topic the words name, whole
])
def test_a_word_in_no_item_gets_no_topic_sharing_only_another_word(corpus: Store, text: str, meaning: bool,
                                                                    topic: str | None) -> None:
    """The topic suggested shared any word: "quantum computing" was offered computer vision. When a word is
    in no item, only a topic the words name whole is; else the reply's everyday examples."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    reply = handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=index))
    assert reply.text.startswith("No results") and "No item holds" in reply.text, reply.text
    suggested = re.findall(r"`([^`/]+)`", reply.text.split("a related topic (e.g. ")[1].split(")")[0])
    assert suggested == ([topic] if topic else ["vision", "privacy", "speech"]), reply.text


@pytest.mark.parametrize("text", ["search neural bandit homepod", "search recognition bandit"])
def test_a_suggested_topic_is_one_the_archive_holds(corpus: Store, text: str) -> None:
    """Of the glossary's 98 topics, 36 are in none of the 72 posts; until 2026-12-06 a reply with nothing
    could suggest one ("try multi-token prediction" for hotel bookings), whose search then listed only items
    near it in meaning. Now each suggested topic is one whose search lists items holding its words."""
    index = SearchIndex(corpus)  # by meaning, these find items: by their words, nothing
    query = parse_query(text.removeprefix("search "))
    reply = handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=index))
    assert reply.text.startswith("No results"), reply.text
    near = glossary.suggest(query.content, limit=glossary.SUGGEST_TRIED)
    held = [t for t in near if (best := search(index, t, 1).hits) and not best[0].by_meaning]
    assert set(near) - set(held)  # some near topics are in no item
    assert index.suggest(query.content) == held[:2]
    for topic in near:
        assert (f"`{topic}`" in reply.text) == (topic in held[:2]), (topic, reply.text)


def test_a_summary_of_nothing_suggests_a_topic_the_archive_holds(corpus: Store) -> None:
    """As a search does (until 2026-12-06 it said only "Try broader words")."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    asked = handle(Invocation(text="summarize ASR zqxvw", team_id="T1", channel_id="C1", user_id="U1"),
                   replace(services, index=SearchIndex(corpus)))  # by meaning, it finds ASR posts
    assert asked.text.startswith("Nothing in the archive is about “ASR zqxvw”"), asked.text
    assert "a related topic (e.g. `automatic speech recognition`" in asked.text and "\n" not in asked.text
    none = handle(Invocation(text="summarize hotel zqxvw", team_id="T1", channel_id="C1", user_id="U1"),
                  services)
    assert "Try broader words, or `/mlresearch search`" in none.text, none.text  # no topic near: none offered


def test_related_words_that_name_no_item_say_so(store: Store) -> None:
    store.add_items([item for item in corpus_items() if "siri" not in text_of(item).lower()])
    with pytest.raises(NothingFound) as caught:
        find_item(hybrid(store), "hey siri")
    assert "No item in the archive matches" in str(caught.value)


@pytest.mark.parametrize("title, near", [
    ("Personalized Hey Siri", ["Hey Siri: An On-device DNN-powered Voice Trigger"]),
    ("Progressive Voice Trigger Detection", ["Streaming On-Device Detection of Device Directed Speech",
                                             "Raise to Speak"]),
    ("Residual Context Diffusion", ["DiffuCoder"]),
])
def test_related_items_share_the_words_as_well_as_the_meaning(corpus: Store, title: str, near: list[str]
                                                              ) -> None:
    """The bundled model alone put a Siri voice-trigger paper's own kin below papers that share its meaning
    only loosely: the rarest words they share count too."""
    index = hybrid(corpus)
    item = find_item(index, title)
    found = [r.item.title for r in related(index, item, 3)]
    for start in near:
        assert any(t.startswith(start) for t in found), (start, found)


def test_what_related_items_share_is_their_subject_not_the_prose_of_abstracts(corpus: Store) -> None:
    """"Shares: notion, base, recent" said nothing of why a paper was listed beside an image-captioning
    paper: the words every abstract is written in are never what two papers share."""
    index = hybrid(corpus)
    prose = {"recent", "compared", "notion", "existing", "novel", "present", "believe", "performance"}
    for item in corpus_items():
        for near in related(index, item, 3, corpus):
            assert not {w.lower() for w in near.shares.split(", ")} & prose, (item.title, near.shares)
    bandwidth = find_item(index, "Bandwidth Embeddings")
    assert "bandwidth" in related(index, bandwidth, 1, corpus)[0].shares


def test_what_related_items_share_is_never_the_publishers_name(corpus: Store) -> None:
    """"Shares: Apple, models, privacy": every item of the archive is Apple's, so its name says nothing of why
    two items are alike; it was the word most often named as shared (in 60 of 360 related items)."""
    index = hybrid(corpus)
    for item in corpus_items():
        for near in related(index, item, 5, corpus):
            assert "apple" not in near.shares.lower().split(", "), (item.title, near.shares)


def test_what_related_items_share_is_never_a_word_most_items_hold(corpus: Store) -> None:
    """"Shares: models, datasets, training" and "training, model, robust" for MobileCLIP: 47 of the 72 posts
    say "model", so it says nothing of why two of them are alike. A word more than a third of the archive's
    items hold is never named as shared."""
    index = hybrid(corpus)
    held: Counter[str] = Counter(term for item in corpus_items() for term in set(terms(text_of(item))))
    common = {term for term, n in held.items() if n > len(corpus_items()) / 3}
    assert {"model", "learn", "user"} <= common  # the test's own premise
    named = listed = 0
    for item in corpus_items():
        for near in related(index, item, 5, corpus):
            words = [w for w in near.shares.split(", ") if w]
            named += len(words)
            listed += 1
            assert not {t for w in words for t in terms(w)} & common, (item.title, near.shares)
    assert listed > 50 and named > 2.5 * listed  # most related items still name three words


def test_what_related_items_share_is_written_as_the_abstract_writes_it_not_as_a_title_capitalizes_it(
        corpus: Store) -> None:
    """"Shares: Models, datasets, training": a word is named in lower case when the item ever writes it so,
    and keeps its capital when it always has one (Siri)."""
    index = hybrid(corpus)
    trigger = [r.shares for r in related(index, find_item(index, "Progressive Voice Trigger Detection"), 5,
                                         corpus)]
    assert "voice, detect, trigger" in trigger, trigger  # Raise to Speak's title says "Voice Assistants"
    siri = [r.shares for r in related(index, find_item(index, "Personalized Hey Siri"), 5, corpus)]
    assert all("Siri" in shared for shared in siri[:4]), siri


def test_related_lists_only_the_items_close_to_it(corpus: Store) -> None:
    """Related listed five items for every post however far they were: for the one post on learned image
    compression (no other is about it), a paper on synthetic images, MobileCLIP, FastVLM, a case study of
    federated learning and DiffuCoder. An item is listed only when it is close (bot.search.related: its
    similarity stands out from the archive's, and it shares the item's rarer words unless it stands out far);
    none is one line that says what to try."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    compression = find_item(services.index, "Practical Learned Image Compression")
    assert related(services.index, compression, 5, corpus) == []
    reply = handle(Invocation(text=f"related {compression.link}", team_id="T1", channel_id="C1",
                              user_id="U1"), services)
    assert reply.text == ("Nothing in the archive is near “What Matters in Practical Learned Image "
                          "Compression” yet: no other item is close enough to it. Try `/mlresearch search` "
                          "with words of its topic."), reply.text
    siri = related(services.index, find_item(services.index, "Personalized Hey Siri"), 5, corpus)
    assert 1 <= len(siri) < 5 and siri[0].item.title.startswith("Hey Siri: An On-device"), siri


def test_related_to_an_item_nothing_is_close_to_names_a_topic_of_its_title_to_search(corpus: Store) -> None:
    """When no item is close enough, a glossary topic the title names, which other items hold, is the next
    step: the differential-privacy posts, which the bundled model does not see as close to the one on iconic
    scenes."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    scenes = find_item(services.index, "Learning Iconic Scenes with Differential Privacy")
    reply = handle(Invocation(text=f"related {scenes.link}", team_id="T1", channel_id="C1", user_id="U1"),
                   services)
    assert reply.text.startswith("Nothing in the archive is near “Learning Iconic Scenes"), reply.text
    assert reply.text.endswith("with words of its topic (e.g. `differential privacy`)."), reply.text


def test_related_in_a_small_archive_lists_the_items_sharing_its_words(store: Store) -> None:
    """In an archive of a few items no similarity can stand far out from the others' (of three, never more
    than one standard deviation), so the floor by meaning listed nothing, even for two papers on one subject:
    there, the words they share decide, as without a model."""
    store.add_items([
        make_item("trigger", "Voice trigger detection on the watch",
                  "A low-power voice trigger detector wakes the assistant when the wearer says the trigger "
                  "phrase."),
        make_item("progressive", "Progressive voice trigger detection",
                  "Voice trigger detection in two stages: a small detector runs first, a larger one confirms "
                  "the trigger phrase."),
        make_item("codec", "Learned image compression",
                  "A neural image codec that spends fewer bytes on what people do not notice in photos."),
    ])
    index = hybrid(store)
    trigger = find_item(index, "Voice trigger detection on the watch")
    listed = [r.item.title for r in related(index, trigger, 5, store)]
    assert listed == ["Progressive voice trigger detection"], listed
    assert related(index, find_item(index, "Learned image compression"), 5, store) == []


def test_related_without_a_model_lists_the_items_sharing_its_rarer_words(corpus: Store) -> None:
    """Without search by meaning (a model that failed, or still loading), the nearest by words, and only those
    sharing enough of the item's rarer words: none for the post on image compression."""
    index = SearchIndex(corpus)
    for item in corpus_items()[:24]:
        found = related(index, item, 5, corpus)
        assert len(found) <= 5 and item.id not in [r.item.id for r in found], item.title
        assert all(r.shares for r in found), item.title
        assert [r.score for r in found] == sorted((r.score for r in found), reverse=True)
    assert related(index, find_item(index, "Practical Learned Image Compression"), 5, corpus) == []
    bandwidth = related(index, find_item(index, "Bandwidth Embeddings"), 5, corpus)
    assert bandwidth[0].item.title.startswith("Improving Neural Network Acoustic Models by Cross-bandwidth")


def test_a_summary_quotes_only_sentences_about_the_topic(corpus: Store) -> None:
    summary = Summarizer().summarize(hybrid(corpus), "alignment")
    assert summary is not None
    for bullet in summary.bullets:
        assert re.search(r"\balignment", bullet.text, re.IGNORECASE), bullet.text
        assert "aligns with our focus" not in bullet.text


def test_a_summary_never_quotes_a_sentence_about_the_texts_readers(corpus: Store) -> None:
    """The Hey Siri post says "It is aimed primarily at readers who know something of machine learning but
    less about speech recognition.": it names the topic and says nothing of it."""
    summary = Summarizer().summarize(hybrid(corpus), "speech recognition")
    assert summary is not None and len(summary.bullets) >= 3, summary
    for bullet in summary.bullets:
        assert "readers" not in bullet.text, bullet.text
        assert re.search(r"\bspeech recognition\b", bullet.text, re.IGNORECASE), bullet.text


def summarizing(corpus: Store) -> Callable[[str], Reply]:
    """`/mlresearch summarize <topic>` over the corpus, by meaning, as Slack would send it."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    return lambda topic: handle(Invocation(text=f"summarize {topic}", team_id="T1", channel_id="C1",
                                           user_id="U1"), services)


def test_a_summary_of_a_misspelt_topic_says_what_it_searched_for(corpus: Store) -> None:
    """As search does: the summary is of the topic typed right, and the reply says so."""
    summarize = summarizing(corpus)
    typo = summarize("speech recogniton")
    assert typo.text.startswith("Searched for “speech recognition” (you typed “speech recogniton”). "
                                "What Apple ML Research says about “speech recognition”:"), typo.text
    assert typo.blocks[0]["elements"][0]["text"] == \
        "Searched for “speech recognition” (you typed “speech recogniton”)"
    right = summarize("speech recognition").text
    assert not right.startswith("Searched for") and right.split(": ", 1)[1] == typo.text.split(": ", 1)[1]


@pytest.mark.parametrize(("command", "typed", "under"), [
    ("search captoning type:paper", "captoning", "4 results"),
    ("search captoning since:2024-01-01", "captoning", "1 result"),
    ("search speech recogniton zqxvw", "speech recogniton zqxvw", "No results. No item holds “zqxvw”."),
    ("summarize speech recogniton", "speech recogniton",
     "What Apple ML Research says about “speech recognition”"),
    ("summarize captoning since:2024-01-01", "captoning", "What Apple ML Research says about “captioning”"),
])
def test_a_corrected_reply_names_the_words_typed_once_and_then_speaks_of_the_words_searched(
        corpus: Store, command: str, typed: str, under: str) -> None:
    """The reply opened "Searched for “captioning”", then counted "4 results for “captoning type:paper”" (a
    summary: "What Apple ML Research says about “speech recogniton”"), as if the typo had been searched after
    all. Now the opening names both, once, and nothing under it echoes the typo. What was typed is the words
    that were corrected, without the filters (until 2026-12-06 "you typed “captoning type:paper”", beside
    "Searched for “captioning”")."""
    misspelt = next(word for word in typed.split() if word in ("captoning", "recogniton"))
    reply = handle(Invocation(text=command, team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    opening = reply.blocks[0]["elements"][0]["text"]
    assert opening.startswith("Searched for “") and opening.endswith(f" (you typed “{typed}”)"), opening
    assert reply.text.startswith(opening + ". ") and reply.text.count(misspelt) == 1, reply.text
    shown = json.dumps([b for b in reply.blocks[1:] if b["type"] != "actions"], ensure_ascii=False)
    assert under in shown and misspelt not in shown, shown  # (Share in channel re-runs the command as typed)


def test_a_summary_says_its_filters_beside_its_topic_not_as_words_of_it(corpus: Store) -> None:
    """It said *What Apple ML Research says about “privacy type:update”* (until 2026-12-06)."""
    summarize = summarizing(corpus)
    updates = summarize("privacy type:update")
    header = "What Apple ML Research says about “privacy” (type:update): "
    assert updates.text.startswith(header), updates.text
    cited = " ".join(str(block) for block in updates.blocks if "↳" in str(block))
    assert "/updates/" in cited and "/research/" not in cited
    dated = summarize("since:2025-01-01").text
    assert dated.startswith("What Apple ML Research says about “since:2025-01-01”: "), dated


def test_a_question_is_ranked_by_its_topic_not_its_question_words(corpus: Store) -> None:
    index = hybrid(corpus)
    asked = search(index, "what has apple published about differential privacy lately?", 5)
    plain = search(index, "differential privacy", 5)
    assert [h.item.id for h in asked.hits] == [h.item.id for h in plain.hits]
    assert parse_query("how does hey siri work?").content == ("hey", "siri")
    assert parse_query("hey siri").content == ("hey", "siri")


@pytest.mark.parametrize("asked", ["who wrote MobileCLIP?", "who are the authors of MobileCLIP?",
                                   "what has been written about MobileCLIP?"])
def test_asking_who_wrote_a_paper_finds_the_paper(corpus: Store, asked: str) -> None:
    """Words about authorship are question words: they never decide the ranking (no item says "wrote")."""
    found = search(hybrid(corpus), asked, 5)
    assert found.hits and found.hits[0].item.title.startswith("MobileCLIP"), asked
    assert parse_query(asked).content == ("mobileclip",)


@pytest.mark.parametrize(("asked", "held"), [
    ("is there a paper explaining how FastVLM works?", r"\bFastVLM"),
    ("what conferences did apple attend?", r"\bconference"),
    ("did apple release any datasets?", r"\bdataset"),
])
def test_a_questions_verbs_never_decide_its_ranking(corpus: Store, asked: str, held: str) -> None:
    """Explaining, attending, releasing: what a question asks of a topic, not the topic. Every result holds
    the topic's word, none is there by meaning alone for want of the verb."""
    found = search(hybrid(corpus), asked, 10)
    assert found.hits, asked
    assert all(holds(h.item, held) and not h.by_meaning for h in found.hits), asked


@pytest.mark.parametrize("text", ['"image captioning', 'image "" captioning', '"of the" captioning',
                                  "captioning " + "🙂" * 300, "“image captioning"])
def test_odd_quotes_and_long_queries_search_what_can_be_searched(corpus: Store, text: str) -> None:
    found = search(hybrid(corpus), text, 5)
    assert found.hits and found.hits[0].item.title.startswith("BalCapRL")


@pytest.mark.parametrize(("text", "echoed"), [
    ('"image captioning', "image captioning"), ("“image captioning", "image captioning"),
    ("image captioning”", "image captioning"), ('captioning " image', "captioning image"),
    ('"image captioning" "reinforcement', '"image captioning" reinforcement'),
])
def test_a_quote_left_open_searches_its_words_loose_and_says_so(corpus: Store, text: str,
                                                                echoed: str) -> None:
    """An open quote quotes nothing: its words are searched loose (the captioning paper first, as without the
    mark), one line says why they were not taken as a phrase, and the reply quotes the words without it."""
    found = search(hybrid(corpus), text, 5)
    assert found.hits and found.hits[0].item.title.startswith("BalCapRL")
    assert found.note == UNCLOSED_NOTE and "\n" not in found.note
    reply = handle(Invocation(text=f"search {text}", team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    said = [e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"]]
    assert said.count(UNCLOSED_NOTE) == 1 and reply.text.endswith(found.hits[-1].item.title)
    assert f"{len(found.hits)} results for “{echoed}”" in [line.split(" · ")[0] for line in said], said


def test_a_summary_of_a_topic_with_a_quote_left_open_says_so(corpus: Store) -> None:
    """As a search does: the summary quotes the words found loose, and one line says why."""
    summary = Summarizer().summarize(hybrid(corpus), '"image captioning')
    assert summary is not None and summary.note == UNCLOSED_NOTE
    assert Summarizer().summarize(hybrid(corpus), '"image captioning"').note is None  # type: ignore[union-attr]
    asked = Invocation(text='summarize "image captioning', team_id="T1", channel_id="C1", user_id="U1")
    reply = handle(asked, Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    said = [e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"]]
    assert said.count(UNCLOSED_NOTE) == 1
    assert "What Apple ML Research says about “image captioning”" in reply.text
    unknown = Invocation(text='summarize "zzqx qqvy', team_id="T1", channel_id="C1", user_id="U1")
    nothing = handle(unknown, Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    assert nothing.text.startswith("Nothing in the archive is about “zzqx qqvy”"), nothing.text


def test_results_found_without_a_word_no_item_holds_say_so(corpus: Store) -> None:
    """Two of three words are a clear majority, so "topological data analysis" lists items saying "data" and
    "analysis"; until 2026-12-06 nothing said that none says "topological", and a summary claimed to say what
    Apple's research says about it. Now one line says so, in a search, a summary and a question's answer."""
    said = "No item holds “topological”: these were found without it."
    index = hybrid(corpus)
    found = search(index, "topological data analysis", 5)
    assert found.hits and found.missing == ("topological",) and found.note == said
    again = search(index, "topological data analysis", 5)
    assert again.note == said and again.hits[0] is found.hits[0]  # the kept answer, and its line
    assert not any(holds(hit.item, r"topolog") for hit in found.hits)
    assert search(hybrid(corpus), "data analysis", 5).note is None  # every word is held: nothing to say
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    for text in ("search topological data analysis", "summarize topological data analysis"):
        reply = handle(Invocation(text=text, team_id="T1", channel_id="C1", user_id="U1"), services)
        lines = [e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"]]
        assert lines.count(said) == 1, (text, lines)
    summary = Summarizer().summarize(hybrid(corpus), "topological data analysis")
    assert summary is not None and summary.note == said
    two = "No item holds “quokka” or “wombat”: these were found without them."
    assert absent(("quokka", "wombat")) == two
    assert search(hybrid(corpus), "quokka wombat", 5).note is None  # nothing found: the usual one line


def test_a_term_no_item_holds_is_named_beside_what_was_found_without_it(corpus: Store) -> None:
    """Each of "graph", "neural" and "networks" is in some post, but no post holds the three together: the
    glossary's term is searched as one, so no item matched the words, and two posts on neural language models
    were listed *related by meaning* with nothing said. A term no item holds is named as a missing word is."""
    index = hybrid(corpus)
    words = ("graph", "neural", "network")
    assert all(any(holds(item, rf"\b{word}") for item in corpus_items()) for word in words)
    assert not any(holds(item, r"\bgraph\b.*\bneural\b") for item in corpus_items())
    said = "No item holds “graph neural networks”: these were found without it."
    for text in ("graph neural networks", "is there anything on graph neural networks for recommendations"):
        found = search(index, text, 5)
        assert found.missing == ("graph neural networks",) and found.note == said, text
        assert found.hits and all(hit.by_meaning for hit in found.hits)
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    asked = Invocation(text="search graph neural networks", team_id="T1", channel_id="C1", user_id="U1")
    reply = handle(asked, services)
    assert said in [e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"]]
    both = search(index, "graph neural networks zqxvw", 5)  # a word first, then the term
    assert both.missing == ("zqxvw", "graph neural networks")
    assert both.note == "No item holds “zqxvw” or “graph neural networks”: these were found without them."
    held = search(index, "large language models", 5)  # a term some item holds is not named
    assert held.hits and held.missing == () and held.note is None


@pytest.mark.parametrize("command", ["subscribe", "follow"])
def test_a_text_of_nothing_but_a_quote_mark_is_echoed_as_typed(corpus: Store, command: str) -> None:
    """Leaving the open mark out would echo nothing ("no words in “”"): the reply quotes what was typed."""
    asked = Invocation(text=f'{command} "', team_id="T1", channel_id="C1", user_id="U1")
    reply = handle(asked, Services(store=corpus, settings=Settings()))
    assert 'in “"”; nothing was changed' in reply.text, reply.text
    assert corpus.get_subscription("T1", "C1") is None


@pytest.mark.parametrize("text", ['"image captioning"', "“image captioning”", 'image "" captioning',
                                  'author:"Vasu" image captioning', 'author:"Vasu image captioning'])
def test_closed_quotes_and_an_author_filter_need_no_note(corpus: Store, text: str) -> None:
    assert search(hybrid(corpus), text, 5).note is None


@pytest.mark.parametrize("text", ["🙂🙂🙂", '""', '"of the"', "the of and"])
def test_nothing_searchable_is_one_line(corpus: Store, text: str) -> None:
    with pytest.raises(SearchError) as caught:
        search(hybrid(corpus), text, 5)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("text, said", [
    ('"of the" privacy', "“of the” is only common words, so I searched the rest."),
    ('privacy “the”', "“the” is only common words, so I searched the rest."),
    ('"of the" privacy "in a"', "“of the” and “in a” are only common words, so I searched the rest."),
])
def test_quotes_that_make_no_phrase_say_so_and_the_rest_is_searched(corpus: Store, text: str, said: str
                                                                    ) -> None:
    """A phrase of only common words is one line beside a search of what can be searched (until 2026-12-06
    it was dropped without a word, so a person could think the phrase had been searched). Empty quotes meant
    no phrase, and need no line (test_closed_quotes_and_an_author_filter_need_no_note)."""
    found = search(hybrid(corpus), text, 5)
    plain = search(hybrid(corpus), "privacy", 5)
    assert found.note == said and plain.note is None
    assert [h.item.id for h in found.hits] == [h.item.id for h in plain.hits] != []
    reply = handle(Invocation(text=f"search {text}", team_id="T1", channel_id="C1", user_id="U1"),
                   Services(store=corpus, settings=Settings(), index=hybrid(corpus)))
    assert [e["text"] for b in reply.blocks if b["type"] == "context" for e in b["elements"]].count(said) == 1
    assert parse_query('"" "of the" privacy "image captioning"').left_out == ("of the",)


def test_the_correction_cache_is_bounded(corpus: Store) -> None:
    index = SearchIndex(corpus)
    rng = random.Random(7)
    for _ in range(keywords.MAX_CORRECTIONS + 200):
        search(index, "".join(rng.choice(string.ascii_lowercase) for _ in range(9)), 1)
    assert len(index.current().corrections) <= keywords.MAX_CORRECTIONS


def test_a_date_only_search_lists_the_newest_first_with_a_count(corpus: Store) -> None:
    found = search(SearchIndex(corpus), "since:2025-01-01", 5)
    dated = sorted((i for i in corpus_items() if i.published >= datetime(2025, 1, 1, tzinfo=UTC)),
                   key=lambda i: (i.published, i.id), reverse=True)
    assert [h.item.published for h in found.hits] == [i.published for i in dated[:5]]
    assert found.total == len(dated)


@pytest.mark.parametrize("meaning", [False, True])
def test_when_the_filters_leave_nothing_the_reply_says_what_the_words_alone_find(corpus: Store, meaning: bool
                                                                                ) -> None:
    """`federated learning since:2024-01-01` said to drop "a since:, type: or author: filter" and suggested
    reinforcement learning from human feedback, the glossary topic sharing "learning" (until 2026-12-06)."""
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    services = Services(corpus, Settings(), index=index)
    alone = search(index, "federated learning", 10)
    assert alone.hits and search(index, "federated learning since:2024-01-01", 10).unfiltered == alone.total
    reply = handle(Invocation("search federated learning since:2024-01-01 type:paper", "T1", "C1", "U1"),
                   services)
    assert reply.text == ("No results for “federated learning since:2024-01-01 type:paper”. Without "
                          f"since:2024-01-01 type:paper there are {alone.total} results: `/mlresearch search "
                          "federated learning`.")
    summary = handle(Invocation("summarize federated learning since:2024-01-01", "T1", "C1", "U1"), services)
    assert summary.text == ("Nothing in the archive is about “federated learning since:2024-01-01”. Without "
                            f"since:2024-01-01 there are {alone.total} results: `/mlresearch summarize "
                            "federated learning`.")
    # words no item holds: nothing to find without the filter either, so the usual line
    assert search(index, "quantum since:2024-01-01", 10).unfiltered == 0
    absent = handle(Invocation("search quantum since:2024-01-01", "T1", "C1", "U1"), services)
    assert "Try fewer or broader words" in absent.text
    absent = handle(Invocation("summarize quantum since:2024-01-01", "T1", "C1", "U1"), services)
    assert "Try broader words" in absent.text


def test_filters_alone_that_match_nothing_say_so_and_when_the_newest_item_is_from(corpus: Store) -> None:
    """`since:2026-11-01` (a question's "from last month") was told to try broader words, a related topic and
    the spelling (until 2026-12-06)."""
    services = Services(corpus, Settings(), index=hybrid(corpus))
    newest = max(item.published for item in corpus_items()).date().isoformat()
    reply = handle(Invocation("search since:2026-11-01", "T1", "C1", "U1"), services)
    assert reply.text == ("No results for “since:2026-11-01”: no item matches the filter; widen or drop it. "
                          f"The newest item is from {newest}: `/mlresearch latest` lists the newest.")
    reply = handle(Invocation("search author:nobody type:paper", "T1", "C1", "U1"), services)
    assert reply.text == ("No results for “author:nobody type:paper”: no item matches the filter; widen or "
                          "drop it.")


def test_words_found_only_by_meaning_are_no_reason_to_drop_a_filter(corpus: Store) -> None:
    index = hybrid(corpus)
    alone = search(index, "gaussian splatting", 10)
    assert alone.hits and all(hit.by_meaning for hit in alone.hits)
    dated = search(index, "gaussian splatting since:2099-01-01", 10)
    assert not dated.hits and dated.unfiltered == 0


def test_a_question_for_the_latest_updates_or_a_years_papers_lists_those_newest_first(corpus: Store) -> None:
    services = Services(corpus, Settings(), index=SearchIndex(corpus))
    newest = sorted(corpus_items(), key=lambda i: i.published, reverse=True)
    updates = [i.published for i in newest if i.kind == "update"][:5]
    shown = shown_items(understand("what are the latest updates?", now=date(2026, 12, 6)), services)
    assert {i.kind for i in shown.items} == {"update"} and [i.published for i in shown.items] == updates
    of_2025 = [i.published for i in newest if i.published.year == 2025][:5]
    shown = shown_items(understand("the latest 2025 papers", now=date(2026, 12, 6)), services)
    assert [i.published for i in shown.items] == of_2025 and len(of_2025) == 3


@pytest.mark.parametrize(("asked", "shown"), [
    ("show me the latest 3 updates", 3),
    ("the latest 2 on privacy", 2),
    ("the newest 1 updates", 1),
    ("the latest 12 updates", 5),  # a search reply shows at most five; it says how many there are
    ("the latest updates", 5),
])
def test_a_count_asked_for_is_how_many_results_the_answer_shows(corpus: Store, asked: str, shown: int
                                                                ) -> None:
    """The count next to "latest" was dropped once the question became a search (until 2026-12-06): "show me
    the latest 3 updates" listed five."""
    services = Services(corpus, Settings(), index=SearchIndex(corpus))
    understood = understand(asked, now=date(2026, 12, 6))
    assert understood.action == "search"
    assert len(shown_items(understood, services).items) == shown  # the written answer's items
    question = Question("T1", "D0ALICE", "U0ALICE", asked, "1.0", "1.0", "Ev1")
    text, blocks = reply_for(understood, question, services)  # the listed answer
    listed = [b for b in blocks if b["type"] == "actions"]  # a Save / Related row per result
    assert len(listed) == shown
    if "updates" in asked:
        assert "5 results" in text and (shown == 5 or f"the best {shown}" in json.dumps(blocks))


@pytest.mark.parametrize(("typed", "meant"), [
    ("latest privacy", "search privacy"),
    ("latest 3 on privacy", "search privacy"),
    ("latest 2025 papers", "search since:2025-01-01 until:2025-12-31"),
    ("latest updates", "search type:update"),
])
def test_latest_with_words_names_the_command_that_answers_them(corpus: Store, typed: str, meant: str) -> None:
    services = Services(corpus, Settings(), index=SearchIndex(corpus))
    reply = handle(Invocation(typed, "T1", "C1", "U1"), services)
    assert reply.text.startswith("Usage: `/mlresearch latest [n]`")
    assert reply.text.endswith(f" Did you mean `/mlresearch {meant}`?")
    answer = handle(Invocation(meant, "T1", "C1", "U1"), services)
    assert answer.share_value == meant  # it answers: items, not another usage or nothing line
    for bare in ("latest 0", "latest 3 papers", "latest 1.5", "latest ²"):  # a count mistyped names no topic
        assert "Did you mean" not in handle(Invocation(bare, "T1", "C1", "U1"), services).text, bare


# --- held up by questions nobody tuned for (the tuning set's second half, 2026-12-04) --------------------


def test_a_clitic_is_not_a_word_of_its_own() -> None:
    question = parse_query("can siri tell my voice apart from someone else's?")
    assert question.content == ("siri", "voice", "apart")
    assert parse_query("what if you don't have much labeled data").content == ("labeled", "data")
    assert parse_query("Apple’s privacy").content == ("apple", "privacy")


@pytest.mark.parametrize("meaning", [False, True])
def test_a_common_word_is_never_taken_for_a_misspelling(corpus: Store, meaning: bool) -> None:
    index = hybrid(corpus) if meaning else SearchIndex(corpus)
    found = search(index, "siri voice apart", 10)
    assert found.searched_for is None  # "apart" is no typo of "part"
    assert search(index, "meaning of a whole document", 10).searched_for is None  # nor "whole" of "while"
    assert search(index, "captoning", 10).searched_for == "captioning"  # a typo still is one
    for inflected in ("lifting your watch to talk", "barely labeled data", "robots for farms"):
        assert search(index, inflected, 10).searched_for is None, inflected  # "life", "based", "far" before
    assert search(index, "software that can read text aloud", 10).searched_for is None  # a plain word's
    # English words the tokenizer does not hold whole, near words the archive holds: before the word list,
    # "accept", "battery", "analysis" and "academic" (758 of 6,000 common English words were "corrected")
    for english in ("making siri understand accents", "bacteria detection", "analyst reports", "academy"):
        assert search(index, english, 10).searched_for is None, english
    for name in ("memoji", "apps for visionos"):  # Apple's names: no typo of "memory", "vision"
        assert search(index, name, 10).searched_for is None, name


@pytest.mark.parametrize(("typed", "found"), [
    ("TTFT", ("FastVLM", "Exploring LLMs with MLX")),
    ("PPML", ("Apple Workshop on Privacy-Preserving Machine Learning 2024",
              "Apple Workshop on Privacy-Preserving Machine Learning & AI 2026")),
    ("CoT", ("Trained on Tokens",)),
])
def test_the_glossary_knows_the_fields_common_abbreviations(corpus: Store, typed: str, found: tuple) -> None:
    titles = [h.item.title for h in search(SearchIndex(corpus), typed, 5).hits]
    for start in found:
        assert any(t.startswith(start) for t in titles), (typed, start, titles)


@pytest.mark.parametrize(("typed", "first", "never"), [
    ("GAN", "Improving the Realism of Synthetic Images", "3D Gaussian"),  # no post says GAN or its long form
    ("CoT", "Trained on Tokens", None),  # on chain-of-thought (judged 2 of 3), before a passing mention (1)
])
def test_an_abbreviation_means_its_long_form_to_search_by_meaning(corpus: Store, typed: str, first: str,
                                                                  never: str | None) -> None:
    """The bundled model knows an abbreviation only by its pieces: until 2026-12-06 "GAN" listed a post on 3D
    Gaussian heads first, by meaning, before the GAN post. Its long forms are now what it means."""
    titles = [h.item.title for h in search(hybrid(corpus), typed, 5).hits]
    assert titles and titles[0].startswith(first), titles
    assert never is None or not any(never in title for title in titles), titles


def test_words_typed_together_rank_the_item_holding_them_together_first(corpus: Store) -> None:
    found = search(hybrid(corpus), "multi-task learning", 5)
    assert found.hits[0].item.title.startswith("A Multi-Task Neural Architecture")


def test_a_question_whose_words_no_item_holds_together_finds_the_one_holding_some_of_them(
        corpus: Store) -> None:
    asked = "does steering an llm toward or away from a concept make its writing worse?"
    found = search(hybrid(corpus), asked, 5)
    assert found.hits[0].item.title.startswith("On the Effectiveness-Fluency Trade-Off in LLM Conditioning")


def test_matches_by_meaning_alone_are_the_few_closest(corpus: Store) -> None:
    """Uncapped, three in four items shown as close in meaning alone were judged irrelevant (the tuning set):
    a reply shows at most MOST_BY_MEANING of them, one beside items that match the words."""
    alone = search(hybrid(corpus), "a speaker hearing you across a noisy room", 10)
    assert alone.hits and all(h.by_meaning for h in alone.hits)
    assert len(alone.hits) == alone.total <= blend.MOST_BY_MEANING
    beside = search(hybrid(corpus), "privacy", 100)
    assert sum(h.by_meaning for h in beside.hits) <= blend.MOST_BY_MEANING_MATCHED
    assert sum(not h.by_meaning for h in beside.hits) >= 10


def test_subscribing_to_a_misspelt_keyword_keeps_it_and_says_what_was_meant(corpus: Store) -> None:
    """A subscription keeps what was typed (it may name what the archive does not hold yet), and the reply
    says which keywords search would take for misspellings of words the archive holds."""
    services = Services(store=corpus, settings=Settings(), index=SearchIndex(corpus))
    reply = handle(Invocation(text='subscribe captoning privacy "speech recogniton" zqxvwy', team_id="T1",
                              channel_id="C1", user_id="U1"), services)
    sub = corpus.get_subscription("T1", "C1")
    assert sub is not None and sub.keywords == ("captoning", "privacy", "speech recogniton", "zqxvwy")
    assert "No archived item says `captoning`: did you mean `captioning`?" in reply.text
    assert "No archived item says `speech recogniton`: did you mean `speech recognition`?" in reply.text
    assert reply.text.count("did you mean") == 2 and "\n" not in reply.text


def shown_text(reply: Reply) -> str:
    parts = [part for block in reply.blocks for part in [block.get("text") or {}, *block.get("elements", [])]]
    return "\n".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))


def test_a_reply_bolds_the_words_searched_not_the_filler_around_them(corpus: Store) -> None:
    """The question words and filler a search leaves out are not in bold in its results either: "what has
    apple published about privacy" bolds privacy, not "what" or "Apple"; a filler word typed last is no
    prefix, and a content word typed last still is."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    reply = handle(Invocation(text="search what has apple published about privacy", team_id="T1",
                              channel_id="C1", user_id="U1"), services)
    text = shown_text(reply)
    assert "*privacy*" in text
    assert not re.search(r"\*(what|Apple|about|published)\*", text, re.IGNORECASE), text
    trailing = shown_text(handle(Invocation(text="search differential privacy with", team_id="T1",
                                            channel_id="C1", user_id="U1"), services))
    assert "*privacy*" in trailing
    assert not re.search(r"\*with(out)?\*", trailing, re.IGNORECASE), trailing
    prefix = shown_text(handle(Invocation(text="search privacy preserv", team_id="T1", channel_id="C1",
                                          user_id="U1"), services))
    assert re.search(r"\*preserv\w+\*", prefix, re.IGNORECASE), prefix


def test_a_result_by_meaning_says_whether_it_holds_some_of_the_words(corpus: Store) -> None:
    """An item close in meaning alone holds none of the words, or too few of them to match: its mark says
    which, so it never claims "it does not use your words" beside a text that holds some (in bold)."""
    services = Services(store=corpus, settings=Settings(), index=hybrid(corpus))
    some = shown_text(handle(Invocation(text="search cutting objects out of camera pictures", team_id="T1",
                                        channel_id="C1", user_id="U1"), services))
    assert "related by meaning: it holds only some of your words" in some
    assert "does not use your words" not in some
    # no post says VAE or variational autoencoder (GAN was the example until its meaning became its long form,
    # whose "generative" one of its results holds)
    none = shown_text(handle(Invocation(text="search VAE", team_id="T1", channel_id="C1", user_id="U1"),
                             services))
    assert "related by meaning: it does not use your words" in none
    assert "only some of your words" not in none
