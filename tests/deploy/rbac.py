"""What rendered RBAC grants one service account, read from the objects themselves, and what the access table
(clusters.kube_sync.access) says it should be granted: the kustomize and Helm tests compare the two."""

from __future__ import annotations

from clusters.kube_sync.access import WORKER, rbac_rules, role_rules, team_rules

#: (namespace — "" for cluster-wide —, API group, plural, resource names) → verbs.
Grants = dict[tuple[str, str, str, tuple[str, ...]], set[str]]


def _rules_of(docs: list[dict], kind: str, name: str, namespace: str = "") -> list[dict]:
    for doc in docs:
        meta = doc["metadata"]
        if (
            doc["kind"] == kind
            and meta["name"] == name
            and (kind == "ClusterRole" or meta.get("namespace") == namespace)
        ):
            return doc.get("rules") or []
    raise AssertionError(f"{kind} {name} {namespace} is bound but not rendered")


def granted(docs: list[dict], account: str, account_namespace: str) -> Grants:
    """Everything the rendered ClusterRoleBindings and RoleBindings give ``account`` (of ``account_namespace``)."""
    subject = {"kind": "ServiceAccount", "name": account, "namespace": account_namespace}
    out: Grants = {}
    for binding in docs:
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding") or subject not in binding.get("subjects", []):
            continue
        scope = "" if binding["kind"] == "ClusterRoleBinding" else binding["metadata"]["namespace"]
        ref = binding["roleRef"]
        for rule in _rules_of(docs, ref["kind"], ref["name"], scope):
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    key = (scope, group, resource, tuple(sorted(rule.get("resourceNames", []))))
                    out.setdefault(key, set()).update(rule["verbs"])
    return out


def expected(
    process: str,
    *,
    teams: tuple[str, ...] = (),
    node_health: bool = False,
    kueue_config_write: bool = False,
    kueue: tuple[str, str] | None = None,
) -> Grants:
    """What the access table grants ``process``: cluster-wide, in each of ``teams``, and (the worker) in Kueue's
    namespace (``kueue``: (namespace, ConfigMap name) where the deployment moved it)."""
    out: Grants = {("", g, p, ()): set(v) for (g, p), v in rbac_rules(process, node_health=node_health).items()}
    for namespace in teams:
        out.update({(namespace, g, p, ()): set(v) for (g, p), v in team_rules(process).items()})
    if process == WORKER:
        for (namespace, group, plural, names), verbs in role_rules(kueue_config_write=kueue_config_write).items():
            if kueue is not None:
                namespace = kueue[0]
                names = tuple(kueue[1] if n == "kueue-manager-config" else n for n in names)
            out[(namespace, group, plural, names)] = set(verbs)
    return out
