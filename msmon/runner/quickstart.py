"""Generate the synthetic learnable datasets of msmon.config.datasets on first use (no download).

``quickstart``: arithmetic sequences modulo the vocabulary (start and stride drawn from a fixed seed),
one int32 column ``input_ids`` of ``seq_length + 1`` tokens, as a MindRecord file. A causal LM learns
it quickly, so the loss really falls. ``quickstart_qwen3``: the same sequences in the columns the mcore
models read (their ``GPTModel`` does not shift ``input_ids`` into labels): ``input_ids`` and ``labels``
(the next tokens), ``loss_mask`` (ones) and ``position_ids``, ``seq_length`` each.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from msmon.config.datasets import DatasetSpec, spec_of
from msmon.foreign import Tensor


def sequences(spec: DatasetSpec):
    """The token rows of a dataset: ``(start + stride * j) % vocab`` for j in 0..seq_length."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    starts = rng.integers(0, spec.vocab_size, size=(spec.samples, 1))
    strides = rng.integers(1, spec.max_stride + 1, size=(spec.samples, 1))
    steps = np.arange(spec.seq_length + 1)[None, :]
    return ((starts + strides * steps) % spec.vocab_size).astype(np.int32)


def columns(spec: DatasetSpec, row: Tensor) -> dict[str, Tensor]:
    """One sample's columns: ``input_ids`` (the row), or the shifted mcore columns of ``seq_length`` each."""
    import numpy as np

    if not spec.shifted:
        return {"input_ids": row}
    return {"input_ids": row[:-1], "labels": row[1:], "loss_mask": np.ones(spec.seq_length, np.float32),
            "position_ids": np.arange(spec.seq_length, dtype=np.int32)}


def ensure_dataset(path: str | os.PathLike[str]) -> None:
    """Create a generated dataset at ``path`` when it is missing (atomically: temp dir, then rename)."""
    target = Path(path)
    if target.exists() and Path(f"{target}.db").exists():
        return
    name = target.stem.rpartition("-v")[0]
    spec = spec_of(name)
    from mindspore.mindrecord import FileWriter

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        writer = FileWriter(str(tmp / target.name), shard_num=1, overwrite=True)
        writer.set_page_size(1 << 20)
        rows = [columns(spec, row) for row in sequences(spec)]
        writer.add_schema({key: {"type": str(value.dtype), "shape": [-1]} for key, value in rows[0].items()},
                          "msmon_synthetic")
        writer.write_raw_data(rows)
        writer.commit()
        os.replace(tmp / f"{target.name}.db", f"{target}.db")
        os.replace(tmp / target.name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
