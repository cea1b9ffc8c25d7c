"""Models of the site shell: Celery task failures (for ``/metrics``) and single sign-on (identities, claim mapping)."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from kernel.history import PolicyHistory
from queues.models import Team


class TaskFailure(models.Model):
    """How often a Celery task has failed, over every worker process (a counter the ``/metrics`` scrape reads).

    One row per task name; written by the ``task_failure`` signal handler in :mod:`portal.task_failures`.
    """

    task = models.CharField(max_length=200, unique=True, help_text="The registered Celery task name.")
    count = models.PositiveBigIntegerField(default=0)
    last_failure_at = models.DateTimeField()
    last_error = models.TextField(blank=True, help_text="The last exception, as its class and message.")

    class Meta:
        ordering = ["task"]

    def __str__(self) -> str:
        return f"{self.task}: {self.count} failure(s)"


class SsoMapping(models.Model):
    """One claim value of the identity provider and what it grants: a team with a role, platform admin or operator.

    Applied at every single sign-on sign-in (``portal.sso.services``): a user gets what every matching row grants
    (the strongest role where several rows grant one team) and loses what they were granted by sign-on before and
    no row grants now.
    """

    class Claim(models.TextChoices):
        GROUP = "group", "Group (groups: Keycloak, Okta, Dex, Entra ID object IDs)"
        ROLE = "role", "Role (roles: Entra ID app roles; realm_access / resource_access roles: Keycloak)"
        DOMAIN = "domain", "Domain (hd: Google Workspace; else a verified e-mail's domain)"

    class Grant(models.TextChoices):
        MEMBER = "member", "Researcher in the team"
        LEAD = "lead", "Team lead of the team"
        ADMIN = "admin", "Platform admin (staff and superuser)"
        OPERATOR = "operator", "Operator (reads every team, acts on none)"

    TEAM_GRANTS = (Grant.MEMBER, Grant.LEAD)

    claim = models.CharField(max_length=10, choices=Claim.choices, default=Claim.GROUP)
    value = models.CharField(
        max_length=255,
        help_text="Exactly as the provider sends it (case matters); a Keycloak group path may be given with or "
        "without its leading slash.",
    )
    grants = models.CharField(max_length=10, choices=Grant.choices, default=Grant.MEMBER)
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="sso_mappings",
        help_text="The team a researcher or team lead grant is for; empty for admin and operator.",
    )
    note = models.CharField(max_length=200, blank=True)
    history = PolicyHistory()

    class Meta:
        ordering = ["claim", "value", "grants"]
        verbose_name = "single sign-on mapping"
        constraints = [
            models.UniqueConstraint(fields=["claim", "value", "grants", "team"], name="sso_mapping_once"),
            models.CheckConstraint(
                condition=(Q(grants__in=["member", "lead"]) & Q(team__isnull=False))
                | (Q(grants__in=["admin", "operator"]) & Q(team__isnull=True)),
                name="sso_mapping_team_iff_team_grant",
            ),
        ]

    def __str__(self) -> str:
        target = f" in {self.team}" if self.team_id else ""
        return f"{self.get_claim_display().split(' (')[0]} {self.value!r} → {self.grants}{target}"

    def clean(self) -> None:
        """A team grant names a team; admin and operator name none."""
        if self.grants in self.TEAM_GRANTS and self.team_id is None:
            raise ValidationError({"team": "A researcher or team lead grant needs a team."})
        if self.grants not in self.TEAM_GRANTS and self.team_id is not None:
            raise ValidationError({"team": "Admin and operator grants are for the whole portal: leave the team empty."})


class SsoIdentity(models.Model):
    """The identity provider's account (issuer + subject) behind a portal user, and what sign-on granted them."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    admin_from_sso = models.BooleanField(
        default=False, help_text="Staff and superuser were granted by a mapping (and go when it no longer matches)."
    )
    operator_from_sso = models.BooleanField(
        default=False, help_text="The operator group was granted by a mapping (and goes when it no longer matches)."
    )
    last_sign_in_at = models.DateTimeField()
    last_claim_values = models.JSONField(
        default=dict, blank=True, help_text="The groups, roles and domains the provider sent at the last sign-in."
    )

    class Meta:
        ordering = ["issuer", "subject"]
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_once")]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"
