"""Feed fetching at the network edge: one deadline over redirects and body, redirects from a public host to a
local address refused, and FEED_URL secrets redacted wherever the URL is shown (issue 11)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from bot import feed, status
from bot.commands import Invocation, Services, handle
from bot.config import Settings, redact_url
from bot.errors import FeedHTTPError, FeedNetworkError, FeedTimeout, FeedTooLarge
from bot.feed import fetch
from bot.models import Fetched
from bot.poller import poll_once
from bot.store import SQLiteStore, Store
from tests.fakes.feed_server import FeedServer, Reply

RSS = (Path(__file__).parent / "data" / "apple_ml_rss.xml").read_bytes()
PUBLIC = "17.253.144.10"  # a global address: what a "public" name resolves to in these tests


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with feed.make_client(total_timeout=5.0, connect_timeout=2.0) as c:
        yield c


def resolver(names: dict[str, str]) -> feed.Resolver:
    """A resolver that knows `names` (name -> address) and nothing else."""

    def resolve(host: str) -> Iterable[str]:
        return [names[host]] if host in names else []

    return resolve


def localhost(server: FeedServer) -> str:
    return f"http://localhost:{server.port}"


# --- redirects: public -> local is refused ----------------------------------------------------------------


def test_a_redirect_from_a_public_host_to_loopback_is_refused(feed_server: FeedServer, client) -> None:
    feed_server.feed("/rss.xml", RSS)
    feed_server.route("/old", Reply(status=302, headers={"Location": feed_server.url("/rss.xml")}))
    url = f"http://localhost:{feed_server.port}/old"  # "localhost" is declared public below
    with pytest.raises(FeedNetworkError) as err:
        fetch(client, url, resolve=resolver({"localhost": PUBLIC}))
    assert "127.0.0.1" in str(err.value) and "not a public address" in str(err.value)
    assert not feed_server.requests_to("/rss.xml")


def test_a_redirect_from_a_public_host_to_a_private_name_is_refused_before_connecting(
    feed_server: FeedServer, client
) -> None:
    feed_server.route("/old", Reply(status=301, headers={"Location": "http://intranet.test/rss.xml?key=s3"}))
    names = {"localhost": PUBLIC, "intranet.test": "10.1.2.3"}
    with pytest.raises(FeedNetworkError) as err:
        fetch(client, f"http://localhost:{feed_server.port}/old", resolve=resolver(names))
    assert "intranet.test" in str(err.value)
    assert "s3" not in str(err.value)


@pytest.mark.parametrize("address", [
    "169.254.169.254", "192.168.1.1", "::1", "fe80::1", "::ffff:127.0.0.1",
    "100.64.0.1", "100.127.255.254",  # shared address space (RFC 6598), where some clouds keep metadata
    "64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1", "64:ff9b::a00:1",  # NAT64: 169.254.169.254, 127.0.0.1, 10.0.0.1
    "2002:a9fe:a9fe::1", "2002:7f00:1::", "2002:c0a8:101::",  # 6to4 of the same kind
    # called public by Python 3.11's is_global (issue 53): local-use NAT64 (RFC 8215), IPv4-translated and
    # IPv4-compatible forms of 169.254.169.254, and deprecated site-local
    "64:ff9b:1::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "fec0::1",
    "0.1.2.3", "192.0.0.8", "192.0.2.1", "198.18.0.1", "198.51.100.7", "203.0.113.9", "192.88.99.1",
    "224.0.0.1", "240.0.0.1", "255.255.255.255", "::", "::ffff:10.0.0.1", "2001:db8::1", "3fff::1",
    "2001::a9fe:a9fe", "100::1", "5f00::1", "fc00::1", "fd12::1", "ff02::1", "fe80::1%1",
])
def test_local_private_and_link_local_addresses_are_not_public(address: str) -> None:
    assert not feed.is_public_host(address)
    assert not feed.is_public_host("name.test", resolver({"name.test": address}))
    assert feed.is_public_host("name.test", resolver({"name.test": PUBLIC}))
    assert not feed.is_public_host("unknown.test", resolver({}))


@pytest.mark.parametrize("address", [PUBLIC, "100.128.0.1", "64:ff9b::1120:900a", "2002:1120:900a::1",
                                     "2606:4700::1111", "::ffff:17.253.144.10", "192.31.196.1", "1.1.1.1"])
def test_public_addresses_are_public_also_inside_nat64_and_6to4(address: str) -> None:
    assert feed.is_public_host(address)


@pytest.mark.parametrize("address", ["64:ff9b:1::a9fe:a9fe", "::ffff:0:a9fe:a9fe", "::a9fe:a9fe", "fec0::1"])
def test_a_redirect_to_a_name_of_a_non_public_ipv6_form_is_refused_before_connecting(address: str) -> None:
    """Issue 53: a redirect to a name resolving to local-use NAT64 of 169.254.169.254 was followed."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(302, headers={"Location": "http://metadata.example/latest/"})

    names = {"feed.example": PUBLIC, "metadata.example": address}
    with httpx.Client(transport=httpx.MockTransport(answer), timeout=5.0) as client, \
            pytest.raises(FeedNetworkError, match="not a public address"):
        fetch(client, "http://feed.example/rss.xml", resolve=resolver(names))
    assert [r.url.host for r in sent] == ["feed.example"]  # nothing went to the redirect's address


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_redirect_goes_to_the_address_its_check_found_not_a_second_lookup(scheme: str) -> None:
    """DNS rebinding: a name checked as public could resolve elsewhere when httpx looks it up again. The
    redirect is sent to the address the check found, with the name as Host (and as the TLS server name, so
    the certificate is checked against the name). A transport records what would go on the wire."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if request.url.path == "/old":
            return httpx.Response(302, headers={"Location": f"{scheme}://cdn.example/rss.xml"})
        if request.url.path == "/rss.xml":
            return httpx.Response(301, headers={"Location": "/final.xml"})  # relative: the name stays
        return httpx.Response(200, content=RSS)

    names = {"feed.example": PUBLIC, "cdn.example": "2606:4700::1111"}
    with httpx.Client(transport=httpx.MockTransport(answer), timeout=5.0) as client:
        answer_ = fetch(client, f"{scheme}://feed.example/old", resolve=resolver(names))
    assert isinstance(answer_, Fetched) and answer_.content == RSS
    first, *redirected = sent
    assert first.url.host == "feed.example"  # FEED_URL itself: the operator's choice, not checked
    assert [str(r.url) for r in redirected] == [f"{scheme}://[2606:4700::1111]/rss.xml",
                                                f"{scheme}://[2606:4700::1111]/final.xml"]
    assert all(r.headers["Host"] == "cdn.example" for r in redirected)
    if scheme == "https":
        assert all(r.extensions.get("sni_hostname") == "cdn.example" for r in redirected)
    else:
        assert not any("sni_hostname" in r.extensions for r in sent)


def test_a_local_feed_url_may_redirect_to_another_local_host(feed_server: FeedServer, client) -> None:
    feed_server.feed("/rss.xml", RSS)
    feed_server.route("/old", Reply(status=302, headers={"Location": f"{localhost(feed_server)}/rss.xml"}))
    answer = fetch(client, feed_server.url("/old"))  # 127.0.0.1: local, as in tests and a private mirror
    assert isinstance(answer, Fetched) and answer.content == RSS


# --- one deadline ------------------------------------------------------------------------------------------


def test_the_total_deadline_covers_every_redirect(feed_server: FeedServer, client) -> None:
    feed_server.feed("/rss.xml", RSS)
    for hop in range(4):  # four slow redirects, each well within a per-request timeout of 1.5 s
        there = f"/hop{hop + 1}" if hop < 3 else "/rss.xml"
        feed_server.route(f"/hop{hop}", Reply(status=302, headers={"Location": there}, delay=1.0))
    started = time.monotonic()
    with pytest.raises(FeedTimeout):
        fetch(client, feed_server.url("/hop0"), total_timeout=1.5)
    asked = [r.path for r in feed_server.requests]
    assert len(asked) <= 2 and "/rss.xml" not in asked  # the budget ran out on the second hop
    assert time.monotonic() - started < 6


def test_the_body_gets_only_the_time_left_after_slow_headers(feed_server: FeedServer, client) -> None:
    # Headers after 2 s of a 2.5 s budget, then a chunk every 2.5 s: each read must wait only what is left.
    reply = Reply(body=RSS, endless=True, chunk_size=100, delay=2.0, chunk_delay=2.5)
    url = feed_server.route("/late", reply)
    started = time.monotonic()
    with pytest.raises(FeedTimeout):
        fetch(client, url, total_timeout=2.5)
    assert time.monotonic() - started < 4.0  # a full read timeout after the headers would end at 4.5 s


# --- redaction ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pa55@feeds.example/rss.xml?token=abc#x", "https://***@feeds.example/rss.xml?***#x"),
        ("https://token@feeds.example:8443/rss", "https://***@feeds.example:8443/rss"),
        ("https://machinelearning.apple.com/rss.xml", "https://machinelearning.apple.com/rss.xml"),
        ("tests/data/apple_ml_rss.xml", "tests/data/apple_ml_rss.xml"),
        ("/srv/feeds/a?b.xml", "/srv/feeds/a?b.xml"),
        ("file:///srv/feed.xml", "file:///srv/feed.xml"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def secret_url(server: FeedServer, path: str) -> str:
    return f"http://reader:pa55word@127.0.0.1:{server.port}{path}?token=t0ken"


def assert_redacted(text: str) -> None:
    assert "pa55word" not in text and "t0ken" not in text and "reader" not in text
    assert "***@127.0.0.1" in text


def test_feed_errors_never_show_the_password_or_the_query(feed_server: FeedServer, client) -> None:
    feed_server.route("/gone?token=t0ken", Reply(status=410, body=b"no", content_type="text/plain"))
    feed_server.route("/slow?token=t0ken", Reply(body=RSS, delay=5))
    feed_server.route("/huge?token=t0ken", Reply(body=RSS, endless=True))
    cases = [("/gone", FeedHTTPError, {}), ("/slow", FeedTimeout, {"total_timeout": 0.5}),
             ("/huge", FeedTooLarge, {"max_bytes": 10_000})]
    for path, kind, kwargs in cases:
        with pytest.raises(kind) as err:
            fetch(client, secret_url(feed_server, path), **kwargs)
        assert_redacted(str(err.value))


def test_status_and_the_poll_log_never_show_the_password_or_the_query(
    feed_server: FeedServer, client, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    feed_server.route("/rss.xml?token=t0ken", Reply(status=503, body=b"down", content_type="text/plain"))
    store: Store = SQLiteStore(tmp_path / "bot.db")
    store.migrate()
    url = secret_url(feed_server, "/rss.xml")
    with caplog.at_level(logging.INFO):
        result = poll_once(store, client, url)
    assert result.error is not None
    assert_redacted(result.error)
    assert_redacted(" ".join(r.getMessage() for r in caplog.records if "feed_error" in r.getMessage()))
    # status reports on the feed FEED_URL names (since issue 54): the one that was polled
    reply = handle(Invocation("status", "T1", "C1", "U1"),
                   Services(store=store, settings=Settings(feed_url=url)))
    shown = reply.text + json.dumps(reply.blocks)
    assert "Errors:" in shown and "503" in shown
    assert_redacted(shown)
    assert_redacted("\n".join(status.feed_lines(store.latest_feed_state(), 0, None)))


# --- feed markup -------------------------------------------------------------------------------------------


def test_a_description_with_a_broken_marked_section_is_text_not_a_crash() -> None:
    assert feed.html_to_text("<p>Before <![ broken</p><p>after</p>") == "Before <![ broken\n\nafter"


def test_unterminated_markup_is_stripped_in_linear_time() -> None:
    started = time.monotonic()
    for unit in ("<!--", "<p", "<![CDATA[", "<a b='"):
        text = feed.html_to_text("ok " + unit * (400_000 // len(unit)))
        assert text.startswith("ok")
    assert time.monotonic() - started < 20  # quadratic in Python 3.11's html.parser: minutes
