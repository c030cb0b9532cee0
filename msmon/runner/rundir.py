"""The run directory: created atomically, the config snapshot as written, the resolved monitor_config, the config
the training loads."""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from msmon import layout
from msmon.config.loader import LoadedConfig, apply_overrides
from msmon.config.mindformers_yaml import mindformers_config, render
from msmon.errors import MsmonError
from msmon.util.atomic import atomic_write_text

CONFIG_SNAPSHOT = "config.yaml"
RESOLVED_MONITOR = "monitor_config.resolved.yaml"
LOGS = "logs"
#: Interpolations whose resolved value may be a secret: kept unresolved in every file msmon writes.
_SECRET_SOURCES = re.compile(r"\$\{\s*(oc\.env|env|oc\.decode)\s*:")
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):[^@/\s]+@")


def create_run_dir(path: Path, *, resume: bool = False) -> bool:
    """Create ``path`` with one ``os.mkdir`` (two runs cannot both get it); True when it is new.

    An existing directory is refused unless ``resume``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path)
    except FileExistsError:
        if resume and path.is_dir():
            (path / LOGS).mkdir(exist_ok=True)
            return False
        raise MsmonError(
            f"run directory {path} already exists (another run with this run_name started first)",
            "pick another run_name (or 'auto'), or continue that run with --resume",
        ) from None
    (path / LOGS).mkdir()
    return True


def mask_url_passwords(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://user:***@host``."""
    return _URL_PASSWORD.sub(r"\g<scheme>\g<user>:***@", text)


def redact(resolved: Any, raw: Any) -> Any:
    """``resolved`` with every value that came from an environment interpolation put back unresolved."""
    if isinstance(raw, str) and _SECRET_SOURCES.search(raw):
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


def write_snapshot(run_dir: Path, text: str, monitor_config: Mapping[str, Any], raw_section: Any) -> None:
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
