"""The heartbeats at scale: 8, 64, 256 and 1,024 simulated ranks (8 a machine) at the real cadence, no training, both
ways msmon can lay them out, side by side in one run:

- ``per-rank``: every rank rewrites ``heartbeats/rank_N.json`` on the shared run directory every second (msmon's
  layout on one machine, and before round four on several);
- ``per-machine``: the ranks rewrite their files on their machine's own disk and each machine's ``msmon run``
  gathers them into ``heartbeats/node_K.json`` once a second (msmon.runner.machine_beats; a run over several
  machines).

A child process runs the ranks (msmon's own ``RankHeartbeat``, one thread each, and one ``MachineBeats`` per
machine) and counts the renames and appends on the shared directory; this process is node 0's ``msmon run``: its
real ``RankWatcher`` polls every ``health.stall.poll_s`` (0.5 s) and its CPU time in the polls is measured. Two
seconds in, one rank freezes (its heartbeat stops) while every rank is in the same step; with a stall timeout of
``--timeout`` s the bench prints when the stall alert came and whether it named the frozen rank, and the time of
``msmon status`` (its summary line and rank reading, in this process). Usage:
python bench/bench_heartbeats.py [--ranks 8,64,256,1024] [--seconds 30] [--timeout 15]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from msmon import layout  # noqa: E402
from msmon.compat import PipelineLayout  # noqa: E402
from msmon.config.coerce import build  # noqa: E402
from msmon.config.schema import MonitorSettings  # noqa: E402
from msmon.engine.rank_heartbeat import RankHeartbeat  # noqa: E402
from msmon.engine.record import StepProgress  # noqa: E402
from msmon.ops import ranks as ranks_module  # noqa: E402
from msmon.ops.rank_summary import summarize  # noqa: E402
from msmon.ops.runs import rank_status  # noqa: E402
from msmon.runner.machine_beats import MachineBeats  # noqa: E402
from msmon.runner.rank_watch import RankWatcher  # noqa: E402

PER_MACHINE = 8
FREEZE_AT_S = 2.0


def frozen_rank(count: int) -> int:
    return count // 2 + 5 if count > 8 else 1


def ranks_child(run_dir: Path, count: int, seconds: float, gathered: bool) -> None:
    """The simulated ranks (and machines' gatherers): print the file operations on the shared directory as JSON."""
    shared = str(run_dir)
    counts = {"renames": 0, "appends": 0}
    real_replace = os.replace

    def counting_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if str(dst).startswith(shared):
            counts["renames"] += 1
        real_replace(src, dst)

    os.replace = counting_replace  # type: ignore[assignment]
    machines = count // PER_MACHINE if count >= PER_MACHINE else 1
    local = {m: layout.local_heartbeats(run_dir, m) if gathered else None for m in range(machines)}
    beats = []
    for rank in range(count):
        progress = StepProgress(total_steps=100_000)
        progress.last_step, progress.last_end_monotonic = 4999, time.monotonic()
        progress.begun_step, progress.begun_monotonic = 5000, time.monotonic()
        machine = min(rank // PER_MACHINE, machines - 1)
        beat = RankHeartbeat(run_dir, progress, rank, host=f"node-{machine}", directory=local[machine])
        beat.start()
        beats.append(beat)
    gatherers = [MachineBeats(run_dir, m, path) for m, path in local.items() if path is not None]
    started = time.monotonic()
    frozen = beats[frozen_rank(count)]
    while time.monotonic() - started < seconds:
        if frozen is not None and time.monotonic() - started >= FREEZE_AT_S:
            frozen._stop.set()  # the process froze: its heartbeat thread stops, no last write
            frozen = None
        for gatherer in gatherers:
            gatherer.gather()
        time.sleep(0.1)
    print(json.dumps({**counts, "seconds": time.monotonic() - started}), flush=True)
    os._exit(0)  # the heartbeat threads of the simulated ranks are daemons


def watch(run_dir: Path, count: int, seconds: float, timeout_s: float) -> dict[str, float | str | None]:
    """Node 0's watcher over the run for ``seconds``: CPU share, files read per poll, when the stall alert came."""
    settings, problems = build(MonitorSettings, {
        "project_name": "p", "run_name": "r", "save_dir": str(run_dir.parent.parent),
        "health": {"stall": {"timeout_s": timeout_s}}}, "monitor_config")
    assert not problems, problems
    watcher = RankWatcher(run_dir, settings, None, pipeline=PipelineLayout(count), writer_rank=0, node_rank=0)
    reads = [0]
    real_read = ranks_module.read_json_object

    def counting_read(path: Path) -> dict:
        reads[0] += 1
        return real_read(path)

    ranks_module.read_json_object = counting_read  # type: ignore[assignment]
    cpu = polls = 0
    alert_at, named = None, None
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if watcher.due:
            before = time.process_time()
            watcher.poll({})
            cpu += time.process_time() - before
            polls += 1
            if alert_at is None and watcher.alert_count:
                alert_at = time.monotonic() - started
                line = (run_dir / layout.ALERTS).read_text().splitlines()[0]
                named = f"rank {frozen_rank(count)} " in json.loads(line)["message"]
        time.sleep(0.02)
    ranks_module.read_json_object = real_read  # type: ignore[assignment]
    watcher.close()
    elapsed = time.monotonic() - started
    begin = time.perf_counter()
    line = summarize(rank_status(run_dir)[1].states).line()
    status_s = time.perf_counter() - begin
    return {"cpu_share": cpu / elapsed, "reads_per_poll": reads[0] / max(1, polls), "alert_s": alert_at,
            "named": named, "status_s": status_s, "summary": line}


def measure(count: int, seconds: float, timeout_s: float, gathered: bool) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "p" / "r"
        (run_dir / layout.HEARTBEATS).mkdir(parents=True)
        (run_dir / layout.RUN_JSON).write_text(json.dumps({"run_name": "r", "status": "running"}))
        child = subprocess.Popen(
            [sys.executable, __file__, "--child", str(run_dir), str(count), str(seconds), str(int(gathered))],
            stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        while not any((run_dir / layout.HEARTBEATS).iterdir()):
            time.sleep(0.05)
        result: dict[str, object] = {}
        thread = threading.Thread(target=lambda: result.update(watch(run_dir, count, seconds - 1.0, timeout_s)))
        thread.start()
        out, _ = child.communicate(timeout=seconds + 120)
        thread.join()
        ops = json.loads(out.strip().splitlines()[-1])
        result["renames_per_s"] = ops["renames"] / ops["seconds"]
        return result


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        ranks_child(Path(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,64,256,1024")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=15.0, help="the stall timeout (s)")
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {options.seconds:.0f} s each, rank "
          f"frozen at {FREEZE_AT_S:.0f} s, stall timeout {options.timeout:.0f} s")
    print(f"{'ranks':>6} {'layout':>12} {'renames/s':>10} {'reads/poll':>11} {'watcher CPU':>12} {'alert at s':>11} "
          f"{'named':>6} {'status s':>9}  summary")
    for count in (int(n) for n in options.ranks.split(",")):
        for gathered in (False, True):
            row = measure(count, options.seconds, options.timeout, gathered)
            alert = row["alert_s"]
            print(f"{count:>6} {'per-machine' if gathered else 'per-rank':>12} {row['renames_per_s']:>10.0f} "
                  f"{row['reads_per_poll']:>11.0f} {row['cpu_share']:>11.1%} "
                  f"{'-' if alert is None else format(alert, '.1f'):>11} {str(row['named']):>6} "
                  f"{row['status_s']:>9.3f}  {row['summary']}", flush=True)


if __name__ == "__main__":
    main()
