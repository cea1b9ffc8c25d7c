"""The single sign-on membership sync: sso memberships follow the wanted set, manual ones are never touched."""

from __future__ import annotations

import pytest

from queues.memberships import memberships_sync_from_sso, strongest_role
from queues.models import Membership
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def _roles(user):
    return {(m.team.slug, m.role, m.source) for m in Membership.objects.filter(user=user).select_related("team")}


def test_adds_changes_and_removes_sso_memberships():
    user = UserFactory()
    vision, nlp, speech = TeamFactory(slug="vision"), TeamFactory(slug="nlp"), TeamFactory(slug="speech")
    changes = memberships_sync_from_sso(user=user, wanted={vision: "member", nlp: "lead"})
    assert changes.added == ["nlp", "vision"]
    assert _roles(user) == {("vision", "member", "sso"), ("nlp", "lead", "sso")}

    changes = memberships_sync_from_sso(user=user, wanted={vision: "lead", speech: "member"})
    assert (changes.added, changes.changed, changes.removed) == (["speech"], ["vision"], ["nlp"])
    assert _roles(user) == {("vision", "lead", "sso"), ("speech", "member", "sso")}

    assert not memberships_sync_from_sso(user=user, wanted={vision: "lead", speech: "member"})
    memberships_sync_from_sso(user=user, wanted={})
    assert _roles(user) == set()


def test_manual_memberships_are_never_touched():
    user = UserFactory()
    vision, nlp = TeamFactory(slug="vision"), TeamFactory(slug="nlp")
    MembershipFactory(user=user, team=vision, role="lead")  # an admin's, source manual
    changes = memberships_sync_from_sso(user=user, wanted={vision: "member", nlp: "member"})
    assert changes.kept_manual == ["vision"]
    memberships_sync_from_sso(user=user, wanted={})
    assert _roles(user) == {("vision", "lead", "manual")}


def test_each_change_leaves_an_audit_record():
    user = UserFactory()
    vision = TeamFactory(slug="vision")
    memberships_sync_from_sso(user=user, wanted={vision: "member"})
    memberships_sync_from_sso(user=user, wanted={vision: "lead"})
    memberships_sync_from_sso(user=user, wanted={})
    kinds = list(Membership.history.filter(user=user).order_by("history_date").values_list("history_type", flat=True))
    assert kinds == ["+", "~", "-"]


def test_unknown_roles_are_refused_and_the_strongest_role_wins():
    user = UserFactory()
    with pytest.raises(ValueError, match="owner"):
        memberships_sync_from_sso(user=user, wanted={TeamFactory(): "owner"})
    assert strongest_role(["member", "lead", "member"]) == "lead"
    assert strongest_role(["member"]) == "member"
