"""Every ``type:`` against the installed mindformers' registry (MS023) and its arguments against that class's
constructor (MS024), read from msmon's cache of the registry (msmon.validate.registry_cache).

mindformers builds each of these sections with ``MindFormerRegister``: the class is looked up by name in the
section's registry (``mcore_<name>`` first for the mcore models), and the section's other keys become its
constructor's keyword arguments, so a misspelled argument of a class without ``**kwargs`` is a ``TypeError: ...
unexpected keyword argument`` when the Trainer starts, after the model was built.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from msmon.compat import use_legacy
from msmon.compat.job_keys import ARGUMENT_LOCATIONS, CONSUMED_KEYS, TYPE_REGISTRIES
from msmon.config.coerce import suggest
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.validate.context import CheckContext
from msmon.validate.cpu import CPU_WRAPPER
from msmon.validate.registry import auto_registered
from msmon.validate.registry_cache import Builtins, Constructor, load_builtins

MCORE_PREFIX = "mcore_"
#: Classes msmon registers itself -> the mindformers class whose constructor they keep.
CLASS_ALIASES = {CPU_WRAPPER: "MFTrainOneStepCell"}
#: Registries the mcore models (use_legacy false) do not look up by ``type:`` (they read model_type/architectures).
MCORE_UNTYPED = frozenset({"config", "models"})
SHOWN_ARGUMENTS = 12


@dataclass(frozen=True)
class TypedSection:
    """One section of the config with a ``type:`` (a callback entry, the optimizer, ...)."""

    location: str  # the TYPE_REGISTRIES key: ``callbacks[]``, ``optimizer``
    path: str  # its dotted path in the config: ``callbacks[1]``
    registry: str  # the MindFormerModuleType its class is looked up in
    values: Mapping[str, ConfigValue]

    @property
    def type_name(self) -> str:
        return str(self.values["type"])

    @property
    def passes_arguments(self) -> bool:
        """Whether mindformers hands the section's other keys to the class's constructor."""
        return self.location in ARGUMENT_LOCATIONS

    def arguments(self) -> Iterator[tuple[str, ConfigValue]]:
        """(key, value) of every key the constructor receives."""
        return ((k, v) for k, v in self.values.items() if isinstance(k, str) and k not in CONSUMED_KEYS)


def typed_sections(ctx: CheckContext) -> Iterator[TypedSection]:
    """Every section of the resolved config that names a class by ``type:`` (a section with its own
    ``auto_register`` is the user's class: skipped)."""
    legacy = use_legacy(ctx.training)
    for location, registry in TYPE_REGISTRIES.items():
        if not legacy and registry in MCORE_UNTYPED:
            continue
        base = location.removesuffix("[]")
        value = ctx.get(base)
        entries = [(f"{base}[{i}]", item) for i, item in enumerate(value)] if isinstance(value, list) else [
            (base, value)]
        for path, item in entries:
            if isinstance(item, Mapping) and isinstance(item.get("type"), str) and "auto_register" not in item:
                yield TypedSection(location, path, registry, item)


def constructor_of(builtins: Builtins, section: TypedSection) -> tuple[bool, Constructor | None]:
    """(whether the class is registered, its constructor when known) in the section's registry."""
    table = builtins.classes.get(section.registry, {})
    name = CLASS_ALIASES.get(section.type_name, section.type_name)
    for candidate in (MCORE_PREFIX + name, name):
        if candidate in table:
            return True, table[candidate]
    return False, None


def _unknown_type(builtins: Builtins, section: TypedSection, extra: set[str]) -> Finding | None:
    name = section.type_name
    everywhere = builtins.names.get("mindformers registry", set()) | set(CLASS_ALIASES) | extra
    if name in everywhere or MCORE_PREFIX + name in everywhere:
        return None  # registered under another module type: mindformers may still find it
    own = {n.removeprefix(MCORE_PREFIX) for n in builtins.classes.get(section.registry, {})}
    hint = suggest(name, own) or suggest(name, {n.removeprefix(MCORE_PREFIX) for n in everywhere})
    where = f"{section.path}.type"
    message = f"type {name!r} is not a class of mindformers' {section.registry!r} registry"
    if hint:
        return error("MS023", where, f"{message}: mindformers raises ValueError when it builds {section.path}", hint)
    return warning("MS023", where, message, "check the spelling, or register the class (auto_register)")


def _unknown_arguments(section: TypedSection, ctor: Constructor) -> list[Finding]:
    if ctor.takes_kwargs:
        return []
    found = []
    for key, _ in section.arguments():
        if ctor.get(key) is not None:
            continue
        shown = ", ".join(ctor.names[:SHOWN_ARGUMENTS]) + (", ..." if len(ctor.names) > SHOWN_ARGUMENTS else "")
        found.append(error(
            "MS024", f"{section.path}.{key}",
            f"{section.type_name} takes no argument {key!r}: mindformers passes {section.path}'s keys to its "
            "constructor, a TypeError (unexpected keyword argument) when the training starts",
            suggest(key, ctor.names) or f"remove it; {section.type_name} takes: {shown or 'no arguments'}"))
    return found


def check_job_types(ctx: CheckContext) -> list[Finding]:
    """MS023 and MS024 for every ``type:`` of the config (nothing when mindformers cannot be read: MS704)."""
    builtins = load_builtins(ctx.deep)
    if builtins.mindformers_error is not None:
        return []
    extra = auto_registered(ctx)
    findings: list[Finding] = []
    for section in typed_sections(ctx):
        registered, ctor = constructor_of(builtins, section)
        if not registered:
            unknown = _unknown_type(builtins, section, extra)
            findings.extend([unknown] if unknown else [])
        elif ctor is not None and section.passes_arguments:
            findings.extend(_unknown_arguments(section, ctor))
    return findings
