"""Numbers stay numbers (MS025): a value mindformers computes with, written (or overridden) as text.

Which values are numbers is read from the installed mindformers (msmon.validate.registry_cache): a general key or
a key of a template section whose default is a number (``seed``, ``runner_config.epochs``), and an argument of a
``type:`` whose constructor's default (or annotation) is a number (``lr_schedule.learning_rate``, a
CheckpointMonitor's ``save_checkpoint_steps``). ``lr_schedule.learning_rate=abc`` on the command line is text
(an override's value is read as YAML): an error. Text that is a number (``'1e-5'`` in quotes) is a warning:
mindformers' type checks refuse text (``args_type_check``) where they check, and compute with it where they do not.
``context`` and ``parallel`` go to MindSpore as they are (its own checks); ``monitor_config`` is msmon's (MS002).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from msmon.compat.job_keys import MSMON_SECTIONS
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.util.numbers import as_number
from msmon.validate.context import CheckContext
from msmon.validate.job_types import constructor_of, typed_sections
from msmon.validate.registry_cache import Builtins, JobSchema, ValueKind, load_builtins


def _template_numbers(ctx: CheckContext, schema: JobSchema) -> Iterator[tuple[str, ConfigValue]]:
    for param in schema.general.keys:
        if param.kind is ValueKind.NUMBER and param.name in ctx.training:
            yield param.name, ctx.training[param.name]
    for section in schema.applied(ctx.get("do_eval") is True):
        value = ctx.get(section.name)
        if section.strict and section.name not in MSMON_SECTIONS and isinstance(value, Mapping):
            for param in section.keys:
                if param.kind is ValueKind.NUMBER and param.name in value:
                    yield f"{section.name}.{param.name}", value[param.name]


def _argument_numbers(ctx: CheckContext, builtins: Builtins) -> Iterator[tuple[str, ConfigValue]]:
    for section in typed_sections(ctx):
        _, ctor = constructor_of(builtins, section)
        if ctor is None or not section.passes_arguments:
            continue
        for key, value in section.arguments():
            param = ctor.get(key)
            if param is not None and param.kind is ValueKind.NUMBER:
                yield f"{section.path}.{key}", value


def _overridden(ctx: CheckContext, path: str) -> bool:
    dotted = path.replace("[", ".").replace("]", "")
    return any(dotted == key.replace("[", ".").replace("]", "") for key in ctx.loaded.override_keys)


def number_finding(ctx: CheckContext, path: str, value: ConfigValue) -> Finding | None:
    """MS025 for a number written as text; None for anything else (a number, null, a list: other checks')."""
    if not isinstance(value, str):
        return None
    overridden = _overridden(ctx, path)
    if as_number(value, parse_strings=True) is None:
        source = f"the override {path}={value}" if overridden else "the config"
        return error("MS025", path, f"{path} must be a number (mindformers computes with it), but {source} sets the "
                     f"text {value!r}", f"write a number: {path}=<number>" if overridden else "write a number")
    source = f"the override {path}='{value}'" if overridden else "the config"
    return warning("MS025", path, f"{path} is the text {value!r} in {source}, not a number: mindformers' type "
                   "checks refuse text where they check", "write it without quotes")


def check_job_numbers(ctx: CheckContext) -> list[Finding]:
    """MS025 for every number-valued key of the config (nothing when mindformers cannot be read: MS704)."""
    builtins = load_builtins(ctx.deep)
    if builtins.schema is None:
        return []
    found = [number_finding(ctx, path, value) for path, value in
             [*_template_numbers(ctx, builtins.schema), *_argument_numbers(ctx, builtins)]]
    return [finding for finding in found if finding is not None]
