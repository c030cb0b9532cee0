"""Read a run directory (run.json, config.yaml, alerts.jsonl; metrics.jsonl streamed into one sketch per metric)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from msmon import layout
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue
from msmon.util.jsonfiles import JsonObject, read_json_object, read_jsonl
from msmon.util.numbers import as_number
from msmon.view.run_records import RunSeries, read_run_series
from msmon.view.sketch import SeriesSketch

PLOT_METRICS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "throughput")


@dataclass
class RunData:
    """Everything the report and compare views need from one run directory."""

    path: Path
    info: JsonObject
    config_text: str | None
    config: dict[str, ConfigValue] | None  # the config that trained (msmon's keys removed, resolved)
    records: RunSeries  # metrics.jsonl's shown records, as one sketch per metric
    alerts: list[JsonObject]
    notes: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    monitor: dict[str, ConfigValue] | None = None  # msmon's resolved monitor_config keys (the config is what trained)

    @property
    def name(self) -> str:
        """The run name (run.json's run_name, else the directory name)."""
        return str(self.info.get("run_name") or self.path.name)

    def metrics(self) -> list[str]:
        """Numeric metric names present in the records (the plot metrics first)."""
        seen = self.records.columns
        return [m for m in PLOT_METRICS if m in seen] + sorted(m for m in seen if m not in PLOT_METRICS)

    def sketch(self, metric: str) -> SeriesSketch:
        """One metric's values in step order (an empty sketch when the run did not record it)."""
        return self.records.columns.get(metric) or SeriesSketch()


def _read_json(path: Path, notes: list[str]) -> JsonObject:
    try:
        return read_json_object(path)
    except FileNotFoundError:
        notes.append(f"{path.name} is missing")
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name} is unreadable: {exc}")
    return {}


def run_overrides(info: JsonObject) -> list[str]:
    """The KEY=VALUE overrides the run was started with (run.json's ``request``, run_mindformer.py's flags already
    among them; an older run.json's ``overrides``, else parsed from ``command``)."""
    request = info.get("request")
    given = request.get("overrides") if isinstance(request, dict) else info.get("overrides")
    if isinstance(given, list):
        return [str(item) for item in given]
    command = info.get("command")
    if not isinstance(command, list) or "run" not in command:
        return []
    args = [str(a) for a in command[command.index("run") + 1:]]
    return [a for a in args[1:] if "=" in a and not a.startswith("-")]


def _read_config(run_dir: Path, overrides: list[str],
                 notes: list[str]) -> tuple[str | None, dict[str, ConfigValue] | None]:
    """config.yaml as written, and the config that trained: what ``msmon run`` handed mindformers (the run's
    overrides applied, interpolations resolved, msmon's keys removed; the run's mindformers.yaml when config.yaml
    cannot be resolved here)."""
    from msmon.config.mindformers_yaml import mindformers_config, read_run_config

    path = run_dir / layout.CONFIG_SNAPSHOT
    if not path.is_file():
        notes.append("config.yaml is missing")
        return None, read_run_config(run_dir)
    from msmon.config.loader import load_config, secrets_unresolved

    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return text, mindformers_config(secrets_unresolved(load_config(path, overrides)))
    except MsmonError as exc:
        trained = read_run_config(run_dir)
        notes.append(f"config.yaml could not be resolved here ({exc}); "
                     + ("the run's mindformers.yaml is compared" if trained else "its keys count as absent"))
        return text, trained


def _read_monitor(run_dir: Path) -> JsonObject | None:
    """msmon's resolved monitor_config keys of the run (``monitor_config.resolved.yaml``), without mindformers' own
    (they are part of the config that trained)."""
    import yaml

    from msmon.config.schema import MINDFORMERS_MONITOR_KEYS

    try:
        data = yaml.safe_load((run_dir / layout.RESOLVED_MONITOR).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    return {key: value for key, value in data.items() if key not in MINDFORMERS_MONITOR_KEYS}


def load_run(path: str | Path) -> RunData:
    """Load a run directory (or its metrics.jsonl); MsmonError for a missing directory, or one that is no run
    (neither metrics.jsonl nor run.json). A run that failed before its first logged step has no records."""
    run_dir = Path(path)
    if os.path.isfile(run_dir) and run_dir.name.endswith(".jsonl"):  # os.path: False for a name too long
        run_dir = run_dir.parent
    if not os.path.exists(run_dir):
        raise MsmonError(f"run directory not found: {path}", "pass <save_dir>/<project_name>/<run_name>",
                         ExitCode.INVALID)
    if not run_dir.is_dir():
        raise MsmonError(f"not a run directory: {path}", "pass <save_dir>/<project_name>/<run_name>",
                         ExitCode.INVALID)
    metrics = run_dir / layout.METRICS
    notes: list[str] = []
    if not metrics.is_file():
        if not (run_dir / layout.RUN_JSON).is_file():
            raise MsmonError(
                f"no metrics.jsonl in {run_dir}",
                "the run logged no step yet, or monitor_type does not include 'file'",
                ExitCode.INVALID,
            )
    try:
        records = read_run_series(metrics) if metrics.is_file() else RunSeries()
    except OSError as exc:
        raise MsmonError(f"cannot read {metrics}: {exc.strerror or exc}", "check the file's permissions") from None
    notes.extend(records.notes)
    if not records.logged:
        notes.append("the run logged no step (metrics.jsonl is empty or missing, or monitor_type has no 'file')")
    alerts: list[JsonObject] = []
    alerts_path = run_dir / layout.ALERTS
    if alerts_path.is_file():
        try:
            alerts = read_jsonl(alerts_path).rows
        except OSError as exc:
            notes.append(f"alerts.jsonl is unreadable: {exc}")
    alerts.sort(key=lambda a: (as_number(a.get("step")) or 0.0, as_number(a.get("time")) or 0.0))
    info = _read_json(run_dir / layout.RUN_JSON, notes)
    overrides = run_overrides(info)
    config_text, config = _read_config(run_dir, overrides, notes)
    return RunData(run_dir, info, config_text, config, records, alerts, notes, overrides, _read_monitor(run_dir))
