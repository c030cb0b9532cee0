"""Whether a training profiles itself: mindformers' ``profile`` switch (its ProfileMonitor over a fixed step range,
what ``msmon run --profile`` passes through) or MindSpore's ``MS_PROFILER_OPTIONS``. MindSpore runs one profiler per
process, so ``msmon probe RUN profile`` refuses such a run (docs/probe.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from msmon.foreign import ConfigValue

PROFILE_KEY = "profile"
ENV_OPTIONS = "MS_PROFILER_OPTIONS"


def own_profiler(training: Mapping[str, ConfigValue] | None) -> str | None:
    """The setting that turns on mindformers' own profiler in ``training`` (as it reads it: any true value), or
    None."""
    if not training or not training.get(PROFILE_KEY):
        return None
    first, last = training.get("profile_start_step", 1), training.get("profile_stop_step", 10)
    return f"{PROFILE_KEY}: {training[PROFILE_KEY]} (mindformers profiles steps {first}-{last} itself)"


def env_profiler(environ: Mapping[str, str]) -> str | None:
    """``MS_PROFILER_OPTIONS`` with ``"start": true`` (MindSpore then profiles the whole process), or None."""
    text = environ.get(ENV_OPTIONS)
    if not text:
        return None
    try:
        options = json.loads(text)
    except ValueError:
        return None
    return f"{ENV_OPTIONS} starts MindSpore's profiler" if isinstance(options, dict) and options.get("start") else None
