"""Nested config mappings: read a dotted key, flatten to dotted keys."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def dotted_get(data: Any, dotted: str, default: Any = None) -> Any:
    """``data["a"]["b"]["c"]`` for ``"a.b.c"``, or ``default`` when a part is missing or not a mapping."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a.b.c": leaf}`` from nested mappings; lists and empty mappings are leaves."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
