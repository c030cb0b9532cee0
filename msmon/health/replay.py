"""Offline replay: feed a recorded run through the same HealthMonitor the live run uses."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import yaml

from msmon import layout
from msmon.config.coerce import build
from msmon.config.health import HealthSettings
from msmon.config.mindformers_yaml import read_run_config
from msmon.errors import MsmonError
from msmon.foreign import ConfigValue
from msmon.health.alert import Alert
from msmon.health.monitor import HealthMonitor
from msmon.health.probed_steps import ProbedSteps
from msmon.health.rank_costs import RankCosts, RankReport
from msmon.health.replay_share import Share, observe_records, replay_split, second_share
from msmon.health.rollback_forecast import Forecast, forecast
from msmon.records import check_record
from msmon.reference.band import reference_band
from msmon.reference.sources.run_dir import run_global_batch
from msmon.run_record import recorded
from msmon.step_cost import StepCost, read_costs
from msmon.util.jsonfiles import JsonObject, iter_jsonl

logger = logging.getLogger("msmon")

WARM_RECORDS = 5000  # a resumed run's detectors start from at most this many recorded records


def history(run_dir: Path, up_to_step: int, limit: int = WARM_RECORDS) -> list[JsonObject]:
    """The last ``limit`` records of the run's metrics.jsonl up to ``up_to_step`` (unreadable lines skipped; the file
    streamed, at most ``limit`` records held): what a resumed run's detectors start from."""
    kept: deque[JsonObject] = deque(maxlen=limit)
    try:
        for line in iter_jsonl(run_dir / layout.METRICS):
            try:
                record = check_record(line.row, str(run_dir / layout.METRICS)) if line.row is not None else None
            except MsmonError:
                continue
            if record is not None and record["step"] <= up_to_step:
                kept.append(record)
    except OSError:
        return []
    return list(kept)


def resume_steps(run_dir: Path) -> list[int]:
    """The steps the later attempts of a run resumed from (run.json ``attempts``), in order."""
    record = recorded(run_dir)
    entries = record.attempts if record is not None else ()
    return sorted(entry.resumed_from_step or 0 for entry in entries[1:])


def _yaml(path: Path) -> dict[str, ConfigValue]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        logger.warning("%s: unreadable, ignored by replay", path)
        return {}
    return data if isinstance(data, dict) else {}


def _training_config(path: Path) -> dict[str, ConfigValue]:
    """The run's config.yaml with interpolations resolved where they can be, else as written."""
    if not path.is_file():
        return {}
    from msmon.config.loader import load_config

    try:
        return load_config(path).resolved()
    except MsmonError:
        return _yaml(path)


def health_settings(section: ConfigValue, where: str) -> HealthSettings:
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


class RunInputs(NamedTuple):
    """What a run directory's replay reads: its records file, health settings, training config, total steps and the
    reference runs it was compared with (``monitor_config.reference``)."""

    metrics: Path
    settings: HealthSettings
    config: dict[str, ConfigValue]
    total: int | None
    reference: tuple[list[str], list[str]]  # (runs, tags)


def run_dir_inputs(run_dir: Path) -> RunInputs:
    """The replay inputs of a run directory (``RunInputs``)."""
    metrics = run_dir / layout.METRICS
    if not metrics.is_file():
        raise MsmonError(f"{run_dir}: no metrics.jsonl in this directory", "pass a run directory of msmon run")
    resolved = _yaml(run_dir / layout.RESOLVED_MONITOR)
    monitor = resolved.get("monitor_config", resolved)
    section = monitor.get("health") if isinstance(monitor, dict) else None
    settings = health_settings(section, str(run_dir / layout.RESOLVED_MONITOR))
    own = monitor.get("reference") if isinstance(monitor, dict) else None
    own = own if isinstance(own, dict) else {}
    config = read_run_config(run_dir) or _training_config(run_dir / layout.CONFIG_SNAPSHOT)  # the live run's own
    record = recorded(run_dir)
    return RunInputs(metrics, settings, config, record.total_steps if record is not None else None,
                     (list(own.get("runs") or []), list(own.get("tags") or [])))


class Replayed(NamedTuple):
    """What a replay found: the alerts in step order, the records read, and where each alert of a detector with
    ``action: rollback`` would have rolled the run back."""

    alerts: list[Alert]
    records: int
    forecasts: list[Forecast]


def replay(
    path: str | Path, settings: HealthSettings | None = None, config: Mapping[str, ConfigValue] | None = None,
    reference: Sequence[str] = (),
) -> Replayed:
    """The alerts, records read and rollback forecasts of a run directory or JSON Lines file.

    ``settings`` / ``config`` override the run directory's own (to tune thresholds, to try ``action: rollback``);
    ``reference`` (runs, as ``monitor_config.reference.runs``) the references it was compared with live.
    """
    source = Path(path)
    total = None
    boundaries: list[int] = []
    runs, tags = list(reference), list[str]()
    if os.path.isdir(source):  # os.path: False for a name too long
        boundaries = resume_steps(source)
        inputs = run_dir_inputs(source)
        metrics, total = inputs.metrics, inputs.total
        settings = settings or inputs.settings
        config = config if config is not None else inputs.config
        runs, tags = (runs, tags) if runs else inputs.reference
    elif os.path.exists(source):
        metrics = source
    else:
        raise MsmonError(f"{source}: no such file or directory", "pass a run directory or a JSON Lines file")
    settings = settings or HealthSettings()
    batch = run_global_batch(source) if source.is_dir() else None
    band = reference_band(runs, tags, settings.reference_drift, batch)
    probed = ProbedSteps(source, live=False) if source.is_dir() else None  # as live: a profiled step is no drop
    monitor = HealthMonitor(settings, config, reference=band, probed=probed)
    monitor.set_total_steps(total)
    second = second_share(metrics, [detector.name for detector in monitor.detectors])
    share = Share(metrics, source if source.is_dir() else None, settings, dict(config or {}), total, boundaries, second)
    count, raised = replay_split(monitor, share) if second else observe_records(monitor, metrics, boundaries)
    judged = len(monitor.alerts)
    if source.is_dir():
        replay_costs(monitor, read_costs(source))
    alerts = sorted([alert for _, alert in raised] + monitor.alerts[judged:], key=lambda alert: alert.step)
    return Replayed(alerts, count, forecast(alerts, monitor.settings, config))


def attempts_of(costs: list[StepCost]) -> list[list[StepCost]]:
    """One rank's costs cut where the step goes back (a restart from a checkpoint, a resume)."""
    attempts: list[list[StepCost]] = [[]]
    for cost in costs:
        if attempts[-1] and cost.step <= attempts[-1][-1].step:
            attempts.append([])
        attempts[-1].append(cost)
    return attempts


def replay_costs(monitor: HealthMonitor, costs: dict[int, list[StepCost]]) -> None:
    """Every rank's recorded step costs (``heartbeats/rank_N.jsonl``) through the memory-growth and slow-rank
    detectors, attempt by attempt, the ranks side by side as the live watcher saw them."""
    judge = RankCosts(monitor.settings)
    split = {rank: attempts_of(own) for rank, own in costs.items()}
    for attempt in range(max((len(parts) for parts in split.values()), default=0)):
        if attempt:
            judge.resumed()
        steps: dict[int, dict[int, RankReport]] = {}
        for rank, parts in split.items():
            for cost in parts[attempt] if attempt < len(parts) else []:
                steps.setdefault(cost.step, {})[rank] = RankReport((cost,))
        for step in sorted(steps):
            for alert in judge.observe(steps[step]):
                monitor.report(alert.detector, alert.signal, alert.step, alert.time)
