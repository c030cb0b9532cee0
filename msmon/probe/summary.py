"""msmon's summary of one rank's profile (``profiles/<from>-<to>/rank_N/msmon_summary.json``): time per operator type,
the top operators and each profiled step's time. Written by the rank that profiled (msmon.engine.probe.profile_summary
parses the profiler's tables into it), read by the alerts, ``msmon status`` and the report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from msmon import layout
from msmon.util.jsonfiles import JsonObject, read_json_object


@dataclass(frozen=True)
class OpTypeTime:
    op_type: str
    count: int
    total_ms: float
    avg_ms: float
    share: float  # of all operators' time in the window


@dataclass(frozen=True)
class OpTime:
    name: str  # the operator's full name in the graph (its scope: the layer it belongs to)
    op_type: str
    count: int
    total_ms: float
    avg_ms: float


@dataclass(frozen=True)
class StepTime:
    step: int
    wall_ms: float  # from the step's begin to its end, as the callback saw it
    op_ms: float | None  # the operators' time inside it (None without the timestamp table)
    ops: int | None


@dataclass(frozen=True)
class StepBounds:
    """One profiled step's begin and end (Unix nanoseconds, taken by the callback)."""

    step: int
    begin_ns: int
    end_ns: int


@dataclass(frozen=True)
class ProfileSummary:
    rank: int
    first_step: int
    last_step: int
    complete: bool
    profiler_output: list[str]  # the profiler's directories, relative to the rank's profile directory
    op_total_ms: float
    op_types: list[OpTypeTime] = field(default_factory=list)
    top_operators: list[OpTime] = field(default_factory=list)
    steps: list[StepTime] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: JsonObject) -> ProfileSummary:
        return cls(**{**data, "op_types": [OpTypeTime(**x) for x in data["op_types"]],
                      "top_operators": [OpTime(**x) for x in data["top_operators"]],
                      "steps": [StepTime(**x) for x in data["steps"]]})


def read_summary(profile_dir: Path) -> ProfileSummary:
    """The summary beside one rank's profile; OSError when missing or unreadable, ValueError (KeyError, TypeError)
    when it is not one."""
    try:
        return ProfileSummary.from_json(read_json_object(profile_dir / layout.PROFILE_SUMMARY))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{profile_dir / layout.PROFILE_SUMMARY}: not a profile summary ({exc})") from exc
