"""Time and peak memory of `msmon report`, `replay`, `compare`, `status` and `runs` on long runs (#47): the cost
curve with the run's length.

Builds a synthetic run of each size in the format `msmon run` writes (tests/helpers_long_run.py: a quickstart run's
metrics at full float precision, about 580 bytes a record, with a loss spike, a NaN loss, a grad-norm explosion and a
throughput drop injected) in a save_dir of its own, with a second run beside it whose metrics.jsonl is a hard link to
the first (what `compare` reads: two runs of that length), then runs each command once in a child process and reports
its wall time, its CPU time (user + system of it and the processes it waited for: what a busy machine stretches
least) and its peak resident memory (ru_maxrss, from os.wait4), with the load average before each command and the
file's bytes per record. Usage:
python bench/bench_long_run.py [--sizes 100000,300000,1000000] [--commands report,replay,...] [--dir DIR (keep and
reuse the runs)]
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

COMMANDS = ("report", "replay", "compare", "status", "runs")


def measure(command: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MiB, exit code) of ``command`` run to its end in a child process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, child.returncode


def decoder() -> str:
    """Which decoder msmon's JSON Lines reader uses here (orjson when installed)."""
    try:
        import orjson
    except ImportError:
        return "the json module (orjson not installed)"
    return f"orjson {orjson.__version__}"


def run_of(size: int, root: Path) -> Path:
    """The run directory of ``size`` records below ``root`` (in its own save_dir, with its twin for ``compare``),
    built when missing."""
    run_dir = root / f"save_{size}" / "bench" / f"long_{size}"
    if not (run_dir / "metrics.jsonl").is_file():
        long_run(run_dir, size)
    twin = twin_of(run_dir)
    if not (twin / "metrics.jsonl").is_file():
        twin.mkdir(parents=True, exist_ok=True)
        os.link(run_dir / "metrics.jsonl", twin / "metrics.jsonl")
        (twin / "run.json").write_text((run_dir / "run.json").read_text().replace(run_dir.name, twin.name))
    return run_dir


def twin_of(run_dir: Path) -> Path:
    """The run beside ``run_dir`` that shares its records."""
    return run_dir.with_name(run_dir.name + "_twin")


def arguments(name: str, run_dir: Path) -> list[str]:
    """The command line arguments of ``msmon name`` on ``run_dir``."""
    if name == "compare":
        return [str(run_dir), str(twin_of(run_dir))]
    if name == "runs":
        return [str(run_dir.parents[1])]
    return [str(run_dir)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="100000,300000,1000000")
    parser.add_argument("--commands", default=",".join(COMMANDS))
    parser.add_argument("--dir", type=Path, help="keep the runs here (reused when present)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="msmon-bench-long-") as scratch:
        root = args.dir or Path(scratch)
        print(f"JSON Lines decoded by {decoder()}")
        print(f"{'records':>9} {'file MB':>8} {'B/rec':>6} {'command':8} {'wall s':>7} {'CPU s':>6} {'peak MiB':>9} "
              f"{'load':>5}")
        for size in (int(s) for s in args.sizes.split(",")):
            run_dir = run_of(size, root)
            size_bytes = (run_dir / "metrics.jsonl").stat().st_size
            for name in args.commands.split(","):
                load = os.getloadavg()[0]
                wall, cpu, peak, code = measure([sys.executable, "-m", "msmon", name, *arguments(name, run_dir)])
                if code:
                    raise SystemExit(f"msmon {name} {run_dir} exited {code}")
                print(f"{size:>9} {size_bytes / 1e6:>8.0f} {size_bytes / size:>6.0f} {name:8} {wall:>7.1f} {cpu:>6.1f} "
                      f"{peak:>9.0f} {load:>5.1f}", flush=True)


if __name__ == "__main__":
    main()
