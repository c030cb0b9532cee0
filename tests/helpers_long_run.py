"""A long run directory in the format ``msmon run`` writes (metrics.jsonl with a quickstart run's metrics at full float
precision, about 500 bytes a record; run.json), without training, and with anomalies injected at fixed fractions of
the run: a loss spike, a NaN loss, a grad-norm explosion and a throughput drop (import, not a conftest;
tests/test_replay_long_run.py and bench/bench_long_run.py).

    run_dir = long_run(tmp_path / "p" / "long", records=20_000)
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

START_TIME = 1796406600.0
#: (what, fraction of the run where it starts)
ANOMALIES: tuple[tuple[str, float], ...] = (("loss_spike", 0.2), ("nan_loss", 0.4), ("grad_explosion", 0.6),
                                            ("throughput_drop", 0.8))
SPIKE_STEPS = 30  # records at 6x the loss
EXPLOSION_STEPS = 120  # records over which the grad norm grows 3%/step
DROP_STEPS = 300  # records at a third of the throughput


def anomaly_steps(records: int) -> dict[str, int]:
    """What -> the step where it starts, in a run of ``records`` steps."""
    return {what: max(2, int(records * fraction)) for what, fraction in ANOMALIES}


def record(step: int, records: int, noise: random.Random, at: dict[str, int]) -> dict[str, float | int]:
    """The record of ``step`` (1-based) of a run of ``records`` steps, with the anomalies starting ``at``."""
    loss = 2.0 + 5.0 * math.exp(-step / (records / 5 + 1)) + noise.gauss(0.0, 0.02)
    grad = 1.0 + 0.3 * math.exp(-step / 1000) + noise.gauss(0.0, 0.03)
    throughput = 2350.0 + noise.gauss(0.0, 15.0)
    if 0 <= step - at.get("loss_spike", -10**9) < SPIKE_STEPS:
        loss *= 6.0
    if step == at.get("nan_loss"):
        loss = math.nan
    grown = step - at.get("grad_explosion", -10**9)
    if 0 <= grown < EXPLOSION_STEPS:
        grad *= 1.03 ** grown
    if 0 <= step - at.get("throughput_drop", -10**9) < DROP_STEPS:
        throughput /= 3.0
    lr = 5e-3 * min(1.0, step / 100) * (0.5 + 0.5 * math.cos(math.pi * step / records))
    return {
        "step": step, "time": START_TIME + 0.031 * step, "rank": 0, "loss": loss, "grad_norm": grad,
        "learning_rate": lr, "grad_norm_mean": grad * 1.01, "grad_norm_max": grad * 1.4, "loss_mean": loss * 1.001,
        "global_step": step, "throughput": throughput, "throughput_per_device": throughput,
        "samples_per_s": throughput / 64, "samples_per_s_per_device": throughput / 64, "model_flops": 149815296.0,
        "tflops_per_device": throughput * 1.263e-6, "step_time_ms": 31.0 + noise.random(),
        "host_memory_mb": 812.0 + step * 1e-6,
    }


def long_run(run_dir: Path, records: int, *, anomalies: bool = True, seed: int = 0) -> Path:
    """``run_dir`` with ``records`` steps logged at log_interval 1 (the anomalies of ``ANOMALIES`` when asked)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    noise = random.Random(seed)
    at = anomaly_steps(records) if anomalies else {}
    with open(run_dir / "metrics.jsonl", "w", encoding="utf-8") as out:
        for step in range(1, records + 1):
            out.write(json.dumps(record(step, records, noise, at)) + "\n")
    (run_dir / "run.json").write_text(json.dumps({
        "run_name": run_dir.name, "project_name": run_dir.parent.name, "status": "completed", "last_step": records,
        "total_steps": records, "start_time": "2026-12-05T00:00:00", "end_time": "2026-12-05T08:36:40"}))
    return run_dir
