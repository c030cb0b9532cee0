"""Defaults of mindformers 1.8-1.9's config template (mindformers/tools/register/template.py) that msmon's checks
reason about: the template is applied, since the training loads mindformers.yaml the way run_mindformer.py loads a
YAML (``MindFormerConfig(path)``); and a ``CheckpointMonitor`` entry read with its class's defaults (or the
``checkpoint:`` section where the installed release reads one: msmon.compat.internals.checkpoint_section)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from msmon.compat.environment import package_version
from msmon.compat.internals import checkpoint_section
from msmon.foreign import ConfigValue
from msmon.util.numbers import positive_int

#: ``MonitorConfig.dump_path``: where ``monitor_on`` dumps the local norms when the YAML names no directory.
TEMPLATE_DUMP_PATH = "./dump"
#: ``MonitorConfig.global_norm_spike_threshold``: the global norm at which mindformers' own checks act.
TEMPLATE_SPIKE_THRESHOLD = 3.0


@dataclass(frozen=True)
class CheckpointSaving:
    """A config's ``CheckpointMonitor`` callback: every how many steps it saves and how many files it keeps
    (mindformers' defaults 1 and 5 where the entry leaves them out)."""

    every_steps: int
    keep: int
    path: str = "callbacks[0]"  # the entry's dotted path in the config (``checkpoint``: the section's)
    keep_key: str = "keep_checkpoint_max"  # the key of ``keep`` there (``save_max`` in the section)

    def newest_before(self, step: int) -> int:
        """The step of the newest save before ``step`` (0: none)."""
        return max(step - 1, 0) // self.every_steps * self.every_steps

    def oldest_kept(self, stopped_at: int) -> int:
        """The step of the oldest save still kept when the training stops at ``stopped_at`` (the stop's own save
        takes one of the ``keep`` files)."""
        return (stopped_at // self.every_steps - self.keep + 2) * self.every_steps

    def reaches_back(self, steps: int) -> bool:
        """Whether a save at least ``steps`` before any stop is always still kept (the worst case of
        ``newest_before(stop - steps) >= oldest_kept(stop)``)."""
        return (self.keep - 2) * self.every_steps >= steps


def checkpoint_saving(config: Mapping[str, ConfigValue] | None, version: str | None = None) -> CheckpointSaving | None:
    """The config's ``CheckpointMonitor`` (the first one), or None when it saves no checkpoint; where mindformers
    (``version``, else the installed one) reads a ``checkpoint:`` section, its ``save_interleaved_steps`` and
    ``save_max`` win over the entry's own keys (path ``checkpoint``)."""
    callbacks = (config or {}).get("callbacks")
    for index, entry in enumerate(callbacks if isinstance(callbacks, list) else []):
        if isinstance(entry, Mapping) and entry.get("type") == "CheckpointMonitor":
            every, keep = entry.get("save_checkpoint_steps", 1), entry.get("keep_checkpoint_max", 5)
            path, keep_key = f"callbacks[{index}]", "keep_checkpoint_max"
            section = checkpoint_section(config, version if version is not None else package_version("mindformers"))
            if section is not None:
                every, keep = section.get("save_interleaved_steps", every), section.get("save_max", keep)
                path, keep_key = "checkpoint", "save_max"
            return CheckpointSaving(positive_int(every) or 1, positive_int(keep) or 5, path, keep_key)
    return None
