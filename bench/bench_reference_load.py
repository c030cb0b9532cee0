"""Load time and peak memory of a long reference curve (msmon.reference.load_reference), per source kind.

Writes a reference of ``--steps`` steps (default 1,000,000) of each kind that is cheap to generate into a
temporary directory: an msmon run directory (metrics.jsonl with records as msmon writes them, every metric of a
quickstart run), a mindformers info.log (MFLossMonitor's step line and progress line per step), a CSV and a JSON
Lines table, and a TensorBoard directory (mindformers' tags, written with tensorboardX; ``--tb-steps``, default
20,000: with protobuf's pure-Python parser, writing and reading events take ~2 ms and ~0.45 ms a step here). Each
load runs in a fresh child process, which reports its seconds and its peak resident memory (ru_maxrss), and how
much the load added to the child's after importing msmon.reference. Usage:
python bench/bench_reference_load.py [--steps N] [--tb-steps N] [--kinds run,log,csv,jsonl,tb]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KINDS = ("run", "log", "csv", "jsonl", "tb")
MF_LINE = ("[INFO] 2026-12-04 18:37:35,893 [mindformers/core/callback/callback.py:747] print_output_info: "
           "{{ Epoch:[  1/  1], step:[{step:5d}/{total:5d}], loss:[{loss:5.6f}/{loss:5.6f}], per_step_time: 31ms, "
           "lr: {lr}, overflow cond: False, loss_scale: 1.0, global_norm: [{norm}], train_throughput_per_npu: 0.005T\n"
           "[INFO] 2026-12-04 18:37:35,894 [mindformers/core/callback/callback.py:764] print_output_info:   "
           " 50.0% |█████████████████████████                         | 64.51613 samples/s/p  0:00:31 }}\n")


def values(step: int) -> tuple[float, float, float]:
    """(loss, grad norm, learning rate) of a plausible curve."""
    return 7.0 * math.exp(-step / 2e5) + 0.1 * math.sin(step), 1.0 + 0.01 * (step % 97), 5e-3 * (1 - step / 2e6)


def write(kind: str, directory: Path, steps: int) -> Path:
    """A reference of ``kind`` with ``steps`` steps below ``directory``; the path to load."""
    if kind == "tb":
        from tensorboardX import SummaryWriter

        writer = SummaryWriter(str(directory / "tb" / "rank_0"), max_queue=1000)
        for step in range(1, steps + 1):
            loss, norm, lr = values(step)
            for tag, value in (("loss", loss), ("grad-norm", norm), ("learning-rate", lr), ("batch-size", 2)):
                writer.add_scalar(tag, value, global_step=step)
        writer.close()
        return directory / "tb"
    path = {"run": directory / "run" / "metrics.jsonl", "log": directory / "info.log",
            "csv": directory / "ref.csv", "jsonl": directory / "ref.jsonl"}[kind]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        if kind == "csv":
            out.write("step,loss,grad_norm,learning_rate,step_time_ms\n")
        for step in range(1, steps + 1):
            loss, norm, lr = values(step)
            if kind == "run":
                out.write(json.dumps({
                    "step": step, "time": 1764467817.123 + step, "rank": 0, "epoch": 1, "loss": loss,
                    "grad_norm": norm, "learning_rate": lr, "throughput": 4210.5, "throughput_per_device": 4210.5,
                    "samples_per_s": 65.8, "samples_per_s_per_device": 65.8, "global_step": step,
                    "step_time_ms": 30.4, "step_inside_ms": 28.1, "step_outside_ms": 2.3, "loss_scale": 1.0,
                    "overflow": 0, "host_memory_mb": 812.0}) + "\n")
            elif kind == "log":
                out.write(MF_LINE.format(step=step, total=steps, loss=loss, lr=f"{lr:.9g}", norm=f"{norm:.8g}"))
            elif kind == "csv":
                out.write(f"{step},{loss!r},{norm!r},{lr!r},30.4\n")
            else:
                out.write(json.dumps({"step": step, "loss": loss, "grad_norm": norm, "learning_rate": lr}) + "\n")
    if kind == "run":
        (path.parent / "run.json").write_text(json.dumps({"run_name": "bench"}), encoding="utf-8")
        return path.parent
    return path


def load_child(path: str) -> None:
    """In the child: load ``path`` and print seconds, steps and the peak RSS added by the load (MiB)."""
    from msmon.reference import load_reference

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    curve = load_reference(Path(path))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "steps": len(curve), "metrics": curve.metrics,
                      "added_peak_mib": (peak - before) / 1024, "peak_mib": peak / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--tb-steps", type=int, default=20_000)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--load", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        load_child(args.load)
        return
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="msmon-bench-") as work:
        print(f"{'kind':6} {'steps':>9} {'write s':>8} {'load s':>7} {'peak MiB':>9} {'+load MiB':>10} {'file MiB':>9}")
        for kind in args.kinds.split(","):
            steps = args.tb_steps if kind == "tb" else args.steps
            start = time.perf_counter()
            path = write(kind, Path(work) / kind, steps)
            written = time.perf_counter() - start
            size = sum(p.stat().st_size for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
            paths = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))  # e.g. orjson's
            proc = subprocess.run([sys.executable, __file__, "--load", str(path)], capture_output=True, text=True,
                                  check=True, cwd=root, env={"PYTHONPATH": paths, "PATH": "/usr/bin:/bin"})
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            assert got["steps"] == steps, got
            print(f"{kind:6} {steps:>9} {written:>8.1f} {got['seconds']:>7.1f} {got['peak_mib']:>9.0f} "
                  f"{got['added_peak_mib']:>10.0f} {size / 2**20:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
