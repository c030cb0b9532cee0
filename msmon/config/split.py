"""Split ``monitor_config`` into msmon's keys and mindformers' own keys.

mindformers' config template raises ``KeyError`` on any unknown key inside ``monitor_config``, so
msmon's keys must be removed before mindformers sees the config.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from msmon.config.schema import MINDFORMERS_MONITOR_KEYS


def split_monitor_section(section: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(msmon's keys, every other key) of one ``monitor_config`` mapping."""
    ours: dict[str, Any] = {}
    theirs: dict[str, Any] = {}
    for key, value in (section or {}).items():
        (theirs if key in MINDFORMERS_MONITOR_KEYS else ours)[key] = value
    return ours, theirs


def split_monitor_config(config: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(a copy of ``config`` fit for mindformers, msmon's part of ``monitor_config``).

    The mindformers copy keeps only mindformers' monitor keys, and at least ``monitor_on: False``
    (its default): mindformers 1.9 reads ``config.monitor_config.*`` unconditionally.
    """
    training = copy.deepcopy(dict(config))
    section = training.pop("monitor_config", None)
    ours, theirs = split_monitor_section(section if isinstance(section, Mapping) else None)
    training["monitor_config"] = theirs or {"monitor_on": False}
    return training, ours
