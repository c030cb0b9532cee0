"""Durations on the command line (``3d``, ``12h``, ``30m``) and for people (``12m05s``, ``8.0s``)."""

from __future__ import annotations

import math
import re

from msmon.errors import ExitCode, MsmonError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """Seconds in ``text`` (a number and one unit of s, m, h, d, w); MsmonError (usage) otherwise."""
    match = _PATTERN.match(text or "")
    if not match:
        raise MsmonError(
            f"'{text}' is not a duration", "write a number and a unit: 30m, 12h, 3d (s, m, h, d, w)", ExitCode.USAGE
        )
    return float(match.group(1)) * _UNITS[match.group(2).lower()]


def format_duration(seconds: float | None, *, fine: bool = False) -> str:
    """``45s``, ``12m05s``, ``3h04m``, ``2d03h``; ``fine``: ``8.0s``, ``12m05s``, ``26h04m05s`` (a clock);
    ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    seconds = max(0.0, seconds)
    if fine and seconds < 60:
        return f"{seconds:.1f}s"
    value = int(round(seconds))
    if value < 60:
        return f"{value}s"
    if value < 3600:
        return f"{value // 60}m{value % 60:02d}s"
    if fine:
        return f"{value // 3600}h{value % 3600 // 60:02d}m{value % 60:02d}s"
    if value < 86400:
        return f"{value // 3600}h{value % 3600 // 60:02d}m"
    return f"{value // 86400}d{value % 86400 // 3600:02d}h"
