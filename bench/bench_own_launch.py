"""What `msmon run CONFIG -- COMMAND` adds before training starts: the time from the command to the first logged step,
the user's script alone vs the same script under msmon, measured in alternating pairs in one invocation.

    .venv/bin/python bench/bench_own_launch.py [--pairs 5] [--steps 20]

The script is tests/launches/train_with_mindformers.py (MindFormerConfig(path), the context, Trainer(config).train()).
Alone it trains the file `msmon export CONFIG` writes (mindformers.yaml: what msmon hands mindformers), with msmon's
CPU train-step wrapper registered first (the quickstart names it: the stock one's overflow check has no CPU kernel;
under msmon the hook registers it); under msmon it gets the same file in place of CONFIG. "First logged step": the
moment mindformers' MFLossMonitor prints step 1 on the process's output (the same line for both); the process group
is then stopped. Target: msmon adds at most 1 s (median of the pairs' differences).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "launches" / "train_with_mindformers.py"
FIRST_STEP = re.compile(r"step:\[\s*1/")
TARGET_S = 1.0
ALONE = ("import runpy, sys; from msmon.runner.cpu_support import register_cpu_support; register_cpu_support(); "
         "sys.argv = [{script!r}, '--config', {config!r}]; runpy.run_path({script!r}, run_name='__main__')")
DEADLINE_S = 600.0

sys.path.insert(0, str(REPO / "tests"))
from helpers_training import write_quickstart_config  # noqa: E402 - the tests' own config writer


def time_to_first_step(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds from starting ``argv`` to mindformers' line for step 1 (then its process group is stopped)."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,  # noqa: S603
                            start_new_session=True, text=True, errors="replace")
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if FIRST_STEP.search(line):
                return time.monotonic() - started
            if time.monotonic() - started > DEADLINE_S:
                break
        raise SystemExit(f"no step 1 line from {' '.join(argv[:4])} ... (exit {proc.poll()})")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:  # it ended by itself
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "MSMON_WORKER_SPEC"}
    with tempfile.TemporaryDirectory(prefix="msmon-bench-launch-") as tmp:
        base = Path(tmp)
        config = write_quickstart_config(base, steps=args.steps, run_name="bench", log_interval=1)
        exported = base / "alone.yaml"
        subprocess.run([sys.executable, "-m", "msmon", "export", str(config), "-o", str(exported)], cwd=base,  # noqa: S603
                       env=env, check=True, capture_output=True)
        alone = [sys.executable, "-c", ALONE.format(script=str(SCRIPT), config=str(exported))]
        rows = []
        for pair in range(args.pairs):
            with_msmon = [sys.executable, "-m", "msmon", "run", str(config), f"monitor_config.run_name=bench_{pair}",
                          "--plain", "--", sys.executable, str(SCRIPT), "--config", str(config)]
            order = [("alone", alone), ("msmon", with_msmon)]
            times = {name: time_to_first_step(argv, base, env) for name, argv in (order if pair % 2 == 0
                                                                                   else order[::-1])}
            rows.append(times)
            print(f"pair {pair + 1}: alone {times['alone']:.2f} s, under msmon {times['msmon']:.2f} s, "
                  f"added {times['msmon'] - times['alone']:+.2f} s", flush=True)
    differences = [r["msmon"] - r["alone"] for r in rows]
    added = statistics.median(differences)
    alone_s = statistics.median(r["alone"] for r in rows)
    verdict = "ok" if added <= TARGET_S else "MISSED"
    print(f"first logged step: alone {alone_s:.2f} s (median), msmon adds {added:+.2f} s (median of {len(rows)} "
          f"pairs; spread {min(differences):+.2f}..{max(differences):+.2f} s), target <= {TARGET_S:g} s: {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
