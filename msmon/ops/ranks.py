"""Every rank of a run from its heartbeat (``heartbeats/rank_N.json``): the per-rank table of ``msmon status`` and
``msmon runs`` (counted in one line by msmon.ops.rank_summary), and which ranks hold a stalled run up and how (the
stall alert of ``msmon run``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from msmon import layout
from msmon.step_cost import StepCost
from msmon.util import procs
from msmon.util.durations import format_duration
from msmon.util.jsonfiles import JsonObject, JsonValue, read_json_object, tail_rows
from msmon.util.numbers import as_number
from msmon.util.ranks import ranks_text

UNRESPONSIVE_S = 10.0  # a rank rewrites its heartbeat every second: one this old means a stopped or frozen process
LIVE = ("starting", "training")
RECORD_TAIL_BYTES = 65536  # the end of metrics.jsonl read for its last record


@dataclass
class RankState:
    """One rank as its heartbeat shows it."""

    rank: int
    state: str  # starting, in step N, after step N, not responding, stopped, or how the rank ended (completed, ...)
    begun: int = 0
    ended: int = 0
    begun_time: float | None = None
    ended_time: float | None = None
    alive_age_s: float | None = None
    host: str | None = None
    pid: int | None = None
    beat: JsonObject = field(default_factory=dict, repr=False)

    @property
    def responsive(self) -> bool:
        return self.state not in ("not responding", "stopped", "no heartbeat")

    @property
    def last_cost(self) -> StepCost | None:
        """The rank's latest logged step cost (time inside and outside the step, memory), None before one."""
        costs = self.beat.get("costs")
        return StepCost.from_json(costs[-1]) if isinstance(costs, list) and costs else None

    def age_s(self, now: float) -> float | None:
        """Seconds since the rank's last step ended (since its last heartbeat before the first step)."""
        if self.ended_time is not None:
            return now - self.ended_time
        return self.alive_age_s

    def to_json(self, now: float) -> JsonObject:
        cost = self.last_cost
        return {"rank": self.rank, "state": self.state, "last_step": self.ended or None, "begun": self.begun or None,
                "age_s": self.age_s(now), "heartbeat_age_s": self.alive_age_s, "host": self.host, "pid": self.pid,
                "cost": cost.to_json() if cost is not None else None}


def first_heartbeat(run_dir: Path) -> JsonObject | None:
    """The heartbeat of the lowest rank that has a readable one (a run's liveness in `msmon runs`), None without
    any; the others are not read."""
    for path in layout.heartbeat_files(run_dir, ".json").values():  # in rank order
        try:
            return read_json_object(path)
        except (OSError, ValueError):
            continue
    return None


def read_heartbeats(run_dir: Path) -> dict[int, JsonObject]:
    """rank -> its heartbeat, for every readable ``heartbeats/rank_N.json`` and every rank of the machines' gathered
    ``heartbeats/node_K.json`` (a run over several machines); a rank in both: the one rewritten last. A half-written
    file is skipped."""
    found = read_rank_files(Path(run_dir) / layout.HEARTBEATS)
    for path in layout.machine_heartbeat_files(run_dir):
        try:
            gathered = read_json_object(path).get("ranks")
        except (OSError, ValueError):
            continue
        for key, beat in (gathered or {}).items() if isinstance(gathered, dict) else ():
            rank = int(key) if str(key).isdigit() else None
            if rank is not None and isinstance(beat, dict) and _alive(beat) >= _alive(found.get(rank)):
                found[rank] = beat
    return dict(sorted(found.items()))


def read_rank_files(directory: Path) -> dict[int, JsonObject]:
    """rank -> its heartbeat, for every readable ``rank_N.json`` in ``directory``."""
    found: dict[int, JsonObject] = {}
    for rank, path in layout.rank_files(directory, ".json").items():
        try:
            found[rank] = read_json_object(path)
        except (OSError, ValueError):
            continue
    return found


def _alive(beat: JsonObject | None) -> float:
    return as_number((beat or {}).get("alive")) or 0.0


def last_record(run_dir: Path) -> JsonObject | None:
    """The last complete record of the run's ``metrics.jsonl`` (None without one)."""
    try:
        return next(tail_rows(run_dir / layout.METRICS, RECORD_TAIL_BYTES), None)
    except OSError:
        return None


def with_record(beats: dict[int, JsonObject], record: JsonObject | None) -> dict[int, JsonObject]:
    """The heartbeats with the step of the last logged record as its rank's last ended step where the heartbeat is
    older: a heartbeat is rewritten once a second, so a process frozen (SIGSTOP) just after a log keeps one that
    names an earlier step; the records and heartbeats together say which step ended last."""
    step, wall = (record or {}).get("step"), as_number((record or {}).get("time"))
    rank = (record or {}).get("rank", 0)
    beat = beats.get(rank) if isinstance(rank, int) else None
    if (beat is None or not isinstance(step, int) or wall is None or step <= _int(beat.get("ended"))
            or wall <= (as_number(beat.get("ended_time")) or 0.0)):
        return beats
    begun = max(_int(beat.get("begun")), step)
    return {**beats, rank: {**beat, "ended": step, "ended_time": wall, "begun": begun,
                            "begun_time": beat.get("begun_time") if begun > step else wall}}


def _int(value: JsonValue) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def rank_state(rank: int, beat: JsonObject, now: float, stopped: bool = False) -> RankState:
    """The state of one rank (``stopped``: its process is known to be stopped, e.g. by SIGSTOP)."""
    alive = as_number(beat.get("alive"))
    state = RankState(rank, "", _int(beat.get("begun")), _int(beat.get("ended")), as_number(beat.get("begun_time")),
                      as_number(beat.get("ended_time")), None if alive is None else now - alive,
                      beat.get("host"), beat.get("pid"), beat)
    recorded = beat.get("state")
    if recorded not in LIVE and isinstance(recorded, str):
        state.state = recorded
    elif stopped:
        state.state = "stopped"
    elif state.alive_age_s is None or state.alive_age_s > UNRESPONSIVE_S:
        state.state = "not responding"
    elif not state.begun:
        state.state = "starting"
    else:
        state.state = f"in step {state.begun}" if state.begun > state.ended else f"after step {state.ended}"
    return state


def rank_states(beats: dict[int, JsonObject], now: float, *, world_size: int | None = None,
                stopped: frozenset[int] = frozenset()) -> list[RankState]:
    """Every rank in order; with ``world_size``, the ranks without a heartbeat too (state ``no heartbeat``)."""
    ranks = sorted(set(beats) | set(range(world_size or 0)) | stopped)
    return [rank_state(r, beats[r], now, r in stopped) if r in beats
            else RankState(r, "stopped" if r in stopped else "no heartbeat") for r in ranks]


def _ago(seconds: float) -> str:
    return format_duration(seconds, fine=True) + " ago"


def sentence(ranks: list[int], kind: str, detail: str = "") -> str:
    """One line of a diagnosis about ``ranks`` (``kind``: stopped, unresponsive, missing, not_begun, in_step,
    same_place)."""
    who, one = ranks_text(ranks), len(ranks) == 1
    be, have = ("is", "has") if one else ("are", "have")
    texts = {
        "stopped": f"{who} {be} stopped (the process is stopped: SIGSTOP or a debugger)",
        "unresponsive": f"{who} {be} not responding (process stopped or frozen: no heartbeat for {detail})",
        "missing": f"{who} {have} no heartbeat (not started, or on a machine that does not share the run directory)",
        "not_begun": f"{who} {have} not begun step {detail}",
        "in_step": f"{who} {be} still in step {detail}",
        "same_place": f"{who} {be} {detail}" if one else f"{who} {be} all {detail}, none ahead of the others: the "
        "hang is in the same place on every rank (a collective, the device, or the same code on all ranks)",
    }
    return texts[kind]


@dataclass
class Diagnosis:
    """Which ranks hold the run up (``culprits``) and one sentence per group of them (``how``: rank -> its line)."""

    lines: list[str]
    culprits: list[int]
    how: dict[int, str]


def diagnose(states: list[RankState], now: float) -> Diagnosis:
    """Why no step ends: ranks that do not respond, ranks that have not begun the step the others began, ranks
    still in a step the others ended; else every rank is in the same place (the step itself hangs)."""
    groups: dict[tuple[str, str], list[int]] = {}
    for s in states:
        kind = {"stopped": "stopped", "not responding": "unresponsive", "no heartbeat": "missing"}.get(s.state)
        if kind is not None:
            groups.setdefault((kind, ""), []).append(s.rank)
    live = [s for s in states if s.responsive and s.beat.get("state") in LIVE]
    top = max((s.begun for s in live), default=0)
    for s in live:
        if s.begun > s.ended:  # inside step s.begun: behind if another rank has ended it
            done = [x.ended_time for x in live if x.ended >= s.begun and x.ended_time is not None]
            if done:
                detail = f"{s.begun} (others ended it {_ago(now - min(done))})"
                groups.setdefault(("in_step", detail), []).append(s.rank)
        elif s.begun < top:  # between steps while another rank began the next one
            began = [x.begun_time for x in live if x.begun > s.begun and x.begun_time is not None]
            if began:
                detail = f"{s.begun + 1} (others began it {_ago(now - min(began))})"
                groups.setdefault(("not_begun", detail), []).append(s.rank)
    if not groups and live:
        last = live[0].ended
        where = f"in step {top}" if all(s.begun > s.ended for s in live) else f"between steps {last} and {last + 1}"
        groups[("same_place", where)] = [s.rank for s in live]
    lines, how = [], {}
    ages = {s.rank: s.alive_age_s for s in states if s.alive_age_s is not None}
    for (kind, detail), ranks in groups.items():
        if kind == "unresponsive":
            detail = format_duration(max((ages.get(r, math.inf) for r in ranks), default=None), fine=True)
        line = sentence(ranks, kind, detail)
        lines.append(line)
        how.update(dict.fromkeys(ranks, line))
    return Diagnosis(lines, sorted(how), how)


def stopped_here(beats: dict[int, JsonObject]) -> frozenset[int]:
    """The ranks whose process runs on this machine and is stopped (SIGSTOP, a debugger)."""
    return frozenset(rank for rank, beat in beats.items()
                     if procs.on_this_host(beat.get("host")) and procs.is_stopped(beat.get("pid")))


@dataclass
class RankReport:
    """Every rank of a run now, and, when no step has ended for ``idle_s`` > ``STILL_S``, why."""

    states: list[RankState]
    idle_s: float | None
    diagnosis: Diagnosis | None
    now: float


STILL_S = 10.0  # msmon status explains a run whose ranks have not ended a step for this long


def report(run_dir: Path, now: float | None = None) -> RankReport:
    """The per-rank table of ``msmon status`` (heartbeats of another machine's ranks only on a shared run directory)."""
    now = time.time() if now is None else now
    beats = with_record(read_heartbeats(run_dir), last_record(run_dir))
    states = rank_states(beats, now, stopped=stopped_here(beats))
    ends = [s.ended_time for s in states if s.ended_time is not None]
    idle = now - max(ends) if ends else None
    live = any(s.beat.get("state") in LIVE or not s.responsive for s in states)
    stuck = live and idle is not None and idle > STILL_S
    return RankReport(states, idle, diagnose(states, now) if stuck else None, now)
