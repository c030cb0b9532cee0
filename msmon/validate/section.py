"""The monitor_config section itself: msmon's keys typed strictly, mindformers' keys checked against the installed
mindformers release (MS0xx, MS501)."""

from __future__ import annotations

from collections.abc import Mapping

from msmon.compat import (
    MONITOR_CONFIG_KEYS,
    MONITOR_FORMAT_KEYS,
    MONITOR_FORMATS,
    MONITORING_KEYS_ELSEWHERE,
    monitor_config_keys,
    package_version,
)
from msmon.config.coerce import build, suggest
from msmon.config.schema import BACKENDS, MINDFORMERS_MONITOR_KEYS, MonitorSettings
from msmon.findings import Finding, error
from msmon.foreign import ConfigValue

PATH = "monitor_config"

#: mindformers' own keys whose type is checked (the others are passed through untouched).
MINDFORMERS_TYPES: dict[str, type | tuple[type, ...]] = {
    "monitor_on": bool,
    "invert": bool,
    "print_struct": bool,
    "check_for_global_norm": bool,
    "step_interval": int,
    "global_norm_spike_threshold": (int, float),
    "global_norm_spike_count_threshold": int,
}


def _normalize_backends(section: dict[str, ConfigValue], findings: list[Finding]) -> None:
    """Accept one backend name or a list; report unknown names with a suggestion."""
    value = section.get("monitor_type")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return
    kept = []
    for index, name in enumerate(value):
        if isinstance(name, str) and name.strip().lower() in BACKENDS:
            kept.append(name.strip().lower())
            continue
        hint = suggest(str(name), BACKENDS) or f"use one of: {', '.join(BACKENDS)}"
        findings.append(error("MS501", f"{PATH}.monitor_type[{index}]", f"unknown backend {name!r}", hint))
    section["monitor_type"] = list(dict.fromkeys(kept))


def _check_mindformers_keys(section: Mapping[str, ConfigValue]) -> list[Finding]:
    findings = []
    for key, expected in MINDFORMERS_TYPES.items():
        if key not in section or section[key] is None:
            continue
        value = section[key]
        if isinstance(value, bool) and expected is not bool or not isinstance(value, expected):
            name = expected.__name__ if isinstance(expected, type) else "number"
            message = f"mindformers key {key} expects a {name}, got {value!r}"
            findings.append(error("MS002", f"{PATH}.{key}", message, "fix the type"))
    if isinstance(section.get("step_interval"), int) and section["step_interval"] < 1:
        findings.append(error("MS002", f"{PATH}.step_interval", "step_interval must be >= 1", "use 1 or more"))
    for key in MONITOR_FORMAT_KEYS:
        value = section.get(key)
        formats = value if isinstance(value, list) else [value]
        if value and not all(isinstance(f, str) and f in MONITOR_FORMATS for f in formats):
            findings.append(error("MS002", f"{PATH}.{key}", f"mindformers key {key} must be 'tensorboard', 'log' or a "
                                  f"list of them (mindformers raises ValueError), got {value!r}", "write log"))
    return findings


def check_release_keys(section: Mapping[str, ConfigValue], version: str | None) -> list[Finding]:
    """mindformers keys of another release that the installed one does not know (MS005), and mindformers'
    monitoring keys that belong outside monitor_config (MS001)."""
    findings = []
    installed, read_from = monitor_config_keys(version)
    for key in section:
        if key in MONITORING_KEYS_ELSEWHERE:
            findings.append(error("MS001", f"{PATH}.{key}", f"{key} is not a monitor_config key: mindformers reads "
                                  f"it as {MONITORING_KEYS_ELSEWHERE[key]}", "move it there"))
        elif version and key in MINDFORMERS_MONITOR_KEYS and key not in installed:
            others = ", ".join(r for r, keys in sorted(MONITOR_CONFIG_KEYS.items()) if key in keys)
            hint = suggest(str(key), installed) or f"remove it, or install a mindformers release that has it ({others})"
            findings.append(error("MS005", f"{PATH}.{key}", f"the installed mindformers {version} does not know "
                                  f"monitor_config.{key} (mindformers {others} has it; keys read from {read_from})",
                                  hint))
    return findings


def check_section(section: ConfigValue) -> tuple[MonitorSettings, list[Finding]]:
    """Build msmon's settings from the resolved section; every problem becomes a finding."""
    if not isinstance(section, Mapping):
        return MonitorSettings(), [
            error("MS003", PATH, f"monitor_config must be a section of keys, got {section!r}", "write nested keys")
        ]
    findings: list[Finding] = []
    data = dict(section)
    _normalize_backends(data, findings)
    if isinstance(data.get("track_metrics"), str):
        data["track_metrics"] = [data["track_metrics"]]
    ignore = MINDFORMERS_MONITOR_KEYS | set(MONITORING_KEYS_ELSEWHERE)  # reported by _check_release_keys
    settings, built = build(MonitorSettings, data, PATH, ignore=ignore)
    findings.extend(built)
    findings.extend(check_release_keys(section, package_version("mindformers")))
    findings.extend(_check_mindformers_keys(section))
    return settings, findings
