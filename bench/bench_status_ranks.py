"""Time of `msmon status RUN` and `msmon runs SAVE_DIR` (each a fresh child process, as a user types it) over a run
of 8, 64, 256 and 1,024 simulated ranks, 8 a machine, one of them frozen for 40 s: heartbeats written by the
ranks' own writer (tests/helpers_rank_set.py), no training. Prints the median of ``--repeat`` calls and the lines
each printed (the summary first, the frozen rank alone in the table), the time of what `msmon status` does past
its start (msmon.ops.runs.rank_status and the summary, in this process), and the machine's load average (the
child's time is mostly the interpreter's start and msmon's import, which a busy machine stretches). Usage:
python bench/bench_status_ranks.py [--ranks 8,64,256,1024] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers_rank_set import rank_set  # noqa: E402

from msmon.ops.rank_summary import summarize  # noqa: E402
from msmon.ops.runs import rank_status  # noqa: E402


def timed(*args: str) -> tuple[float, str]:
    """Seconds of ``python -m msmon ARGS`` and what it printed (an error stops the benchmark)."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    begin = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "msmon", *args], capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - begin, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,64,256,1024")
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'ranks':>6} {'status s':>9} {'runs s':>7} {'read+summary s':>15} {'status lines':>13}  summary")
    with tempfile.TemporaryDirectory() as tmp:
        for count in (int(n) for n in options.ranks.split(",")):
            save = Path(tmp) / f"r{count}"
            frozen = {count // 2 + 5 if count > 8 else 1: 40.0}
            status, runs, inside, out = [], [], [], ""
            for _ in range(options.repeat):  # the heartbeats rewritten before each call, as live ranks keep them
                run_dir = rank_set(save, ranks=count, step=5000, frozen=frozen)
                seconds, out = timed("status", str(run_dir))
                status.append(seconds)
                rank_set(save, ranks=count, step=5000, frozen=frozen)
                runs.append(timed("runs", str(save))[0])
                begin = time.perf_counter()
                summarize(rank_status(run_dir)[1].states).line()
                inside.append(time.perf_counter() - begin)
            lines = out.strip().splitlines()
            print(f"{count:>6} {statistics.median(status):>9.2f} {statistics.median(runs):>7.2f} "
                  f"{statistics.median(inside):>15.3f} {len(lines):>13}  {lines[1]}", flush=True)
    start, _ = timed("--help")
    print(f"(a bare `msmon --help` takes {start:.2f} s here: the interpreter and msmon's import; load average "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
