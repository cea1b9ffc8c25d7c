"""Webhook SSRF (issue 33, finding 1): a user's webhook cannot make the worker call the portal's own network, read
an answer back, tell open ports from closed ones, or slip past the host allow-list.

Every test points the webhook at a real listener on this machine (loopback, or every interface for the host-name
case) and checks both what the user is told and that the listener received nothing. ``NOTIFY_WEBHOOK_ALLOWED_NETWORKS``
is emptied (the folder's conftest allows loopback for the other tests' receivers), as on a real site.
"""

from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils import timezone

from notify import tasks
from notify.models import Delivery, Preference, all_kinds
from tests.factories import UserFactory
from tests.notify.conftest import run, submit

pytestmark = pytest.mark.django_db
URL = "/notifications/"
SECRET = b"INTERNAL-SECRET-BODY"


class Listener:
    """An internal service: answers ``status`` with a secret body (or a redirect), and counts what reached it."""

    def __init__(self, *, host: str = "127.0.0.1", status: int = 418, location: str = "", hang: bool = False):
        self.hits: list[tuple[str, str]] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                listener.hits.append((self.command, self.path))
                if hang:
                    threading.Event().wait(5)
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.end_headers()
                self.wfile.write(SECRET * 20)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        class Http(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

            def handle_error(self, request, client_address) -> None:
                pass  # the sender hangs up without reading the whole answer (by design)

        self.server = Http((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listen():
    made: list[Listener] = []

    def start(**kwargs) -> Listener:
        made.append(Listener(**kwargs))
        return made[-1]

    yield start
    for listener in made:
        listener.close()


@pytest.fixture(autouse=True)
def _no_allowed_networks(settings):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = []
    settings.NOTIFY_WEBHOOK_TIMEOUT_SECONDS = 1


@pytest.fixture
def ada(client):
    user = UserFactory(username="ada", email="ada@example.com")
    client.force_login(user)
    return user


def _deliver(world, user, url: str) -> Delivery:
    """Store ``url`` as the user's webhook as an old row might hold it (the form would refuse it now), make a job
    event and run the delivery; the webhook's delivery row."""
    Preference.objects.update_or_create(user=user, defaults={"email": False, "webhook_url": url, "kinds": all_kinds()})
    job = submit(world, user, now=timezone.now())
    run(world, job, now=timezone.now())
    tasks.deliver_pending()
    return Delivery.objects.get(channel=Delivery.Channel.WEBHOOK)


def _refused_on_the_form(client, url: str, *, expect: str) -> str:
    response = client.post(URL, {"email": "on", "webhook_url": url})
    html = response.content.decode()
    assert response.status_code == 400, url
    assert 'id="id_webhook_url_errors"' in html, "the error names the field"
    assert expect in html, html[html.find("field-error") :][:300]
    return html


def test_a_loopback_webhook_is_refused_on_the_form_and_never_called(world, client, ada, listen):
    internal = listen()
    url = f"http://127.0.0.1:{internal.port}/admin"
    _refused_on_the_form(client, url, expect="127.0.0.1 is a loopback address")
    assert not Preference.objects.filter(user=ada).exclude(webhook_url="").exists()
    delivery = _deliver(world, ada, url)
    assert delivery.state == Delivery.State.FAILED  # refused: not retried
    assert delivery.attempts == 1
    assert "127.0.0.1 is a loopback address" in delivery.last_error
    assert internal.hits == []
    page = client.get(URL).content
    assert SECRET not in page


def test_the_backslash_userinfo_bypass_of_the_allow_list_is_refused(world, client, ada, listen, settings):
    """urlsplit reads hooks.slack.com as the host; requests/urllib3 connect to 127.0.0.1."""
    settings.NOTIFY_WEBHOOK_ALLOWED_HOSTS = ["hooks.slack.com"]
    internal = listen()
    url = f"http://127.0.0.1:{internal.port}\\@hooks.slack.com/bypass"
    _refused_on_the_form(client, url, expect="backslash")
    delivery = _deliver(world, ada, url)
    assert delivery.state == Delivery.State.FAILED
    assert internal.hits == []


def test_ipv6_loopback_and_the_ipv4_mapped_form_are_refused(world, client, ada, listen):
    internal = listen(host="::1")
    for url, expect in (
        (f"http://[::1]:{internal.port}/", "::1 is a loopback address"),
        (f"http://[::ffff:127.0.0.1]:{internal.port}/", "(that is 127.0.0.1) is a loopback address"),
    ):
        _refused_on_the_form(client, url, expect=expect)
    delivery = _deliver(world, ada, f"http://[::1]:{internal.port}/")
    assert delivery.state == Delivery.State.FAILED
    assert internal.hits == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1"])
def test_decimal_octal_and_hex_addresses_are_refused(world, client, ada, listen, host):
    """Every one of these is 127.0.0.1 to the system's resolver (inet_aton)."""
    internal = listen()
    url = f"http://{host}:{internal.port}/"
    _refused_on_the_form(client, url, expect="four decimal numbers")
    delivery = _deliver(world, ada, url)
    assert delivery.state == Delivery.State.FAILED
    assert internal.hits == []


def test_a_name_that_resolves_to_this_machine_is_refused_at_the_send(world, client, ada, listen):
    """The form cannot know where a name leads (no DNS there); the send resolves it once and refuses a loopback or
    private address. This machine's own host name resolves to one of its addresses (loopback here, a private one
    in a container), where the listener, on every interface, would answer."""
    internal = listen(host="0.0.0.0")
    name = socket.gethostname()
    url = f"http://{name}:{internal.port}/hook"
    assert client.post(URL, {"email": "on", "webhook_url": url}).status_code == 302  # no DNS on the form
    delivery = _deliver(world, ada, url)
    assert delivery.state == Delivery.State.FAILED
    assert delivery.last_error.startswith(f"webhook not called: {name} resolves to ")
    assert internal.hits == []
    _refused_on_the_form(client, f"http://localhost:{internal.port}/", expect="is this machine (loopback)")


def test_the_reply_body_is_never_shown_only_its_status_class(world, client, ada, listen, settings):
    """Even where an admin allows the network, the user learns the status class and nothing of the body."""
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    internal = listen(status=418)
    delivery = _deliver(world, ada, f"http://127.0.0.1:{internal.port}/hook")
    assert len(internal.hits) == 1  # allowed: it was called
    assert delivery.last_error == "webhook answered 4xx"
    page = client.get(URL).content
    assert SECRET not in page
    # not the status itself (as a word of its own: a port, a token or an id of the page may hold the digits 418)
    assert not re.search(rb"(?<![0-9A-Za-z])418(?![0-9A-Za-z])", page), re.findall(rb".{40}418.{40}", page)


def test_open_and_closed_ports_cannot_be_told_apart(world, ada, listen):
    """With the address refused before any connection, an open and a closed port read the same."""
    open_port = listen().port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    errors = set()
    for port in (open_port, closed_port):
        Delivery.objects.all().delete()
        errors.add(_deliver(world, ada, f"http://127.0.0.1:{port}/").last_error)
    assert len(errors) == 1


def test_redirects_are_not_followed(world, ada, listen, settings):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    target = listen(status=200)
    hop = listen(status=307, location=f"http://127.0.0.1:{target.port}/internal")
    delivery = _deliver(world, ada, f"http://127.0.0.1:{hop.port}/hook")
    assert delivery.last_error == "webhook answered 3xx (redirects are not followed)"
    assert len(hop.hits) == 1
    assert target.hits == []


def test_a_webhook_that_never_answers_is_cut_off_by_the_timeout(world, ada, listen, settings):
    settings.NOTIFY_WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
    slow = listen(hang=True)
    started = timezone.now()
    delivery = _deliver(world, ada, f"http://127.0.0.1:{slow.port}/hook")
    assert (timezone.now() - started).total_seconds() < 4.5
    assert delivery.state == Delivery.State.SENDING  # a timeout is retried later
    assert delivery.last_error == "webhook unreachable: no answer (timed out)"


@pytest.mark.parametrize(
    ("url", "expect"),
    [
        ("http://[::1", "IPv6 address must be written"),
        ("http://a:99999/", "port 99999 is not between 1 and 65535"),
        ("http://exa mple.com/", "spaces and control characters"),
        ("http://%00/", "%00"),
        ("http://user:pw@hooks.slack.com/x", "user names and passwords"),
        ("javascript:alert(1)", "http:// or https://"),
        ("http://hooks.slack.com:/x", "port after"),
    ],
)
def test_malformed_urls_are_a_400_naming_the_field_and_nothing_is_stored(client, ada, url, expect):
    _refused_on_the_form(client, url, expect=expect)
    assert not Preference.objects.filter(user=ada).exists()


def test_the_admin_form_applies_the_same_check(admin_client, ada):
    response = admin_client.post(
        "/admin/notify/preference/add/",
        {"user": ada.pk, "email": "on", "webhook_url": "http://169.254.169.254/latest/meta-data/", "kinds": "[]"},
    )
    assert response.status_code == 200  # the form again, with the error
    assert "169.254.169.254 is a link-local address" in response.content.decode()
    assert not Preference.objects.exists()
