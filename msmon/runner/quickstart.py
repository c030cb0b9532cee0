"""Synthetic learnable datasets that msmon generates on first use (no download).

``quickstart``: arithmetic sequences modulo the vocabulary (start and stride drawn from a fixed seed),
one int32 column ``input_ids`` of ``seq_length + 1`` tokens, as a MindRecord file. A causal LM learns
it quickly, so the loss really falls. The files live in ``$MSMON_CACHE_DIR`` (default
``~/.cache/msmon``) under ``datasets/``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from msmon.errors import MsmonError


@dataclass(frozen=True)
class DatasetSpec:
    """What one generated dataset contains."""

    samples: int
    seq_length: int
    vocab_size: int
    max_stride: int = 2
    seed: int = 0
    version: int = 1


DATASETS: dict[str, DatasetSpec] = {"quickstart": DatasetSpec(samples=1024, seq_length=64, vocab_size=1000)}


def cache_dir() -> Path:
    """``$MSMON_CACHE_DIR`` or ``~/.cache/msmon``."""
    return Path(os.environ.get("MSMON_CACHE_DIR") or Path.home() / ".cache" / "msmon").expanduser()


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        known = ", ".join(sorted(DATASETS))
        raise MsmonError(f"unknown generated dataset '{name}'", f"use one of: {known}")
    return DATASETS[name]


def dataset_path(name: str) -> str:
    """The MindRecord file of a generated dataset (pure: nothing is created)."""
    spec = _spec(name)
    return str(cache_dir().absolute() / "datasets" / f"{name}-v{spec.version}.mindrecord")


def is_generated(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a dataset msmon generates (so it may be created on demand)."""
    name, _, version = Path(path).stem.rpartition("-v")
    return name in DATASETS and version == str(DATASETS[name].version) and str(path) == dataset_path(name)


def sequences(spec: DatasetSpec):
    """The token rows of a dataset: ``(start + stride * j) % vocab`` for j in 0..seq_length."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    starts = rng.integers(0, spec.vocab_size, size=(spec.samples, 1))
    strides = rng.integers(1, spec.max_stride + 1, size=(spec.samples, 1))
    steps = np.arange(spec.seq_length + 1)[None, :]
    return ((starts + strides * steps) % spec.vocab_size).astype(np.int32)


def ensure_dataset(path: str | os.PathLike[str]) -> None:
    """Create a generated dataset at ``path`` when it is missing (atomically: temp dir, then rename)."""
    target = Path(path)
    if target.exists() and Path(f"{target}.db").exists():
        return
    name = target.stem.rpartition("-v")[0]
    spec = _spec(name)
    from mindspore.mindrecord import FileWriter

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        writer = FileWriter(str(tmp / target.name), shard_num=1, overwrite=True)
        writer.set_page_size(1 << 20)
        writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "msmon_synthetic")
        rows = sequences(spec)
        writer.write_raw_data([{"input_ids": row} for row in rows])
        writer.commit()
        os.replace(tmp / f"{target.name}.db", f"{target}.db")
        os.replace(tmp / target.name, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
