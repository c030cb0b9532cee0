"""What a rollback costs in wall time beside a plain ``--resume`` of the same run, on both model paths (CPU).

    .venv/bin/python bench/bench_rollback.py [--rounds 2] [--models legacy,mcore]

Each round and model trains, side by side on the same data (tests/helpers_rollback.py: 300 steps of batch 8, the
batches of steps 150-170 corrupt, a checkpoint every 50 steps):
  rollback  ``loss_spike: {action: rollback}``: the time from the loss-spike alert (its ``time`` in
            alerts.attempt-1.jsonl) to the first record after the rollback (the stop at the next step end, the
            process's exit, the checkpoint chosen and the later ones set aside, a new process, the graph compile,
            one step);
  resume    ``action: stop`` on the same data (exit 4 at the alert), then ``msmon run --resume``: the time from
            that command's start to its first record (a new process, the graph compile, one step).
The verdict: the median rollback time minus the median resume time (target: within 10 s).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers_rollback import WINDOW, corrupt_dataset, rollback_config, run_dir  # noqa: E402

TARGET_S = 10.0


def msmon(*args: str, cwd: Path) -> int:
    """``msmon ARGS`` in ``cwd``, its output in ``cwd/out.txt``; the exit code."""
    with (cwd / "out.txt").open("ab") as out:
        return subprocess.run([sys.executable, "-m", "msmon", *args, "--plain"], cwd=cwd, stdout=out,
                              stderr=subprocess.STDOUT, check=False).returncode


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rollback_seconds(base: Path, model: str, data: Path) -> float:
    work = base / f"rollback-{model}"
    work.mkdir()
    config = rollback_config(work, model, data, health={"loss_spike": {"action": "rollback"},
                                                        "rollback": {"skip_steps": 30}})
    code = msmon("run", str(config), cwd=work)
    found = run_dir(work, model)
    if code != 0:
        raise SystemExit(f"rollback run failed with {code}: see {work / 'out.txt'}")
    (made,) = json.loads((found / "run.json").read_text(encoding="utf-8"))["rollbacks"]
    alert = next(a for a in lines(found / "alerts.attempt-1.jsonl") if a["detector"] == "loss_spike")
    first = next(r for r in lines(found / "metrics.jsonl") if r["step"] == made["checkpoint_step"] + 1)
    return first["time"] - alert["time"]


def resume_seconds(base: Path, model: str, data: Path) -> float:
    work = base / f"resume-{model}"
    work.mkdir()
    config = rollback_config(work, model, data, health={"loss_spike": {"action": "stop"}})
    if msmon("run", str(config), cwd=work) != 4:
        raise SystemExit(f"the stop run did not stop at the spike: see {work / 'out.txt'}")
    started = time.time()
    if msmon("run", str(config), "--resume", cwd=work) != 0:
        raise SystemExit(f"the resume failed: see {work / 'out.txt'}")
    return min(r["time"] for r in lines(run_dir(work, model) / "metrics.jsonl") if r["time"] >= started) - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default="legacy,mcore")
    args = parser.parse_args()
    verdict = 0
    for model in args.models.split(","):
        rollbacks, resumes = [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="msmon-bench-rollback-") as tmp:
                base = Path(tmp)
                data = corrupt_dataset(base, model, WINDOW)
                rollbacks.append(rollback_seconds(base, model, data))
                resumes.append(resume_seconds(base, model, data))
        extra = statistics.median(rollbacks) - statistics.median(resumes)
        ok = extra <= TARGET_S
        verdict |= not ok
        print(f"{model}: alert -> first step after the rollback {', '.join(f'{s:.1f}' for s in rollbacks)} s; "
              f"--resume -> first step {', '.join(f'{s:.1f}' for s in resumes)} s; the rollback costs "
              f"{extra:+.1f} s more (target <= {TARGET_S:g}): {'met' if ok else 'MISSED'}", flush=True)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
