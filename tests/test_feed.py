"""bot.feed: fetching over a local HTTP server (tests/fakes/feed_server.py), parsing, canonical links."""

from __future__ import annotations

import gzip
import socket
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot import feed
from bot.errors import (
    FeedError,
    FeedHTTPError,
    FeedMalformed,
    FeedNetworkError,
    FeedNotAFeed,
    FeedTimeout,
    FeedTooLarge,
)
from bot.feed import canonical_link, fetch, parse
from bot.models import Fetched, Item, NotModified, Validators
from tests.fakes.feed_server import Reply

DATA = Path(__file__).parent / "data"
RSS = (DATA / "apple_ml_rss.xml").read_bytes()
ARCHIVE = (DATA / "apple_ml_archive.xml").read_bytes()
LAST_MODIFIED = "Mon, 08 Jun 2026 00:00:00 GMT"


@pytest.fixture
def client():
    with feed.make_client(total_timeout=5.0, connect_timeout=2.0) as c:
        yield c


def rss(*items: str, channel_link: str = "https://machinelearning.apple.com") -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>t</title>'
        f"<link>{channel_link}</link><description>d</description>{''.join(items)}</channel></rss>"
    ).encode()


def item(
    slug: str,
    *,
    title: str = "T",
    desc: str = "D",
    date: str = "Mon, 08 Jun 2026 00:00:00 GMT",
    link: str | None = None,
    guid: str | None = None,
) -> str:
    link = link or f"https://machinelearning.apple.com/research/{slug}"
    return (
        f"<item><guid>{guid or slug}</guid><title>{title}</title><link>{link}</link>"
        f"<description>{desc}</description><pubDate>{date}</pubDate></item>"
    )


# --- fetch: the client --------------------------------------------------------------------------------


def test_user_agent_names_the_bot_and_its_project_url_and_gzip_is_accepted(feed_server, client):
    url = feed_server.feed("/rss.xml", RSS)
    fetch(client, url)
    sent = feed_server.requests_to("/rss.xml")[0]
    assert sent.header("User-Agent").startswith("mlresearch-bot/")
    assert "https://github.com/" in sent.header("User-Agent")
    assert "gzip" in sent.header("Accept-Encoding")


def test_default_client_has_the_issue_timeouts_and_redirect_cap():
    with feed.make_client() as c:
        assert c.timeout.connect == pytest.approx(5.0)
        assert c.timeout.read == pytest.approx(20.0)
        assert c.follow_redirects is True
        assert c.max_redirects == 5


def test_fetch_returns_the_body_and_the_validators(feed_server, client):
    url = feed_server.feed("/rss.xml", RSS, etag='"v1"', last_modified=LAST_MODIFIED)
    answer = fetch(client, url)
    assert isinstance(answer, Fetched)
    assert answer.content == RSS
    assert answer.validators == Validators('"v1"', LAST_MODIFIED)


def test_gzip_body_is_decoded(feed_server, client):
    url = feed_server.feed("/rss.xml", RSS, gzip=True)
    answer = fetch(client, url)
    assert isinstance(answer, Fetched) and answer.content == RSS
    assert len(parse(answer.content)) == 10


# --- fetch: conditional GET ---------------------------------------------------------------------------


def test_etag_is_sent_back_and_304_is_not_modified(feed_server, client):
    url = feed_server.feed("/rss.xml", RSS, etag='"v1"')
    first = fetch(client, url)
    assert isinstance(first, Fetched)
    second = fetch(client, url, first.validators)
    assert isinstance(second, NotModified)
    assert second.validators.etag == '"v1"'
    assert feed_server.requests_to("/rss.xml")[1].header("If-None-Match") == '"v1"'
    assert feed_server.requests_to("/rss.xml")[0].header("If-None-Match") is None


def test_last_modified_is_sent_back_as_if_modified_since(feed_server, client):
    url = feed_server.feed("/rss.xml", RSS, last_modified=LAST_MODIFIED)
    first = fetch(client, url)
    assert isinstance(first, Fetched)
    second = fetch(client, url, first.validators)
    assert isinstance(second, NotModified)
    assert second.validators.last_modified == LAST_MODIFIED
    assert feed_server.requests_to("/rss.xml")[1].header("If-Modified-Since") == LAST_MODIFIED


def test_changed_etag_fetches_the_new_body(feed_server, client):
    feed_server.route("/rss.xml", [Reply(body=RSS, etag='"v1"'), Reply(body=ARCHIVE, etag='"v2"')])
    first = fetch(client, feed_server.url("/rss.xml"))
    assert isinstance(first, Fetched)
    second = fetch(client, feed_server.url("/rss.xml"), first.validators)
    assert isinstance(second, Fetched) and second.content == ARCHIVE
    assert second.validators.etag == '"v2"'


# --- fetch: redirects ---------------------------------------------------------------------------------


def test_redirects_are_followed_up_to_five(feed_server, client):
    feed_server.feed("/rss.xml", RSS)
    url = feed_server.redirect("/old", "/rss.xml", hops=5, status=301)
    answer = fetch(client, url)
    assert isinstance(answer, Fetched) and answer.content == RSS


def test_a_sixth_redirect_is_a_network_error(feed_server, client):
    feed_server.feed("/rss.xml", RSS)
    url = feed_server.redirect("/loop", "/rss.xml", hops=6)
    with pytest.raises(FeedNetworkError) as err:
        fetch(client, url)
    assert "redirect" in str(err.value)
    assert not feed_server.requests_to("/rss.xml")


def test_a_redirect_without_location_is_an_http_error(feed_server, client):
    url = feed_server.route("/nowhere", Reply(status=302))
    with pytest.raises(FeedHTTPError) as err:
        fetch(client, url)
    assert err.value.status == 302


# --- fetch: failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [404, 410, 500, 503])
def test_http_errors_are_typed_with_their_status(feed_server, client, status):
    url = feed_server.route("/rss.xml", Reply(status=status, body=b"oops", content_type="text/plain"))
    with pytest.raises(FeedHTTPError) as err:
        fetch(client, url)
    assert err.value.status == status
    assert str(status) in str(err.value)
    assert "\n" not in str(err.value)


def test_slow_headers_time_out_quickly(feed_server, client):
    url = feed_server.route("/slow", Reply(body=RSS, delay=5))
    start = time.monotonic()
    with pytest.raises(FeedTimeout):
        fetch(client, url, total_timeout=0.5)
    assert time.monotonic() - start < 2


def test_a_trickling_body_hits_the_total_deadline(feed_server, client):
    url = feed_server.route("/trickle", Reply(body=RSS, endless=True, chunk_size=10, chunk_delay=0.05))
    start = time.monotonic()
    with pytest.raises(FeedTimeout):
        fetch(client, url, total_timeout=0.6)
    assert time.monotonic() - start < 2


def test_make_client_timeouts_apply(feed_server):
    url = feed_server.route("/slow", Reply(body=RSS, delay=5))
    start = time.monotonic()
    with feed.make_client(total_timeout=0.4) as short, pytest.raises(FeedTimeout):
        fetch(short, url, total_timeout=0.4)
    assert time.monotonic() - start < 2


def test_an_endless_body_without_content_length_is_cut_at_the_cap_while_streaming(feed_server, client):
    url = feed_server.route("/huge", Reply(body=b"<rss>" + b"x" * 1000, endless=True))
    with pytest.raises(FeedTooLarge) as err:
        fetch(client, url)  # the default 5 MiB cap: an endless body can only end by the cap
    assert str(feed.MAX_FEED_BYTES) in str(err.value)
    assert "Content-Length" not in feed_server.requests_to("/huge")[0].headers


def test_a_small_cap_stops_the_download_early(feed_server, client):
    url = feed_server.route("/big", Reply(body=RSS * 20, stream=True, chunk_size=4096))
    with pytest.raises(FeedTooLarge):
        fetch(client, url, max_bytes=10_000)


def test_a_declared_oversize_content_length_is_refused(feed_server, client):
    url = feed_server.feed("/big", b"x" * 20_000)
    with pytest.raises(FeedTooLarge):
        fetch(client, url, max_bytes=10_000)


def test_the_cap_counts_decompressed_bytes_so_a_gzip_bomb_is_refused(feed_server, client):
    body = b"<rss>" + b" " * 200_000
    assert len(gzip.compress(body)) < 10_000
    url = feed_server.feed("/bomb.xml", body, gzip=True)
    with pytest.raises(FeedTooLarge):
        fetch(client, url, max_bytes=50_000)


def test_a_refused_connection_is_a_network_error(client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(FeedNetworkError) as err:
        fetch(client, f"http://127.0.0.1:{port}/rss.xml")
    assert "\n" not in str(err.value)


def test_an_unknown_host_is_a_network_error(client):
    with pytest.raises((FeedNetworkError, FeedTimeout)):
        fetch(client, "http://feed.invalid/rss.xml", total_timeout=3)


# --- fetch: files -------------------------------------------------------------------------------------


def test_a_plain_path_and_a_file_url_are_read(tmp_path):
    path = tmp_path / "feed.xml"
    path.write_bytes(RSS)
    with feed.make_client() as c:
        by_path = fetch(c, str(path))
        by_url = fetch(c, path.as_uri())
    assert isinstance(by_path, Fetched) and by_path.content == RSS
    assert isinstance(by_url, Fetched) and by_url.content == RSS
    assert by_path.validators.etag == by_url.validators.etag


def test_an_unchanged_file_is_not_modified(tmp_path):
    path = tmp_path / "feed.xml"
    path.write_bytes(RSS)
    with feed.make_client() as c:
        first = fetch(c, str(path))
        assert isinstance(first, Fetched)
        assert isinstance(fetch(c, str(path), first.validators), NotModified)
        path.write_bytes(ARCHIVE)
        assert isinstance(fetch(c, str(path), first.validators), Fetched)


def test_a_missing_file_is_a_feed_error(tmp_path):
    with feed.make_client() as c, pytest.raises(FeedNetworkError) as err:
        fetch(c, str(tmp_path / "missing.xml"))
    assert "missing.xml" in str(err.value)


def test_an_oversize_file_is_refused(tmp_path):
    path = tmp_path / "feed.xml"
    path.write_bytes(RSS)
    with feed.make_client() as c, pytest.raises(FeedTooLarge):
        fetch(c, str(path), max_bytes=1000)


# --- parse ----------------------------------------------------------------------------------------------


def test_parse_gives_frozen_items_never_feedparser_dicts():
    items = parse(RSS)
    assert len(items) == 10
    for it in items:
        assert type(it) is Item
        assert all(type(getattr(it, f)) is str for f in ("id", "title", "link", "summary"))
        assert type(it.published) is datetime
    with pytest.raises(AttributeError):  # a frozen record: msgspec's "immutable type"
        items[0].title = "x"  # type: ignore[misc]


def test_item_fields_from_the_fixture():
    by_slug = {it.link.rsplit("/", 1)[1]: it for it in parse(RSS)}
    balcap = by_slug["balcaprl-mllm-image-captioning"]
    assert (
        balcap.id
        == balcap.link
        == "https://machinelearning.apple.com/research/balcaprl-mllm-image-captioning"
    )
    assert balcap.guid == "balcaprl-mllm-image-captioning"
    assert balcap.title == "BalCapRL: A Balanced Framework for RL-Based MLLM Image Captioning"
    assert balcap.kind == "research"
    assert balcap.published == datetime(2026, 5, 11, tzinfo=UTC)
    assert by_slug["apple-at-cvpr-2026"].kind == "update"
    assert by_slug["ppml-2026"].title == "Apple Workshop on Privacy-Preserving Machine Learning & AI 2026"


def test_truncated_abstracts_keep_their_ellipsis():
    summaries = [it.summary for it in parse(RSS)]
    assert sum(s.endswith("…") for s in summaries) >= 8
    assert next(it for it in parse(RSS) if it.link.endswith("/epicache")).summary.endswith(
        "leading to failure…"
    )


def test_dates_are_utc_whatever_the_feed_offset():
    items = parse(rss(item("a", date="Mon, 08 Jun 2026 01:30:00 +0200")))
    assert items[0].published == datetime(2026, 6, 7, 23, 30, tzinfo=UTC)
    assert items[0].published.tzinfo == UTC


def test_html_in_descriptions_becomes_plain_text():
    desc = (
        "&lt;p&gt;Hello &lt;b&gt;bold&lt;/b&gt; &amp;amp; world&lt;/p&gt;"
        "&lt;script&gt;evil()&lt;/script&gt;&lt;p&gt;Two…&lt;/p&gt;"
    )
    summary = parse(rss(item("a", desc=desc)))[0].summary
    assert summary == "Hello bold & world\n\nTwo…"


def test_escaped_mentions_stay_text_for_slack_to_escape():
    items = parse(rss(item("a", title="Hi &lt;!channel&gt;", desc="x &lt;!here&gt; y")))
    assert "<!channel>" in items[0].title
    assert "<!here>" in items[0].summary


def test_bare_slug_guids_are_not_made_into_urls_even_with_a_content_location(feed_server, client):
    url = feed_server.feed(
        "/rss.xml", RSS, headers={"Content-Location": "https://machinelearning.apple.com/"}
    )
    answer = fetch(client, url)
    assert isinstance(answer, Fetched)
    for it in parse(answer.content):
        assert it.id.startswith("https://machinelearning.apple.com/research/") or "/updates/" in it.id
        assert it.guid and not it.guid.startswith("http")


def test_items_are_oldest_first_and_same_day_ties_reverse_the_feed_order():
    slugs = [it.link.rsplit("/", 1)[1] for it in parse(RSS)]
    # The feed lists the four items of 8 May 2026 as gaussian-head, rvpo, ppml, velox (newest first).
    assert slugs[:6] == [
        "compression",
        "velox",
        "ppml-2026",
        "rvpo-risk-sensitive-alignment",
        "gaussian-head-reconstruction",
        "balcaprl-mllm-image-captioning",
    ]
    assert slugs[-1] == "introducing-third-generation-of-apple-foundation-models"
    dates = [it.published for it in parse(RSS)]
    assert dates == sorted(dates)


def test_duplicate_links_in_one_feed_collapse_to_one_item():
    items = parse(
        rss(item("a", guid="g1"), item("a", guid="g2", link="http://MachineLearning.apple.com/research/a/"))
    )
    assert len(items) == 1


# --- canonical links and identity -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "https://machinelearning.apple.com/research/velox",
        "http://machinelearning.apple.com/research/velox",
        "https://MachineLearning.Apple.com/research/velox",
        "https://machinelearning.apple.com/research/velox/",
        "https://machinelearning.apple.com/research/velox#abstract",
        "https://machinelearning.apple.com/research/velox?utm_source=rss&utm_medium=feed",
        "https://machinelearning.apple.com/research/velox?UTM_Campaign=x&fbclid=abc",
        "https://machinelearning.apple.com:443/research/velox",
        "  https://machinelearning.apple.com/research/velox  ",
    ],
)
def test_canonical_link_normalizes_scheme_host_fragment_tracking_and_slash(raw):
    assert canonical_link(raw) == "https://machinelearning.apple.com/research/velox"


def test_canonical_link_keeps_meaningful_query_parameters():
    assert canonical_link("https://e.com/p?id=3&utm_source=x") == "https://e.com/p?id=3"


@pytest.mark.parametrize("raw", ["mailto:a@b.c", "javascript:alert(1)", "/relative", "", "https://"])
def test_canonical_link_refuses_what_is_not_a_web_url(raw):
    assert canonical_link(raw) is None


def test_tracking_parameters_and_guid_churn_do_not_change_identity():
    plain = parse(rss(item("velox", guid="velox")))[0]
    churned = parse(
        rss(
            item(
                "velox",
                guid="velox-v2",
                link="http://machinelearning.apple.com/research/velox/?utm_source=rss#top",
            )
        )
    )[0]
    assert plain.id == churned.id
    assert plain.guid != churned.guid


# --- parse failures -------------------------------------------------------------------------------------


def test_broken_xml_is_malformed():
    with pytest.raises(FeedMalformed) as err:
        parse(RSS[: len(RSS) // 2])
    assert "\n" not in str(err.value)


def test_an_html_page_is_not_a_feed():
    page = b"<!DOCTYPE html><html><head><title>Apple</title></head><body><p>Hello<br></body></html>"
    with pytest.raises(FeedNotAFeed):
        parse(page)


def test_an_html_page_served_in_place_of_the_feed_is_not_a_feed(feed_server, client):
    url = feed_server.feed(
        "/rss.xml",
        (DATA / "apple_ml_research.html").read_bytes()
        if (DATA / "apple_ml_research.html").exists()
        else b"<html><body>x</body></html>",
        content_type="text/html",
    )
    answer = fetch(client, url)
    assert isinstance(answer, Fetched)
    with pytest.raises(FeedNotAFeed):
        parse(answer.content)


@pytest.mark.parametrize("body", [b"", b"   ", b"just some text", b'{"json": true}'])
def test_empty_or_non_xml_bodies_are_refused(body):
    with pytest.raises((FeedNotAFeed, FeedMalformed)):
        parse(body)


def _billion_laughs(encoding: str) -> bytes:
    entities = '<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol;" if i == 1 else f"&lol{i - 1};") * 10}">' for i in range(1, 10)
    )
    return (
        f'<?xml version="1.0" encoding="{encoding}"?><!DOCTYPE rss [{entities}]><rss version="2.0"><channel>'
        "<title>&lol9;</title><item><title>&lol9;</title><link>https://e.com/research/a</link></item>"
        "</channel></rss>"
    ).encode(encoding)


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-16-be", "utf-32"])
def test_an_entity_bomb_is_refused_quickly(encoding):
    start = time.monotonic()
    with pytest.raises(FeedMalformed) as err:
        parse(_billion_laughs(encoding))
    assert "entit" in str(err.value)
    assert time.monotonic() - start < 0.5


def test_every_feed_error_message_is_one_line():
    err = FeedNetworkError("first line\nsecond   line\r\n")
    assert str(err) == "first line second line"


def test_each_feed_failure_is_a_class_whose_kind_names_it_in_log_lines():
    classes = (FeedNetworkError, FeedTimeout, FeedHTTPError, FeedTooLarge, FeedNotAFeed, FeedMalformed)
    kinds = {cls: cls.kind for cls in classes}
    assert list(kinds.values()) == ["network", "timeout", "http", "too_large", "not_a_feed", "malformed"]
    assert all(issubclass(cls, FeedError) for cls in kinds)
    assert FeedHTTPError("HTTP 503", status=503).status == 503
