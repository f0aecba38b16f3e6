"""reader open over https: allow-list, public addresses only, pinned address, caps.

The network is replaced by an httpx ``MockTransport`` and a resolver stub,
the two seams `reader_tool` offers; conversion is real docling.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

import pytest

from lionfactory.tools._reader_remote import is_public_address
from lionfactory.tools.reader import reader_tool

httpx = pytest.importorskip("httpx")
pytest.importorskip("docling")

PUBLIC = "93.184.216.34"
HTML = b"<html><body><h1>Remote Title</h1><p>Fetched over https.</p></body></html>"


class Server:
    """A MockTransport handler that records every request it sees."""

    def __init__(self, respond: Callable[[httpx.Request], httpx.Response] | None = None):
        self.requests: list[httpx.Request] = []
        self.respond = respond or (
            lambda request: httpx.Response(200, content=HTML, headers={"content-type": "text/html"})
        )

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.respond(request)


def dns(table: dict[str, list[str]]) -> Callable[[str], list[str]]:
    def resolve(host: str) -> list[str]:
        if host not in table:
            raise OSError(f"no such host {host}")
        return table[host]

    return resolve


def make_reader(workspace: Path, server: Server, table=None, hosts=("docs.example.com",)):
    return reader_tool(
        workspace_root=workspace,
        allowed_hosts=hosts,
        transport=httpx.MockTransport(server),
        resolver=dns({"docs.example.com": [PUBLIC]} if table is None else table),
    )


async def test_an_allowed_host_returns_the_document(workspace: Path):
    server = Server()
    reader = make_reader(workspace, server)
    result = await reader(action="open", path="https://docs.example.com/guide")
    assert result["success"] is True, result["error"]
    assert "# Remote Title" in result["content"]
    assert "Fetched over https." in result["content"]
    assert len(server.requests) == 1


async def test_the_request_goes_to_the_checked_address_with_host_and_sni(workspace: Path):
    server = Server()
    reader = make_reader(workspace, server)
    await reader(action="open", path="https://docs.example.com:8443/a/guide.html?v=1")
    (request,) = server.requests
    assert request.url.host == PUBLIC
    assert request.url.port == 8443
    assert request.url.path == "/a/guide.html"
    assert request.url.query == b"v=1"
    assert request.headers["host"] == "docs.example.com:8443"
    assert request.extensions["sni_hostname"] == "docs.example.com"


async def test_ipv6_addresses_are_bracketed_in_the_pinned_url(workspace: Path):
    server = Server()
    reader = make_reader(workspace, server, {"docs.example.com": ["2606:2800:220:1::1"]})
    result = await reader(action="open", path="https://docs.example.com/p.html")
    assert result["success"] is True
    assert server.requests[0].url.host == "2606:2800:220:1::1"


async def test_a_document_type_comes_from_the_content_type(workspace: Path, tmp_path: Path):
    import docx

    document = docx.Document()
    document.add_paragraph("Docx over the wire")
    document.save(tmp_path / "d.docx")
    body = (tmp_path / "d.docx").read_bytes()
    ctype = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    server = Server(lambda r: httpx.Response(200, content=body, headers={"content-type": ctype}))
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/download?id=7"
    )
    assert result["success"] is True, result["error"]
    assert "Docx over the wire" in result["content"]


async def test_no_allowed_hosts_refuses_every_url(workspace: Path):
    server = Server()
    reader = reader_tool(workspace_root=workspace, transport=httpx.MockTransport(server))
    result = await reader(action="open", path="https://docs.example.com/guide.html")
    assert result["success"] is False
    assert "allows no hosts" in result["error"]
    assert "Download the document into the workspace" in result["error"]
    assert server.requests == []


HOSTILE_URLS = [
    ("http://docs.example.com/a.html", "Only https"),
    ("ftp://docs.example.com/a.pdf", "Only https"),
    ("https://user:pw@docs.example.com/a.html", "credentials"),
    ("https://other.example.org/a.html", "not allowed"),
    ("https://docs.example.com.evil.net/a.html", "not allowed"),
    ("https://127.0.0.1/a.html", "IP address"),
    ("https://2130706433/a.html", "IP address"),
    ("https://017700000001/a.html", "IP address"),
    ("https://0177.0.0.1/a.html", "not a valid URL"),
    ("https://0x7f000001/a.html", "IP address"),
    ("https://0x7f.1/a.html", "IP address"),
    ("https://127.1/a.html", "IP address"),
    ("https://[::1]/a.html", "IP address"),
    ("https://[::ffff:127.0.0.1]/a.html", "IP address"),
    ("https://[::ffff:7f00:1]/a.html", "IP address"),
    ("https://169.254.169.254/latest/meta-data/", "IP address"),
    ("https://[fd00:ec2::254]/latest/meta-data/", "IP address"),
]


@pytest.mark.parametrize(("url", "expected"), HOSTILE_URLS)
async def test_hostile_urls_are_refused_before_any_request(workspace, url, expected):
    server = Server()
    result = await make_reader(workspace, server)(action="open", path=url)
    assert result["success"] is False
    assert expected in result["error"]
    assert server.requests == []


@pytest.mark.parametrize(
    "addresses",
    [
        ["10.0.0.5"],
        ["192.168.1.1"],
        ["172.16.0.1"],
        ["127.0.0.1"],
        ["169.254.169.254"],
        ["100.100.100.200"],
        ["0.0.0.0"],
        ["224.0.0.1"],
        ["240.0.0.1"],
        ["::1"],
        ["::ffff:10.0.0.1"],
        ["::ffff:93.184.216.34"],
        ["fe80::1%eth0"],
        ["fd00:ec2::254"],
        ["64:ff9b::a00:1"],
        ["2002:0a00:0001::1"],
        [PUBLIC, "10.0.0.5"],
    ],
)
async def test_a_name_resolving_to_a_non_public_address_is_refused(workspace, addresses):
    server = Server()
    reader = make_reader(workspace, server, {"docs.example.com": addresses})
    result = await reader(action="open", path="https://docs.example.com/a.html")
    assert result["success"] is False
    assert "non-public address" in result["error"]
    assert server.requests == []


async def test_an_unresolvable_host_is_refused(workspace: Path):
    server = Server()
    reader = make_reader(workspace, server, {})
    result = await reader(action="open", path="https://docs.example.com/a.html")
    assert result["success"] is False
    assert "cannot be resolved" in result["error"]
    assert server.requests == []


def redirect_to(location: str) -> Callable[[httpx.Request], httpx.Response]:
    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/start":
            return httpx.Response(302, headers={"location": location})
        return httpx.Response(200, content=HTML, headers={"content-type": "text/html"})

    return respond


async def test_a_redirect_to_an_allowed_public_host_is_followed(workspace: Path):
    server = Server(redirect_to("https://cdn.example.com/final.html"))
    reader = make_reader(
        workspace,
        server,
        {"docs.example.com": [PUBLIC], "cdn.example.com": ["151.101.1.1"]},
        hosts=("docs.example.com", "cdn.example.com"),
    )
    result = await reader(action="open", path="https://docs.example.com/start")
    assert result["success"] is True, result["error"]
    assert [r.url.host for r in server.requests] == [PUBLIC, "151.101.1.1"]
    assert server.requests[1].headers["host"] == "cdn.example.com"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("https://evil.example.net/x.html", "not allowed"),
        ("http://docs.example.com/x.html", "Only https"),
        ("https://169.254.169.254/latest/meta-data/", "IP address"),
        ("https://inside.example.com/x.html", "non-public address"),
    ],
)
async def test_redirects_are_checked_again(workspace, location, expected):
    server = Server(redirect_to(location))
    reader = make_reader(
        workspace,
        server,
        {"docs.example.com": [PUBLIC], "inside.example.com": ["10.1.2.3"]},
        hosts=("docs.example.com", "inside.example.com"),
    )
    result = await reader(action="open", path="https://docs.example.com/start")
    assert result["success"] is False
    assert expected in result["error"]
    assert len(server.requests) == 1


async def test_redirect_loops_stop(workspace: Path):
    server = Server(lambda r: httpx.Response(302, headers={"location": "/start"}))
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/start"
    )
    assert result["success"] is False
    assert "redirected more than 5 times" in result["error"]
    assert len(server.requests) == 6


async def test_a_declared_body_over_50_mib_is_refused(workspace: Path):
    server = Server(
        lambda r: httpx.Response(
            200,
            content=b"x",
            headers={"content-type": "application/pdf", "content-length": str(50 * 2**20 + 1)},
        )
    )
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/big.pdf"
    )
    assert result["success"] is False
    assert "larger than 50 MiB" in result["error"]


# Stopping mid-body leaves httpx's nested stream generators to the garbage
# collector, which trio reports; the cut itself is what this test checks.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_streamed_body_over_50_mib_is_cut_off(workspace: Path):
    chunk = b"x" * 2**20

    async def body():
        for _ in range(51):
            yield chunk

    server = Server(
        lambda r: httpx.Response(200, content=body(), headers={"content-type": "application/pdf"})
    )
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/big.pdf"
    )
    assert result["success"] is False
    assert "larger than 50 MiB" in result["error"]


async def test_an_http_error_status_is_reported(workspace: Path):
    server = Server(lambda r: httpx.Response(404))
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/gone.pdf"
    )
    assert result["success"] is False
    assert "HTTP 404" in result["error"]


async def test_an_unsupported_content_type_is_refused(workspace: Path):
    server = Server(
        lambda r: httpx.Response(200, content=b"{}", headers={"content-type": "application/json"})
    )
    result = await make_reader(workspace, server)(
        action="open", path="https://docs.example.com/api"
    )
    assert result["success"] is False
    assert "'application/json'" in result["error"]


async def test_a_transport_failure_is_reported(workspace: Path):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    result = await make_reader(workspace, Server(refuse))(
        action="open", path="https://docs.example.com/a.html"
    )
    assert result["success"] is False
    assert "failed" in result["error"]


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1::1", True),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("192.0.2.1", False),
        ("::ffff:8.8.8.8", False),
        ("ff02::1", False),
    ],
)
def test_is_public_address(address: str, public: bool):
    assert is_public_address(ipaddress.ip_address(address)) is public


async def test_a_server_that_never_answers_is_given_up(workspace: Path, autojump_clock):
    import trio

    async def stall(request: httpx.Request) -> httpx.Response:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    reader = reader_tool(
        workspace_root=workspace,
        allowed_hosts=["docs.example.com"],
        transport=httpx.MockTransport(stall),
        resolver=lambda host: [PUBLIC],
    )
    result = await reader(action="open", path="https://docs.example.com/a.html")
    assert result["success"] is False
    assert "took over 120 s" in result["error"]


def test_the_description_names_the_allowed_hosts(workspace: Path):
    open_reader = reader_tool(workspace_root=workspace, allowed_hosts=["B.example.com", "a.org"])
    closed_reader = reader_tool(workspace_root=workspace)
    assert "only from: a.org, b.example.com." in open_reader.description
    assert "Remote URLs are disabled" in closed_reader.description
