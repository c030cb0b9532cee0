"""Read a run directory (run.json, config.yaml, metrics.jsonl, alerts.jsonl) and downsample its series."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msmon import layout
from msmon.errors import ExitCode, MsmonError
from msmon.records import shown_rank
from msmon.util.jsonfiles import JsonLines, read_json_object, read_jsonl
from msmon.util.numbers import as_number, nonfinite_kind

PLOT_METRICS: tuple[str, ...] = ("loss", "grad_norm", "learning_rate", "throughput")
@dataclass
class RunData:
    """Everything the report and compare views need from one run directory."""

    path: Path
    info: dict[str, Any]
    config_text: str | None
    config: dict[str, Any] | None  # the config that trained (msmon's keys removed, resolved)
    records: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)
    monitor: dict[str, Any] | None = None  # msmon's resolved monitor_config keys (the config is what trained)

    @property
    def name(self) -> str:
        """The run name (run.json's run_name, else the directory name)."""
        return str(self.info.get("run_name") or self.path.name)

    def metrics(self) -> list[str]:
        """Numeric metric names present in the records (the plot metrics first)."""
        seen: dict[str, None] = {}
        for record in self.records:
            for key, value in record.items():
                if key not in ("step", "time", "rank") and as_number(value) is not None:
                    seen.setdefault(key, None)
        return [m for m in PLOT_METRICS if m in seen] + sorted(m for m in seen if m not in PLOT_METRICS)

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """Steps and values of one metric, in step order (non-finite values kept)."""
        steps: list[int] = []
        values: list[float] = []
        for record in self.records:
            value = as_number(record.get(metric))
            if value is not None:
                steps.append(int(record["step"]))
                values.append(value)
        return steps, values


def _read_json(path: Path, notes: list[str]) -> dict[str, Any]:
    try:
        return read_json_object(path)
    except FileNotFoundError:
        notes.append(f"{path.name} is missing")
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name} is unreadable: {exc}")
    return {}


def run_overrides(info: dict[str, Any]) -> list[str]:
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


def _read_config(run_dir: Path, overrides: list[str], notes: list[str]) -> tuple[str | None, dict[str, Any] | None]:
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


def _read_monitor(run_dir: Path) -> dict[str, Any] | None:
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


def _clean_records(rows: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """Records with an integer step, one per step (the last one wins after a resume), in step order."""
    ranks: set[int] = {row["rank"] for row in rows if isinstance(row.get("rank"), int)}
    with_loss = {row["rank"] for row in rows if isinstance(row.get("rank"), int) and "loss" in row}
    rank = shown_rank(ranks, with_loss)
    if len(ranks) > 1:
        notes.append(f"records of ranks {sorted(ranks)} found; showing rank {rank}")
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        step = row.get("step", row.get("global_step"))
        if isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step):
            continue
        if rank is not None and row.get("rank", rank) != rank:
            continue
        by_step[int(step)] = {**row, "step": int(step)}
    return [by_step[s] for s in sorted(by_step)]


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
        lines = read_jsonl(metrics) if metrics.is_file() else JsonLines()
    except OSError as exc:
        raise MsmonError(f"cannot read {metrics}: {exc.strerror or exc}", "check the file's permissions") from None
    if lines.truncated_tail:
        notes.append("the last line of metrics.jsonl is half-written (run still going or killed); it was skipped")
    if lines.bad_lines:
        notes.append(f"{lines.bad_lines} unreadable line(s) of metrics.jsonl skipped")
    records = _clean_records(lines.rows, notes)
    if not records:
        notes.append("the run logged no step (metrics.jsonl is empty or missing, or monitor_type has no 'file')")
    alerts: list[dict[str, Any]] = []
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


@dataclass
class DrawSeries:
    """A series ready to draw: finite points (min/max-preserving downsample) and non-finite markers."""

    x: list[int]
    y: list[float]
    nonfinite: list[tuple[int, str]]
    total: int

    def to_json(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "nonfinite": [list(p) for p in self.nonfinite], "total": self.total}


def _bucket_bounds(count: int, buckets: int) -> list[tuple[int, int]]:
    return [(count * b // buckets, count * (b + 1) // buckets) for b in range(buckets)]


def downsample(steps: list[int], values: list[float], max_points: int = 4000) -> DrawSeries:
    """Keep first, min, max and last point of each bucket (M4), so no spike vanishes; non-finite points
    become markers (at most one per kind and bucket)."""
    finite_x: list[int] = []
    finite_y: list[float] = []
    marks: list[tuple[int, str]] = []
    for step, value in zip(steps, values, strict=True):
        kind = nonfinite_kind(value)
        if kind is None:
            finite_x.append(step)
            finite_y.append(value)
        else:
            marks.append((step, kind))
    if len(finite_x) > max_points:
        keep: list[int] = []
        for lo, hi in _bucket_bounds(len(finite_x), max(1, max_points // 4)):
            if lo >= hi:
                continue
            chunk = range(lo, hi)
            lo_i = min(chunk, key=finite_y.__getitem__)
            hi_i = max(chunk, key=finite_y.__getitem__)
            keep.extend(sorted({lo, lo_i, hi_i, hi - 1}))
        finite_x = [finite_x[i] for i in keep]
        finite_y = [finite_y[i] for i in keep]
    if len(marks) > max_points // 4:
        kept: dict[tuple[int, str], tuple[int, str]] = {}
        for index, (step, kind) in enumerate(marks):
            kept.setdefault((index * (max_points // 4) // len(marks), kind), (step, kind))
        marks = sorted(kept.values())
    return DrawSeries(finite_x, finite_y, marks, len(steps))
