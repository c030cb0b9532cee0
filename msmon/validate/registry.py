"""Model-type name conflicts ("X is already used by a transformers config, pick another name") (MS7xx).

Custom registrations (``auto_register: module_file.ClassName`` anywhere in the config) are read with
``ast`` from the module file, never executed; the built-in registries of transformers and mindformers
are imported lazily, only when a custom registration is present or with ``--deep``, and their names kept in
msmon's cache (``registry/<fingerprint>.json``) for as long as no source file of those packages changes: the
import costs about 8 s of CPU, the cached read milliseconds.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from msmon.compat import import_failure
from msmon.config.datasets import cache_dir
from msmon.findings import Finding, error, warning
from msmon.util.atomic import atomic_write_json
from msmon.validate.context import CheckContext
from msmon.validate.cpu import CPU_WRAPPER


@dataclass(frozen=True)
class Registration:
    """A name a custom module registers: a model_type, or a class name in MindFormerRegister."""

    name: str
    kind: str  # "model_type" or "class"
    path: str  # dotted config path of the auto_register key


def _auto_registers(node: Any, prefix: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if key == "auto_register" and isinstance(value, str):
                yield dotted, value
            else:
                yield from _auto_registers(value, dotted)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _auto_registers(item, f"{prefix}[{index}]")


def _module_file(reference: str, ctx: CheckContext) -> Path | None:
    module = reference.rpartition(".")[0]
    roots = [os.environ.get("REGISTER_PATH", ""), str(ctx.loaded.path.parent) if ctx.loaded.path else "", str(ctx.cwd)]
    for root in filter(None, roots):
        candidate = Path(root) / (module.replace(".", "/") + ".py")
        if candidate.is_file():
            return candidate
    return None


def _string_arg(call: ast.Call, index: int, keyword: str) -> str | None:
    if len(call.args) > index:
        arg = call.args[index]
        return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
    for kw in call.keywords:
        if kw.arg == keyword and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    return None


def registrations_in(source: str, class_name: str, path: str) -> list[Registration]:
    """Names a module registers: the class itself, its model_type, AutoConfig.register(...) names, aliases."""
    found = [Registration(class_name, "class", path)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "model_type" for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)
                ):
                    found.append(Registration(stmt.value.value, "model_type", path))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register":
            owner = node.func.value
            owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if owner_name in {"AutoConfig", "CONFIG_MAPPING"}:
                name = _string_arg(node, 0, "model_type")
                if name:
                    found.append(Registration(name, "model_type", path))
            elif owner_name == "MindFormerRegister":
                alias = _string_arg(node, 1, "alias")
                if alias:
                    found.append(Registration(alias, "class", path))
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Builtins:
    """Source -> names held by transformers' and mindformers' registries; why mindformers failed to import."""

    names: dict[str, set[str]]
    mindformers_error: str | None = None


REGISTRY_PACKAGES = ("transformers", "mindformers", "mindspore")


@functools.cache
def load_builtins() -> Builtins:
    """The built-in registries: from msmon's cache when the packages are unchanged, else imported (slow) and
    cached when mindformers imported."""
    cached = _cache_file()
    try:
        return Builtins({source: set(names) for source, names in json.loads(cached.read_text("utf-8")).items()})
    except (OSError, ValueError, AttributeError, TypeError):
        pass  # not cached yet (or a foreign file): import
    with contextlib.redirect_stdout(sys.stderr):  # the libraries print banners: keep stdout (--json) clean
        found = _import_builtin_names()
    if found.mindformers_error is None:
        with contextlib.suppress(OSError):  # a read-only cache only costs the next run the import again
            cached.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(cached, {source: sorted(names) for source, names in found.names.items()}, fsync=False)
    return found


def _cache_file() -> Path:
    """The cache entry of the installed registries: named by each package's version, location and newest source
    file (an upgrade, another environment or an edited clone of mindformers each get their own)."""
    parts = []
    for package in REGISTRY_PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            parts.append(f"{package} absent")
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "unversioned"
        newest = max((entry.stat().st_mtime_ns for entry in root.rglob("*.py")), default=0)
        parts.append(f"{package} {version} {root} {newest}")
    fingerprint = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]
    return cache_dir() / "registry" / f"{fingerprint}.json"


def builtin_names() -> dict[str, set[str]]:
    """Source -> names held by transformers' and mindformers' registries (imports them: slow)."""
    return load_builtins().names


def _import_builtin_names() -> Builtins:
    names: dict[str, set[str]] = {}
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        names["transformers config"] = set(CONFIG_MAPPING_NAMES)
    except ImportError:
        pass
    if "LOCAL_DEFAULT_PATH" not in os.environ:  # importing mindformers writes ./output/log otherwise
        scratch = tempfile.mkdtemp(prefix="msmon-mindformers-")
        atexit.register(shutil.rmtree, scratch, True)
        os.environ["LOCAL_DEFAULT_PATH"] = scratch
    try:
        from mindformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES as MF_NAMES
        from mindformers.tools.register import MindFormerRegister

        names["mindformers config"] = set(MF_NAMES)
        names["mindformers registry"] = {n for table in MindFormerRegister.registry.values() for n in table}
    except Exception as exc:  # noqa: BLE001 - mindformers' import can raise anything (missing package, version clash)
        return Builtins(names, import_failure("mindformers", exc))
    return Builtins(names)


TYPE_KEYS = (
    "trainer.type", "runner_wrapper.type", "runner_wrapper.scale_sense.type", "optimizer.type", "lr_schedule.type",
    "model.model_config.type", "model.arch.type", "train_dataset.data_loader.type", "train_dataset_task.type",
    "metric.type",
)
MCORE_PREFIX = "mcore_"


def _types(ctx: CheckContext) -> Iterator[tuple[str, str]]:
    """(dotted path, class name) of every ``type:`` mindformers builds from its registry."""
    for key in TYPE_KEYS:
        value = ctx.get(key)
        if isinstance(value, str):
            yield key, value
    callbacks = ctx.get("callbacks")
    for index, item in enumerate(callbacks if isinstance(callbacks, list) else []):
        if isinstance(item, Mapping) and isinstance(item.get("type"), str):
            yield f"callbacks[{index}].type", item["type"]


def check_types(ctx: CheckContext, registered: set[str]) -> list[Finding]:
    """``--deep``: every ``type:`` must name a class of mindformers' registry (or msmon's CPU support)."""
    from msmon.config.coerce import suggest

    findings = []
    for path, name in _types(ctx):
        if name in registered or MCORE_PREFIX + name in registered:
            continue
        hint = suggest(name, registered) or "check the spelling, or register the class (auto_register)"
        findings.append(warning("MS703", path, f"type {name!r} is not registered in mindformers", hint))
    return findings


def check_registry(ctx: CheckContext) -> list[Finding]:
    references = list(_auto_registers(ctx.training))
    if not references and not ctx.deep:
        return []
    findings: list[Finding] = []
    registrations: list[Registration] = []
    for path, reference in references:
        module_file = _module_file(reference, ctx)
        class_name = reference.rpartition(".")[2]
        if module_file is None:
            findings.append(
                warning(
                    "MS702",
                    path,
                    f"cannot find the module of auto_register {reference!r} to check its names",
                    "set REGISTER_PATH to the directory holding the module file",
                )
            )
            registrations.append(Registration(class_name, "class", path))
            continue
        try:
            registrations.extend(registrations_in(module_file.read_text(encoding="utf-8"), class_name, path))
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            findings.append(warning("MS702", path, f"cannot read {module_file}: {exc}", "fix the module file"))
    failure = load_builtins().mindformers_error if ctx.deep or registrations else None
    if failure is not None:  # no registry to compare with: say why instead of MS703 for every type
        findings.append(error("MS704", "mindformers", failure, "fix the environment; `msmon doctor` checks it"))
    elif ctx.deep:
        known = builtin_names().get("mindformers registry", set()) | {CPU_WRAPPER} | {r.name for r in registrations}
        findings.extend(check_types(ctx, known))
    if not registrations:
        return findings
    builtins = builtin_names()
    for reg in registrations:
        sources = [src for src, names in builtins.items() if reg.name in names]
        if reg.kind == "class":
            sources = [src for src in sources if src == "mindformers registry"]
        if sources:
            findings.append(
                error(
                    "MS701",
                    reg.path,
                    f"{reg.name!r} is already used by a {' and a '.join(sources)}: your custom registration "
                    "collides with the built-in name (mindformers fails or silently replaces the built-in)",
                    f"rename it, e.g. {reg.name}_custom, and update the model type fields that refer to it",
                )
            )
    return findings
