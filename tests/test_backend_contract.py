"""The backend contract, run over every built-in backend alike (as Lightning's loggers/test_all.py does): through a
real session each keeps the records (NaN as NaN), read back by the backend's own reader, and says how the run
ended in its own words (Backend.status_names); a backend stopped before the run ended declares no end. The
interface docs/architecture.md lists is the real one."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest
from engine_support import summary_scalars

from msmon.config.coerce import build
from msmon.config.schema import MonitorSettings
from msmon.engine.backends import backend_class
from msmon.engine.backends.base import Backend
from msmon.engine.session import MonitorSession
from msmon.status import RunStatus

BUILT_IN = ("file", "mindinsight", "tensorboard", "mlflow")
LOSSES = [6.9, 5.5, math.nan]
CONFIG = {"lr_schedule": {"type": "CosineWithWarmUpLR", "learning_rate": 5e-3}}
REPO = Path(__file__).resolve().parents[1]


def _settings(root: Path, name: str, run: str) -> MonitorSettings:
    settings, findings = build(MonitorSettings, {
        "monitor_type": [name], "project_name": "p", "run_name": run, "save_dir": str(root),
        "mlflow": {"tracking_uri": f"sqlite:///{root / 'mlflow.db'}"},
    }, "monitor_config")
    assert not findings
    return settings


def _losses_and_end(name: str, root: Path, run_dir: Path) -> tuple[dict[int, float], str | None]:
    """step -> loss as the backend's own reader sees it, and the end the backend declared (None: none)."""
    if name == "file":
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return {r["step"]: float(r["loss"]) for r in rows}, None
    if name == "mindinsight":
        from mindinsight.lineagemgr.model import filter_summary_lineage

        (entry,) = filter_summary_lineage(summary_base_dir=str(run_dir.parent))["object"]
        status = entry["model_lineage"]["user_defined"]["status"]
        return {step: values["loss"] for step, values in summary_scalars(run_dir).items()}, status
    if name == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
        from tensorboard.plugins.hparams import api_pb2, metadata

        accumulator = EventAccumulator(str(run_dir))
        accumulator.Reload()
        content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
        end = content.get(metadata.SESSION_END_INFO_TAG)
        status = api_pb2.Status.Name(metadata.parse_session_end_info_plugin_data(end).status) if end else None
        return {e.step: e.value for e in accumulator.Scalars("loss")}, status
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("p").experiment_id])
    history = client.get_metric_history(run.info.run_id, "loss")
    return {m.step: m.value for m in history}, run.info.status


def _same(got: dict[int, float], sent: list[float]) -> bool:
    expected = {10 * (i + 1): v for i, v in enumerate(sent)}
    return got.keys() == expected.keys() and all(
        math.isnan(got[s]) if math.isnan(v) else got[s] == pytest.approx(v) for s, v in expected.items())


@pytest.mark.parametrize("name", BUILT_IN)
@pytest.mark.parametrize("status", [RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.INTERRUPTED])
def test_every_backend_keeps_the_records_and_says_how_the_run_ended(tmp_path: Path, name: str,
                                                                    status: RunStatus) -> None:
    settings = _settings(tmp_path, name, "r")
    run_dir = tmp_path / "p" / "r"
    session = MonitorSession(settings, run_dir, config=CONFIG).start()
    for index, loss in enumerate(LOSSES, start=1):
        session.writer.put({"step": 10 * index, "time": time.time(), "loss": loss})
    summary = session.close(status)
    assert summary.backends[name]["written"] == len(LOSSES) and summary.backends[name]["lost"] == 0
    losses, end = _losses_and_end(name, tmp_path, run_dir)
    assert _same(losses, LOSSES), losses
    cls = backend_class(name)
    assert end == (cls.status_name(status) if cls.status_names or cls.keeps_run_facts else None)


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_backend_stopped_before_the_run_ended_declares_no_end(tmp_path: Path, name: str) -> None:
    """What the writer does when the disk guard or repeated failures stop a backend: ``close(None)``."""
    (tmp_path / "p" / "r").mkdir(parents=True)  # the session creates it
    backend = backend_class(name)(tmp_path / "p" / "r", _settings(tmp_path, name, "r"), CONFIG)
    backend.prepare()
    backend.open()
    backend.write([{"step": 10, "time": time.time(), "loss": 6.0}])
    backend.close(None)
    _, end = _losses_and_end(name, tmp_path, tmp_path / "p" / "r")
    assert end in (None, RunStatus.RUNNING.value, "RUNNING")


def test_the_architecture_doc_lists_the_real_backend_interface() -> None:
    block = re.search(r"## Backend interface.*?```(.*?)```", (REPO / "docs" / "architecture.md").read_text(), re.S)
    assert block is not None
    public = {name for name in vars(Backend) if not name.startswith("_")}
    listed = set(re.findall(r"^\s*(?:def\s+)?([a-z_]+)\b", block.group(1), re.M))
    assert public <= listed, sorted(public - listed)


@pytest.mark.parametrize(("step", "wall_time", "scalars"), [
    (10, 1_700_000_000.25, [("loss", 6.9), ("grad_norm", 1.25), ("learning_rate", 5e-3), ("throughput", 12345.6)]),
    (0, 0.0, [("loss", 0.0)]),
    (2**40, 1.5, [("loss", math.nan), ("grad_norm", math.inf), ("grad_norm_max", -math.inf), ("big", 1e39)]),
    (7, 2.0, [("grad_norm/layers.0", 3.0), ("损失", -2.5), ("x" * 200, 1.0)]),
    (3, 4.0, []),
])
def test_the_summary_event_encoder_writes_mindspores_bytes(step: int, wall_time: float,
                                                           scalars: list[tuple[str, float]]) -> None:
    """msmon encodes the MindInsight backend's events itself (5x cheaper than the pure-Python protobuf runtime):
    byte for byte what MindSpore's own ``package_summary_event`` serialises."""
    import numpy as np
    from mindspore.train.summary._summary_adapter import package_summary_event

    from msmon.engine.backends.summary_event import scalars_event

    with np.errstate(over="ignore"):
        values = [{"_type": "Scalar", "name": tag, "data": np.asarray(value, np.float32)} for tag, value in scalars]
    assert scalars_event(step, wall_time, scalars) == package_summary_event(values, step, wall_time).SerializeToString()
