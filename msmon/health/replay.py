"""Offline replay: feed a recorded run through the same HealthMonitor the live run uses."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from msmon.config.coerce import build
from msmon.errors import MsmonError
from msmon.health.alert import Alert
from msmon.health.monitor import HealthMonitor
from msmon.health.settings import HealthSettings

logger = logging.getLogger("msmon")

NONFINITE_STRINGS = {"nan": float("nan"), "infinity": float("inf"), "+infinity": float("inf"),
                     "-infinity": float("-inf"), "inf": float("inf"), "+inf": float("inf"), "-inf": float("-inf")}


def parse_record(text: str, where: str) -> dict[str, Any]:
    """One JSON Lines record: an object with an integer ``step``; "NaN"/"Infinity" strings become floats."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MsmonError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})",
                         "each line must be one JSON object") from exc
    if not isinstance(data, dict):
        raise MsmonError(f"{where}: expected a JSON object, got {type(data).__name__}",
                         'write {"step": N, "loss": ...} per line')
    record = {key: _value(value) for key, value in data.items()}
    step = record.get("step")
    if isinstance(step, float) and step.is_integer():
        step = record["step"] = int(step)
    if isinstance(step, bool) or not isinstance(step, int):
        raise MsmonError(f"{where}: 'step' must be an integer, got {step!r}", 'add "step": N to every line')
    when = record.get("time")
    if when is not None and (isinstance(when, bool) or not isinstance(when, int | float)):
        raise MsmonError(f"{where}: 'time' must be unix seconds, got {when!r}", "drop it or write a number")
    return record


def _value(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in NONFINITE_STRINGS:
        return NONFINITE_STRINGS[value.strip().lower()]
    return value


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON Lines file; a half-written last line (a killed run) is skipped with a warning."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise MsmonError(f"{path}: no such file", "pass a run directory or a JSON Lines file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise MsmonError(f"{path}: cannot read ({exc})", "pass a UTF-8 JSON Lines file") from exc
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield parse_record(line, f"{path}:{number}")
        except MsmonError:
            if number == len(lines) and not text.endswith("\n"):
                logger.warning("%s:%d: skipped a half-written last line", path, number)
                return
            raise


def _yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        logger.warning("%s: unreadable, ignored by replay", path)
        return {}
    return data if isinstance(data, dict) else {}


def _training_config(path: Path) -> dict[str, Any]:
    """The run's config.yaml with interpolations resolved where they can be, else as written."""
    if not path.is_file():
        return {}
    from msmon.config.loader import load_config

    try:
        return load_config(path).resolved()
    except MsmonError:
        return _yaml(path)


def health_settings(section: Any, where: str) -> HealthSettings:
    """``monitor_config.health`` built strictly; an invalid value is an error naming the key."""
    if section is None:
        return HealthSettings()
    if not isinstance(section, Mapping):
        raise MsmonError(f"{where}: monitor_config.health must be a mapping", "write nested keys")
    settings, findings = build(HealthSettings, section, "monitor_config.health")
    if findings:
        first = findings[0]
        raise MsmonError(f"{where}: {first.path}: {first.message}", first.hint)
    return settings


def run_dir_inputs(run_dir: Path) -> tuple[Path, HealthSettings, dict[str, Any], int | None]:
    """(metrics file, the run's health settings, its training config, total steps) of a run directory."""
    metrics = run_dir / "metrics.jsonl"
    if not metrics.is_file():
        raise MsmonError(f"{run_dir}: no metrics.jsonl in this directory", "pass a run directory of msmon run")
    resolved = _yaml(run_dir / "monitor_config.resolved.yaml")
    section = resolved.get("monitor_config", resolved)
    section = section.get("health") if isinstance(section, dict) else None
    settings = health_settings(section, str(run_dir / "monitor_config.resolved.yaml"))
    config = _training_config(run_dir / "config.yaml")
    total = None
    try:
        total = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("total_steps")
    except (OSError, ValueError, AttributeError):
        pass
    return metrics, settings, config, total if isinstance(total, int) else None


def replay(
    path: str | Path, settings: HealthSettings | None = None, config: Mapping[str, Any] | None = None
) -> tuple[list[Alert], int]:
    """(alerts in step order, records read) of a run directory or JSON Lines file.

    ``settings`` / ``config`` override the run directory's own (to tune thresholds).
    """
    source = Path(path)
    total = None
    if source.is_dir():
        metrics, own_settings, own_config, total = run_dir_inputs(source)
        settings = settings or own_settings
        config = config if config is not None else own_config
    elif source.exists():
        metrics = source
    else:
        raise MsmonError(f"{source}: no such file or directory", "pass a run directory or a JSON Lines file")
    monitor = HealthMonitor(settings or HealthSettings(), config)
    monitor.set_total_steps(total)
    count = 0
    for record in read_records(metrics):
        monitor.observe(record)
        count += 1
    return sorted(monitor.alerts, key=lambda alert: alert.step), count
