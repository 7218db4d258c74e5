"""bot.search: ranked, stemmed, prefix-matching, typo-tolerant search over the archive (one tantivy index, the
same for both stores); any user string is safe."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import tantivy
from msgspec.structs import replace

from bot.errors import SearchError, SearchUnavailable
from bot.feed import parse
from bot.models import Item, Validators
from bot.route import ingest
from bot.search.engine import SCHEMA, _entry, _with_ties, ids_of, keyword_scores
from bot.search.index import READY_WAIT, SearchIndex
from bot.search.keywords import edits
from bot.search.query import MAX_QUERY_CHARS, parse_query
from bot.search.query import search as run_search
from bot.store import SQLiteStore, Store, open_store
from tests.fakes.archive import make_item

DATA = Path(__file__).parent / "data"
ARCHIVE = parse((DATA / "apple_ml_archive.xml").read_bytes())


@pytest.fixture
def archive(store):
    ingest(store, "https://machinelearning.apple.com/rss.xml", ARCHIVE, Validators())
    return store


def make(slug: str, title: str, summary: str = "", day: int = 1) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(
        id=link,
        guid=slug,
        title=title,
        link=link,
        summary=summary,
        published=datetime(2026, 1, day, tzinfo=UTC),
        kind="research",
    )


def search(store: Store, text: str, limit: int = 10):  # type: ignore[no-untyped-def]
    """The hits of a search through a new index of `store`."""
    return run_search(SearchIndex(store), text, limit).hits


def slugs(hits) -> list[str]:
    return [h.item.link.rsplit("/", 1)[1] for h in hits]


def test_captioning_finds_the_captioning_paper_first(archive):
    hits = search(archive, "captioning")
    assert slugs(hits)[0] == "balcaprl-mllm-image-captioning"
    assert hits[0].score > 0


def test_stemming_captions_finds_captioning(archive):
    assert "balcaprl-mllm-image-captioning" in slugs(search(archive, "captions"))


@pytest.mark.parametrize(
    ("typed", "slug"),
    [
        ("capt", "balcaprl-mllm-image-captioning"),
        ("capti", "balcaprl-mllm-image-captioning"),
        ("captionin", "balcaprl-mllm-image-captioning"),
        ("image captionin", "balcaprl-mllm-image-captioning"),
        ("normaliz", "normalizing-flows"),
        ("normalizin", "normalizing-flows"),
        ("misspecif", "rope-misspecification-sbi"),
    ],
)
def test_prefix_match_on_the_last_word_even_past_its_stem(archive, typed, slug):
    assert slug in slugs(search(archive, typed))


def test_a_word_followed_by_a_space_is_not_a_prefix():
    assert parse_query("capti").prefix_last
    assert not parse_query("capti ").prefix_last
    assert not parse_query("ca").prefix_last  # too short to mean a prefix


def test_two_words_must_both_be_held_and_a_word_no_item_holds_is_named(archive):
    found = run_search(SearchIndex(archive), "captioning zebra")
    assert found.hits == [] and found.missing == ("zebra",)


def test_more_matching_words_rank_higher(store):
    store.add_items(
        [
            make("one", "Paper one", "we study diffusion"),
            make("two", "Paper two", "we study diffusion and quantization"),
            make("three", "Paper three", "nothing relevant here"),
            make("four", "Paper four", "still nothing relevant"),
        ]
    )
    assert slugs(search(store, "diffusion quantization")) == ["two"]  # two words: both
    assert slugs(search(store, "study diffusion quantization")) == ["two", "one"]  # three: two of them


def test_rarer_matching_words_rank_higher(store):
    common = [make(f"c{i}", f"Common {i}", "transformer models everywhere, a process") for i in range(3)]
    rare = make("rare", "Rare", "a gaussian process")
    filler = [make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(6)]
    store.add_items([*common, rare, *filler])
    hits = search(store, "transformer gaussian process")  # each holds two of the three words
    assert slugs(hits)[0] == "rare"
    assert len(hits) == 4


def test_the_title_weighs_more_than_the_summary(store):
    store.add_items(
        [
            make("in-summary", "A paper", "this one is about tokenizers", day=2),
            make("in-title", "Tokenizers", "this one is about something", day=1),
            *[make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(6)],
        ]
    )
    assert slugs(search(store, "tokenizers")) == ["in-title", "in-summary"]


def test_newest_first_among_equal_scores(store):
    store.add_items([make(f"same-{day}", "Identical title", "identical words", day=day) for day in (3, 1, 2)])
    store.add_items([make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(6)])
    hits = search(store, "identical")
    assert slugs(hits) == ["same-3", "same-2", "same-1"]
    assert len({h.score for h in hits}) == 1


def test_limit_caps_the_results(archive):
    assert len(search(archive, "apple researchers", limit=3)) == 3


@pytest.mark.parametrize("limit", [0, -1, 101])
def test_a_bad_limit_is_a_search_error(archive, limit):
    with pytest.raises(SearchError):
        search(archive, "apple", limit=limit)


def test_edits_are_searchable(archive):
    velox = next(i for i in ARCHIVE if i.link.endswith("/velox"))
    archive.add_items([replace(velox, title="Velox renamed to Wombat")])
    assert slugs(search(archive, "wombat")) == ["velox"]


HOSTILE = [
    '"',
    '""',
    "'",
    "AND(",
    "OR",
    "NOT",
    "NEAR/3",
    "NEAR(a b)",
    "*",
    "a*",
    "-",
    "--",
    "^",
    "^title",
    "title:",
    "title:diffusion",
    "summary:x",
    "{title}: x",
    "(",
    ")",
    "()",
    "a AND",
    "AND OR NOT",
    '"unterminated',
    'captioning"',
    "🙂",
    "🙂🙂 captioning 🙂",
    "\x00",
    "\\",
    "%",
    "_",
    "__",
    "a_b",
    "'; DROP TABLE items; --",
    "c++",
    "k-means",
    'NEAR/ * - emoji 🙂 AND( "',
    "ＡＮＤ",
    "straße",
    "日本語",
    "x" * 256,
    "a " * 128,
]


@pytest.mark.parametrize("query", HOSTILE)
def test_no_user_string_is_an_fts_syntax_error(archive, query):
    try:
        hits = search(archive, query)
    except SearchError as err:
        assert "\n" not in str(err)
    else:
        assert isinstance(hits, list)


@pytest.mark.parametrize("query", ["", "   ", "\n", "!!!", "🙂", '"" ()'])
def test_an_empty_query_is_a_clear_error(archive, query):
    with pytest.raises(SearchError) as err:
        search(archive, query)
    assert str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("length", [MAX_QUERY_CHARS + 1, 5_000])
def test_an_over_long_query_searches_its_first_words_and_says_so(archive, length):
    found = run_search(SearchIndex(archive), "captioning " * (length // 11) + "x" * (length % 11))
    assert slugs(found.hits) == ["balcaprl-mllm-image-captioning"]
    assert found.note is not None and "256" in found.note and "\n" not in found.note


def test_a_query_of_exactly_the_limit_is_accepted(archive):
    """MAX_QUERY_CHARS characters are searched whole, the last word too, and nothing says it was cut; one
    character more is cut to its whole words (the last one goes), and the answer says so."""
    exact = "image " * 41 + "captioning"
    assert len(exact) == MAX_QUERY_CHARS
    query = parse_query(exact)
    assert query.terms == ("image", "captioning") and not query.cut
    found = run_search(SearchIndex(archive), exact)
    assert slugs(found.hits)[0] == "balcaprl-mllm-image-captioning" and found.note is None
    over = parse_query(exact + "s")
    assert over.terms == ("image",) and over.cut
    # a word ending at the limit fits, whatever follows it (until 2026-12-06 it was dropped too)
    more = parse_query(exact + " more words")
    assert more.terms == ("image", "captioning") and more.cut


def test_unknown_words_find_nothing(archive):
    assert search(archive, "xylophonist") == []


# --- phrases, misspellings, filters as parts of the query ------------------------------------------------


def test_a_quoted_phrase_matches_as_a_phrase(store):
    """A quoted phrase is its words next to each other, in order: never one word apart ("Image based
    captioning"), nor reversed; and the same holds for a phrase left out."""
    store.add_items(
        [
            make("phrase", "Image captioning", "words", day=1),
            make("apart", "Captioning of an image", "words", day=2),
            make("one-apart", "Image based captioning", "words", day=3),
            make("abstract", "Describing photos", "Better image based captioning for photos.", day=4),
            *[make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(4)],
        ]
    )
    assert slugs(search(store, '"image captioning"')) == ["phrase"]
    assert slugs(search(store, "“image captioning”")) == ["phrase"]  # Slack's smart quotes
    assert set(slugs(search(store, "image captioning"))) == {"phrase", "apart", "one-apart", "abstract"}
    assert set(slugs(search(store, 'captioning -"image captioning"'))) == {"apart", "one-apart", "abstract"}
    assert parse_query('"image captioning" x').phrases == (("image", "captioning"),)
    assert parse_query('"image captioning').phrases == ()  # unterminated: plain words


@pytest.mark.parametrize(
    ("typed", "slug", "searched"),
    [
        ("captoning", "balcaprl-mllm-image-captioning", "captioning"),
        ("difusion", "projective-composition-diffusion", "diffusion"),
        ("image captoning ", "balcaprl-mllm-image-captioning", "image captioning"),
    ],
)
def test_a_misspelt_word_finds_its_items_and_says_what_was_searched(archive, typed, slug, searched):
    found = run_search(SearchIndex(archive), typed)
    assert slug in slugs(found.hits)
    assert found.searched_for == searched


def test_a_known_or_short_word_is_never_corrected(archive):
    assert run_search(SearchIndex(archive), "captioning").searched_for is None
    assert search(archive, "capx ") == []  # under five letters: no fuzzy match


def test_edit_distance_counts_a_transposition_as_one():
    assert edits("caption", "capton") == 1
    assert edits("diffus", "difus") == 1
    assert edits("caption", "captoin") == 1
    assert edits("abc", "xyz") == 3


def test_filters_are_part_of_the_query_not_a_cut_of_its_results(store):
    """since:/type: select among all matches, so a filter never starves the list (the best match overall
    being too old must not leave the newer ones out)."""
    old = [make(f"old-{i}", "Diffusion diffusion", "diffusion diffusion", day=1) for i in range(12)]
    new = make("new", "A note", "on diffusion", day=20)
    store.add_items([*old, new, *[make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(6)]])
    assert slugs(search(store, "diffusion since:2026-01-10", limit=5)) == ["new"]
    assert search(store, "diffusion type:update") == []
    scores = {h.item.id: h.score for h in search(store, "diffusion", limit=20)}
    filtered = search(store, "diffusion since:2026-01-01 type:paper", limit=20)
    assert {h.item.id: h.score for h in filtered} == scores


def test_until_keeps_items_up_to_and_including_its_day(store):
    store.add_items([make(f"d{day}", f"Diffusion {day}", "diffusion", day=day) for day in (9, 10, 11)])
    assert sorted(slugs(search(store, "diffusion until:2026-01-10"))) == ["d10", "d9"]
    assert slugs(search(store, "diffusion since:2026-01-10 until:2026-01-10")) == ["d10"]
    with pytest.raises(SearchError, match="until: needs a date"):
        search(store, "diffusion until:tomorrow")


def test_dates_alone_list_the_items_of_that_span_newest_first(store):
    store.add_items([make(f"d{day}", f"Item {day}", "text", day=day) for day in (3, 5, 7, 9)])
    assert slugs(search(store, "since:2026-01-04 until:2026-01-08")) == ["d7", "d5"]
    assert slugs(search(store, "since:2026-01-05")) == ["d9", "d7", "d5"]



def test_a_days_items_are_listed_in_the_feeds_order_as_latest_lists_them(archive):
    """The archive's feed has four items of 2026-05-08: a search of a date span lists them as `latest` does,
    in the feed's own order (until 2026-12-06 a search listed them by link)."""
    in_feed = [i.id for i in reversed(ARCHIVE) if i.published.date().isoformat() == "2026-05-08"]
    assert len(in_feed) == 4 and in_feed != sorted(in_feed)  # the feed's order is not the links' order
    assert [i.id for i in archive.latest(20) if i.id in in_feed] == in_feed
    assert [h.item.id for h in search(archive, "since:2026-05-08 until:2026-05-08")] == in_feed


def test_equal_scores_of_one_day_list_the_last_to_arrive_first(store):
    store.add_items([make("a-first", "Identical title", "identical words")])
    store.add_items([make("b-second", "Identical title", "identical words")])
    assert slugs(search(store, "identical")) == ["b-second", "a-first"]
    assert [i.title for i in store.latest(2)] == ["Identical title"] * 2
    assert [i.id.rsplit("/", 1)[1] for i in store.latest(2)] == ["b-second", "a-first"]


def test_a_change_by_another_process_is_found_by_the_next_search(database_url):
    """The index is rebuilt when the database's change marker moved, whoever changed the items."""
    mine, other = open_store(database_url), open_store(database_url)
    mine.migrate()
    index = SearchIndex(mine)
    mine.add_items([make("first", "Wombats", "about wombats")])
    assert slugs(run_search(index, "wombats ").hits) == ["first"]
    other.add_items([make("second", "Quokkas", "about quokkas")])
    assert slugs(run_search(index, "quokkas ").hits) == ["second"]
    first = mine.get_item("https://machinelearning.apple.com/research/first")
    assert first is not None
    other.add_items([replace(first, title="Numbats")])
    assert slugs(run_search(index, "numbats ").hits) == ["first"]


def counting_store(database_url: str) -> Store:
    """A store of the URL's backend that counts its reads of the whole archive (`each_item`)."""
    plain = open_store(database_url)

    class Counting(type(plain)):  # type: ignore[misc]
        full_reads = 0

        def each_item(self, page=1000):
            self.full_reads += 1
            return super().each_item(page)

    return Counting(getattr(plain, "path", database_url))


def test_a_refresh_reads_only_the_rows_written_since(database_url):
    mine, other = counting_store(database_url), open_store(database_url)
    mine.migrate()
    other.add_items([make(f"filler-{n}", f"Filler {n}", "unrelated") for n in range(10)])
    index = SearchIndex(mine)
    first = index.current()
    other.add_items([make("new", "Wombats", "about wombats")])
    filler = mine.get_item("https://machinelearning.apple.com/research/filler-3")
    assert filler is not None
    other.add_items([replace(filler, title="Quokkas")])
    assert slugs(run_search(index, "wombats ").hits) == ["new"]
    assert slugs(run_search(index, "quokkas ").hits) == ["filler-3"]
    assert "filler-3" not in slugs(run_search(index, "filler", limit=20).hits)
    refreshed = index.current()
    assert mine.full_reads == 1 and refreshed.index is first.index
    assert refreshed.entries == {row["id"]: _entry(row) for row in mine.all_items()}
    assert refreshed.marker == mine.change_marker() != first.marker


def test_a_deleted_item_leaves_the_index_at_the_next_search(database_url):
    """The bot never deletes items; when someone does, the refresh sees fewer items than it expects."""
    mine, other = counting_store(database_url), open_store(database_url)
    mine.migrate()
    other.add_items([make("gone", "Wombats", "about wombats"), make("kept", "Quokkas", "about quokkas")])
    index = SearchIndex(mine)
    assert slugs(run_search(index, "wombats ").hits) == ["gone"]
    with other.connect() as db:
        db.execute("DELETE FROM items WHERE id LIKE ?", ["%/gone"])
    assert run_search(index, "wombats ").hits == []
    assert slugs(run_search(index, "quokkas ").hits) == ["kept"]
    assert mine.full_reads == 2


def test_a_search_before_the_first_build_waits_for_it(archive):
    index = SearchIndex(archive, ready_wait=READY_WAIT)
    index.start()
    assert slugs(run_search(index, "captioning").hits)[0] == "balcaprl-mllm-image-captioning"


class HeldStore(SQLiteStore):
    """A store whose archive read waits until `release` is set (a first build that takes long)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = threading.Event()

    def each_item(self, page: int = 1000) -> Iterator[dict[str, Any]]:
        self.release.wait(10)
        return super().each_item(page)


def test_a_search_still_waiting_after_the_bound_gets_a_one_line_answer(tmp_path):
    store = HeldStore(tmp_path / "held.db")
    store.migrate()
    store.add_items([make("one", "Wombats", "about wombats")])
    index = SearchIndex(store, ready_wait=0.05)
    builder = index.start()
    with pytest.raises(SearchUnavailable) as err:
        run_search(index, "wombats")
    assert "\n" not in str(err.value)
    store.release.set()
    builder.join(10)
    assert slugs(run_search(index, "wombats").hits) == ["one"]


def test_the_reply_says_what_was_searched_for(archive):
    from bot.commands import Invocation, Services, handle
    from bot.config import Settings

    services = Services(store=archive, settings=Settings())
    reply = handle(Invocation("search captoning", "T1", "C1", "U1"), services)
    assert reply.blocks[0]["elements"][0]["text"].startswith("Searched for")
    assert "captioning" in reply.blocks[0]["elements"][0]["text"]
    assert reply.text.startswith("Searched for")
    plain = handle(Invocation("search captioning", "T1", "C1", "U1"), services)
    assert "Searched for" not in plain.text


def test_a_repeated_search_is_answered_again_until_the_archive_changes(tmp_path: Path) -> None:
    """The answers to recent searches are kept per snapshot of the archive: a repeat gives the same hits
    (a fresh list each time), and a new matching item shows in the next search of the same words."""
    store = SQLiteStore(tmp_path / "a.db")
    store.migrate()
    store.add_items([make_item("a", "Image Captioning", "Captions for images.")])
    index = SearchIndex(store)
    first = index.search(parse_query("captioning"), 5, store)
    again = index.search(parse_query("captioning"), 5, store)
    assert [h.item.id for h in again.hits] == [h.item.id for h in first.hits] and again.hits is not first.hits
    again.hits.clear()  # a caller's list is its own
    assert len(index.search(parse_query("captioning"), 5, store).hits) == 1
    store.add_items([make_item("b", "Captioning Video", "Captions for video.")])
    assert len(index.search(parse_query("captioning"), 5, store).hits) == 2


def test_every_documents_id_is_read_from_its_place_after_edits_and_additions(store: Store) -> None:
    """Ids come from a fast field (the id's place in the snapshot's order), not the stored document: after an
    incremental refresh that edits one item and adds two, every document still names its own item."""
    store.add_items([make(f"held-{n}", f"Held item {n}", day=1 + n % 28) for n in range(20)])
    index = SearchIndex(store)
    first = index.current()
    edited = store.get_item("https://machinelearning.apple.com/research/held-4")
    assert edited is not None
    store.add_items([replace(edited, title="Held item four, edited"),
                     make("held-new-1", "Held item new", day=20),
                     make("held-new-2", "Held item newer", day=21)])
    snapshot = index.current()
    assert snapshot.index is first.index  # refreshed in place, not rebuilt
    hits = snapshot.searcher.search(tantivy.Query.term_query(SCHEMA, "title", "held"), 100).hits
    assert len(hits) == 22
    stored = [str(snapshot.searcher.doc(address).get_first("id")) for _, address in hits]
    assert ids_of(snapshot, [address for _, address in hits]) == stored
    assert len(set(stored)) == 22
    assert ids_of(snapshot, []) == []


def test_every_hit_tied_with_the_last_place_is_weighed_and_none_past_the_ties(store: Store) -> None:
    """tantivy breaks ties its own way, so every hit tied with the last place kept is read (a page of 51,
    then of 204) and the tied are kept by id: both stores keep the same ones. Hits scoring less than the ties
    are never kept, so they are not read either (their ids cost a tenth of a search's CPU)."""
    store.add_items([make(f"tied-{n:03d}", "Tied title", "tied words", day=1 + n % 28) for n in range(120)])
    store.add_items([make(f"less-{n:03d}", "Tied title", "tied words and more words beside them", day=1)
                     for n in range(60)])
    snapshot = SearchIndex(store).current()
    query = snapshot.index.parse_query("tied", ["title", "summary"])
    hits, matched = _with_ties(snapshot.searcher, query, 50)
    assert matched == 180
    assert len(hits) == 120  # the tied, not the 60 scoring less that the second page also read
    found, matched = keyword_scores(snapshot, query, 50)
    assert [item_id.rsplit("/", 1)[1] for _, item_id in found] == [f"tied-{n:03d}" for n in range(50)]
    assert len({score for score, _ in found}) == 1 and matched == 180
