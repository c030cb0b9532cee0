"""`msmon replay PATH [--json] [--config YAML]`: the live detectors, offline, over a recorded run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from msmon.cli.common import handle_errors, stdout_console
from msmon.cli.complete import run_dirs
from msmon.util.jsonfiles import JsonObject

if TYPE_CHECKING:
    from msmon.config.health import HealthSettings


def register(app: typer.Typer) -> None:
    app.command("replay")(replay)


@handle_errors
def replay(
    path: str = typer.Argument(..., help="A run directory (its metrics.jsonl) or a JSON Lines file of records.",
                               autocompletion=run_dirs),
    as_json: bool = typer.Option(False, "--json", help="Print the alerts as one JSON list to stdout."),
    config: str = typer.Option(
        None, "--config", help="Use this YAML's monitor_config.health and lr_schedule (to tune thresholds)."
    ),
    reference: list[Path] = typer.Option([], "--reference", help="Judge the run against this earlier run too "
                                         "(repeatable; default: the references the run was compared with live)."),
) -> None:
    """Run the health detectors over a recorded run and print the alerts in step order, with where each
    ``action: rollback`` would have rolled the run back (exit 0; 1 bad input)."""
    from rich.markup import escape

    from msmon.health.replay import replay as run_replay
    from msmon.util.numbers import json_safe

    settings, training = _tuning(config) if config else (None, None)
    alerts, count, forecasts = run_replay(path, settings, training, [str(p) for p in reference])
    rollbacks = {(forecast.alert_step, forecast.detector): forecast for forecast in forecasts}
    if as_json:
        entries = []
        for alert in alerts:
            entry = alert.to_dict()
            if (made := rollbacks.get((alert.step, alert.detector))) is not None:
                entry["rollback"] = made.to_json()
            entries.append(json_safe(entry))
        print(json.dumps(entries, indent=2))
        return
    console = stdout_console()
    for alert in alerts:
        style = "bold red" if alert.severity == "critical" else "yellow"
        console.print(
            f"step {alert.step:>7}  [{style}]{alert.severity:<8}[/{style}]  {alert.detector:<15} "
            f"{escape(alert.message)}"
        )
        if (made := rollbacks.get((alert.step, alert.detector))) is not None:
            console.print(f"{'':>13}-> {escape(made.describe())}")
    noun = "alert" if len(alerts) == 1 else "alerts"
    console.print(f"{len(alerts)} {noun} in {count} records of {escape(path)}")


def _tuning(path: str) -> tuple[HealthSettings, JsonObject]:
    """(health settings, training config) of a YAML given with --config."""
    from msmon.config.loader import load_config
    from msmon.health.replay import health_settings

    resolved = load_config(path).resolved()
    section = resolved.get("monitor_config") or {}
    health = section.get("health") if isinstance(section, dict) else None
    return health_settings(health, path), resolved
