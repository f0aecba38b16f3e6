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
followed by hand, each new URL going through the same checks. The body is
read as a stream and refused past 50 MiB. httpx is imported lazily and its
transport and the resolver are seams, so tests need no network.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
from collections.abc import AsyncGenerator, Callable, Iterable
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, cast

import anyio.to_thread
import attrs

if TYPE_CHECKING:
    import httpx

__all__ = ["MAX_REDIRECTS", "FetchRefused", "Fetcher", "is_public_address"]

MAX_REDIRECTS = 5
TIMEOUT_SECONDS = 30.0
TOTAL_SECONDS = 120.0
MAX_BODY_BYTES = 50 * 1024 * 1024
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


class FetchRefused(Exception):
    """A URL was refused or could not be fetched; `message` is for the model."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def is_public_address(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a request to `ip` can only reach the public internet."""
    if ip in _METADATA or any(ip in net for net in _NOT_GLOBAL if net.version == ip.version):
        return False
    if isinstance(ip, ipaddress.IPv6Address) and (
        ip.ipv4_mapped is not None
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
        raise FetchRefused(f"Fetching {url!r} took over {TOTAL_SECONDS:.0f} s; gave up.")

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
                    raise FetchRefused(f"Fetching {url!r} failed: {exc!r}.") from None
                try:
                    if response.status_code in _REDIRECTS and "location" in response.headers:
                        target = logical.join(response.headers["location"])
                        logical = self._parse(httpx, str(target))
                        continue
                    if response.status_code != 200:
                        raise FetchRefused(
                            f"Fetching {str(logical)!r} returned HTTP {response.status_code}; "
                            f"check the URL."
                        )
                    name = _document_name(logical, response.headers.get("content-type", ""))
                    body = await _read_capped(response, str(logical))
                    return name, body
                finally:
                    await response.aclose()
        raise FetchRefused(f"{url!r} redirected more than {MAX_REDIRECTS} times; not followed.")

    def _parse(self, httpx: Any, url: str) -> httpx.URL:
        try:
            parsed = httpx.URL(url.strip())
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            raise FetchRefused(f"{url!r} is not a valid URL ({exc}).") from None
        if parsed.scheme != "https":
            raise FetchRefused(f"Only https URLs can be opened, got {url!r}; use an https:// URL.")
        if parsed.userinfo:
            raise FetchRefused(f"URLs with credentials are refused: {url!r}.")
        host = _ascii_host(parsed)
        if not host or _is_ip_literal(host):
            raise FetchRefused(
                f"{url!r} names an IP address; remote documents are fetched only from "
                f"allowed host names ({', '.join(sorted(self.allowed_hosts))})."
            )
        if host not in self.allowed_hosts:
            raise FetchRefused(
                f"The host {host!r} is not allowed; 'open' fetches only from "
                f"{', '.join(sorted(self.allowed_hosts))}. Use one of those, or a local file."
            )
        return parsed  # type: ignore[no-any-return]

    async def _checked_address(self, url: httpx.URL) -> str:
        host = _ascii_host(url)
        try:
            answers = await anyio.to_thread.run_sync(self.resolver, host)
        except OSError as exc:
            raise FetchRefused(f"The host {host!r} cannot be resolved ({exc}).") from None
        if not answers:
            raise FetchRefused(f"The host {host!r} resolved to no address.")
        addresses = []
        for answer in answers:
            try:
                ip = ipaddress.ip_address(str(answer).split("%", 1)[0])
            except ValueError:
                raise FetchRefused(
                    f"The host {host!r} resolved to {answer!r}, not an IP."
                ) from None
            if not is_public_address(ip):
                raise FetchRefused(
                    f"The host {host!r} resolves to a non-public address ({ip}); "
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
        headers={"Host": host_header, "Accept": ", ".join(_CONTENT_TYPES)},
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
        f"{str(url)!r} is not a document 'open' converts (content type {mime or 'unknown'!r}); "
        f"it handles PDF, PPTX, DOCX and HTML."
    )


async def _read_capped(response: httpx.Response, url: str) -> bytes:
    too_large = FetchRefused(
        f"{url!r} is larger than {MAX_BODY_BYTES // (1024 * 1024)} MiB; 'open' refuses it."
    )
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    # aclosing: leaving the loop early closes httpx's outer generator now
    # rather than at garbage collection (`aiter_bytes` is an async generator,
    # though typed as an iterator).
    stream = cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
    async with contextlib.aclosing(stream) as body:
        async for chunk in body:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise too_large
            chunks.append(chunk)
    return b"".join(chunks)
