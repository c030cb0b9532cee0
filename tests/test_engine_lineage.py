"""The run's hyperparameters and results in the mindinsight, tensorboard and mlflow backends for runs that do not
complete (failed, interrupted, stopped by the monitor, failed before the first log) and for a backend the disk
guard stopped, read back by MindInsight's lineage reader, TensorBoard's reader and MLflow's client."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest
from helpers_training import QUICKSTART, quickstart_parts

from msmon.config.schema import MonitorSettings
from msmon.engine.backends.mindinsight import MindInsightBackend
from msmon.engine.session import MonitorSession

PROJECT = "proj"
pytestmark = [pytest.mark.training, pytest.mark.compat_smoke]


def _settings(root: Path, run_name: str) -> MonitorSettings:
    from msmon.config.coerce import build

    settings, findings = build(MonitorSettings, {
        "monitor_type": ["mindinsight", "tensorboard", "mlflow"], "project_name": PROJECT, "run_name": run_name,
        "save_dir": str(root), "mlflow": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"},
    }, "monitor_config")
    assert not findings
    return settings


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    config = Path(tmp_path_factory.mktemp("cfg")) / "q.yaml"
    config.write_text(QUICKSTART.read_text())
    return quickstart_parts(config)[0]


def _run(root: Path, name: str, training: dict[str, Any], losses: list[float], status: str) -> Path:
    settings = _settings(root, name)
    run_dir = root / PROJECT / name
    session = MonitorSession(settings, run_dir, config=training).start()
    for index, loss in enumerate(losses, start=1):
        session.writer.put({"step": 10 * index, "time": time.time(), "loss": loss, "grad_norm": 1.0})
    session.close(status)
    return run_dir


def _lineage(root: Path) -> dict[str, dict[str, Any]]:
    from mindinsight.lineagemgr.model import filter_summary_lineage

    objects = filter_summary_lineage(summary_base_dir=str(root / PROJECT))["object"]
    return {o["summary_dir"].lstrip("./"): o["model_lineage"] for o in objects}


def _session_end(run_dir: Path) -> int:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    accumulator = EventAccumulator(str(run_dir))
    accumulator.Reload()
    content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    return metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG]).status


def test_runs_that_do_not_complete_keep_their_hyperparameters_and_say_how_they_ended(
    tmp_path: Path, training: dict[str, Any]
) -> None:
    from mlflow import MlflowClient
    from tensorboard.plugins.hparams import api_pb2

    cases = {
        "failed_nan": ([6.9, 5.0, math.nan], "failed", "FAILED", api_pb2.STATUS_FAILURE),
        "stopped": ([6.9, 7.5], "stopped_by_monitor", "KILLED", api_pb2.STATUS_FAILURE),
        "interrupted": ([6.9], "interrupted", "KILLED", api_pb2.STATUS_UNKNOWN),
        "failed_at_start": ([], "failed", "FAILED", api_pb2.STATUS_FAILURE),
    }
    dirs = {name: _run(tmp_path, name, training, losses, status) for name, (losses, status, *_) in cases.items()}
    lineage = _lineage(tmp_path)
    assert set(lineage) == set(cases)
    for name, (losses, status, _, _) in cases.items():
        entry = lineage[name]
        assert entry["user_defined"]["status"] == status and entry["learning_rate"] == 5e-3
        assert entry["user_defined"]["lr_schedule"] == "CosineWithWarmUpLR"
        assert entry["metric"]["steps"] == 10 * len(losses)
    assert lineage["failed_nan"]["metric"] == {"final_loss": "nan", "best_loss": 5.0, "steps": 30}  # MindInsight's nan
    assert lineage["failed_nan"]["loss"] == "NaN"
    assert lineage["stopped"]["metric"]["final_loss"] == 7.5 and lineage["stopped"]["loss"] == 7.5
    assert lineage["failed_at_start"]["metric"] == {"steps": 0} and lineage["failed_at_start"]["loss"] is None

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(PROJECT).experiment_id
    runs = {run.info.run_name: run for run in client.search_runs([experiment])}
    for name, (_, status, mlflow_status, tb_status) in cases.items():
        assert runs[name].info.status == mlflow_status and runs[name].data.tags["msmon.status"] == status
        assert runs[name].data.params["hp.learning_rate"] == "0.005"
        assert _session_end(dirs[name]) == tb_status
    assert math.isnan(runs["failed_nan"].data.metrics["final_loss"]) and runs["failed_nan"].data.metrics[
        "best_loss"] == 5.0


def test_a_backend_the_disk_guard_stopped_leaves_the_run_as_running(tmp_path: Path, training: dict[str, Any]) -> None:
    run_dir = tmp_path / PROJECT / "guarded"
    backend = MindInsightBackend(run_dir, _settings(tmp_path, "guarded"), training)
    backend.prepare()
    backend.open()
    backend.write([{"step": 10, "time": time.time(), "loss": 6.0}])
    backend.close(None)  # what BackendRunner passes when the disk guard stops a heavy backend
    entry = _lineage(tmp_path)["guarded"]
    assert entry["user_defined"]["status"] == "running" and entry["metric"] == {} and entry["loss"] is None
    assert entry["learning_rate"] == 5e-3
