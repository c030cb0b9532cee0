"""The alert record: what fired, when, on which step, why, and the values behind it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from msmon.util.jsonfiles import JsonObject
from msmon.util.numbers import json_safe

Severity = Literal["warning", "critical"]


@dataclass(frozen=True)
class Signal:
    """What a detector reports; the monitor turns it into an Alert."""

    severity: Severity
    message: str
    values: JsonObject = field(default_factory=dict)
    onset_step: int | None = None  # the first step the condition affected (rollback detectors), when known


@dataclass(frozen=True)
class Alert:
    """One line of ``alerts.jsonl``."""

    time: float | None
    step: int
    detector: str
    severity: Severity
    message: str
    values: JsonObject
    action: str
    context_file: str | None = None  # the flight recorder's window before it, relative to the run directory
    onset_step: int | None = None  # the first step the condition affected (Signal.onset_step)

    def to_dict(self) -> JsonObject:
        """The alert as a plain dict (non-finite floats kept as floats; ``context_file`` and ``onset_step`` only when
        known)."""
        data = {
            "time": self.time,
            "step": self.step,
            "detector": self.detector,
            "severity": self.severity,
            "message": self.message,
            "values": dict(self.values),
            "action": self.action,
        }
        if self.context_file is not None:
            data["context_file"] = self.context_file
        if self.onset_step is not None:
            data["onset_step"] = self.onset_step
        return data

    def to_json(self) -> str:
        """Strict JSON (non-finite numbers as the strings "NaN", "Infinity", "-Infinity")."""
        return json.dumps(json_safe(self.to_dict()), sort_keys=False)
