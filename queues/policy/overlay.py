"""Laying a policy change over another version of the policy: the proposal of a what-if over each recorded
version of the window, and changes recorded after a window over the versions inside it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, replace
from typing import Any

from queues.engine import model as m


def lay_over(base: m.ClusterState, current: m.ClusterState, proposed: m.ClusterState) -> m.ClusterState:
    """``base`` (a recorded version of the policy) with the changes that turn ``current`` into ``proposed``.

    Objects are matched by name (LocalQueues by namespace and name). An object the proposal adds or removes is
    added or removed; for one it changes, only the fields it changes are set, and a quota change is laid over the
    recorded quota line by line — unless it adds or removes a flavor or resource of the queue, which replaces the
    queue's quota as a whole. Fields the proposal leaves alone keep their recorded values.
    """
    out = base
    if current.fair_sharing != proposed.fair_sharing:
        out = replace(out, fair_sharing=proposed.fair_sharing)
    for attr in ("cluster_queues", "cohorts", "flavors", "topologies", "priority_classes", "namespaces"):
        merged = _merge_named(getattr(out, attr), getattr(current, attr), getattr(proposed, attr), lambda x: x.name)
        out = replace(out, **{attr: merged})
    merged_lqs = _merge_named(
        out.local_queues, current.local_queues, proposed.local_queues, lambda q: (q.namespace, q.name)
    )
    return replace(out, local_queues=merged_lqs)


def _merge_named(base: tuple, current: tuple, proposed: tuple, key: Callable) -> tuple:
    """``base``'s objects with those ``proposed`` adds, removes or changes against ``current`` (order kept, added
    ones last); ``base`` itself when nothing differs."""
    before = {key(x): x for x in current}
    after = {key(x): x for x in proposed}
    differing = [name for name in sorted(set(before) | set(after), key=str) if before.get(name) != after.get(name)]
    if not differing:
        return base
    out = {key(x): x for x in base}
    for name in differing:
        b, a = before.get(name), after.get(name)
        if a is None:
            out.pop(name, None)
        elif b is None or name not in out:
            out[name] = a
        else:
            out[name] = _merge_fields(out[name], b, a)
    return tuple(out.values())


def _merge_fields(base: Any, before: Any, after: Any) -> Any:
    """``base`` with each field that differs between ``before`` and ``after`` set as in ``after``."""
    changes = {}
    for f in fields(after):
        old, new = getattr(before, f.name), getattr(after, f.name)
        if old == new:
            continue
        if f.name == "resource_groups":
            changes[f.name] = _merge_groups(getattr(base, f.name), old, new)
        else:
            changes[f.name] = new
    return replace(base, **changes)


def _merge_groups(base: tuple, before: tuple, after: tuple) -> tuple:
    """A quota change laid over a recorded quota: line by line while the groups keep their flavors and resources."""

    def shape(groups: tuple) -> list:
        return [(g.covered_resources, [(f.name, [r.name for r in f.resources]) for f in g.flavors]) for g in groups]

    if shape(before) != shape(after) or shape(base) != shape(before):
        return after
    changed = {
        (f.name, r.name): r
        for g_old, g_new in zip(before, after, strict=True)
        for f_old, f in zip(g_old.flavors, g_new.flavors, strict=True)
        for r_old, r in zip(f_old.resources, f.resources, strict=True)
        if r_old != r
    }
    return tuple(
        replace(
            g,
            flavors=tuple(
                replace(f, resources=tuple(changed.get((f.name, r.name), r) for r in f.resources)) for f in g.flavors
            ),
        )
        for g in base
    )


__all__ = ["lay_over"]
