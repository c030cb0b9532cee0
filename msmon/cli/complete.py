"""Shell completion (`msmon --install-completion`): run directories, and the dotted keys of a config."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import typer

from msmon import layout
from msmon.config.schema import DEFAULT_SAVE_DIR


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in layout.MARKERS)


def run_dirs(incomplete: str) -> list[str]:
    """Directories matching what is typed: run directories as they are, others with a ``/`` to go on
    (nothing typed: the runs under ./monitor_logs first)."""
    pattern = incomplete + "*" if incomplete else f"{DEFAULT_SAVE_DIR}/*/*"
    found = []
    for match in sorted(glob.glob(os.path.expanduser(pattern))):
        path = Path(match)
        if path.is_dir():
            found.append(match if _is_run_dir(path) else match.rstrip("/") + "/")
    return found


def config_keys(ctx: typer.Context, incomplete: str) -> list[str]:
    """``KEY=`` for the dotted keys of the config given first (and every monitor_config key msmon knows)."""
    import yaml

    from msmon.config.coerce import field_docs
    from msmon.config.schema import MonitorSettings
    from msmon.util.mapping import flatten

    if "=" in incomplete:
        return []
    keys = {f"monitor_config.{row[0]}" for row in field_docs(MonitorSettings)}
    try:
        data = yaml.safe_load(Path(str(ctx.params.get("config") or "")).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        keys |= set(flatten(data))
    return sorted(f"{key}=" for key in keys if key.startswith(incomplete))
