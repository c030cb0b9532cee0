"""What every detector shares: the interface and reading one metric from a record."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from msmon.health.alert import Signal
from msmon.util.numbers import as_number


class Detector(Protocol):
    """Sees every record in step order (live and in replay alike) and may report a Signal."""

    name: ClassVar[str]

    def observe(self, record: dict[str, Any]) -> Signal | None: ...


def metric(record: dict[str, Any], key: str) -> float | None:
    """The record's ``key`` as a float (NaN/Inf kept), or None when absent or not a number."""
    return as_number(record.get(key))

