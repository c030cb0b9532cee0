"""What ``msmon run`` refuses in a config for the launch it is given (MS026): the one owner of those rules.

``msmon run`` (msmon.runner.msrun.check_config) stops on the first of them; ``msmon validate`` reports them all
for the launch it is told about (``--worker-num N``, else one process), naming the flag or key the run needs: a
parallel config needs its ranks, the ranks need a parallel config whose layout they fill, the mcore models train on
one CPU process, and only ``run_mode`` train and finetune train.
"""

from __future__ import annotations

from collections.abc import Mapping

from msmon.compat import LAYOUT_KEYS, MCORE_CPU_RANKS, expected_world_size, lays_out_ranks, use_legacy
from msmon.config.mindformers_yaml import check_run_mode
from msmon.errors import MsmonError
from msmon.findings import Finding, error
from msmon.foreign import ConfigValue
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int
from msmon.validate.context import CheckContext

CODE = "MS026"


def launch_findings(training: Mapping[str, ConfigValue], worker_num: int | None) -> list[Finding]:
    """What ``msmon run`` refuses in ``training`` (resolved) started on ``worker_num`` ranks (None: one process),
    in the order it checks them."""
    n = worker_num
    found = []
    if not n and training.get("use_parallel") is True:
        found.append(error(
            CODE, "use_parallel", "use_parallel is True but msmon run starts one process: mindformers would wait "
            "for a cluster that never forms", "give the ranks: --worker-num N (msrun), or set use_parallel=False for "
            "one card"))
    needed = expected_world_size(training)
    if n and lays_out_ranks(training) and needed != n:
        layout_text = " x ".join(f"{key} {dotted_get(training, f'parallel_config.{key}') or 1}" for key in LAYOUT_KEYS)
        found.append(error(
            CODE, "parallel_config", f"parallel_config needs {needed} devices ({layout_text}), but --worker-num {n} "
            f"starts {n} ranks", f"use --worker-num {needed}, or change parallel_config so that its product is {n}"))
    expert = positive_int(dotted_get(training, "parallel_config.expert_parallel")) or 1
    stage_devices = needed // (positive_int(dotted_get(training, "parallel_config.pipeline_stage")) or 1)
    if lays_out_ranks(training) and expert > 1 and stage_devices % expert:
        found.append(error(
            CODE, "parallel_config.expert_parallel", f"parallel_config.expert_parallel {expert} must divide the "
            "devices of one pipeline stage (data_parallel x model_parallel x context_parallel = "
            f"{stage_devices})", f"pick an expert_parallel that divides {stage_devices}"))
    if n and n > 1 and training.get("use_parallel") is not True:
        found.append(error(
            CODE, "use_parallel", f"--worker-num {n} needs a parallel config, but use_parallel is not True",
            f"for data parallelism add: use_parallel=True parallel_config.data_parallel={n} parallel.full_batch=False"))
    if n and n > 1 and not use_legacy(training) and dotted_get(training, "context.device_target") == "CPU":
        found.append(error(
            CODE, "use_legacy", f"--worker-num {n}: {MCORE_CPU_RANKS}", "train an mcore model on one CPU process (no "
            "--worker-num), or on Ascend; the legacy models train on several CPU ranks"))
    return found


def check_launch(ctx: CheckContext) -> list[Finding]:
    """MS026 for the launch ``msmon validate`` was told about (nothing for a library call without one)."""
    if ctx.launch is None:
        return []
    found = []
    try:
        check_run_mode(ctx.get("run_mode"))
    except MsmonError as exc:
        found.append(error(CODE, "run_mode", exc.message, exc.hint))
    return found + launch_findings(ctx.training, ctx.launch.worker_num)
