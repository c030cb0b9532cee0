"""Time and peak memory of `msmon report` and `msmon replay` on long runs (#47): the cost curve with the run's length.

Builds a synthetic run of each size in the format `msmon run` writes (tests/helpers_long_run.py: a quickstart run's
metrics at full float precision, about 580 bytes a record, with a loss spike, a NaN loss, a grad-norm explosion and a
throughput drop injected), then runs each command once in a child process and reports its wall time, its CPU time
(user + system: what a busy machine stretches least) and its peak resident memory (ru_maxrss of that child, from
os.wait4), with the load average before each command. Usage:
python bench/bench_long_run.py [--sizes 100000,300000,1000000] [--dir DIR (keep and reuse the runs)]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers_long_run import long_run  # noqa: E402

COMMANDS = ("report", "replay")


def measure(command: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit code) of ``command`` run to its end in a child process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode


def run_of(size: int, root: Path) -> Path:
    """The run directory of ``size`` records below ``root``, built when missing."""
    run_dir = root / "bench" / f"long_{size}"
    if not (run_dir / "metrics.jsonl").is_file():
        long_run(run_dir, size)
    return run_dir


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--dir", type=Path, help="keep the runs here (reused when present)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="msmon-bench-long-") as scratch:
        root = args.dir or Path(scratch)
        print(f"{'records':>9} {'file MB':>8} {'command':8} {'wall s':>7} {'CPU s':>6} {'peak MiB':>9} {'load':>5}")
        for size in (int(s) for s in args.sizes.split(",")):
            run_dir = run_of(size, root)
            megabytes = (run_dir / "metrics.jsonl").stat().st_size / 1e6
            for name in COMMANDS:
                load = os.getloadavg()[0]
                wall, cpu, peak, code = measure([sys.executable, "-m", "msmon", name, str(run_dir)])
                if code:
                    raise SystemExit(f"msmon {name} {run_dir} exited {code}")
                print(f"{size:>9} {megabytes:>8.0f} {name:8} {wall:>7.1f} {cpu:>6.1f} {peak:>9.0f} {load:>5.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
