"""The article's night on the real Trainer: a dataset whose batches in a window of steps are corrupt (shuffle off, so
the window is known) makes the loss spike; ``action: rollback`` goes back to the checkpoint before it, skips the
data, and the run ends as a clean run would.

Most tests read the canonical runs of tests/canonical_rollback.py: per model path one rolled-back run (steps 150-170
corrupt, 300 steps) and one that only alerts on data corrupt at steps 250-270 (its first 249 steps are the clean
run). The edge cases train their own, on the fewest steps that show them: 65 steps of batch 8 (on two ranks, each
rank's), a checkpoint every 10, the window from step 48 (the detector's baseline filled, the loss still well below
the corrupt data's).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from canonical_rollback import LATE_WINDOW
from conftest import run_msmon
from helpers_rollback import BATCH, STEPS, WINDOW, corrupt_dataset, rollback_config, run_dir
from launch import Launched, records

pytestmark = pytest.mark.training

FINAL_LOGS = 30  # the final loss: the mean of this many last logged steps
SHORT_STEPS, SHORT_CHECKPOINTS = 65, 10  # the edge cases' own trainings
MODELS = ["legacy", "mcore"]


def train(tmp_path: Path, name: str, model: str, data: Path, *, health: dict[str, Any],
          checkpoint_steps: int = SHORT_CHECKPOINTS, steps: int = SHORT_STEPS, **monitor: Any
          ) -> tuple[int, Path, str]:
    """``msmon run`` of ``rollback_config`` (by default the edge cases' shape): the exit code, the run directory and
    the terminal output."""
    directory = tmp_path / name
    directory.mkdir()
    config = rollback_config(directory, model, data, health=health, checkpoint_steps=checkpoint_steps, steps=steps,
                             **monitor)
    run = Launched.start(directory, "run", str(config), "--plain")
    return run.finish(), run_dir(directory, model), run.output


def boards_show(run_dir: Path, mlflow_db: Path, experiment: str) -> list[list[tuple[int, float]]]:
    """The loss curve (step, value) TensorBoard's and MLflow's own readers give for the run (MLflow: the run no
    other superseded)."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    tensorboard = sorted((e.step, e.value) for e in accumulator.Scalars("loss"))
    client = MlflowClient(tracking_uri=f"sqlite:///{mlflow_db}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    (current,) = [run for run in runs if "msmon.superseded_by" not in run.data.tags]
    assert len(runs) == 2 and current.data.tags["msmon.continues"] in {run.info.run_id for run in runs}
    mlflow = sorted((m.step, m.value) for m in client.get_metric_history(current.info.run_id, "loss"))
    return [tensorboard, mlflow]


def final_loss(rows: list[dict[str, Any]], last_step: int) -> float:
    return statistics.mean(r["loss"] for r in rows if last_step - FINAL_LOGS < r["step"] <= last_step)


def info(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


def rollback_of(run: Any) -> dict[str, Any]:
    """The one rollback of a canonical rolled-back run."""
    assert run.code == 0, run.output[-3000:]
    (made,) = run.info["rollbacks"]
    return made


# -- the canonical rolled-back runs --------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_a_loss_spike_from_bad_data_is_rolled_back_and_skipped(canonical, model: str) -> None:
    """Rollback: exit 0, one rollback to the step-100 checkpoint whose skipped data covers the corrupt window, one
    honest curve (each step once, no value near the spike after step 100; the spike kept in
    metrics.attempt-1.jsonl), both attempts in run.json and the rollback in the run's last lines."""
    run = canonical(f"rolled_back_{model}")
    made = rollback_of(run)
    assert made["detector"] == "loss_spike" and made["checkpoint_step"] == 100
    assert made["checkpoint_step"] < made["onset_step"] <= WINDOW[0] + 1 and made["alert_step"] < WINDOW[1]
    assert made["skip_from"] <= WINDOW[0] - 1 and made["skip_to"] >= WINDOW[1]  # every corrupt batch skipped
    assert made["skipped_steps"] == made["skip_to"] - 100 and made["skipped_samples"] == BATCH * made["skipped_steps"]
    assert made["time_lost_s"] > 0
    rows = run.records()
    assert [r["step"] for r in rows] == list(range(1, STEPS - made["skipped_steps"] + 1))  # each once, none skipped
    superseded = run.records("metrics.attempt-1.jsonl")
    peak = max(r["loss"] for r in superseded)
    assert min(r["step"] for r in superseded) == 101 and peak > 5.0  # the spike, kept aside
    assert max(r["loss"] for r in rows if r["step"] > 100) < 0.7 * peak
    assert [(a["reason"], a["status"], a["resumed_from_step"]) for a in run.info["attempts"]] == \
        [("start", "stopped_by_monitor", None), ("rollback", "completed", 100)]
    assert "rollback: loss_spike from step" in run.output and "rollbacks: 1" in run.output


def test_tensorboard_and_mlflow_show_the_rolled_back_curve_once(canonical) -> None:
    """TensorBoard and MLflow show the curve metrics.jsonl holds: each step once, the rolled-back values gone (the
    legacy run writes both)."""
    run = canonical("rolled_back_legacy")
    rollback_of(run)
    rows = run.records()
    for shown in boards_show(run.run_dir, Path(run.extra["mlflow_db"]), "canonical"):
        assert [step for step, _ in shown] == [r["step"] for r in rows]
        assert [value for _, value in shown] == pytest.approx([r["loss"] for r in rows], rel=1e-6)


@pytest.mark.parametrize("model", MODELS)
def test_the_report_of_a_rolled_back_run_marks_the_rollback(canonical, tmp_path: Path, model: str) -> None:
    """`msmon report` of (a copy of) the rolled-back run labels the rollback on its curve."""
    run = canonical(f"rolled_back_{model}")
    rollback_of(run)
    copy = run.copy_to(tmp_path)
    report = run_msmon("report", str(copy))
    assert report.code == 0, report.stderr
    assert '"label":"rollback: loss_spike from step' in (copy / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("model", MODELS)
def test_a_rolled_back_run_ends_as_the_clean_run_does(canonical, model: str) -> None:
    """The final loss (the mean of the last 30 steps) of the rolled-back run is within 20% of the clean run's at the
    same step: the alerting run's, whose data up to step 249 is the clean data."""
    rows = canonical(f"rolled_back_{model}").records()
    alerted = canonical(f"spike_alerted_{model}")
    assert alerted.code == 0, alerted.output[-3000:]
    last = rows[-1]["step"]
    assert last < LATE_WINDOW[0]  # compared where the alerting run still trains on clean data
    rolled, clean = final_loss(rows, last), final_loss(alerted.records(), last)
    print(f"measured ({model}): mean loss of steps {last - FINAL_LOGS + 1}-{last}: rollback {rolled:.3f}, clean "
          f"{clean:.3f}")
    assert rolled == pytest.approx(clean, rel=0.2)


@pytest.mark.parametrize("model", MODELS)
def test_alerting_keeps_the_spike_and_replay_says_where_the_rollback_went(canonical, tmp_path: Path,
                                                                          model: str) -> None:
    """``action: alert`` on corrupt data shows the spike in its curve and alerts. `msmon replay` with the rollback
    config of the records the rolled-back run's first attempt saw (metrics.jsonl up to the checkpoint, then
    metrics.attempt-1.jsonl) says where the rollback went; of the alerting run, the same 100 steps later."""
    rolled = canonical(f"rolled_back_{model}")
    made = rollback_of(rolled)
    alerted = canonical(f"spike_alerted_{model}")
    assert alerted.code == 0, alerted.output[-3000:]
    assert max(r["loss"] for r in alerted.records() if LATE_WINDOW[0] <= r["step"] <= LATE_WINDOW[1]) > 5.0
    assert "loss_spike" in {a["detector"] for a in alerted.alerts()}

    lines = (rolled.run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    seen = tmp_path / "attempt-1.jsonl"  # what the live detectors saw before the rollback
    seen.write_text("".join(line for line in lines if json.loads(line)["step"] <= made["checkpoint_step"])
                    + (rolled.run_dir / "metrics.attempt-1.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    would = forecast(seen, rolled.config)
    assert (would["checkpoint_step"], would["skip_to"]) == (made["checkpoint_step"], made["skip_to"])  # as it went
    would = forecast(alerted.run_dir, rolled.config)  # the same window 100 steps later: back to step 200, past it
    assert would["checkpoint_step"] == made["checkpoint_step"] + LATE_WINDOW[0] - WINDOW[0]
    assert would["skip_to"] >= LATE_WINDOW[1]


def forecast(records_path: Path, config: Path) -> dict[str, Any]:
    """Where `msmon replay RECORDS --config CONFIG` says the one loss_spike alert would have rolled the run back."""
    replayed = run_msmon("replay", str(records_path), "--json", "--config", str(config))
    assert replayed.code == 0, replayed.stderr
    (would,) = [a["rollback"] for a in json.loads(replayed.stdout) if a["detector"] == "loss_spike"]
    return would


# -- the edge cases: trainings of their own ------------------------------------------------------------------------
SHORT_WINDOW = (48, 52)
AGAIN_WINDOW = (48, 64)  # to the data's end but one batch: skip_steps 8 skips too little after the first alert


def again_health(max_rollbacks: int, detector: str = "loss_spike") -> dict[str, Any]:
    return {detector: {"action": "rollback"}, "rollback": {"skip_steps": 8, "max_rollbacks": max_rollbacks}}


def test_a_nan_loss_again_near_the_data_end_rolls_back_again_and_never_skips_past_the_data(tmp_path: Path) -> None:
    """mcore: a loss mask of NaN at steps 48-64 of 65 makes the loss NaN; ``nonfinite: rollback`` rolls back to step
    40 and ``skip_steps: 8`` skips too little: the first step after it (41) trains NaN data again, and the run rolls
    back a second time (to the same checkpoint, the data skipped further) within its 3 rollbacks. No NaN survives in
    the curve; the first attempt's NaN is kept in metrics.attempt-1.jsonl. A held-out night: a skip past the data's
    end (MindSpore: "reset step must be less than dataset_size * num_epochs") failed the rollback attempt (exit 3);
    now the margin past the bad window is shortened to what the data holds: the second skip ends at the data's last
    batch, which step 41 trains, and the run completes. And the NaN at the resumed attempt's first step is step 41,
    as mindformers counts it (msmon numbered it from the optimizer's count, which a step whose gradients overflowed
    does not advance: step 40, and its rollback went back to step 30). A training of its own: NaN data, a second
    rollback and the data's end, at a moment of the run (the mcore model's; the legacy model reaches its data's end in
    the two-epoch case below: one model path each)."""
    data = corrupt_dataset(tmp_path, "mcore", AGAIN_WINDOW, kind="nan_mask", steps=SHORT_STEPS)
    code, rolled, output = train(tmp_path, "again", "mcore", data, health=again_health(3, "nonfinite"))
    assert code == 0, output[-3000:]
    recorded = info(rolled)
    assert recorded["status"] == "completed" and "note" not in recorded and "Cannot reset the pipeline" not in output
    first, second = recorded["rollbacks"]
    assert (first["detector"], second["detector"]) == ("nonfinite", "nonfinite")
    assert (first["onset_step"], second["onset_step"]) == (48, 41)  # a NaN: the alert at its first step
    assert first["checkpoint_step"] < first["onset_step"] <= AGAIN_WINDOW[0] + 1
    assert first["skip_to"] < AGAIN_WINDOW[1]  # too little: NaN again
    assert (first["checkpoint_step"], second["checkpoint_step"]) == (40, 40)
    assert second["skip_from"] == first["skip_to"] and second["onset_step"] <= 40 + SHORT_CHECKPOINTS
    assert second["skip_to"] == SHORT_STEPS - 1 >= AGAIN_WINDOW[1]  # the margin shortened: the last batch kept
    assert "the margin past the bad window shortened to" in output
    assert [a["reason"] for a in recorded["attempts"]] == ["start", "rollback", "rollback"]
    rows = records(rolled)
    assert [r["step"] for r in rows] == list(range(1, 40 + 2))  # each step once, the last batch trained
    assert all(r["loss"] == r["loss"] for r in rows)  # no NaN survives
    assert any(r["loss"] != r["loss"] for r in records(rolled, "metrics.attempt-1.jsonl"))


def test_a_second_spike_with_no_rollback_left_stops_the_run(tmp_path: Path) -> None:
    """Random tokens at steps 48-64 of 65 (the window of the test above), ``skip_steps: 8`` and ``max_rollbacks: 1``:
    the loss spikes again after the rollback, the second spike stops the run (exit 4), and run.json says the budget
    is spent. A training of its own: the budget ends the run."""
    data = corrupt_dataset(tmp_path, "legacy", AGAIN_WINDOW, steps=SHORT_STEPS)
    code, rolled, output = train(tmp_path, "again", "legacy", data, health=again_health(1))
    assert code == 4, output[-3000:]
    recorded = info(rolled)
    assert len(recorded["rollbacks"]) == 1 and "not rolled back: no rollback left (1 of 1 used)" in recorded["error"]


def test_a_rollback_at_the_end_of_the_second_epoch_ends_the_run_with_its_data_exhausted(tmp_path: Path) -> None:
    """Two epochs of 50 steps whose last 3 batches are corrupt: the first rollback skips from epoch 1 into
    epoch 2 (the data's end counted over every epoch), the same batches of epoch 2 spike again at the data's end (the
    alert on the third corrupt step, the detector's span), with nothing left after them: the run ends completed, its
    data exhausted, and says so. A training of its own: two epochs, a window at the data's end (the legacy model's;
    the one-epoch case above runs the mcore model: issue #42's rollback past the data's end on each model path)."""
    model, per_epoch, window, epochs = "legacy", 50, (48, 50), 2
    data = corrupt_dataset(tmp_path, model, window, steps=per_epoch)
    directory = tmp_path / "near_end"
    directory.mkdir()
    config = rollback_config(directory, model, data, health={"loss_spike": {"action": "rollback"},
                                                               "rollback": {"skip_steps": 20}},
                             checkpoint_steps=SHORT_CHECKPOINTS, steps=per_epoch)
    run = Launched.start(directory, "run", str(config), "--plain", f"runner_config.epochs={epochs}")
    code, rolled = run.finish(), run_dir(directory, model)
    assert code == 0, run.output[-3000:]
    recorded = info(rolled)
    assert recorded["status"] == "completed" and "Cannot reset the pipeline" not in run.output
    data_end = per_epoch * epochs
    (first,) = recorded["rollbacks"]
    assert first["checkpoint_step"] < first["onset_step"] <= window[0] + 1 and first["skip_to"] >= window[1]
    assert per_epoch < first["skip_to"] <= data_end - 1  # counted across epochs: into epoch 2
    steps = [r["step"] for r in records(rolled)]
    assert steps == list(range(1, steps[-1] + 1))  # each step once
    assert recorded["note"].startswith("its data exhausted: the loss_spike") and f"of the data's {data_end}" in \
        recorded["note"] and "run completed: its data exhausted" in run.output


def test_no_checkpoint_before_the_onset_stops_the_run_and_says_why(tmp_path: Path) -> None:
    """A spike at step 48 with the first checkpoint due at step 100: exit 4, run.json's error names the step it
    needed; nothing rolled back. A training of its own: it ends at the spike."""
    health = {"loss_spike": {"action": "rollback"}}
    code, rolled, output = train(tmp_path, "early", "legacy", corrupt_dataset(tmp_path, "legacy", SHORT_WINDOW,
                                                                              steps=SHORT_STEPS),
                                 health=health, checkpoint_steps=100)
    assert code == 4, output[-3000:]
    recorded = info(rolled)
    assert recorded["status"] == "stopped_by_monitor" and not recorded.get("rollbacks")
    assert "not rolled back: no complete checkpoint before step" in recorded["error"]
    assert len(recorded["attempts"]) == 1


def test_ctrl_c_during_a_rollback_ends_the_run_interrupted_with_nothing_left(tmp_path: Path) -> None:
    """SIGINT the moment the rollback alert is written (the next attempt is starting): exit 130, run.json
    interrupted with the rollback listed, and no process of the run left. A training of its own: a signal at a
    moment."""
    import signal

    from helpers_ranks import processes_of

    directory = tmp_path / "interrupted"
    directory.mkdir()
    config = rollback_config(directory, "legacy", corrupt_dataset(tmp_path, "legacy", SHORT_WINDOW, steps=SHORT_STEPS),
                             health={"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 10}},
                             checkpoint_steps=SHORT_CHECKPOINTS, steps=SHORT_STEPS)
    run = Launched.start(directory, "run", str(config), "--plain")
    interrupted = run_dir(directory, "legacy")
    alerts = interrupted / "alerts.jsonl"
    run.wait_for(lambda: alerts.is_file() and '"detector": "rollback"' in alerts.read_text(encoding="utf-8"))
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130, run.output[-3000:]
    recorded = info(interrupted)
    assert recorded["status"] == "interrupted" and len(recorded["rollbacks"]) == 1
    assert processes_of(interrupted) == []


def test_two_ranks_roll_back_to_the_same_step_and_skip_the_same_data(tmp_path: Path) -> None:
    """msrun, two data-parallel ranks, each reading its own shard of a dataset whose batches of steps 48-52 of 65 are
    corrupt on both ranks: the writing rank's loss spike rolls both ranks back to step 40, mindformers on each rank
    says it skipped the same data, and the run completes (exit 0). Each rank's batch is 8, as the single-rank cases'
    (of the quickstart's 2 the writing rank's loss at step 48 was as noisy and as high as 2/3 of the corrupt data's: a
    spike barely over the detector's 1.5x). A training of its own: msrun's ranks."""
    from helpers_ranks import RankRun

    batch = ("runner_config.batch_size", "train_dataset.batch_size", "model.model_config.batch_size")
    data = corrupt_dataset(tmp_path, "legacy", SHORT_WINDOW, steps=SHORT_STEPS, samples_per_step=2 * BATCH)
    checkpoints = {"type": "CheckpointMonitor", "prefix": "llama_tiny", "save_checkpoint_steps": SHORT_CHECKPOINTS,
                   "keep_checkpoint_max": 5, "integrated_save": False, "async_save": False}
    run = RankRun.start(tmp_path, steps=SHORT_STEPS, log_interval=1, callbacks=[checkpoints],
                        health={"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 10}},
                        extra=[f"train_dataset.data_loader.dataset_dir={data}",
                               "train_dataset.data_loader.shuffle=False",
                               f"train_dataset.data_loader.num_samples={SHORT_STEPS * BATCH}",
                               *(f"{key}={BATCH}" for key in batch)])
    assert run.finish() == 0, run.stderr[-3000:]
    (made,) = info(run.run_dir)["rollbacks"]
    assert made["checkpoint_step"] == 40 and made["skip_to"] >= SHORT_WINDOW[1]
    skipped = [(run.run_dir / "logs" / "output" / "log" / f"rank_{rank}" / "info.log").read_text(
        encoding="utf-8", errors="replace").count(f"dataset skip {made['skip_to']} steps") for rank in (0, 1)]
    assert skipped == [1, 1], skipped
    assert [a["resumed_from_step"] for a in info(run.run_dir)["attempts"]] == [None, 40]
    assert max(r["step"] for r in records(run.run_dir)) == SHORT_STEPS - made["skipped_steps"]
