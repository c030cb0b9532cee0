"""What the installed mindformers accepts, as typed values, from msmon's cache (``registry/<fingerprint>.json``):
the registries' names, each registered class's constructor, the config template, the top-level keys the Trainer
reads.

A cache entry is named by each package's version, location and installation record (its ``RECORD`` file, rewritten
by every install: an upgrade, a reinstall or another virtualenv each get their own entry) and by msmon's code that
builds it; an editable or unversioned package is fingerprinted by its newest source file instead (slower). A
missing entry is built once, in a child process (msmon.validate.introspect) that imports mindformers, which says so
on stderr in one line; reading an entry takes milliseconds and imports neither mindformers nor mindspore. A failed
import is never cached.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from msmon.compat import package_version
from msmon.config.datasets import cache_dir
from msmon.util.atomic import atomic_write_json
from msmon.util.files import file_lock
from msmon.util.jsonfiles import JsonObject, JsonValue

REGISTRY_PACKAGES = ("transformers", "mindformers", "mindspore")
#: The payload's layout (msmon.validate.introspect); a new layout gets new entries.
CACHE_FORMAT = 2
BUILD_TIMEOUT_S = 600
#: What the first build is said to take before one was measured on this machine (2 cores, warm page cache: 6-12 s).
DEFAULT_BUILD_S = 15


class ValueKind(StrEnum):
    """What a constructor parameter's default (or a template key's default) is."""

    NUMBER = "number"
    BOOL = "bool"
    TEXT = "text"
    NONE = "none"
    REQUIRED = "required"
    OTHER = "other"


@dataclass(frozen=True)
class Parameter:
    """A constructor parameter or a template key, and what kind of value its default is."""

    name: str
    kind: ValueKind


@dataclass(frozen=True)
class Constructor:
    """The keyword arguments a registered class takes."""

    params: tuple[Parameter, ...]
    takes_kwargs: bool

    def get(self, name: str) -> Parameter | None:
        return next((p for p in self.params if p.name == name), None)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


@dataclass(frozen=True)
class Section:
    """A section of mindformers' config template: its keys, and whether an unknown key raises ``KeyError``."""

    name: str
    keys: tuple[Parameter, ...]
    strict: bool
    is_list: bool = False

    def get(self, name: str) -> Parameter | None:
        return next((p for p in self.keys if p.name == name), None)


@dataclass(frozen=True)
class JobSchema:
    """mindformers' config template and the top-level keys its Trainer reads."""

    sections: Mapping[str, Section]
    train: tuple[str, ...]  # the sections a training applies
    eval: tuple[str, ...]  # and with do_eval
    reads: frozenset[str]

    @property
    def general(self) -> Section:
        return self.sections.get("general_config") or Section("general_config", (), False)

    def applied(self, do_eval: bool) -> tuple[Section, ...]:
        """The sections the template applies to a training (the general keys are not a section of the YAML)."""
        names = (*self.train, *(self.eval if do_eval else ()))
        return tuple(self.sections[n] for n in names if n in self.sections and n != "general_config")

    def top_level_keys(self) -> frozenset[str]:
        """Every top-level key mindformers knows: its template's sections and general keys, what the Trainer reads."""
        return frozenset(self.sections) - {"general_config"} | {p.name for p in self.general.keys} | self.reads


@dataclass(frozen=True)
class Builtins:
    """Source -> names held by transformers' and mindformers' registries; each registry's classes and their
    constructors (None: cannot tell); the config template; why mindformers failed to import."""

    names: dict[str, set[str]]
    mindformers_error: str | None = None
    classes: Mapping[str, Mapping[str, Constructor | None]] = field(default_factory=dict)
    schema: JobSchema | None = None


def _constructor(data: JsonValue) -> Constructor | None:
    if not isinstance(data, dict):
        return None
    return Constructor(tuple(Parameter(name, ValueKind(kind)) for name, kind in data["params"]), bool(data["kwargs"]))


def _schema(data: JsonObject) -> JobSchema:
    sections = {name: Section(name, tuple(Parameter(k, ValueKind(v)) for k, v in section["keys"].items()),
                              bool(section["strict"]), bool(section["list"]))
                for name, section in data["template"]["sections"].items()}
    return JobSchema(sections, tuple(data["template"]["train"]), tuple(data["template"]["eval"]),
                     frozenset(data["reads"]))


def from_payload(data: JsonObject) -> Builtins:
    """The typed values of a cache entry (msmon.validate.introspect's payload, or its ``{"error": ...}``)."""
    if "error" in data:
        return Builtins({}, str(data["error"]))
    classes = {module: {name: _constructor(ctor) for name, ctor in table.items()}
               for module, table in data["classes"].items()}
    return Builtins({source: set(names) for source, names in data["names"].items()}, None, classes, _schema(data))


def _dist_info(root: Path, package: str) -> Path | None:
    """The ``*.dist-info`` of a regular (not editable) install of ``package`` at ``root``."""
    found = sorted(root.parent.glob(f"{package}-*.dist-info"))
    if len(found) != 1:
        return None
    with contextlib.suppress(OSError):
        if '"editable": true' in (found[0] / "direct_url.json").read_text(encoding="utf-8"):
            return None
    return found[0]


def _stamp(package: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return f"{package} absent"
    root = Path(next(iter(spec.submodule_search_locations)))
    dist = _dist_info(root, package)
    if dist is not None:
        with contextlib.suppress(OSError):
            record = (dist / "RECORD").stat()
            return f"{package} {root} {dist.name} {record.st_mtime_ns} {record.st_size}"
    version = package_version(package) or "unversioned"
    newest = max((entry.stat().st_mtime_ns for entry in root.rglob("*.py")), default=0)
    return f"{package} {version} {root} {newest}"


def _builder_stamp() -> str:
    """The code that builds an entry (msmon.validate.introspect and what it reads): another msmon, another entry."""
    digest = hashlib.sha256()
    for path in (Path(__file__).with_name("introspect.py"), Path(__file__).parents[1] / "compat" / "job_keys.py"):
        digest.update(path.read_bytes())
    return f"format {CACHE_FORMAT} {digest.hexdigest()[:16]}"


def cache_file() -> Path:
    """This environment's cache entry (it may not exist yet)."""
    parts = [_builder_stamp(), *(_stamp(package) for package in REGISTRY_PACKAGES)]
    fingerprint = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return cache_dir() / "registry" / f"{fingerprint}.json"


def _read(path: Path) -> Builtins | None:
    """The entry at ``path``; None when there is none yet (or a file of another layout: built again)."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        return None
    return from_payload(data)


def _expected_seconds(directory: Path) -> int:
    """How long a build took on this machine before (else DEFAULT_BUILD_S)."""
    seconds = []
    for entry in directory.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(entry.read_text("utf-8"))
            if isinstance(data, dict) and isinstance(data.get("seconds"), int | float):
                seconds.append(float(data["seconds"]))
    return round(max(seconds)) if seconds else DEFAULT_BUILD_S


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """One build at a time per entry (parallel validations wait for the first); none on a read-only cache."""
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # a read-only cache: build without waiting for the others
            stack.enter_context(file_lock(path.parent / "build.lock"))
        yield


def _run_introspection() -> tuple[JsonObject, float]:
    """The child's payload and how long it took (mindformers imported there, never here)."""
    import subprocess
    import tempfile

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="msmon-registry-") as scratch:
        out = Path(scratch) / "payload.json"
        try:
            proc = subprocess.run(  # noqa: S603 - a fixed argv, no shell
                [sys.executable, "-m", "msmon.validate.introspect", str(out)], stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True, errors="replace", timeout=BUILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"reading mindformers' registry took over {BUILD_TIMEOUT_S} s"}, BUILD_TIMEOUT_S
        try:
            payload = json.loads(out.read_text("utf-8"))
        except (OSError, ValueError):
            last = (proc.stderr or "").strip().splitlines()[-1:] or ["no output"]
            payload = {"error": f"reading mindformers' registry failed (exit {proc.returncode}): {last[0]}"}
    return payload, time.monotonic() - started


@functools.cache
def _load(path: Path, refresh: bool) -> Builtins:
    found = None if refresh else _read(path)
    if found is not None:
        return found
    with _build_lock(path):
        found = None if refresh else _read(path)  # built meanwhile by a parallel validation
        if found is not None:
            return found
        about = _expected_seconds(path.parent)
        print(f"msmon: reading the installed mindformers' registry again (--deep, about {about} s)" if refresh else
              f"msmon: reading the installed mindformers' registry once (about {about} s; cached for later calls)",
              file=sys.stderr, flush=True)
        payload, seconds = _run_introspection()
        if "error" not in payload:
            with contextlib.suppress(OSError):  # a read-only cache only costs the next run the build again
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_json(path, {**payload, "format": CACHE_FORMAT, "seconds": round(seconds, 1)}, fsync=False)
    return from_payload(payload)


@functools.cache
def _entry(directory: Path, packages: tuple[str, ...]) -> Path:
    """``cache_file()``, fingerprinted once per process and cache directory (the checks each ask)."""
    return cache_file()


def load_builtins(refresh: bool = False) -> Builtins:
    """What the installed mindformers accepts: from msmon's cache, else read once in a child process (slow: the
    line on stderr says so); ``refresh``: read it again even when cached (``msmon validate --deep``)."""
    return _load(_entry(cache_dir(), REGISTRY_PACKAGES), refresh)
