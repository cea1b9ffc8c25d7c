"""Admin actions on nodes and devices: cordon, quarantine, drain, open a repair ticket.

Each calls the health services (pools.health.settle, pools.health.tickets), never writes a state field itself,
and reports in words what happened ("ticket #3 is draining", not ``draining``):

* **Cordon**: an operator's "unhealthy" mark on each card (``health_mark``): no new work lands on it, and the
  health policy moves the running jobs off (and, if it says so, opens a repair ticket).
* **Open repair ticket**: ``ticket_open`` for the node or the card; one row goes to the add form, filled in, for
  the reason; several are opened at once with a reason naming who did it.
* **Drain now**: evict the jobs still holding the devices of a draining ticket (``ticket_drain_now``).
* **Quarantine**: open (or reuse) the ticket and drain it now: the devices are quarantined (in repair) as soon
  as no job holds them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import reverse

from kernel.errors import DomainError
from kernel.labels import plural, state_words
from pools.health import tickets as _tickets
from pools.health.services import Actor, card_of
from pools.health.settle import health_mark
from pools.models import Device, HealthState, Node, RepairTicket

T = RepairTicket.State


def _cards_of_node(node: Node) -> list[Device]:
    """The node's present cards (a MIG instance or replica is marked through its card)."""
    return list(Device.objects.filter(node=node, parent__isnull=True, gone_at__isnull=True).order_by("index", "key"))


def _cards_of_devices(devices: Iterable[Device]) -> list[Device]:
    """The cards of the selected devices, each once, in selection order."""
    seen: dict[int, Device] = {}
    for device in devices:
        card = card_of(device)
        seen.setdefault(card.pk, card)
    return list(seen.values())


def _run(modeladmin, request: HttpRequest, what: str, step: Callable[[], str]) -> None:
    """Run one step; its sentence as a success message, a refusal of the services as an error naming ``what``."""
    try:
        text = step()
    except DomainError as exc:
        modeladmin.message_user(request, f"{what}: {exc}", messages.ERROR)
    else:
        modeladmin.message_user(request, f"{what}: {text}", messages.SUCCESS)


def _cordon(cards: list[Device], actor: Actor) -> str:
    if not cards:
        return "no card to cordon"
    protected, opened = set(), set()
    for card in cards:
        report = health_mark(device=card, level="unhealthy", note="cordoned in the admin", actor=actor)
        protected.update(report.jobs_protected)
        opened.update(report.tickets_opened)
    text = f"{plural(len(cards), 'card')} marked unhealthy: no new work goes there"
    now = Counter(Device.objects.filter(pk__in=[c.pk for c in cards]).values_list("health", flat=True))
    text += "; now " + ", ".join(f"{n} {state_words(HealthState, h)}" for h, n in sorted(now.items()))
    if protected:
        text += f"; {len(protected)} running job{'s' if len(protected) != 1 else ''} moved off"
    if opened:
        text += f"; repair ticket{'s' if len(opened) != 1 else ''} opened: {', '.join(f'#{t}' for t in sorted(opened))}"
    return text


def _ticket_words(ticket: RepairTicket) -> str:
    ticket.refresh_from_db()
    if ticket.state == T.IN_REPAIR:
        return f"ticket #{ticket.pk} is in repair: its devices are quarantined"
    if ticket.state == T.DRAINING:
        return f"ticket #{ticket.pk} is draining: its devices are quarantined once no job holds them"
    return f"ticket #{ticket.pk} is {state_words(T, ticket.state)}"


def _open(actor: Actor, *, reason: str, node: Node | None = None, device: Device | None = None) -> str:
    ticket = _tickets.ticket_open(node=node, device=device, reason=reason, actor=actor)
    return _ticket_words(ticket)


def _drain(open_tickets: list[RepairTicket], actor: Actor) -> str:
    draining = [t for t in open_tickets if t.state == T.DRAINING]
    if not draining:
        if open_tickets:
            states = ", ".join(f"#{t.pk} is {state_words(T, t.state)}" for t in open_tickets)
            return f"nothing to drain ({states})"
        raise DomainError("no repair ticket is open for it: open one first (or quarantine it)")
    parts = []
    for ticket in draining:
        evicted = _tickets.ticket_drain_now(ticket=ticket, actor=actor)
        parts.append(f"ticket #{ticket.pk}: {len(evicted)} job{'s' if len(evicted) != 1 else ''} evicted")
    return "; ".join(parts)


def _quarantine(actor: Actor, *, reason: str, node: Node | None = None, device: Device | None = None) -> str:
    ticket = _tickets.ticket_open(node=node, device=device, reason=reason, actor=actor)
    evicted: list[int] = []
    if ticket.state == T.DRAINING:
        evicted = _tickets.ticket_drain_now(ticket=ticket, actor=actor)
    text = _ticket_words(ticket)
    if evicted:
        text += f" ({len(evicted)} job{'s' if len(evicted) != 1 else ''} evicted)"
    return text


def _open_tickets_of_node(node: Node) -> list[RepairTicket]:
    return list(RepairTicket.objects.filter(node=node, state__in=RepairTicket.OPEN_STATES).order_by("pk"))


def _open_tickets_of_card(card: Device) -> list[RepairTicket]:
    ids = [card.pk, *card.children.values_list("pk", flat=True)]
    return list(
        RepairTicket.objects.filter(state__in=RepairTicket.OPEN_STATES)
        .filter(Q(device_id__in=ids) | Q(node_id=card.node_id, device__isnull=True))
        .order_by("pk")
    )


def _ticket_add_form(**initial) -> HttpResponseRedirect:
    """The repair ticket add form, filled in with the node or device (the person writes the reason)."""
    return HttpResponseRedirect(f"{reverse('admin:pools_repairticket_add')}?{urlencode(initial)}")


# --- nodes --------------------------------------------------------------------------------------------------


@admin.action(description="Cordon: mark unhealthy (no new work; running jobs are moved off)")
def node_cordon(modeladmin, request, queryset):
    """Mark every card of the selected nodes unhealthy through the health service."""
    actor = Actor.of(request.user)
    for node in queryset.order_by("name"):
        _run(modeladmin, request, f"node {node.name}", lambda n=node: _cordon(_cards_of_node(n), actor))


@admin.action(description="Quarantine: open a repair ticket and drain it now")
def node_quarantine(modeladmin, request, queryset):
    """Open (or reuse) a whole-node ticket and evict what still runs there."""
    actor = Actor.of(request.user)
    reason = f"quarantined in the admin by {actor.label}"
    for node in queryset.order_by("name"):
        _run(modeladmin, request, f"node {node.name}", lambda n=node: _quarantine(actor, reason=reason, node=n))


@admin.action(description="Drain now: evict the jobs on its draining repair tickets")
def node_drain(modeladmin, request, queryset):
    """Force the drain of the open tickets on the selected nodes."""
    actor = Actor.of(request.user)
    for node in queryset.order_by("name"):
        _run(modeladmin, request, f"node {node.name}", lambda n=node: _drain(_open_tickets_of_node(n), actor))


@admin.action(description="Open a repair ticket…")
def node_open_ticket(modeladmin, request, queryset):
    """One node: the ticket form, filled in. Several: a whole-node ticket for each."""
    nodes = list(queryset.order_by("name"))
    if len(nodes) == 1:
        return _ticket_add_form(node=nodes[0].pk)
    actor = Actor.of(request.user)
    reason = f"opened in the admin by {actor.label}"
    for node in nodes:
        _run(modeladmin, request, f"node {node.name}", lambda n=node: _open(actor, reason=reason, node=n))
    return None


NODE_ACTIONS = [node_cordon, node_quarantine, node_drain, node_open_ticket]


# --- devices ------------------------------------------------------------------------------------------------


@admin.action(description="Cordon: mark unhealthy (no new work; running jobs are moved off)")
def device_cordon(modeladmin, request, queryset):
    """Mark the cards of the selected devices unhealthy through the health service."""
    actor = Actor.of(request.user)
    for card in _cards_of_devices(queryset.select_related("node", "parent")):
        _run(modeladmin, request, f"{card.node.name}/{card.key}", lambda c=card: _cordon([c], actor))


@admin.action(description="Quarantine: open a repair ticket and drain it now")
def device_quarantine(modeladmin, request, queryset):
    """Open (or reuse) each card's ticket and evict what still runs on it."""
    actor = Actor.of(request.user)
    reason = f"quarantined in the admin by {actor.label}"
    for card in _cards_of_devices(queryset.select_related("node", "parent")):
        step = lambda c=card: _quarantine(actor, reason=reason, device=c)  # noqa: E731
        _run(modeladmin, request, f"{card.node.name}/{card.key}", step)


@admin.action(description="Drain now: evict the jobs on its draining repair ticket")
def device_drain(modeladmin, request, queryset):
    """Force the drain of the open tickets covering the selected devices."""
    actor = Actor.of(request.user)
    for card in _cards_of_devices(queryset.select_related("node", "parent")):
        step = lambda c=card: _drain(_open_tickets_of_card(c), actor)  # noqa: E731
        _run(modeladmin, request, f"{card.node.name}/{card.key}", step)


@admin.action(description="Open a repair ticket…")
def device_open_ticket(modeladmin, request, queryset):
    """One card: the ticket form, filled in. Several: a ticket for each card."""
    cards = _cards_of_devices(queryset.select_related("node", "parent"))
    if len(cards) == 1:
        return _ticket_add_form(node=cards[0].node_id, device=cards[0].pk)
    actor = Actor.of(request.user)
    reason = f"opened in the admin by {actor.label}"
    for card in cards:
        _run(modeladmin, request, f"{card.node.name}/{card.key}", lambda c=card: _open(actor, reason=reason, device=c))
    return None


DEVICE_ACTIONS = [device_cordon, device_quarantine, device_drain, device_open_ticket]
