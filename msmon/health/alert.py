"""The alert record: what fired, when, on which step, why, and the values behind it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["warning", "critical"]


@dataclass(frozen=True)
class Signal:
    """What a detector reports; the monitor turns it into an Alert."""

    severity: Severity
    message: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Alert:
    """One line of ``alerts.jsonl``."""

    time: float | None
    step: int
    detector: str
    severity: Severity
    message: str
    values: dict[str, Any]
    action: str

    def to_dict(self) -> dict[str, Any]:
        """The alert as a plain dict (non-finite floats kept as floats)."""
        return {
            "time": self.time,
            "step": self.step,
            "detector": self.detector,
            "severity": self.severity,
            "message": self.message,
            "values": dict(self.values),
            "action": self.action,
        }

    def to_json(self) -> str:
        """Strict JSON (non-finite numbers as the strings "NaN", "Infinity", "-Infinity")."""
        return json.dumps(json_safe(self.to_dict()), sort_keys=False)


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats replaced by the strings msmon replay reads back."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def fmt(value: float | None) -> str:
    """A number for a message: 4 significant digits, NaN/Inf spelled out."""
    if value is None:
        return "n/a"
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return f"{value:.4g}"
