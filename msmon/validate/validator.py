"""Run every check over a loaded config and say where each resolved value came from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from msmon.compat import PipelineLayout, expected_world_size, pipeline_layout
from msmon.config.coerce import field_docs
from msmon.config.loader import LoadedConfig, _now
from msmon.config.schema import MINDFORMERS_MONITOR_KEYS, MonitorSettings
from msmon.errors import first_line
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.launch_layout import LaunchLayout
from msmon.util.jsonfiles import JsonObject
from msmon.util.mapping import dotted_get
from msmon.validate.backends import check_backends
from msmon.validate.compile_cache import check_compile_cache
from msmon.validate.context import CheckContext
from msmon.validate.cpu import check_cpu
from msmon.validate.health import check_health
from msmon.validate.inputs import INPUT_CODE, check_inputs
from msmon.validate.interval import check_flight_recorder, check_interval, total_steps
from msmon.validate.job_numbers import check_job_numbers
from msmon.validate.job_types import check_job_types
from msmon.validate.launch import check_launch
from msmon.validate.learning_rate import check_learning_rate
from msmon.validate.metrics import check_metrics
from msmon.validate.mf_equivalents import check_duplicates
from msmon.validate.mf_monitoring import check_mindformers_monitoring
from msmon.validate.moe import check_moe
from msmon.validate.names import check_names, model_name, needs_generated_name
from msmon.validate.reference import check_reference
from msmon.validate.registry import check_registry
from msmon.validate.rollback import check_rollback
from msmon.validate.save_dir import check_save_dir
from msmon.validate.section import check_section
from msmon.validate.top_level import check_job_keys

CHECKS = (
    check_names, check_save_dir, check_metrics, check_interval, check_flight_recorder, check_backends, check_cpu,
    check_registry, check_job_keys, check_job_types, check_job_numbers, check_health, check_rollback,
    check_learning_rate, check_mindformers_monitoring, check_inputs, check_duplicates, check_launch, check_reference,
    check_moe, check_compile_cache,
)
MAX_UNRESOLVED = 100
MSMON_KEYS = frozenset(MonitorSettings.__dataclass_fields__)
_ABSENT = object()


@dataclass
class ValidationResult:
    """Findings, msmon's resolved settings, and the resolved training config."""

    findings: list[Finding]
    settings: MonitorSettings
    training: dict[str, ConfigValue]
    provenance: dict[str, str] = field(default_factory=dict)
    has_monitor_config: bool = True
    total_steps: int | None = None

    @property
    def pipeline(self) -> PipelineLayout:
        """Which rank's records msmon writes, for the ranks the config's parallel_config describes (data x model
        x context x pipeline parallel): the first rank holding the loss under pipeline stages."""
        return pipeline_layout(self.training, expected_world_size(self.training))

    @property
    def valid(self) -> bool:
        return not any(f.is_error for f in self.findings)

    @property
    def lacks_only_inputs(self) -> bool:
        """Whether every error is an input the training reads that this machine lacks (MS011): a cluster's config
        read on a workstation, which is complete where it runs."""
        return all(f.code == INPUT_CODE for f in self.findings if f.is_error)

    def msmon_findings(self) -> tuple[list[Finding], list[Finding]]:
        """(the findings of msmon's own monitor_config keys, the findings of the rest of the config)."""
        own = [f for f in self.findings if f.path == "monitor_config"
               or f.path.startswith("monitor_config.") and f.path.split(".")[1].split("[")[0] in MSMON_KEYS]
        return own, [f for f in self.findings if f not in own]

    def monitor_config(self) -> dict[str, ConfigValue]:
        """msmon's resolved keys plus mindformers' own keys as written."""
        data = dataclasses.asdict(self.settings)
        section = self.training.get("monitor_config")
        if isinstance(section, dict):
            data.update({k: v for k, v in section.items() if k in MINDFORMERS_MONITOR_KEYS})
        return data

    def to_json(self, config_path: str | None) -> JsonObject:
        return {
            "valid": self.valid,
            "config": config_path,
            "findings": [f.to_dict() for f in self.findings],
            "monitor_config": self.monitor_config(),
            "sources": self.provenance,
            "metrics_from": self.pipeline.describe(),
        }


def resolve_leniently(loaded: LoadedConfig) -> tuple[dict[str, ConfigValue], list[Finding]]:
    """Resolve interpolations; each unresolvable key becomes a finding and is set to null."""
    conf = cast(DictConfig, OmegaConf.create(OmegaConf.to_container(loaded.conf, resolve=False)))
    findings: list[Finding] = []
    for _ in range(MAX_UNRESOLVED):
        try:
            return OmegaConf.to_container(conf, resolve=True), findings  # type: ignore[return-value]
        except OmegaConfBaseException as exc:
            key = str(getattr(exc, "full_key", "") or "")
            reason = first_line(exc)
            findings.append(
                error(
                    "MS004",
                    key or "<config>",
                    f"cannot resolve the interpolation: {reason}",
                    "define the referenced key or environment variable, or give a default: ${oc.env:VAR,default}",
                )
            )
            if not key:
                break
            try:
                OmegaConf.update(conf, key, None, force_add=True)
            except (OmegaConfBaseException, ValueError, KeyError):
                break
    return {}, findings


def _provenance(loaded: LoadedConfig, section: dict[str, ConfigValue], generated: set[str],
                rejected: set[str]) -> dict[str, str]:
    """Where each setting's value comes from; ``rejected``: the dotted paths with an error finding (their value
    as written is not used: the table shows the default)."""
    sources: dict[str, str] = {}
    for key, *_ in field_docs(MonitorSettings):
        dotted = f"monitor_config.{key}"
        present = dotted_get(section, key, _ABSENT) is not _ABSENT
        overridden = any(dotted == o or dotted.startswith(o + ".") or o.startswith(dotted + ".")
                         for o in loaded.override_keys)
        if dotted in rejected:
            sources[key] = "rejected: default shown"
        elif key in generated:
            sources[key] = "generated"
        elif overridden:
            sources[key] = "override"
        elif present:
            sources[key] = "file"
        else:
            sources[key] = "default"
    return sources


def generated_run_name(ctx: CheckContext, when: datetime | None = None) -> str:
    stamp = when.strftime("%Y%m%d_%H%M%S") if when else _now("%Y%m%d_%H%M%S")
    return f"{model_name(ctx)}_{stamp}"


def validate(
    loaded: LoadedConfig, *, resume: bool = False, deep: bool = False, cwd: Path | None = None,
    launch: LaunchLayout | None = None,
) -> ValidationResult:
    """Check ``loaded`` before any device is touched; never imports mindspore or mindformers (the installed
    mindformers' registry comes from msmon's cache, built once in a child process; ``deep``: built again).
    ``launch``: also check what ``msmon run`` refuses for that launch (MS026)."""
    training, findings = resolve_leniently(loaded)
    section = training.get("monitor_config")
    has_section = "monitor_config" in training and section is not None
    if not has_section:
        settings = MonitorSettings(enable_monitor=False)
        findings.append(
            warning(
                "MS000",
                "monitor_config",
                "no monitor_config section: monitoring is off for this run",
                "add one: msmon init CONFIG writes a starting section",
            )
        )
        section = {}
    else:
        settings, section_findings = check_section(section)
        unresolved = {f.path for f in findings if f.code == "MS004"}  # one finding per root cause: not also MS002
        findings.extend(f for f in section_findings if f.path not in unresolved)
        section = section if isinstance(section, dict) else {}
    ctx = CheckContext(loaded, training, section, settings, resume=resume, deep=deep, cwd=cwd or Path.cwd(),
                       launch=launch)
    generated: set[str] = set()
    if needs_generated_name(settings.run_name):
        settings = dataclasses.replace(settings, run_name=generated_run_name(ctx))
        ctx.settings = settings
        generated.add("run_name")
    for check in CHECKS:
        findings.extend(check(ctx))
    findings = [f if f.line is not None or _overridden(loaded, f.path) else f.with_line(loaded.line_of(f.path))
                for f in findings]
    return ValidationResult(
        findings=findings,
        settings=settings,
        training=training,
        provenance=_provenance(loaded, section, generated, {f.path for f in findings if f.is_error}),
        has_monitor_config=has_section,
        total_steps=total_steps(ctx),
    )


def _overridden(loaded: LoadedConfig, path: str) -> bool:
    base = path.split("[")[0]
    return any(base == o or base.startswith(o + ".") for o in loaded.override_keys)


def validate_config(
    config: str | Path | dict[str, ConfigValue] | None = None,
    overrides: list[str] | None = None,
    *,
    monitor_config: dict[str, ConfigValue] | None = None,
    resume: bool = False,
    deep: bool = False,
) -> ValidationResult:
    """Library entry point: a YAML path or a training config dict; ``monitor_config`` replaces that section."""
    from msmon.config.loader import config_from_dict, load_config

    if isinstance(config, str | Path):
        loaded = load_config(config, overrides)
        if monitor_config is not None:
            loaded.conf.monitor_config = monitor_config
        return validate(loaded, resume=resume, deep=deep)
    data = dict(config or {})
    if monitor_config is not None:
        data["monitor_config"] = monitor_config
    return validate(config_from_dict(data, overrides), resume=resume, deep=deep)
