"""Label selectors, node affinity, taints and tolerations, evaluated the way Kubernetes does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import (
    LabelSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    Taint,
    Toleration,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """True when ``labels`` satisfy ``selector``; None matches nothing, the empty selector everything."""
    if selector is None:
        return False
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions:
        present = req.key in labels
        if req.operator == "In":
            if not present or labels[req.key] not in req.values:
                return False
        elif req.operator == "NotIn":
            if present and labels[req.key] in req.values:
                return False
        elif req.operator == "Exists":
            if not present:
                return False
        elif req.operator == "DoesNotExist":
            if present:
                return False
        else:
            return False
    return True


def _requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    op = req.operator
    if op == "In":
        return present and labels[req.key] in req.values
    if op == "NotIn":
        return not present or labels[req.key] not in req.values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(req.values) != 1:
            return False
        try:
            left = int(labels[req.key])
            right = int(req.values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def node_affinity_matches(
    node_selector: Mapping[str, str],
    terms: tuple[NodeSelectorTerm, ...],
    labels: Mapping[str, str],
    restrict_keys: Iterable[str] | None = None,
) -> bool:
    """Pod nodeSelector AND (any required affinity term); with ``restrict_keys`` only those label keys count.

    The restricted form is Kueue's flavor check: constraints on keys the flavor does not declare are
    ignored, and a term left empty by the restriction matches anything.
    """
    allowed = None if restrict_keys is None else set(restrict_keys)
    for key, value in node_selector.items():
        if allowed is not None and key not in allowed:
            continue
        if labels.get(key) != value:
            return False
    if not terms:
        return True
    for term in terms:
        exprs = [e for e in term.match_expressions if allowed is None or e.key in allowed]
        if allowed is not None and not exprs:
            return True
        if exprs and all(_requirement_matches(e, labels) for e in exprs):
            return True
    return False


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """True when ``toleration`` tolerates ``taint`` (Kubernetes ToleratesTaint)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.value == taint.value


def first_untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint not tolerated, or None."""
    tols = tuple(tolerations)
    for taint in taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(tolerates(t, taint) for t in tols):
            return taint
    return None


def taint_go_struct(taint: Taint) -> str:
    """Go's ``%s`` of a corev1.Taint value, as Kueue prints it: ``{key value NoSchedule <nil>}``."""
    return f"{{{taint.key} {taint.value} {taint.effect} <nil>}}"


def taint_to_string(taint: Taint) -> str:
    """corev1.Taint.ToString(): ``key=value:Effect`` (``key:Effect`` without a value)."""
    if taint.value:
        return f"{taint.key}={taint.value}:{taint.effect}"
    return f"{taint.key}:{taint.effect}"
