"""Split ``monitor_config`` into msmon's keys and mindformers' own keys.

mindformers' config template raises ``KeyError`` on any unknown key inside ``monitor_config``, so
msmon's keys must be removed before mindformers sees the config.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from msmon.compat import LOCAL_NORM_OPTION
from msmon.config.metrics import MF_WRAPPERS, canonical_metric
from msmon.config.schema import MINDFORMERS_MONITOR_KEYS
from msmon.foreign import ConfigValue


def split_monitor_section(
    section: Mapping[str, ConfigValue] | None,
) -> tuple[dict[str, ConfigValue], dict[str, ConfigValue]]:
    """(msmon's keys, every other key) of one ``monitor_config`` mapping."""
    ours: dict[str, ConfigValue] = {}
    theirs: dict[str, ConfigValue] = {}
    for key, value in (section or {}).items():
        (theirs if key in MINDFORMERS_MONITOR_KEYS else ours)[key] = value
    return ours, theirs


def split_monitor_config(config: Mapping[str, ConfigValue]) -> tuple[dict[str, ConfigValue], dict[str, ConfigValue]]:
    """(a copy of ``config`` fit for mindformers, msmon's part of ``monitor_config``).

    The mindformers copy keeps only mindformers' monitor keys, and at least ``monitor_on: False``
    (its default): mindformers 1.9 reads ``config.monitor_config.*`` unconditionally. When msmon records
    ``layer_grad_norm``, the copy's train-step wrapper also returns each gradient's squared sum.
    """
    training = copy.deepcopy(dict(config))
    section = training.pop("monitor_config", None)
    ours, theirs = split_monitor_section(section if isinstance(section, Mapping) else None)
    training["monitor_config"] = theirs or {"monitor_on": False}
    if records_layer_norms(ours):
        wrapper = training.get("runner_wrapper")
        if isinstance(wrapper, dict) and wrapper.get("type") in MF_WRAPPERS:
            wrapper[LOCAL_NORM_OPTION] = True
    return training, ours


def records_layer_norms(ours: Mapping[str, ConfigValue]) -> bool:
    """Whether msmon's keys ask its callback to record ``layer_grad_norm`` (monitoring on, metric tracked)."""
    if ours.get("enable_monitor", True) is not True or ours.get("use_callback", True) is not True:
        return False
    metrics = ours.get("track_metrics")
    names = metrics if isinstance(metrics, list) else [metrics]
    return any(isinstance(name, str) and canonical_metric(name) == "layer_grad_norm" for name in names)
