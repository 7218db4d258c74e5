"""The research index reader: the documented __NEXT_DATA__ shape, and every way a page can be broken."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from bot import research_index as ri
from bot.feed import USER_AGENT, make_client
from tests.fakes.feed_server import FeedServer, Reply
from tests.fakes.research_index import INDEX_FIXTURE, index_page, post

HTML = "text/html; charset=utf-8"
FEED_SLUGS = {
    "introducing-third-generation-of-apple-foundation-models",
    "vsas-bench-streaming-assistant",
    "epicache",
    "balcaprl-mllm-image-captioning",
    "gaussian-head-reconstruction",
    "rvpo-risk-sensitive-alignment",
    "velox",
    "compression",
}


@pytest.fixture
def server() -> FeedServer:
    with FeedServer() as fake:
        yield fake


@pytest.fixture
def client() -> httpx.Client:
    with make_client() as c:
        yield c


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text.strip() == text and len(text) < 300
    return text


# --- the documented shape ---


def test_fixture_parses_to_items_with_full_abstracts_and_authors() -> None:
    index = ri.parse(INDEX_FIXTURE.read_bytes())
    assert index.posts == 14 and index.skipped == {}
    assert len(index.items) == 14
    slugs = {i.link.rsplit("/", 1)[-1] for i in index.items}
    assert slugs >= FEED_SLUGS
    for item in index.items:
        assert item.link == f"https://machinelearning.apple.com/research/{item.link.rsplit('/', 1)[-1]}"
        assert item.id == item.link and item.kind == "research"
        assert item.guid == item.link.rsplit("/", 1)[-1]
        assert item.published.tzinfo is not None and item.published.utcoffset().total_seconds() == 0
        assert item.authors and all(a.strip() == a for a in item.authors)
        assert "<p>" not in item.summary and "**" not in item.summary and "](" not in item.summary
        assert not item.summary.endswith("…")
    # oldest first
    assert [i.published for i in index.items] == sorted(i.published for i in index.items)
    epicache = next(i for i in index.items if i.link.endswith("/epicache"))
    assert "[fixture continuation]" in epicache.summary and len(epicache.summary) > 700
    assert epicache.published == datetime(2026, 5, 19, tzinfo=UTC)


def test_markdown_and_html_bodies_become_plain_text() -> None:
    page = index_page(
        [
            post(
                "md",
                "Markdown",
                "# Heading\n\nA **bold** and _quiet_ claim with `code`, "
                "see [the paper](https://x.test/a_(b)).\n\n- one\n- two",
                "2026-01-02",
            ),
            post(
                "html",
                "HTML &amp; more",
                "<p>First &amp; <em>second</em>.</p><p>Third<br>line.</p><script>x()</script>",
                "2026-01-03",
            ),
            post("plain", "Plain", "x_i and y_j stay; 2*3*4 stays; snake_case_name stays.", "2026-01-04"),
            post(
                "stray", "Stray", "<p>x < y and a &lt; b</p><!-- note --><p>&nbsp;ok&#8230;</p>", "2026-01-05"
            ),
        ]
    )
    items = {i.link.rsplit("/", 1)[-1]: i for i in ri.parse(page).items}
    assert items["md"].summary == "Heading\n\nA bold and quiet claim with code, see the paper.\n\none\n\ntwo"
    assert items["html"].title == "HTML & more"
    assert items["html"].summary == "First & second.\n\nThird\n\nline."
    assert items["plain"].summary == "x_i and y_j stay; 2*3*4 stays; snake_case_name stays."
    assert items["stray"].summary == "x < y and a < b\n\nok…"


@pytest.mark.parametrize(
    "value",
    [
        "2026-05-19",
        "2026-05-19T00:00:00.000Z",
        "2026-05-19T00:00:00Z",
        "2026-05-19T02:00:00+02:00",
        "May 19, 2026",
        1779148800000,  # epoch milliseconds
        1779148800,  # epoch seconds
        "1779148800000",
    ],
)
def test_published_accepts_iso_dates_and_epochs(value: object) -> None:
    assert ri.parse_date(value) == datetime(2026, 5, 19, tzinfo=UTC)


@pytest.mark.parametrize("value", [None, "", "soon", True, [], {}, 10**20, "2026-13-45"])
def test_published_rejects_nonsense(value: object) -> None:
    assert ri.parse_date(value) is None


def test_authors_from_authors_ordered_lists_or_objects() -> None:
    page = index_page(
        [
            {
                **post("a", "A", "x", "2026-01-01", authors=["Zed Last", "Amy First"]),
                "authorsOrdered": "Amy First, Zed Last",
            },
            post(
                "b",
                "B",
                "x",
                "2026-01-01",
                authors=[{"name": "Jo Obj"}, {"firstName": "Kim", "lastName": "Split"}, 7],
            ),
            post("c", "C", "x", "2026-01-01", authors=["Ann Mark†", "  Bo   Space ", "Ann Mark†", ""]),
            post("d", "D", "x", "2026-01-01", authors_ordered="One Person and Two Person"),
        ]
    )
    items = {i.link.rsplit("/", 1)[-1]: i for i in ri.parse(page).items}
    assert items["a"].authors == ("Amy First", "Zed Last")
    assert items["b"].authors == ("Jo Obj", "Kim Split")
    assert items["c"].authors == ("Ann Mark", "Bo Space")
    assert items["d"].authors == ("One Person", "Two Person")


def test_duplicate_slugs_collapse_to_one_item() -> None:
    page = index_page(
        [post("same", "T", "short", "2026-01-01"), post("same/", "T", "a longer abstract", "2026-01-01")]
    )
    (item,) = ri.parse(page).items
    assert item.summary == "a longer abstract"


# --- fail safe ---


def test_page_without_the_script_is_a_one_line_error() -> None:
    page = b"<!DOCTYPE html><html><body><h1>Research</h1><script>window.x=1</script></body></html>"
    with pytest.raises(ri.IndexReadError) as caught:
        ri.parse(page)
    assert "__NEXT_DATA__" in one_line(caught.value) and "HTML page" in str(caught.value)


def test_invalid_json_is_a_one_line_error() -> None:
    page = b'<html><script id="__NEXT_DATA__" type="application/json">{"props": {"pageProps": [</script>'
    with pytest.raises(ri.IndexReadError) as caught:
        ri.parse(page)
    assert "not valid JSON" in one_line(caught.value)


@pytest.mark.parametrize(
    ("data", "missing"),
    [
        ({}, "no props"),
        ({"props": {}}, "no props.pageProps"),
        ({"props": {"pageProps": {"post": []}}}, "no props.pageProps.posts"),
        ({"props": {"pageProps": {"posts": {"a": 1}}}}, "not a list"),
        ([1, 2], "no props"),
    ],
)
def test_missing_posts_path_is_named(data: object, missing: str) -> None:
    page = f'<script id="__NEXT_DATA__" type="application/json">{json.dumps(data)}</script>'.encode()
    with pytest.raises(ri.IndexReadError) as caught:
        ri.parse(page)
    assert missing in one_line(caught.value)


def test_posts_lacking_fields_are_skipped_and_counted() -> None:
    good = post("good", "Good", "<p>Body</p>", "2026-01-01")
    page = index_page(
        [
            good,
            {"title": "no slug", "published": "2026-01-01"},
            {"slug": "no-title", "published": "2026-01-01"},
            {"slug": "no-date", "title": "No date"},
            {"slug": "../escape", "title": "Odd slug", "published": "2026-01-01"},
            {"slug": "has space", "title": "Odd slug", "published": "2026-01-01"},
            "not an object",
        ]
    )
    index = ri.parse(page)
    assert [i.link for i in index.items] == ["https://machinelearning.apple.com/research/good"]
    assert index.skipped == {
        "missing slug": 3,
        "missing title": 1,
        "missing published": 1,
        "not an object": 1,
    }
    note = index.skipped_note()
    assert note is not None and "6 of 7 posts" in note and "missing slug: 3" in note and "\n" not in note


def test_posts_all_lacking_fields_is_an_error_naming_them() -> None:
    page = index_page([{"title": "x"}, {"slug": "y", "published": "2026-01-01"}])
    with pytest.raises(ri.IndexReadError) as caught:
        ri.parse(page)
    message = one_line(caught.value)
    assert "none of its 2 posts" in message and "missing slug: 1" in message and "missing title: 1" in message


def test_an_empty_index_is_no_error() -> None:
    index = ri.parse(index_page([]))
    assert index.items == [] and index.posts == 0


def test_a_post_without_body_or_authors_still_counts() -> None:
    (item,) = ri.parse(index_page([{"slug": "bare", "title": "Bare", "published": "2026-02-03"}])).items
    assert item.summary == "" and item.authors == ()


# --- over HTTP ---


def test_read_is_one_polite_request(server: FeedServer, client: httpx.Client) -> None:
    url = server.route("/research", Reply(body=INDEX_FIXTURE.read_bytes(), content_type=HTML))
    index = ri.read(client, url)
    assert len(index.items) == 14
    (request,) = server.requests
    assert request.header("User-Agent") == USER_AGENT and "mlresearch-bot" in USER_AGENT
    assert (request.header("Accept") or "").startswith("text/html")


def test_read_accepts_a_page_just_under_20_mib(server: FeedServer, client: httpx.Client) -> None:
    page = index_page([post("big", "Big", "x", "2026-01-01")], pad=ri.MAX_INDEX_BYTES - 4096)
    assert ri.MAX_INDEX_BYTES - 4096 < len(page) <= ri.MAX_INDEX_BYTES
    url = server.route("/research", Reply(body=page, content_type=HTML, gzip=True))
    assert [i.link for i in ri.read(client, url).items] == ["https://machinelearning.apple.com/research/big"]


@pytest.mark.parametrize("stream", [False, True])
def test_read_refuses_a_page_over_20_mib(server: FeedServer, client: httpx.Client, stream: bool) -> None:
    page = index_page([post("big", "Big", "x", "2026-01-01")], pad=ri.MAX_INDEX_BYTES + 1)
    url = server.route("/research", Reply(body=page, content_type=HTML, stream=stream))
    with pytest.raises(ri.IndexReadError) as caught:
        ri.read(client, url)
    assert "cap" in one_line(caught.value) and str(ri.MAX_INDEX_BYTES) in str(caught.value)


def test_an_http_error_page_is_a_one_line_error(server: FeedServer, client: httpx.Client) -> None:
    body = b"<!DOCTYPE html><html><body><h1>503 Service Unavailable</h1>\n<p>try later</p></body></html>"
    url = server.route("/research", Reply(status=503, body=body, content_type=HTML))
    with pytest.raises(ri.IndexReadError) as caught:
        ri.read(client, url)
    assert "HTTP 503" in one_line(caught.value)


def test_an_html_error_page_answered_200_is_a_one_line_error(
    server: FeedServer, client: httpx.Client
) -> None:
    body = b"<!DOCTYPE html><html><body><h1>Something went wrong</h1></body></html>"
    url = server.route("/research", Reply(body=body, content_type=HTML))
    with pytest.raises(ri.IndexReadError) as caught:
        ri.read(client, url)
    assert "__NEXT_DATA__" in one_line(caught.value)


def test_an_unreachable_index_is_a_one_line_error(client: httpx.Client) -> None:
    with FeedServer() as gone:
        url = gone.url("/research")
    with pytest.raises(ri.IndexReadError) as caught:
        ri.read(client, url)
    assert one_line(caught.value).startswith("research index:")


def test_read_a_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "research.html"
    path.write_bytes(INDEX_FIXTURE.read_bytes())
    with make_client() as c:
        assert len(ri.read(c, str(path)).items) == 14


def test_index_url_sits_beside_a_web_feed() -> None:
    assert ri.index_url_for("https://machinelearning.apple.com/rss.xml") == ri.DEFAULT_INDEX_URL
    assert ri.index_url_for("http://127.0.0.1:8080/feeds/rss.xml?x=1") == "http://127.0.0.1:8080/research"
    assert ri.index_url_for("/tmp/feed.xml") is None
    assert ri.index_url_for("file:///tmp/feed.xml") is None
