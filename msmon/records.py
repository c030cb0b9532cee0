"""Records read back from a JSON Lines file (metrics.jsonl): each one checked (an integer ``step``, NaN/Inf
spellings as floats) and streamed line by line, and which rank's records a reader shows. One definition for
``msmon replay``, the report and compare views and the reference curves."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from pathlib import Path

from msmon.errors import MsmonError
from msmon.util.jsonfiles import JsonObject, iter_jsonl, parse_object
from msmon.util.numbers import as_number, with_nonfinite_floats

logger = logging.getLogger("msmon")


def check_record(data: JsonObject, where: str) -> JsonObject:
    """A record with an integer ``step`` and numeric ``time``; "NaN"/"Infinity" strings become floats."""
    record = with_nonfinite_floats(data)
    step = record.get("step")
    if isinstance(step, float) and step.is_integer():
        step = record["step"] = int(step)
    if isinstance(step, bool) or not isinstance(step, int):
        raise MsmonError(f"{where}: 'step' must be an integer, got {step!r}", 'add "step": N to every line')
    when = record.get("time")
    if when is not None and as_number(when) is None:
        raise MsmonError(f"{where}: 'time' must be unix seconds, got {when!r}", "drop it or write a number")
    return record


def _checked(data: JsonObject) -> bool:
    """Whether ``check_record`` would return ``data`` as it is (an int step, a float time, no text): the common
    record, passed on without a copy."""
    return (type(data.get("step")) is int and type(data.get("time", 0.0)) in (float, int)
            and str not in set(map(type, data.values())))


def parse_record(text: str, where: str) -> JsonObject:
    """One JSON Lines record (see ``check_record``); MsmonError naming ``where`` otherwise."""
    try:
        data = parse_object(text)
    except ValueError as exc:
        raise MsmonError(f"{where}: {exc}", "each line must be one JSON object") from None
    return check_record(data, where)


def read_records(path: Path) -> Iterator[JsonObject]:
    """Records of a JSON Lines file, read line by line (bounded memory); MsmonError at the first line that is no
    record; a half-written last line (a killed run) is skipped with a warning."""
    try:
        for line in iter_jsonl(path):
            if line.row is not None:
                yield line.row if _checked(line.row) else check_record(line.row, f"{path}:{line.number}")
            elif line.cut:
                logger.warning("%s: skipped a half-written last line", path)
            else:
                raise MsmonError(f"{path}:{line.number}: {line.error}", "each line must be one JSON object")
    except FileNotFoundError as exc:
        raise MsmonError(f"{path}: no such file", "pass a run directory or a JSON Lines file") from exc
    except OSError as exc:
        raise MsmonError(f"{path}: cannot read ({exc})", "pass a UTF-8 JSON Lines file") from exc


def shown_rank(ranks: Collection[int], with_loss: Collection[int]) -> int | None:
    """The rank whose records a reader shows when several ranks wrote one file: the lowest that logged a loss
    (under pipeline stages only the last stage holds it), else the lowest; None when no record names its rank."""
    return min(with_loss or ranks, default=None)
