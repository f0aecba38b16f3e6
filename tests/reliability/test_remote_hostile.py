"""Remote ``open`` under hostile targets: refused before any connection.

The network is the reader's two seams: an httpx ``MockTransport`` that
records every request (a request reaching it is a connection), and a
resolver stub. Generated: non-public addresses from every special range,
spelled every way a URL parser might accept (dotted, decimal, octal, hex,
shortened, trailing dot, IPv6, IPv4-mapped and -compatible, zoned); host
names off the allow-list and look-alikes of the allowed one; names that
resolve to non-public addresses; redirects to all of those; bodies over
the cap.
"""

from __future__ import annotations

import gzip
import ipaddress
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import event, example, given
from hypothesis import strategies as st

from lionfactory.tools._reader_remote import Fetcher, FetchRefused, is_public_address
from lionfactory.tools.reader import reader_tool

httpx = pytest.importorskip("httpx")

ALLOWED = "docs.example.com"
INSIDE = "inside.example.com"  # allowed, but resolves wherever the example says
PUBLIC = ["93.184.216.34", "151.101.1.1", "2606:2800:220:1::1"]

NON_PUBLIC = [
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/29",  # the rest of 192.0.0.0/24: test_iana_special_purpose_blocks_are_refused
    "192.0.0.170/31",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "::1/128",
    "::/128",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "2001::/32",
    "2001:db8::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
]
METADATA = ["169.254.169.254", "169.254.170.2", "fd00:ec2::254"]


@st.composite
def non_public_addresses(draw: st.DrawFn) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if draw(st.integers(0, 4)) == 0:
        return ipaddress.ip_address(draw(st.sampled_from(METADATA)))
    network = ipaddress.ip_network(draw(st.sampled_from(NON_PUBLIC)))
    offset = draw(st.integers(0, network.num_addresses - 1))
    return network[offset]


def spellings(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[str]:
    """Ways to write `ip` as a URL host that some parser resolves to it."""
    if isinstance(ip, ipaddress.IPv6Address):
        forms = [f"[{ip}]", f"[{ip.exploded}]", f"[{ip.exploded.upper()}]"]
        if ip.is_link_local:
            forms.append(f"[{ip}%25eth0]")
        return forms
    n, (a, b, c, d) = int(ip), ip.packed
    return [
        str(ip),
        f"{ip}.",
        str(n),
        f"0{n:o}",
        f"0x{n:x}",
        ".".join(f"0{x:o}" for x in (a, b, c, d)),
        ".".join(f"0x{x:x}" for x in (a, b, c, d)),
        f"{a}.{n & 0xFFFFFF}",
        f"{a}.{b}.{n & 0xFFFF}",
        f"[::ffff:{ip}]",
        f"[::ffff:{(a << 8) | b:x}:{(c << 8) | d:x}]",
        f"[::{ip}]",
    ]


@st.composite
def hostile_literal_hosts(draw: st.DrawFn) -> str:
    ip = draw(non_public_addresses())
    return draw(st.sampled_from(spellings(ip)))


LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=10)
LOOKALIKES = [
    "docs.example.com.evil.net",
    "docs-example.com",
    "docs.example.co",
    "xdocs.example.com",
    "example.com",
    "sub.docs.example.com",
    "docs.ex\u0430mple.com",  # Cyrillic a
    "d\u043ecs.example.com",  # Cyrillic o
    "docs.example.com\u3002evil.net",  # ideographic full stop
    "docs\uff0eexample\uff0ecom\uff0eevil\uff0enet",
]


@st.composite
def other_hosts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(LOOKALIKES))
    labels = draw(st.lists(LABEL, min_size=1, max_size=3))
    host = ".".join([*labels, draw(st.sampled_from(["com", "net", "internal", "local"]))])
    return host if host != ALLOWED else "evil." + host


@st.composite
def url_tricks(draw: st.DrawFn) -> str:
    """URLs that smuggle another host, scheme or credentials past a naive check."""
    target = draw(st.one_of(hostile_literal_hosts(), other_hosts()))
    return draw(
        st.sampled_from(
            [
                f"http://{ALLOWED}/a.pdf",
                f"HTTP://{ALLOWED}/a.pdf",
                f"ftp://{ALLOWED}/a.pdf",
                f"file:///etc/passwd#{ALLOWED}",
                f"https://{ALLOWED}@{target}/a.pdf",
                f"https://user:pw@{ALLOWED}/a.pdf",
                f"https://{target}#@{ALLOWED}/a.pdf",
                f"https://{target}?@{ALLOWED}/a.pdf",
                f"https://{target}\\@{ALLOWED}/a.pdf",
                f"https://{target}/{ALLOWED}/a.pdf",
                f"https://{target}:443/a.pdf",
                f"https://{target}/a.pdf",
            ]
        )
    )


class Network:
    """The transport and resolver seams; records what reached them."""

    def __init__(
        self,
        table: dict[str, list[str]],
        respond: Callable[[httpx.Request], httpx.Response] | None = None,
    ) -> None:
        self.table = table
        self.lookups: list[str] = []
        self.requests: list[httpx.Request] = []
        self.respond = respond or (
            lambda _: httpx.Response(
                200, content=b"%PDF-1.4", headers={"content-type": "application/pdf"}
            )
        )

    def resolve(self, host: str) -> list[str]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return self.table[host]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.respond(request)

    def open(self, url: str) -> dict[str, Any]:
        reader = reader_tool(
            workspace_root=Path.cwd(),
            allowed_hosts=[ALLOWED, INSIDE],
            transport=httpx.MockTransport(self.handle),
            resolver=self.resolve,
        )
        return trio.run(lambda: reader(action="open", path=url))


def refused(answer: dict[str, Any]) -> str:
    assert answer["success"] is False, answer
    assert answer["error"], answer
    return str(answer["error"])


@given(host=hostile_literal_hosts(), path=st.sampled_from(["/", "/a.pdf", "/latest/meta-data/"]))
@example(host="169.254.169.254", path="/latest/meta-data/")
@example(host="[::ffff:169.254.169.254]", path="/latest/meta-data/")
@example(host="2852039166", path="/latest/meta-data/")
@example(host="0251.0376.0251.0376", path="/latest/meta-data/")
def test_an_ip_literal_in_any_spelling_is_refused_before_any_connection(host: str, path: str):
    network = Network({ALLOWED: PUBLIC[:1]})
    refused(network.open(f"https://{host}{path}"))
    assert network.requests == []


@given(url=url_tricks())
def test_schemes_credentials_and_other_hosts_are_refused_before_any_connection(url: str):
    network = Network({ALLOWED: PUBLIC[:1]})
    refused(network.open(url))
    assert network.requests == []


@given(
    hostile=st.lists(non_public_addresses(), min_size=1, max_size=3),
    public=st.lists(st.sampled_from(PUBLIC), max_size=2),
    data=st.data(),
)
def test_a_name_resolving_to_any_non_public_address_is_refused(hostile, public, data):
    answers = data.draw(st.permutations([str(ip) for ip in hostile] + public))
    network = Network({ALLOWED: answers})
    error = refused(network.open(f"https://{ALLOWED}/a.pdf"))
    assert "non-public address" in error
    assert network.requests == []


@st.composite
def hostile_locations(draw: st.DrawFn) -> str:
    """Where a redirect may point: every target the first request could not go to."""
    kind = draw(st.sampled_from(["literal", "scheme-relative", "other host", "trick", "inside"]))
    event(f"redirect to {kind}")
    if kind == "literal":
        return f"https://{draw(hostile_literal_hosts())}/x.pdf"
    if kind == "scheme-relative":
        return f"//{draw(hostile_literal_hosts())}/x.pdf"
    if kind == "other host":
        return f"https://{draw(other_hosts())}/x.pdf"
    if kind == "trick":
        return draw(url_tricks())
    return f"https://{INSIDE}/x.pdf"


@given(
    location=hostile_locations(),
    status=st.sampled_from([301, 302, 303, 307, 308]),
    inside=st.lists(non_public_addresses(), min_size=1, max_size=2),
)
@example(location="https://169.254.169.254/latest/meta-data/", status=302, inside=[])
def test_a_redirect_to_a_hostile_target_is_refused(location: str, status: int, inside: list[Any]):
    """Only the first, checked request is sent; the redirect's target never is."""

    def respond(request: httpx.Request) -> httpx.Response:
        # Raw UTF-8 bytes: a server may send a non-ASCII Location.
        return httpx.Response(status, headers={"location": location.encode()})

    network = Network({ALLOWED: PUBLIC[:1], INSIDE: [str(ip) for ip in inside]}, respond)
    refused(network.open(f"https://{ALLOWED}/start"))
    assert len(network.requests) == 1
    assert network.requests[0].url.host == PUBLIC[0]


@given(
    answers=st.lists(
        st.lists(st.sampled_from([*PUBLIC, *METADATA, "10.0.0.1"]), min_size=1, max_size=3),
        min_size=1,
        max_size=7,
    )
)
def test_every_request_goes_to_the_address_checked_for_it(answers: list[list[str]]):
    """DNS rebinding: a request goes only to the address checked for it.

    Each lookup (one per redirect hop) may answer differently. A request goes
    only to the first address of its own lookup, and only when every address
    of that lookup is public; Host keeps the name.
    """
    lookups = [*answers, *[["10.0.0.1"]] * 8]
    network = Network({})
    network.resolve = lambda host: lookups.pop(0)  # type: ignore[method-assign]
    network.respond = lambda request: httpx.Response(302, headers={"location": "/again"})
    refused(network.open(f"https://{ALLOWED}/start"))
    sent = len(network.requests)
    for request, answer in zip(network.requests, answers, strict=False):
        assert set(answer) <= set(PUBLIC), answer
        assert ipaddress.ip_address(request.url.host) == ipaddress.ip_address(answer[0])
        assert request.headers["host"] == ALLOWED
    if sent < 6:  # stopped by a lookup, not by the redirect limit
        stopping = answers[sent] if sent < len(answers) else ["10.0.0.1"]
        assert not set(stopping) <= set(PUBLIC)


# Not globally reachable per the IANA special-purpose registries, but
# "global" to `ipaddress` on Python releases without the CVE-2024-4032 fix
# (3.11.7 here) or older than the registry entry (3fff::/20, RFC 9637).
IANA_NOT_GLOBAL = ["192.0.0.8", "192.0.0.11", "192.0.0.255", "3fff::1", "3fff:fff::1"]


@pytest.mark.parametrize("address", IANA_NOT_GLOBAL)
def test_iana_special_purpose_blocks_are_refused(address: str):
    network = Network({ALLOWED: [address]})
    error = refused(network.open(f"https://{ALLOWED}/a.pdf"))
    assert "non-public address" in error
    assert network.requests == []


MIB = 1024 * 1024


@given(declared=st.integers(50 * MIB + 1, 2**63))
def test_a_declared_body_over_the_cap_is_refused_without_reading_it(declared: int):
    streamed: list[int] = []

    async def body():
        streamed.append(1)
        yield b"x"

    network = Network(
        {ALLOWED: PUBLIC[:1]},
        lambda _: httpx.Response(
            200,
            content=body(),
            headers={"content-type": "application/pdf", "content-length": str(declared)},
        ),
    )
    error = refused(network.open(f"https://{ALLOWED}/big.pdf"))
    assert "larger than 50 MiB" in error
    assert streamed == []


# Stopping mid-body leaves httpx's nested stream generators to the garbage
# collector, which trio reports; the cut itself is what this test checks.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_body_that_lies_about_its_length_is_cut_at_the_cap():
    chunk = b"x" * MIB
    sent: list[int] = []

    async def body():
        for _ in range(200):
            sent.append(len(chunk))
            yield chunk

    network = Network(
        {ALLOWED: PUBLIC[:1]},
        lambda _: httpx.Response(
            200, content=body(), headers={"content-type": "application/pdf", "content-length": "10"}
        ),
    )
    error = refused(network.open(f"https://{ALLOWED}/big.pdf"))
    assert "larger than 50 MiB" in error
    assert sum(sent) <= 51 * MIB


# -- bombs and malformed headers ------------------------------------------------


def gzip_layers(data: bytes, layers: int) -> bytes:
    for _ in range(layers):
        data = gzip.compress(data, compresslevel=9)
    return data


def fetcher(respond: Callable[[httpx.Request], httpx.Response]) -> Fetcher:
    return Fetcher.build(
        allowed_hosts=[ALLOWED],
        transport=httpx.MockTransport(respond),
        resolver=lambda _: PUBLIC[:1],
    )


def fetch_error(respond: Callable[[httpx.Request], httpx.Response]) -> str:
    async def run() -> str:
        with pytest.raises(FetchRefused) as caught:
            await fetcher(respond).fetch(f"https://{ALLOWED}/page.html")
        return caught.value.message

    return trio.run(run)


def streamed(body: bytes, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    """A response whose body arrives as a stream, as from a real connection.

    Header values go out as UTF-8 bytes, as a hostile server may send them.
    """
    raw = [(b"content-type", b"text/html")]
    raw += [(name.encode(), value.encode("utf-8")) for name, value in headers.items()]
    return lambda _: httpx.Response(200, stream=httpx.ByteStream(body), headers=raw)


# Refusing mid-body leaves httpx's inner stream generator to the garbage
# collector, which trio reports (as for the lying length above).
unraisable_ok = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@unraisable_ok
def test_a_stacked_gzip_bomb_is_refused_without_inflating_it():
    """A ~1 KB `gzip, gzip` body that would inflate to 512 MiB stays within a few MiB."""
    bomb = gzip_layers(b"\0" * (512 * MIB), 2)
    assert len(bomb) < 2_000

    tracemalloc.start()
    try:
        error = fetch_error(streamed(bomb, **{"content-encoding": "gzip, gzip"}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert "decompression bomb" in error
    assert peak < 8 * MIB, peak


@unraisable_ok
def test_a_single_gzip_bomb_is_refused_early():
    bomb = gzip_layers(b"\0" * (200 * MIB), 1)

    tracemalloc.start()
    try:
        error = fetch_error(streamed(bomb, **{"content-encoding": "gzip"}))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert "decompression bomb" in error
    assert peak < 8 * MIB, peak


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "gzip, gzip", "x-gzip", "identity"])
def test_an_ordinary_compressed_page_is_decoded(encoding: str):
    page = b"<html><body>" + b"<p>Some text that compresses a little.</p>" * 200 + b"</body></html>"
    body = page
    for coding in reversed([c.strip() for c in encoding.split(",")]):
        if coding in ("gzip", "x-gzip"):
            body = gzip.compress(body)
        elif coding == "deflate":
            body = zlib.compress(body)

    async def run() -> bytes:
        _, content = await fetcher(streamed(body, **{"content-encoding": encoding})).fetch(
            f"https://{ALLOWED}/page.html"
        )
        return content

    assert trio.run(run) == page


def test_an_encoding_open_does_not_decode_is_refused():
    error = fetch_error(streamed(b"\x00\x01", **{"content-encoding": "br"}))
    assert "does not decode" in error


def test_corrupt_gzip_is_a_typed_refusal():
    error = fetch_error(streamed(b"not gzip at all", **{"content-encoding": "gzip"}))
    assert "not valid gzip" in error


@pytest.mark.parametrize("length", ["\u00b2", "\u0661\u0662", "12a", "-1", "1e3", " 1 2", "+5"])
def test_a_malformed_content_length_is_a_typed_refusal(length: str):
    error = fetch_error(streamed(b"<html></html>", **{"content-length": length}))
    assert "malformed Content-Length" in error


def test_a_location_that_is_not_a_url_is_a_typed_refusal():
    error = fetch_error(lambda _: httpx.Response(302, headers={"location": "http://[::1"}))
    assert "URL" in error and "location" in error.casefold()


@given(offset=st.integers(0, 2**118 - 1))
def test_site_local_ipv6_is_not_public(offset: int):
    network = ipaddress.ip_network("fec0::/10")
    assert not is_public_address(network[offset])
