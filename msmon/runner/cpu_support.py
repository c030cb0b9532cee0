"""CPU support: a mindformers train-step wrapper whose overflow check runs on a plain CPU.

The stock ``MFTrainOneStepCell`` fails on CPU with ``Unsupported op [NPUGetFloatStatusV2] on CPU``:
MindSpore's loss-scale cell treats every non-GPU target as an Ascend 910A. ``MsmonCPUTrainOneStepCell``
checks overflow with the portable inf/nan reduction instead and keeps the same 5-tuple outputs
``(loss, overflow, loss_scale, learning_rate, global_norm)``. Use it in a training YAML as
``runner_wrapper: {type: MsmonCPUTrainOneStepCell, scale_sense: 1.0, use_clip_grad: True}``.
"""

from __future__ import annotations

WRAPPER_NAME = "MsmonCPUTrainOneStepCell"
_registered = False


def register_cpu_support() -> None:
    """Register ``MsmonCPUTrainOneStepCell`` with mindformers (idempotent; imports mindformers)."""
    global _registered
    if _registered:
        return
    from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
    from mindformers.wrapper import MFTrainOneStepCell
    from mindspore.nn.wrap.loss_scale import _ascend_grad_overflow

    class MsmonCPUTrainOneStepCell(MFTrainOneStepCell):
        """``MFTrainOneStepCell`` with an overflow check that has a CPU kernel."""

        def get_overflow_status(self, status, compute_output):
            return self._get_distributed_overflow_status_on_infnan_mode(_ascend_grad_overflow, compute_output)

    MsmonCPUTrainOneStepCell.__qualname__ = WRAPPER_NAME
    MindFormerRegister.register_cls(MsmonCPUTrainOneStepCell, MindFormerModuleType.WRAPPER, WRAPPER_NAME)
    _registered = True
