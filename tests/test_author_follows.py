"""Following and subscribing by author (issue 55, point 1), on both stores: names matched the way people type
them (case, accents, initials, a surname alone), one rule for search and routing, a "did you mean" for a name
no item holds, the replies saying what each follow matches, bad names refused in one line, and a new item
routed by the authors the research index fills in, through the real poll pipeline (a local feed and index,
Slack's Web API played by FakeSlack)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from bot import blocks
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.models import Audience, Item, Subscription
from bot.pipeline import Pipeline
from bot.route import Router
from bot.search.authors import matches, typed
from bot.search.index import SearchIndex
from bot.search.query import search
from bot.store import Store
from tests.fakes.feed_server import FeedServer
from tests.fakes.feed_server import Reply as FeedReply
from tests.fakes.research_index import INDEX_FIXTURE
from tests.fakes.slack_api import FakeSlack, dm_channel
from tests.test_backfill import FEED, NEWEST, feed_without_newest

TEAM, CHANNEL = "T0FAKE", "C0GENERAL"
ALICE, BOB = "U0ALICE", "U0BOB"
SITE = "https://machinelearning.apple.com/research/"


def paper(slug: str, day: int, *authors: str, title: str = "") -> Item:
    return Item(SITE + slug, slug, title or f"A study of {slug}", SITE + slug, f"We study {slug}.",
                datetime(2026, 1, day, tzinfo=UTC), "research", authors)


PAPERS = [
    paper("speech", 1, "Awni Y. Hannun", "Jane Doe"),
    paper("vision", 2, "Awni Hannun", "Chloé O'Brien-Smith"),
    paper("audio", 3, "A. Hannun"),
    paper("privacy", 4, "Mary Jane Doe", "Doe, Jane"),
    paper("sparse", 5, "Ben Roe", "Bo Roe"),
    paper("flows", 6, "Kim Lee"),
]


@pytest.fixture
def store(store: Store) -> Store:
    """The conftest store (each backend) holding PAPERS."""
    store.add_items(PAPERS)
    return store


def ask(store: Store, text: str, user: str = ALICE, channel: str = CHANNEL) -> Reply:
    return handle(Invocation(text=text, team_id=TEAM, channel_id=channel, user_id=user),
                  Services(store=store, settings=Settings()))


def found(store: Store, text: str) -> set[str]:
    return {hit.item.id for hit in search(SearchIndex(store), text, limit=50).hits}


def slugs(ids: set[str]) -> set[str]:
    return {i.rsplit("/", 1)[-1] for i in ids}


# --- names as people type them ----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "author", "expected"), [
    ("A. Hannun", "Awni Y. Hannun", True),
    ("Awni Hannun", "Awni Y. Hannun", True),  # a middle initial need not be typed
    ("awni HANNUN", "Awni Y. Hannun", True),  # case
    ("A Hannun", "Awni Hannun", True),  # an initial without its dot
    ("Awni Hannun", "A. Hannun", True),  # a given name against the author's initial of it
    ("Hannun", "Awni Y. Hannun", True),  # a surname alone
    ("Chloe OBrien-Smith", "Chloé O'Brien-Smith", True),  # accents
    ("chloé o'brien-smith", "Chloe O'Brien-Smith", True),
    ("Jane Doe", "Doe, Jane", True),  # "Last, First"
    ("Jane Doe", "Mary Jane Doe", False),  # another person
    ("Jane Doe", "Doe Jane", False),
    ("B. Hannun", "Awni Hannun", False),  # the wrong initial
    ("Awni Han", "Awni Hannun", False),  # the surname is matched whole
    ("Awni H.", "Awni Hannun", True),  # ...unless typed as an initial
    ("Jose Nunez", "José Núñez", True),
    ("Lukasz Kaiser", "Łukasz Kaiser", True),  # a letter without a decomposition
])
def test_names_match_the_way_people_type_them(name: str, author: str, expected: bool) -> None:
    assert matches(typed(name), author) is expected


@pytest.mark.parametrize(("text", "said"), [
    ("A. B.", "only initials"),
    ("J.-P.", "only initials"),
    ("x" * 300, "at most 100 characters"),
    ("🎉 🎉", "needs a name"),
    ('""', "needs a name"),
    ("one two three four five six seven eight nine", "at most 8 words"),
])
def test_a_name_no_search_can_take_is_one_line(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        typed(text)


def test_emoji_and_marks_are_left_out_of_a_name() -> None:
    assert typed("Awni 🎉 Hannun").name == "Awni Hannun"
    assert typed("<@U123> Awni Hannun").name == "U123 Awni Hannun"  # no mention survives
    assert typed("Doe, Jane").name == "Jane Doe"


# --- search and routing agree -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("A. Hannun", {"speech", "vision", "audio"}),
    ("Awni Hannun", {"speech", "vision", "audio"}),
    ("hannun", {"speech", "vision", "audio"}),
    ("Jane Doe", {"speech", "privacy"}),  # "Doe, Jane" of privacy; never Mary Jane Doe alone
    ("Chloe O'Brien-Smith", {"vision"}),
    ("B. Roe", {"sparse"}),
    ("Nobody Here", set()),
])
def test_search_by_author_lists_exactly_what_a_follow_of_that_name_receives(
    store: Store, name: str, expected: set[str]
) -> None:
    assert slugs(found(store, f'author:"{name}"')) == expected
    audience = Audience((), (("T1", "U1", (f"author:{typed(name).name}",)),))
    routes = Router().decide(PAPERS, audience)
    assert {r.item_id.rsplit("/", 1)[-1] for r in routes.routes} == expected
    assert all(r.matched == (f"author:{typed(name).name}",) for r in routes.routes)


def test_a_channel_subscribed_to_an_author_gets_only_their_items_at_ingest() -> None:
    sub = Subscription("T1", "C1", "U1", datetime(2026, 1, 1, tzinfo=UTC), ("author:Kim Lee",))
    routes = Router().decide(PAPERS, Audience((sub,), ()))
    assert [(r.item_id, r.target, r.matched) for r in routes.routes] == [
        (SITE + "flows", "channel", ("author:Kim Lee",))]


# --- the commands -------------------------------------------------------------------------------------------


def test_follow_by_initials_follows_the_one_person_and_says_what_it_matches(store: Store) -> None:
    reply = ask(store, 'follow author:"A. Hannun"')
    assert "Following author: Awni Hannun (3 items so far)" in reply.text
    assert store.follows(TEAM, ALICE) == ["author:Awni Hannun"]
    again = ask(store, "follow author:hannun")  # the same person, another spelling
    assert "You already follow that; nothing was changed." in again.text
    assert store.follows(TEAM, ALICE) == ["author:Awni Hannun"]
    listed = ask(store, "follows")
    assert "You follow author: Awni Hannun (3 items so far)" in listed.text


def test_a_surname_several_people_have_is_asked_about_and_nothing_is_stored(store: Store) -> None:
    reply = ask(store, "follow author:Roe")
    assert reply.text.startswith("Several authors in the archive are “Roe”: ")
    assert "“Ben Roe” (1 item)" in reply.text and "“Bo Roe” (1 item)" in reply.text
    assert "Nothing was changed" in reply.text and store.follows(TEAM, ALICE) == []
    assert "Following author: Ben Roe (1 item so far)" in ask(store, 'follow author:"Ben Roe"').text


def test_a_name_no_item_holds_gets_a_did_you_mean_and_nothing_is_stored(store: Store) -> None:
    reply = ask(store, 'follow author:"Awni Hanun"')
    assert reply.text.startswith("No item in the archive has an author named “Awni Hanun”; did you mean "
                                 "“Awni Hannun” (3 items)")
    assert store.follows(TEAM, ALICE) == []
    assert "did you mean “Kim Lee” (1 item)" in ask(store, "subscribe author:Lea").text
    assert store.get_subscription(TEAM, CHANNEL) is None


def test_a_name_nothing_is_close_to_is_followed_for_when_it_publishes(store: Store) -> None:
    reply = ask(store, 'follow author:"Zygmunt Quorra"')
    assert "Following author: Zygmunt Quorra (0 items so far)" in reply.text
    assert store.follows(TEAM, ALICE) == ["author:Zygmunt Quorra"]


@pytest.mark.parametrize(("text", "said"), [
    ('follow author:"Awni "Y" Hannun"', "can't hold quote marks"),
    ("follow author:" + "x" * 300, "at most 100 characters"),
    ('follow author:"A. B."', "only initials"),
    ('follow author:"🎉"', "needs a name"),
    ('subscribe author:"A. B."', "only initials"),
    ('follow author:a author:b author:c author:d', "at most 3 authors"),
])
def test_bad_names_are_one_line_and_store_nothing(store: Store, text: str, said: str) -> None:
    reply = ask(store, text)
    assert said in reply.text and "\n" not in reply.text and "Traceback" not in reply.text
    assert len(reply.blocks) == 1
    assert store.follows(TEAM, ALICE) == [] and store.get_subscription(TEAM, CHANNEL) is None


def test_an_emoji_in_a_name_is_left_out_and_the_person_followed(store: Store) -> None:
    assert "Following author: Kim Lee (1 item so far)" in ask(store, 'follow author:"Kim 🎉 Lee"').text
    assert store.follows(TEAM, ALICE) == ["author:Kim Lee"]


def test_subscribe_and_status_say_what_each_author_matches(store: Store) -> None:
    reply = ask(store, 'subscribe speech author:"jane doe"')
    assert ("I'll post only new items matching `speech`, author: Jane Doe (2 items so far) here"
            in reply.text)
    sub = store.get_subscription(TEAM, CHANNEL)
    assert sub is not None and sub.keywords == ("speech", "author:Jane Doe")
    ask(store, 'follow privacy author:"Chloe OBrien-Smith"')
    status = ask(store, "status").blocks[0]["text"]["text"]
    assert "*This channel:* subscribed to items matching `speech`, author: Jane Doe (2 items so far)" \
        in status
    assert "*Your follows:* author: Chloé O'Brien-Smith (1 item so far), `privacy`" in status


def test_unfollow_by_any_spelling_stops_that_author(store: Store) -> None:
    ask(store, 'follow speech author:"Awni Hannun"')
    reply = ask(store, "unfollow author:HANNUN")
    assert "Stopped following author: Awni Hannun" in reply.text
    assert store.follows(TEAM, ALICE) == ["speech"]
    assert "You don't follow author: Kim Lee" in ask(store, 'unfollow author:"Kim Lee"').text


def test_author_names_in_replies_are_inert(store: Store) -> None:
    store.add_items([paper("evil", 7, "<!channel> Eve &amp; <https://evil.example|Mallory>")])
    reply = ask(store, 'follow author:"Eve Mallory"')
    assert "<!channel>" not in json.dumps(reply.blocks) and "<https://evil" not in json.dumps(reply.blocks)
    menu = blocks.author_menu(("<!channel> Eve", "<@U0BOSS> Bob"))
    assert menu is not None and "<" not in json.dumps(menu)


# --- the More by… menu ------------------------------------------------------------------------------------


def test_the_more_by_menu_keeps_to_slacks_limits() -> None:
    many = tuple(f"Author{n} Surname{n}" for n in range(130)) + ("A. B.", "x" * 150, "Jane Doe", "Doe, Jane")
    menu = blocks.author_menu(many)
    assert menu is not None and menu["type"] == "static_select"
    assert len(menu["options"]) == blocks.AUTHOR_OPTIONS
    assert all(len(o["text"]["text"]) <= 75 and len(o["value"]) <= 150 for o in menu["options"])
    assert blocks.author_menu(("A. B.", "x" * 150)) is None  # no name a search takes: no menu
    only = blocks.author_menu(("Jane Doe", "Doe, Jane", "jane doe"))
    assert only is not None and [o["value"] for o in only["options"]] == ["Jane Doe"]


def test_posts_search_results_and_answers_carry_the_menu(store: Store) -> None:
    post = blocks.item_message(PAPERS[0])
    [actions] = [b for b in post["blocks"] if b["type"] == "actions"]
    assert [o["value"] for o in actions["elements"][-1]["options"]] == ["Awni Y. Hannun", "Jane Doe"]
    assert "A. Y. Hannun, J. Doe" in json.dumps(post["blocks"])  # the authors line under the title
    results = ask(store, "search speech").blocks
    menus = [e for b in results if b["type"] == "actions" for e in b["elements"]
             if e.get("action_id") == blocks.AUTHOR_ACTION_ID]
    assert menus and menus[0]["options"][0]["value"] == "Awni Y. Hannun"


# --- a new item routed by the authors the research index fills in, through the poll pipeline -------------


@pytest.fixture
def site() -> Iterator[FeedServer]:
    """A feed (no authors, as Apple's) that gains its newest item at the second fetch, and the research index
    beside it, which lists that item's authors: Ada Example and Ben Sample."""
    with FeedServer() as fake:
        fake.route("/rss.xml", [FeedReply(body=feed_without_newest()), FeedReply(body=FEED)])
        fake.route("/research", FeedReply(body=INDEX_FIXTURE.read_bytes(), content_type="text/html"))
        yield fake


def posted(slack: FakeSlack, channel: str) -> list[dict[str, Any]]:
    return [m for m in slack.posts(channel) if m.get("metadata")]


def test_a_new_item_reaches_its_authors_followers_and_subscribed_channels_once(
    store: Store, site: FeedServer, slack_api: FakeSlack, database_url: str
) -> None:
    settings = Settings(database_url=database_url, feed_url=site.url("/rss.xml"), slack_bot_token="xoxb-test",
                        slack_api_url=slack_api.url, poll_interval=0)
    with Pipeline.from_settings(settings, store) as pipeline:
        assert pipeline.poll_once(lock_timeout=5).baseline
        assert "(0 items so far)" in ask(store, 'subscribe author:"A. Example"', channel="C0AUTHORS").text
        assert "(0 items so far)" in ask(store, 'follow author:"ben sample"', user=BOB).text
        ask(store, 'subscribe author:"Ada Sample"', channel="C0NOBODY")  # no such person wrote it
        ask(store, 'follow author:"Zed Example"', user=ALICE)
        result = pipeline.poll_once(lock_timeout=5)
        assert result.new == 1
        assert result.delivered == 2
        for _ in range(2):  # nothing more, however often it polls
            assert pipeline.poll_once(lock_timeout=5).delivered == 0
    [post] = posted(slack_api, "C0AUTHORS")
    assert post["metadata"]["event_payload"] == {"item_id": NEWEST}
    assert "By an author you follow: A. Example" in json.dumps(post["blocks"])
    menus = [e for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]
             if e.get("action_id") == blocks.AUTHOR_ACTION_ID]
    assert [o["value"] for o in menus[0]["options"]] == ["Ada Example", "Ben Sample"]
    [dm] = posted(slack_api, dm_channel(BOB))
    assert dm["metadata"]["event_payload"] == {"item_id": NEWEST}
    assert "You follow `author:ben sample`" in json.dumps(dm["blocks"])  # as typed: no item had it yet
    assert posted(slack_api, "C0NOBODY") == [] and posted(slack_api, dm_channel(ALICE)) == []
    assert "author: ben sample (1 item so far)" in ask(store, "follows", user=BOB).text


def test_routes_by_authors_are_not_queued_twice_where_ingest_queued_them(store: Store) -> None:
    """An item whose authors the feed carried was routed at ingest; routing it again by the authors the
    index found queues nothing more."""
    from bot.models import Validators
    from bot.route import by_authors, ingest

    feed = "https://machinelearning.apple.com/rss.xml"
    ingest(store, feed, PAPERS[:1], Validators())  # the baseline
    store.subscribe(TEAM, "C0AUTHORS", ALICE, ["author:Kim Lee"])
    store.follow(TEAM, BOB, ["author:Kim Lee"])
    new = paper("kim", 8, "Kim Lee")
    assert ingest(store, feed, [*PAPERS[:1], new], Validators()).queued == 2
    assert by_authors(store, [new.id]) == 0
    assert by_authors(store, [replace(new, id="nowhere").id]) == 0  # no such item: nothing
    assert sorted((d.channel_id, d.item_id) for d in store.deliveries()) == [
        ("C0AUTHORS", new.id), (BOB, new.id)]


def test_the_archives_names_follow_its_changes_as_a_fresh_build_would(store: Store) -> None:
    """After a poll, the names are updated from what changed (not rebuilt), and say what a rebuild says."""
    from bot.search.engine import authors_of

    store.add_items([paper(f"filler-{n}", 9, f"Filler Person{n}") for n in range(20)])
    index = SearchIndex(store)
    assert slugs({h.item.id for h in search(index, 'author:"Kim Lee"', limit=50).hits}) == {"flows"}
    snapshot = index.current()
    before = authors_of(snapshot)
    store.add_items([paper("kim", 8, "Kim Lee", "Nora Newcomer"),
                     replace(PAPERS[5], authors=("Kim L. Lee", "Ben Roe"))])  # flows: Kim Lee's name changed
    assert index.current().index is snapshot.index, "refreshed, not rebuilt"
    assert "authors" in index.current().derived, "the names carried over, updated"
    after = authors_of(index.current())
    assert after is not before and before.names["Kim Lee"][1] == [PAPERS[5].id]  # the old one as it was
    fresh = authors_of(SearchIndex(store).current())
    assert {n: sorted(ids) for n, (_, ids) in after.names.items()} == {
        n: sorted(ids) for n, (_, ids) in fresh.names.items()}
    assert {w: sorted(n) for w, n in after.by_word.items()} == {
        w: sorted(n) for w, n in fresh.by_word.items()}
    assert slugs({h.item.id for h in search(index, 'author:"Kim Lee"', limit=50).hits}) == {"kim", "flows"}
    assert slugs({h.item.id for h in search(index, "author:Newcomer", limit=50).hits}) == {"kim"}


def test_the_command_lines_status_says_what_each_author_matches(
    store: Store, database_url: str, tmp_path: Path
) -> None:
    """`mlresearch-bot status`, as `/mlresearch status` says it (the count read from the archive's rows)."""
    ask(store, 'subscribe author:"A. Hannun"')
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL")}
    env |= {"PYTHONPATH": str(Path(__file__).resolve().parent.parent), "DATABASE_URL": database_url}
    proc = subprocess.run([sys.executable, "-m", "bot", "status"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    said = f"{TEAM}/{CHANNEL}: subscribed to items matching author: Awni Hannun (3 items so far)"
    assert said in proc.stdout
