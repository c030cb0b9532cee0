"""What the canonical completed runs recorded, checked against what the real mindformers Trainer returned at every
step (tests/rank_callbacks.DumpOutputs) and read back with the real readers: the JSON lines file, MindInsight's
REST API, TensorBoard's EventAccumulator and an MLflow server's REST API, both model paths. Per-layer gradient
norms: one ``grad_norm/<group>`` per block plus the embedding, the final norm and the head, equal to the root sum
of the wrapper's squared sums of that group, their root sum of squares the global grad_norm."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any

import pytest
import shared_session
from canonical import PROJECT, session_mindinsight, session_mlflow
from engine_support import get_json, post_json, served_scalars, summary_scalars
from helpers_training import mindformers_step_lines

from msmon.engine.grad_groups import group_of

pytestmark = [pytest.mark.board, pytest.mark.compat_smoke]

MODELS = ["legacy", "mcore"]
SCALARS = ["loss", "grad_norm", "learning_rate", "throughput", "samples_per_s", "step_time_ms", "loss_scale",
           "grad_norm_mean", "grad_norm_max", "loss_mean"]
GROUPS = ["embedding", "layers.0", "layers.1", "final_norm", "head"]
NAN_VALUES = {"loss": math.nan, "grad_norm": math.inf, "learning_rate": -math.inf}


@pytest.fixture(params=MODELS)
def completed(request: pytest.FixtureRequest, canonical):
    return canonical(f"completed_{request.param}")


def value(outputs: dict[int, list[list[float]]], step: int, index: int) -> float:
    return outputs[step][index][0]


def test_records_hold_what_the_trainer_returned(completed) -> None:
    _, outputs = completed.outputs()
    rows = completed.records()
    for record in rows:
        step = record["step"]
        assert record["loss"] == pytest.approx(value(outputs, step, 0), rel=1e-7)
        assert record["overflow"] == int(value(outputs, step, 1)) and record["loss_scale"] == value(outputs, step, 2)
        assert record["learning_rate"] == pytest.approx(value(outputs, step, 3), rel=1e-7)
        assert record["grad_norm"] == pytest.approx(value(outputs, step, 4), rel=1e-7)
        assert record["global_step"] == step and record["epoch"] == 1 and record["rank"] == 0
        seconds = record["step_time_ms"] / 1000
        assert record["throughput_per_device"] == pytest.approx(2 * 64 / seconds)
        assert record["samples_per_s"] == pytest.approx(2 / seconds)
        assert 100 < record["host_memory_mb"] < 20000
    info = completed.info
    assert all(b["status"] == "ok" and b["written"] == len(rows) for b in info["backends"].values()), info["backends"]


def test_interval_statistics_hold_every_step_of_the_interval(completed) -> None:
    _, outputs = completed.outputs()
    interval = completed.log_interval
    for record in completed.records():
        steps = range(record["step"] - interval + 1, record["step"] + 1)
        norms, losses = [value(outputs, s, 4) for s in steps], [value(outputs, s, 0) for s in steps]
        assert len(set(norms)) == interval  # ten different real values: the held Tensors are not one buffer
        assert record["grad_norm_mean"] == pytest.approx(sum(norms) / interval, rel=1e-6)
        assert record["grad_norm_max"] == pytest.approx(max(norms), rel=1e-7)
        assert record["loss_mean"] == pytest.approx(sum(losses) / interval, rel=1e-6)


def test_verbose_start_line_and_one_line_per_logged_step(completed) -> None:
    out = completed.output
    starts = [line for line in out.splitlines() if "Monitor callback registered successfully" in line]
    assert len(starts) == 1
    for part in ("file,mindinsight,tensorboard,mlflow", "loss,grad_norm", f"log_interval={completed.log_interval}"):
        assert part in starts[0]
    steps = re.findall(r"msmon: step (\d+) \| loss", out)
    assert [int(s) for s in steps] == [r["step"] for r in completed.records()]
    assert not re.search(r"msmon: step \d+/\d+", out)  # the verbose line replaces the plain progress line
    assert "tokens/s" in out
    log = (completed.run_dir / "logs" / "msmon.log").read_text().splitlines()
    warned = [line for line in log if " WARNING " in line or " ERROR " in line]
    assert [line for line in warned if "HEALTH ALERT" not in line] == [], warned  # msmon warned about nothing
    assert len(warned) == len(completed.alerts())  # but the alerts (the grown mcore run's one)


def test_heartbeat_names_the_last_step(completed) -> None:
    assert not (completed.run_dir / "heartbeat.json").exists()  # one liveness file per rank
    beat = json.loads((completed.run_dir / "heartbeats" / "rank_0.json").read_text())
    assert beat["ended"] == completed.steps and beat["rank"] == 0 and beat["host"]
    assert beat["pid"] != completed.info["pid"]  # written by the training process, not by msmon run


def test_mindinsight_serves_every_metric(completed) -> None:
    url = session_mindinsight()
    train_id = f"./{completed.name}"
    rows = completed.records()
    for tag in SCALARS:
        query = f"train_id={train_id}&tag={tag}/scalar"
        points = served_scalars(url, query, len(rows))
        assert [p["step"] for p in points] == [r["step"] for r in rows], tag
        for point, record in zip(points, rows, strict=True):
            assert point["value"] == pytest.approx(record[tag], rel=1e-6), tag


def test_tensorboard_reader_sees_every_metric(completed) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(completed.run_dir))
    events.Reload()
    rows = completed.records()
    for tag in SCALARS:
        scalars = events.Scalars(tag)
        assert [(e.step, e.wall_time) for e in scalars] == [(r["step"], pytest.approx(r["time"])) for r in rows]
        assert [e.value for e in scalars] == [pytest.approx(r[tag], rel=1e-6) for r in rows]


def mlflow_run(run_name: str) -> dict[str, Any]:
    url = session_mlflow()
    experiment = get_json(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={PROJECT}")["experiment"]
    found = post_json(f"{url}/api/2.0/mlflow/runs/search", {
        "experiment_ids": [experiment["experiment_id"]], "filter": f"attributes.run_name = '{run_name}'"})
    (run,) = found["runs"]
    return run


def mlflow_history(run_id: str, metric: str) -> list[dict[str, Any]]:
    url = f"{session_mlflow()}/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key={metric}"
    return sorted(get_json(url)["metrics"], key=lambda m: m["step"])


def test_mlflow_server_holds_params_and_metric_histories(completed) -> None:
    run = mlflow_run(completed.name)
    assert run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["model.model_config.seq_length"] == "64"
    assert params["runner_wrapper.type"] == "MsmonCPUTrainOneStepCell"
    rows = completed.records()
    for tag in SCALARS:
        history = mlflow_history(run["info"]["run_id"], tag)
        assert [int(m["step"]) for m in history] == [r["step"] for r in rows]
        assert [m["value"] for m in history] == [pytest.approx(r[tag], rel=1e-12) for r in rows]
        assert [int(m["timestamp"]) for m in history] == [int(r["time"] * 1000) for r in rows]


def test_alerts_reach_the_backends_that_show_text(canonical) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = canonical("diverged_stop_legacy")
    first = run.alerts()[0]
    events = EventAccumulator(str(run.run_dir))
    events.Reload()
    texts = events.Tensors("alerts/text_summary")
    assert texts[0].step == first["step"]
    assert f"{first['detector']}: ".encode() in texts[0].tensor_proto.string_val[0]
    tags = {t["key"]: t["value"] for t in mlflow_run(run.name)["data"]["tags"]}
    assert int(tags["msmon.alert_count"]) == len(run.alerts())
    assert tags["msmon.last_alert"].startswith(f"step {run.alerts()[-1]['step']} ")


def _nan_run(directory: Path) -> dict[str, Any]:
    """A run whose records hold NaN, +Inf and -Inf, written by every backend into the canonical project."""
    from dataclasses import replace

    from engine_support import settings

    from msmon.engine.session import MonitorSession

    save = shared_session.root() / "canonical" / "monitor_logs"
    base = settings(save, monitor_type=["file", "mindinsight", "tensorboard", "mlflow"], project_name=PROJECT,
                    run_name="nan_run")
    nan = replace(base, mlflow=replace(base.mlflow, tracking_uri=session_mlflow(), timeout_s=30.0))
    session = MonitorSession(nan, nan.run_dir()).start()
    for step in (1, 2, 3):
        session.writer.put({"step": step, "time": time.time(), "rank": 0, **NAN_VALUES})
    summary = session.close("completed")
    return {"run_dir": str(nan.run_dir()), "backends": summary.backends}


def test_nan_and_inf_encodings_in_every_backend() -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    made = shared_session.once("nan_run", _nan_run)
    run_dir = Path(made["run_dir"])
    assert all(b["written"] == 3 for b in made["backends"].values()), made["backends"]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert math.isnan(rows[0]["loss"]) and rows[0]["grad_norm"] == math.inf and rows[0]["learning_rate"] == -math.inf

    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert math.isnan(events.Scalars("loss")[0].value)
    assert events.Scalars("grad_norm")[0].value == math.inf and events.Scalars("learning_rate")[0].value == -math.inf

    # the summary file holds the float32 values; MindInsight's REST API turns every non-finite value into null
    stored = summary_scalars(run_dir)[1]
    assert math.isnan(stored["loss"]) and stored["grad_norm"] == math.inf and stored["learning_rate"] == -math.inf
    url = session_mindinsight()
    for tag in NAN_VALUES:
        query = f"train_id=./nan_run&tag={tag}/scalar"
        points = served_scalars(url, query, len(rows))
        assert [(p["step"], p["value"]) for p in points] == [(1, None), (2, None), (3, None)]

    run_id = mlflow_run("nan_run")["info"]["run_id"]
    values = {tag: mlflow_history(run_id, tag)[0]["value"] for tag in NAN_VALUES}
    assert values["loss"] == "NaN"
    assert values["grad_norm"] == pytest.approx(1.7976931348623157e308)
    assert values["learning_rate"] == pytest.approx(-1.7976931348623157e308)


# -- per-layer gradient norms --------------------------------------------------------------------------------------
def group_keys(record: dict[str, Any]) -> dict[str, float]:
    return {key.removeprefix("grad_norm/"): value for key, value in record.items() if key.startswith("grad_norm/")}


def test_every_record_has_one_norm_per_group_and_their_root_sum_of_squares_is_grad_norm(completed) -> None:
    names, outputs = completed.outputs()
    assert all(len(step) == 7 for step in outputs.values())  # msmon turned local_norm on: 7 outputs, not 5
    for record in completed.records():
        groups = group_keys(record)
        assert list(groups) == GROUPS  # one per block, the embedding, the final norm, the head (no parameter left)
        root = math.sqrt(sum(v * v for v in groups.values()))
        assert root == pytest.approx(record["grad_norm"], rel=2e-6)  # float32 global norm, float64 group sums
        squares = outputs[record["step"]][5]
        for group, norm in groups.items():
            mine = [s for name, s in zip(names, squares, strict=True) if group_of(name) == group]
            assert norm == pytest.approx(math.sqrt(math.fsum(mine)), rel=1e-6), group


def test_every_parameter_of_the_model_belongs_to_a_named_group(completed) -> None:
    names, outputs = completed.outputs()
    assert len(names) == len(outputs[1][5])
    assert {group_of(name) for name in names} == set(GROUPS)
    assert sum(1 for n in names if group_of(n) == "layers.0") == sum(1 for n in names if group_of(n) == "layers.1") > 3


def test_mindformers_log_keeps_its_step_lines_without_the_raw_arrays(completed) -> None:
    text = (completed.run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace")
    assert "norm_size" not in text and "local_norm:" not in text
    printed = mindformers_step_lines(completed.run_dir)
    assert sorted(printed) == list(range(1, completed.steps + 1))  # MFLossMonitor still prints every step


def test_board_backends_hold_every_group_series(completed) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(completed.run_dir))
    events.Reload()
    url, rows = session_mindinsight(), completed.records()
    for group in GROUPS:
        tag = f"grad_norm/{group}"
        assert [(e.step, e.value) for e in events.Scalars(tag)] == [(r["step"], pytest.approx(r[tag], rel=1e-6))
                                                                   for r in rows]
        query = f"train_id=./{completed.name}&tag={tag}/scalar"
        points = served_scalars(url, query, len(rows))
        assert [(p["step"], p["value"]) for p in points] == [(r["step"], pytest.approx(r[tag], rel=1e-6))
                                                             for r in rows]


def test_the_loss_is_mindformers_printed_loss_with_micro_batch_interleaving(canonical) -> None:
    """micro_batch_interleave_num 2 (one CPU process, legacy model; the mcore models refuse it): the train step
    returns the sum of both micro batches, MFLossMonitor prints half of it, msmon records what it prints."""
    run = canonical("interrupted_legacy")
    printed = mindformers_step_lines(run.run_dir)
    rows = run.records()
    assert rows
    for row in rows:
        assert row["loss"] == pytest.approx(printed[row["step"]]["loss"], abs=1e-5)
    assert rows[0]["loss"] < 8.0  # ln(1000) = 6.9 at the start: not the sum of two micro batches
