"""Overhead of msmon's callback on the real tiny mindformers Trainer (CPU), measured side by side.

    /work/venv/bin/python bench/bench_callback_overhead.py [--steps 400] [--block 20]

Every run is one real Trainer run (``--steps`` steps) in its own child process; step time = wall
time between consecutive step ends, the first ``2 x --block`` steps (graph compile) left out.
Two measurements, printed side by side:
  gated   in one process msmon's callback is switched on and off in alternating blocks of
          ``--block`` steps (same process, same compiled graph); each "on" block's median step
          time over the "off" block before it; the median per run, then the median over the rounds;
  runs    separate processes, interleaved ``--rounds`` times: baseline (no msmon at all) and each
          scenario with msmon on for every step (writer threads, backends and all):
          median of the runs' median step times / the same for the baseline. On a shared machine
          separate runs differ by far more than 1% (the baseline runs are printed): the verdict
          uses the gated ratio.
Scenarios and targets:
  core      5 core metrics, file + mindinsight, log_interval 10       target <= 1.01
  all       every backend (file, mindinsight, tensorboard, mlflow server), log_interval 1   <= 1.03
  blocking  file + a backend blocking 2 s per write, log_interval 1   <= 1.02, bounded memory
The callback's own cost (microseconds per call) is timed on non-logging and logging steps.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

CORE = ["loss", "grad_norm", "learning_rate", "throughput", "global_step"]
SCENARIOS: dict[str, dict[str, Any]] = {
    "core": {"monitor_type": ["file", "mindinsight"], "log_interval": 10, "target": 1.01},
    "all": {"monitor_type": ["file", "mindinsight", "tensorboard", "mlflow"], "log_interval": 1, "target": 1.03},
    "blocking": {"monitor_type": ["file", "blocking"], "log_interval": 1, "target": 1.02, "queue_size": 100},
}


def child(scenario: str, steps: int, block: int, workdir: Path, mlflow_uri: str | None, gated: bool) -> dict[str, Any]:
    """One real Trainer run (scenario ``none``: without msmon); returns the measurements."""
    import psutil
    from engine_support import FAKES, BlockingBackend
    from helpers_training import quickstart_parts, write_quickstart_config

    from msmon.config.coerce import build
    from msmon.config.schema import MonitorSettings
    from msmon.engine.backends import register_backend
    from msmon.engine.session import MonitorSession
    from msmon.runner.trainer import train

    for cls in FAKES:
        register_backend(cls)
    BlockingBackend.delay = 2.0
    spec = SCENARIOS.get(scenario, SCENARIOS["core"])
    os.chdir(workdir)
    path = write_quickstart_config(
        workdir, steps=steps, log_interval=spec["log_interval"], monitor_type=spec["monitor_type"], verbose=False,
        track_metrics=CORE, mlflow={"tracking_uri": mlflow_uri}, writer={"queue_size": spec.get("queue_size", 1000)},
    )
    training, monitor = quickstart_parts(path)
    settings, _ = build(MonitorSettings, monitor, "monitor_config")
    settings = replace(settings, monitor_type=spec["monitor_type"])  # "blocking" is a registered test backend
    session = MonitorSession(settings, settings.run_dir(), config=training).start() if scenario != "none" else None
    inner = session.callback() if session is not None else None
    interval = spec["log_interval"]
    block = max(block, interval)  # every "on" block starts with a logging step
    process = psutil.Process()
    from mindspore.train import Callback

    class Gate(Callback):
        def __init__(self) -> None:
            super().__init__()
            self.last: float | None = None
            self.was_on = False
            self.on: list[float] = []
            self.off: list[float] = []
            self.cost_log: list[float] = []
            self.cost_plain: list[float] = []
            self.rss: list[float] = []
            self.blocks: dict[int, list[float]] = {}

        def on_train_begin(self, run_context: Any) -> None:
            if inner is not None:
                inner.on_train_begin(run_context)

        def on_train_step_end(self, run_context: Any) -> None:
            now = time.perf_counter()
            step = run_context.original_args().cur_step_num
            if self.last is not None and step > 2 * block:  # skip the graph compile and warm-up
                (self.on if self.was_on else self.off).append(now - self.last)
                self.blocks.setdefault((step - 1) // block, []).append(now - self.last)
            self.was_on = inner is not None and (not gated or (step // block) % 2 == 1)
            if self.was_on:
                started = time.perf_counter()
                inner.on_train_step_end(run_context)
                cost = time.perf_counter() - started
                (self.cost_log if step % interval == 0 else self.cost_plain).append(cost)
            if step % 50 == 0:
                self.rss.append(process.memory_info().rss / 2**20)
            self.last = time.perf_counter()

    gate = Gate()
    started = time.monotonic()
    train(training, [gate], workdir / "logs")
    train_s = time.monotonic() - started
    summary = session.close("completed") if session is not None else None
    # each "on" block against the "off" block before it: slow drifts of a shared machine cancel out
    pairs = [statistics.median(gate.blocks[b]) / statistics.median(gate.blocks[b - 1])
             for b in gate.blocks if b % 2 == 1 and b - 1 in gate.blocks and len(gate.blocks[b]) > 2]
    return {
        "pair_ratio": statistics.median(pairs) if pairs else None,
        "scenario": scenario, "gated": gated,
        "on_ms": statistics.median(gate.on) * 1e3 if gate.on else None,
        "off_ms": statistics.median(gate.off) * 1e3 if gate.off else None,
        "n_on": len(gate.on), "n_off": len(gate.off),
        "cost_plain_us": statistics.median(gate.cost_plain) * 1e6 if gate.cost_plain else None,
        "cost_log_us": statistics.median(gate.cost_log) * 1e6 if gate.cost_log else None,
        "rss_mb": gate.rss, "train_s": train_s, "dropped": summary.dropped_records if summary else 0,
        "written": {name: b["written"] for name, b in summary.backends.items()} if summary else {},
    }


def start_mlflow(directory: Path) -> Any:
    from engine_support import MlflowServer

    return MlflowServer(directory)


def run_child(args: argparse.Namespace, scenario: str, gated: bool, workdir: Path, mlflow: str | None) -> dict:
    workdir.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--child", scenario, "--steps", str(args.steps), "--block", str(args.block),
           "--workdir", str(workdir)] + (["--gated"] if gated else []) + (["--mlflow", mlflow] if mlflow else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    if proc.returncode != 0 or not line:
        raise RuntimeError(f"{scenario}: failed\n{proc.stderr[-3000:]}")
    return json.loads(line[-1][7:])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", default=None)
    parser.add_argument("--gated", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--mlflow", default=None)
    parser.add_argument("--only", nargs="*", default=list(SCENARIOS))
    args = parser.parse_args()
    if args.child:
        result = child(args.child, args.steps, args.block, Path(args.workdir), args.mlflow, args.gated)
        print("RESULT " + json.dumps(result))
        return 0
    gated: dict[str, list[dict[str, Any]]] = {name: [] for name in args.only}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ["none", *args.only]}
    with tempfile.TemporaryDirectory(prefix="msmon_bench_") as tmp:
        server = start_mlflow(Path(tmp) / "mlflow") if "all" in args.only else None
        url = server.url if server is not None else None
        try:
            for round_ in range(args.rounds):
                for scenario in args.only:
                    workdir = Path(tmp) / f"gated_{scenario}_{round_}"
                    gated[scenario].append(run_child(args, scenario, True, workdir, url))
                for scenario in runs:
                    runs[scenario].append(run_child(args, scenario, False, Path(tmp) / f"{scenario}_{round_}", url))
        finally:
            if server is not None:
                server.stop()
    base = statistics.median(r["off_ms"] for r in runs["none"])
    each = ", ".join(f"{r['off_ms']:.2f}" for r in runs["none"])
    print(f"steps {args.steps}, block {args.block}, rounds {args.rounds}; baseline median step {base:.2f} ms ({each})")
    print(f"{'scenario':9} {'gated':>6} {'runs':>6} {'target':>6}  {'non-log us':>10} {'log us':>8}  "
          f"{'RSS MB':>11}  dropped  written")
    for scenario in args.only:
        gated_ratio = statistics.median(g["pair_ratio"] for g in gated[scenario])
        g = gated[scenario][0]
        run_ratio = statistics.median(r["on_ms"] for r in runs[scenario]) / base
        target = SCENARIOS[scenario]["target"]
        rss_values = [value for x in gated[scenario] for value in x["rss_mb"]]
        rss = f"{min(rss_values):.0f}->{max(rss_values):.0f}"
        verdict = "ok" if gated_ratio <= target else "MISSED"  # runs: only as good as the machine's quiet
        plain = [x["cost_plain_us"] for x in gated[scenario] if x["cost_plain_us"] is not None]
        logged = statistics.median(x["cost_log_us"] or 0 for x in gated[scenario])
        costs = f"{statistics.median(plain) if plain else float('nan'):10.1f} {logged:8.1f}"
        print(f"{scenario:9} {gated_ratio:6.3f} {run_ratio:6.3f} {'<=' + str(target):>6}  {costs}  {rss:>11}  "
              f"{g['dropped']:7d}  {g['written']}  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
