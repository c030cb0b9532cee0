"""Tables msmon ships as data (TOML arrays of tables) beside the module that reads them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from msmon.foreign import ConfigValue


def shipped_rows(module_file: str, table: str) -> list[dict[str, ConfigValue]]:
    """The rows ``[[table]]`` of the TOML file beside ``module_file`` with its name (``launch_flags.toml`` for
    ``launch_flags.py``)."""
    with Path(module_file).with_suffix(".toml").open("rb") as handle:
        return list(tomllib.load(handle)[table])
