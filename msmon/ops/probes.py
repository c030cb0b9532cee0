"""``msmon probe RUN KIND``: leave a probe request in a running run's directory; and the probes and profiles a run
holds, for ``msmon status`` (docs/probe.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from msmon import layout
from msmon.config.mindformers_yaml import read_run_config
from msmon.config.profiler import own_profiler
from msmon.errors import MsmonError
from msmon.ops.runs import rank_status
from msmon.probe import (
    ProbeKind,
    ProbeMark,
    ProbeRequest,
    new_request,
    pending_ranks,
    read_marks,
    read_request,
    window_dirs,
    world_size,
    write_request,
)
from msmon.status import RunStatus
from msmon.util.jsonfiles import JsonObject


@dataclass(frozen=True)
class ProbeListing:
    """The current request (None without one), its marks, the ranks that have not taken it yet (empty when the run
    is no longer running: nothing will take it), the profiles in ``profiles/`` and the histograms in
    ``distributions/`` (relative paths)."""

    request: ProbeRequest | None
    marks: dict[int, ProbeMark]
    pending: list[int]
    profiles: list[str]
    distributions: list[str]

    def lines(self) -> list[str]:
        """What ``msmon status`` prints: the profiles, then the current request and each rank's outcome."""
        found = [f"profiles: {', '.join(self.profiles)}"] if self.profiles else []
        found += [f"distributions: {', '.join(self.distributions)}"] if self.distributions else []
        if self.request is None:
            return found
        request = self.request
        ranks = "every rank" if request.ranks is None else f"rank(s) {', '.join(map(str, request.ranks))}"
        span = "logging step(s)" if request.kind is ProbeKind.DISTRIBUTIONS else "step(s)"
        found.append(f"probe {request.id}: {request.kind.value}, {request.steps} {span}, {ranks}")
        for rank, mark in sorted(self.marks.items()):
            steps = f" steps {mark.first_step}-{mark.last_step}" if mark.first_step is not None else ""
            said = f": {mark.message}" if mark.message else ""
            found.append(f"  rank {rank}: {mark.state.value}{steps}{said}")
        if self.pending:
            found.append(f"  not taken yet by rank(s) {', '.join(map(str, self.pending))} (at their next logging step)")
        return found

    def to_json(self) -> JsonObject:
        return {"request": None if self.request is None else self.request.to_json(),
                "marks": [mark.to_json() for _, mark in sorted(self.marks.items())], "pending": self.pending,
                "profiles": self.profiles, "distributions": self.distributions}


def request_probe(run_dir: Path, kind: ProbeKind, steps: int, ranks: tuple[int, ...] | None) -> ProbeRequest:
    """Write a request for ``kind`` over ``steps`` steps on ``ranks`` (None: all) into a running run; MsmonError
    when the run is not running, names no such rank, runs another profiler, or has a request still pending."""
    info, _ = rank_status(run_dir)
    if info.status != RunStatus.RUNNING:
        raise MsmonError(f"{run_dir}: the run is not running (status: {info.status})",
                         "a probe measures a running training; `msmon runs SAVE_DIR` lists the runs")
    world = world_size(run_dir)
    missing = [rank for rank in ranks or () if rank >= world]
    if missing:
        raise MsmonError(f"the run has no rank {', '.join(map(str, missing))} (ranks 0-{world - 1})",
                         "pass --ranks with ranks of the run, or all")
    other = own_profiler(read_run_config(run_dir)) if kind is ProbeKind.PROFILE else None
    if other is not None:
        raise MsmonError(f"the run profiles itself: {other}; MindSpore runs one profiler at a time",
                         "its own profile is written under logs/output/profile/; or run without profile: True")
    listing = probes_of(run_dir, running=True)
    if listing.request is not None and listing.pending:
        current = listing.request
        raise MsmonError(f"request {current.id} ({current.kind.value}, {current.steps} steps) is not taken yet by "
                         f"rank(s) {', '.join(map(str, listing.pending))}",
                         "each rank takes it at its next logging step; `msmon status RUN` shows when it is done")
    request = new_request(kind, steps, ranks)
    write_request(run_dir, request)
    return request


def probes_of(run_dir: Path, running: bool) -> ProbeListing:
    """The run's current probe request and its profiles (``running``: whether the run still trains)."""
    try:
        request = read_request(run_dir)
    except (OSError, ValueError):
        request = None
    marks = read_marks(run_dir, request.id) if request is not None else {}
    pending = pending_ranks(request, marks, world_size(run_dir)) if request is not None and running else []
    return ProbeListing(request, marks, pending, window_dirs(run_dir, layout.PROFILES),
                        window_dirs(run_dir, layout.DISTRIBUTIONS))
