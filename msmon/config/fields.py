"""``doc()``: a dataclass field that carries its documentation and its allowed range.

docs/config.md is generated from the text; validation checks the range (``range_findings``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import field
from typing import TypeVar

T = TypeVar("T")

#: The text of a field that its settings class's docstring explains (a detector's ``enabled``: what it finds).
CLASS_DOC = "<the class's docstring>"


def doc(
    default: T, text: str, check: str = "", *, at_least: float | None = None, above: float | None = None,
    at_most: float | None = None,
) -> T:
    """A field with a default, a one-line meaning, the validation code that guards it, and its range
    (``at_least``: >=, ``above``: >, ``at_most``: <=; a None value is never out of range)."""
    metadata = {"doc": text, "check": check, "at_least": at_least, "above": above, "at_most": at_most}
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def meaning(cls: type, metadata: Mapping[str, object]) -> str:
    """A field's one-line meaning: its ``doc()`` text, or for ``CLASS_DOC`` the docstring ``cls`` itself declares."""
    text = metadata.get("doc", "")
    if text != CLASS_DOC:
        return str(text)
    own = vars(cls).get("__doc__") or ""
    if own.startswith(f"{cls.__name__}("):  # @dataclass's stand-in for a missing docstring
        raise TypeError(f"{cls.__name__} needs a docstring: it explains one of its fields")
    return " ".join(own.split())


def range_text(metadata: Mapping[str, float | None]) -> str:
    """``>= 3``, ``> 0 and <= 1``: the range a field's metadata allows ('' when unbounded)."""
    parts = []
    if metadata.get("at_least") is not None:
        parts.append(f">= {metadata['at_least']:g}")
    if metadata.get("above") is not None:
        parts.append(f"> {metadata['above']:g}")
    if metadata.get("at_most") is not None:
        parts.append(f"<= {metadata['at_most']:g}")
    return " and ".join(parts)


def in_range(value: float, metadata: Mapping[str, float | None]) -> bool:
    """Whether ``value`` lies in the range of a field's metadata."""
    low, above, high = metadata.get("at_least"), metadata.get("above"), metadata.get("at_most")
    return not ((low is not None and value < low) or (above is not None and value <= above)
                or (high is not None and value > high))
