"""``mlflow`` backend: one MLflow run per msmon run; config as params, metrics sent with log_batch."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from msmon.engine.backends.base import Backend, metric_items

MAX_PARAM_VALUE = 6000
MAX_PARAMS_PER_BATCH = 100
SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "webhook", "credential")
STATUS = {"completed": "FINISHED", "failed": "FAILED"}  # everything else (interrupted, stopped...) -> KILLED


def param_key(key: str) -> str:
    """An MLflow-valid param key (letters, digits, ``_-. /`` only; at most 250 characters)."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key)[:250]


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a.b.c": "value"}`` from a nested mapping; lists as their string; secret-looking keys redacted."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, dotted + "."))
        elif any(word in str(key).lower() for word in SECRET_WORDS):
            flat[dotted] = "***"
        else:
            flat[dotted] = str(value)[:MAX_PARAM_VALUE]
    return flat


class MlflowBackend(Backend):
    """A network backend: failures are retried with backoff by the writer, training never waits."""

    name = "mlflow"
    network = True

    _client: Any = None
    _run_id: str | None = None
    _params_logged = False
    _alerts = 0

    @property
    def write_interval_s(self) -> float:
        return 1.0  # one request per second at most, whatever the log interval: the server shares the machine

    def prepare(self) -> None:
        import mlflow.entities  # noqa: F401

    def open(self) -> None:
        options = self.settings.mlflow
        if not options.tracking_uri:
            raise ValueError("monitor_config.mlflow.tracking_uri is not set")
        # msmon's writer retries with its own backoff; MLflow's internal retries would hold the worker for minutes
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
        os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = str(max(1, int(options.timeout_s)))
        from mlflow import MlflowClient

        if self._client is None:
            self._client = MlflowClient(tracking_uri=options.tracking_uri)
        if self._run_id is None:
            name = options.experiment_name or self.settings.project_name
            experiment = self._client.get_experiment_by_name(name)
            experiment_id = experiment.experiment_id if experiment else self._client.create_experiment(name)
            run = self._client.create_run(
                experiment_id, run_name=self.settings.run_name, tags={"msmon.run_dir": str(self.run_dir)}
            )
            self._run_id = run.info.run_id
        if not self._params_logged:
            self._log_params()
            self._params_logged = True

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def _log_params(self) -> None:
        from mlflow.entities import Param

        params = [Param(param_key(key), value) for key, value in flatten(self.config or {}).items()]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self._run_id, params=params[start : start + MAX_PARAMS_PER_BATCH])

    def write(self, records: list[dict[str, Any]]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(key, value, int(record["time"] * 1000), int(record["step"]))
            for record in records
            for key, value in metric_items(record)
        ]
        size = max(1, min(1000, self.settings.mlflow.batch_size))
        for start in range(0, len(metrics), size):
            self._client.log_batch(self._run_id, metrics=metrics[start : start + size])

    def write_alert(self, alert: dict[str, Any]) -> None:
        self._alerts += 1
        text = f"step {alert.get('step')} {alert.get('severity')} {alert.get('detector')}: {alert.get('message')}"
        self._client.set_tag(self._run_id, "msmon.last_alert", text[:5000])
        self._client.set_tag(self._run_id, "msmon.alert_count", str(self._alerts))

    def close(self, status: str) -> None:
        if self._run_id is not None:
            self._client.set_terminated(self._run_id, STATUS.get(status, "KILLED"))
