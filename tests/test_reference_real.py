"""One real training read as a reference three ways (tests/canonical.py ``reference_seed1_legacy``): its msmon run
directory, mindformers' own info.log of that run and the TensorBoard directory mindformers wrote (its
``tensorboard:`` section). The three curves are the same at every one of the 200 steps.

Tolerances, from how each source writes a number: msmon records the train step's float32 outputs as floats;
TensorBoard stores float32 (``simple_value``): equal. mindformers' log prints the loss with 6 decimals
(``loss:[%5.6f/...]``): within half a unit of the 6th decimal, 5e-7. It prints the global norm and the learning rate
as numpy prints a float32 (the shortest digits that read back as the same float32, at most 8 decimals): equal as
float32, or within 5e-9 where 8 decimals are fewer digits than float32 holds (values below 0.1)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from canonical import CanonicalRun
from launch import records

from msmon.reference import ReferenceKind, load_reference

LOSS_DECIMALS = 6  # MFLossMonitor: f"{loss:5.6f}"
LOG_LOSS_TOLERANCE = 0.5 * 10.0**-LOSS_DECIMALS
EIGHT_DECIMALS = 0.5 * 10.0**-8  # numpy's default print precision


def _float32_close(printed: float, recorded: float) -> bool:
    return bool(np.float32(printed) == np.float32(recorded)) or abs(printed - recorded) <= EIGHT_DECIMALS


def test_the_run_its_mindformers_log_and_its_tensorboard_are_one_curve(canonical) -> None:
    run = canonical("reference_seed1_legacy")
    assert run.code == 0, run.output[-2000:]
    log_dir = run.run_dir / "logs" / "output" / "log" / "rank_0"
    own = load_reference(run.run_dir)
    log = load_reference(log_dir)  # the rank directory: its info.log is found
    board = load_reference(Path(run.extra["tensorboard"]))
    assert (own.kind, log.kind, board.kind) == (ReferenceKind.RUN, ReferenceKind.MINDFORMERS_LOG,
                                                ReferenceKind.TENSORBOARD)
    assert list(own.steps) == list(log.steps) == list(board.steps) == list(range(1, 201))
    assert own.global_batch_size == log.global_batch_size == board.global_batch_size == 2
    for name in ("loss", "grad_norm", "learning_rate"):
        assert all(math.isfinite(v) for v in own.metric(name)), name

    assert list(board.metric("loss")) == list(own.metric("loss"))
    assert list(board.metric("grad_norm")) == list(own.metric("grad_norm"))
    assert list(board.metric("learning_rate")) == list(own.metric("learning_rate"))

    worst = max(abs(a - b) for a, b in zip(log.metric("loss"), own.metric("loss"), strict=True))
    assert worst <= LOG_LOSS_TOLERANCE + 1e-12, worst
    for name in ("grad_norm", "learning_rate"):
        pairs = list(zip(log.metric(name), own.metric(name), strict=True))
        assert all(_float32_close(printed, recorded) for printed, recorded in pairs), name
    assert all(a >= 0 for a in log.metric("step_time_ms"))  # whole ms as printed; msmon times its own interval



#: Per model path: the canonical runs of the two seeds (the first logged every 10 steps, the second every step).
BANDS = {"legacy": ("completed_legacy", "reference_seed1_legacy"),
         "mcore": ("completed_mcore", "reference_seed1_mcore")}


def clean_reference(run: CanonicalRun, directory: Path) -> Path:
    """The run as a reference of its recipe: its own directory, or, when a test callback changes its training from
    ``grow_from`` on (completed_mcore's growing block), a copy whose metrics stop at that step (the clean run)."""
    grow_from = run.extra.get("grow_from")
    if grow_from is None:
        return run.run_dir
    copy = run.copy_to(directory)
    rows = [row for row in records(copy) if row["step"] <= grow_from]
    (copy / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return copy


@pytest.mark.parametrize("model", list(BANDS))
def test_a_third_seed_stays_in_the_band_of_two_and_a_4x_learning_rate_leaves_it_live(canonical, tmp_path, model):
    """The real Trainer with `msmon run --reference A --reference B`, on both model paths: the quickstart's recipe
    at two seeds draws the band (legacy: 0, completed_legacy, and 1; mcore: 42, completed_mcore's steps before its
    block grows, and 1); seed 3 of the same recipe stays inside (no reference_drift alert); seed 3 at 4x the peak
    learning rate leaves it, and the alerts name the metric and the step it left: the learning rate (the recipe's
    own curve) within the first logs, then the grad norm (measured: legacy from step 52, mcore from step 40; before
    the band placed each smoothed value at its window's centre, a reference logged every 10 steps widened the
    learning rate's band to x3.2 and mcore's grad norm's to x9, docs/health.md). Two trainings per path of their own:
    runs judged live against canonical references (completed_mcore is one: its block grows from step 100, so its
    metrics after that step are cut from a private copy)."""
    from conftest import run_msmon

    first, second = BANDS[model]
    reference = canonical(second)
    refs = [clean_reference(canonical(first), tmp_path / "references"), reference.run_dir]
    found = {}
    # the 4x run without the alerts' rate limit (one alert per detector per 300 s): each metric's departure is its own
    lr4x = ["lr_schedule.learning_rate=2.e-2", "monitor_config.health.alerts.rate_limit_s=0"]
    for name, extra in (("seed3", []), ("seed3_lr4x", lr4x)):
        # the legacy reference's own TensorBoard directory is canonical: the judged runs write theirs here
        board = [f"tensorboard.tensorboard_dir={tmp_path / name}"] if "tensorboard" in reference.extra else []
        args = ["run", str(reference.config), "--plain", "seed=3", f"monitor_config.run_name={name}",
                f"monitor_config.save_dir={tmp_path / 'runs'}", *board, *extra,
                *[arg for ref in refs for arg in ("--reference", str(ref))]]
        result = run_msmon(*args, cwd=reference.cwd, timeout=900)
        assert result.code == 0, result.stderr[-2000:]
        found[name] = [a for a in records(tmp_path / "runs" / "canonical" / name, "alerts.jsonl")
                       if a["detector"] == "reference_drift"]
    assert found["seed3"] == []
    schedule, *later = found["seed3_lr4x"]
    assert schedule["values"]["metric"] == "learning_rate" and schedule["onset_step"] <= 20, schedule
    assert f"learning_rate left the reference band at step {schedule['onset_step']}" in schedule["message"]
    assert f"2 reference runs ({first}, {second})" in schedule["message"]
    grad = [a for a in later if a["values"]["metric"] == "grad_norm"]
    assert grad and 25 <= grad[0]["onset_step"] <= 150, later
    assert f"grad_norm left the reference band at step {grad[0]['onset_step']}" in grad[0]["message"]
