"""Numbers in records and configs: what counts as one, the NaN/Inf spellings, and how to show one."""

from __future__ import annotations

import math

from msmon.util.jsonfiles import JsonObject, JsonValue

#: A normal sample's standard deviation over its median absolute deviation (a MAD scaled to a sigma).
MAD_TO_SIGMA = 1.4826

#: Spellings of non-finite values read back from JSON files (Python's json writes NaN/Infinity tokens;
#: strict JSON writers use these strings).
NONFINITE_STRINGS: dict[str, float] = {
    "nan": math.nan, "+nan": math.nan, "-nan": math.nan,
    "inf": math.inf, "+inf": math.inf, "-inf": -math.inf,
    "infinity": math.inf, "+infinity": math.inf, "-infinity": -math.inf,
}


def as_number(value: object, *, parse_strings: bool = False) -> float | None:
    """``value`` as a float (NaN/Inf kept), or None when it is not a number (a bool is not).

    Strings spelling NaN/Inf ("NaN", "+inf", "Infinity") always count; with ``parse_strings`` any numeric
    string counts too (a YAML value such as ``5e-3`` that a YAML 1.1 parser left as a string)."""
    if type(value) is float:  # the common case, first: a million records a run
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in NONFINITE_STRINGS:
            return NONFINITE_STRINGS[text]
        if parse_strings:
            try:
                return float(text)
            except ValueError:
                return None
    return None


def with_nonfinite_floats(record: JsonObject) -> JsonObject:
    """A copy of ``record`` whose strings spelling NaN/Inf ("NaN", "Infinity", "+inf") are floats."""
    return {key: NONFINITE_STRINGS.get(value.strip().lower(), value) if isinstance(value, str) else value
            for key, value in record.items()}


def positive_int(value: object) -> int | None:
    """``value`` as an int > 0 (an integral float counts), else None."""
    number = as_number(value)
    if number is None or not math.isfinite(number) or number <= 0 or not number.is_integer():
        return None
    return int(number)


def fmt_number(value: object, digits: int = 4) -> str:
    """A metric value for people: ``digits`` significant digits, NaN/+Inf/-Inf spelled out, None as '-'."""
    if value is None:
        return "-"
    number = as_number(value)
    if number is None:
        return str(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{number:.{digits}g}"


def nonfinite_kind(value: float) -> str | None:
    """"nan", "inf" or "-inf" for a non-finite value, None for a finite one."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return None


def json_safe(value: JsonValue) -> JsonValue:
    """``value`` with non-finite floats replaced by the strings "NaN", "Infinity", "-Infinity" (strict JSON;
    ``as_number`` reads them back)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
