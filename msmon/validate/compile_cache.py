"""MindSpore's compile cache (MS814): it keys a compiled graph by the entry script and the Python files that script
imports, never by the config. Every ``msmon run`` trains through msmon's worker (as every job through
``run_mindformer.py``), so a run whose hyperparameters changed can train the graph an earlier run compiled (measured:
``lr_schedule.learning_rate=50`` on the command line trained the cached default learning rate)."""

from __future__ import annotations

import os

from msmon.findings import Finding, warning
from msmon.validate.context import CheckContext

ENV = "MS_COMPILER_CACHE_ENABLE"
KEY = "context.enable_compile_cache"  # MindSpore's deprecated context key, which wins over the variable


def check_compile_cache(ctx: CheckContext) -> list[Finding]:
    in_config = ctx.get(KEY)
    if in_config is False or (in_config is not True and os.environ.get(ENV) != "1"):
        return []
    where = KEY if in_config is True else ENV
    cache = os.environ.get("MS_COMPILER_CACHE_PATH") or "its default directory"
    return [warning(
        "MS814", where,
        f"MindSpore's compile cache is on ({where}; {cache}): it reuses a graph compiled for the same entry script "
        "and imports whatever the config says, so a run whose hyperparameters changed (a learning rate typed on "
        "the command line) can train an earlier run's graph",
        "give each config its own MS_COMPILER_CACHE_PATH, or turn the cache off (unset MS_COMPILER_CACHE_ENABLE; "
        f"{KEY}: False)",
    )]
