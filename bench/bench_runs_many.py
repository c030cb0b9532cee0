"""Time of `msmon runs SAVE_DIR` (a fresh child process, as a user types it) over 50, 200 and 500 run directories,
each a copy of one real run directory (``--run``: a finished `msmon run`, its logs and checkpoints included; by
default the quickstart is trained once first), a tenth of them marked running with a live heartbeat. Prints the
median of ``--repeat`` calls, the lines printed, and the time of msmon.ops.runs.list_runs in this process.
Usage: python bench/bench_runs_many.py [--runs 50,200,500] [--repeat 3] [--run RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from msmon import layout  # noqa: E402
from msmon.ops.runs import list_runs  # noqa: E402


def msmon(*args: str, cwd: Path | None = None) -> tuple[float, str]:
    """Seconds of ``python -m msmon ARGS`` and what it printed (an error stops the benchmark)."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    begin = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "msmon", *args], capture_output=True, text=True, env=env,
                          check=True, cwd=cwd)
    return time.perf_counter() - begin, done.stdout


def trained_run(where: Path) -> Path:
    """One finished quickstart run directory."""
    msmon("run", "quickstart", f"monitor_config.save_dir={where}", cwd=where)
    return next(path.parent for path in where.glob("*/*/run.json"))


def save_dir_of(source: Path, root: Path, count: int) -> Path:
    """``count`` copies of ``source`` in ``root/<project>/run_i``; every tenth one running (its heartbeat alive)."""
    for index in range(count):
        run_dir = root / f"project_{index % 5}" / f"run_{index:04d}"
        shutil.copytree(source, run_dir)
        info = json.loads((run_dir / layout.RUN_JSON).read_text())
        info["run_name"] = run_dir.name
        if index % 10 == 0:
            info.update(status="running", pid=os.getpid(), host=os.uname().nodename)
            info.pop("end_time", None)
            beat = layout.rank_heartbeat(run_dir, 0)
            data = json.loads(beat.read_text())
            data.update(alive=time.time(), state="training", pid=os.getpid())
            beat.write_text(json.dumps(data))
        (run_dir / layout.RUN_JSON).write_text(json.dumps(info))
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="50,200,500")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--run", type=Path, help="a finished run directory to copy (default: train the quickstart)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        source = options.run or trained_run(Path(tmp))
        files = sum(1 for path in source.rglob("*") if path.is_file())
        size = sum(path.stat().st_size for path in source.rglob("*") if path.is_file()) / 2**20
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; each run: {files} files, "
              f"{size:.1f} MiB")
        print(f"{'runs':>5} {'msmon runs s':>13} {'list_runs s':>12} {'lines':>6}")
        for count in (int(n) for n in options.runs.split(",")):
            root = save_dir_of(source, Path(tmp) / f"save_{count}", count)
            calls, inside, out = [], [], ""
            for _ in range(options.repeat):
                seconds, out = msmon("runs", str(root))
                calls.append(seconds)
                begin = time.perf_counter()
                list_runs(root)
                inside.append(time.perf_counter() - begin)
            print(f"{count:>5} {statistics.median(calls):>13.2f} {statistics.median(inside):>12.2f} "
                  f"{len(out.splitlines()):>6}", flush=True)
            shutil.rmtree(root)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
