"""A data skip that crosses an epoch boundary: MindSpore's epoch loop starts at the data's epoch.

After a rollback msmon resumes from the checkpoint before the anomaly and skips the data past it
(``data_skip_steps``, counted over every epoch: MindSpore's ``set_init_step``). mindformers starts ``Model.train``'s
epoch loop at the checkpoint's epoch; when the skip lands in a later epoch, the loop asks for one epoch more than the
data holds ("EOF buffer encountered. User tries to fetch data beyond the specified number of epochs"). For an attempt
whose config sets ``data_skip_steps``, msmon wraps ``Model.train`` so that its ``initial_epoch`` is at least the
epoch (in the loop's unit: the dataset's batches, or ``sink_size`` steps when sinking) the skipped data reaches. Where
the skip stays in the checkpoint's epoch, and in every ordinary resume, the two are the same and nothing changes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from msmon.engine.wrap import wrap_once
from msmon.foreign import ConfigValue, Dataset, Passed
from msmon.util.numbers import positive_int

MODEL_MODULE = "mindspore.train.model"


def needed(config: Mapping[str, ConfigValue]) -> bool:
    """The config skips data (``data_skip_steps``, not ignored): msmon set it for an attempt after a rollback."""
    return positive_int(config.get("data_skip_steps")) is not None and not config.get("ignore_data_skip")


def data_epoch(train_dataset: Dataset, sink_mode: bool, sink_size: int) -> int:
    """The loop epoch the dataset's skipped batches reach (0 when it skips none)."""
    skipped = train_dataset.get_init_step() if hasattr(train_dataset, "get_init_step") else 0
    unit = sink_size if sink_mode and sink_size > 0 else train_dataset.get_dataset_size()
    return int(skipped) // unit if skipped and unit and unit > 0 else 0


def _start_at_the_data(train: Callable[..., Passed]) -> Callable[..., Passed]:
    @functools.wraps(train)
    def wrapper(self: Passed, epoch: int, train_dataset: Dataset, callbacks: Passed = None,
                dataset_sink_mode: bool = False, sink_size: int = -1, initial_epoch: int = 0) -> Passed:
        initial_epoch = max(initial_epoch, data_epoch(train_dataset, dataset_sink_mode, sink_size))
        return train(self, epoch, train_dataset, callbacks=callbacks, dataset_sink_mode=dataset_sink_mode,
                     sink_size=sink_size, initial_epoch=initial_epoch)

    return wrapper


def apply_if_needed(config: Mapping[str, ConfigValue]) -> bool:
    """Wrap ``Model.train`` (once per process) when ``config`` skips data; True when applied."""
    if not needed(config):
        return False
    wrap_once(MODEL_MODULE, "Model.train", _start_at_the_data)
    return True
