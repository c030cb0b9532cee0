"""The config's top-level keys against what the installed mindformers reads (MS020, MS021), the keys of the
sections its config template refuses unknown keys in (MS022), and a ``checkpoint:`` section the installed release
does not read (MS027).

mindformers ignores a top-level key it does not read: a misspelled ``optimzer:`` trains silently with the
template's default optimizer. The known keys are read from the installed mindformers (its config template, the keys
its Trainer reads: msmon.validate.registry_cache), plus the keys ``run_mindformer.py``'s flags set and the few
msmon.compat.job_keys names. A key the config refers to by name (``${seq_length}``) is a value of the user's own,
never a finding; so is one whose YAML anchor the file uses, unless it misspells a known key.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from omegaconf import OmegaConf

from msmon.compat import package_version, use_legacy
from msmon.compat.environment import release
from msmon.compat.internals import CHECKPOINT_SECTION_KEYS, CHECKPOINT_SECTION_SINCE
from msmon.compat.job_keys import MSMON_SECTIONS, UNDECLARED_TOP_LEVEL_KEYS
from msmon.config.coerce import misspelling_of, suggest
from msmon.config.launch_flags import LAUNCH_FLAGS
from msmon.config.loader import LoadedConfig
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.validate.context import CheckContext
from msmon.validate.registry_cache import JobSchema, load_builtins

#: ``${name`` of an interpolation (a resolver's name, ``${oc.env:...}``, is caught too and harmless).
_REFERENCE = re.compile(r"\$\{\s*([A-Za-z_][\w-]*)")
_TOP_LEVEL_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:")
_ANCHOR = re.compile(r"&([^\s,\[\]{}]+)")
_ALIAS = re.compile(r"\*([^\s,\[\]{}]+)")
SHOWN_KEYS = 15
CHECKPOINT_SECTION = "checkpoint"
#: The ``checkpoint:`` keys that say what is saved, and the ``CheckpointMonitor`` argument each replaces.
_SAVING_KEYS = {new: old for old, new in CHECKPOINT_SECTION_KEYS.items()
                if new in ("save_interleaved_steps", "save_max", "prefix", "save_path")}


def _strings(node: ConfigValue) -> Iterator[str]:
    if isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)
    elif isinstance(node, str):
        yield node


def _anchored_keys(text: str) -> set[str]:
    """Top-level keys whose block defines a YAML anchor that the file uses (``*name``) elsewhere."""
    used = set(_ALIAS.findall(text))
    found: set[str] = set()
    key = None
    for line in text.splitlines():
        match = _TOP_LEVEL_KEY.match(line)
        if match:
            key = match.group(1)
        if key is not None and set(_ANCHOR.findall(line.split("#", 1)[0])) & used:
            found.add(key)
    return found


def referenced_keys(loaded: LoadedConfig) -> set[str]:
    """Top-level keys the config refers to by name, in an interpolation (``${seq_length}``)."""
    plain = OmegaConf.to_container(loaded.conf, resolve=False)
    return {match for text in _strings(plain) for match in _REFERENCE.findall(text)}


def known_top_level(schema: JobSchema) -> frozenset[str]:
    """Every top-level key the installed mindformers (with run_mindformer.py's flags) or msmon reads."""
    flags = {flag.key.split(".")[0] for flag in LAUNCH_FLAGS}
    return schema.top_level_keys() | UNDECLARED_TOP_LEVEL_KEYS | MSMON_SECTIONS | flags


def check_top_level(ctx: CheckContext, schema: JobSchema) -> list[Finding]:
    """MS020 (a misspelling, within a few edits of a known key: an error naming it) and MS021 (a key nothing reads
    and no misspelling: a warning). A key referred to by name is the user's own; one whose YAML anchor is used is
    too, unless it misspells a known key (mindformers' own configs anchor their sections: ``train_dataset:
    &train_dataset``)."""
    known = known_top_level(schema) | {CHECKPOINT_SECTION}  # msmon hands it on or drops it: check_checkpoint_section
    referenced = referenced_keys(ctx.loaded)
    anchored = _anchored_keys(ctx.loaded.text) if ctx.loaded.text else set()
    findings = []
    for key in ctx.training:
        if not isinstance(key, str) or key in known or key in referenced:
            continue
        meant = misspelling_of(key, known)
        if meant is not None:
            findings.append(error("MS020", key, f"unknown top-level key {key!r}: mindformers reads no such key, so "
                                  "it is ignored and the training runs with mindformers' defaults for it",
                                  f"did you mean '{meant}'?"))
        elif key not in anchored:
            findings.append(warning("MS021", key, f"mindformers reads no top-level key {key!r}: the training ignores "
                                    "it", f"remove it, or refer to it (${{{key}}}) if it is a value of your own"))
    return findings


def check_strict_sections(ctx: CheckContext, schema: JobSchema) -> list[Finding]:
    """MS022: a key mindformers' template refuses (``KeyError: ... gets an unexpected key``) when the training
    loads the config. ``monitor_config`` is msmon's own check (MS001, MS005)."""
    findings = []
    legacy = use_legacy(ctx.training)
    for section in schema.applied(ctx.get("do_eval") is True):
        value = ctx.get(section.name)
        if not section.strict or section.name in MSMON_SECTIONS or not isinstance(value, Mapping):
            continue
        if section.name == "moe_config" and not legacy:  # the template skips it for the mcore models
            continue
        names = [p.name for p in section.keys]
        for key in value:
            if key in names:
                continue
            shown = ", ".join(names[:SHOWN_KEYS]) + (", ..." if len(names) > SHOWN_KEYS else "")
            findings.append(error("MS022", f"{section.name}.{key}", f"mindformers' {section.name} has no key {key!r}: "
                                  "its config template raises KeyError (unexpected key) when the training loads it",
                                  suggest(str(key), names) or f"remove it; {section.name} takes: {shown}"))
    return findings


def check_checkpoint_section(ctx: CheckContext, version: str | None) -> list[Finding]:
    """MS027: a ``checkpoint:`` section (mindformers 1.9's) on a release that reads none (``version``): msmon hands
    mindformers no section there and the ``CheckpointMonitor``'s own keys apply; a warning only when they save
    differently (a config written for 1.9 that also carries the entry's keys, as the quickstarts do, is silent)."""
    section = ctx.get(CHECKPOINT_SECTION)
    read = version is None or release(version) >= CHECKPOINT_SECTION_SINCE
    if read or not isinstance(section, Mapping) or not section:
        return []
    callbacks = ctx.get("callbacks")
    entry = next((c for c in callbacks if isinstance(c, Mapping) and c.get("type") == "CheckpointMonitor"), None) \
        if isinstance(callbacks, list) else None
    if entry is None:
        return [warning("MS027", CHECKPOINT_SECTION, f"mindformers {version} reads no checkpoint: section and no "
                        "CheckpointMonitor callback saves: the training saves no checkpoint",
                        "add a CheckpointMonitor to callbacks (save_checkpoint_steps, keep_checkpoint_max)")]
    differ = [f"{old} {entry.get(old)!r} (the section's {new}: {section[new]!r})"
              for new, old in _SAVING_KEYS.items() if new in section and old in entry and entry[old] != section[new]]
    if not differ:
        return []
    return [warning("MS027", CHECKPOINT_SECTION, f"mindformers {version} reads no checkpoint: section; the "
                    f"CheckpointMonitor's keys apply instead: {', '.join(differ)}",
                    "give the CheckpointMonitor the section's values, or install mindformers 1.9")]


def check_job_keys(ctx: CheckContext) -> list[Finding]:
    """MS020-MS022 and MS027 against the installed mindformers (nothing when it cannot be read: MS704 says why)."""
    builtins = load_builtins(ctx.deep)
    if builtins.schema is None:
        return []
    return [*check_top_level(ctx, builtins.schema), *check_strict_sections(ctx, builtins.schema),
            *check_checkpoint_section(ctx, package_version("mindformers"))]
