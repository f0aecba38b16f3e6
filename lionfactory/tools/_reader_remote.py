"""Fetching remote documents for the reader's ``open``, without SSRF.

A URL is fetched only when every check passes, all before any request:

* the scheme is ``https`` and the URL carries no user info;
* the host is a name (IP literals are refused in every spelling: dotted,
  decimal ``2130706433``, octal ``0177.0.0.1``, hex ``0x7f.1``, IPv6 and
  IPv4-mapped forms) and is in the factory's ``allowed_hosts``;
* every address the name resolves to is public: no loopback, private,
  link-local (which holds the cloud metadata address 169.254.169.254),
  multicast, reserved, unspecified, shared, IPv4-mapped, 6to4, Teredo or
  NAT64 address.

The request then goes to the address that was checked, so a second DNS answer
cannot redirect it (DNS rebinding): the URL's host is replaced by that IP,
the ``Host`` header keeps the name, and httpx's ``sni_hostname`` request
extension keeps TLS's SNI and certificate check on the name. Redirects are
followed by hand, each new URL going through the same checks.

The body is read raw and decoded here, not by httpx: httpx inflates each
network chunk in one call, so a 1 KB ``Content-Encoding: gzip, gzip`` bomb
becomes hundreds of megabytes before any cap is looked at. Here every layer
(``gzip``, ``deflate``, ``identity``, in any stack) inflates at most
`DECODE_CHUNK` bytes at a time, the 50 MiB cap applies to the *decoded*
bytes, and a body that decodes to more than `MAX_RATIO` times its size on the
wire (beyond a first MiB) is refused as a bomb as soon as it crosses the
line. Only those encodings are asked for (``Accept-Encoding``); any other is
refused. Headers are parsed strictly: a ``Content-Length`` that is not plain
ASCII digits, or a ``Location`` that is not a URL, is a typed refusal, not an
exception. httpx is imported lazily and its transport and the resolver are
seams, so tests need no network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import zlib
from collections.abc import AsyncGenerator, Callable, Iterable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, cast

import anyio.to_thread
import attrs

from lionfactory._echo import echo
from lionfactory.errors import ToolFailure

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_REDIRECTS", "FetchRefused", "Fetcher", "is_public_address"]

MAX_REDIRECTS = 5
TIMEOUT_SECONDS = 30.0
TOTAL_SECONDS = 120.0
MAX_BODY_BYTES = 50 * 1024 * 1024
DECODE_CHUNK = 64 * 1024
"""Most bytes one decoding step produces, per layer: bounds memory whatever the ratio."""
MAX_RATIO = 100
"""Decoded bytes per byte on the wire past which a body is a decompression bomb.

Text and HTML compress 3 to 10 times, repetitive markup rarely past 30; one
gzip layer can reach about 1,000 and stacked layers millions.
"""
_RATIO_GRACE = 1024 * 1024  # a small document may compress better than MAX_RATIO
_ENCODINGS = ("gzip", "deflate")
_CONTENT_LENGTH = re.compile(r"[0-9]+")
_INSTALL_HINT = "pip install 'lionfactory[documents]'"

_CONTENT_TYPES = {
    "application/pdf": ".pdf",
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": ".pptx",
}
_SUFFIXES = frozenset(_CONTENT_TYPES.values()) | {".htm"}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# A last label made of digits or hex is an IPv4 literal to inet_aton-style
# parsers (127.1, 2130706433, 0x7f.1, 0177.0.0.1); no real TLD looks like it.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# IANA special-purpose blocks that are not globally reachable but that some
# Python releases' `ipaddress` tables still call global (192.0.0.0/24 before
# the CVE-2024-4032 fix, 3fff::/20 and 5f00::/16 in older tables): listed
# here so the check does not depend on the running Python's version.
_NOT_GLOBAL = tuple(
    ipaddress.ip_network(n)
    for n in ("192.0.0.0/24", "192.88.99.0/24", "198.18.0.0/15", "3fff::/20", "5f00::/16")
)
_METADATA = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254")
)


class FetchRefused(ToolFailure):
    """A URL was refused or could not be fetched; `message` is for the model."""


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a request to `ip` can only reach the public internet."""
    if ip in _METADATA or any(ip in net for net in _NOT_GLOBAL if net.version == ip.version):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and (
        ip.is_site_local  # fec0::/10, deprecated, still routed inside some sites
        or ip.ipv4_mapped is not None
        or ip.sixtofour is not None
        or ip.teredo is not None
        or ip in _NAT64
    ):
        return False
    return ip.is_global and not (
        ip.is_multicast
        or ip.is_reserved
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_private
        or ip.is_unspecified
    )


def _is_ip_literal(host: str) -> bool:
    if ":" in host:
        return True
    last = host.rstrip(".").rsplit(".", 1)[-1]
    return bool(_NUMERIC_LABEL.match(last))


def _ascii_host(url: httpx.URL) -> str:
    # `url.host` is IDNA-decoded for display; the wire form is `raw_host`.
    return _normalise_host(url.raw_host.decode("ascii"))


def _normalise_host(host: str) -> str:
    return host.strip().rstrip(".").casefold()


def normalise_allowed_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Validate the factory's ``allowed_hosts`` (names only, no wildcards)."""
    if isinstance(hosts, str):
        raise TypeError(f"allowed_hosts must be a collection of host names, got {hosts!r}")
    out = set()
    for host in hosts:
        if not isinstance(host, str) or not host.strip():
            raise ValueError(f"allowed_hosts entries must be host names, got {host!r}")
        name = _normalise_host(host)
        if any(ch in name for ch in "/:@*?# ") or _is_ip_literal(name):
            raise ValueError(
                f"allowed_hosts entries must be plain host names (no scheme, port, "
                f"wildcard or IP address), got {host!r}"
            )
        out.add(name.encode("idna").decode("ascii"))
    return frozenset(out)


def _system_resolver(host: str) -> list[str]:
    infos = socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@attrs.frozen
class Fetcher:
    """Fetches https documents from allow-listed hosts (see the module docstring)."""

    allowed_hosts: frozenset[str]
    transport: Any
    resolver: Callable[[str], list[str]]

    @classmethod
    def build(
        cls,
        *,
        allowed_hosts: Iterable[str],
        transport: httpx.AsyncBaseTransport | None,
        resolver: Callable[[str], list[str]] | None,
    ) -> Fetcher:
        """Validate the options; raises ValueError/TypeError on misuse."""
        return cls(
            allowed_hosts=normalise_allowed_hosts(allowed_hosts),
            transport=transport,
            resolver=resolver or _system_resolver,
        )

    async def fetch(self, url: str) -> tuple[str, bytes]:
        """Fetch `url`; return a file name (for docling's format detection) and the body.

        Raises:
            FetchRefused: a check failed, or the fetch did; the message says why.
        """
        try:
            import httpx
        except ImportError:
            raise FetchRefused(
                f"Opening remote documents needs httpx, which is not installed. "
                f"Install it with: {_INSTALL_HINT}"
            ) from None
        if not self.allowed_hosts:
            raise FetchRefused(
                "Remote documents are disabled: this reader allows no hosts. "
                "Download the document into the workspace and open its path instead."
            )
        logical = self._parse(httpx, url)
        # httpx's timeout bounds each read; this bounds the whole fetch, so a
        # server dripping one byte at a time cannot hold the call forever.
        with anyio.move_on_after(TOTAL_SECONDS):
            return await self._fetch(httpx, url, logical)
        raise FetchRefused(f"Fetching {echo(url)} took over {TOTAL_SECONDS:.0f} s; gave up.")

    async def _fetch(self, httpx: Any, url: str, logical: httpx.URL) -> tuple[str, bytes]:
        async with httpx.AsyncClient(
            transport=self.transport,
            trust_env=False,  # a proxy from the environment would bypass the address check
            follow_redirects=False,
            timeout=httpx.Timeout(TIMEOUT_SECONDS),
        ) as client:
            for _ in range(MAX_REDIRECTS + 1):
                address = await self._checked_address(logical)
                request = _pinned_request(client, logical, address)
                try:
                    response = await client.send(request, stream=True)
                except httpx.HTTPError as exc:
                    raise FetchRefused(f"Fetching {echo(url)} failed: {exc!r}.") from None
                try:
                    if response.status_code in _REDIRECTS and "location" in response.headers:
                        try:
                            target = logical.join(response.headers["location"])
                        except (httpx.InvalidURL, TypeError, ValueError):
                            raise FetchRefused(
                                f"Fetching {echo(str(logical))} redirected to a Location that "
                                f"is not a URL; not followed."
                            ) from None
                        logical = self._parse(httpx, str(target))
                        continue
                    if response.status_code != 200:
                        raise FetchRefused(
                            f"Fetching {echo(str(logical))} returned HTTP {response.status_code}; "
                            f"check the URL."
                        )
                    name = _document_name(logical, response.headers.get("content-type", ""))
                    try:
                        body = await _read_capped(response, str(logical))
                    except httpx.HTTPError as exc:
                        raise FetchRefused(
                            f"Reading {echo(str(logical))} failed: {type(exc).__name__}."
                        ) from None
                    return name, body
                finally:
                    await response.aclose()
        raise FetchRefused(f"{echo(url)} redirected more than {MAX_REDIRECTS} times; not followed.")

    def _parse(self, httpx: Any, url: str) -> httpx.URL:
        try:
            parsed = httpx.URL(url.strip())
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise FetchRefused(f"{echo(url)} is not a valid URL ({exc}).") from None
        if parsed.scheme != "https":
            raise FetchRefused(
                f"Only https URLs can be opened, got {echo(url)}; use an https:// URL."
            )
        if parsed.userinfo:
            raise FetchRefused(f"URLs with credentials are refused: {echo(url)}.")
        host = _ascii_host(parsed)
        if not host or _is_ip_literal(host):
            raise FetchRefused(
                f"{echo(url)} names an IP address; remote documents are fetched only from "
                f"allowed host names ({', '.join(sorted(self.allowed_hosts))})."
            )
        if host not in self.allowed_hosts:
            raise FetchRefused(
                f"The host {echo(host)} is not allowed; 'open' fetches only from "
                f"{', '.join(sorted(self.allowed_hosts))}. Use one of those, or a local file."
            )
        return parsed  # type: ignore[no-any-return]

    async def _checked_address(self, url: httpx.URL) -> str:
        host = _ascii_host(url)
        try:
            answers = await anyio.to_thread.run_sync(self.resolver, host)
        except OSError as exc:
            raise FetchRefused(f"The host {echo(host)} cannot be resolved ({exc}).") from None
        if not answers:
            raise FetchRefused(f"The host {echo(host)} resolved to no address.")
        addresses = []
        for answer in answers:
            try:
                ip = ipaddress.ip_address(str(answer).split("%", 1)[0])
            except ValueError:
                raise FetchRefused(
                    f"The host {echo(host)} resolved to {echo(answer)}, not an IP."
                ) from None
            if not is_public_address(ip):
                raise FetchRefused(
                    f"The host {echo(host)} resolves to a non-public address ({ip}); "
                    f"fetching it is refused."
                )
            addresses.append(ip)
        return str(addresses[0])


def _pinned_request(client: httpx.AsyncClient, url: httpx.URL, address: str) -> httpx.Request:
    """A request to the checked `address`, with Host and SNI kept on the name."""
    host = _ascii_host(url)
    host_header = host if url.port is None else f"{host}:{url.port}"
    return client.build_request(
        "GET",
        url.copy_with(host=address),
        headers={
            "Host": host_header,
            "Accept": ", ".join(_CONTENT_TYPES),
            "Accept-Encoding": ", ".join(_ENCODINGS),
        },
        extensions={"sni_hostname": host},
    )


def _document_name(url: httpx.URL, content_type: str) -> str:
    name = PurePosixPath(url.path).name
    suffix = PurePosixPath(name).suffix.casefold()
    if suffix in _SUFFIXES:
        return name
    mime = content_type.split(";", 1)[0].strip().casefold()
    if mime in _CONTENT_TYPES:
        return f"document{_CONTENT_TYPES[mime]}"
    raise FetchRefused(
        f"{echo(str(url))} is not a document 'open' converts (content type {mime or 'unknown'!r}); "
        f"it handles PDF, PPTX, DOCX and HTML."
    )


@attrs.define(eq=False)
class _Layer:
    """One content-coding layer being undone."""

    coding: str
    inflater: Any  # zlib's decompressobj has no public type
    started: bool = False

    @classmethod
    def for_coding(cls, coding: str) -> _Layer:
        wbits = zlib.MAX_WBITS | 16 if coding == "gzip" else zlib.MAX_WBITS
        return cls(coding, zlib.decompressobj(wbits))


class _Decoder:
    """Undoes a stack of content codings in bounded steps and watches the ratio."""

    def __init__(self, codings: list[str], url: str) -> None:
        self.url = url
        # The last coding applied is undone first.
        self.layers = [_Layer.for_coding(coding) for coding in reversed(codings)]
        self.raw = 0
        self.decoded = 0
        self.chunks: list[bytes] = []

    def feed(self, raw: bytes) -> None:
        self.raw += len(raw)
        self._through(raw, 0)

    def finish(self) -> bytes:
        for index, layer in enumerate(self.layers):
            tail = layer.inflater.flush()
            if tail:
                self._through(tail, index + 1)
        return b"".join(self.chunks)

    def _through(self, data: bytes, index: int) -> None:
        if index == len(self.layers):
            self._keep(data)
            return
        layer = self.layers[index]
        pending = data
        while True:
            try:
                out = layer.inflater.decompress(pending, DECODE_CHUNK)
            except zlib.error:
                if layer.coding == "deflate" and not layer.started:
                    # Some servers send raw deflate without the zlib wrapper.
                    layer.inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                    layer.started = True
                    continue
                raise FetchRefused(
                    f"{echo(self.url)} sent a body that is not valid {layer.coding} data."
                ) from None
            layer.started = True
            pending = layer.inflater.unconsumed_tail
            if out:
                self._through(out, index + 1)
            elif not pending:
                return

    def _keep(self, data: bytes) -> None:
        self.decoded += len(data)
        if self.decoded > MAX_BODY_BYTES:
            raise FetchRefused(
                f"{echo(self.url)} is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB "
                f"(decoded); 'open' refuses it."
            )
        if self.decoded > _RATIO_GRACE and self.decoded > MAX_RATIO * self.raw:
            raise FetchRefused(
                f"{echo(self.url)} decompresses to over {MAX_RATIO} times its size on the "
                f"wire, which is a decompression bomb, not a document; 'open' refuses it."
            )
        self.chunks.append(data)


def _codings(header: str, url: str) -> list[str]:
    codings = [c.strip().casefold() for c in header.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    for coding in codings:
        if coding not in (*_ENCODINGS, "x-gzip"):
            raise FetchRefused(
                f"{echo(url)} was sent with Content-Encoding {echo(coding, 60)}, which 'open' "
                f"does not decode (it asks for {', '.join(_ENCODINGS)})."
            )
    if len(codings) > 4:
        raise FetchRefused(f"{echo(url)} stacks {len(codings)} content encodings; refused.")
    return ["gzip" if c == "x-gzip" else c for c in codings]


async def _read_capped(response: httpx.Response, url: str) -> bytes:
    declared = response.headers.get("content-length", "").strip()
    if declared and not _CONTENT_LENGTH.fullmatch(declared):
        raise FetchRefused(
            f"{echo(url)} answered with a malformed Content-Length header "
            f"({echo(declared, 40)}); 'open' refuses it."
        )
    # Length first: int() refuses strings past 4,300 digits.
    if declared and (len(declared) > 18 or int(declared) > MAX_BODY_BYTES):
        raise FetchRefused(
            f"{echo(url)} is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB; 'open' refuses it."
        )
    if response.is_stream_consumed:
        # A transport that built the response from bytes already in memory
        # (httpx's MockTransport): httpx has read and decoded it; only the cap
        # is left to apply.
        decoded = _Decoder([], url)
        decoded.feed(response.content)
        return decoded.finish()
    decoder = _Decoder(_codings(response.headers.get("content-encoding", ""), url), url)
    # aclosing: leaving the loop early closes httpx's outer generator now
    # rather than at garbage collection (`aiter_raw` is an async generator,
    # though typed as an iterator). Raw bytes: the decoding above is ours.
    stream = cast("AsyncGenerator[bytes, None]", response.aiter_raw(DECODE_CHUNK))
    async with contextlib.aclosing(stream) as body:
        async for chunk in body:
            if decoder.raw + len(chunk) > MAX_BODY_BYTES:
                raise FetchRefused(
                    f"{echo(url)} is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB; "
                    f"'open' refuses it."
                )
            decoder.feed(chunk)
    return decoder.finish()
