"""Fair sharing's would-be-admission shares: the usage an admission would add, worked out without adding it.

``fair_sharing._lifted`` must give, for the ClusterQueue and each Cohort above it, exactly what
``QuotaTree.add_usage`` adds to their usage (lending limits keep part of it at lower levels), and
``QuotaNode.changes`` must move on exactly the nodes whose usage ``add_usage``/``remove_usage`` changes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from queues.engine.fair_sharing import _lifted
from queues.engine.model import Cohort
from queues.engine.quota import QuotaTree

from .builders import GPU, cq, group

FR = ("f", GPU)
quota = st.tuples(st.integers(0, 12), st.sampled_from((None, 4, 20)), st.sampled_from((None, 0, 3, 12)))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(quota, min_size=3, max_size=3),
    st.sampled_from((None, 2, 8)),
    st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 15)), max_size=6),
    st.sampled_from("abc"),
    st.integers(0, 20),
)
def test_lifted_usage_is_what_add_usage_adds(quotas, mid_lending, usages, name, request):
    # top <- mid <- {a, b}; top <- c
    cqs = [
        cq(q, {"f": {GPU: spec if spec[2] is not None else spec[:2]}}, cohort="mid" if q in "ab" else "top")
        for q, spec in zip("abc", quotas, strict=True)
    ]
    mid_groups = (group({"f": {GPU: (4, None, mid_lending)}}),) if mid_lending is not None else ()
    tree = QuotaTree(cqs, [Cohort("top"), Cohort("mid", parent="top", resource_groups=mid_groups)])
    for who, val in usages:
        QuotaTree.add_usage(tree.cqs[who], {FR: val})
    node = tree.cqs[name]
    path = [node, *node.path_to_root()]
    before = {id(n): (n.usage.get(FR, 0), n.changes) for n in path}

    lifted = _lifted(node, {FR: request})
    QuotaTree.add_usage(node, {FR: request})

    for n in path:
        used, changes = before[id(n)]
        added = n.usage.get(FR, 0) - used
        assert lifted.get(id(n), {}).get(FR, 0) == added
        assert (n.changes != changes) == (id(n) in lifted)
    after = {id(n): n.changes for n in path}
    QuotaTree.remove_usage(node, {FR: request})
    for n in path:
        assert n.usage.get(FR, 0) == before[id(n)][0]
        assert (n.changes != after[id(n)]) == (id(n) in lifted)
