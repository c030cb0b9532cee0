"""The watcher of ``msmon run``: every rank's heartbeat, judged in the parent process, which never waits in a
collective.

On every poll of the supervising loop (at most every ``health.stall.poll_s``) it reads ``heartbeats/rank_N.json``.
When no step has ended on any rank for the stall timeout (the ``StallDetector`` rule; this watcher is the
only live stall judgement), it says which ranks are behind and how,
captures the Python stacks of the ranks it started (``stacks/rank_N.txt``), names the innermost frame outside
msmon of the first stuck rank, and raises one alert. A non-finite loss or grad norm in the logged values of a rank
other than the writing one raises a ``nonfinite`` alert naming the rank (the writing rank judges its own records).
Alerts go to alerts.jsonl, the console, the webhook and the command hook; ``alert_count`` goes to run.json.

Several machines: the watcher of node 0 (or of the only node) owns the alerts for every heartbeat it can read;
ranks it cannot see (no shared run directory) are named as having no heartbeat. A watcher on another node that
reads heartbeats of other nodes (a shared run directory) leaves the alerts to node 0 and writes the stacks of its
own ranks when node 0 asks (``stacks/request.json``); one that reads only its own ranks judges them itself.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

import psutil

from msmon import layout
from msmon.anomaly import StopRequest
from msmon.compat import PipelineLayout
from msmon.config.schema import MonitorSettings
from msmon.foreign import ConfigValue
from msmon.health import HealthMonitor, make_sinks
from msmon.health.alert import Signal
from msmon.health.detectors.nonfinite import NonFiniteDetector
from msmon.health.profile_action import ProfileAction, profile_action_on
from msmon.health.rank_costs import RankCosts, RankReport
from msmon.ops.ranks import LIVE, diagnose, last_record, rank_states, read_heartbeats, with_record
from msmon.runner import stacks
from msmon.step_cost import StepCost
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject, JsonValue, read_json_object
from msmon.util.numbers import as_number
from msmon.util.ranks import ranks_text

logger = logging.getLogger("msmon")

LOSS_KEYS = ("loss", "loss_mean")
REQUEST = "request.json"  # in stacks/: node 0 asks the other nodes' watchers for their ranks' stacks


class RankWatcher:
    """Polled by the supervising loop with the ranks this machine runs; ``alert_count`` and ``close()`` at the end."""

    def __init__(self, run_dir: Path, settings: MonitorSettings, config: Mapping[str, ConfigValue] | None, *,
                 pipeline: PipelineLayout, writer_rank: int, node_rank: int | None) -> None:
        self.run_dir = Path(run_dir)
        self.health = settings.health
        self.enabled = bool(settings.enable_monitor and settings.use_callback and self.health.enabled)
        self.pipeline = pipeline
        self.writer_rank = writer_rank
        self.node_rank = node_rank or 0
        # action profile of slow_rank: the rank it names is profiled, its profile compared with the baseline
        profiles = ProfileAction(self.run_dir, self.health, frozenset({"slow_rank"}), baseline=False,
                                 min_free_mb=settings.disk.min_free_mb) if profile_action_on(self.health) else None
        self.monitor = HealthMonitor(self.health, config, sinks=make_sinks(settings, self.run_dir, None),
                                     profiles=profiles) if self.enabled else None
        self._detectors: dict[int, NonFiniteDetector] = {}
        self._fed: dict[int, int] = {}
        self._costs = RankCosts(self.health)
        self._started = time.time()
        self._next = 0.0
        self._served: JsonValue = None

    @property
    def alert_count(self) -> int:
        return self.monitor.alert_count if self.monitor is not None else 0

    @property
    def due(self) -> bool:
        """Whether a poll is due (at most every ``health.stall.poll_s``; never with health off)."""
        return self.monitor is not None and time.monotonic() >= self._next

    def poll(self, local: dict[int, psutil.Process]) -> StopRequest | None:
        """Read the heartbeats and judge them, when a poll is ``due`` (``local``: the live ranks of this machine by
        global rank); the stop an alert's action asks for (``stop`` or ``rollback``), kept until ``restart``."""
        if not self.due:
            return self.stop
        self._next = time.monotonic() + self.health.stall.poll_s
        beats = read_heartbeats(self.run_dir)
        owner = self.node_rank == 0 or not (set(beats) - set(local))
        if not owner:
            self._serve_requests(local)
            return self.stop
        if self.node_rank:  # a node alone with its ranks (no shared run directory)
            beats = {rank: beat for rank, beat in beats.items() if rank in local}
        if self.health.nonfinite.enabled:
            self._check_values(beats)
        if self.health.slow_rank.enabled or self.health.memory_growth.enabled:
            self._check_costs(beats)
        if self.monitor is not None and self.monitor.profiles is not None:  # an alert's profile, once finished
            now = time.time()
            self.monitor.check_profiles(max((s.ended or 0 for s in rank_states(beats, now)), default=0), now)
        if self.health.stall.enabled:
            self._check_stall(beats, local)
        return self.stop

    @property
    def stop(self) -> StopRequest | None:
        """The stop an alert of the current attempt asked for, or None."""
        return self.monitor.stop if self.monitor is not None else None

    def restart(self, forget_heartbeats: bool = True) -> None:
        """A new attempt (a resume, a restart from a checkpoint): the watch starts again as at the start of a run (no
        step has ended: the stall before the first step is judged by ``first_step_timeout_s``; a stall at a step
        reported before is reported again). ``forget_heartbeats``: the earlier attempt's heartbeats go (node 0 owns
        the run directory), else a dead rank's heartbeat would look like a hang."""
        if forget_heartbeats:
            for path in [*layout.heartbeat_files(self.run_dir, ".json").values(),
                         *layout.machine_heartbeat_files(self.run_dir)]:
                path.unlink(missing_ok=True)
        self._detectors.clear()
        self._fed.clear()
        self._costs.resumed()
        self._started = time.time()
        self._next = 0.0
        if self.monitor is not None:
            self.monitor.resumed()

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.close()

    # -- per-rank values --------------------------------------------------------------------------
    def _check_values(self, beats: dict[int, JsonObject]) -> None:
        found: list[tuple[int, Signal, JsonObject]] = []
        for rank, beat in sorted(beats.items()):
            if rank == self.writer_rank:
                continue  # the writing rank runs every detector on its own records
            records = [r for r in (beat.get("nonfinite"), beat.get("logged")) if isinstance(r, dict)]
            for record in sorted(records, key=lambda r: r.get("step") or 0):
                step = record.get("step")
                if not isinstance(step, int) or step <= self._fed.get(rank, 0):
                    continue
                self._fed[rank] = step
                if rank not in self.pipeline.loss_ranks:  # a pipeline stage without the loss: its grad norm only
                    record = {k: v for k, v in record.items() if k not in LOSS_KEYS}
                detector = self._detectors.setdefault(rank, NonFiniteDetector(self.health.nonfinite))
                signal = detector.observe(record)
                if signal is not None:
                    found.append((rank, signal, record))
        if found and self.monitor is not None:
            ranks = [rank for rank, _, _ in found]
            _, signal, record = found[0]
            message = f"{ranks_text(ranks)}: {signal.message}"
            values = {**signal.values, "rank": ranks[0], "ranks": ranks}
            self.monitor.report("nonfinite", Signal(signal.severity, message, values), record.get("step"),
                                record.get("time"))

    # -- step costs: memory growth, the slow rank ------------------------------------------------
    def _check_costs(self, beats: dict[int, JsonObject]) -> None:
        reports = {}
        for rank, beat in beats.items():
            listed = beat.get("costs")
            costs = listed if isinstance(listed, list) else []
            host, left = beat.get("host"), as_number(beat.get("host_available_mb"))
            reports[rank] = RankReport(tuple(c for c in map(StepCost.from_json, costs) if c is not None),
                                       host if isinstance(host, str) else None, left)
        for alert in self._costs.observe(reports):
            if self.monitor is not None:
                self.monitor.report(alert.detector, alert.signal, alert.step, alert.time)

    # -- the stall --------------------------------------------------------------------------------
    def _check_stall(self, beats: dict[int, JsonObject], local: dict[int, psutil.Process]) -> None:
        if self.monitor is None or any(beat.get("state") not in LIVE for beat in beats.values()):
            return  # a rank has ended: the run is ending, not hung
        now = time.time()
        if self._stall(self.monitor, beats, now) is None:
            return
        beats = with_record(beats, last_record(self.run_dir))  # the records may know a later step (read when due)
        stall = self._stall(self.monitor, beats, now)
        if stall is None:
            return
        idle, last_step, last_wall, seconds = stall
        detail, values = self._where(beats, local, now)
        self.monitor.check_stall(idle, last_step, last_wall, seconds, now, detail, values)

    def _stall(self, monitor: HealthMonitor, beats: dict[int, JsonObject],
               now: float) -> tuple[float, int | None, float | None, list[float]] | None:
        """(idle seconds, the last step that ended, when, recent step seconds) when the stall is due, else None."""
        states = rank_states(beats, now)
        ends = [(s.ended, s.ended_time) for s in states if s.ended and s.ended_time is not None]
        last_step = max((step for step, _ in ends), default=None)
        last_wall = max((wall for _, wall in ends), default=None)
        totals = [b["total_steps"] for b in beats.values() if isinstance(b.get("total_steps"), int)]
        if last_step is not None and totals and min(s.ended for s in states) >= max(totals):
            return None  # every planned step has ended: closing may take a while
        idle = now - (last_wall if last_wall is not None else self._started)
        recent = self.health.stall.recent
        seconds = sorted(s for b in beats.values() for s in (b.get("step_seconds") or [])[-recent:])
        if monitor.stall_due(idle, last_step, seconds) is None:
            return None
        return idle, last_step, last_wall, seconds

    def _where(self, beats: dict[int, JsonObject], local: dict[int, psutil.Process],
               now: float) -> tuple[str, JsonObject]:
        """The diagnosis sentence and values: the ranks behind, and the frame of the first one with a stack."""
        stopped = frozenset(rank for rank, proc in local.items() if _stopped(proc))
        world = None if self.node_rank else self.pipeline.world_size
        diagnosis = diagnose(rank_states(beats, now, world_size=world, stopped=stopped), now)
        header = f"msmon: stall seen at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
        remote = self._request_stacks(header, [r for r in diagnosis.culprits if r not in local])
        texts = stacks.collect(self.run_dir, {**remote, **stacks.signal_ranks(self.run_dir, local, header)})
        detail = "; ".join(diagnosis.lines) + "."
        values: JsonObject = {"ranks": {str(r): line for r, line in diagnosis.how.items()},
                                  "stuck_ranks": diagnosis.culprits}
        frames = {rank: stacks.innermost_frame(text, (beats.get(rank) or {}).get("thread"))
                  for rank, text in sorted(texts.items())}
        stuck = next((rank for rank in diagnosis.culprits if frames.get(rank) is not None), None)
        if stuck is not None:
            detail += f" Rank {stuck} is at {frames[stuck]} (stack: stacks/rank_{stuck}.txt)."
            values.update(frame=str(frames[stuck]), stack_file=f"stacks/rank_{stuck}.txt")
        waiting = next((rank for rank, frame in frames.items() if frame and rank not in diagnosis.culprits), None)
        if waiting is not None:
            detail += f" The others wait at {frames[waiting]} (rank {waiting})."
        if texts:
            values["stacks"] = sorted(texts)
            detail += f" Stacks of {ranks_text(sorted(texts))} in stacks/."
        return detail, values

    # -- stacks of other machines -----------------------------------------------------------------
    def _request_stacks(self, header: str, ranks: list[int]) -> dict[int, int]:
        """Ask the other nodes' watchers for the stacks of ``ranks`` (remote ones); rank -> its file's size now."""
        if not ranks:
            return {}
        sizes = {}
        for rank in ranks:
            try:
                sizes[rank] = layout.rank_stacks(self.run_dir, rank).stat().st_size
            except OSError:
                sizes[rank] = 0
        try:
            atomic_write_json(self.run_dir / layout.STACKS / REQUEST,
                              {"id": time.time(), "header": header, "ranks": ranks}, fsync=False)
        except OSError:
            return {}
        return sizes

    def _serve_requests(self, local: dict[int, psutil.Process]) -> None:
        try:
            request = read_json_object(self.run_dir / layout.STACKS / REQUEST)
        except (OSError, ValueError):
            request = {}
        number = request.get("id")
        if self._served is None:  # the first look: a request already there is of an earlier stall or run
            self._served = number
            return
        if number is None or number == self._served:
            return
        self._served = number
        wanted = {rank: proc for rank, proc in local.items() if rank in (request.get("ranks") or [])}
        if wanted:
            stacks.signal_ranks(self.run_dir, wanted, str(request.get("header") or "msmon: stall"))


def _stopped(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False
