"""CPU support for resuming a multi-rank run: a barrier from an AllReduce.

mindformers waits for every rank with MindSpore's ``Barrier`` op before it loads the checkpoint it resumes from;
``Barrier`` has no CPU kernel ("Unsupported op [Barrier] on CPU"). For a CPU run with ``use_parallel`` that
resumes, msmon replaces mindformers' two references to it (``msmon.compat.CPU_BARRIER_PATCHES``) with an
AllReduce of one number over the same group, which has a CPU kernel and returns on every rank only once every
rank has called it: the same wait. Never applied on Ascend.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

from msmon.compat import CPU_BARRIER_PATCHES, known
from msmon.foreign import ConfigValue
from msmon.util.mapping import dotted_get

WHAT = "msmon's CPU barrier for resuming a multi-rank run"


def needed(config: Mapping[str, ConfigValue]) -> bool:
    """A CPU run with ``use_parallel`` that resumes (``resume_training`` set)."""
    target = str(dotted_get(config, "context.device_target", "Ascend")).upper()
    return target == "CPU" and bool(config.get("use_parallel")) and bool(config.get("resume_training"))


def allreduce_barrier(group: str | None = None) -> None:
    """Return once every rank of ``group`` (the world by default) has called it."""
    import numpy as np
    from mindspore import Tensor, ops
    from mindspore.communication import GlobalComm

    ops.AllReduce(group=group or GlobalComm.WORLD_COMM_GROUP)(Tensor(np.ones(1, np.float32))).asnumpy()


def apply_if_needed(config: Mapping[str, ConfigValue]) -> bool:
    """Swap mindformers' barrier for ``allreduce_barrier`` when ``config`` needs it; True when applied."""
    if not needed(config):
        return False
    import mindformers

    for patch in known(CPU_BARRIER_PATCHES, mindformers.__version__, WHAT):
        module = importlib.import_module(patch.module)
        if getattr(module, patch.attribute, None) is not allreduce_barrier:
            setattr(module, patch.attribute, allreduce_barrier)
    return True
