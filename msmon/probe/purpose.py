"""Why msmon asked for a probe itself (a health action, docs/probe.md): ``probes/<id>/purpose.json`` beside the
ranks' marks. A request ``msmon probe`` wrote by hand has none."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from msmon import layout
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject, read_objects


class Purpose(StrEnum):
    BASELINE = "baseline"  # the short profile early in the run that an alert's profile is compared with
    ANOMALY = "anomaly"  # the profile an alert asked for (its detector's action: profile)


@dataclass(frozen=True)
class ProbePurpose:
    """Request ``request`` was made for ``purpose``; an anomaly's names the alert (its detector and step) and says
    whether its comparison with the baseline has gone out as an alert (``reported``)."""

    request: str
    purpose: Purpose
    detector: str | None = None
    alert_step: int | None = None
    reported: bool = False

    def to_json(self) -> JsonObject:
        return {"request": self.request, "purpose": self.purpose.value, "detector": self.detector,
                "alert_step": self.alert_step, "reported": self.reported}

    @classmethod
    def from_json(cls, data: JsonObject) -> ProbePurpose:
        step = data.get("alert_step")
        return cls(str(data["request"]), Purpose(data["purpose"]), data.get("detector"),
                   step if isinstance(step, int) else None, data.get("reported") is True)


def write_purpose(run_dir: Path, purpose: ProbePurpose) -> None:
    path = layout.probe_purpose(run_dir, purpose.request)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, purpose.to_json())


def read_purposes(run_dir: Path) -> list[ProbePurpose]:
    """Every request msmon made itself, oldest first (unreadable files left out)."""
    paths = sorted((run_dir / layout.PROBES).glob("*/purpose.json"))
    return read_objects(paths, ProbePurpose.from_json)
