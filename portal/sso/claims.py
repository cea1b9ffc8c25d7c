"""What an identity provider's claims say about a person: groups, roles and domains, and the profile fields.

Pure functions over the verified claims (the ID token merged with the userinfo answer). The providers differ:

- Keycloak: ``groups`` (the "Group Membership" mapper; paths such as ``/research/vision`` with "full group path"
  on), ``realm_access.roles`` and ``resource_access.<client id>.roles``.
- Entra ID: ``roles`` (app roles, the advised way) and ``groups`` (object IDs). Past 200 groups Entra sends
  ``_claim_names.groups`` (an "overage" pointing at Microsoft Graph) instead of the list: no groups are read then.
- Okta: ``groups`` (a groups claim on the authorization server; its name can differ: ``OIDC_EXTRA_GROUP_CLAIMS``).
- Dex: ``groups`` (with the ``groups`` scope).
- Google: no groups; ``hd`` (the Workspace domain) and ``email`` with ``email_verified``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: At most this many values of one kind are read from one sign-in (bounds the mapping query).
MAX_VALUES = 1000
MAX_VALUE_LENGTH = 255
_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


@dataclass(frozen=True)
class ClaimValues:
    """The groups, roles and domains of one sign-in, normalised for matching against the mapping."""

    groups: frozenset[str]
    roles: frozenset[str]
    domains: frozenset[str]
    groups_overage: bool = False

    def as_json(self) -> dict[str, Any]:
        """Sorted lists, as kept on the identity for the admin ("what did the provider send?")."""
        return {
            "groups": sorted(self.groups),
            "roles": sorted(self.roles),
            "domains": sorted(self.domains),
            "groups_overage": self.groups_overage,
        }


def normalise_group(value: str) -> str:
    """A group as matched: a Keycloak path's leading slash dropped (``/vision`` and ``vision`` are one)."""
    return value[1:] if value.startswith("/") else value


def _strings(value: Any) -> list[str]:
    """The strings of a claim that may be a list, a single string, or missing."""
    if isinstance(value, str):
        items: Iterable[Any] = [value]
    elif isinstance(value, list | tuple):
        items = value
    else:
        return []
    return [item for item in items if isinstance(item, str) and 0 < len(item) <= MAX_VALUE_LENGTH][:MAX_VALUES]


def _nested(claims: Mapping[str, Any], *keys: str) -> Any:
    """``claims[k1][k2]...`` where every level is a mapping, else None."""
    value: Any = claims
    for key in keys:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def is_true(value: Any) -> bool:
    """A boolean claim, which some providers send as the string "true"."""
    return value is True or (isinstance(value, str) and value.lower() == "true")


def email_domain(claims: Mapping[str, Any]) -> str | None:
    """The domain of a verified e-mail address, lower case; None when the address is missing or unverified."""
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email or not is_true(claims.get("email_verified")):
        return None
    return email.rsplit("@", 1)[1].lower() or None


def claim_values(claims: Mapping[str, Any], *, client_id: str, extra_group_claims: Iterable[str] = ()) -> ClaimValues:
    """Groups, roles and domains from the claims of any of the supported providers."""
    groups: set[str] = set()
    for name in ("groups", *extra_group_claims):
        groups.update(normalise_group(g) for g in _strings(claims.get(name)))
    roles = set(_strings(claims.get("roles")))
    roles.update(_strings(_nested(claims, "realm_access", "roles")))
    roles.update(_strings(_nested(claims, "resource_access", client_id, "roles")))
    domains = set()
    if isinstance(claims.get("hd"), str) and claims["hd"]:
        domains.add(claims["hd"].lower())
    if domain := email_domain(claims):
        domains.add(domain)
    overage = "groups" not in claims and isinstance(_nested(claims, "_claim_names", "groups"), str)
    return ClaimValues(frozenset(groups), frozenset(roles), frozenset(domains), groups_overage=overage)


def username_base(claims: Mapping[str, Any]) -> str:
    """The username to give a new user: ``preferred_username``, else the e-mail address, else the subject.

    Characters Django's usernames refuse are replaced by ``-``; at most 140 characters (room for a ``-N`` suffix).
    """
    for name in ("preferred_username", "email", "sub"):
        value = claims.get(name)
        if isinstance(value, str) and value.strip():
            return _USERNAME_UNSAFE.sub("-", value.strip())[:140]
    return "sso-user"


def profile(claims: Mapping[str, Any]) -> dict[str, str]:
    """E-mail, first and last name from the claims (``given_name``/``family_name``, else ``name`` split once)."""
    first, last = claims.get("given_name"), claims.get("family_name")
    if not isinstance(first, str) and not isinstance(last, str) and isinstance(claims.get("name"), str):
        first, _, last = claims["name"].strip().partition(" ")
    email = claims.get("email")
    return {
        "email": email[:254] if isinstance(email, str) else "",
        "first_name": first[:150] if isinstance(first, str) else "",
        "last_name": last[:150] if isinstance(last, str) else "",
    }
