"""bot.search: ranked, stemmed, prefix-matching search over the archive; any user string is safe."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.feed import Item, Validators, parse
from bot.search.query import MAX_QUERY_CHARS, SearchError, parse_query, search
from bot.store import SQLiteStore

DATA = Path(__file__).parent / "data"
ARCHIVE = parse((DATA / "apple_ml_archive.xml").read_bytes())


@pytest.fixture
def archive(store):
    store.ingest("https://machinelearning.apple.com/rss.xml", ARCHIVE, Validators())
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


def test_ranked_not_boolean_a_result_need_not_hold_every_word(archive):
    assert slugs(search(archive, "captioning zebra"))[0] == "balcaprl-mllm-image-captioning"


def test_more_matching_words_rank_higher(store):
    store.add_items(
        [
            make("one", "Paper one", "we study diffusion"),
            make("two", "Paper two", "we study diffusion and quantization"),
            make("three", "Paper three", "nothing relevant here"),
            make("four", "Paper four", "still nothing relevant"),
        ]
    )
    assert slugs(search(store, "diffusion quantization")) == ["two", "one"]


def test_rarer_matching_words_rank_higher(store):
    common = [make(f"c{i}", f"Common {i}", "transformer models everywhere") for i in range(3)]
    rare = make("rare", "Rare", "a gaussian process")
    filler = [make(f"f{i}", f"Filler {i}", "unrelated text") for i in range(6)]
    store.add_items([*common, rare, *filler])
    hits = search(store, "transformer gaussian")
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
    archive.add_items([Item(**{**velox.__dict__, "title": "Velox renamed to Wombat"})])
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
def test_an_over_long_query_is_a_clear_error(archive, length):
    with pytest.raises(SearchError) as err:
        search(archive, "captioning " * (length // 11) + "x" * (length % 11))
    assert "256" in str(err.value) and "\n" not in str(err.value)


def test_a_query_of_exactly_the_limit_is_accepted(archive):
    assert isinstance(search(archive, ("captioning " * 30)[:MAX_QUERY_CHARS]), list)


def test_unknown_words_find_nothing(archive):
    assert search(archive, "xylophonist") == []


def model_and_captioning(common: int) -> list[Item]:
    """`common` items about "model" only, then three where "captioning" (a rare word) sits in the title, the
    summary or both."""
    items = [make(f"common-{i}", f"Model number {i}", "a model of things", day=1 + i % 28)
             for i in range(common)]
    return items + [
        make("rare-title", "Captioning model", "a model", day=2),
        make("rare-summary", "Another model", "about captioning", day=3),
        make("rare-both", "Captioning", "captioning captioning model", day=1),
    ]


def test_sqlite_large_archive_pruning_keeps_the_exact_ranking(tmp_path, monkeypatch):
    """On a large archive, phrases in at least half the items (BM25 IDF clamped to ~0) are left out of
    scoring: the order must be what the exact query gives (FTS5's bm25 only)."""
    import bot.store.sqlite as store_module

    monkeypatch.setattr(store_module, "HELD_PHRASE_ROWS", 0)  # pruning itself, not scores held in memory
    store = SQLiteStore(tmp_path / "pruning.db")
    store.migrate()

    store.add_items(model_and_captioning(30))
    exact = [(h.item.id, h.score) for h in search(store, "captioning model ", limit=20)]
    monkeypatch.setattr(store_module, "PRUNE_MIN_ROWS", 1)
    pruned = [(h.item.id, h.score) for h in search(store, "captioning model ", limit=20)]
    assert [i for i, _ in pruned[:3]] == [i for i, _ in exact[:3]]
    assert [round(s, 4) for _, s in pruned[:3]] == [round(s, 4) for _, s in exact[:3]]
    assert {i for i, _ in pruned} == {i for i, _ in exact}
    # items matching only the near-zero phrase come after, newest first
    rest = [store.get_item(i) for i, _ in pruned[3:]]
    dates = [it.published for it in rest if it]
    assert dates == sorted(dates, reverse=True)
    only_common = search(store, "model ", limit=5)
    assert [h.score for h in only_common] == [0.0] * 5
    assert [h.item.published for h in only_common] == sorted(
        (h.item.published for h in only_common), reverse=True
    )


@pytest.mark.parametrize(
    "query",
    [
        "captioning vision",  # rare + a word in ~20% of the items: candidates of the rare word suffice
        "vision speech",  # two mid-frequency words: the rarer is scored first, the other bounded
        "captioning speech vision transformer",  # a rare word in 3 items: fewer than the limit, so it widens
        "speech vision transformer diffusion",
    ],
)
def test_sqlite_candidate_pruning_gives_the_exact_ranking(tmp_path, monkeypatch, query):
    """Large-archive search scores only the rows of the rarest phrases (with their full scores) while a
    bound proves the rest cannot enter the results: results and scores equal the plain bm25 query."""
    import random

    import bot.store.sqlite as store_module

    rng = random.Random(5)
    filler = [f"w{i}" for i in range(200)]
    items = []
    for i in range(400):
        words = rng.choices(filler, k=rng.randint(20, 60))
        for word, share in (("vision", 0.2), ("speech", 0.1), ("transformer", 0.3), ("diffusion", 0.05)):
            if rng.random() < share:
                words.insert(rng.randrange(len(words) + 1), word)
        title = " ".join(rng.choices(filler, k=5) + (["vision"] * rng.randint(0, 2) if i % 7 == 0 else []))
        items.append(make(f"item-{i}", title, " ".join(words), day=1 + i % 28))
    items += [make(f"rare-{i}", f"note {i}", "a captioning remark " + "w1 " * 40, day=5) for i in range(3)]
    store = SQLiteStore(tmp_path / "pruning.db")
    store.migrate()
    store.add_items(items)

    monkeypatch.setattr(store_module, "HELD_PHRASE_ROWS", 0)  # pruning itself, not scores held in memory
    monkeypatch.setattr(store_module, "PRUNE_MIN_ROWS", 10**9)
    exact = [(h.item.id, h.score) for h in search(store, query, limit=10)]
    monkeypatch.setattr(store_module, "PRUNE_MIN_ROWS", 1)
    pruned = [(h.item.id, h.score) for h in search(store, query, limit=10)]
    assert len(exact) == 10
    assert pruned == exact


@pytest.mark.postgres
def test_postgres_large_archive_ranks_common_words_among_the_newest_items(pg_schema_url, monkeypatch):
    """On a large archive, PostgreSQL search asks the GIN index only for the rarer words: items holding
    them are ranked exactly, items holding only common words only among the newest SEARCH_WINDOW items
    (older ones fill any remaining places). Every score is ts_rank's own."""
    from dataclasses import replace

    import bot.store.postgres as pg
    from bot.store import open_store

    store = open_store(pg_schema_url)
    store.migrate()
    items = model_and_captioning(40)
    items += [
        make("old-title", "Model model", "model model", day=1),
        replace(make("old-update", "An update", "a model", day=2), kind="update"),
    ]
    store.add_items(items)
    every = {h.item.id: h.score for h in search(store, "captioning model ", limit=50)}
    exact = search(store, "captioning model ", limit=5)
    monkeypatch.setattr(pg, "EXACT_ROWS", 0)
    monkeypatch.setattr(pg, "SEARCH_WINDOW", 10)
    monkeypatch.setattr(pg, "RARE_ROWS", 5)
    pruned = search(store, "captioning model ", limit=5)

    order = {item.id: n for n, item in enumerate(items)}  # insertion order: the pk order
    newest = sorted(items, key=lambda i: (i.published, order[i.id]), reverse=True)
    by_id = {i.id: i for i in items}
    candidates = {i.id for i in newest[:10]} | {i.id for i in items if "rare" in i.guid}
    expected = sorted(candidates, key=lambda i: (every[i], by_id[i].published, order[i]), reverse=True)[:5]
    assert [h.item.id for h in pruned] == expected
    assert all(h.score == every[h.item.id] for h in pruned)
    assert {i.id for i in items if "rare" in i.guid} <= {h.item.id for h in pruned}
    assert "old-title" in slugs(exact) and "old-title" not in slugs(pruned)  # the approximation
    # no update in the window: the older one fills the places
    assert slugs(search(store, "model type:update")) == ["old-update"]
    assert search(store, "captioning type:update") == []
