"""How mindformers 1.8-1.9 turn a parallel config into ranks and batches (``BaseTrainer._reset_dataset_batch_size``):
the knowledge msmon's pre-flight needs to count devices and steps. Nothing here imports mindspore or mindformers."""

from __future__ import annotations

from collections.abc import Mapping

from msmon.foreign import ConfigValue
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int

#: MindSpore's parallel modes in which ``parallel_config`` lays the ranks out (semi-auto and auto parallel); in data
#: parallel mode (0) mindformers resets ``parallel_config`` to 1 and every rank reads its own batch.
LAYOUT_MODES = (1, 2, "semi_auto_parallel", "auto_parallel")
LAYOUT_KEYS = ("data_parallel", "model_parallel", "context_parallel", "pipeline_stage")


def expected_world_size(config: Mapping[str, ConfigValue]) -> int:
    """The ranks a parallel config is written for: data x model x context x pipeline parallel (mindformers checks
    that their product is the device count)."""
    size = 1
    for key in LAYOUT_KEYS:
        value = dotted_get(config, f"parallel_config.{key}")
        size *= value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1
    return size


def lays_out_ranks(config: Mapping[str, ConfigValue]) -> bool:
    """Whether ``parallel_config`` decides the device count (``use_parallel`` in semi-auto or auto mode)."""
    return config.get("use_parallel") is True and dotted_get(config, "parallel.parallel_mode") in LAYOUT_MODES


def samples_per_step(config: Mapping[str, ConfigValue]) -> int | None:
    """The samples of ``train_dataset.data_loader.num_samples`` one step consumes, as mindformers sizes its batches
    (None without a batch size). ``num_samples`` counts per dataset shard (MindSpore's samplers), so where each
    rank reads its own shard (one device; data parallel mode; ``full_batch: False``) a step takes the per-rank
    batch: batch x micro-batch interleave x gradient accumulation (x the micro batches instead of the
    accumulation under pipeline stages); with ``full_batch: True`` every rank reads the whole global batch, x
    ``data_parallel``. (Measured: two CPU ranks in data parallel mode, num_samples 200, batch 2: 100 steps.)"""
    batch = positive_int(dotted_get(config, "runner_config.batch_size")) or positive_int(
        dotted_get(config, "train_dataset.batch_size"))
    if batch is None:
        return None
    accumulation = positive_int(dotted_get(config, "runner_config.gradient_accumulation_steps")) or 1
    if not lays_out_ranks(config):
        return batch * accumulation
    interleave = positive_int(config.get("micro_batch_interleave_num")) or 1
    stages = positive_int(dotted_get(config, "parallel_config.pipeline_stage")) or 1
    micro = positive_int(dotted_get(config, "parallel_config.micro_batch_num")) or 1
    per_rank = batch * interleave * (micro if stages > 1 else accumulation)
    if dotted_get(config, "parallel.full_batch") is True:
        return per_rank * (positive_int(dotted_get(config, "parallel_config.data_parallel")) or 1)
    return per_rank


def global_batch_size(config: Mapping[str, ConfigValue], world_size: int) -> int | None:
    """The samples one step takes over every rank (mindformers' ``global_batch_size``; None without a batch size):
    ``samples_per_step`` where every rank reads the global batch (``full_batch: True``), times ``data_parallel``
    where each rank of a parallel layout reads its own shard, times ``world_size`` in data parallel mode (every
    rank its own batch)."""
    per_step = samples_per_step(config)
    if per_step is None or (lays_out_ranks(config) and dotted_get(config, "parallel.full_batch") is True):
        return per_step
    if lays_out_ranks(config):
        return per_step * (positive_int(dotted_get(config, "parallel_config.data_parallel")) or 1)
    return per_step * max(world_size, 1)


def data_steps(config: Mapping[str, ConfigValue]) -> int | None:
    """The steps the data gives: ``num_samples`` // the samples a step takes x epochs (None when not stated). It is
    also the end of the data in batches, counted across epochs (what MindSpore's ``set_init_step`` must stay below)."""
    samples = positive_int(dotted_get(config, "train_dataset.data_loader.num_samples"))
    batch = samples_per_step(config)
    epochs = positive_int(dotted_get(config, "runner_config.epochs")) or 1
    return samples // batch * epochs if samples and batch else None
