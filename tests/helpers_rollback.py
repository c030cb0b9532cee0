"""The article's night as data: a quickstart dataset whose batches in a window of steps are corrupt (shuffle off, so
the window is known), and the quickstart config that trains on it with checkpoints to roll back to (import, not a
conftest; tests/test_rollback_real.py, tests/canonical_rollback.py and bench/bench_rollback.py).

    data = corrupt_dataset(tmp_path, "legacy", (150, 170))
    config = rollback_config(tmp_path / "run", "legacy", data, health={"loss_spike": {"action": "rollback"}})
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers_training import QUICKSTARTS, checkpoint_section, write_quickstart_config

STEPS = 300
BATCH = 8  # the quickstart's 2 learns too noisily for a final loss to compare (one step's loss varies by half)
WINDOW = (150, 170)  # the corrupt steps
CHECKPOINT_STEPS = 50
PROJECTS = {"legacy": "quickstart", "mcore": "quickstart_qwen3"}


def corrupt_dataset(directory: Path, model: str, window: tuple[int, int] | None, kind: str = "random", *,
                    steps: int = STEPS, samples_per_step: int = BATCH) -> Path:
    """The quickstart's dataset (``steps`` steps of ``samples_per_step``) with the samples of the steps in ``window``
    corrupt: ``random`` tokens (the loss jumps to about log(vocab)), or ``nan_mask`` (the mcore loss mask NaN: the
    loss is NaN). Several data-parallel ranks read samples r, r + N, r + 2N, ... (MindRecord's shard sampler,
    shuffle off), so their steps' samples are one block too: give ``samples_per_step`` over all ranks."""
    import dataclasses

    import numpy as np
    from mindspore.mindrecord import FileWriter

    from msmon.config.datasets import spec_of
    from msmon.runner.quickstart import columns, sequences

    spec = dataclasses.replace(spec_of("quickstart" if model == "legacy" else "quickstart_qwen3"),
                               samples=steps * samples_per_step)
    rows = sequences(spec)
    rng = np.random.default_rng(7)
    bad = range(samples_per_step * (window[0] - 1), samples_per_step * window[1]) if window else range(0)
    if kind == "random":
        for index in bad:
            rows[index] = rng.integers(0, spec.vocab_size, size=rows.shape[1])
    samples = [columns(spec, row) for row in rows]
    if kind == "nan_mask":
        for index in bad:
            samples[index]["loss_mask"] = np.full(spec.seq_length, np.nan, np.float32)
    path = directory / f"{model}-{kind}-{window}-{samples_per_step}.mindrecord"
    writer = FileWriter(str(path), shard_num=1, overwrite=True)
    writer.add_schema({key: {"type": str(value.dtype), "shape": [-1]} for key, value in samples[0].items()}, "corrupt")
    writer.write_raw_data(samples)
    writer.commit()
    return path


def rollback_config(directory: Path, model: str, data: Path, *, health: dict[str, Any],
                    checkpoint_steps: int = CHECKPOINT_STEPS, steps: int = STEPS, **monitor: Any) -> Path:
    """The quickstart on ``data`` (``steps`` steps of batch 8, shuffle off, a checkpoint every 50 steps, the last 5
    kept, every step logged to metrics.jsonl, ``monitor``: other monitor_config keys) in ``directory``; its run
    directory is ``run_dir(directory, model)`` (unless ``monitor`` names another project, run or save_dir)."""
    batch = dict.fromkeys(("runner_config.batch_size", "train_dataset.batch_size"), BATCH)
    if model == "legacy":
        batch["model.model_config.batch_size"] = BATCH
    return write_quickstart_config(
        directory, source=QUICKSTARTS[model], **{"log_interval": 1, "monitor_type": ["file"],
                                                 "track_metrics": ["loss", "grad_norm"], "health": health, **monitor},
        overrides={"train_dataset.data_loader.dataset_dir": str(data), "train_dataset.data_loader.shuffle": False,
                   "train_dataset.data_loader.num_samples": steps * BATCH, **batch,
                   "callbacks.1.save_checkpoint_steps": checkpoint_steps, "callbacks.1.keep_checkpoint_max": 5,
                   **checkpoint_section(checkpoint_steps, 5)})


def run_dir(directory: Path, model: str) -> Path:
    return directory / "monitor_logs" / PROJECTS[model] / "test_run"
