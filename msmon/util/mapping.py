"""Nested config mappings: read a dotted key, flatten to dotted keys."""

from __future__ import annotations

from collections.abc import Mapping

from msmon.foreign import ConfigValue
from msmon.util.jsonfiles import JsonObject, JsonValue


def dotted_get(data: ConfigValue, dotted: str, default: ConfigValue = None) -> ConfigValue:
    """``data["a"]["b"]["c"]`` for ``"a.b.c"``, or ``default`` when a part is missing or not a mapping."""
    node = data
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def flatten(data: Mapping[str, JsonValue], prefix: str = "") -> JsonObject:
    """``{"a.b.c": leaf}`` from nested mappings; lists and empty mappings are leaves."""
    flat: JsonObject = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
