"""The egress guard: every outbound HTTP request to a URL that a user or an admin can set goes through here.

A URL a person typed is a way into the portal's network: a webhook at ``http://127.0.0.1:8099/`` makes the worker
call its own neighbours, and a reply shown back turns the portal into a proxy that reads them. The guard:

- parses the URL itself, strictly, and refuses what two parsers could read differently (a backslash before ``@``,
  spaces, percent-encoded or non-ASCII hosts, user info, bad ports, an unclosed ``[``), checking that
  :func:`urllib.parse.urlsplit` and urllib3 agree with it on scheme, host and port;
- refuses IPv4 addresses written any way but four decimal numbers (``2130706433``, ``0x7f.1``, ``0177.0.0.1``,
  ``127.1``) and names that are loopback by definition (``localhost``, ``*.localhost``);
- resolves the host **once** and connects to that address (a DNS answer cannot change between check and connect),
  sending the original name as ``Host`` and, for https, as the TLS server name and the certificate's expected name;
- refuses loopback, private, link-local (cloud metadata at 169.254.169.254), unspecified, shared (CGNAT),
  reserved, multicast and documentation addresses, also when they hide in IPv6 (IPv4-mapped ``::ffff:127.0.0.1``,
  IPv4-compatible, 6to4, Teredo, NAT64) — unless the admin lists their network in the policy;
- follows no redirect, bounds the connection and the reply with timeouts and a size cap, and hands the caller the
  status and the body to use, never to show: callers tell people the status class only.

:class:`EgressPolicy` says what one purpose allows (webhooks: ``NOTIFY_WEBHOOK_ALLOWED_HOSTS`` and
``NOTIFY_WEBHOOK_ALLOWED_NETWORKS``; DCGM scrapes: ``HEALTH_SCRAPE_ALLOWED_NETWORKS``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    LocationParseError,
    NewConnectionError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.util import parse_url

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: ``resolve(host, port)`` → the addresses the name has (tests give their own; the default asks the system).
Resolver = Callable[[str, int], list[str]]

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{1,5}))?$")
_BRACKETED = re.compile(r"^\[(?P<host>[0-9A-Fa-f:.]+)\](?::(?P<port>[0-9]{1,5}))?$")
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
#: A label a resolver may read as a number (decimal, octal with a leading 0, hex with 0x).
_NUMERIC_LABEL = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")
#: NAT64's well-known prefix (RFC 6052): 64:ff9b::a.b.c.d reaches a.b.c.d through a NAT64 gateway.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
#: The deprecated IPv4-compatible addresses ::a.b.c.d (``::`` and ``::1`` themselves excepted).
_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")


class EgressRefused(Exception):
    """The URL or the address it leads to is not allowed (or not well formed); ``message`` says why, plainly."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EgressUnavailable(Exception):
    """The request was allowed but did not complete (no connection, timeout, TLS failure); ``message`` is coarse."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class EgressPolicy:
    """What one purpose may reach: hosts (with their subdomains; empty: any) and the special-use networks an admin
    allows (empty: none — only public addresses)."""

    allowed_hosts: tuple[str, ...] = ()
    allowed_networks: tuple[IPNetwork, ...] = ()
    what: str = "requests"  # how refusals name what is sent ("webhooks may only go to …")

    @classmethod
    def from_settings(
        cls, *, hosts: Iterable[str] = (), networks: Iterable[str] = (), what: str = "requests"
    ) -> EgressPolicy:
        """A policy from settings lists (host names; CIDRs such as ``10.0.0.0/8`` or single addresses)."""
        clean_hosts = tuple(h.strip().lower().rstrip(".").removeprefix("*.") for h in hosts if h.strip())
        return cls(allowed_hosts=clean_hosts, allowed_networks=tuple(parse_networks(networks)), what=what)


@dataclass(frozen=True)
class Target:
    """A URL as the guard read it: what is connected to and what is sent."""

    scheme: str
    host: str  # lower case, no brackets, no trailing dot
    port: int
    path: str  # path and query, as given ("/" when empty)
    ip_literal: IPAddress | None

    @property
    def host_header(self) -> str:
        """The ``Host`` header: the name as given (brackets around IPv6), the port where it is not the default."""
        host = f"[{self.host}]" if isinstance(self.ip_literal, ipaddress.IPv6Address) else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"


@dataclass(frozen=True)
class EgressResponse:
    """What came back: the status, the headers, and at most ``max_bytes`` of the body (for the caller's use only)."""

    status: int
    headers: Mapping[str, str]
    body: bytes
    truncated: bool
    address: str

    @property
    def status_class(self) -> str:
        """``2xx``, ``4xx``…: all a person is told of an answer."""
        return f"{self.status // 100}xx"


def parse_networks(values: Iterable[str]) -> list[IPNetwork]:
    """CIDRs (or single addresses) from a settings list; a bad one raises ValueError naming it."""
    out = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            out.append(ipaddress.ip_network(text, strict=False))
        except ValueError as exc:
            raise ValueError(f"{text!r} is not an IP network (e.g. 10.0.0.0/8, fd00::/8, 192.0.2.7)") from exc
    return out


# --- parsing -------------------------------------------------------------------------------------------------------


def _refuse(message: str) -> EgressRefused:
    return EgressRefused(message)


def _check_characters(url: str) -> None:
    if len(url) > MAX_URL_LENGTH:
        raise _refuse(f"the URL is longer than {MAX_URL_LENGTH} characters")
    for ch in url:
        if ch == "\\":
            raise _refuse("a backslash (\\) is not allowed in the URL")
        if ord(ch) <= 0x20 or ord(ch) == 0x7F:
            raise _refuse("spaces and control characters are not allowed in the URL (percent-encode them)")
        if ord(ch) > 0x7E:
            raise _refuse("give the URL in ASCII (punycode for an international name, percent-encoding in the path)")
    if "%00" in url.lower():
        raise _refuse("%00 (a NUL byte) is not allowed in the URL")


def _host_name(raw: str) -> tuple[str, IPAddress | None]:
    """The host of an unbracketed authority: an IPv4 address in dotted decimal, or a DNS name."""
    host = raw.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise _refuse("the URL has no host")
    labels = host.split(".")
    if all(_NUMERIC_LABEL.match(label) for label in labels) or _NUMERIC_LABEL.match(labels[-1]):
        try:
            return host, ipaddress.IPv4Address(host)
        except ValueError:
            raise _refuse(
                f"{raw!r} is not an IPv4 address written as four decimal numbers (a.b.c.d) nor a host name"
            ) from None
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise _refuse(f"{raw!r} is not a valid host name (letters, digits and '-' between dots)")
    if host == "localhost" or host.endswith(".localhost"):
        raise _refuse(f"{raw!r} is this machine (loopback)")
    return host, None


def parse_target(url: str) -> Target:
    """Read an http(s) URL strictly; raises EgressRefused saying what is wrong with it."""
    if not isinstance(url, str) or not url:
        raise _refuse("give an http:// or https:// URL")
    _check_characters(url)
    match = _SCHEME.match(url)
    if match is None:
        raise _refuse("give an http:// or https:// URL")
    scheme = match.group(1).lower()
    if scheme not in DEFAULT_PORTS:
        raise _refuse(f"{scheme}:// URLs are not allowed: give an http:// or https:// URL")
    rest = url[match.end() :]
    cut = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if not authority:
        raise _refuse("the URL has no host")
    if "@" in authority:
        raise _refuse("user names and passwords in the URL are not accepted")
    if "%" in authority:
        raise _refuse("percent-encoding is not allowed in the host")
    if authority.endswith(":"):
        raise _refuse("the port after ':' is missing")
    if authority.startswith("["):
        bracketed = _BRACKETED.match(authority)
        if bracketed is None:
            raise _refuse("an IPv6 address must be written [address] or [address]:port")
        try:
            ip: IPAddress | None = ipaddress.IPv6Address(bracketed.group("host"))
        except ValueError:
            raise _refuse(f"[{bracketed.group('host')}] is not an IPv6 address") from None
        host, port_text = str(ip), bracketed.group("port")
    else:
        plain = _HOST_PORT.match(authority)
        if plain is None:
            raise _refuse(f"{authority!r} is not a host[:port]")
        host, ip = _host_name(plain.group("host"))
        port_text = plain.group("port")
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    if not 1 <= port <= 65535:
        raise _refuse(f"port {port_text} is not between 1 and 65535")
    path = tail.split("#", 1)[0] or "/"
    if path.startswith("?"):
        path = "/" + path
    target = Target(scheme=scheme, host=host, port=port, path=path, ip_literal=ip)
    _check_parsers_agree(url, target)
    return target


def _same_host(host: str | None) -> str:
    """A host as compared between parsers: an address in its one canonical form, a name in lower case."""
    text = (host or "").strip("[]").lower().rstrip(".")
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text


def _check_parsers_agree(url: str, target: Target) -> None:
    """urlsplit (what the form checked before) and urllib3 (what requests connects with) read the same host."""
    try:
        split = urlsplit(url)
        split_host, split_port = split.hostname, split.port
        parsed = parse_url(url)
    except (ValueError, LocationParseError):
        raise _refuse("the URL is not well formed") from None
    default = DEFAULT_PORTS[target.scheme]
    readings = {
        (split.scheme.lower(), _same_host(split_host), split_port or default),
        ((parsed.scheme or "").lower(), _same_host(parsed.host), parsed.port or default),
    }
    if readings != {(target.scheme, _same_host(target.host), target.port)}:
        raise _refuse("the URL reads differently to different URL parsers")


# --- addresses -------------------------------------------------------------------------------------------------------


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, compatible, 6to4, Teredo client, NAT64), else None."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64 or (ip in _V4_COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _kind(ip: IPAddress) -> str | None:
    """Why an address is not a public one (None: it is)."""
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_unspecified:
        return "the unspecified address"
    if ip.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if ip.is_multicast:
        return "a multicast address"
    if isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.IPv4Network("100.64.0.0/10"):
        return "a shared (carrier-grade NAT) address"
    if ip.is_private:
        return "a private-network address"
    if ip.is_reserved or not ip.is_global:
        return "a reserved or special-use address"
    return None


def _refused_address(ip: IPAddress, policy: EgressPolicy) -> tuple[str, str] | None:
    """(the address as shown, what kind it is) when the policy refuses to connect to ``ip``; None: allowed."""
    inner = embedded_ipv4(ip)
    for candidate in (ip, inner):
        if candidate is not None and any(
            candidate.version == net.version and candidate in net for net in policy.allowed_networks
        ):
            return None
    if inner is not None:  # the IPv4 address it reaches decides
        kind = _kind(inner)
        return None if kind is None else (f"{ip} (that is {inner})", kind)
    kind = _kind(ip)
    return None if kind is None else (str(ip), kind)


def address_problem(ip: IPAddress, policy: EgressPolicy) -> str | None:
    """Why the policy refuses to connect to ``ip`` (None: allowed)."""
    refused = _refused_address(ip, policy)
    return None if refused is None else f"{refused[0]} is {refused[1]}; ask an admin to allow its network"


def _host_problem(target: Target, policy: EgressPolicy) -> str | None:
    if not policy.allowed_hosts:
        return None
    if any(target.host == h or target.host.endswith("." + h) for h in policy.allowed_hosts):
        return None
    return f"{policy.what} may only go to {', '.join(policy.allowed_hosts)} (ask an admin)"


def url_problems(url: str, policy: EgressPolicy) -> list[str]:
    """What is wrong with ``url`` under ``policy`` that can be known without asking DNS (for forms and settings)."""
    try:
        target = parse_target(url)
    except EgressRefused as exc:
        return [exc.message]
    if problem := _host_problem(target, policy):
        return [problem]
    if target.ip_literal is not None and (problem := address_problem(target.ip_literal, policy)):
        return [problem]
    return []


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives ``host`` (TCP), in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return [info[4][0] for info in infos]


def resolve_target(target: Target, policy: EgressPolicy, *, resolver: Resolver | None = None) -> IPAddress:
    """The one address to connect to: every address the name has must be allowed (a name with one public and one
    private address is refused); raises EgressRefused or EgressUnavailable (the name does not resolve)."""
    if problem := _host_problem(target, policy):
        raise _refuse(problem)
    if target.ip_literal is not None:
        addresses: list[IPAddress] = [target.ip_literal]
    else:
        try:
            raw = (resolver or system_resolver)(target.host, target.port)
        except (OSError, UnicodeError) as exc:
            raise EgressUnavailable(f"{target.host} does not resolve") from exc
        addresses = []
        for text in raw:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise EgressUnavailable(f"{target.host} does not resolve")
    for ip in addresses:
        if target.ip_literal is not None and (problem := address_problem(ip, policy)):
            raise _refuse(problem)
        if target.ip_literal is None and (refused := _refused_address(ip, policy)):
            raise _refuse(f"{target.host} resolves to {refused[0]}, {refused[1]}; ask an admin to allow its network")
    return addresses[0]


# --- the request ---------------------------------------------------------------------------------------------------


def _pool(target: Target, address: IPAddress, timeout: urllib3.Timeout, ca_certs: str | None):
    if target.scheme == "https":
        return urllib3.HTTPSConnectionPool(
            str(address),
            target.port,
            timeout=timeout,
            retries=False,
            maxsize=1,
            cert_reqs="CERT_REQUIRED",
            ca_certs=ca_certs or certifi.where(),
            server_hostname=target.host,
            assert_hostname=target.host,
        )
    return urllib3.HTTPConnectionPool(str(address), target.port, timeout=timeout, retries=False, maxsize=1)


def egress_request(
    method: str,
    url: str,
    *,
    policy: EgressPolicy,
    timeout: float,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    max_bytes: int = 64 * 1024,
    resolver: Resolver | None = None,
    ca_certs: str | None = None,
) -> EgressResponse:
    """Send one request to ``url`` under ``policy``: parsed strictly, resolved once, connected to that address, no
    redirect followed, at most ``timeout`` seconds to connect and as long again to read, at most ``max_bytes`` of
    the reply read. Raises EgressRefused (not allowed: retrying will not help) or EgressUnavailable."""
    target = parse_target(url)
    address = resolve_target(target, policy, resolver=resolver)
    sent = {**(headers or {}), "Host": target.host_header}
    pool = _pool(target, address, urllib3.Timeout(connect=timeout, read=timeout), ca_certs)
    try:
        response = pool.urlopen(
            method,
            target.path,
            body=body,
            headers=sent,
            redirect=False,
            retries=False,
            assert_same_host=False,
            preload_content=False,
        )
        try:
            data = response.read(max_bytes + 1, decode_content=True)
        finally:
            response.release_conn()
    except NewConnectionError as exc:  # a subclass of ConnectTimeoutError: refused, unreachable
        log.info("egress to %s (%s) failed to connect: %s", target.host, address, exc)
        raise EgressUnavailable("no connection") from None
    except ConnectTimeoutError as exc:
        log.info("egress to %s (%s) timed out connecting: %s", target.host, address, exc)
        raise EgressUnavailable("no answer (timed out)") from None
    except ReadTimeoutError as exc:
        log.info("egress to %s (%s) timed out reading: %s", target.host, address, exc)
        raise EgressUnavailable("no answer (timed out)") from None
    except SSLError as exc:
        log.info("egress to %s (%s): TLS failed: %s", target.host, address, exc)
        raise EgressUnavailable("TLS failed (certificate not trusted, or not for this host)") from None
    except (HTTPError, OSError) as exc:
        log.info("egress to %s (%s) failed: %s", target.host, address, exc)
        raise EgressUnavailable("no connection") from None
    finally:
        pool.close()
    return EgressResponse(
        status=response.status,
        headers=dict(response.headers),
        body=data[:max_bytes],
        truncated=len(data) > max_bytes,
        address=str(address),
    )
