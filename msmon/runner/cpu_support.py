"""CPU support: a mindformers train-step wrapper whose overflow check runs on a plain CPU, and the same support for
plain mindformers (``run_mindformer.py``) through mindformers' own ``auto_register``.

The stock ``MFTrainOneStepCell`` fails on CPU with ``Unsupported op [NPUGetFloatStatusV2] on CPU``:
MindSpore's loss-scale cell treats every non-GPU target as an Ascend 910A. ``MsmonCPUTrainOneStepCell``
checks overflow with the portable inf/nan reduction instead and keeps the same 5-tuple outputs
``(loss, overflow, loss_scale, learning_rate, global_norm)``. Use it in a training YAML as
``runner_wrapper: {type: MsmonCPUTrainOneStepCell, scale_sense: 1.0, use_clip_grad: True}``.

Plain mindformers has no msmon to register it: ``msmon export`` writes a config whose ``runner_wrapper`` names
``auto_register: msmon_cpu.MsmonCPUTrainOneStepCell`` and the module ``msmon_cpu.py`` beside it, which
``run_mindformer.py --register_path DIR`` loads (mindformers' ``REGISTER_PATH``). For an mcore model on CPU the
same key also sits in ``train_dataset_task``: mindformers builds the dataset before the network, so importing the
module there puts msmon's CPU stand-ins (msmon.runner.mcore_cpu) in place in time.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from msmon.config.mindformers_yaml import PLAIN_MODULE
from msmon.foreign import ConfigValue
from msmon.runner.mcore_cpu import apply_mcore_cpu_support, needs_mcore_cpu_support
from msmon.validate.cpu import CPU_WRAPPER

PLAIN_MODULE_TEXT = f'''"""msmon's CPU support for plain mindformers, written by `msmon export` beside the config it
exported: python run_mindformer.py --config FILE --register_path <this directory> loads it through the config's
auto_register (msmon must be installed in that environment)."""

from msmon.runner.cpu_support import plain_mindformers_support

{CPU_WRAPPER} = plain_mindformers_support()
'''
_registered: type | None = None


def register_cpu_support() -> type:
    """Register ``MsmonCPUTrainOneStepCell`` with mindformers (idempotent; imports mindformers); the class."""
    global _registered
    if _registered is not None:
        return _registered
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
    from mindformers.wrapper import MFTrainOneStepCell
    from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

    class MsmonCPUTrainOneStepCell(MFTrainOneStepCell):
        """``MFTrainOneStepCell`` with an overflow check that has a CPU kernel."""

        def get_overflow_status(self, status, compute_output):
            return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)

    MsmonCPUTrainOneStepCell.__qualname__ = CPU_WRAPPER
    MindFormerRegister.register_cls(MsmonCPUTrainOneStepCell, MindFormerModuleType.WRAPPER, CPU_WRAPPER)
    _registered = MsmonCPUTrainOneStepCell
    return MsmonCPUTrainOneStepCell


def plain_mindformers_support() -> type:
    """What ``msmon_cpu.py`` does when plain mindformers imports it: the wrapper registered and, for an mcore model
    on CPU (mindformers' context already built), msmon's CPU stand-ins in place; the wrapper class."""
    import mindformers
    import mindspore
    from mindformers.core.context.build_context import is_legacy_model

    wrapper = register_cpu_support()
    if str(mindspore.get_context("device_target")).upper() == "CPU" and not is_legacy_model():
        apply_mcore_cpu_support(mindformers.__version__)
    return wrapper


def for_plain_mindformers(training: Mapping[str, ConfigValue]) -> dict[str, ConfigValue] | None:
    """``training`` with the ``auto_register`` keys that let plain mindformers load msmon's CPU support (the module
    docstring), or None when it does not use msmon's CPU wrapper."""
    wrapper = training.get("runner_wrapper")
    if not isinstance(wrapper, Mapping) or wrapper.get("type") != CPU_WRAPPER:
        return None
    reference = f"{PLAIN_MODULE}.{CPU_WRAPPER}"
    plain = copy.deepcopy(dict(training))
    plain["runner_wrapper"]["auto_register"] = reference
    task = plain.get("train_dataset_task")
    if needs_mcore_cpu_support(plain) and isinstance(task, dict):
        task["auto_register"] = reference  # imported before the network is built
    return plain
