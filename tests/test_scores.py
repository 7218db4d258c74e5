"""bot.store.scores: SQLite search answers from per-phrase bm25 scores held in memory, exactly as FTS5 ranks,
and never from an archive that has changed since (in this process or another)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

import bot.store.sqlite as sqlite_module
from bot.feed import Item
from bot.search.query import search
from bot.store import SQLiteStore
from bot.store.scores import Held, PhraseScores, candidate_sums


def make(slug: str, title: str, summary: str = "", day: int = 1) -> Item:
    link = f"https://machinelearning.apple.com/research/{slug}"
    return Item(id=link, guid=slug, title=title, link=link, summary=summary,
                published=datetime(2026, 1, day, tzinfo=UTC), kind="research")


def synthetic(count: int = 400) -> list[Item]:
    rng = random.Random(11)
    filler = [f"w{i}" for i in range(150)]
    items = []
    for i in range(count):
        words = rng.choices(filler, k=rng.randint(20, 60))
        for word, share in (("vision", 0.2), ("speech", 0.1), ("transformer", 0.6), ("diffusion", 0.05)):
            if rng.random() < share:
                words.insert(rng.randrange(len(words) + 1), word)
        title = " ".join(rng.choices(filler, k=4) + (["vision"] if i % 9 == 0 else []))
        # Identical texts on different days: equal scores, ordered newest first.
        if i % 50 == 0:
            title, words = "vision twin", ["speech", "vision"]
        items.append(make(f"item-{i}", title, " ".join(words), day=1 + i % 28))
    return items


@pytest.fixture
def archive(tmp_path):
    store = SQLiteStore(tmp_path / "held.db")
    store.migrate()
    store.add_items(synthetic())
    return store


def ranked(store: SQLiteStore, query: str, limit: int = 10) -> list[tuple[str, float]]:
    return [(hit.item.id, hit.score) for hit in search(store, query, limit=limit)]


QUERIES = ["vision", "vision speech", "speech vision", "diffusion speech vision transformer", "vision vision",
           "visio", "w1 w2 w3", "twin", "nothingmatches", "speech nothingmatches"]


@pytest.mark.parametrize("large", [False, True], ids=["plain", "pruned"])
@pytest.mark.parametrize("query", QUERIES)
def test_held_scores_rank_exactly_as_the_index_does(archive, monkeypatch, query, large):
    """Scores equal to the last digit and the same order (ties newest first), on a small archive (every
    phrase scored) and on a large one (phrases in half the rows only fill the places left)."""
    monkeypatch.setattr(sqlite_module, "PRUNE_MIN_ROWS", 1 if large else 10**9)
    monkeypatch.setattr(sqlite_module, "HELD_PHRASE_ROWS", 0)
    exact = ranked(SQLiteStore(archive.path), query)  # FTS5's own bm25 (a store with nothing held)
    monkeypatch.setattr(sqlite_module, "HELD_PHRASE_ROWS", 20_000)
    held_first = ranked(archive, query)  # computes and keeps each phrase's scores
    assert archive._scores.entries > 0 or not exact
    held_again = ranked(archive, query)  # from memory
    assert held_first == exact
    assert held_again == exact


def test_a_second_search_is_answered_from_memory(archive):
    """Proof that scores are held: with the index emptied behind the store's back (no item changed, so the
    generation did not move), the held phrases still rank; one never asked about finds nothing."""
    first = ranked(archive, "vision speech")
    with archive.connect() as db:
        db.execute("INSERT INTO items_fts (items_fts) VALUES ('delete-all')")
    assert ranked(archive, "vision speech") == first
    assert ranked(archive, "diffusion") == []


def test_ties_are_ordered_newest_first(archive):
    hits = search(archive, "twin", limit=8)
    assert len({hit.score for hit in hits}) == 1
    assert [hit.item.published for hit in hits] == sorted((hit.item.published for hit in hits), reverse=True)


def generation(store: SQLiteStore) -> int:
    with store.connect() as db:
        return sqlite_module._generation(db)


def test_a_phrase_in_more_rows_than_are_held_is_ranked_by_the_index(archive, monkeypatch):
    exact = ranked(archive, "transformer vision")
    fresh = SQLiteStore(archive.path)
    monkeypatch.setattr(sqlite_module, "HELD_PHRASE_ROWS", 50)  # "transformer" is in ~60% of the rows
    assert ranked(fresh, "transformer vision") == exact
    assert fresh._scores.phrase(generation(fresh), '"transformer"') == Held(51)  # counted up to the bound


def test_a_phrase_in_many_rows_is_scored_on_its_second_search(archive, monkeypatch):
    monkeypatch.setattr(sqlite_module, "EAGER_ROWS", 10)  # "vision" is in ~90 rows
    exact = ranked(SQLiteStore(archive.path), "vision ")
    assert ranked(archive, "vision ") == exact  # answered as _ranked_search answers
    first = archive._scores.phrase(generation(archive), '"vision"')
    assert first is not None and first.scores is None and first.count > 10
    assert ranked(archive, "vision ") == exact
    second = archive._scores.phrase(generation(archive), '"vision"')
    assert second is not None and second.scores is not None and len(second.scores) == first.count


def test_a_query_of_phrases_in_half_the_rows_lists_the_newest_of_them(archive, monkeypatch):
    monkeypatch.setattr(sqlite_module, "PRUNE_MIN_ROWS", 1)
    hits = search(archive, "transformer ", limit=5)  # ~60% of the rows: nothing to score, newest first
    assert len(hits) == 5 and {hit.score for hit in hits} == {0.0}
    assert [hit.item.published for hit in hits] == sorted((hit.item.published for hit in hits), reverse=True)
    assert candidate_sums([], limit=5) == {}


def test_a_phrase_in_half_the_rows_of_a_large_archive_keeps_only_its_count(archive, monkeypatch):
    monkeypatch.setattr(sqlite_module, "PRUNE_MIN_ROWS", 1)
    ranked(archive, "transformer vision ")  # no prefix: the phrases are "transformer" and "vision"
    kept = archive._scores.phrase(generation(archive), '"transformer"')
    assert kept is not None and kept.scores is None
    assert 2 * kept.count >= 400
    assert archive._scores.phrase(generation(archive), '"vision"') is not None


def test_an_edit_is_searched_at_once(archive):
    before = ranked(archive, "diffusion")
    archive.add_items([make("item-7", "Diffusion diffusion", "diffusion models", day=3)])
    after = ranked(archive, "diffusion")
    assert after != before
    assert after[0][0].endswith("/item-7")


def test_a_change_made_through_another_connection_or_process_is_searched_at_once(archive):
    assert ranked(archive, "captioning") == []
    poller = SQLiteStore(archive.path)  # its own connections and memory, as another process has
    poller.add_items([make("new-paper", "Image captioning", "captioning with vision", day=27)])
    assert [item_id for item_id, _ in ranked(archive, "captioning")] == [
        "https://machinelearning.apple.com/research/new-paper"
    ]
    # and the indexed stem of a typed prefix ("captionin" -> "caption") is looked up afresh
    assert ranked(archive, "captionin")[0][0].endswith("/new-paper")
    with poller.connect() as db:
        db.execute("DELETE FROM items WHERE id = ?", ["https://machinelearning.apple.com/research/new-paper"])
    assert ranked(archive, "captioning") == []


# --- PhraseScores itself ---------------------------------------------------------------------------------


def scores(n: int, base: int = 0) -> dict[int, float]:
    return {base + i: float(i) for i in range(n)}


def test_held_rows_are_bounded_least_recently_used_first():
    held = PhraseScores(max_entries=10)
    held.keep_phrase(1, '"a"', Held.of(4, scores(4)))
    held.keep_phrase(1, '"b"', Held.of(4, scores(4)))
    assert held.phrase(1, '"a"') is not None  # "a" is now the most recently used
    held.keep_phrase(1, '"c"', Held.of(4, scores(4)))
    assert held.phrase(1, '"b"') is None
    assert held.phrase(1, '"a"') is not None and held.phrase(1, '"c"') is not None
    assert held.entries == 8
    held.keep_phrase(1, '"huge"', Held.of(11, scores(11)))
    assert held.phrase(1, '"huge"') is None
    assert held.entries == 8


def test_a_count_without_scores_costs_no_rows():
    held = PhraseScores(max_entries=10)
    held.keep_phrase(1, '"common"', Held.of(10**6, None))
    assert held.phrase(1, '"common"') == Held(10**6)
    assert held.entries == 0


def test_a_newer_generation_drops_everything_and_an_older_one_is_neither_served_nor_kept():
    held = PhraseScores()
    held.keep_phrase(2, '"a"', Held.of(3, scores(3)))
    held.keep_fact(2, ("stem", "captionin"), "caption")
    assert held.phrase(1, '"a"') is None  # a reader that began before the change
    held.keep_phrase(1, '"b"', Held.of(3, scores(3)))
    assert held.phrase(2, '"b"') is None
    assert held.fact(2, ("stem", "captionin")) == ("caption",)
    assert held.phrase(3, '"a"') is None
    assert held.fact(3, ("stem", "captionin")) is None
    assert held.entries == 0
    held.keep_fact(3, ("stem", "xyz"), None)
    assert held.fact(3, ("stem", "xyz")) == (None,)


def test_rows_of_big_phrases_are_looked_up_not_walked():
    """The rows of the rarest phrase are scored in full; a row of only the big phrase is left out once the
    limit-th best beats what the big phrase alone can give; every kept row has its exact sum."""
    rare = Held.of(3, {1: 5.0, 2: 4.0, 3: 3.0})
    big = Held.of(1000, {**{row: 0.5 for row in range(10, 1010)}, 1: 0.25, 2: 0.5})
    sums = candidate_sums([big, rare], limit=2)
    assert sums == {1: 0.25 + 5.0, 2: 0.5 + 4.0, 3: 3.0}
    # with limit 4 the rare phrase has too few rows: every row is scored
    assert len(candidate_sums([big, rare], limit=4)) == 1003


def test_a_row_that_could_tie_the_last_place_is_scored():
    rare = Held.of(2, {1: 2.0, 2: 0.5})
    rest = {row: 0.01 for row in range(100, 120)}
    big = Held.of(22, {5: 0.5, 6: 0.1, **rest})  # row 5 alone can reach 0.5, the second best: it is compared
    assert candidate_sums([rare, big], limit=2) == {1: 2.0, 2: 0.5, 5: 0.5, 6: 0.1, **rest}
    assert candidate_sums([rare, big], limit=1) == {1: 2.0, 2: 0.5}  # 2.0 > 0.5: no other


def test_rows_of_every_phrase_are_enough_when_they_beat_any_other_row():
    """A row missing a phrase scores at most the other phrases' largest terms; once the limit-th best of the
    rows matching every phrase beats that, only those are scored."""
    a = Held.of(5, {1: 3.0, 2: 3.0, 3: 2.0, 10: 1.0, 11: 0.5})
    b = Held.of(5, {1: 2.0, 2: 1.5, 3: 2.5, 20: 1.25, 21: 0.25})
    assert candidate_sums([a, b], limit=3) == {1: 5.0, 2: 4.5, 3: 4.5}  # the others reach 3.0 at most
    everything = {1: 5.0, 2: 4.5, 3: 4.5, 10: 1.0, 11: 0.5, 20: 1.25, 21: 0.25}
    assert candidate_sums([a, b], limit=4) == everything  # too few rows in both


def test_a_row_missing_a_phrase_that_could_tie_the_last_place_is_scored():
    a = Held.of(3, {1: 2.0, 2: 2.0, 10: 3.0})  # row 10 alone can reach 3.0
    b = Held.of(2, {1: 1.0, 2: 1.0})
    assert candidate_sums([a, b], limit=2) == {1: 3.0, 2: 3.0, 10: 3.0}


def test_a_row_missing_one_of_three_phrases_can_still_be_the_best():
    a, b = Held.of(3, {1: 1.0, 2: 1.0, 5: 2.0}), Held.of(3, {1: 1.0, 2: 1.0, 5: 2.0})
    c = Held.of(2, {1: 1.0, 2: 1.0})
    assert candidate_sums([a, b, c], limit=2)[5] == 4.0  # rows 1 and 2 match all three and score 3.0


def test_a_one_phrase_query_keeps_its_best_rows_and_those_tied_with_the_last():
    one = Held.of(4, {1: 1.0, 2: 3.0, 3: 1.0, 4: 0.5})
    assert one.ranked[0] == 2 and one.peak == 3.0
    assert candidate_sums([one], limit=2) == {2: 3.0, 1: 1.0, 3: 1.0}
    assert candidate_sums([one], limit=1) == {2: 3.0}
    assert candidate_sums([one], limit=9) == one.scores


def test_a_phrase_no_row_matches_changes_no_score():
    nothing, one = Held.of(0, {}), Held.of(2, {1: 1.5, 2: 0.5})
    assert candidate_sums([nothing, one], limit=1) == candidate_sums([one, nothing], limit=1) == {1: 1.5}
