"""A table as a reference: CSV, or JSON Lines (one object per step), with a step column (``step``, ``iteration``
or ``global_step``) and metric columns named as msmon's metrics, their aliases (``lr``, ``global_norm``,
``per_step_time``), or mapped by ``tags`` (msmon metric -> column). Read row by row."""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from pathlib import Path

from msmon.config.metrics import canonical_metric
from msmon.errors import MsmonError
from msmon.reference.curve import METRICS, CurveBuilder, ReferenceCurve, ReferenceKind
from msmon.util.jsonfiles import JsonValue, iter_jsonl
from msmon.util.numbers import as_number

STEP_COLUMNS: tuple[str, ...] = ("step", "iteration", "global_step")
CSV_SUFFIXES = (".csv",)
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")


def _csv_rows(path: Path) -> Iterator[tuple[int, Mapping[str, JsonValue]]]:
    with open(path, encoding="utf-8", errors="replace", newline="") as handle:
        for row in csv.DictReader(handle):
            yield 0, row


def _jsonl_rows(path: Path) -> Iterator[tuple[int, Mapping[str, JsonValue]]]:
    for line in iter_jsonl(path):
        if line.row is not None:
            yield line.number, line.row
        elif not line.cut:  # a half-written last line is a file still being written
            raise MsmonError(f"{path}:{line.number}: {line.error}", "each line must be one JSON object")


def _columns(path: Path, names: list[str], tags: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(the step column, column -> msmon metric) of a table with columns ``names``."""
    step = next((name for name in STEP_COLUMNS if name in names), None)
    if step is None:
        raise MsmonError(f"{path}: no step column (columns: {', '.join(names[:20]) or 'none'})",
                         f"name the step column {' or '.join(STEP_COLUMNS)}")
    mapped = {column: metric for metric, column in tags.items() if column in names}
    for name in names:
        metric = canonical_metric(name)
        if metric in METRICS and metric not in mapped.values() and name not in mapped:
            mapped[name] = metric
    return step, mapped


def _step(value: JsonValue, where: str) -> int:
    number = as_number(value, parse_strings=True)
    if number is None or not number.is_integer():
        raise MsmonError(f"{where}: the step must be an integer, got {value!r}", "write whole step numbers")
    return int(number)


def load(path: Path, tags: Mapping[str, str] | None = None) -> ReferenceCurve:
    """The curve of a CSV or JSON Lines table; MsmonError for a file that cannot be read, a table without a step
    column or without a loss."""
    tags = dict(tags or {})
    rows = _csv_rows(path) if path.suffix.lower() in CSV_SUFFIXES else _jsonl_rows(path)
    builder = CurveBuilder()
    seen: dict[str, None] = {}
    layout: tuple[tuple[str, ...], str, dict[str, str]] | None = None
    try:
        for number, row in rows:
            keys = tuple(row)
            if layout is None or layout[0] != keys:  # a CSV has one header; JSON Lines rows may differ
                seen.update(dict.fromkeys(keys))
                layout = (keys, *_columns(path, list(keys), tags))
            _, step_column, mapped = layout
            values = {metric: value for column, metric in mapped.items()
                      if (value := as_number(row.get(column), parse_strings=True)) is not None}
            builder.add(_step(row.get(step_column), f"{path}:{number}" if number else str(path)), values)
    except OSError as exc:
        raise MsmonError(f"{path}: cannot read ({exc.strerror or exc})", "check the file's permissions") from None
    except (csv.Error, UnicodeError) as exc:
        raise MsmonError(f"{path}: not a CSV table ({exc})", "write a header line, then one row per step") from None
    names = ", ".join(list(seen)[:20]) or "none"
    return builder.build(path, ReferenceKind.TABLE,
                         missing_loss=f"columns: {names}; name one 'loss' or map it: tags={{'loss': COLUMN}}")
