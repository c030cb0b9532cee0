"""mindformers' own monitoring, as mindformers 1.8-1.9 run it (MS006-MS009, MS013): settings it will not honour as
written, the per-parameter statistics that slow training, a ``dump_path`` it wipes, its stop rules explained
beside msmon's health detectors, and its own profiler (which ``msmon probe RUN profile`` cannot run beside).

What mindformers does (core/callback/callback.py ``TrainingStateMonitor``, trainer/trainer.py, wrapper/wrapper.py):
``TrainingStateMonitor`` is added only with ``monitor_on: True`` (or, without its config, with
``check_for_nan_in_loss_and_grad``) and runs before msmon's callback, so when it raises, msmon never sees that step.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from msmon.compat import (
    MONITOR_FORMAT_KEYS,
    TEMPLATE_DUMP_PATH,
    TEMPLATE_SPIKE_THRESHOLD,
    global_norm_spike_threshold,
)
from msmon.config.health import PROFILE_DETECTORS
from msmon.config.profiler import PROFILE_KEY, own_profiler
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.util.numbers import fmt_number
from msmon.validate.context import CheckContext

BASE = "monitor_config"
#: What each expensive statistic computes at every ``step_interval`` (outside the compiled graph).
STATE_COSTS = {
    "optimizer_state_format": "the L2 norms of the optimizer's two moments (Adam m and v) of every monitored "
    "parameter, each read to the host",
    "weight_state_format": "the L2 norm of every trainable weight, read to the host",
}
RANK_DIR = re.compile(r"^rank_\d+$")


def _monitor_on(ctx: CheckContext) -> bool:
    return ctx.get(f"{BASE}.monitor_on") is True


def _formats(value: ConfigValue) -> set[str]:
    return {str(v) for v in value} if isinstance(value, list) else ({str(value)} if value else set())


def _active_keys(ctx: CheckContext) -> dict[str, set[str]]:
    """The TrainingStateMonitor settings that do something when monitor_on is True -> their formats."""
    found = {key: _formats(ctx.get(f"{BASE}.{key}")) for key in MONITOR_FORMAT_KEYS if ctx.get(f"{BASE}.{key}")}
    if ctx.get(f"{BASE}.stable_rank_config.format"):
        found["stable_rank_config.format"] = _formats(ctx.get(f"{BASE}.stable_rank_config.format"))
    for key in ("throughput_baseline", "check_for_global_norm", "print_struct"):
        if ctx.get(f"{BASE}.{key}") not in (None, False):
            found[key] = set()
    return found


def check_formats(ctx: CheckContext) -> list[Finding]:
    """MS006: settings without effect (monitor_on is not True), 'tensorboard' without a TensorBoard writer."""
    active = _active_keys(ctx)
    if not _monitor_on(ctx):
        return [warning("MS006", f"{BASE}.{key}", f"{key} has no effect: mindformers adds its TrainingStateMonitor "
                        "only with monitor_config.monitor_on: True",
                        f"set {BASE}.monitor_on: True, or remove {BASE}.{key}")
                for key in active]
    tensorboard_dir = ctx.get("tensorboard.tensorboard_dir")
    if isinstance(tensorboard_dir, str) and tensorboard_dir:
        return []
    return [warning("MS006", f"{BASE}.{key}", f"{key}: 'tensorboard' has no TensorBoard writer without a tensorboard "
                    "section: mindformers silently writes it as log lines only",
                    "add tensorboard: {tensorboard_dir: ./tensorboard}, or write 'log'")
            for key, formats in active.items() if "tensorboard" in formats]


def check_state_costs(ctx: CheckContext) -> list[Finding]:
    """MS007: optimizer_state_format / weight_state_format, with what they cost."""
    if not _monitor_on(ctx):
        return []
    interval = ctx.get(f"{BASE}.step_interval", 1)
    return [warning("MS007", f"{BASE}.{key}", f"{key} computes {what} every step_interval ({interval}) step(s), "
                    "outside the compiled graph; mindformers documents it as greatly slowing training (msmon's CPU "
                    "quickstart with both on at step_interval 1: 2.4x the step time, 22 log lines per step)",
                    "enable it to debug only, with a larger monitor_config.step_interval (e.g. 100) or a narrower "
                    "monitor_config.target")
            for key, what in STATE_COSTS.items() if ctx.get(f"{BASE}.{key}")]


def _foreign(directory: Path) -> list[str]:
    """Entries of a ``rank_N`` dump directory that are not TensorDump output (``*.npy``)."""
    return sorted(p.name for p in directory.iterdir() if not (p.is_file() and p.suffix == ".npy"))


def check_dump_path(ctx: CheckContext) -> list[Finding]:
    """MS008: with monitor_on, a dump_path mindformers cannot use: null, a file, or a directory whose ``rank_N``
    directories it deletes (``shutil.rmtree``) when the train step is built and whose files it clears at every
    logged step. Absent, mindformers' template default ``./dump`` applies."""
    where = f"{BASE}.dump_path"
    value = ctx.get(where) if ctx.has(where) else TEMPLATE_DUMP_PATH
    if not _monitor_on(ctx):
        return []
    if not isinstance(value, str):
        return [error("MS008", where, "monitor_on with a dump_path that is not a string: mindformers hands it to "
                      "MindSpore's set_auto_parallel_context, which refuses null (a TypeError when the Trainer "
                      "starts)", "set monitor_config.dump_path: '' (no dumps) or a directory of its own")]
    if not value:
        return []
    path = Path(value).expanduser()
    path = path if path.is_absolute() else ctx.cwd / path
    if os.path.isfile(path):
        return [error("MS008", where, f"dump_path {value!r} is a file: mindformers creates rank_N directories in it",
                      "point dump_path at a new, empty directory")]
    if not os.path.isdir(path):
        return []
    entries = sorted(path.iterdir())
    doomed = {p.name: _foreign(p) for p in entries if p.is_dir() and RANK_DIR.match(p.name)}
    doomed = {name: names for name, names in doomed.items() if names}
    if doomed:
        name, names = next(iter(doomed.items()))
        return [error("MS008", where, f"mindformers deletes {path / name} (monitor_on with dump_path) when training "
                      f"starts, and it holds other data: {', '.join(names[:3])}",
                      "point dump_path at a new, empty directory")]
    others = [p.name for p in entries if not (p.is_dir() and RANK_DIR.match(p.name))]
    if others:
        return [warning("MS008", where, f"dump_path {value!r} also holds {', '.join(others[:3])}: mindformers "
                        "deletes its rank_N directories at the start and clears their files at every logged step",
                        "give the dumps a directory of their own")]
    return []


def check_stop_rules(ctx: CheckContext) -> list[Finding]:
    """MS009: mindformers' own stop rules beside msmon's detectors (which one stops the run, which one alerts)."""
    health = ctx.settings.health
    found: list[Finding] = []
    nonfinite = f"msmon's nonfinite detector ({health.nonfinite.action})" if health.enabled and \
        health.nonfinite.enabled else "msmon's nonfinite detector (off)"
    if ctx.get("check_for_nan_in_loss_and_grad") is True:
        found.append(warning(
            "MS009", "check_for_nan_in_loss_and_grad",
            "mindformers stops the run (ValueError, run status failed) at the first NaN/Inf loss or global norm, "
            f"in its TrainingStateMonitor, before msmon's callback sees that step: {nonfinite} alerts only on "
            "earlier logged steps", "keep it to stop at once; or set it False and health.nonfinite.action: stop "
            "to stop gracefully (exit 4) at the next logged step",
        ))
    grad = health.grad_explosion
    threshold = global_norm_spike_threshold(ctx.training)
    msmon_cap = grad.absolute_threshold if grad.absolute_threshold is not None else threshold
    explosion = (f"msmon's grad_explosion detector ({grad.action}, absolute threshold {fmt_number(msmon_cap)})"
                 if health.enabled and grad.enabled else "msmon's grad_explosion detector (off)")
    checks = _monitor_on(ctx) and (ctx.get(f"{BASE}.check_for_global_norm") is True or
                                    ctx.get(f"{BASE}.health_checkpoint.global_norm_spike_threshold") is not None)
    skips = ctx.get("use_skip_data_by_global_norm") is True
    if checks and skips:
        found.append(error("MS009", f"{BASE}.check_for_global_norm", "mindformers refuses check_for_global_norm "
                           "together with use_skip_data_by_global_norm (ValueError at the first step)",
                           "choose one of them"))
    elif checks:
        found.append(warning(
            "MS009", f"{BASE}.check_for_global_norm",
            f"mindformers stops the run (RuntimeError 'TREError') at the first global norm >= "
            f"{fmt_number(threshold if threshold is not None else TEMPLATE_SPIKE_THRESHOLD)}, before msmon's callback "
            "sees that step: "
            f"{explosion} alerts on the logged steps before it", "keep it to stop at once; msmon's alert explains "
            "the trend that led there",
        ))
    elif skips:
        count = ctx.get(f"{BASE}.global_norm_spike_count_threshold", 10)
        stop = (f"and stops the run after {count} skips in a row" if _monitor_on(ctx) else
                "(its stop after global_norm_spike_count_threshold skips needs monitor_on: True)")
        found.append(warning(
            "MS009", "use_skip_data_by_global_norm",
            f"mindformers skips the update of every step whose global norm >= "
            f"{fmt_number(threshold if threshold is not None else TEMPLATE_SPIKE_THRESHOLD)} {stop}; "
            f"msmon records those steps and {explosion} alerts on them",
            "msmon alerts, mindformers skips and stops" if threshold is not None else
            f"set monitor_config.global_norm_spike_threshold explicitly (the template's default is "
            f"{fmt_number(TEMPLATE_SPIKE_THRESHOLD)})",
        ))
    return found


def check_own_profiler(ctx: CheckContext) -> list[Finding]:
    """MS013: mindformers' own profiler is on, so ``msmon probe RUN profile`` refuses the run (and the health
    detectors' ``action: profile`` profiles nothing)."""
    setting = own_profiler({PROFILE_KEY: ctx.get(PROFILE_KEY), "profile_start_step": ctx.get("profile_start_step", 1),
                            "profile_stop_step": ctx.get("profile_stop_step", 10)})
    if setting is None:
        return []
    health = ctx.settings.health
    actions = [name for name in PROFILE_DETECTORS if getattr(health, name).action == "profile"]
    also = f" and the action: profile of {', '.join(actions)} profiles nothing" if actions else ""
    return [warning("MS013", PROFILE_KEY, f"{setting}, into logs/output/profile/rank_N/; `msmon probe RUN profile` "
                    f"refuses this run{also}: MindSpore runs one profiler at a time",
                    "leave profile off to profile any steps of the running training with `msmon probe RUN profile` "
                    "(docs/probe.md)")]


def check_mindformers_monitoring(ctx: CheckContext) -> list[Finding]:
    """Every MS006-MS009 and MS013 finding."""
    return [*check_formats(ctx), *check_state_costs(ctx), *check_dump_path(ctx), *check_stop_rules(ctx),
            *check_own_profiler(ctx)]
