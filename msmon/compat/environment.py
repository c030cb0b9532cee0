"""The environment msmon runs in: installed versions, the tested matrix, what a mindformers release changes,
known-bad combinations, and the devices MindSpore can use.
Nothing here imports mindspore, mindformers or MindInsight: versions come from the installed
distributions' metadata (a few milliseconds, no side effects). docs/compatibility.md explains it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

# -- installed versions ------------------------------------------------------------------------------

#: The distributions ``msmon doctor`` reports, in display order.
REPORTED = ("mindspore", "mindformers", "mindinsight", "protobuf", "tensorboard", "tensorboardX", "mlflow", "pandas",
            "marshmallow")


def package_version(name: str) -> str | None:
    """An installed distribution's version, without importing it (None when it is not installed)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def findable(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path, not imported)."""
    try:
        return util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_versions(names: Iterable[str] = REPORTED) -> dict[str, str | None]:
    """Distribution name -> installed version (None when absent); reads metadata only."""
    return {name: package_version(name) for name in names}


def release(version: str | None) -> tuple[int, ...]:
    """The numeric release of a version string: ``'2.7.2rc1'`` -> ``(2, 7, 2)``; ``None`` -> ``()``."""
    match = re.match(r"\d+(?:\.\d+)*", (version or "").strip())
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


# -- the tested matrix -------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameworkPair:
    """A mindformers release with the MindSpore it installs with, as msmon's CI tests it."""

    mindformers: str
    mindspore: str
    constraints: str  # the pip constraints file CI installs the environment with
    scope: str  # what CI runs on it


TESTED_PAIRS: tuple[FrameworkPair, ...] = (
    FrameworkPair("1.9.0", "2.9.0", "constraints/default.txt", "the whole test suite"),
    FrameworkPair("1.8.0", "2.7.2", "constraints/mf18.txt", "the compat_smoke tests, after installing msmon into it"),
)
DEFAULT_PAIR = TESTED_PAIRS[0]
#: The ranges pyproject.toml declares (a test checks both agree and hold every tested pair).
MINDFORMERS_RANGE = ((1, 8), (2,))
MINDSPORE_RANGE = ((2, 7, 2), (2, 10))


def tested_pair(mindformers: str | None, mindspore: str | None) -> bool:
    """Whether exactly this mindformers + MindSpore pair is in msmon's tested matrix."""
    return any(p.mindformers == mindformers and p.mindspore == mindspore for p in TESTED_PAIRS)


def in_range(version: str | None, bounds: tuple[tuple[int, ...], tuple[int, ...]]) -> bool:
    """``low <= version < high`` on numeric releases."""
    low, high = bounds
    return version is not None and low <= release(version) < high


# -- what a mindformers release changes for msmon ----------------------------------------------------

#: Behaviour msmon or its tests rely on -> (first mindformers release that has it, what it is).
#: Both 1.8.0 and 1.9.0 return the same ``MFTrainOneStepCell`` outputs (5-tuple, 7 with local_norm).
MINDFORMERS_FEATURES: dict[str, tuple[tuple[int, ...], str]] = {
    "qwen3_train_configs": ((1, 9), "the shipped configs/qwen3/pretrain_qwen3_32b_4k.yaml (and 20+ train YAMLs)"),
    "pynative_package": ((1, 9), "the mindformers.pynative package (PyNative mcore models, needs hyper_parallel)"),
}


def mindformers_has(feature: str, version: str | None = None) -> bool:
    """Whether the installed (or the given) mindformers release has ``feature``."""
    since, _ = MINDFORMERS_FEATURES[feature]
    version = version if version is not None else package_version("mindformers")
    return version is not None and release(version) >= since


def missing_feature(feature: str, version: str | None = None) -> str | None:
    """Why ``feature`` is missing from the installed mindformers (a pytest skip reason), or None."""
    if mindformers_has(feature, version):
        return None
    since, what = MINDFORMERS_FEATURES[feature]
    installed = version if version is not None else package_version("mindformers")
    need = ".".join(map(str, since))
    return f"needs mindformers >= {need} ({what}); installed: {installed or 'none'} (msmon.compat)"


# -- known-bad combinations ---------------------------------------------------------------------------

#: MindInsight 2.3.1 pins protobuf<=3.20.1; protobuf 4.21+ (upb) refuses its generated *_pb2 modules
#: ("Descriptors cannot be created directly") unless the pure-Python implementation is selected.
MINDINSIGHT_PROTOBUF_MAX = (3, 20, 1)
PROTOBUF_PYTHON_IMPL = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}


def protobuf_too_new_for_mindinsight(protobuf: str | None) -> bool:
    """Whether ``protobuf`` is newer than the 3.20.x line MindInsight 2.3.1's modules load with."""
    return protobuf is not None and release(protobuf)[:2] > MINDINSIGHT_PROTOBUF_MAX[:2]


def protobuf_outside_mindinsight_pin(protobuf: str | None) -> bool:
    """Whether ``protobuf`` breaks MindInsight 2.3.1's declared pin (``pip check`` reports it)."""
    return protobuf is not None and release(protobuf) > MINDINSIGHT_PROTOBUF_MAX


def mindinsight_env(protobuf: str | None) -> dict[str, str]:
    """Environment a MindInsight child needs under ``protobuf`` (empty for 3.20.x and older)."""
    return dict(PROTOBUF_PYTHON_IMPL) if protobuf_too_new_for_mindinsight(protobuf) else {}


def pandas_breaks_mindinsight_lineage(pandas: str | None) -> bool:
    """MindInsight 2.3.1's lineage and hyperparameter-importance code calls ``DataFrame.iteritems``,
    removed in pandas 2.0."""
    return pandas is not None and release(pandas)[:1] >= (2,)


def marshmallow_breaks_mindinsight_search(marshmallow: str | None) -> bool:
    """marshmallow 4 calls ``@validates`` methods with a ``data_key`` argument that MindInsight 2.3.1's search
    validators do not take: every lineage or importance search with a condition answers HTTP 500."""
    return marshmallow is not None and release(marshmallow)[:1] >= (4,)


@dataclass(frozen=True)
class UnpublishedRequirement:
    """A package a mindformers release imports that the package index does not have."""

    since: tuple[int, ...]  # first mindformers release that needs it
    module: str  # import name
    distribution: str  # the name mindformers' metadata requires


UNPUBLISHED_REQUIREMENTS = (UnpublishedRequirement((2, 0), "hyper_parallel", "hyper-parallel"),)


def missing_unpublished(mindformers: str | None) -> list[UnpublishedRequirement]:
    """Unpublished packages that the installed ``mindformers`` release imports and that are absent."""
    if mindformers is None:
        return []
    return [
        req for req in UNPUBLISHED_REQUIREMENTS
        if release(mindformers) >= req.since and not findable(req.module)
    ]


def import_failure(package: str, exc: BaseException) -> str:
    """One line saying that ``package`` failed to import, and why."""
    lines = str(exc).strip().splitlines()
    reason = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return f"{package} failed to import: {reason}"


# -- devices --------------------------------------------------------------------------------------------

#: CANN releases each MindSpore line accepts (its run_check/_check_version.py ``AscendEnvChecker.version``).
CANN_FOR_MINDSPORE: dict[tuple[int, ...], tuple[str, ...]] = {
    (2, 9): ("8.2", "8.3", "8.5", "9.0"),
    (2, 7): ("8.5",),
}
#: Where a CANN toolkit lives when no environment variable says so (set_env.sh exports ASCEND_HOME_PATH).
CANN_HOMES = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
CANN_ENV = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")


@dataclass(frozen=True)
class CannInfo:
    home: Path
    version: str | None  # e.g. "8.3.RC1"; None when the home holds no version file


def _key_value(path: Path, keys: tuple[str, ...]) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().lower() in keys:
            value = value.strip().strip("[]")
            return value.rpartition(":")[2] or None  # version.cfg writes [7.0.0.5.242:7.0.RC1]
    return None


def cann_version(home: Path) -> str | None:
    """The CANN version installed at ``home``, read from its version files (no NPU needed)."""
    candidates = [
        (home / "compiler" / "version.info", ("version",)),  # what MindSpore itself reads
        (home / "version.cfg", ("runtime_running_version", "toolkit_running_version")),
        *[(p, ("version",)) for p in sorted(home.glob("*-linux/ascend_toolkit_install.info"))],
    ]
    for path, keys in candidates:
        value = _key_value(path, keys)
        if value:
            return value
    return None


def find_cann(environ: dict[str, str] | None = None, homes: Iterable[str] = CANN_HOMES) -> CannInfo | None:
    """The CANN toolkit this process would use: ``$ASCEND_HOME_PATH`` first, then the default places."""
    env = os.environ if environ is None else environ
    for candidate in [env.get(name, "") for name in CANN_ENV] + list(homes):
        if candidate and Path(candidate).is_dir():
            home = Path(candidate)
            return CannInfo(home, cann_version(home))
    return None


def cann_supported(mindspore: str | None, cann: str | None) -> bool | None:
    """Whether MindSpore accepts this CANN version (None when msmon does not know that MindSpore line)."""
    accepted = CANN_FOR_MINDSPORE.get(release(mindspore)[:2])
    if accepted is None or cann is None:
        return None
    return ".".join(cann.split(".")[:2]) in accepted


def npu_devices(dev: Path = Path("/dev")) -> list[str]:
    """Ascend NPU device nodes (``/dev/davinci0`` ...; the manager node excluded)."""
    return sorted(p.name for p in dev.glob("davinci[0-9]*"))


def gpu_devices(dev: Path = Path("/dev")) -> list[str]:
    """NVIDIA GPU device nodes (``/dev/nvidia0`` ...)."""
    return sorted(p.name for p in dev.glob("nvidia[0-9]*"))


def mindspore_plugins() -> set[str]:
    """The device backends the installed MindSpore wheel ships (``cpu``, ``gpu``, ``ascend``), without importing it."""
    spec = util.find_spec("mindspore") if findable("mindspore") else None
    if spec is None or not spec.submodule_search_locations:
        return set()
    plugins = Path(next(iter(spec.submodule_search_locations))) / "lib" / "plugin"
    found = {"cpu"}  # the CPU backend is built into every MindSpore wheel
    for name in ("ascend", "gpu"):
        if any(plugins.glob(f"libmindspore_{name}.so*")) or (plugins / name).is_dir():
            found.add(name)
    return found
