"""The run directory: created atomically, the config snapshot as written, the resolved monitor_config, the config
the training loads, and the records a resumed attempt supersedes kept aside."""

from __future__ import annotations

import copy
import csv
import io
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import yaml

from msmon import layout
from msmon.config.loader import SECRET_SOURCES, LoadedConfig, apply_overrides
from msmon.config.mindformers_yaml import mindformers_config, render
from msmon.errors import MsmonError, describe
from msmon.foreign import ConfigValue
from msmon.util.atomic import atomic_write_text
from msmon.util.files import subdirs

CONFIG_SNAPSHOT = "config.yaml"
RESOLVED_MONITOR = "monitor_config.resolved.yaml"
LOGS = "logs"
#: The files whose records are kept per step: before an attempt resumes from step S, the records an earlier attempt
#: wrote after S move to ``<name>.attempt-N.<ext>`` (``supersede``), so every reader sees each step once.
STEPPED_FILES = (layout.METRICS, layout.METRICS_CSV, layout.ALERTS)
#: Interpolations whose resolved value may be a secret: kept unresolved in every file msmon writes.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):[^@/\s]+@")


def create_run_dir(path: Path, *, resume: bool = False) -> bool:
    """Create ``path`` with one ``os.mkdir`` (two runs cannot both get it); True when it is new.

    An existing directory is refused unless ``resume``.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path)
    except FileExistsError:
        if resume and path.is_dir():
            (path / LOGS).mkdir(exist_ok=True)
            return False
        raise MsmonError(
            f"run directory {path} already exists (another run with this run_name started first)",
            "pick another run_name (or 'auto'), or continue that run with --resume",
        ) from None
    except OSError as exc:
        raise MsmonError(f"cannot create the run directory {path}: {describe(exc)}",
                         "choose a writable monitor_config.save_dir on a disk") from None
    (path / LOGS).mkdir()
    return True


def mask_url_passwords(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://user:***@host``."""
    return _URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", text)


def redact(resolved: ConfigValue, raw: ConfigValue) -> ConfigValue:
    """``resolved`` with every value that came from an environment interpolation put back unresolved."""
    if isinstance(raw, str) and SECRET_SOURCES.search(raw):
        return raw
    if isinstance(resolved, Mapping):
        raw_map = raw if isinstance(raw, Mapping) else {}
        return {key: redact(value, raw_map.get(key)) for key, value in resolved.items()}
    if isinstance(resolved, list):
        raw_list = raw if isinstance(raw, list) else []
        return [redact(v, raw_list[i] if i < len(raw_list) else None) for i, v in enumerate(resolved)]
    if isinstance(resolved, str):
        return mask_url_passwords(resolved)
    return resolved


def write_snapshot(run_dir: Path, text: str, monitor_config: Mapping[str, ConfigValue],
                   raw_section: ConfigValue) -> None:
    """``config.yaml`` (the file as written) and ``monitor_config.resolved.yaml`` (secrets unresolved)."""
    atomic_write_text(run_dir / CONFIG_SNAPSHOT, text)
    safe = redact(dict(monitor_config), raw_section)
    header = "# msmon's resolved monitor_config (environment interpolations are kept unresolved)\n"
    atomic_write_text(run_dir / RESOLVED_MONITOR, header + yaml.safe_dump(safe, sort_keys=False, allow_unicode=True))


def write_mindformers_yaml(run_dir: Path, loaded: LoadedConfig, extra_overrides: Iterable[str] = ()) -> None:
    """``mindformers.yaml``: what the next attempt's training loads (``extra_overrides``: the keys that resume it)."""
    extra = list(extra_overrides)
    if extra:
        loaded = copy.deepcopy(loaded)
        loaded.override_keys |= apply_overrides(loaded.conf, extra, loaded.where())
    atomic_write_text(run_dir / layout.MINDFORMERS_YAML, render(mindformers_config(loaded)))


def _json_step(line: str) -> int | None:
    try:
        step = json.loads(line).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _split_lines(lines: list[str], after_step: int,
                 step_of: Callable[[str], int | None]) -> tuple[list[str], list[str]]:
    """(kept, superseded): a line whose step is above ``after_step``, and a cut last line, are superseded."""
    kept: list[str] = []
    moved: list[str] = []
    for index, line in enumerate(lines):
        torn = index == len(lines) - 1 and not line.endswith("\n")
        step = step_of(line)
        (moved if torn or (step is not None and step > after_step) else kept).append(line)
    return kept, moved


def _csv_step_reader(header: str) -> Callable[[str], int | None]:
    columns = next(csv.reader(io.StringIO(header)), [])
    index = columns.index("step") if "step" in columns else 0

    def step_of(line: str) -> int | None:
        row = next(csv.reader(io.StringIO(line)), [])
        try:
            return int(row[index])
        except (IndexError, ValueError):
            return None

    return step_of


def _supersede_file(path: Path, after_step: int, attempt: int) -> int:
    """Move ``path``'s records after ``after_step`` to its attempt file; the number moved."""
    if not path.is_file():
        return 0
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
    header = lines[:1] if path.name.endswith(".csv") else []
    body = lines[len(header):]
    step_of = _csv_step_reader(header[0]) if header else _json_step
    kept, moved = _split_lines(body, after_step, step_of)
    if not moved:
        return 0
    aside = path.with_name(layout.superseded(path.name, attempt))
    fresh = not aside.exists()
    with aside.open("a", encoding="utf-8") as handle:
        handle.writelines((header if fresh else []) + [m if m.endswith("\n") else m + "\n" for m in moved])
    atomic_write_text(path, "".join(header + kept))
    return len(moved)


def supersede(run_dir: Path, after_step: int, attempt: int) -> int:
    """Move every record attempts up to ``attempt`` wrote after ``after_step`` aside; how many were moved."""
    directories = [run_dir, *(d for d in subdirs(run_dir) if d.name.startswith("rank_"))]
    return sum(_supersede_file(directory / name, after_step, attempt)
               for directory in directories for name in STEPPED_FILES)
