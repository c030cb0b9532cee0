"""``heartbeats/rank_N.json``: one rank's liveness, rewritten every second by its own thread.

It says which step the rank began last and when, which step it ended last and when, and ``alive`` (unix time),
refreshed by this thread whatever the training thread does: a watcher tells a rank that waits in a step (alive,
in the step) from a frozen one (``alive`` stops). It also keeps the rank's last logged loss / grad_norm /
overflow and the first record of its latest non-finite episode (the step a divergence began, even when the
parent reads the file only later; a session listener, on the writer thread): the ``msmon run`` parent judges
them with the non-finite detector (docs/health.md, "Distributed runs"). It carries the rank's recent step costs
(``msmon.step_cost.StepCost``: time inside and outside the step, memory) and this host's memory limit and what is
left of it, and appends each new cost to ``heartbeats/rank_N.jsonl`` (the slow-rank and memory-growth detectors,
live in the parent and in ``msmon replay``). The training thread writes nothing here; a write (compact JSON, one
fixed temporary file, no fsync) costs this thread about 0.1 ms a second. ``host`` names the rank's machine:
``msmon status`` and ``msmon runs`` count the machines and name a wrong rank's. In a run over several machines the
file is rewritten on the machine's own disk and that machine's ``msmon run`` gathers its ranks' files into one
(msmon.runner.machine_beats): a shared run directory sees one rewrite a second per machine, not per rank.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

from msmon import layout
from msmon.config.metrics import nonfinite_values
from msmon.engine.record import StepProgress
from msmon.errors import describe
from msmon.listener import Listener
from msmon.util.atomic import rewrite_json
from msmon.util.jsonfiles import JsonObject
from msmon.util.memory import host_memory

logger = logging.getLogger("msmon")

HEARTBEAT_S = 1.0  # how often the file is rewritten
VALUE_KEYS = ("step", "time", "loss", "grad_norm", "overflow", "loss_mean")
RECENT_COSTS = 16  # the step costs a heartbeat carries (the parent reads it every poll_s; the file keeps them all)


class RankHeartbeat(Listener):
    """The heartbeat file of one rank: ``start()``, ``on_record`` (listener), ``stop(state)``."""

    def __init__(self, run_dir: Path, progress: StepProgress, rank: int, *, log_interval: int = 1,
                 interval_s: float = HEARTBEAT_S, host: str | None = None, directory: Path | None = None) -> None:
        """``host``: the machine the file names (``msmon status`` groups ranks by it), this one's name unless a
        benchmark or test simulates ranks of other machines; ``directory``: where the liveness file is rewritten
        (a run over several machines: this machine's own disk, gathered by its ``msmon run``; None: the run
        directory's ``heartbeats/``)."""
        self.path = Path(directory) / f"rank_{rank}.json" if directory else layout.rank_heartbeat(Path(run_dir), rank)
        self.costs_path = layout.rank_costs(Path(run_dir), rank)
        self._costs_written = 0
        self._host_memory: tuple[float | None, float | None] = (None, None)  # (limit, left) MiB, read with costs
        self._progress = progress
        self._rank = rank
        self._log_interval = log_interval
        self._interval = interval_s
        self._host = host or socket.gethostname()
        self._logged: JsonObject | None = None
        self._nonfinite: JsonObject | None = None
        self._diverged = False  # the last logged record was non-finite
        self._state = "starting"
        self._warned = False
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="msmon-heartbeat", daemon=True)

    def start(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self._warn(exc)
        self.write()
        self._thread.start()

    def stop(self, state: str) -> None:
        """The last write: ``state`` says how the rank ended (``completed``, ``failed``, ``interrupted``, ...)."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(2 * self._interval)
        self._state = state
        self.write()

    # -- session listener (writer thread) ---------------------------------------------------------
    def on_record(self, record: JsonObject) -> None:
        values = {key: record[key] for key in VALUE_KEYS if key in record}
        self._logged = values
        bad = bool(nonfinite_values(values))
        if bad and not self._diverged:
            self._nonfinite = values
        self._diverged = bad

    def close(self) -> None:
        """Listener close: the session stops the heartbeat itself, after the writer."""

    # -- the heartbeat thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.write()

    def snapshot(self) -> JsonObject:
        p = self._progress
        state = self._state if self._state != "starting" or not p.begun_step else "training"
        costs, _ = p.costs_since(max(0, p.cost_count - RECENT_COSTS))
        limit, available = self._host_memory
        return {
            "rank": self._rank, "pid": os.getpid(), "host": self._host, "thread": p.training_thread,
            "state": state, "alive": time.time(),
            "begun": p.begun_step, "begun_time": p.wall(p.begun_monotonic) if p.begun_step else None,
            "ended": p.last_step, "ended_time": p.last_end_wall, "total_steps": p.total_steps,
            "data_batches": p.data_batches,
            "step_seconds": [round(s, 6) for s in p.steady_step_seconds(self._log_interval)],
            "logged": self._logged, "nonfinite": self._nonfinite,
            "costs": [cost.to_json() for cost in costs],
            "host_limit_mb": limit, "host_available_mb": available,
        }

    def write(self) -> None:
        with self._lock:  # the thread and the last write at stop never interleave
            try:
                self._append_costs()
                rewrite_json(self.path, self.snapshot())
            except OSError as exc:  # a monitor never breaks training
                self._warn(exc)

    def _append_costs(self) -> None:
        """The step costs logged since the last write, appended to ``heartbeats/rank_N.jsonl``."""
        costs, self._costs_written = self._progress.costs_since(self._costs_written)
        if costs:
            limit, left = host_memory()
            self._host_memory = round(limit, 1), round(left, 1)
            with self.costs_path.open("a", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(cost.to_json(), separators=(",", ":")) + "\n" for cost in costs))

    def _warn(self, exc: OSError) -> None:
        if not self._warned:
            self._warned = True
            logger.warning("msmon: cannot write %s: %s (training continues)", self.path, describe(exc))
