"""Kubernetes object names, checked as the API server checks them (pure Python, no Django)."""

from __future__ import annotations

import re

#: Most object names (Node, Job, ClusterQueue, ResourceFlavor…): an RFC 1123 DNS subdomain of at most 253 characters.
DNS_SUBDOMAIN_MAX = 253
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def dns_subdomain_problem(name: str) -> str:
    """Why the API server would reject ``name`` as an object name, or "" when it is valid."""
    if len(name) > DNS_SUBDOMAIN_MAX:
        return f"{len(name)} characters, at most {DNS_SUBDOMAIN_MAX} (an RFC 1123 DNS subdomain)"
    if not DNS_SUBDOMAIN.match(name):
        shown = name if len(name) <= 80 else name[:77] + "..."
        return (
            f"{shown!r} is not an RFC 1123 DNS subdomain (lower-case letters, digits, '-' and '.', starting and "
            "ending with a letter or digit)"
        )
    return ""
