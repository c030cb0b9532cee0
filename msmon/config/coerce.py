"""Build a settings dataclass from a plain mapping with strict types, collecting findings.

A bool must be a bool (``"yes"`` is an error), an int an int (``True`` is not an int), a float
accepts an int, a ``Literal`` only its choices. Unknown keys get a "did you mean" suggestion.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal, TypeVar, Union

from msmon.config.fields import in_range, meaning, range_text
from msmon.findings import Finding, error
from msmon.foreign import ConfigValue

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")

_MISSING = object()


def suggest(name: str, candidates: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint, or ''."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{match[0]}'?" if match else ""


def edits(a: str, b: str) -> int:
    """How many single-character edits (deletion, insertion, substitution, transposition of neighbours) turn
    ``a`` into ``b`` (optimal string alignment)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, other in enumerate(b, 1):
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (char != other))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return previous[-1]


def misspelling_of(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` misspells: the one ``suggest`` names, when it is also within one edit per four
    characters (at least one) of it; None when ``name`` is more likely a word of its own (``seq_length`` is no
    misspelling of ``use_legacy``, however similar difflib finds them)."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return match[0] if match and edits(name, match[0]) <= max(1, len(name) // 4) else None


def _type_name(tp: object) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(c) for c in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


#: scalar type -> (what the error says was expected, the fix)
SCALARS: dict[type, tuple[str, str]] = {
    bool: ("a bool", "write true or false"),
    int: ("an integer", "write e.g. 10"),
    float: ("a number", "write e.g. 2.5"),
    str: ("a string", "quote the value"),
}


def _accepts(tp: type, value: object) -> bool:
    """Strict scalar typing: only a bool is a bool, a bool is no number, a float accepts an int."""
    if tp is bool or tp is str:
        return isinstance(value, tp)
    if isinstance(value, bool):
        return False
    return isinstance(value, int) if tp is int else isinstance(value, int | float)


def _coerce(value: ConfigValue, tp: object, path: str, findings: list[Finding]) -> ConfigValue:
    """Return the checked value, or _MISSING after appending a finding."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        non_none = [o for o in options if o is not type(None)]
        if len(non_none) == 1:
            return _coerce(value, non_none[0], path, findings)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) is type(choices[0]):
            return value
        hint = suggest(str(value), [str(c) for c in choices]) or f"use one of: {', '.join(map(str, choices))}"
        findings.append(error("MS002", path, f"{_show(value)} is not one of {_type_name(tp)}", hint))
        return _MISSING
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            findings.append(error("MS002", path, f"expected a list, got {_show(value)}", "write a YAML list"))
            return _MISSING
        items = [_coerce(item, item_tp, f"{path}[{i}]", findings) for i, item in enumerate(value)]
        return _MISSING if any(item is _MISSING for item in items) else items
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            findings.append(
                error("MS002", path, f"expected a section (mapping), got {_show(value)}", "write nested keys")
            )
            return _MISSING
        built, sub = build(tp, value, path)
        findings.extend(sub)
        return built
    if tp in SCALARS:
        if _accepts(tp, value):
            return float(value) if tp is float else value
        name, hint = SCALARS[tp]
        findings.append(error("MS002", path, f"expected {name}, got {_show(value)}", hint))
        return _MISSING
    raise TypeError(f"unsupported settings type {tp!r} at {path}")


def build(cls: type[T], data: Mapping[str, ConfigValue], path: str,
          ignore: Iterable[str] = ()) -> tuple[T, list[Finding]]:
    """Build ``cls`` from ``data``; invalid values fall back to defaults and yield findings."""
    findings: list[Finding] = []
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    ignored = set(ignore)
    kwargs: dict[str, ConfigValue] = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key in ignored:
            continue
        if key not in fields:
            hint = suggest(str(key), [*fields, *ignored]) or f"known keys: {', '.join(fields)}"
            findings.append(error("MS001", key_path, f"unknown key '{key}'", hint))
            continue
        checked = _coerce(value, hints[key], key_path, findings)
        if checked is not _MISSING:
            kwargs[key] = checked
    return cls(**kwargs), findings


def field_docs(cls: type, prefix: str = "", *, with_items: bool = False) -> list[tuple[str, str, object, str, str]]:
    """(dotted key, type, default, meaning, allowed range and check code) for every leaf key of a settings class;
    ``with_items`` (the docs): also the keys of each item of a list of sections (``health.alerts.chat[].url``)."""
    rows: list[tuple[str, str, object, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            rows.extend(field_docs(tp, key + ".", with_items=with_items))
            continue
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        check = "; ".join(filter(None, [range_text(f.metadata), f.metadata.get("check", "")]))
        rows.append((key, _type_name(tp), default, meaning(cls, f.metadata), check))
        (item,) = typing.get_args(tp) if typing.get_origin(tp) is list else (None,)
        if with_items and isinstance(item, type) and dataclasses.is_dataclass(item):
            rows.extend(field_docs(item, key + "[].", with_items=True))
    return rows


RANGE_HINT = "set a value in that range, or remove the key for its default"


def range_findings(settings: DataclassInstance | type[DataclassInstance], prefix: str, code: str,
                   hint: str = RANGE_HINT, _below: str = "") -> list[Finding]:
    """An error ``code`` for each value of ``settings`` (a settings dataclass, nested ones included) outside
    the range its field declares (``doc(..., at_least=, above=, at_most=)``)."""
    found: list[Finding] = []
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        name = f"{_below}{f.name}"
        if dataclasses.is_dataclass(value):
            found.extend(range_findings(value, prefix, code, hint, f"{name}."))
        elif isinstance(value, int | float) and not isinstance(value, bool) and not in_range(value, f.metadata):
            found.append(error(code, f"{prefix}.{name}", f"{name} must be {range_text(f.metadata)}, got {value}", hint))
    return found
