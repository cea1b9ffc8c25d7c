"""The engine input's jobs: rows read as the database returns them, each built into a Job and a Workload once.

A diagnosis refresh runs after every counted change of a cluster and reads every pending and quota-holding job of
it (10,000 and more), while one change alters a row or two. So the rows are read as the raw tuples the database
returns (before Django's converters) and each is looked up by that tuple in a per-process cache, together with
what its workload reads besides the row (its *context*: the team's namespace and local queue, the resources the
team's queue declares, the class's facts, the priority class's name). A row seen before in the same context gives
the Job and the Workload built from it then; a new or changed one is converted and built as a model query and
``build`` would. The key is everything the build reads, so a cached answer is the one building it again gives
(tested against the uncached build). The cache keeps, per cluster, the rows of that cluster's last read only.

The Job instances are shared by the reads that found them: callers read them and never change or save them.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import Model, QuerySet
from django.db.models.sql.constants import MULTI

T = TypeVar("T")
W = TypeVar("W")
V = TypeVar("V")

#: Clusters whose rows are kept (the least recently read is dropped first).
KEEP_CLUSTERS = 16


@dataclass(frozen=True, slots=True)
class RawRows(Generic[T]):
    """Rows of a query as the database returned them (``names`` order) and how to make a model instance of one."""

    names: tuple[str, ...]
    rows: list[tuple]
    make: Callable[[tuple], T]

    def index(self, name: str) -> int:
        """The position of column ``name`` in a row."""
        return self.names.index(name)


def raw_rows(queryset: QuerySet, fields: Sequence[str]) -> RawRows:
    """``queryset``'s rows of ``fields`` (attnames) before Django's converters, and ``make(row)``: the instance
    ``queryset.only(*fields)`` would give for that row (the same converters, then ``Model.from_db``)."""
    model = queryset.model
    wanted = set(fields)
    names = tuple(f.attname for f in model._meta.concrete_fields if f.attname in wanted)  # ``from_db``'s order
    values = queryset.values_list(*names)
    compiler = values.query.get_compiler(values.db)
    rows = [row if type(row) is tuple else tuple(row) for chunk in compiler.execute_sql(MULTI) for row in chunk]
    converters = compiler.get_converters([s[0] for s in compiler.select[: compiler.col_count]])
    db = values.db

    def make(row: tuple) -> Model:
        converted = next(iter(compiler.apply_converters([row], converters))) if converters else list(row)
        return model.from_db(db, names, converted)

    return RawRows(names, rows, make)


def _hashable(row: tuple) -> Hashable:
    """The row as a dict key (a backend that returns decoded JSON gives lists and dicts: keyed by their repr)."""
    try:
        hash(row)
    except TypeError:
        return tuple(repr(v) if isinstance(v, dict | list) else v for v in row)
    return row


class PerCluster(Generic[V]):
    """What this process keeps per cluster from one read to the next, for the last ``keep`` clusters read."""

    def __init__(self, keep: int = KEEP_CLUSTERS) -> None:
        self._keep = keep
        self._by_cluster: OrderedDict[int, V] = OrderedDict()

    def take(self, cluster_id: int, default: V) -> V:
        """What was kept for ``cluster_id`` (``default`` if nothing), no longer kept until ``put`` again."""
        return self._by_cluster.pop(cluster_id, default)

    def put(self, cluster_id: int, value: V) -> None:
        """Keep ``value`` for ``cluster_id`` as the most recent; the least recently put cluster beyond ``keep`` goes."""
        self._by_cluster[cluster_id] = value
        while len(self._by_cluster) > self._keep:
            self._by_cluster.popitem(last=False)

    def __getitem__(self, cluster_id: int) -> V:
        return self._by_cluster[cluster_id]

    def clear(self) -> None:
        """Forget every cluster."""
        self._by_cluster.clear()


@dataclass(frozen=True, slots=True)
class _Entry(Generic[T, W]):
    instance: T
    built: W
    context: object


class RowCache(Generic[T, W]):
    """Per cluster: raw row → (instance, what was built from it, the context it was built in)."""

    def __init__(self, keep: int = KEEP_CLUSTERS) -> None:
        self._clusters: PerCluster[dict[Hashable, _Entry]] = PerCluster(keep)
        self._contexts: dict[Hashable, Hashable] = {}

    def clear(self) -> None:
        """Forget every row and context."""
        self._clusters.clear()
        self._contexts.clear()

    def context(self, value: Hashable) -> Hashable:
        """``value``, or the equal context met before (so that an entry's context is compared by identity)."""
        if len(self._contexts) > 4096:  # contexts of rows long gone: start again
            self._contexts.clear()
        return self._contexts.setdefault(value, value)

    def build_all(
        self,
        cluster_id: int,
        raw: RawRows[T],
        context_of: Callable[[tuple], Hashable],
        build: Callable[[T, Any], W],
        on_hit: Callable[[T], None] | None = None,
    ) -> list[tuple[T, W]]:
        """(instance, built) of every row of ``raw``, in order: reused where the row and its context were met in the
        last read of ``cluster_id``, else ``build(raw.make(row), context)``; ``on_hit(instance)`` refreshes a reused
        instance's shared relations."""
        previous = self._clusters.take(cluster_id, {})
        current: dict[Hashable, _Entry] = {}
        out = []
        for row in raw.rows:
            key = _hashable(row)
            context = context_of(row)
            entry = previous.get(key)
            if entry is None or entry.context is not context:
                instance = raw.make(row)
                entry = _Entry(instance, build(instance, context), context)
            elif on_hit is not None:
                on_hit(entry.instance)
            current[key] = entry
            out.append((entry.instance, entry.built))
        self._clusters.put(cluster_id, current)
        return out
