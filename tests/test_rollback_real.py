"""The article's night on the real Trainer: a dataset whose batches in a window of steps are corrupt (shuffle off, so
the window is known) makes the loss spike; ``action: rollback`` goes back to the checkpoint before it, skips the
data, and the run ends as a clean run would. Each training here needs its own corrupt dataset, which no canonical
run has."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from conftest import run_msmon
from helpers_rollback import BATCH, CHECKPOINT_STEPS, STEPS, WINDOW, corrupt_dataset, rollback_config, run_dir
from launch import Launched, records

pytestmark = pytest.mark.training

FINAL_LOGS = 30  # the final loss: the mean of this many last logged steps


def train(tmp_path: Path, name: str, model: str, data: Path, *, health: dict[str, Any],
          checkpoint_steps: int = CHECKPOINT_STEPS, **monitor: Any) -> tuple[int, Path, str]:
    """``msmon run`` of ``rollback_config``: the exit code, the run directory and the terminal output."""
    directory = tmp_path / name
    directory.mkdir()
    config = rollback_config(directory, model, data, health=health, checkpoint_steps=checkpoint_steps, **monitor)
    run = Launched.start(directory, "run", str(config), "--plain")
    return run.finish(), run_dir(directory, model), run.output


def boards_show(run_dir: Path, mlflow_db: Path) -> list[list[tuple[int, float]]]:
    """The loss curve (step, value) TensorBoard's and MLflow's own readers give for the run (MLflow: the run no
    other superseded)."""
    from mlflow import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    tensorboard = sorted((e.step, e.value) for e in accumulator.Scalars("loss"))
    client = MlflowClient(tracking_uri=f"sqlite:///{mlflow_db}")
    runs = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])
    (current,) = [run for run in runs if "msmon.superseded_by" not in run.data.tags]
    assert len(runs) == 2 and current.data.tags["msmon.continues"] in {run.info.run_id for run in runs}
    mlflow = sorted((m.step, m.value) for m in client.get_metric_history(current.info.run_id, "loss"))
    return [tensorboard, mlflow]


def final_loss(rows: list[dict[str, Any]], last_step: int) -> float:
    return statistics.mean(r["loss"] for r in rows if last_step - FINAL_LOGS < r["step"] <= last_step)


def info(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("model", ["legacy", "mcore"])
def test_a_loss_spike_from_bad_data_is_rolled_back_and_skipped(tmp_path: Path, model: str) -> None:
    """Rollback: exit 0, one rollback to the step-100 checkpoint whose skipped data covers the corrupt window, one
    honest curve (each step once, no value near the spike after step 100; the spike kept in metrics.attempt-1.jsonl),
    and a final loss within 20% of a clean run's at the same step. ``action: alert`` on the same data shows the
    spike in its curve, and `msmon replay` of that run with the rollback config says where the rollback went."""
    spike = {"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 30}}
    boards = {"monitor_type": ["file", "tensorboard", "mlflow"],
              "mlflow": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"}} if model == "legacy" else {}
    code, run_dir, output = train(tmp_path, "rollback", model, corrupt_dataset(tmp_path, model, WINDOW), health=spike,
                                  **boards)
    assert code == 0, output[-3000:]
    (made,) = info(run_dir)["rollbacks"]
    assert made["detector"] == "loss_spike" and made["checkpoint_step"] == 100
    assert made["checkpoint_step"] < made["onset_step"] <= WINDOW[0] + 1 and made["alert_step"] < WINDOW[1]
    assert made["skip_from"] <= WINDOW[0] - 1 and made["skip_to"] >= WINDOW[1]  # every corrupt batch skipped
    assert made["skipped_steps"] == made["skip_to"] - 100 and made["skipped_samples"] == BATCH * made["skipped_steps"]
    assert made["time_lost_s"] > 0
    rows = records(run_dir)
    steps = [r["step"] for r in rows]
    assert steps == list(range(1, STEPS - made["skipped_steps"] + 1))  # each step once, the skipped steps not run
    superseded = records(run_dir, "metrics.attempt-1.jsonl")
    peak = max(r["loss"] for r in superseded)
    assert min(r["step"] for r in superseded) == 101 and peak > 5.0  # the spike, kept aside
    assert max(r["loss"] for r in rows if r["step"] > 100) < 0.7 * peak
    if boards:  # TensorBoard and MLflow show the same curve: each step once, the rolled-back values gone
        for shown in boards_show(run_dir, tmp_path / "mlflow.db"):
            assert [step for step, _ in shown] == steps
            assert [value for _, value in shown] == pytest.approx([r["loss"] for r in rows], rel=1e-6)
    attempts = info(run_dir)["attempts"]
    assert [(a["reason"], a["status"], a["resumed_from_step"]) for a in attempts] == \
        [("start", "stopped_by_monitor", None), ("rollback", "completed", 100)]
    assert "rollback: loss_spike from step" in output and "rollbacks: 1" in output
    report = run_msmon("report", str(run_dir))
    assert report.code == 0, report.stderr
    assert '"label":"rollback: loss_spike from step' in (run_dir / "report.html").read_text(encoding="utf-8")

    clean_code, clean_dir, clean_output = train(tmp_path, "clean", model, corrupt_dataset(tmp_path, model, None),
                                                health={})
    assert clean_code == 0, clean_output[-3000:]
    last = steps[-1]
    rolled, clean = final_loss(rows, last), final_loss(records(clean_dir), last)
    alert_code, alert_dir, _ = train(tmp_path, "alert", model, corrupt_dataset(tmp_path, model, WINDOW),
                                     health={"rollback": {"skip_steps": 30}})
    assert alert_code == 0
    alerted = records(alert_dir)
    assert max(r["loss"] for r in alerted if WINDOW[0] <= r["step"] <= WINDOW[1]) > 5.0  # the spike, in its curve
    assert "loss_spike" in {a["detector"] for a in records(alert_dir, "alerts.jsonl")}
    replayed = run_msmon("replay", str(alert_dir), "--json", "--config", str(tmp_path / "rollback" / "quickstart.yaml"))
    assert replayed.code == 0, replayed.stderr
    (would,) = [a["rollback"] for a in json.loads(replayed.stdout) if a["detector"] == "loss_spike"]
    assert (would["checkpoint_step"], would["skip_to"]) == (made["checkpoint_step"], made["skip_to"])  # as it went
    print(f"measured ({model}): mean loss of steps {last - FINAL_LOGS + 1}-{last}: rollback {rolled:.3f}, clean "
          f"{clean:.3f}, alert only {final_loss(alerted, last):.3f}; time lost {made['time_lost_s']} s")
    assert rolled == pytest.approx(clean, rel=0.2)


@pytest.mark.parametrize("model", ["legacy", "mcore"])
@pytest.mark.parametrize("epochs", [1, 2])
def test_a_rollback_near_the_end_of_the_data_never_skips_past_it(tmp_path: Path, model: str, epochs: int) -> None:
    """A held-out night: a corrupt window in the last 25% of the data asked the pipeline to skip to batch 420 of 400
    (MindSpore: "reset step must be less than dataset_size * num_epochs"), the rollback attempt failed (exit 3). Now
    the bad window is skipped and the margin past it shortened to what the data holds, counted over every epoch.
    One epoch of 60 steps with steps 48-52 corrupt: back to step 40, the data skipped to its last batch, the run
    completes. Two epochs of 50 steps whose last 3 batches are corrupt: the first rollback skips from epoch 1 into
    epoch 2, the same batches of epoch 2 spike again at the data's end (the alert on the third corrupt step, the
    detector's span), with nothing left after them: the run ends completed, its data exhausted, and says so."""
    per_epoch, window = (60, (48, 52)) if epochs == 1 else (50, (48, 50))
    data = corrupt_dataset(tmp_path, model, window, steps=per_epoch)
    directory = tmp_path / "near_end"
    directory.mkdir()
    config = rollback_config(directory, model, data, health={"loss_spike": {"action": "rollback"},
                                                             "rollback": {"skip_steps": 20}}, checkpoint_steps=10)
    run = Launched.start(directory, "run", str(config), "--plain", f"runner_config.epochs={epochs}",
                         f"train_dataset.data_loader.num_samples={per_epoch * BATCH}")
    code, rolled = run.finish(), run_dir(directory, model)
    assert code == 0, run.output[-3000:]
    recorded = info(rolled)
    assert recorded["status"] == "completed" and "Cannot reset the pipeline" not in run.output
    data_end = per_epoch * epochs
    assert all(made["skip_to"] <= data_end - 1 for made in recorded["rollbacks"])
    first = recorded["rollbacks"][0]
    assert first["checkpoint_step"] < first["onset_step"] <= window[0] + 1 and first["skip_to"] >= window[1]
    steps = [r["step"] for r in records(rolled)]
    assert steps == list(range(1, steps[-1] + 1))  # each step once
    if epochs == 1:
        assert first["skip_to"] == data_end - 1 and "the margin past the bad window shortened to" in run.output
        assert steps[-1] == first["checkpoint_step"] + 1 and "note" not in recorded  # the last batch trained
    else:
        assert first["skip_to"] > per_epoch  # counted across epochs: into epoch 2
        assert len(recorded["rollbacks"]) == 1 and recorded["note"].startswith("its data exhausted: the loss_spike")
        assert f"of the data's {data_end}" in recorded["note"] and "run completed: its data exhausted" in run.output


def test_a_nan_loss_from_bad_data_is_rolled_back_and_skipped(tmp_path: Path) -> None:
    """mcore: a loss mask of NaN in the window makes the loss NaN; ``nonfinite: rollback`` rolls back to step 100,
    skips the window, and the run completes with no NaN in its curve."""
    health = {"nonfinite": {"action": "rollback"}, "rollback": {"skip_steps": 30}}
    data = corrupt_dataset(tmp_path, "mcore", WINDOW, kind="nan_mask")
    code, run_dir, output = train(tmp_path, "nan", "mcore", data, health=health)
    assert code == 0, output[-3000:]
    (made,) = info(run_dir)["rollbacks"]
    assert (made["detector"], made["checkpoint_step"]) == ("nonfinite", 100) and made["skip_to"] >= WINDOW[1]
    assert all(r["loss"] == r["loss"] for r in records(run_dir))  # no NaN survives
    assert any(r["loss"] != r["loss"] for r in records(run_dir, "metrics.attempt-1.jsonl"))


def test_no_checkpoint_before_the_onset_stops_the_run_and_says_why(tmp_path: Path) -> None:
    """A spike at step 80 with the first checkpoint at step 100: exit 4, run.json's error names the step it needed;
    nothing rolled back."""
    health = {"loss_spike": {"action": "rollback"}}
    code, run_dir, output = train(tmp_path, "early", "legacy", corrupt_dataset(tmp_path, "legacy", (80, 90)),
                                  health=health, checkpoint_steps=100)
    assert code == 4, output[-3000:]
    recorded = info(run_dir)
    assert recorded["status"] == "stopped_by_monitor" and not recorded.get("rollbacks")
    assert "not rolled back: no complete checkpoint before step" in recorded["error"]
    assert len(recorded["attempts"]) == 1


@pytest.mark.parametrize(("max_rollbacks", "code"), [(3, 0), (1, 4)])
def test_a_second_spike_in_the_replayed_window_rolls_back_again_within_the_budget(
        tmp_path: Path, max_rollbacks: int, code: int) -> None:
    """``skip_steps: 10`` skips too little: the data after the first rollback is still corrupt, so the loss spikes
    again right after step 100. With 3 rollbacks the run rolls back a second time (to the same checkpoint, the data
    skipped further) and completes; with 1 it stops there (exit 4) and says the budget is spent."""
    health = {"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 10, "max_rollbacks": max_rollbacks}}
    ended, run_dir, output = train(tmp_path, "again", "legacy", corrupt_dataset(tmp_path, "legacy", WINDOW),
                                   health=health)
    assert ended == code, output[-3000:]
    recorded = info(run_dir)
    made = recorded["rollbacks"]
    if code == 4:
        assert len(made) == 1 and "not rolled back: no rollback left (1 of 1 used)" in recorded["error"]
        return
    assert [m["checkpoint_step"] for m in made] == [100, 100] and made[1]["skip_from"] == made[0]["skip_to"]
    assert made[1]["onset_step"] <= 110 and made[1]["skip_to"] >= WINDOW[1]
    assert [a["reason"] for a in recorded["attempts"]] == ["start", "rollback", "rollback"]


def test_ctrl_c_during_a_rollback_ends_the_run_interrupted_with_nothing_left(tmp_path: Path) -> None:
    """SIGINT the moment the rollback alert is written (the next attempt is starting): exit 130, run.json
    interrupted with the rollback listed, and no process of the run left."""
    import signal

    from helpers_ranks import processes_of

    directory = tmp_path / "interrupted"
    directory.mkdir()
    config = rollback_config(directory, "legacy", corrupt_dataset(tmp_path, "legacy", WINDOW),
                             health={"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 30}})
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
    """msrun, two data-parallel ranks, each reading its own shard of a dataset whose batches of steps 150-170 are
    corrupt on both ranks: the writing rank's loss spike rolls both ranks back to step 100, mindformers on each
    rank says it skipped the same data, and the run completes (exit 0)."""
    from helpers_ranks import RankRun

    steps, per_rank = 240, 2
    data = corrupt_dataset(tmp_path, "legacy", WINDOW, steps=steps, samples_per_step=2 * per_rank)
    checkpoints = {"type": "CheckpointMonitor", "prefix": "llama_tiny", "save_checkpoint_steps": CHECKPOINT_STEPS,
                   "keep_checkpoint_max": 5, "integrated_save": False, "async_save": False}
    run = RankRun.start(tmp_path, steps=steps, log_interval=1, callbacks=[checkpoints],
                        health={"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 30}},
                        extra=[f"train_dataset.data_loader.dataset_dir={data}",
                               "train_dataset.data_loader.shuffle=False"])
    assert run.finish() == 0, run.stderr[-3000:]
    (made,) = info(run.run_dir)["rollbacks"]
    assert made["checkpoint_step"] == 100 and made["skip_to"] >= WINDOW[1]
    skipped = [(run.run_dir / "logs" / "output" / "log" / f"rank_{rank}" / "info.log").read_text(
        encoding="utf-8", errors="replace").count(f"dataset skip {made['skip_to']} steps") for rank in (0, 1)]
    assert skipped == [1, 1], skipped
    assert [a["resumed_from_step"] for a in info(run.run_dir)["attempts"]] == [None, 100]
    assert max(r["step"] for r in records(run.run_dir)) == steps - made["skipped_steps"]
