"""Which flavor a node belongs to, in Kueue's meaning (the engine's too): a flavor's ``nodeLabels`` must all be
present on the node, so a flavor with no ``nodeLabels`` matches every node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar


class FlavorLike(Protocol):
    """What matching needs of a flavor."""

    name: str
    node_labels: dict


F = TypeVar("F", bound=FlavorLike)


def flavor_matches(node_labels: Mapping[str, str], flavor_labels: Mapping[str, str]) -> bool:
    """Whether a node carries every label of the flavor (a flavor without labels matches every node, as in Kueue)."""
    return all(node_labels.get(k) == v for k, v in flavor_labels.items())


def match_flavor(node_labels: Mapping[str, str], flavors: Iterable[F]) -> F | None:
    """The most specific matching flavor (most labels), ties broken by name so the answer is stable.

    A flavor without labels matches every node, so it holds the nodes no labelled flavor claims.
    """
    matches = [f for f in flavors if flavor_matches(node_labels, f.node_labels)]
    if not matches:
        return None
    return min(matches, key=lambda f: (-len(f.node_labels), f.name))
