"""The notifications page: what was sent (channel, when), what was not, and the preferences form."""

from __future__ import annotations

import pytest
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from notify import tasks
from notify.kinds import Kind
from notify.models import Preference
from notify.record import Pending, events_record
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
URL = reverse("notify:notifications")


@pytest.fixture
def ada(client):
    user = UserFactory(username="ada")
    client.force_login(user)
    return user


def test_the_page_shows_each_digest_with_its_channels(client, ada, django_assert_max_num_queries):
    other = UserFactory(username="bob")
    for user in (ada, other):
        events_record([Pending(user.pk, Kind.FINISHED, f"v:{user.pk}", f"{user.username}-job: finished", "Done.",
                               timezone.now())])  # fmt: skip
    tasks.deliver_pending()
    events_record([Pending(ada.pk, Kind.FAILED, "v:later", "late-job: failed", "Exit 1.", timezone.now())])
    with django_assert_max_num_queries(12):
        response = client.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "ada-job: finished" in html
    assert "bob-job" not in html  # only the user's own
    assert 'data-channel="email" data-state="sent"' in html
    assert "late-job: failed" in html
    assert "waiting for the next digest" in html


def test_preferences_are_saved_and_a_bad_webhook_refused(client, ada, settings):
    response = client.post(URL, {"email": "", "webhook_url": "https://hooks.slack.com/services/T/B/X",
                                 "kinds": [Kind.RECLAIM, Kind.FAILED]})  # fmt: skip
    assert response.status_code == 302
    preference = Preference.objects.get(user=ada)
    assert (preference.email, preference.webhook_url) == (False, "https://hooks.slack.com/services/T/B/X")
    assert preference.kinds == [Kind.FAILED, Kind.RECLAIM]
    response = client.post(URL, {"email": "on", "webhook_url": "file:///etc/passwd"})
    assert response.status_code == 400
    assert "http:// or https://" in response.content.decode()
    settings.NOTIFY_WEBHOOK_ALLOWED_HOSTS = ["slack.com"]
    response = client.post(URL, {"email": "on", "webhook_url": "https://intranet.example.org/hook"})
    assert response.status_code == 400
    assert "may only go to slack.com" in response.content.decode()
    assert Preference.objects.get(user=ada).webhook_url == "https://hooks.slack.com/services/T/B/X"


def test_the_page_needs_a_sign_in(client):
    response = client.get(URL)
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_a_test_message_goes_out_with_the_next_digest_even_with_every_kind_off(client, ada):
    client.post(URL, {"email": "on", "webhook_url": "", "kinds": []})
    response = client.post(URL, {"test": "1"})
    assert response.status_code == 302
    tasks.deliver_pending()
    [message] = mail.outbox
    assert message.subject == "[GPU Pool Portal] Test message"
    assert "Test message" not in client.get(URL).content.decode().split('id="notify-kinds"')[1]  # not a choice
