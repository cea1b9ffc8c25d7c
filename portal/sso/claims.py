"""What an identity provider's claims say about a person: groups, roles and domains, and the profile fields.

Pure functions over the verified claims (the ID token merged with the userinfo answer). The providers differ:

- Keycloak: ``groups`` (the "Group Membership" mapper; paths such as ``/research/vision`` with "full group path"
  on), ``realm_access.roles`` and ``resource_access.<client id>.roles``.
- Entra ID: ``roles`` (app roles, the advised way) and ``groups`` (object IDs). Past 200 groups Entra sends
  ``_claim_names.groups`` (an "overage" pointing at Microsoft Graph) instead of the list: no groups are read then.
- Okta: ``groups`` (a groups claim on the authorization server; its name can differ: ``OIDC_EXTRA_GROUP_CLAIMS``).
- Dex: ``groups`` (with the ``groups`` scope).
- Google: no groups; ``hd`` (the Workspace domain) and ``email`` with ``email_verified``.

Domains grant teams (a domain mapping), so they are read only from the configured issuer's claims and only with
``email_verified`` true: an ``hd`` beside an unverified address grants nothing. What is copied onto the user — the
e-mail address, the names — is validated here: one well-formed address (a list such as ``a@x, b@y`` would be mailed
to both), names without control or invisible characters that do not start like a spreadsheet formula.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from kernel.csv_cells import FORMULA_START

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
    """The domain of a verified, well-formed e-mail address, lower case; None when the address is missing,
    unverified or not one address."""
    email = valid_email(claims.get("email"))
    if email is None or not is_true(claims.get("email_verified")):
        return None
    return email.rsplit("@", 1)[1].lower() or None


def claim_values(
    claims: Mapping[str, Any], *, client_id: str, issuer: str, extra_group_claims: Iterable[str] = ()
) -> ClaimValues:
    """Groups, roles and domains from the claims of any of the supported providers. Domains (``hd`` and the e-mail's
    domain) only when the claims come from ``issuer`` (the configured one) with ``email_verified`` true."""
    groups: set[str] = set()
    for name in ("groups", *extra_group_claims):
        groups.update(normalise_group(g) for g in _strings(claims.get(name)))
    roles = set(_strings(claims.get("roles")))
    roles.update(_strings(_nested(claims, "realm_access", "roles")))
    roles.update(_strings(_nested(claims, "resource_access", client_id, "roles")))
    domains = set()
    trusted = bool(issuer) and claims.get("iss") == issuer and is_true(claims.get("email_verified"))
    if trusted and isinstance(claims.get("hd"), str) and 0 < len(claims["hd"]) <= MAX_VALUE_LENGTH:
        domains.add(claims["hd"].lower())
    if trusted and (domain := email_domain(claims)):
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


#: Control, format (zero-width, bidirectional overrides) and other invisible characters: never part of a name.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Co", "Cs", "Zl", "Zp"})


def valid_email(value: Any) -> str | None:
    """``value`` when it is one well-formed e-mail address (at most 254 characters), else None."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text or len(text) > 254 or any(ch in text for ch in ",;<>\r\n\t "):
        return None
    try:
        validate_email(text)
    except ValidationError:
        return None
    return text


def valid_name(value: Any, *, max_length: int = 150) -> str | None:
    """A display name as stored: whitespace runs made single spaces; None when it holds control or invisible
    characters, starts like a spreadsheet formula (``=``, ``+``, ``-``, ``@``) or is longer than ``max_length``."""
    if not isinstance(value, str):
        return None
    if any(unicodedata.category(ch) in _INVISIBLE_CATEGORIES for ch in value if ch not in " \t"):
        return None
    text = " ".join(value.split())
    if not text or len(text) > max_length or text.startswith(FORMULA_START):
        return None
    return text


@dataclass(frozen=True)
class Profile:
    """The e-mail address and names to copy onto the user (empty: not sent, or refused) and what was refused."""

    email: str = ""
    first_name: str = ""
    last_name: str = ""
    refused: tuple[str, ...] = field(default=())

    def fields(self) -> dict[str, str]:
        """The user fields and their new values (empty ones are left as they are)."""
        return {"email": self.email, "first_name": self.first_name, "last_name": self.last_name}


def profile(claims: Mapping[str, Any]) -> Profile:
    """E-mail, first and last name from the claims (``given_name``/``family_name``, else ``name`` split once),
    each validated (``valid_email``, ``valid_name``); a claim sent but refused is named in ``refused``."""
    first, last = claims.get("given_name"), claims.get("family_name")
    if not isinstance(first, str) and not isinstance(last, str) and isinstance(claims.get("name"), str):
        first, _, last = " ".join(claims["name"].split()).partition(" ")
    out: dict[str, str] = {}
    refused = []
    for name, value, check in (
        ("email", claims.get("email"), valid_email),
        ("first_name", first, valid_name),
        ("last_name", last, valid_name),
    ):
        if value is None or value == "":
            out[name] = ""
            continue
        clean = check(value)
        out[name] = clean or ""
        if clean is None:
            refused.append(name)
    return Profile(**out, refused=tuple(refused))
