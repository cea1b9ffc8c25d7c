"""The API token screen: a signed-in user creates, sees and revokes their team-scoped API tokens.

Built on ``queues.api.tokens`` (the tokens ``TeamTokenAuthentication`` accepts as ``Authorization: Token <key>``):
only a hash is stored, so a new key is shown once, on the page that answers the creation, and never again.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from kernel.errors import ValidationFailed
from queues.api.tokens import api_token_create, api_token_revoke
from queues.models import ApiToken, Team

#: The longest expiry the form offers, in days.
MAX_EXPIRY_DAYS = 365
NAME_MAX = ApiToken._meta.get_field("name").max_length


class TokenForm(forms.Form):
    """A new token: what it is for, the team it acts in, and when it expires."""

    name = forms.CharField(
        max_length=NAME_MAX,
        label="What it is for",
        help_text=f"e.g. “CI pipeline” (at most {NAME_MAX} characters).",
        error_messages={"max_length": f"Use at most {NAME_MAX} characters (this has %(show_value)d)."},
    )
    team = forms.ChoiceField(label="Team", help_text="The token acts in this team only.")
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_EXPIRY_DAYS,
        label="Expires after (days)",
        help_text=f"1 to {MAX_EXPIRY_DAYS}; empty: never expires.",
        error_messages={
            "min_value": "Give at least 1 day (or leave it empty for no expiry).",
            "max_value": f"Give at most {MAX_EXPIRY_DAYS} days (or leave it empty for no expiry).",
        },
    )

    def __init__(self, *args, teams: list[Team], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.teams = {t.slug: t for t in teams}
        self.fields["team"].choices = [(t.slug, t.name) for t in teams]


def _teams(user) -> list[Team]:
    return list(Team.objects.filter(memberships__user=user).distinct().order_by("name"))


def _page(request: HttpRequest, form: TokenForm, *, issued=None, status: int = 200) -> HttpResponse:
    tokens = ApiToken.objects.filter(user=request.user).select_related("team").order_by("revoked", "-created_at")
    now = timezone.now()
    context = {
        "form": form,
        "tokens": [(t, t.revoked or (t.expires_at is not None and t.expires_at <= now)) for t in tokens],
        "issued": issued,
        "has_team": bool(form.teams),
    }
    return render(request, "queues/api_tokens.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's API tokens; POST creates one and shows its key once."""
    teams = _teams(request.user)
    if request.method == "GET":
        return _page(request, TokenForm(teams=teams))
    form = TokenForm(request.POST, teams=teams)
    if not form.is_valid():
        return _page(request, form, status=400)
    days = form.cleaned_data.get("expires_in_days")
    now = timezone.now()
    try:
        issued = api_token_create(
            user=request.user,
            team=form.teams[form.cleaned_data["team"]],
            name=form.cleaned_data["name"],
            expires_at=now + timedelta(days=days) if days else None,
            now=now,
        )
    except ValidationFailed as exc:
        for field, problems in exc.errors.items():
            for problem in problems:
                form.add_error(field if field in form.fields else None, problem)
        return _page(request, form, status=400)
    response = _page(request, TokenForm(teams=teams), issued=issued)
    response["Cache-Control"] = "no-store"  # the key must not stay in a cache
    return response


@login_required
@require_POST
def api_token_revoke_view(request: HttpRequest, pk: int) -> HttpResponse:
    """Revoke one of the user's tokens (another user's token is a 404)."""
    token = get_object_or_404(ApiToken.objects.select_related("team"), pk=pk)
    if token.user_id != request.user.pk:
        raise Http404("No such token among yours.")
    api_token_revoke(token=token, user=request.user)
    messages.success(request, f"Token “{token.name}” ({token.prefix}…) is revoked: requests with it now fail.")
    return redirect("queues:api_tokens")
