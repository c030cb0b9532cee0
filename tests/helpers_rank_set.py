"""A run directory holding the heartbeats of many simulated ranks, written by the ranks' own writer
(msmon.engine.rank_heartbeat.RankHeartbeat), without training: 8 ranks a machine, all in one step, and some frozen
ranks whose heartbeat stopped a while ago (import, not a conftest; tests/test_rank_summary.py and
bench/bench_status_ranks.py).

    run_dir = rank_set(tmp_path / "save", ranks=1024, step=5000, frozen={517: 40.0})
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from msmon import layout
from msmon.engine.rank_heartbeat import RankHeartbeat
from msmon.engine.record import StepProgress
from msmon.util.atomic import rewrite_json

RANKS_PER_MACHINE = 8


def machine(rank: int) -> str:
    """The simulated host of a rank: ``node-0`` holds ranks 0-7, ``node-64`` ranks 512-519."""
    return f"node-{rank // RANKS_PER_MACHINE}"


def rank_set(save: Path, *, ranks: int, step: int, frozen: dict[int, float], project: str = "p",
             run: str = "big") -> Path:
    """``<save>/<project>/<run>`` of a running job: every rank in ``step`` (began it 0.5 s ago), the ranks of
    ``frozen`` (rank -> seconds) silent for that long, frozen after the step before. The others are alive for
    msmon.ops.ranks.UNRESPONSIVE_S: call it again to bring them to life again."""
    run_dir = save / project / run
    run_dir.mkdir(parents=True, exist_ok=True)
    now = time.time()
    (run_dir / layout.RUN_JSON).write_text(json.dumps({
        "project_name": project, "run_name": run, "status": "running", "start_time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "last_step": step - 1, "host": socket.gethostname(), "pid": 1, "alert_count": 0}))
    (run_dir / layout.METRICS).write_text(json.dumps({"step": step - 1, "time": now - 1.0, "rank": 0}) + "\n")
    for rank in range(ranks):
        silent = frozen.get(rank, 0.0)
        progress = StepProgress(total_steps=10 * step)
        ended = time.monotonic() - 1.0 - silent
        progress.last_step, progress.last_end_monotonic = step - 1, ended
        begun = (step - 1, ended - 1.0) if rank in frozen else (step, ended + 0.5)
        progress.begun_step, progress.begun_monotonic = begun
        beat = RankHeartbeat(run_dir, progress, rank, host=machine(rank))
        beat.path.parent.mkdir(parents=True, exist_ok=True)
        snapshot = beat.snapshot()
        snapshot["alive"] -= silent  # the heartbeat thread of a frozen process stopped rewriting it then
        rewrite_json(beat.path, snapshot)
    return run_dir
