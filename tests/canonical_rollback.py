"""The canonical runs of the article's night (tests/helpers_rollback.py), part of tests/canonical.py's catalogue:
per model path, one run whose loss spikes on corrupt data and is rolled back, and one that only alerts, on data
corrupt later, whose first 249 steps are the clean run's. tests/test_rollback_real.py reads them.

Both train 300 steps of batch 8 with shuffle off, every step logged, a checkpoint every 50 steps:

- ``rolled_back_<model>``: steps 150-170 corrupt (``WINDOW``), ``loss_spike: rollback`` with ``skip_steps: 30``;
  the legacy one also writes TensorBoard and MLflow (its own SQLite store, ``extra["mlflow_db"]``);
- ``spike_alerted_<model>``: steps 250-270 corrupt (``LATE_WINDOW``), ``loss_spike`` alerting (its default) with
  the same ``rollback`` section: the curve keeps the spike, and up to step 249 it is the clean run (the data before
  the window is the clean data, and a step depends on the batches before it only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from helpers_rollback import STEPS, WINDOW, corrupt_dataset, rollback_config

if TYPE_CHECKING:
    from canonical import Workspace

LATE_WINDOW = (250, 270)
SPIKE_ROLLBACK = {"loss_spike": {"action": "rollback"}, "rollback": {"skip_steps": 30}}
SPIKE_ALERT = {"rollback": {"skip_steps": 30}}  # loss_spike's own action: alert


def _train(work: Workspace, model: str, window: tuple[int, int], health: dict[str, Any], **monitor: Any
           ) -> dict[str, Any]:
    config = rollback_config(work.base, model, corrupt_dataset(work.base, model, window), health=health,
                             **work.identity(), **monitor)
    run = work.start("run", str(config), "--plain")
    run.finish()
    return work.result(run, model, STEPS, 1, window=list(window))


def rolled_back_legacy(work: Workspace) -> dict[str, Any]:
    database = work.base / "mlflow.db"
    result = _train(work, "legacy", WINDOW, SPIKE_ROLLBACK, monitor_type=["file", "tensorboard", "mlflow"],
                    mlflow={"tracking_uri": f"sqlite:///{database}"})
    result["extra"]["mlflow_db"] = str(database)
    return result


def rolled_back_mcore(work: Workspace) -> dict[str, Any]:
    return _train(work, "mcore", WINDOW, SPIKE_ROLLBACK)


def spike_alerted_legacy(work: Workspace) -> dict[str, Any]:
    return _train(work, "legacy", LATE_WINDOW, SPIKE_ALERT)


def spike_alerted_mcore(work: Workspace) -> dict[str, Any]:
    return _train(work, "mcore", LATE_WINDOW, SPIKE_ALERT)


ROLLBACK_RUNS: dict[str, Callable[[Workspace], dict[str, Any]]] = {
    "rolled_back_legacy": rolled_back_legacy,
    "rolled_back_mcore": rolled_back_mcore,
    "spike_alerted_legacy": spike_alerted_legacy,
    "spike_alerted_mcore": spike_alerted_mcore,
}
