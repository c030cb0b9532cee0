"""``msmon doctor``: can this environment run a monitored training? Each problem a finding with its fix.

Versions (Python, MindSpore, mindformers and the tools around them) and whether the pair is in msmon's
tested matrix; the device targets MindSpore can use here; ``msrun``; known-bad combinations; with a
config, its save_dir and the board port. Fast: it reads installed metadata and a few files and never
imports mindspore or mindformers (msmon.compat holds the version knowledge). ``require_runnable`` is
the blocking subset ``msmon run`` performs before it creates anything. Codes MS9xx (docs/config.md).
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from msmon import compat
from msmon.errors import MsmonError
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.util.jsonfiles import JsonObject

SUPPORTED_PYTHON = (3, 11)
TESTED = ", ".join(f"mindformers {p.mindformers} + mindspore {p.mindspore}" for p in compat.TESTED_PAIRS)
INSTALL_DEFAULT = (
    f"pip install mindformers=={compat.DEFAULT_PAIR.mindformers} mindspore=={compat.DEFAULT_PAIR.mindspore} "
    f"-c {compat.DEFAULT_PAIR.constraints}"
)


@dataclass
class Device:
    """One device target: whether MindSpore can use it here, and what was seen."""

    available: bool
    detail: str
    extra: JsonObject = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        return {"available": self.available, "detail": self.detail, **self.extra}


@dataclass
class DoctorReport:
    python: str
    versions: dict[str, str | None]
    tested_pair: bool
    devices: dict[str, Device]
    msrun: str | None
    findings: list[Finding]
    config: dict[str, ConfigValue] | None = None

    @property
    def ok(self) -> bool:
        return not any(f.is_error for f in self.findings)

    def to_json(self) -> JsonObject:
        return {
            "ok": self.ok,
            "python": self.python,
            "versions": self.versions,
            "tested_pair": self.tested_pair,
            "tested_pairs": [{"mindformers": p.mindformers, "mindspore": p.mindspore} for p in compat.TESTED_PAIRS],
            "devices": {name: device.to_dict() for name, device in self.devices.items()},
            "msrun": self.msrun,
            "config": self.config,
            "findings": [f.to_dict() for f in self.findings],
        }


# -- the checks (pure functions of what was seen, so each rule has a unit test) ----------------------------


def check_python(version: tuple[int, ...]) -> list[Finding]:
    if tuple(version[:2]) == SUPPORTED_PYTHON:
        return []
    shown = ".".join(map(str, version[:3]))
    return [warning("MS901", "python", f"Python {shown}: msmon and the MindSpore wheels it is tested with need 3.11",
                    "create the environment with python3.11")]


def check_framework(versions: Mapping[str, str | None]) -> list[Finding]:
    """MindSpore and mindformers present, importable in principle, and a tested pair (the blocking part is errors)."""
    ms, mf = versions.get("mindspore"), versions.get("mindformers")
    findings = []
    if ms is None:
        findings.append(error("MS902", "mindspore", "MindSpore is not installed", INSTALL_DEFAULT))
    if mf is None:
        findings.append(error("MS902", "mindformers", "mindformers is not installed", INSTALL_DEFAULT))
    for req in compat.missing_unpublished(mf):
        findings.append(error(
            "MS903", "mindformers",
            f"mindformers {mf} imports {req.module} ({req.distribution}), which is not installed and not published "
            "on the package index: `import mindformers` fails",
            f"use a mindformers msmon supports ({TESTED}), or install {req.distribution} from its source",
        ))
    if ms is not None and mf is not None and not compat.tested_pair(mf, ms):
        inside = compat.in_range(mf, compat.MINDFORMERS_RANGE) and compat.in_range(ms, compat.MINDSPORE_RANGE)
        where = "inside msmon's supported ranges but not in its tested matrix" if inside else (
            "outside msmon's supported ranges (mindformers >=1.8,<2; mindspore >=2.7.2,<2.10)")
        findings.append(warning(
            "MS904", "mindformers", f"mindformers {mf} + mindspore {ms} is {where}",
            f"use a tested pair: {TESTED}",
        ))
    return findings


def check_known_bad(versions: Mapping[str, str | None]) -> list[Finding]:
    """Combinations of the tools around the framework that are known to break something."""
    findings = []
    mindinsight, protobuf, pandas = versions.get("mindinsight"), versions.get("protobuf"), versions.get("pandas")
    if mindinsight is None:
        findings.append(warning(
            "MS905", "mindinsight", "MindInsight is not installed: the mindinsight backend and `msmon board` need it",
            "pip install mindinsight==2.3.1 protobuf==3.20.1",
        ))
        return findings
    if compat.protobuf_too_new_for_mindinsight(protobuf):
        findings.append(warning(
            "MS906", "protobuf",
            f"protobuf {protobuf} is newer than MindInsight 2.3.1 accepts (<=3.20.1): it loads only with "
            "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, which `msmon board` sets (a `mindinsight start` by hand "
            "needs it too)",
            "pip install protobuf==3.20.1, unless your MindSpore needs a newer one (2.10 needs >=7)",
        ))
    elif compat.protobuf_outside_mindinsight_pin(protobuf):
        findings.append(warning(
            "MS906", "protobuf", f"protobuf {protobuf} breaks MindInsight 2.3.1's pin (<=3.20.1); it still loads",
            "pip install protobuf==3.20.1",
        ))
    if compat.pandas_breaks_mindinsight_lineage(pandas):
        findings.append(warning(
            "MS907", "pandas",
            f"pandas {pandas}: MindInsight 2.3.1's lineage and hyperparameter-importance pages fail "
            "(they call DataFrame.iteritems, removed in pandas 2); msmon's scalars are not affected",
            "pip install 'pandas<2' if you use those pages",
        ))
    marshmallow = versions.get("marshmallow")
    if compat.marshmallow_breaks_mindinsight_search(marshmallow):
        findings.append(warning(
            "MS912", "marshmallow",
            f"marshmallow {marshmallow}: MindInsight 2.3.1's lineage and hyperparameter-importance searches with a "
            "condition (the Lineage Analysis page's) fail with HTTP 500 (its validators lack marshmallow 4's "
            "data_key argument)", "pip install 'marshmallow<4' if you use those pages",
        ))
    return findings


def check_msrun(msrun: str | None, mindspore: str | None) -> list[Finding]:
    if msrun is not None or mindspore is None:
        return []
    return [warning("MS908", "msrun", "msrun (MindSpore's launcher) is not on PATH: `msmon run --worker-num` needs it",
                    "activate the environment that holds MindSpore, or reinstall mindspore")]


def devices(
    plugins: set[str], npus: list[str], gpus: list[str], cann: compat.CannInfo | None, mindspore: str | None
) -> dict[str, Device]:
    """What MindSpore can use here: its wheel's backends against the devices and toolkits present."""
    if mindspore is None:
        missing = Device(False, "MindSpore is not installed")
        return {"CPU": missing, "Ascend": missing, "GPU": missing}
    ascend_extra = {
        "npus": len(npus), "cann": cann.version if cann else None, "cann_home": str(cann.home) if cann else None,
    }
    if "ascend" not in plugins:
        ascend = Device(False, "this MindSpore wheel has no Ascend backend", ascend_extra)
    elif not npus:
        seen = f"; CANN {cann.version or '(version unknown)'} at {cann.home}" if cann else ""
        ascend = Device(False, f"no NPU (/dev/davinci*){seen}", ascend_extra)
    elif cann is None:
        ascend = Device(False, f"{len(npus)} NPU(s) but no CANN toolkit (source set_env.sh for ASCEND_HOME_PATH)",
                        ascend_extra)
    else:
        ascend = Device(True, f"{len(npus)} NPU(s), CANN {cann.version or '(version unknown)'} at {cann.home}",
                        ascend_extra)
    if "gpu" not in plugins:
        gpu = Device(False, "this MindSpore wheel has no GPU backend", {"gpus": len(gpus)})
    elif not gpus:
        gpu = Device(False, "no NVIDIA GPU (/dev/nvidia*)", {"gpus": 0})
    else:
        gpu = Device(True, f"{len(gpus)} NVIDIA GPU(s)", {"gpus": len(gpus)})
    return {"CPU": Device(True, "always"), "Ascend": ascend, "GPU": gpu}


def check_cann(mindspore: str | None, cann: compat.CannInfo | None, npus: list[str]) -> list[Finding]:
    if cann is None or not npus or compat.cann_supported(mindspore, cann.version) is not False:
        return []
    accepted = ", ".join(compat.CANN_FOR_MINDSPORE[compat.release(mindspore)[:2]])
    return [warning("MS909", "cann", f"CANN {cann.version} at {cann.home} is not one MindSpore {mindspore} accepts "
                    f"({accepted})", "install a matching CANN or the MindSpore built for yours")]


def check_device_target(target: str, available: Mapping[str, Device]) -> list[Finding]:
    device = available.get(target)
    if device is None or device.available:
        return []
    usable = ", ".join(name for name, d in available.items() if d.available) or "none"
    return [error("MS910", "context.device_target", f"device_target {target} cannot run here: {device.detail}",
                  f"run it where the device is, or set context.device_target to one usable here ({usable})")]


def check_port(port: int, busy: bool) -> list[Finding]:
    if not busy:
        return []
    return [warning("MS911", "board.port", f"port {port} on 127.0.0.1 is busy: the board would not start there",
                    "pass --port N, or --port 0 for a free one")]


# -- gathering -----------------------------------------------------------------------------------------


def _config_part(config: str, port: int,
                 available: Mapping[str, Device]) -> tuple[dict[str, ConfigValue], list[Finding]]:
    from msmon.config.loader import load_config
    from msmon.util.net import port_in_use
    from msmon.validate.save_dir import free_space_mb
    from msmon.validate.validator import validate

    result = validate(load_config(config))
    save_dir = Path(result.settings.save_dir).expanduser().absolute()
    save_dir_findings = [f for f in result.findings if f.code.startswith("MS2")]  # ASCII, writable, free disk
    target = str((result.training.get("context") or {}).get("device_target") or "Ascend")  # mindformers' default
    busy = port_in_use("127.0.0.1", port)
    part = {
        "path": config, "save_dir": str(save_dir), "save_dir_ok": not any(f.is_error for f in save_dir_findings),
        "free_mb": round(free_space_mb(save_dir)), "device_target": target, "board_port": port, "port_free": not busy,
    }
    return part, [*save_dir_findings, *check_device_target(target, available), *check_port(port, busy)]


def diagnose(config: str | None = None, port: int = 8080) -> DoctorReport:
    """Everything ``msmon doctor`` shows; MsmonError when CONFIG cannot be read."""
    from msmon.ops.board import find_binary

    versions = compat.installed_versions()
    ms, mf = versions["mindspore"], versions["mindformers"]
    cann, npus = compat.find_cann(), compat.npu_devices()
    available = devices(compat.mindspore_plugins(), npus, compat.gpu_devices(), cann, ms)
    msrun = find_binary("msrun")
    findings = [
        *check_python(sys.version_info[:3]),
        *check_framework(versions),
        *check_known_bad(versions),
        *check_msrun(msrun, ms),
        *check_cann(ms, cann, npus),
    ]
    config_part = None
    if config is not None:
        config_part, config_findings = _config_part(config, port, available)
        findings += config_findings
    return DoctorReport(
        python=platform.python_version(), versions=versions, tested_pair=compat.tested_pair(mf, ms),
        devices=available, msrun=msrun, findings=findings, config=config_part,
    )


def blocking_findings(versions: Mapping[str, str | None] | None = None) -> list[Finding]:
    """The doctor's errors that make any training impossible (``msmon run`` stops on them)."""
    return [f for f in check_framework(compat.installed_versions() if versions is None else versions) if f.is_error]


def require_runnable() -> None:
    """Raise MsmonError (exit 1) naming the first blocking problem; creates nothing."""
    blocking = blocking_findings()
    if blocking:
        first = blocking[0]
        raise MsmonError(f"{first.message} [{first.code}]", f"{first.hint}; `msmon doctor` checks the environment")
