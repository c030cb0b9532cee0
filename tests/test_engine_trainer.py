"""One real mindformers Trainer run on CPU monitored by every backend, read back with the real readers:
the JSONL file, MindInsight's REST API, TensorBoard's EventAccumulator and an MLflow server's REST API."""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from engine_support import (
    MindInsightServer,
    MlflowServer,
    post_json,
    read_jsonl,
    summary_scalars,
    wait_until,
)
from helpers_training import QUICKSTARTS, quickstart_parts, write_quickstart_config

from msmon.config.coerce import build
from msmon.config.schema import MonitorSettings
from msmon.engine.session import MonitorSession, SessionSummary

pytestmark = [pytest.mark.training, pytest.mark.board, pytest.mark.compat_smoke]

STEPS, INTERVAL = 40, 5
METRICS = ["loss", "grad_norm", "learning_rate", "throughput", "global_step", "step_time_ms", "loss_scale",
           "overflow", "epoch", "host_memory_mb"]
SCALARS = ["loss", "grad_norm", "learning_rate", "throughput", "samples_per_s", "step_time_ms", "loss_scale",
           "grad_norm_mean", "grad_norm_max", "loss_mean"]
DRIVER = Path(__file__).resolve().parent / "engine_trainer_driver.py"
NAN_VALUES = {"loss": math.nan, "grad_norm": math.inf, "learning_rate": -math.inf}


@dataclass
class Run:
    settings: MonitorSettings
    run_dir: Path
    summary: SessionSummary
    records: list[dict[str, Any]]
    outputs: dict[int, list[Any]]
    logs: list[tuple[int, str]]
    mlflow: MlflowServer
    mindinsight: MindInsightServer
    nan_dir: Path
    pid: int  # of the training process


def _nan_session(settings: MonitorSettings) -> Path:
    """A second run whose records hold NaN, +Inf and -Inf, written by every backend."""
    from dataclasses import replace

    nan = replace(settings, run_name="nan_run", verbose=False)
    session = MonitorSession(nan, nan.run_dir()).start()
    for step in (1, 2, 3):
        session.writer.put({"step": step, "time": time.time(), "rank": 0, **NAN_VALUES})
    session.close("completed")
    return nan.run_dir()


@pytest.fixture(scope="module", params=list(QUICKSTARTS))
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp(f"engine_trainer_{request.param}")
    mlflow = MlflowServer(base / "mlflow")
    mindinsight = None
    try:
        path = write_quickstart_config(
            base, steps=STEPS, log_interval=INTERVAL, verbose=True, track_metrics=METRICS,
            monitor_type=["file", "mindinsight", "tensorboard", "mlflow"], mlflow={"tracking_uri": mlflow.url},
            source=QUICKSTARTS[request.param],
        )
        _, monitor = quickstart_parts(path)
        settings, findings = build(MonitorSettings, monitor, "monitor_config")
        assert not findings
        out = base / "result.json"
        done = subprocess.run([sys.executable, str(DRIVER), str(path), str(out)], cwd=base, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(out.read_text())
        summary = SessionSummary(**result["summary"])
        outputs = {int(step): values for step, values in result["outputs"].items()}
        logs = [(level, text) for level, text in result["logs"]]
        nan_dir = _nan_session(settings)
        mindinsight = MindInsightServer(Path(settings.save_dir) / settings.project_name)
        yield Run(settings, settings.run_dir(), summary, result["records"], outputs, logs, mlflow, mindinsight,
                  nan_dir, result["pid"])
    finally:
        if mindinsight is not None:
            mindinsight.stop()
        mlflow.stop()


def test_records_hold_what_the_trainer_returned(run: Run):
    assert [r["step"] for r in run.records] == list(range(INTERVAL, STEPS + 1, INTERVAL))
    for record in run.records:
        loss, overflow, loss_scale, lr, global_norm = run.outputs[record["step"]]
        assert record["loss"] == pytest.approx(loss, rel=1e-7)
        assert record["grad_norm"] == pytest.approx(global_norm, rel=1e-7)
        assert record["learning_rate"] == pytest.approx(lr, rel=1e-7)
        assert record["loss_scale"] == loss_scale and record["overflow"] == int(overflow)
        assert record["global_step"] == record["step"] and record["epoch"] == 1 and record["rank"] == 0
        seconds = record["step_time_ms"] / 1000
        assert record["throughput_per_device"] == pytest.approx(2 * 64 / seconds)
        assert record["samples_per_s"] == pytest.approx(2 / seconds)
        assert 100 < record["host_memory_mb"] < 20000
    assert run.records[0]["loss"] > run.records[-1]["loss"] - 1.0  # a real, finite loss near ln(1000)
    assert run.summary.dropped_records == 0 and run.summary.records_written == STEPS // INTERVAL
    assert all(b["status"] == "ok" and b["written"] == STEPS // INTERVAL for b in run.summary.backends.values())


def test_interval_statistics_hold_every_step_of_the_interval(run: Run):
    for record in run.records:
        steps = range(record["step"] - INTERVAL + 1, record["step"] + 1)
        norms, losses = [run.outputs[s][4] for s in steps], [run.outputs[s][0] for s in steps]
        assert len(set(norms)) == INTERVAL  # five different real values: the held Tensors are not one buffer
        assert record["grad_norm_mean"] == pytest.approx(sum(norms) / INTERVAL, rel=1e-6)
        assert record["grad_norm_max"] == pytest.approx(max(norms), rel=1e-7)
        assert record["loss_mean"] == pytest.approx(sum(losses) / INTERVAL, rel=1e-6)


def test_jsonl_equals_the_records(run: Run):
    assert read_jsonl(run.run_dir / "metrics.jsonl") == run.records


def test_verbose_start_line_and_one_line_per_logged_step(run: Run):
    starts = [text for _, text in run.logs if "Monitor callback registered successfully" in text]
    assert len(starts) == 1
    for part in ("file,mindinsight,tensorboard,mlflow", "loss,grad_norm", "log_interval=5", str(run.run_dir)):
        assert part in starts[0]
    steps = [text for _, text in run.logs if text.startswith("msmon: step ")]
    assert len(steps) == STEPS // INTERVAL and "loss" in steps[0] and "tokens/s" in steps[0]
    assert not [text for level, text in run.logs if level >= logging.WARNING]


def test_heartbeat_names_the_last_step(run: Run):
    import json

    beat = json.loads((run.run_dir / "heartbeat.json").read_text())
    assert beat["step"] == STEPS and beat["pid"] == run.pid and beat["rank"] == 0 and beat["host"]


def test_mindinsight_serves_every_metric(run: Run):
    train_id = f"./{run.settings.run_name}"
    for tag in SCALARS:
        points = wait_until(lambda tag=tag: run.mindinsight.scalars(train_id, tag), 30)
        assert points, tag
        assert [p["step"] for p in points] == [r["step"] for r in run.records]
        for point, record in zip(points, run.records, strict=True):
            assert point["value"] == pytest.approx(record[tag], rel=1e-6), tag


def test_tensorboard_reader_sees_every_metric(run: Run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.run_dir))
    events.Reload()
    for tag in SCALARS:
        scalars = events.Scalars(tag)
        assert [(e.step, e.wall_time) for e in scalars] == [(r["step"], pytest.approx(r["time"])) for r in run.records]
        assert [e.value for e in scalars] == [pytest.approx(r[tag], rel=1e-6) for r in run.records]


def test_alerts_reach_the_backends_that_show_text(run: Run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.run_dir))
    events.Reload()
    (text,) = events.Tensors("alerts/text_summary")
    assert text.step == 20 and b"loss_spike: loss spiked" in text.tensor_proto.string_val[0]
    tags = {t["key"]: t["value"] for t in _mlflow_run(run, run.settings.run_name)["data"]["tags"]}
    assert tags["msmon.alert_count"] == "1" and tags["msmon.last_alert"] == "step 20 warning loss_spike: loss spiked"
    assert not (run.run_dir / "alerts.jsonl").exists()  # the health monitor's file, not the file backend's


def _mlflow_run(run: Run, run_name: str) -> dict[str, Any]:
    experiment = run.mlflow.api("experiments/get-by-name", experiment_name=run.settings.project_name)["experiment"]
    found = post_json(f"{run.mlflow.url}/api/2.0/mlflow/runs/search", {
        "experiment_ids": [experiment["experiment_id"]], "filter": f"attributes.run_name = '{run_name}'"})
    (mlflow_run,) = found["runs"]
    return mlflow_run


def test_mlflow_server_holds_params_and_metric_histories(run: Run):
    mlflow_run = _mlflow_run(run, run.settings.run_name)
    assert mlflow_run["info"]["status"] == "FINISHED"
    params = {p["key"]: p["value"] for p in mlflow_run["data"]["params"]}
    assert params["model.model_config.seq_length"] == "64"
    assert params["runner_wrapper.type"] == "MsmonCPUTrainOneStepCell"
    for tag in SCALARS:
        history = run.mlflow.api("metrics/get-history", run_id=mlflow_run["info"]["run_id"], metric_key=tag)["metrics"]
        history.sort(key=lambda m: m["step"])
        assert [int(m["step"]) for m in history] == [r["step"] for r in run.records]
        assert [m["value"] for m in history] == [pytest.approx(r[tag], rel=1e-12) for r in run.records]
        assert [int(m["timestamp"]) for m in history] == [int(r["time"] * 1000) for r in run.records]


def test_nan_and_inf_encodings_in_every_backend(run: Run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = read_jsonl(run.nan_dir / "metrics.jsonl")
    assert math.isnan(records[0]["loss"]) and records[0]["grad_norm"] == math.inf
    assert records[0]["learning_rate"] == -math.inf

    events = EventAccumulator(str(run.nan_dir))
    events.Reload()
    assert math.isnan(events.Scalars("loss")[0].value)
    assert events.Scalars("grad_norm")[0].value == math.inf and events.Scalars("learning_rate")[0].value == -math.inf

    points = {tag: wait_until(lambda tag=tag: run.mindinsight.scalars("./nan_run", tag), 30) for tag in NAN_VALUES}
    # the summary file holds the float32 values; MindInsight's REST API turns every non-finite value into null
    stored = summary_scalars(run.nan_dir)[1]
    assert math.isnan(stored["loss"]) and stored["grad_norm"] == math.inf and stored["learning_rate"] == -math.inf
    for tag in NAN_VALUES:
        assert [(p["step"], p["value"]) for p in points[tag]] == [(1, None), (2, None), (3, None)]

    run_id = _mlflow_run(run, "nan_run")["info"]["run_id"]
    values = {tag: run.mlflow.api("metrics/get-history", run_id=run_id, metric_key=tag)["metrics"][0]["value"]
              for tag in NAN_VALUES}
    assert values["loss"] == "NaN"
    assert values["grad_norm"] == pytest.approx(1.7976931348623157e308)
    assert values["learning_rate"] == pytest.approx(-1.7976931348623157e308)
