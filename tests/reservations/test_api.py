"""The reservations API (/api/reservations/) with real team tokens, and the ``gpupool reservations`` commands against
the live server: list, request (approved, waiting, refused with the reasons, bad input by field), cancel, and the
admins' decisions; who may do what."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from click.testing import CliRunner
from django.utils import timezone
from rest_framework.test import APIClient

from gpupool.main import cli
from queues.api.tokens import api_token_create
from queues.models import Reservation
from tests.reservations.world import approved, at, reservation_world


def token_client(user, team) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_create(user=user, team=team, name='t').key}")
    return client


def body(start, hours=8, **extra) -> dict:
    return {
        "resource_class": "h100",
        "count": 8,
        "starts_at": start.isoformat(),
        "ends_at": (start + timedelta(hours=hours)).isoformat(),
        "purpose": "evaluation run",
        **extra,
    }


@pytest.mark.django_db
class TestApi:
    @pytest.fixture
    def world(self):
        return reservation_world()

    def test_a_lead_requests_lists_reads_and_cancels(self, world):
        api = token_client(world.frank, world.speech)
        created = api.post("/api/reservations/", body(at(3, 9)), format="json")
        assert created.status_code == 201, created.json()
        row = created.json()
        assert (row["team"], row["flavor"], row["count"], row["state"], row["decision"]) == (
            "speech",
            world.pool.flavor.name,
            8,
            "approved",
            "auto",
        )
        assert row["requested_by"] == "frank"
        listed = api.get("/api/reservations/").json()
        assert [r["id"] for r in listed] == [row["id"]]
        assert api.get(f"/api/reservations/{row['id']}/").json()["purpose"] == "evaluation run"
        cancelled = api.post(f"/api/reservations/{row['id']}/cancel/")
        assert cancelled.status_code == 200
        assert cancelled.json()["state"] == "cancelled"
        again = api.post(f"/api/reservations/{row['id']}/cancel/")
        assert again.status_code == 409
        assert "nothing to cancel" in again.json()["detail"]

    def test_a_refusal_is_409_with_the_reasons_and_kept(self, world):
        api = token_client(world.frank, world.speech)
        answer = api.post("/api/reservations/", body(at(3, 9), count=20), format="json")
        assert answer.status_code == 409
        data = answer.json()
        assert "more than" in data["detail"]
        assert data["reservation"]["state"] == "refused"
        assert Reservation.objects.get().state == Reservation.State.REFUSED

    def test_bad_input_names_each_field_and_records_nothing(self, world):
        api = token_client(world.frank, world.speech)
        answer = api.post(
            "/api/reservations/", body(at(3, 9), hours=-1, purpose=" ", resource_class="nope"), format="json"
        )
        assert answer.status_code == 400
        assert set(answer.json()) >= {"resource_class", "purpose"}
        answer = api.post("/api/reservations/", body(at(3, 9), hours=-1), format="json")
        assert answer.status_code == 400
        assert answer.json() == {"ends_at": ["The window must end after it starts."]}
        assert not Reservation.objects.exists()

    def test_members_may_not_request_and_other_teams_reservations_are_not_found(self, world):
        member = token_client(world.pool.other_user, world.speech)  # bob, a researcher of speech
        assert member.post("/api/reservations/", body(at(3, 9)), format="json").status_code == 403
        theirs = approved(world, team=world.vision, start=at(2, 9), end=at(2, 12), by=world.carol)
        assert member.get(f"/api/reservations/{theirs.pk}/").status_code == 404
        assert member.get("/api/reservations/").json() == []
        assert member.post(f"/api/reservations/{theirs.pk}/cancel/").status_code == 404
        # a token acts in its own team only
        lead = token_client(world.frank, world.speech)
        assert lead.post("/api/reservations/", body(at(3, 9), team="vision"), format="json").status_code == 403

    def test_an_admin_approves_and_refuses_waiting_requests_and_leads_may_not(self, world):
        lead = token_client(world.frank, world.speech)
        waiting = lead.post("/api/reservations/", body(at(3, 9), count=12), format="json").json()
        assert waiting["state"] == "requested"
        assert lead.post(f"/api/reservations/{waiting['id']}/approve/").status_code == 403
        admin = APIClient()
        admin.force_login(world.admin)
        assert admin.get("/api/reservations/", {"state": "requested"}).json()[0]["id"] == waiting["id"]
        assert admin.get("/api/reservations/", {"state": "nope"}).status_code == 400
        approved_now = admin.post(f"/api/reservations/{waiting['id']}/approve/", {"note": "release"}, format="json")
        assert approved_now.status_code == 200
        assert (approved_now.json()["state"], approved_now.json()["decided_by"]) == ("approved", "admin")
        other = lead.post("/api/reservations/", body(at(4, 9), count=12), format="json").json()
        refused = admin.post(f"/api/reservations/{other['id']}/refuse/", {}, format="json")
        assert refused.status_code == 400
        assert "note" in refused.json()
        refused = admin.post(
            f"/api/reservations/{other['id']}/refuse/", {"note": "clashes with the demo"}, format="json"
        )
        assert refused.json()["state"] == "refused"


@pytest.mark.django_db(transaction=True)
def test_the_cli_requests_lists_shows_and_cancels(live_server, serialised):
    world = reservation_world()
    key = api_token_create(user=world.frank, team=world.speech, name="cli").key

    def gpupool(*args: str):
        env = {"GPUPOOL_URL": live_server.url, "GPUPOOL_TOKEN": key}
        return CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)

    start = timezone.localtime(at(3, 9))
    made = gpupool(
        "reservations", "request", "--class", "h100", "--gpus", "8", "--from", start.isoformat(), "--for", "8h",
        "--purpose", "evaluation run",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    row = Reservation.objects.get()
    assert made.stdout.startswith(f"reservation {row.pk}: 8× {world.pool.flavor.name} (h100) for speech on ")
    assert made.stdout.splitlines()[0].endswith(": approved")
    assert row.ends_at - row.starts_at == timedelta(hours=8)
    listed = gpupool("reservations", "list")
    header, line = listed.stdout.splitlines()
    assert header.split()[:3] == ["ID", "TEAM", "DEVICES"]
    assert line.split()[:2] == [str(row.pk), "speech"]
    shown = json.loads(gpupool("reservations", "show", str(row.pk), "--json").stdout)
    assert shown["state"] == "approved"
    refused = gpupool(
        "reservations", "request", "--class", "h100", "--gpus", "20", "--from", start.isoformat(), "--to",
        (start + timedelta(hours=2)).isoformat(), "--purpose", "too big",
    )  # fmt: skip
    assert refused.exit_code == 1
    # the CLI's own line; the live server runs in this process, so its logging (of the 409) may share the captured
    # stderr when an earlier test left a handler on a stream that is gone
    said = [line for line in refused.stderr.splitlines() if line.startswith("gpupool: ")]
    assert said
    assert said[0].startswith("gpupool: conflict: ")
    assert "more than" in said[0]
    usage = gpupool("reservations", "request", "--class", "h100", "--gpus", "8", "--from", "soon", "--for", "1h",
                    "--purpose", "x")  # fmt: skip
    assert usage.exit_code == 2
    assert "'soon' is not a time" in usage.output
    cancelled = gpupool("reservations", "cancel", str(row.pk))
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.strip() == f"reservation {row.pk}: cancelled"
