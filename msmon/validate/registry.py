"""Model-type name conflicts ("X is already used by a transformers config, pick another name") (MS7xx).

Custom registrations (``auto_register: module_file.ClassName`` anywhere in the config) are read with
``ast`` from the module file, never executed; the built-in registries of transformers and mindformers come from
msmon's cache of the installed versions (msmon.validate.registry_cache: read once in a child process, then
milliseconds). MS704: mindformers failed to import, so none of the checks against it can run.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.validate.context import CheckContext
from msmon.validate.registry_cache import load_builtins


@dataclass(frozen=True)
class Registration:
    """A name a custom module registers: a model_type, or a class name in MindFormerRegister."""

    name: str
    kind: str  # "model_type" or "class"
    path: str  # dotted config path of the auto_register key


def _auto_registers(node: ConfigValue, prefix: str = "") -> Iterator[tuple[str, str]]:
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


def auto_registered(ctx: CheckContext) -> set[str]:
    """The class names the config's ``auto_register`` entries name (registered when the training starts)."""
    return {reference.rpartition(".")[2] for _, reference in _auto_registers(ctx.training)}


def check_registry(ctx: CheckContext) -> list[Finding]:
    """MS701-MS702: custom registrations against the built-in names; MS704: mindformers cannot be read."""
    references = list(_auto_registers(ctx.training))
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
    failure = load_builtins(ctx.deep).mindformers_error
    if failure is not None:  # nothing to compare with: say why, once, instead of a finding for every type
        if ctx.deep or registrations:  # asked for the names (or a custom one must not collide): an error
            findings.append(error("MS704", "mindformers", failure, "fix the environment; `msmon doctor` checks it"))
        else:  # the environment's fault, not the config's: the training fails the same way when it imports it
            findings.append(warning("MS704", "mindformers", f"{failure}; the checks against mindformers' template "
                                    "and registry were skipped", "fix the environment; `msmon doctor` checks it"))
        return findings
    builtins = load_builtins(ctx.deep).names
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
