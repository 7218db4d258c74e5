"""An item's own page (issue 55, point 3): its paper, code and venue read from pages in the structure of the
real site (tests/data/item_pages/, whose notes say what stored copies confirm; tests/test_item_pages_stored.py
reads those copies), served over loopback; missing fields,
broken, relative and other-host links, a 5,000-character venue, pages that fail; politeness (one request per
new item, the bot's User-Agent, a pace, a size cap) and what the store keeps, on both stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from bot import feed, item_pages, poller
from bot.errors import ItemPageError
from bot.feed import make_client
from bot.item_pages import PageFacts, parse
from bot.models import Item
from bot.paper_facts import MAX_VENUE_CHARS, venue_of
from bot.store import Store
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import PAGES, item_page

HTML = "text/html; charset=utf-8"
SITE = "https://machinelearning.apple.com"
FLOWS = f"{SITE}/research/normalizing-flows"
WORKSHOP = f"{SITE}/research/efficient-reasoning-traces"
START = datetime(2026, 6, 1, tzinfo=UTC)


def page(name: str) -> bytes:
    return (PAGES / f"{name}.html").read_bytes()


def item(slug: str, days: int = 0) -> Item:
    link = f"{SITE}/research/{slug}"
    return Item(id=link, guid=slug, title=f"Paper {slug}", link=link, summary="An abstract.",
                published=START - timedelta(days=days), kind="research")


@pytest.fixture
def site() -> Iterator[FeedServer]:
    with FeedServer() as fake:
        yield fake


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with make_client() as c:
        yield c


class Sleeps:
    """A `sleep` that records the pauses asked for (the pace), without waiting."""

    def __init__(self) -> None:
        self.asked: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)


# --- the page's facts, parsed -----------------------------------------------------------------------------


def test_the_realistic_page_gives_its_paper_code_and_venue_and_nothing_from_around_it() -> None:
    """The "View publication" link (arXiv's PDF, version dropped: its abstract page), "View source code
    (GitHub)", the conference tag "ICML" (a tag names no year, and the page says none); not the arXiv link
    the abstract cites, nor the navigation's, the footer's or the related posts' papers, code and tags."""
    assert parse(page("normalizing-flows"), FLOWS) == PageFacts(
        paper_url="https://arxiv.org/abs/2412.06329",
        code_url="https://github.com/apple/ml-tarflow",
        venue="ICML",
    )


def test_a_workshop_paper_hosted_by_apple_with_code_in_a_folder() -> None:
    assert parse(page("workshop-paper"), WORKSHOP) == PageFacts(
        paper_url="https://docs-assets.developer.apple.com/ml-research/papers/efficient-reasoning-traces.pdf",
        code_url="https://github.com/apple/ml-efficient-reasoning/tree/main/workshop",
        venue="NeurIPS 2025 workshop",
    )


def test_a_page_that_says_none_of_it_gives_nothing() -> None:
    body = "<p>We describe how the keyboard learns new words on device.</p>"
    assert parse(item_page("Keyboard", body), f"{SITE}/research/keyboard") == PageFacts()


def test_each_field_is_found_alone() -> None:
    url = f"{SITE}/research/x"
    only_paper = item_page("X", "<p>Text.</p>", publication="https://openreview.net/pdf?id=AbCd1234")
    assert parse(only_paper, url) == PageFacts(paper_url="https://openreview.net/forum?id=AbCd1234")
    only_code = item_page("X", '<p>See the <a href="https://github.com/apple/ml-x.git">repository</a>.</p>')
    assert parse(only_code, url) == PageFacts(code_url="https://github.com/apple/ml-x")
    only_venue = item_page("X", "<p>This paper was accepted to Interspeech 2025.</p>")
    assert parse(only_venue, url) == PageFacts(venue="Interspeech 2025")


def test_broken_relative_and_other_host_links_are_resolved_or_dropped() -> None:
    """A relative PDF on the site is resolved against the page's canonical address (not the address it was
    read from); javascript:, an empty http://, a protocol-relative and an absolute link to another host, an
    arXiv address without a paper and GitHub's pages that are no repository are dropped."""
    url = f"{SITE}/research/links"
    relative = item_page("Links", "<p>Text.</p>", publication="../papers/links.pdf")
    assert parse(relative, url).paper_url == f"{SITE}/papers/links.pdf"
    body = (
        '<p><a href="javascript:alert(1)">Paper</a> <a href="http://">PDF</a> '
        '<a href="//evil.example/paper.pdf">View publication</a> '
        '<a href="https://evil.example/research/links.pdf">paper</a> '
        '<a href="https://arxiv.org/abs/">arXiv</a> '
        '<a href="https://arxiv.org/abs/2412.06329 onmouseover=x">arXiv</a> '
        '<a href="https://github.com/apple">Code</a> <a href="https://github.com/topics/flows">code</a> '
        '<a href="../code">Code</a> <a href="https://evil.example/apple/ml-x">Code</a> '
        '<a href="https://gіthub.com/apple/ml-x">Code</a> <a href="https://github.com:99999/apple/x">Code</a></p>'
    )
    assert parse(item_page("Links", body), url) == PageFacts()
    escaped = item_page("Links", '<p><a href="https://github.com/apple/ml-&lt;b&gt;">Code</a></p>')
    assert parse(escaped, url).code_url is None, "a name GitHub cannot hold"


@pytest.mark.parametrize(
    ("event", "sentence", "venue"),
    [
        ("ICML", "", "ICML"),  # the tag alone: no year
        ("ICML", "<p>This paper was accepted at ICML 2025.</p>", "ICML 2025"),  # the sentence says the year
        ("ICLR Workshop", "", "ICLR workshop"),
        ("ICLR Workshop", "<p>This paper was accepted at the Workshop on Foo 2026 at ICLR.</p>",
         "ICLR 2026 workshop"),
        ("NeurIPS", "<p>It extends our work presented at ICML 2024.</p>", "NeurIPS"),  # the tag's
        (None, "<p>This paper was accepted at Interspeech 2025.</p>", "Interspeech 2025"),
    ],
)
def test_the_conference_tag_names_the_venue_and_a_sentence_naming_it_the_year(
    event: str | None, sentence: str, venue: str
) -> None:
    related = ('<p><a href="/research/?event=CVPR">conference CVPR</a></p>'
               "<p>This paper was accepted at CVPR 2020.</p>")  # another post's tag and sentence: not read
    assert parse(item_page("T", sentence, event=event, related=related), f"{SITE}/research/t").venue == venue


def test_a_highlight_names_only_what_it_calls_its_own() -> None:
    """A highlight (its label "content type highlight") tells of other papers: a lone paper link and the
    venues its sentences name are not its own; a link it calls the publication, its code and its tag are."""
    body = ('<p>The method, in a paper accepted to CVPR 2025 (see <a href="https://arxiv.org/abs/2501.00001">'
            'this</a>), is available <a href="https://github.com/apple/ml-x/">here</a>; a demo app is in '
            '<a href="https://github.com/apple/ml-x/tree/main/app">its folder</a>.</p>')
    highlight = item_page("H", body).replace(b"<span>content type</span> paper", b"content type highlight")
    assert parse(highlight, f"{SITE}/research/h") == PageFacts(code_url="https://github.com/apple/ml-x")
    named = item_page("H", body, publication="https://arxiv.org/abs/2501.00002", event="CVPR")
    named = named.replace(b"<span>content type</span> paper", b"content type highlight")
    assert parse(named, f"{SITE}/research/h") == PageFacts(
        paper_url="https://arxiv.org/abs/2501.00002", code_url="https://github.com/apple/ml-x", venue="CVPR")
    assert parse(item_page("P", body), f"{SITE}/research/p").venue == "CVPR 2025", "a paper's sentence counts"


def test_a_paper_on_apples_paper_host_is_its_paper() -> None:
    pdf = "https://ml-site.cdn-apple.com/papers/the-illusion-of-thinking.pdf"
    assert parse(item_page("X", "<p>Text.</p>", publication=pdf), f"{SITE}/research/x").paper_url == pdf
    image = "https://ml-site.cdn-apple.com/media/figure.png"
    assert parse(item_page("X", "<p>Text.</p>", publication=image), f"{SITE}/research/x").paper_url is None


def test_several_papers_and_no_named_one_say_nothing() -> None:
    """Two arXiv links and none called the paper: which is this one's cannot be told, so neither is kept; two
    repositories under github.com/apple, neither called code: neither."""
    body = ('<p>Builds on <a href="https://arxiv.org/abs/2301.00001">A</a> and '
            '<a href="https://arxiv.org/abs/2301.00002">B</a>; see '
            '<a href="https://github.com/apple/ml-a">a</a> '
            'and <a href="https://github.com/apple/ml-b">b</a>.</p>')
    assert parse(item_page("Two", body), f"{SITE}/research/two") == PageFacts()


def test_a_page_rendered_in_the_browser_is_read_from_its_data() -> None:
    data = {"props": {"pageProps": {"post": {
        "body": '<p>This paper was accepted at CVPR 2026.</p><p><a href="https://arxiv.org/abs/2603.01234">'
                'Paper</a></p>',
        "relatedPosts": '<p>accepted at ICML 2020 <a href="https://github.com/apple/ml-other">Code</a></p>'}}}}
    shell = ('<!DOCTYPE html><html><head></head><body><div id="__next"></div>'
             f'<script id="__NEXT_DATA__" type="application/json">{json.dumps(data)}</script></body></html>')
    assert parse(shell, f"{SITE}/research/spa") == PageFacts(paper_url="https://arxiv.org/abs/2603.01234",
                                                             venue="CVPR 2026")


@pytest.mark.parametrize(
    ("raw", "venue"),
    [
        ("ICML 2025", "ICML 2025"),
        ("the Efficient Natural Language and Speech Processing (ENLSP) Workshop at NeurIPS 2024",
         "NeurIPS 2024 workshop"),
        ("the International Conference on Learning Representations (ICLR) 2026", "ICLR 2026"),
        ("the Annual Meeting of the Association for Computational Linguistics (ACL 2025)", "ACL 2025"),
        ("NAACL 2025 Findings", "NAACL 2025"),
        ("CVPR'24", "CVPR 2024"),
        ("TMLR", "TMLR"),
        ("SIGGRAPH Asia 2024", "SIGGRAPH Asia 2024"),
        ("siggraph 2024", "SIGGRAPH 2024"),
        ("the Machine Learning for Health Symposium 2025", "Machine Learning for Health Symposium 2025"),
        ("a later date, and we thank the reviewers", None),
        ("<!channel> Workshop", "<!channel> Workshop"),  # kept as text: escaped where it is shown
        ("x" * 5000, None),
        ("A" * 4990 + " ICML 2025", None),
        ("ICML 2025 " + "x" * 5000, "ICML 2025"),
        ("Workshop " + "w" * 5000, None),
        ("\u202eICML\u200b 2025", "ICML 2025"),
    ],
)
def test_venues_are_named_short_or_not_at_all(raw: str, venue: str | None) -> None:
    found = venue_of(raw)
    assert found == venue
    assert found is None or len(found) <= MAX_VENUE_CHARS


def test_a_5000_character_venue_on_a_page_is_refused() -> None:
    url = f"{SITE}/research/long"
    for said in ("This paper was accepted at " + "the " * 1250, "Venue: " + "W" * 5000):
        assert parse(item_page("Long", f"<p>{said}</p>"), url).venue is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": "not found"}',  # JSON, not a page
        b"",
        b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        b'<!DOCTYPE html><html><body><p>Half a page</p><script id="__NEXT_DATA__">{"props": {"pagePr',
        b"<!DOCTYPE html><html><head><title>x</title></head><body><script>var x = 1;</script></body></html>",
    ],
)
def test_what_is_no_page_is_an_error(body: bytes) -> None:
    with pytest.raises(ItemPageError) as caught:
        parse(body, f"{SITE}/research/broken")
    assert "\n" not in str(caught.value) and str(caught.value).startswith("item page:")


# --- reading pages over loopback, and what is stored --------------------------------------------------------


def test_read_is_one_polite_request(site: FeedServer, client: httpx.Client) -> None:
    url = site.route("/research/normalizing-flows", Reply(body=page("normalizing-flows"), content_type=HTML))
    assert item_pages.read(client, url, FLOWS).code_url == "https://github.com/apple/ml-tarflow"
    [request] = site.requests
    assert request.header("User-Agent") == feed.USER_AGENT
    assert "text/html" in (request.header("Accept") or "")


@pytest.mark.parametrize("endless", [False, True])
def test_a_page_over_the_size_cap_fails(site: FeedServer, client: httpx.Client, endless: bool) -> None:
    body = page("normalizing-flows") + b" " * item_pages.MAX_PAGE_BYTES
    url = site.route("/research/huge", Reply(body=body, content_type=HTML, endless=endless, stream=True))
    with pytest.raises(ItemPageError) as caught:
        item_pages.read(client, url, f"{SITE}/research/huge")
    assert "cap" in str(caught.value) and str(item_pages.MAX_PAGE_BYTES) in str(caught.value)
    assert not caught.value.transient, "a page too big is that page's fault: the run goes on"


def test_enriching_stores_each_pages_facts_once_per_new_item(site: FeedServer, client: httpx.Client,
                                                              store: Store) -> None:
    store.add_items([item("normalizing-flows"), item("efficient-reasoning-traces", 1), item("plain", 2)])
    site.route("/research/normalizing-flows", Reply(body=page("normalizing-flows"), content_type=HTML))
    site.route("/research/efficient-reasoning-traces", Reply(body=page("workshop-paper"), content_type=HTML))
    site.route("/research/plain", Reply(body=item_page("Plain", "<p>Nothing to say.</p>"), content_type=HTML))
    sleeps = Sleeps()
    new = [FLOWS, WORKSHOP]
    result = item_pages.enrich_pages(store, client, site.base, new, more=0, pace=0.5, sleep=sleeps)
    assert (result.read, result.changed, result.failed, result.followups) == (2, 2, 0, 0)
    paths = [r.path for r in site.requests]
    assert paths == ["/research/efficient-reasoning-traces", "/research/normalizing-flows"], "one each"
    assert sleeps.asked == [0.5], "paced"
    flows = store.get_item(FLOWS)
    assert flows is not None and (flows.paper_url, flows.code_url, flows.venue) == (
        "https://arxiv.org/abs/2412.06329", "https://github.com/apple/ml-tarflow", "ICML")
    again = item_pages.enrich_pages(store, client, site.base, new, more=0, pace=0, sleep=sleeps)
    assert again.read == 0 and len(site.requests) == 2, "a page read is not read again by the next poll"
    rest = item_pages.enrich_pages(store, client, site.base, (), more=5, recheck=False, pace=0, sleep=sleeps)
    assert rest.read == 1 and site.requests[-1].path == "/research/plain", "then the backlog, a few a poll"


@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=404, body=b"<html><body>Not Found</body></html>", content_type=HTML),
        Reply(body=b'{"error": "not found"}', content_type="application/json"),
        Reply(body=b'<!DOCTYPE html><html><body><script id="__NEXT_DATA__">{"props": {', content_type=HTML),
    ],
)
def test_a_page_that_fails_changes_nothing_stored(site: FeedServer, client: httpx.Client, store: Store,
                                                  reply: Reply) -> None:
    store.add_items([item("normalizing-flows")])
    store.record_page(FLOWS, venue="ICML 2025", paper_url=None, code_url="https://github.com/apple/ml-tarflow",
                      at=START)
    before, marker = store.get_item(FLOWS), store.change_marker()
    site.route("/research/normalizing-flows", reply)
    later = START + timedelta(days=30)
    result = item_pages.enrich_pages(store, client, site.base, (), more=3, pace=0, now=lambda: later)
    assert (result.read, result.failed) == (0, 1)
    assert store.get_item(FLOWS) == before and store.change_marker() == marker, "the item is as it was"
    state = store.page_state(FLOWS)
    assert state is not None and state["failures"] == 1 and str(state["error"]).startswith("item page:")


def test_a_site_failure_stops_the_run_and_a_page_failing_three_times_is_left(
    site: FeedServer, client: httpx.Client, store: Store
) -> None:
    store.add_items([item("a"), item("b", 1)])
    site.route("/research/a", Reply(status=503, body=b"busy", content_type="text/plain"))
    site.route("/research/b", Reply(status=404, body=b"gone", content_type="text/plain"))
    result = item_pages.enrich_pages(store, client, site.base, (), more=5, pace=0)
    assert (result.failed, result.left) == (1, 1) and [r.path for r in site.requests] == ["/research/a"]
    soon = item_pages.enrich_pages(store, client, site.base, (), more=5, pace=0)
    assert soon.failed == 1 and site.requests[-1].path == "/research/b", "a failed page waits an hour"
    for hours in (2, 4, 6, 8):
        at = datetime.now(UTC) + timedelta(hours=hours)
        item_pages.enrich_pages(store, client, site.base, (), more=5, pace=0, now=lambda at=at: at)
    assert len(site.requests_to("/research/b")) == 3, "given up after three failures in a row"


def test_the_polls_time_for_pages_is_bounded(site: FeedServer, client: httpx.Client, store: Store) -> None:
    store.add_items([item(f"p{n}", n) for n in range(6)])
    for n in range(6):
        site.route(f"/research/p{n}", Reply(body=item_page("P", "<p>Text.</p>"), content_type=HTML))
    ticks = iter(range(100))  # a second passes at each look at the clock: at the start and before each page
    result = item_pages.enrich_pages(store, client, site.base, (), more=None, pace=0, budget=3.0,
                                     clock=lambda: float(next(ticks)))
    assert (result.read, result.left) == (2, 4) and len(site.requests) == 2


def test_the_poll_reads_new_items_pages_before_it_delivers(site: FeedServer, client: httpx.Client,
                                                           store: Store) -> None:
    """Through `poller.poll_once` with the pipeline's enrichment step: the baseline poll reads nothing; the
    poll that brings a new item reads its page (and the index) before delivery, so its post can say it."""
    from tests.test_backfill import FEED, NEWEST, feed_without_newest

    feed_url = site.route("/rss.xml", [Reply(body=feed_without_newest()), Reply(body=FEED)])
    index = (PAGES.parent / "apple_ml_research.html").read_bytes()
    site.route("/research", Reply(body=index, content_type=HTML))
    path = NEWEST.removeprefix(SITE)
    site.route(path, Reply(body=item_page("AFM", "<p>This paper was accepted at ICML 2026.</p>",
                                          publication="https://arxiv.org/abs/2606.00001"), content_type=HTML))
    order: list[str] = []

    def deliver(s: Store) -> object:
        found = s.get_item(NEWEST)
        order.append(f"deliver: {found.venue if found else None}")
        from bot.models import DeliveryReport

        return DeliveryReport()

    enrich = item_pages.enricher(site.url("/research"), pace=0)
    assert poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver).baseline  # type: ignore[arg-type]
    assert site.requests_to(path) == []
    poller.poll_once(store, client, feed_url, enrich=enrich, deliver=deliver)  # type: ignore[arg-type]
    assert len(site.requests_to(path)) == 1 and order[-1] == "deliver: ICML 2026"


# --- the command line ------------------------------------------------------------------------------------


def test_cli_backfill_pages_reads_each_page_once_at_its_pace_then_search_shows_and_filters(
    site: FeedServer, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`backfill --pages`: the index, then every post's own page, a second apart (two pages: one pause); the
    JSON says what the pages gave; `search` shows the line and `venue:` finds it. A second run reads none."""
    import time

    from bot import cli
    from tests.fakes.research_index import index_page, post

    site.route("/rss.xml", Reply(body=(PAGES.parent / "apple_ml_rss.xml").read_bytes()))
    site.route("/research", Reply(body=index_page([
        post("normalizing-flows", "Normalizing Flows are Capable Generative Models", "<p>Flows.</p>",
             "2025-07-10"),
        post("efficient-reasoning-traces", "Efficient Reasoning Traces", "<p>Traces.</p>", "2025-12-01"),
    ]), content_type=HTML))
    site.route("/research/normalizing-flows", Reply(body=page("normalizing-flows"), content_type=HTML))
    site.route("/research/efficient-reasoning-traces", Reply(body=page("workshop-paper"), content_type=HTML))
    monkeypatch.chdir(tmp_path)
    for name in ("SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "LOG_LEVEL",
                 "SUMMARY_API_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'cli.db'}")
    monkeypatch.setenv("FEED_URL", site.url("/rss.xml"))
    started = time.monotonic()
    assert cli.main(["backfill", "--pages", "--json"]) == 0
    assert time.monotonic() - started >= item_pages.BACKFILL_PACE, "paced"
    out = json.loads(capsys.readouterr().out)
    assert out["pages"] == {"read": 2, "changed": 2, "failed": 0, "left": 0}
    assert [r.path for r in site.requests if r.path.startswith("/research/")] == [
        "/research/efficient-reasoning-traces", "/research/normalizing-flows"]
    assert cli.main(["backfill", "--pages"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "their own pages: 0 read (0 with a paper, code or venue), 0 failed")
    assert len([r for r in site.requests if r.path.startswith("/research/")]) == 2, "no page read twice"
    assert cli.main(["search", "venue:icml"]) == 0
    out = capsys.readouterr().out
    assert "Normalizing Flows are Capable Generative Models" in out and "Efficient Reasoning" not in out
    assert ("paper: https://arxiv.org/abs/2412.06329 · code: https://github.com/apple/ml-tarflow · ICML\n"
            in out)


def test_an_articles_own_header_is_read_but_the_sites_navigation_is_not() -> None:
    html = ('<!DOCTYPE html><html><body><header class="site"><nav><a href="https://arxiv.org/abs/2101.00001">'
            'Featured paper</a></nav></header><main><article><header><h1>Title</h1>'
            '<a href="https://arxiv.org/abs/2412.06329">View publication</a></header>'
            "<p>This paper was accepted at ICLR 2026.</p></article></main></body></html>")
    assert parse(html, FLOWS) == PageFacts(paper_url="https://arxiv.org/abs/2412.06329", venue="ICLR 2026")
