"""The notifications page: what was sent to the signed-in user, when and on which channel, and their preferences."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from kernel.errors import ValidationFailed
from kernel.htmx import htmx_login_required
from notify import selectors
from notify.forms import PreferenceForm
from notify.services import preference_get, preference_set, test_message_record


@htmx_login_required
@require_http_methods(["GET", "POST"])
def notifications(request: HttpRequest) -> HttpResponse:
    """List the user's digests and unsent events; the form beside them changes their preferences (or, with
    ``test``, queues a test message)."""
    preference = preference_get(request.user)
    status = 200
    if request.method == "POST" and "test" in request.POST:
        test_message_record(user=request.user)
        messages.success(request, "A test message goes out with the next digest (within a minute); it is listed here.")
        return redirect("notify:notifications")
    if request.method == "POST":
        form = PreferenceForm(request.POST)
        if form.is_valid():
            try:
                preference_set(user=request.user, **form.cleaned_data)
            except ValidationFailed as exc:
                for name, errors in exc.errors.items():
                    form.add_error(name if name in form.fields else None, errors)
            else:
                messages.success(request, "Notification preferences saved.")
                return redirect("notify:notifications")
        status = 400
    else:
        form = PreferenceForm(
            initial={"email": preference.email, "webhook_url": preference.webhook_url, "kinds": preference.kinds}
        )
    context = {
        "form": form,
        "digests": selectors.digests_of(request.user),
        "unsent": selectors.events_unsent(request.user),
        "has_email": bool(request.user.email),
    }
    return render(request, "notify/notifications.html", context, status=status)
