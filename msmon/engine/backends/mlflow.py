"""``mlflow`` backend: one MLflow run per msmon run; config and hyperparameters (``hp.<name>``) as params, versions,
git commit and status as tags, metrics sent with log_batch, the results as metrics at the end."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping

from msmon import layout
from msmon.engine.backends.base import Backend, metric_items
from msmon.engine.backends.runfacts import kept_records, run_identity
from msmon.foreign import BackendClient, ConfigValue
from msmon.status import RunStatus
from msmon.util.atomic import atomic_write_json
from msmon.util.jsonfiles import JsonObject, read_json_object
from msmon.util.mapping import flatten

MAX_PARAM_VALUE = 6000
MAX_PARAMS_PER_BATCH = 100
SECRET_WORDS = ("password", "secret", "token", "api_key", "apikey", "webhook", "credential")
HP_PREFIX = "hp."  # the chosen hyperparameters (msmon.config.hyperparameters), beside the whole config's keys
GIT_COMMIT_TAG = "mlflow.source.git.commit"  # MLflow's own tag: its UI shows it as the run's git commit


def param_key(key: str) -> str:
    """An MLflow-valid param key (letters, digits, ``_-. /`` only; at most 250 characters)."""
    return re.sub(r"[^A-Za-z0-9_\-. /]", "_", key)[:250]


def param_values(config: Mapping[str, ConfigValue]) -> dict[str, str]:
    """The config as MLflow params: dotted keys, values as text (truncated), secret-looking keys redacted."""
    return {
        key: "***" if any(word in key.lower() for word in SECRET_WORDS) else str(value)[:MAX_PARAM_VALUE]
        for key, value in flatten(config).items()
    }


class MlflowBackend(Backend):
    """A network backend: failures are retried with backoff by the writer, training never waits."""

    name = "mlflow"
    network = True
    keeps_run_facts = True  # the hyperparameters as params at the start, the results as metrics at the end
    #: msmon's final status -> MLflow's; everything else (interrupted, stopped by the monitor) -> KILLED
    status_names = {RunStatus.COMPLETED: "FINISHED", RunStatus.FAILED: "FAILED"}
    other_status = "KILLED"

    _client: BackendClient = None
    _run_id: str | None = None
    _params_logged = False
    _continued = False
    _alerts = 0

    @property
    def close_budget_s(self) -> float:
        # the closing batch and set_terminated may each take up to timeout_s (a loaded server)
        return 2 * self.settings.mlflow.timeout_s + 2.0

    @property
    def write_interval_s(self) -> float:
        return 1.0  # one request per second at most, whatever the log interval: the server shares the machine

    def prepare(self) -> None:
        """On the thread that starts the session: MLflow reads its HTTP settings from the environment. msmon's
        writer retries with its own backoff, so MLflow's own retries (which would hold the worker for minutes)
        are off and a request times out after ``mlflow.timeout_s``, unless the user set them; MLflow prints no run URL
        (the extra request it costs at the end)."""
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(max(1, int(self.settings.mlflow.timeout_s))))
        # set_terminated otherwise first fetches the run to print its URL: a request that can time out on a loaded
        # server and then skip the end state, leaving the run RUNNING forever
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        import mlflow.entities  # noqa: F401

    def open(self) -> None:
        options = self.settings.mlflow
        if not options.tracking_uri:
            raise ValueError("monitor_config.mlflow.tracking_uri is not set")
        from mlflow import MlflowClient

        if self._client is None:
            self._client = MlflowClient(tracking_uri=options.tracking_uri)
        if self._run_id is None:
            earlier = self._kept_run_id()
            if earlier is not None and self.attempt is not None and self.attempt.rolled_back:
                self._run_id = self._rolled_back_run(earlier)
            else:
                self._run_id = (self._continued_run(earlier) if earlier is not None else None) or self._new_run()
        if not self._params_logged:
            self._log_params()
            self._params_logged = True

    def _new_run(self) -> str:
        """A new MLflow run, its id kept in the run directory (``mlflow_run.json``) for later attempts."""
        options = self.settings.mlflow
        experiment_id = self._experiment_id(options.experiment_name or self.settings.project_name)
        run = self._client.create_run(experiment_id, run_name=self.settings.run_name, tags=self._tags())
        atomic_write_json(self.run_dir / layout.MLFLOW_RUN, {"run_id": run.info.run_id,
                                                             "tracking_uri": options.tracking_uri})
        return str(run.info.run_id)

    def _experiment_id(self, name: str) -> str:
        """The experiment ``name``, created when missing (another run that created it meanwhile is no error)."""
        from mlflow.exceptions import MlflowException

        experiment = self._client.get_experiment_by_name(name)
        if experiment is not None:
            return str(experiment.experiment_id)
        try:
            return str(self._client.create_experiment(name))
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return str(self._client.get_experiment_by_name(name).experiment_id)

    def _kept_run_id(self) -> str | None:
        """The MLflow run an earlier attempt wrote to (``mlflow_run.json``), when it is on the same tracking server."""
        try:
            kept = read_json_object(self.run_dir / layout.MLFLOW_RUN)
        except (OSError, ValueError):
            return None
        run_id = kept.get("run_id")
        if not isinstance(run_id, str) or kept.get("tracking_uri") != self.settings.mlflow.tracking_uri:
            return None
        return run_id

    def _rolled_back_run(self, earlier: str) -> str:
        """After a rollback: MLflow cannot drop the values the earlier attempts logged after the checkpoint's step,
        so the run goes on in a new MLflow run holding the surviving curve (the records kept up to that step, logged
        again, then this attempt's), tagged ``msmon.continues`` with the earlier run, which is tagged
        ``msmon.superseded_by`` with it."""
        from mlflow.exceptions import MlflowException

        run_id = self._new_run()
        self._tag_attempt(run_id)
        self._client.set_tag(run_id, "msmon.continues", earlier)
        try:
            self._client.set_tag(earlier, "msmon.superseded_by", run_id)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise  # deleted on the server: nothing to mark
        self._run_id = run_id
        self.write(kept_records(self.run_dir, self.attempt))
        return run_id

    def _continued_run(self, run_id: str) -> str | None:
        """A later attempt of the run (a resume, a restart) continues the MLflow run of the first one (``run_id``,
        from ``mlflow_run.json``); the run is RUNNING again and tagged with the attempt."""
        from mlflow.exceptions import MlflowException

        try:
            self._client.update_run(run_id, status="RUNNING")
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            return None  # deleted on the server: a new run
        self._client.set_tag(run_id, "msmon.status", RunStatus.RUNNING.value)
        self._tag_attempt(run_id)
        self._continued = True
        return run_id

    def _tag_attempt(self, run_id: str) -> None:
        attempt = self.attempt
        if attempt is not None:
            self._client.set_tag(run_id, "msmon.attempt", str(attempt.number))
            self._client.set_tag(run_id, "msmon.resumed_from_step", str(attempt.resumed_from_step))

    @property
    def run_id(self) -> str | None:
        return self._run_id

    def _tags(self) -> dict[str, str]:
        identity = run_identity()
        tags = {"msmon.run_dir": str(self.run_dir), "msmon.status": RunStatus.RUNNING.value}
        tags.update({f"msmon.{key}": value for key, value in identity.items() if key != "git_commit"})
        if "git_commit" in identity:
            tags[GIT_COMMIT_TAG] = identity["git_commit"]
        return tags

    def _log_params(self) -> None:
        """The config as params; a continued run gets only the keys it lacks (MLflow refuses changing a param,
        and a resumed config differs in its resume keys)."""
        from mlflow.entities import Param

        chosen = {HP_PREFIX + name: str(value)[:MAX_PARAM_VALUE] for name, value in self.facts.hyperparameters.items()}
        values = {**chosen, **param_values(self.config or {})}
        known = set(self._client.get_run(self._run_id).data.params) if self._continued else set()
        params = [Param(param_key(key), value) for key, value in values.items() if param_key(key) not in known]
        for start in range(0, len(params), MAX_PARAMS_PER_BATCH):
            self._client.log_batch(self._run_id, params=params[start : start + MAX_PARAMS_PER_BATCH])

    def write(self, records: list[JsonObject]) -> None:
        from mlflow.entities import Metric

        metrics = [
            Metric(key, value, int(record["time"] * 1000), int(record["step"]))
            for record in records
            for key, value in metric_items(record)
        ]
        size = max(1, min(1000, self.settings.mlflow.batch_size))
        for start in range(0, len(metrics), size):
            self._client.log_batch(self._run_id, metrics=metrics[start : start + size])

    def write_alert(self, alert: JsonObject) -> None:
        self._alerts += 1
        text = f"step {alert.get('step')} {alert.get('severity')} {alert.get('detector')}: {alert.get('message')}"
        self._client.set_tag(self._run_id, "msmon.last_alert", text[:5000])
        self._client.set_tag(self._run_id, "msmon.alert_count", str(self._alerts))

    def close(self, status: RunStatus | None) -> None:
        """One batch with the results (``final_loss``, ``best_loss``, ``steps`` at the last logged step) and the
        status tag, then the MLflow run's end state, sent even when that batch failed (its error stands). Stopped
        before the run ended (repeated failures): nothing is sent, the MLflow run is not ended for it."""
        if self._run_id is None or status is None:
            return
        from mlflow.entities import Metric, RunTag

        try:
            results = self.facts.results(status)
            now, step = int(time.time() * 1000), int(results["steps"])
            metrics = [Metric(name, float(value), now, step) for name, value in results.items()
                       if not isinstance(value, str)]
            self._client.log_batch(self._run_id, metrics=metrics, tags=[RunTag("msmon.status", status.value)])
        finally:
            self._client.set_terminated(self._run_id, self.status_name(status))
