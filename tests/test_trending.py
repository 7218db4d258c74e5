"""What the team is reading (issue 55, point 5), on both stores: `/mlresearch trending`, the App Home's
section and the end of a weekly digest. Counts per workspace (two workspaces never see each other's), over 30
days; Related opens recorded per workspace, item and day from the signed app's button and from the command;
no person named; one line for a workspace with nothing yet; Apple's topics of the month from the glossary.
Slack is tests/fakes/slack_api.py over loopback; the time is passed in where the window is tested."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from msgspec.structs import replace

from bot import trending
from bot.commands import Invocation, Reply, Services, handle
from bot.config import Settings
from bot.digest import Digester, Schedule
from bot.models import Item, Validators
from bot.route import ingest
from bot.search.glossary import topics_named
from bot.slackweb import make_client
from bot.store import MIGRATIONS, Store, iso, open_store, utcnow
from bot.store.trending import MAX_ROWS
from tests.fakes.archive import make_item
from tests.fakes.recorder import Recorder
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_sender import command_body, http, signed_headers
from tests.test_follows import FORM, App, published, rendered
from tests.test_follows import app as app  # noqa: F401 - the signed app over each store, with FakeSlack

TEAM, OTHER = "T0FAKE", "T0OTHER"
ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
LLM = make_item("llm-1", "Scaling Large Language Models on Device",
                "Large language models (LLMs) that run on the phone.", day="2026-11-03")
SPEECH = make_item("asr-1", "Streaming Speech Recognition", "Automatic speech recognition (ASR) for Siri.",
                   day="2026-11-10")
RLHF = make_item("rlhf-1", "Preference Tuning at Scale",
                 "Reinforcement learning from human feedback for LLMs.", day="2026-11-20")
EVIL = make_item("evil-1", "<!channel> <@U123> & <https://evil.example|click>", "Nothing here.",
                 day="2026-10-02")
ITEMS = (LLM, SPEECH, RLHF, EVIL)


def filled(store: Store) -> Store:
    store.add_items(ITEMS)
    return store


def ask(store: Store, text: str, team: str = TEAM, user: str = ALICE, now: datetime | None = None) -> Reply:
    clock = (lambda: now) if now is not None else utcnow
    return handle(Invocation(text=text, team_id=team, channel_id="C0GENERAL", user_id=user),
                  Services(store=store, settings=Settings(), clock=clock))


def answered(store: Store, team: str, ts: str, shown: Sequence[Item]) -> str:
    """An answer the bot gave in `team` showing `shown` (as bot.conversation settles one); its reply's ts."""
    store.claim_question(team, "D0ALICE", ts, ts, f"Ev{ts}")
    listed = [{"id": i.id, "title": i.title, "link": i.link} for i in shown]
    store.settle_question(team, "D0ALICE", ts, state="answered", understood="{}", reply_ts=f"{ts}9",
                          shown=json.dumps(listed))
    return f"{ts}9"


def ids(counts: Sequence[tuple[Item, int]]) -> list[tuple[str, int]]:
    return [(item.id, n) for item, n in counts]


def activity(store: Store) -> None:
    """In TEAM: LLM saved by three people, SPEECH by one; two 👍 on an answer showing RLHF and LLM, a 👎 on
    one showing SPEECH; SPEECH opened twice through Related. In OTHER: EVIL saved once and opened once."""
    for user in (ALICE, BOB, CAROL):
        assert store.save_item(TEAM, user, LLM.id) == "saved"
    store.save_item(TEAM, ALICE, SPEECH.id)
    liked = answered(store, TEAM, "1700000000.000100", [RLHF, LLM])
    assert store.record_feedback(TEAM, "D0ALICE", liked, ALICE, "up") == "stored"
    assert store.record_feedback(TEAM, "D0ALICE", liked, BOB, "up") == "stored"
    disliked = answered(store, TEAM, "1700000000.000200", [SPEECH])
    store.record_feedback(TEAM, "D0ALICE", disliked, ALICE, "down")
    store.record_related_open(TEAM, SPEECH.id)
    store.record_related_open(TEAM, SPEECH.id)
    store.save_item(OTHER, ALICE, EVIL.id)
    store.record_related_open(OTHER, EVIL.id)


# --- the counts ------------------------------------------------------------------------------------------


def test_each_workspace_counts_only_its_own_saves_votes_and_opens(store: Store) -> None:
    activity(filled(store))
    mine = trending.trending(store, TEAM)
    assert ids(mine.saved) == [(LLM.id, 3), (SPEECH.id, 1)]
    assert ids(mine.liked) == [(RLHF.id, 2), (LLM.id, 2)]  # as the answer listed them; 👎 counts nothing
    assert ids(mine.opened) == [(SPEECH.id, 2)]
    theirs = trending.trending(store, OTHER)
    assert ids(theirs.saved) == [(EVIL.id, 1)] and ids(theirs.opened) == [(EVIL.id, 1)] and not theirs.liked
    assert trending.trending(store, "T0NOBODY").quiet


def test_a_vote_changed_to_down_and_an_item_taken_off_a_list_no_longer_count(store: Store) -> None:
    activity(filled(store))
    store.record_feedback(TEAM, "D0ALICE", "1700000000.0001009", BOB, "down")
    store.unsave_item(TEAM, CAROL, LLM.id)
    report = trending.trending(store, TEAM)
    assert ids(report.liked) == [(RLHF.id, 1), (LLM.id, 1)] and ids(report.saved)[0] == (LLM.id, 2)


def test_the_window_is_the_last_30_days(store: Store) -> None:
    activity(filled(store))
    now = utcnow()
    inside = trending.trending(store, TEAM, now + timedelta(days=29))
    assert inside.saved and inside.liked and inside.opened
    outside = trending.trending(store, TEAM, now + timedelta(days=31, hours=1))
    assert outside.quiet, "saves, votes and opens older than 30 days are not counted"
    store.record_related_open(TEAM, RLHF.id, now=now + timedelta(days=31))
    assert ids(trending.trending(store, TEAM, now + timedelta(days=31, hours=1)).opened) == [(RLHF.id, 1)]


def test_votes_cast_before_the_upgrade_are_counted_after_it(database_url: str) -> None:
    old = open_store(database_url)
    old.migrate(stop_before="m021_related_opens")
    filled(old)
    ts = answered(old, TEAM, "1700000000.000300", [SPEECH, LLM])
    with old.connect() as db:  # a vote as the release before wrote it (no item_ids)
        db.execute("INSERT INTO feedback (team_id, channel_id, message_ts, user_id, vote, understood, shown, "
                   "voted_at) SELECT team_id, channel_id, reply_ts, ?, 'up', understood, shown, ? "
                   "FROM answered_events WHERE reply_ts = ?", [ALICE, iso(utcnow()), ts])
    assert open_store(database_url).migrate() == list(MIGRATIONS[MIGRATIONS.index("m021_related_opens"):])
    assert ids(trending.trending(old, TEAM).liked) == [(LLM.id, 1), (SPEECH.id, 1)]  # a tie: last id first
    with old.connect() as db:
        assert db.one("SELECT item_ids FROM feedback")[0] == f"{SPEECH.id}\n{LLM.id}"


def test_related_counters_older_than_they_are_kept_are_deleted(store: Store) -> None:
    filled(store)
    long_ago = utcnow() - timedelta(days=60)
    store.record_related_open(TEAM, LLM.id, now=long_ago)
    assert store.most_opened(TEAM, long_ago - timedelta(days=1), 5) == [(LLM.id, 1)]
    store.record_related_open(TEAM, SPEECH.id)  # a new open deletes the counters past KEEP_DAYS
    assert store.most_opened(TEAM, long_ago - timedelta(days=1), 5) == [(SPEECH.id, 1)]


def test_the_related_command_counts_an_open_in_its_workspace_and_never_a_person(store: Store) -> None:
    filled(store)
    reply = ask(store, f"related {SPEECH.link}", team=OTHER)
    assert "Streaming Speech Recognition" in reply.text
    assert store.most_opened(OTHER, utcnow() - timedelta(days=1), 5) == [(SPEECH.id, 1)]
    assert store.most_opened(TEAM, utcnow() - timedelta(days=1), 5) == []
    assert ask(store, "related nothing matches zebrafinch", team=OTHER).text  # no item: nothing counted
    assert store.most_opened(OTHER, utcnow() - timedelta(days=1), 5) == [(SPEECH.id, 1)]
    with store.connect() as db:
        columns = [c[0] for c in db.execute("SELECT * FROM related_opens").description]
    assert columns == ["team_id", "day", "item_id", "opens"], "no user id is stored with an open"


def test_the_related_button_is_counted_through_the_signed_app(store: Store, app: App) -> None:
    filled(store)
    with Recorder() as hooks:
        assert app.click("related_item", LLM.id, response_url=hooks.url("/r/1")) == 200
        assert app.click("related_item", LLM.id, team=OTHER, user=BOB, response_url=hooks.url("/r/2")) == 200
        assert app.click("related_item", LLM.id, user=BOB, response_url=hooks.url("/r/3")) == 200
        assert hooks.wait_for(lambda r: len(r.requests) >= 3)  # each answered after its open was counted
        assert all(LLM.title in rendered(r.json) for r in hooks.requests)  # the Related reply, about LLM
    day = utcnow() - timedelta(days=1)
    assert store.most_opened(TEAM, day, 5) == [(LLM.id, 2)]
    assert store.most_opened(OTHER, day, 5) == [(LLM.id, 1)]


# --- counts kept between calls (bench_store: a process keeps each workspace's latest reading) ------------


def test_a_save_a_vote_and_an_open_count_at_once_after_the_counts_were_kept(store: Store) -> None:
    activity(filled(store))
    view = store.thread_view()  # as a request thread reads
    assert ids(trending.trending(view, TEAM).saved) == [(LLM.id, 3), (SPEECH.id, 1)]
    for user in ("U0DAVE", "U0ERIN", "U0FRANK"):
        store.save_item(TEAM, user, SPEECH.id)
    assert ids(trending.trending(view, TEAM).saved) == [(SPEECH.id, 4), (LLM.id, 3)]
    store.unsave_item(TEAM, ALICE, LLM.id)
    store.record_feedback(TEAM, "D0ALICE", "1700000000.0001009", BOB, "down")
    store.record_related_open(TEAM, RLHF.id)
    report = trending.trending(view, TEAM)
    assert ids(report.saved) == [(SPEECH.id, 4), (LLM.id, 2)]
    assert ids(report.liked) == [(RLHF.id, 1), (LLM.id, 1)]
    assert ids(report.opened) == [(SPEECH.id, 2), (RLHF.id, 1)]
    assert ids(trending.trending(view, OTHER).saved) == [(EVIL.id, 1)], "a workspace's own counts"


def test_another_process_writing_is_seen_by_this_ones_next_call(database_url: str) -> None:
    here, there = open_store(database_url), open_store(database_url)  # two dynos' stores
    here.migrate()
    activity(filled(here))
    assert ids(trending.trending(here, TEAM).saved) == [(LLM.id, 3), (SPEECH.id, 1)]
    there.save_item(TEAM, "U0DAVE", SPEECH.id)
    assert ids(trending.trending(here, TEAM).saved)[1] == (SPEECH.id, 2)
    with there.connect() as db:  # a save written as an older release, or a person at a SQL prompt, would
        db.execute("INSERT INTO saved_items (team_id, user_id, item_id, saved_at) VALUES (?, ?, ?, ?)",
                   [TEAM, "U0ERIN", RLHF.id, iso(utcnow())])
    assert ids(trending.trending(here, TEAM).saved) == [(LLM.id, 3), (SPEECH.id, 2), (RLHF.id, 1)]
    there.add_items([replace(LLM, title="Scaling Large Language Models, Revised")])  # the archive changes
    assert trending.trending(here, TEAM).saved[0][0].title == "Scaling Large Language Models, Revised"
    november = datetime(2026, 11, 25, tzinfo=UTC)
    assert trending.trending(here, TEAM, november).published == 3
    there.add_items([make_item("asr-2", "Speech Recognition Again", "ASR.", day="2026-11-24")])
    report = trending.trending(here, TEAM, november)
    assert report.published == 4 and ("automatic speech recognition", 2) in report.topics


def test_the_window_edge_is_exact_after_the_counts_were_kept(store: Store) -> None:
    filled(store)
    store.save_item(TEAM, ALICE, LLM.id)
    store.record_related_open(TEAM, SPEECH.id)
    saved_at = store.saved_items(TEAM, ALICE)[0].saved_at
    window = timedelta(days=trending.WINDOW_DAYS)
    last_day = datetime.combine(saved_at.date(), datetime.min.time(), UTC) + window + timedelta(days=1)
    assert ids(trending.trending(store, TEAM, saved_at + window).saved) == [(LLM.id, 1)]  # kept, then:
    late = trending.trending(store, TEAM, saved_at + window + timedelta(seconds=1))
    assert not late.saved and ids(late.opened) == [(SPEECH.id, 1)], "the save left the window, the day not"
    back = trending.trending(store, TEAM, saved_at + window)  # the window a second back: read again
    assert ids(back.saved) == [(LLM.id, 1)]
    assert trending.trending(store, TEAM, last_day - timedelta(seconds=1)).opened
    assert trending.trending(store, TEAM, last_day).quiet, "the open's day left the window"


def test_a_count_reads_the_newest_saves_of_the_window(store: Store) -> None:
    filled(store)
    now = utcnow()
    older = [(TEAM, f"U{n:05d}", LLM.id, iso(now - timedelta(days=20))) for n in range(MAX_ROWS // 2 + 200)]
    newer = [(TEAM, f"U{n:05d}", SPEECH.id, iso(now - timedelta(days=1))) for n in range(MAX_ROWS // 2 - 100)]
    with store.connect() as db:
        for rows in (older, newer):
            values = ", ".join(["(?, ?, ?, ?)"] * len(rows))
            db.execute(f"INSERT INTO saved_items (team_id, user_id, item_id, saved_at) VALUES {values}",
                       [v for row in rows for v in row])
    assert ids(trending.trending(store, TEAM, now).saved) == [(LLM.id, MAX_ROWS // 2 + 100),
                                                             (SPEECH.id, MAX_ROWS // 2 - 100)]


# --- what people see ---------------------------------------------------------------------------------------


def command(app: App, text: str, team: str = TEAM) -> dict[str, Any]:
    """A signed `/mlresearch` into the app, and its answer (the ack's body)."""
    body = command_body(text, team=team)
    url = f"http://127.0.0.1:{app.server.effective_port}/slack/events"
    status, raw = http("POST", url, body, signed_headers(body, FORM))
    assert status == 200
    answer: dict[str, Any] = json.loads(raw)
    return answer


def test_trending_answers_ephemerally_with_the_counts_and_no_one_named(store: Store, app: App) -> None:
    activity(filled(store))
    answer = command(app, "trending")
    assert answer["response_type"] == "ephemeral"
    shown = rendered(answer)
    assert "What the team is reading" in shown
    assert (f"*Saved most:* <{LLM.link}|{LLM.title}> (3 saves) · <{SPEECH.link}|{SPEECH.title}> (1 save)"
            in shown)
    assert f"*👍 most in answers:* <{RLHF.link}|{RLHF.title}> (2) · <{LLM.link}|{LLM.title}> (2)" in shown
    assert f"*Opened most through Related:* <{SPEECH.link}|{SPEECH.title}> (2 opens)" in shown
    assert "Counts from this workspace over the last 30 days; no one is named." in shown
    for person in (ALICE, BOB, CAROL, "<@"):
        assert person not in json.dumps(answer)
    assert EVIL.link not in json.dumps(answer), "another workspace's counts"


def test_a_workspace_with_no_activity_says_so_in_one_line(store: Store, app: App) -> None:
    filled(store)
    lines = trending.lines(trending.trending(store, TEAM))
    assert lines[0] == trending.QUIET and len(lines) == 2 and lines[1].startswith("*Apple's topics")
    answer = command(app, "trending")
    section = next(b for b in answer["blocks"] if b["type"] == "section")["text"]["text"]
    assert section.splitlines()[0] == trending.QUIET
    assert "Saved most" not in section and "Opened most" not in section


def test_trending_with_words_is_one_line_of_usage(store: Store) -> None:
    reply = ask(filled(store), "trending this week")
    assert reply.text == "`/mlresearch trending` takes no words; it says what this workspace reads most."


def test_titles_are_inert(store: Store) -> None:
    filled(store)
    store.save_item(TEAM, ALICE, EVIL.id)
    shown = "\n".join(trending.lines(trending.trending(store, TEAM)))
    for live in ("<!channel>", "<@U123>", "<https://evil.example"):
        assert live not in shown
    assert f"<{EVIL.link}|&lt;!channel&gt; &lt;@U123&gt; &amp; &lt;https://evil.example|click&gt;> (1 save)" \
        in shown


def test_the_app_home_has_the_teams_reading(store: Store, app: App, slack_api: FakeSlack) -> None:
    activity(filled(store))
    assert app.open_home() == 200
    view = published(slack_api, ALICE, 1)
    headers = [b["text"]["text"] for b in view["blocks"] if b["type"] == "header"]
    assert headers[1:5] == ["Your reading list", "Your follows", "What the team is reading", "Latest"]
    at = next(n for n, b in enumerate(view["blocks"]) if b.get("text", {}).get("text") ==
              "What the team is reading")
    section = view["blocks"][at + 1]["text"]["text"]
    assert section.startswith(f"*Saved most:* <{LLM.link}|")
    assert "*Opened most through Related:*" in section and EVIL.link not in section
    assert BOB not in json.dumps(view) and CAROL not in json.dumps(view)


def test_the_app_home_of_a_quiet_workspace_says_so(store: Store, app: App, slack_api: FakeSlack) -> None:
    filled(store)
    assert app.open_home() == 200
    assert trending.QUIET in rendered(published(slack_api, ALICE, 1))


# --- Apple's topics of the month ---------------------------------------------------------------------------


def test_the_topics_are_the_glossarys_most_named_this_month(store: Store) -> None:
    filled(store)
    report = trending.trending(store, TEAM, datetime(2026, 11, 25, tzinfo=UTC))
    assert (report.month, report.published, report.latest) == (datetime(2026, 11, 1, tzinfo=UTC), 3, False)
    assert list(report.topics) == [("large language model", 2), ("automatic speech recognition", 1),
                                   ("reinforcement learning from human feedback", 1)]
    assert trending.topics_line(report) == (
        "*Apple's topics in November 2026* (3 items): large language model (2) · automatic speech "
        "recognition (1) · reinforcement learning from human feedback (1)")
    december = trending.trending(store, TEAM, datetime(2026, 12, 2, tzinfo=UTC))  # a month on: read again
    assert (december.month, december.published, december.latest) == (report.month, 3, True)


def test_a_month_without_items_yet_shows_the_latest_month_that_has(store: Store) -> None:
    filled(store)
    report = trending.trending(store, TEAM, datetime(2027, 2, 2, tzinfo=UTC))
    assert (report.month, report.latest) == (datetime(2026, 11, 1, tzinfo=UTC), True)
    assert trending.topics_line(report).startswith(
        "*Apple's topics in November 2026, the latest month with items* (3 items): large language model (2)")
    empty = trending.trending(store, TEAM, datetime(2026, 9, 5, tzinfo=UTC))  # nothing then, nor before
    assert trending.topics_line(empty) == "*Apple's topics:* no item published yet."


def test_topics_named_by_a_text() -> None:
    assert topics_named("We train LLMs with RLHF.") == (
        "large language model", "reinforcement learning from human feedback")
    assert topics_named("the lm and Llm of it") == (), "an abbreviation counts as the glossary writes it"
    assert topics_named("a vision language model") == ("vision language model",), "the most specific"
    assert topics_named("Episodic KV Cache Management") == ("key-value cache",)
    assert topics_named("nothing of the field") == ()


# --- the weekly digest --------------------------------------------------------------------------------------


def test_a_weekly_digest_ends_with_the_teams_reading_and_a_daily_one_does_not(
    store: Store, slack_api: FakeSlack
) -> None:
    feed = "https://machinelearning.apple.com/rss.xml"
    now = utcnow()
    ingest(store, feed, [EVIL], Validators(), at=now)  # the baseline poll
    activity(filled(store))
    dues = []
    for channel, mode in (("C0WEEKLY", "weekly"), ("C0DAILY", "daily")):
        store.subscribe(TEAM, channel, ALICE)
        sub = store.set_digest(TEAM, channel, mode, "09:00", "UTC", now=now)
        schedule = Schedule.of(sub) if sub is not None else None
        assert schedule is not None
        dues.append(schedule.next_after(now))
    fresh = make_item("fresh-1", "A Paper of This Week", "Nothing of note.", day="2026-12-01")
    ingest(store, feed, [EVIL, fresh], Validators(), at=now + timedelta(minutes=1))
    web = make_client("xoxb-test", slack_api.url, backoff=0.01)
    assert Digester(lambda team_id: web, clock=lambda: max(dues) + timedelta(minutes=5))(store).delivered == 2
    posted = {mode: [m for m in slack_api.posts(channel)
                     if (m.get("metadata") or {}).get("event_type") == "mlresearch_digest"][0]
              for channel, mode in (("C0WEEKLY", "weekly"), ("C0DAILY", "daily"))}
    blocks = posted["weekly"]["blocks"]
    assert [b["type"] for b in blocks[-2:]] == ["divider", "section"]
    end = blocks[-1]["text"]["text"].splitlines()
    assert end[0] == "*What the team is reading* (the last 30 days)"
    assert end[1].startswith(f"*Saved most:* <{LLM.link}|") and end[1].endswith("(1 save)")
    assert end[2].startswith("*👍 most in answers:*") and end[3].startswith("*Opened most through Related:*")
    assert end[4].startswith("*Apple's topics")
    assert EVIL.link not in blocks[-1]["text"]["text"] and ALICE not in json.dumps(posted["weekly"])
    assert "What the team is reading" not in json.dumps(posted["daily"])
