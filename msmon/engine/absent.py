"""A tracked metric absent at the first logged step: one warning naming the config change that makes it appear."""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping

from msmon.config.metrics import METRICS
from msmon.foreign import ConfigValue

logger = logging.getLogger("msmon")

#: The change that makes a metric appear, when the training config cannot tell.
DEFAULT_FIXES: dict[str, str] = {
    "loss": "the network returns no loss to callbacks; train with a loss function or a mindformers model",
    "grad_norm": "use mindformers' MFTrainOneStepCell with use_clip_grad: True "
    "(a training step that returns only the loss has no global norm)",
    "learning_rate": "use a mindformers runner_wrapper (it returns the learning rate) or an optimizer "
    "with a readable learning_rate",
    "throughput": "the batch shape is not visible to callbacks; set runner_config.sink_mode: False",
    "loss_scale": "use a loss-scale runner_wrapper such as MFTrainOneStepCell with a scale_sense",
    "overflow": "use a loss-scale runner_wrapper such as MFTrainOneStepCell with a scale_sense",
    "local_norm": "set runner_wrapper.local_norm: True",
    "layer_grad_norm": "use mindformers' MFTrainOneStepCell as runner_wrapper (msmon turns its local_norm on)",
    "epoch": "the training loop reports no epoch number",
    "host_memory_mb": "install psutil",
}


def missing_fix(name: str, config: Mapping[str, ConfigValue] | None) -> str:
    """The config change that makes ``name`` appear."""
    spec = METRICS.get(name)
    if config is not None and spec is not None:
        exposure = spec.exposure(config)
        if not exposure.exposed and exposure.fix:
            return exposure.fix
    return DEFAULT_FIXES.get(name, "check the training setup")


def warn_absent(tracked: Iterable[str], record: Collection[str], config: Mapping[str, ConfigValue] | None) -> None:
    """One warning per tracked metric the first logged record (``record``: its keys) lacks (throughput: its
    samples/s companion)."""
    tracked = set(tracked)
    absent = sorted(name for name in tracked - {"throughput"} if name not in record)
    if "throughput" in tracked and "samples_per_s" not in record:
        absent.append("throughput")
    for name in absent:
        logger.warning(
            "msmon: tracked metric '%s' is absent at the first logged step and is not recorded "
            "(no placeholder values). Fix: %s; or remove '%s' from monitor_config.track_metrics.",
            name, missing_fix(name, config), name,
        )
