"""The reply builders' blocks, escaping and highlighting."""

from __future__ import annotations

import re
import threading

import pytest
from msgspec.structs import replace
from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from bot import blocks, views
from bot.blocks import cut, escape
from bot.search import highlight
from bot.search.highlight import highlighted_snippet, inert, matcher_for_text, matching_words, word_matcher
from tests.fakes.archive import make_item


def test_references_only_for_real_ids() -> None:
    assert views.channel_ref("C0123ABC") == "<#C0123ABC>"
    assert views.channel_ref("C1|x><!channel") == "this channel"
    assert views.user_ref("U0AB") == "<@U0AB>" and views.user_ref("!here") == "someone"


def test_matching_agrees_with_search_stemming_and_prefix() -> None:
    assert matching_words(["Captions", "captioning", "capital", "cap"], ["caption"]) == {
        "captions",
        "captioning",
    }
    assert matching_words(["captioning"], ["capt"], prefix_last=True) == {"captioning"}
    assert not matching_words(["captioning"], ["capt"], prefix_last=False)


def test_highlighted_snippet_bolds_words_never_entities() -> None:
    is_match = word_matcher(["amp", "gt", "b"])
    out = highlighted_snippet("a & b <b> amp gt; *x* `y`", is_match)
    assert out == "a &amp; *b* &lt;*b*&gt; *amp* *gt*; ∗x∗ ˋyˋ"
    assert re.findall(r"&\w*;?", out) == ["&amp;", "&lt;", "&gt;"]  # every entity whole


def test_highlighted_snippet_starts_near_a_late_match_and_cuts() -> None:
    text = "filler " * 80 + "the captioning result " + "tail " * 80
    out = highlighted_snippet(text, word_matcher(["captioning"]), limit=120)
    assert out.startswith("…") and out.endswith("…")
    assert "*captioning*" in out and len(out) <= 125


def test_inert_neutralizes_formatting_and_markup() -> None:
    assert inert("*b* `c` ~s~ <!here> &") == "∗b∗ ˋcˋ ∼s∼ &lt;!here&gt; &amp;"


def test_blocks_are_what_slack_sdk_models_would_serialize() -> None:
    for text in ["", "plain", "*bold* <x> & y", "word " * 1000]:
        section = SectionBlock(text=MarkdownTextObject(text=cut(text, 3000), verbatim=True))
        assert views.section(text) == section.to_dict()
        context = ContextBlock(elements=[MarkdownTextObject(text=cut(text, 2000), verbatim=True)])
        assert views.context(text) == context.to_dict()
        assert views.header(text) == HeaderBlock(text=PlainTextObject(text=cut(text, 150))).to_dict()
        button = ButtonElement(text=PlainTextObject(text="Share in channel"), action_id=views.SHARE_ACTION_ID,
                               value=text[: views.SHARE_VALUE_LIMIT])
        assert views.share_button(text) == ActionsBlock(elements=[button]).to_dict()
    assert views.divider() == DividerBlock().to_dict()


@pytest.mark.parametrize("text, terms, prefix_last, expected", [
    ("Image captioning with captions: captioned", ["caption"], False,
     {"captioning", "captions", "captioned"}),
    ("Learning to learn: learned; LEARNING rates", ["learn"], False, {"learning", "learn", "learned"}),
    ("private privacy, differential-privacy", ["priv"], True, {"private", "privacy"}),
    ("Ünïcode wörds, naïve café, 日本語 text", ["NAÏVE", "日本語"], False, {"naïve", "日本語"}),
    ("snake_case_words, a snake", ["snake_case"], False, {"snake_case_words", "snake"}),  # whole tokens
    ("Diffusion models diffuse: diffusing, DIFFUSION", ["diffusion", "mod"], True,
     {"diffusion", "diffuse", "diffusing", "models"}),
    ("a _ b x", ["_"], True, set()),  # no term: nothing matches, not even as a prefix
    ("grace and race", ["race"], True, {"race"}),  # a prefix of the term, never a substring
])
def test_matching_words_on_analyzed_terms(
    text: str, terms: list[str], prefix_last: bool, expected: set[str]
) -> None:
    assert matching_words(highlight.words(text), terms, prefix_last=prefix_last) == expected


def test_the_last_term_alone_matches_as_a_prefix() -> None:
    assert matching_words(["captioning", "models"], ["mod", "capt"], prefix_last=True) == {"captioning"}
    assert matching_words(["captioning", "models"], ["mod", "capt"], prefix_last=False) == set()


def test_a_prefix_typed_past_the_stem_matches_as_the_search_expands_it() -> None:
    candidates = ["normalizing", "normal", "nor", "diffusion", "diffuse", "dif", "normalizes"]
    normal = {"normalizing", "normal", "normalizes"}
    assert matching_words(candidates, ["normalizin"], prefix_last=True) == normal
    assert matching_words(candidates, ["diffusi"], prefix_last=True) == {"diffusion", "diffuse"}
    assert matching_words(candidates, ["diffusi"], prefix_last=False) == set()
    # The longest start of the typed word among the text's terms, as the search takes the index's.
    assert matcher_for_text("Normalizing flows, normal forms", ["normalizin"], prefix_last=True)("normal")
    assert not matcher_for_text("Normalizing flows, nor forms", ["normalizin"], prefix_last=True)("nor")
    assert not word_matcher(["normalizin"], prefix_last=True)("normal")  # knows no text: no start of it
    # ... when the rest of it could end a word: "blockchain" is no form of "block", as the search takes it
    assert not matcher_for_text("audible blocks, block-wise", ["blockchain"], prefix_last=True)("blocks")
    assert matching_words(["blocks", "block"], ["blockchain"], prefix_last=True) == set()
    assert matching_words(["photograph", "photographs"], ["photography"], prefix_last=True) == \
        {"photograph", "photographs"}


def test_matching_from_many_threads_at_once() -> None:
    cases = [(w, ["caption", "lear"], p) for w in ("Captioning", "learners", "capita") for p in (False, True)]
    expected = [matching_words([w], t, prefix_last=p) for w, t, p in cases]
    failures: list[object] = []

    def ask() -> None:
        for _ in range(50):
            for (word, terms, prefix_last), want in zip(cases, expected, strict=True):
                if matching_words([word], terms, prefix_last=prefix_last) != want:
                    failures.append(word)

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert expected == [{"captioning"}, {"captioning"}, set(), {"learners"}, set(), set()] and not failures


def test_matcher_for_text_answers_for_words_of_the_text_and_others() -> None:
    is_match = matcher_for_text("Captioning images; CAPTIONS", ["caption"])
    assert is_match("Captioning") and is_match("CAPTIONS") and is_match("captions")
    assert not is_match("images") and not is_match("capital")
    assert is_match("Captioned")  # not in the text: asked on its own


def test_a_matcher_answers_for_many_words_at_once_as_for_each_alone() -> None:
    words = ["Captioning", "images", "CAPTIONS", "captioned", "capital", "Captioning"]
    expected = {"Captioning", "CAPTIONS", "captioned"}  # "captioned" is not in the text: asked on its own
    for is_match in (matcher_for_text("Captioning images; CAPTIONS", ["caption"]), word_matcher(["caption"])):
        assert set(is_match.among(words)) == {word for word in words if is_match(word)} == expected
    assert not matcher_for_text("Captioning images", ["caption"]).among(["images", "capital"])


def test_one_text_highlighted_for_other_terms_answers_for_those_terms() -> None:
    """A text's layout and matching words are kept between calls; the answer still follows the terms and
    whether the last is a prefix, and a late or absent match still places and cuts the window."""
    text = "Image captioning with vision models. " * 4 + "Speech & <audio> `models` *later*."
    assert highlighted_snippet(text, matcher_for_text(text, ["caption"])).startswith("Image *captioning*")
    assert "*captioning*" not in highlighted_snippet(text, matcher_for_text(text, ["speech"]))
    assert highlighted_snippet(text, matcher_for_text(text, ["speech"]), limit=60).startswith("…")
    assert not matcher_for_text(text, ["capt"])("captioning")
    assert matcher_for_text(text, ["capt"], prefix_last=True)("captioning")
    assert highlighted_snippet(text, matcher_for_text(text, ["nothing"]), limit=40) == \
        "Image captioning with vision models…"


def test_inert_is_escape_after_the_look_alikes() -> None:
    text = "a *b* `c` ~d~ & <e> &amp; >"
    assert inert(text) == escape(text.replace("*", "\u2217").replace("`", "\u02cb").replace("~", "\u223c"))


@pytest.mark.parametrize("link", [
    "https://machinelearning.apple.com/research/hey-siri", "javascript:alert(1)",
    "https://machinelearning.apple.com/a|b", "https://x.example/" + "a" * 3000,
])
def test_a_results_buttons_are_what_slack_sdks_models_make(link: str) -> None:
    item = replace(make_item("x", "Title", "Summary."), id=link, link=link)
    assert views.result_actions(item) == blocks.item_actions(item, read=False).to_dict()
