"""Does a band of reference runs hold for another seed of the same recipe, and does a changed recipe leave it?

    python bench/bench_reference_band.py record DATA [--seeds 0 1 2 3 4 5]   # the runs, trained one after another
    python bench/bench_reference_band.py judge DATA [--metrics loss grad_norm] [--noise-factor 0]  # every pair, triple

``record`` trains the legacy quickstart for 200 steps with ``msmon run`` (every step logged, file backend) at each
seed, then seed 3 at 2x and 4x the peak learning rate and without the warm-up, into ``DATA/runs/band/<name>`` (a run
already there is kept). ``judge`` replays, with ``msmon replay RUN --reference A --reference B --json``, each other
seed and each changed recipe against every pair of seeds (then every triple), and prints the table of
docs/health.md: false alerts on the other seeds, and how often (and from which step) the changes were found.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = 200
PEAK_LR = 5e-3
PROJECT = "band"
CHANGES = {"seed3_lr2x": {"seed": 3, "lr_schedule.learning_rate": 2 * PEAK_LR},
           "seed3_lr4x": {"seed": 3, "lr_schedule.learning_rate": 4 * PEAK_LR},
           "seed3_nowarmup": {"seed": 3, "lr_schedule.warmup_ratio": 0.0}}


def msmon(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "msmon", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False)


def record(data: Path, seeds: list[int]) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers_training import write_quickstart_config

    runs = {f"seed{seed}": {"seed": seed} for seed in seeds} | CHANGES
    for name, overrides in runs.items():
        if (data / "runs" / PROJECT / name / "metrics.jsonl").exists():
            continue
        work = data / "work" / name
        work.mkdir(parents=True, exist_ok=True)
        config = write_quickstart_config(work, steps=STEPS, overrides=overrides, save_dir=str(data / "runs"),
                                         project_name=PROJECT, run_name=name, log_interval=1, monitor_type=["file"])
        done = msmon("run", str(config), "--plain", cwd=work)
        print(f"{name}: exit {done.returncode}", flush=True)
        if done.returncode != 0:
            print(done.stderr[-2000:], file=sys.stderr)


def alerts(data: Path, run: str, references: tuple[str, ...], drift: dict[str, object]) -> list[dict]:
    """The reference_drift alerts of ``run`` replayed against ``references`` (``drift``: the detector's settings
    that differ from the defaults)."""
    args = ["replay", str(data / "runs" / PROJECT / run), "--json"]
    if drift:
        tuning = data / "tuning.yaml"
        tuning.write_text(json.dumps({"monitor_config": {"health": {"reference_drift": drift}}}))
        args += ["--config", str(tuning)]
    for reference in references:
        args += ["--reference", str(data / "runs" / PROJECT / reference)]
    done = msmon(*args, cwd=data)
    if done.returncode not in (0, 1):
        raise SystemExit(f"replay {run} failed: {done.stderr[-2000:]}")
    return [a for a in json.loads(done.stdout) if a["detector"] == "reference_drift"]


def judge(data: Path, size: int, drift: dict[str, object]) -> None:
    runs = data / "runs" / PROJECT
    seeds = sorted(p.name for p in runs.iterdir() if p.name.startswith("seed") and p.name[4:].isdigit())
    false, trials = [], 0
    found: dict[str, list[int]] = {name: [] for name in CHANGES}
    for references in itertools.combinations(seeds, size):
        for other in (s for s in seeds if s not in references):
            trials += 1
            for alert in alerts(data, other, references, drift):
                false.append(f"{other} vs {'/'.join(references)}: {alert['values']['metric']} "
                             f"at {alert['onset_step']}")
        for name in CHANGES:
            onsets = [a["onset_step"] for a in alerts(data, name, references, drift)]
            if onsets:
                found[name].append(min(onsets))
    pairs = sum(1 for _ in itertools.combinations(seeds, size))
    print(f"{size} references of {len(seeds)} seeds, {drift or 'defaults'}: "
          f"{len({f.split(':')[0] for f in false})} of {trials} other-seed runs alerted")
    for line in false:
        print(f"  {line}")
    for name, onsets in found.items():
        print(f"  {name}: {len(onsets)} of {pairs}, first steps {sorted(onsets)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["record", "judge"])
    parser.add_argument("data", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(6)))
    parser.add_argument("--size", type=int, nargs="+", default=[2, 3], help="references per band")
    parser.add_argument("--metrics", nargs="+", help="compare only these metrics (health.reference_drift.metrics)")
    parser.add_argument("--noise-factor", type=float, help="health.reference_drift.noise_factor (0: the former band)")
    args = parser.parse_args()
    if args.action == "record":
        record(args.data.resolve(), args.seeds)
        return
    drift = {key: value for key, value in (("metrics", args.metrics), ("noise_factor", args.noise_factor))
             if value is not None}
    for size in args.size:
        judge(args.data.resolve(), size, drift)


if __name__ == "__main__":
    main()
