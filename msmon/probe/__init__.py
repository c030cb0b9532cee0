"""The probe files: a request ``msmon probe`` leaves in a run directory, and what each rank did with it.

A probe is a costly measurement a running training takes on request for a window of steps, then stops (docs/probe.md).
``probes/request.json`` holds the one current request (replaced atomically by the next); each named rank takes it at
its next logging step and, when its window ends, writes ``probes/<id>/rank_N.json`` (a ``ProbeMark``): a rank that
finds its mark never runs that request again, also after a restart or a resume.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from msmon import layout
from msmon.run_record import recorded
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject, JsonValue, read_json_object, read_objects

#: The window when ``msmon probe`` is not given ``--steps``.
DEFAULT_STEPS = 5
#: The distributions probe's logging steps when ``msmon probe`` is not given ``--logs``.
DEFAULT_LOGS = 3
MAX_STEPS = 1000


class ProbeKind(StrEnum):
    """What a probe measures."""

    PROFILE = "profile"  # MindSpore's profiler: operator times (msmon.engine.probe.profile)
    DISTRIBUTIONS = "distributions"  # histograms of each group's weights, updates, gradients (steps count logs)


class ProbeState(StrEnum):
    """How a rank's window ended."""

    DONE = "done"  # every step of the window measured
    INCOMPLETE = "incomplete"  # the training ended (or was interrupted) inside the window: what was measured is kept
    ERROR = "error"  # the measurement could not start or wrote nothing (the training went on)
    REFUSED = "refused"  # the rank did not start it (another profiler is on): the message says why


@dataclass(frozen=True)
class ProbeRequest:
    """One request: measure ``kind`` over ``steps`` steps on ``ranks`` (None: every rank)."""

    id: str
    kind: ProbeKind
    steps: int
    ranks: tuple[int, ...] | None
    created: float

    def names(self, rank: int) -> bool:
        return self.ranks is None or rank in self.ranks

    def to_json(self) -> JsonObject:
        return {"id": self.id, "kind": self.kind.value, "steps": self.steps,
                "ranks": "all" if self.ranks is None else list(self.ranks), "created": self.created}

    @classmethod
    def from_json(cls, data: JsonObject) -> ProbeRequest:
        """ValueError naming what is wrong."""
        request_id, kind, steps, ranks = data.get("id"), data.get("kind"), data.get("steps"), data.get("ranks", "all")
        if not isinstance(request_id, str) or not request_id or "/" in request_id or request_id.startswith("."):
            raise ValueError(f"id {request_id!r} is not a request id")
        if kind not in ProbeKind.__members__.values():
            raise ValueError(f"kind {kind!r} is none of {', '.join(ProbeKind)}")
        if not isinstance(steps, int) or isinstance(steps, bool) or not 1 <= steps <= MAX_STEPS:
            raise ValueError(f"steps {steps!r} is not a number of steps from 1 to {MAX_STEPS}")
        created = data.get("created", 0.0)
        return cls(request_id, ProbeKind(str(kind)), steps, parse_ranks(ranks), float(created) if isinstance(
            created, int | float) else 0.0)


def parse_ranks(value: JsonValue) -> tuple[int, ...] | None:
    """``"all"`` -> None; ``"0,2"`` or ``[0, 2]`` -> (0, 2); ValueError otherwise."""
    if value == "all":
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise ValueError(f"ranks {value!r} is neither 'all' nor a list of ranks")
    ranks = []
    for item in items:
        text = item.strip() if isinstance(item, str) else item
        rank = int(text) if isinstance(text, str) and text.isdigit() else text
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
            raise ValueError(f"rank {item!r} is not a rank number (0, 1, ...)")
        ranks.append(rank)
    return tuple(sorted(set(ranks)))


def new_request(kind: ProbeKind, steps: int, ranks: tuple[int, ...] | None) -> ProbeRequest:
    """A request with a fresh id (sortable by time)."""
    now = time.time()
    request_id = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + "-" + secrets.token_hex(3)
    return ProbeRequest.from_json(ProbeRequest(request_id, kind, steps, ranks, now).to_json())


def write_request(run_dir: Path, request: ProbeRequest) -> None:
    """Leave ``request`` for the ranks (atomically: a rank reads the previous request or this one)."""
    path = run_dir / layout.PROBE_REQUEST
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, request.to_json())


def read_request(run_dir: Path) -> ProbeRequest | None:
    """The current request; None without one; ValueError when it is malformed, OSError when unreadable."""
    try:
        data = read_json_object(run_dir / layout.PROBE_REQUEST)
    except FileNotFoundError:
        return None
    return ProbeRequest.from_json(data)


@dataclass(frozen=True)
class ProbeMark:
    """What one rank did with one request: the steps it measured (none when it failed early or refused) and where
    the result is, relative to the run directory."""

    request: str
    kind: ProbeKind
    rank: int
    state: ProbeState
    first_step: int | None = None
    last_step: int | None = None
    output: str | None = None
    message: str = ""
    written_at: float = field(default_factory=time.time)  # Unix seconds

    def to_json(self) -> JsonObject:
        return {"request": self.request, "kind": self.kind.value, "rank": self.rank, "state": self.state.value,
                "first_step": self.first_step, "last_step": self.last_step, "output": self.output,
                "message": self.message, "time": self.written_at}

    @classmethod
    def from_json(cls, data: JsonObject) -> ProbeMark:
        return cls(str(data["request"]), ProbeKind(data["kind"]), int(data["rank"]), ProbeState(data["state"]),
                   data.get("first_step"), data.get("last_step"), data.get("output"), str(data.get("message", "")),
                   float(data.get("time", 0.0)))


def write_mark(run_dir: Path, mark: ProbeMark) -> None:
    path = layout.probe_mark(run_dir, mark.request, mark.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, mark.to_json())


def read_marks(run_dir: Path, request_id: str) -> dict[int, ProbeMark]:
    """rank -> its mark for ``request_id`` (unreadable marks left out)."""
    marks = read_objects(sorted((run_dir / layout.PROBES / request_id).glob("rank_*.json")), ProbeMark.from_json)
    return {mark.rank: mark for mark in marks}


def pending_ranks(request: ProbeRequest, marks: dict[int, ProbeMark], world_size: int) -> list[int]:
    """The ranks ``request`` names (of ``world_size``) that have not marked it yet."""
    named = range(world_size) if request.ranks is None else request.ranks
    return [rank for rank in named if rank not in marks]


def world_size(run_dir: Path) -> int:
    """The run's number of ranks (run.json's ``device_count``; 1 when unknown)."""
    record = recorded(run_dir)
    count = record.device_count if record is not None else None
    return count if count is not None and count > 0 else 1


def window_dirs(run_dir: Path, where: str) -> list[str]:
    """Every rank's window of a probe kind's results (``where``: ``layout.PROFILES``, ``layout.DISTRIBUTIONS``):
    ``<where>/<from>-<to>/rank_N``, relative, by window and rank."""
    found = [path for path in (run_dir / where).glob("*/rank_*") if path.is_dir()]
    return [str(path.relative_to(run_dir)) for path in sorted(found, key=_window_order)]


def _window_order(path: Path) -> tuple[int, str]:
    """``<where>/<from>-<to>/rank_N`` by its first step."""
    first = path.parent.name.split("-")[0]
    return (int(first) if first.isdigit() else -1, path.as_posix())
