"""CPU of each process of `msmon replay` on a long run (#47), this checkout against another side by side.

A file over 64 MB is replayed by two processes (msmon.health.replay_share): the command's own (the first share of the
detectors) and one it spawns (the second share). Their wall time on an idle 2-core machine is about the larger of
the two shares' CPU time, so this prints each one's CPU time (user + system: getrusage of the command for itself and
for the process it waited for) per record, the wall time and the load average before and after, and whether the
alerts (`--json`) are the same as the first checkout's. Rounds alternate the checkouts, so a load that changes hits
both. Usage:
python bench/bench_replay_shares.py [--records 1000000] [--dir DIR (keep and reuse the run)] [--before CHECKOUT
(another commit's tree, e.g. from `git archive COMMIT | tar -x -C DIR`)] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_long_run import ROOT, run_of

CHILD = """
import resource, runpy, sys
sys.argv = ["msmon", "replay", sys.argv[1], "--json"]
try:
    runpy.run_module("msmon", run_name="__main__", alter_sys=True)  # as `python -m msmon`: the spawn imports it too
except SystemExit:
    pass
own, waited = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"CPU {own.ru_utime + own.ru_stime} {waited.ru_utime + waited.ru_stime}", file=sys.stderr)
"""


def replay_cpu(checkout: Path, run_dir: Path) -> tuple[float, float, float, str]:
    """(wall s, the command's CPU s, the spawned share's CPU s, the alerts as JSON) of one replay with ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(run_dir)], capture_output=True, text=True, env=env,
                          cwd=checkout, check=True)
    wall = time.perf_counter() - start
    _, own, waited = done.stderr.strip().splitlines()[-1].split()
    return wall, float(own), float(waited), done.stdout


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, help="keep the run here (reused when present)")
    parser.add_argument("--before", type=Path, help="another checkout to compare with this one")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    checkouts = {"before": args.before, "this": ROOT} if args.before else {"this": ROOT}
    with tempfile.TemporaryDirectory(prefix="msmon-bench-shares-") as scratch:
        run_dir = run_of(args.records, args.dir or Path(scratch))
        print(f"{'checkout':8} {'wall s':>7} {'first CPU s':>11} {'us/rec':>7} {'second CPU s':>12} {'us/rec':>7} "
              f"{'load':>9}  alerts")
        first_alerts: str | None = None
        for _ in range(args.rounds):
            for name, checkout in checkouts.items():
                load = os.getloadavg()[0]
                wall, own, waited, alerts = replay_cpu(checkout, run_dir)
                first_alerts = alerts if first_alerts is None else first_alerts
                same = "same" if alerts == first_alerts else "DIFFERENT"
                per = 1e6 / args.records
                print(f"{name:8} {wall:>7.1f} {own:>11.2f} {own * per:>7.1f} {waited:>12.2f} {waited * per:>7.1f} "
                      f"{load:>4.1f}-{os.getloadavg()[0]:<4.1f} {same}", flush=True)


if __name__ == "__main__":
    main()
