"""The egress guard (kernel.egress) on its own: strict parsing, address ranges, one resolution, the connection made
to the resolved address with the name kept for Host, SNI and the certificate, no redirect, caps. Listeners are real
servers on loopback (ephemeral ports); a test resolver stands for DNS where a public name must lead to loopback."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from kernel.egress import (
    EgressPolicy,
    EgressRefused,
    EgressUnavailable,
    address_problem,
    egress_request,
    embedded_ipv4,
    parse_target,
    resolve_target,
    url_problems,
)

OPEN = EgressPolicy()
LOOPBACK_OK = EgressPolicy.from_settings(networks=["127.0.0.0/8", "::1/128"])


class Server:
    """A loopback HTTP(S) server recording (Host header, SNI name, path) of each request."""

    def __init__(self, *, family: int = socket.AF_INET, tls: ssl.SSLContext | None = None, body: bytes = b"ok"):
        self.seen: list[tuple[str, str | None, str]] = []
        self.sni: list[str | None] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.seen.append((self.headers.get("Host", ""), server.sni[-1] if server.sni else None, self.path))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

            def log_message(self, *args) -> None:
                pass

        class Http(ThreadingHTTPServer):
            address_family = family

            def handle_error(self, request, client_address) -> None:
                pass  # a client that stops reading (the size cap) is expected

        self.httpd = Http(("::1" if family == socket.AF_INET6 else "127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.sni.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made = []

    def start(**kwargs) -> Server:
        made.append(Server(**kwargs))
        return made[-1]

    yield start
    for s in made:
        s.close()


def resolver_to(*addresses: str):
    calls = []

    def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        return list(addresses)

    resolve.calls = calls
    return resolve


# --- parsing ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://127.0.0.1:8099\\@hooks.slack.com/bypass", "backslash"),
        ("http://[::1", "IPv6 address must be written"),
        ("http://[::1]x/", "IPv6 address must be written"),
        ("http://[fe80::1%25eth0]/", "percent-encoding"),
        ("http://a:99999/", "not between 1 and 65535"),
        ("http://a:0/", "not between 1 and 65535"),
        ("http://a:/", "port after"),
        ("http://exa mple.com/", "spaces"),
        ("http://example.com/\t", "spaces"),
        ("http://%00/", "%00"),
        ("http://example.com/a%00b", "%00"),
        ("http://ex%61mple.com/", "percent-encoding"),
        ("http://bücher.example/", "ASCII"),
        ("http://u@example.com/", "user names"),
        ("http://example.com@evil.example/", "user names"),
        ("gopher://example.com/", "gopher:// URLs are not allowed"),
        ("//example.com/", "http:// or https://"),
        ("http:///path", "no host"),
        ("http://-bad-.example/", "not a valid host name"),
        ("http://a..b/", "not a valid host name"),
        ("http://2130706433/", "four decimal numbers"),
        ("http://0x7f.0.0.1/", "four decimal numbers"),
        ("http://0177.0.0.1/", "four decimal numbers"),
        ("http://127.1/", "four decimal numbers"),
        ("http://1.2.3.04/", "four decimal numbers"),
        ("http://localhost:8000/", "loopback"),
        ("http://api.localhost/", "loopback"),
    ],
)
def test_malformed_or_ambiguous_urls_are_refused_before_anything_is_sent(url, problem):
    (message,) = url_problems(url, OPEN)
    assert problem in message


def test_well_formed_urls_are_read_as_requests_would_send_them():
    target = parse_target("HTTPS://Hooks.Slack.com./services/T0/B1/xyz?a=1#frag")
    assert (target.scheme, target.host, target.port, target.path) == (
        "https",
        "hooks.slack.com",
        443,
        "/services/T0/B1/xyz?a=1",
    )
    assert target.host_header == "hooks.slack.com"
    assert parse_target("http://example.com:8080").path == "/"
    assert parse_target("http://example.com:8080?x").path == "/?x"
    assert parse_target("http://[2001:db8::1]:8443/").host_header == "[2001:db8::1]:8443"


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("224.0.0.1", "multicast"),
        ("198.18.0.1", "198.18.0.1 is a"),  # benchmarking range
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "private"),
        ("::ffff:127.0.0.1", "(that is 127.0.0.1) is a loopback"),
        ("::ffff:169.254.169.254", "(that is 169.254.169.254) is a link-local"),
        ("::127.0.0.1", "(that is 127.0.0.1) is a loopback"),
        ("64:ff9b::a9fe:a9fe", "(that is 169.254.169.254)"),
        ("2002:7f00:1::", "(that is 127.0.0.1)"),
        ("2001:db8::1", "2001:db8::1 is a"),  # documentation range (Python counts it private)
    ],
)
def test_special_use_addresses_are_refused_unless_their_network_is_allowed(address, kind):
    ip = ipaddress.ip_address(address)
    assert kind in address_problem(ip, OPEN)
    inner = embedded_ipv4(ip)
    network = f"{inner or ip}/{32 if inner or ip.version == 4 else 128}"
    assert address_problem(ip, EgressPolicy.from_settings(networks=[network])) is None


def test_public_addresses_pass():
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"):
        assert address_problem(ipaddress.ip_address(address), OPEN) is None


def test_an_allow_listed_name_that_resolves_to_loopback_is_refused():
    """The allow-list says which names; the address check says where they may lead (DNS rebinding)."""
    policy = EgressPolicy.from_settings(hosts=["hooks.slack.com"], what="webhooks")
    target = parse_target("https://hooks.slack.com/services/x")
    with pytest.raises(EgressRefused, match=r"hooks.slack.com resolves to 127.0.0.1, a loopback address"):
        resolve_target(target, policy, resolver=resolver_to("127.0.0.1"))
    with pytest.raises(EgressRefused, match=r"webhooks may only go to hooks.slack.com"):
        resolve_target(parse_target("https://hooks.slack.com.evil.example/"), policy, resolver=resolver_to("8.8.8.8"))


def test_a_name_with_one_public_and_one_private_address_is_refused():
    with pytest.raises(EgressRefused, match=r"10.0.0.5, a private-network address"):
        resolve_target(parse_target("http://mixed.example/"), OPEN, resolver=resolver_to("8.8.8.8", "10.0.0.5"))


def test_the_name_is_resolved_once_and_the_connection_goes_to_that_address(server):
    """A second lookup could answer differently (DNS rebinding): there is none; Host carries the name."""
    listener = server()
    resolve = resolver_to("127.0.0.1")
    response = egress_request(
        "POST", f"http://hooks.example.test:{listener.port}/x", policy=LOOPBACK_OK, timeout=2, body=b"{}",
        resolver=resolve,
    )  # fmt: skip
    assert response.status == 200
    assert response.address == "127.0.0.1"
    assert resolve.calls == ["hooks.example.test"]
    assert listener.seen == [(f"hooks.example.test:{listener.port}", None, "/x")]


def test_https_keeps_the_name_for_sni_host_and_the_certificate(server, tmp_path):
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("hooks.example.test").configure_cert(context)
    listener = server(tls=context)
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    url = f"https://hooks.example.test:{listener.port}/services/x"
    response = egress_request("POST", url, policy=LOOPBACK_OK, timeout=2, body=b"{}",
                              resolver=resolver_to("127.0.0.1"), ca_certs=str(bundle))  # fmt: skip
    assert response.status == 200
    assert listener.seen == [(f"hooks.example.test:{listener.port}", "hooks.example.test", "/services/x")]
    # the same address under another name: the certificate is not for it
    with pytest.raises(EgressUnavailable, match="TLS failed"):
        egress_request("POST", f"https://other.example.test:{listener.port}/", policy=LOOPBACK_OK, timeout=2,
                       resolver=resolver_to("127.0.0.1"), ca_certs=str(bundle))  # fmt: skip
    # and without the test CA, the system's trust store does not know it
    with pytest.raises(EgressUnavailable, match="TLS failed"):
        egress_request("POST", url, policy=LOOPBACK_OK, timeout=2, resolver=resolver_to("127.0.0.1"))


def test_ipv6_literals_connect_to_the_ipv6_address(server):
    listener = server(family=socket.AF_INET6)
    response = egress_request("GET", f"http://[::1]:{listener.port}/m", policy=LOOPBACK_OK, timeout=2)
    assert (response.status, response.address) == (200, "::1")
    assert listener.seen == [(f"[::1]:{listener.port}", None, "/m")]
    with pytest.raises(EgressRefused, match="::1 is a loopback address"):
        egress_request("GET", f"http://[::1]:{listener.port}/m", policy=OPEN, timeout=2)
    assert len(listener.seen) == 1


def test_the_reply_is_capped(server):
    listener = server(body=b"x" * 5000)
    response = egress_request("GET", f"http://127.0.0.1:{listener.port}/", policy=LOOPBACK_OK, timeout=2, max_bytes=100)
    assert (len(response.body), response.truncated, response.status_class) == (100, True, "2xx")


def test_a_closed_port_and_an_unresolvable_name_are_unavailable_not_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EgressUnavailable, match="no connection"):
        egress_request("GET", f"http://127.0.0.1:{port}/", policy=LOOPBACK_OK, timeout=2)

    def nowhere(host, port):
        raise socket.gaierror("Name or service not known")

    with pytest.raises(EgressUnavailable, match="does not resolve"):
        egress_request("GET", "http://nowhere.example/", policy=OPEN, timeout=2, resolver=nowhere)


def test_bad_networks_in_the_settings_are_named():
    with pytest.raises(ValueError, match=r"'10.0.0.0/33' is not an IP network"):
        EgressPolicy.from_settings(networks=["10.0.0.0/33"])
