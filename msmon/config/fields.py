"""``doc()``: a dataclass field that carries its documentation (docs/config.md is generated from it)."""

from __future__ import annotations

import copy
from dataclasses import field
from typing import Any


def doc(default: Any, text: str, check: str = "") -> Any:
    """A field with a default, a one-line meaning, and the validation code that guards it."""
    metadata = {"doc": text, "check": check}
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)
