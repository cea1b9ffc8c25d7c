"""The engine's input dataclasses to JSON-ready data and back (a stored what-if proposal, read later by a worker).

``to_data`` turns any of ``model``'s frozen dataclasses into dicts, lists and scalars; ``from_data`` rebuilds
an instance of the given class from the field types the class declares, so ``from_data(type(x), to_data(x)) == x``.
Fields left at their default are written all the same: the data stays readable without the defaults.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


def to_data(value: Any) -> Any:
    """A dataclass (or tuple, mapping, scalar) of the engine as JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_data(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_data(v) for k, v in value.items()}
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(tp: Any, data: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or data is None:
        return data
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:
            return _decode(options[0], data)
        for option in options:
            if dataclasses.is_dataclass(option) and isinstance(data, Mapping):
                return _decode(option, data)
        return data
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_data(tp, data)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(args[0], v) for v in data)
        return tuple(_decode(a, v) for a, v in zip(args, data, strict=True))
    if origin in (Mapping, dict, typing.Mapping):
        value_type = args[1] if args else Any
        return {k: _decode(value_type, v) for k, v in data.items()}
    if origin is typing.Literal:
        return data
    if tp is float and isinstance(data, int):
        return float(data)
    return data


def from_data(cls: type[T], data: Mapping[str, Any]) -> T:
    """An instance of the dataclass ``cls`` from what ``to_data`` wrote (unknown keys are an error)."""
    hints = _hints(typing.cast(type, cls))  # type[T] is hashable; mypy does not see it through the TypeVar
    return cls(**{name: _decode(hints[name], value) for name, value in data.items()})
