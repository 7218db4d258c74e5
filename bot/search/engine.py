"""The tantivy index of the archive, derived from the database (which stays the source of truth) and the
same for both stores: its schema, its build and refresh (`build`), the snapshot searches read, and reading a
query's best hits (`ranked_hits`).

    snapshot = build(store)                  # the whole archive, read a page at a time
    snapshot = build(store, snapshot)        # refreshed: only the rows written since its marker
    ranked_hits(snapshot, query, limit=5, store=store) -> [SearchHit, ...]

Indexed: title (weighted TITLE_BOOST), summary and authors (AUTHORS_BOOST), all analyzed by
bot.search.analysis (English stemming; the words it keeps apart written as their terms first), with positions
(phrases); the kind, the publication date, the venue's words and what the item has (code, paper, venue) as
fields (filters). Equal scores are ordered newest first,
then as `latest` lists a day's items (the last to arrive first: the feed's own order), so both stores, a
search of a date span and `latest` give the same order.

Memory: tantivy holds the indexed text; Python holds only an Entry per item (what ranking and filters ask of
every candidate). The items a search returns are read from the database (`hits_of`, one query), so the
archive's text is never held twice.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import tantivy
from msgspec import Struct, field

from bot import memory
from bot.feed import kind_of
from bot.models import Item, SearchHit
from bot.search.analysis import ANALYZER_NAME, analyzer, kept_apart
from bot.search.authors import Directory, written
from bot.store import Store
from bot.store.models import from_iso

TITLE_BOOST = 5.0
AUTHORS_BOOST = 0.5
TEXT_FIELDS = (("title", TITLE_BOOST), ("summary", 1.0), ("authors", AUTHORS_BOOST))
WRITER_HEAP = 64_000_000
WRITER_THREADS = 2
REBUILD_SHARE = 0.2


class Entry(NamedTuple):
    """What the index keeps in Python of each item: what ranking and filtering ask of every candidate. Its
    text is in the database, which gives the hits (and in tantivy's index)."""

    published: str  # the row's ISO-8601 UTC text, which sorts as the time does
    kind: str  # as `_kind` gives it
    digest: str  # of the text its vector is computed from (`item_text`)
    written: int  # a hash of the whole row: a write that changed nothing is not indexed again
    arrived: int  # the row's pk: the order items arrived in, which orders a day's items (`listed`)
    authors: tuple[str, ...] = ()  # as the row holds them: what `author:` filters match (`authors_of`)


class Snapshot(Struct, frozen=True):
    index: tantivy.Index
    searcher: tantivy.Searcher
    entries: dict[str, Entry]  # id -> Entry, for every item of the archive
    marker: int
    corrections: dict[str, tuple[str, str] | None]  # word -> (term, surface) (see _correct)
    order: list[str]  # the ids in `entries` order: a document's fast field "n" is its id's place here
    derived: dict[str, Directory] = field(default_factory=dict)  # built from `entries` on first use


def authors_of(snapshot: Snapshot) -> Directory:
    """The archive's author names (bot.search.authors), built from the snapshot's entries the first time
    they are asked for (two threads may both build it: the same answer)."""
    found = snapshot.derived.get("authors")
    if found is None:
        found = snapshot.derived["authors"] = Directory.of(
            (item_id, entry.authors) for item_id, entry in snapshot.entries.items() if entry.authors)
    return found


def ids_of(snapshot: Snapshot, addresses: Sequence[Any]) -> list[str]:
    """The item ids of the documents at `addresses` (tantivy DocAddresses): each document's place in
    `snapshot.order`, read in one call from a fast field. Every search reads the ids of its best 50 hits,
    twice; reading them from the stored documents took most of a search's keyword time."""
    if not addresses:
        return []
    places = snapshot.searcher.fast_field_values("n", list(addresses))  # every document has one
    return [snapshot.order[n] if isinstance(n, int) else "" for n in places]


def item_text(title: str, summary: str | None) -> str:
    """What an item's vector is computed from: its title and abstract."""
    return f"{title}. {' '.join((summary or '').split())}"


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def _entry(row: dict[str, Any]) -> Entry:
    return Entry(row["published"], _kind(row), digest(item_text(row["title"], row["summary"])), _hash(row),
                 int(row["pk"]), _authors(row))


def _authors(row: dict[str, Any]) -> tuple[str, ...]:
    try:
        names = json.loads(row["authors"] or "[]")
    except ValueError:
        return ()
    return tuple(str(n) for n in names if n) if isinstance(names, list) else ()


def listed(snapshot: Snapshot, ranked: Iterable[tuple[float, str, str]]) -> list[tuple[float, str, str]]:
    """(score, published, id) in the order results are listed: best first, then newest, then the last to
    arrive, as `Store.latest` lists a day's items (the feed's order: a poll stores its oldest item first)."""
    entries = snapshot.entries

    def place(hit: tuple[float, str, str]) -> tuple[float, str, int]:
        return hit[0], hit[1], entries[hit[2]].arrived if hit[2] in entries else -1

    return sorted(ranked, key=place, reverse=True)


def _hash(row: dict[str, Any]) -> int:
    return hash(tuple(row.values()))


def items(store: Store, ids: Sequence[str]) -> list[Item]:
    """The items of `ids` as the database holds them, in that order (one gone since is left out)."""
    found = store.get_items(list(dict.fromkeys(ids)))
    return [found[item_id] for item_id in ids if item_id in found]


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    for name, _ in TEXT_FIELDS:
        builder.add_text_field(name, tokenizer_name=ANALYZER_NAME, index_option="position")
    builder.add_text_field("kind", tokenizer_name="raw")
    builder.add_text_field("author", tokenizer_name="raw")  # each author's name as written: author: filters
    # venue: its words, lower-cased (venue:icml, venue:"neurips 2025"); has: code, paper, venue (has:code)
    builder.add_text_field("venue", tokenizer_name="default", index_option="position")
    builder.add_text_field("has", tokenizer_name="raw")
    builder.add_date_field("published", indexed=True, fast=True)
    builder.add_unsigned_field("n", fast=True)  # the id's place in Snapshot.order
    return builder.build()


SCHEMA = _schema()


def build(store: Store, previous: Snapshot | None = None) -> Snapshot:
    """The index of the whole archive (the marker is read first: the rows are at least that new), its rows
    read a page at a time (`Store.each_item`) and kept only as Entries. Given the previous snapshot, only the
    rows written since its marker are read (`Store.changed_items`) and re-indexed, in its index (unless more
    than REBUILD_SHARE of them changed: then a new index, whose statistics hold no deleted documents). Items
    are never deleted by the bot: when the archive holds fewer items than the snapshot's entries with the
    changes applied, some were, and the whole archive is read again."""
    marker = store.change_marker()
    if previous is not None:
        written, count = store.changed_items(previous.marker)
        changed = [row for row in written if _written(previous, row)]
        entries = previous.entries | {row["id"]: _entry(row) for row in changed}
        if len(entries) == count and len(changed) <= REBUILD_SHARE * max(count, 1):
            index = previous.index
            writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
            order = previous.order + [item_id for item_id in entries if item_id not in previous.entries]
            wanted = {row["id"] for row in changed}  # an edited item keeps its place, a new one is appended
            place = {item_id: n for n, item_id in enumerate(order) if item_id in wanted}
            for row in changed:
                writer.delete_documents_by_term("id", row["id"])
                writer.add_document(_document(row, place[row["id"]]))
            return _committed(index, writer, entries, marker, order, _derived(previous, changed, entries))
    return _new_index(store.each_item(), marker)


def _written(previous: Snapshot, row: dict[str, Any]) -> bool:
    """Whether `row` differs from what `previous` indexed of it (or is new)."""
    known = previous.entries.get(row["id"])
    return known is None or known.written != _hash(row)


def _new_index(rows: Iterable[dict[str, Any]], marker: int) -> Snapshot:
    index = tantivy.Index(SCHEMA)
    index.register_tokenizer(ANALYZER_NAME, analyzer())
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=WRITER_THREADS)
    entries: dict[str, Entry] = {}
    for row in rows:  # ids are the store's primary key: each comes once
        writer.add_document(_document(row, len(entries)))
        entries[row["id"]] = _entry(row)
    snapshot = _committed(index, writer, entries, marker, list(entries))
    memory.give_back()  # the writer's buffers and the rows read
    return snapshot


def _derived(previous: Snapshot, changed: list[dict[str, Any]], entries: dict[str, Entry]
             ) -> dict[str, Directory]:
    """What the refreshed snapshot derives, carried over from `previous` with the changed rows applied (the
    archive's author names: `authors_of`), so a refresh costs what changed, not the archive."""
    names = previous.derived.get("authors")
    if names is None:
        return {}
    old = previous.entries
    changes = [(row["id"], old[row["id"]].authors if row["id"] in old else (), entries[row["id"]].authors)
               for row in changed]
    return {"authors": names.updated(c for c in changes if c[1] != c[2])}


def _committed(index: tantivy.Index, writer: tantivy.IndexWriter, entries: dict[str, Entry], marker: int,
               order: list[str], derived: dict[str, Directory] | None = None) -> Snapshot:
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    return Snapshot(index, index.searcher(), entries, marker, {}, order, derived or {})


def _document(row: dict[str, Any], n: int) -> tantivy.Document:
    doc = tantivy.Document()
    doc.add_text("id", row["id"])
    doc.add_unsigned("n", n)
    doc.add_text("title", kept_apart(row["title"]))
    doc.add_text("summary", kept_apart(row["summary"] or ""))
    names = json.loads(row["authors"] or "[]")
    doc.add_text("authors", kept_apart(" \n ".join(names)))
    for name in dict.fromkeys(written(str(n)) for n in names if n):
        doc.add_text("author", name)
    doc.add_text("kind", _kind(row))
    doc.add_text("venue", row.get("venue") or "")
    for column, held in (("code_url", "code"), ("paper_url", "paper"), ("venue", "venue")):
        if row.get(column):
            doc.add_text("has", held)
    published = from_iso(row["published"])
    if published is not None:
        doc.add_date("published", published)
    return doc


def _kind(row: dict[str, Any]) -> str:
    """The item's kind as `bot.store.models.row_item` gives it (without parsing every link)."""
    if row["kind"] == "update" or ("/updates/" in row["link"] and kind_of(row["link"]) == "update"):
        return "update"
    return "research"


def _with_ties(
    searcher: tantivy.Searcher, query: tantivy.Query, limit: int
) -> tuple[list[tuple[Any, Any]], int]:
    """tantivy's best hits for `query`: at least `limit`, and every hit tied with the `limit`-th (read in
    growing pages), so which of the tied ones are kept never depends on how tantivy breaks ties; and how many
    documents match in all."""
    wanted = limit + 1
    while True:
        found = searcher.search(query, wanted, count=True)
        hits = found.hits
        if len(hits) < wanted or hits[-1][0] < hits[limit - 1][0]:
            return _through_ties(hits, limit), _count(found)
        wanted *= 4


def _through_ties(hits: list[tuple[Any, Any]], limit: int) -> list[tuple[Any, Any]]:
    """`hits` (best first) through the last whose score, rounded as the callers rank it, ties the
    `limit`-th's: no later one can be kept. A page read for ties holds up to four times `limit` hits, and
    reading each one's id cost a tenth of a search's CPU (bench_app's first-words load)."""
    if len(hits) <= limit:
        return hits
    last = _score(hits[limit - 1][0])
    end = limit
    while end < len(hits) and _score(hits[end][0]) >= last:
        end += 1
    return hits[:end]


def _score(raw: Any) -> float:
    """A tantivy score as hits are ranked by it: to 6 decimals, so both stores order them alike."""
    return round(float(raw), 6)


def keyword_scores(
    snapshot: Snapshot, query: tantivy.Query, limit: int
) -> tuple[list[tuple[float, str]], int]:
    """The best `limit` (score, id), best first, without building Items (the hybrid ranking's candidates),
    and how many items match; ties with the last place are all read, as in `ranked`, so both stores pick the
    same."""
    searcher = snapshot.searcher
    hits, matched = _with_ties(searcher, query, limit)
    found = [(_score(score), item_id)
             for (score, _), item_id in zip(hits, ids_of(snapshot, [a for _, a in hits]), strict=True)]
    return sorted(found, key=lambda hit: (-hit[0], hit[1]))[:limit], matched


def ranked_hits(
    snapshot: Snapshot, query: tantivy.Query, limit: int, store: Store
) -> tuple[list[SearchHit], int]:
    """The best `limit` hits (in `listed` order) and how many match. Hits tied with the last place are all
    read, so the order never depends on how tantivy breaks ties."""
    searcher = snapshot.searcher
    hits, matched = _with_ties(searcher, query, limit)
    # (score, published, id): published as the row's ISO-8601 UTC text, which sorts as the time does; only
    # the hits kept become Items.
    ranked: list[tuple[float, str, str]] = []
    for (score, _), key in zip(hits, ids_of(snapshot, [a for _, a in hits]), strict=True):
        ranked.append((_score(score), snapshot.entries[key].published, key))
    return hits_of(store, listed(snapshot, ranked)[:limit]), matched


def newest_hits(
    snapshot: Snapshot, query: tantivy.Query, limit: int, store: Store
) -> tuple[list[SearchHit], int]:
    """The newest `limit` items `query` (filters only, no words) selects, in `listed` order, and how many it
    selects: read in tantivy's order of the publication date, so a search of a date span reads `limit`
    hits, not every item of the span."""
    searcher = snapshot.searcher
    entries = snapshot.entries
    wanted = limit + 1
    while True:  # every item dated as the limit-th is read, so both stores keep the same ones
        found = searcher.search(query, wanted, count=True, order_by_field="published",
                                order=tantivy.Order.Desc)
        keys = ids_of(snapshot, [address for _, address in found.hits])
        days = [entries[k].published if k in entries else "" for k in keys]
        if len(keys) < wanted or days[-1] != days[limit - 1]:
            break
        wanted *= 4
    ranked = listed(snapshot, ((0.0, day, k) for k, day in zip(keys, days, strict=True) if k in entries))
    return hits_of(store, ranked[:limit]), _count(found)


def _count(found: Any) -> int:
    """How many documents matched (tantivy's `SearchResult.count`, asked for with count=True)."""
    return int(getattr(found, "count", None) or 0)


def hits_of(store: Store, ranked: list[tuple[float, str, str]]) -> list[SearchHit]:
    """(score, published, id), best first, as SearchHits: the items read from the database."""
    scores = {key: score for score, _, key in ranked}
    return [SearchHit(item, scores[item.id]) for item in items(store, list(scores))]
