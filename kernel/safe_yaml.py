"""YAML for files people hand the portal: the safe loader, without anchors and aliases.

Kubernetes listings, event records and scenario files never need aliases, and an alias bomb (a few lines that
expand to billions of nodes) would hold a worker for minutes. Deep nesting raises ``RecursionError``, which the
callers turn into an error naming the input.
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YAMLError", "safe_dump_all", "safe_load", "safe_load_all"]

YAMLError = yaml.YAMLError


class SafeNoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``) instead of expanding them."""

    def compose_node(self, parent, index):
        """Refuse an alias where the safe loader would expand it."""
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None,
                None,
                f"found alias *{event.anchor}: anchors and aliases are not accepted",
                event.start_mark,
            )
        return super().compose_node(parent, index)


class NoAliasDumper(yaml.SafeDumper):
    """``yaml.SafeDumper`` that writes a mapping shared by two places twice instead of as an anchor and an alias
    (what people read, and what ``kubectl apply`` takes, has none)."""

    def ignore_aliases(self, data) -> bool:
        """Never write an alias."""
        return True


def safe_dump_all(documents: list[Any]) -> str:
    """Documents as one YAML stream (``---`` between them), keys in their order, without anchors or aliases."""
    return yaml.dump_all(documents, Dumper=NoAliasDumper, sort_keys=False, default_flow_style=False, allow_unicode=True)


def safe_load(text: str) -> Any:
    """The one document of a YAML text (None when empty); raises ``yaml.YAMLError`` or ``RecursionError``."""
    loader = SafeNoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def safe_load_all(text: str) -> list[Any]:
    """Every document of a multi-document YAML text; raises ``yaml.YAMLError`` or ``RecursionError``."""
    loader = SafeNoAliasLoader(text)
    try:
        out = []
        while loader.check_data():
            out.append(loader.get_data())
        return out
    finally:
        loader.dispose()
