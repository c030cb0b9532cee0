"""Record real training traces from the CPU quickstart for the detection benchmark.

    .venv/bin/python bench/record_traces.py [--all]    # missing traces (--all: every one), a process each
    .venv/bin/python bench/record_traces.py --one LR SEED OUT.jsonl EPOCHS STEPS_PER_EPOCH

Each trace line is one step: step, time, loss, grad_norm, learning_rate, overflow, throughput
(tokens/s), step_time_ms - the keys of a metrics.jsonl record, at log_interval 1. Runs happen in a
temporary directory; only the JSONL lands in bench/traces/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CLEAN = [(1e-3, 0), (1e-3, 1), (5e-3, 0), (5e-3, 1), (2e-2, 0), (2e-2, 1)]
FAULTY = [(1e4, 0)]  # the dead network: loss = ln(vocab), grad_norm = 0.0
LONG = [(5e-3, 2)]  # 2 epochs of 500 steps: a longer horizon for false alarms
STEPS = 320


def _round(value: float) -> float:
    return float(f"{value:.6g}")


def record_one(lr: float, seed: int, out: Path, epochs: int = 1, steps: int = STEPS) -> None:
    """Train the quickstart once with a recording callback; write the trace to ``out``."""
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers_training import quickstart_parts, training_yaml, write_quickstart_config
    from mindspore.train import Callback

    from msmon.runner.trainer import train

    class Recorder(Callback):
        def __init__(self) -> None:
            self.lines: list[str] = []
            self.last = time.monotonic()

        def on_train_begin(self, run_context) -> None:
            self.last = time.monotonic()

        def on_train_step_end(self, run_context) -> None:
            now = time.monotonic()
            seconds, self.last = now - self.last, now
            params = run_context.original_args()
            loss, overflow, _scale, lr_value, norm = (x.asnumpy() for x in params.net_outputs)
            record = {
                "step": int(params.cur_step_num), "time": round(time.time(), 3),
                "loss": _round(float(loss)), "grad_norm": _round(float(norm)),
                "learning_rate": _round(float(lr_value)), "overflow": int(bool(overflow)),
                "throughput": _round(2 * 64 / seconds), "step_time_ms": _round(seconds * 1000),
            }
            self.lines.append(json.dumps(record))

    with tempfile.TemporaryDirectory() as tmp:
        import os

        os.chdir(tmp)
        overrides = {"lr_schedule.learning_rate": lr, "seed": seed, "runner_config.epochs": epochs}
        config = write_quickstart_config(tmp, steps=steps, overrides=overrides, monitor_type=["file"])
        training, _ = quickstart_parts(config)
        recorder = Recorder()
        train(training_yaml(training, Path(tmp)), [recorder], Path(tmp) / "logs")
    out.write_text("\n".join(recorder.lines) + "\n", encoding="utf-8")


def trace_name(lr: float, seed: int, kind: str) -> str:
    return f"{kind}_lr{lr:g}_seed{seed}.jsonl"


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        record_one(float(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
        return
    for kind, runs, epochs, steps in (("clean", CLEAN, 1, STEPS), ("dead", FAULTY, 1, STEPS),
                                      ("clean_long", LONG, 2, 500)):
        for lr, seed in runs:
            out = HERE / "traces" / trace_name(lr, seed, kind)
            if "--all" not in sys.argv and out.exists():
                continue
            started = time.monotonic()
            args = [str(lr), str(seed), str(out), str(epochs), str(steps)]
            subprocess.run([sys.executable, __file__, "--one", *args], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"{out.name}: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
