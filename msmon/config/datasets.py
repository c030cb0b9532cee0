"""The datasets msmon generates: names, contents and cache paths (pure: ``${msmon_dataset:NAME}``).

The files live in ``$MSMON_CACHE_DIR`` (default ``~/.cache/msmon``) under ``datasets/``;
msmon.runner.quickstart writes them on first use.
"""

from __future__ import annotations

import os
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
    shifted: bool = False  # the mcore columns (input_ids, labels, loss_mask, position_ids), else input_ids only


DATASETS: dict[str, DatasetSpec] = {
    "quickstart": DatasetSpec(samples=1024, seq_length=64, vocab_size=1000),
    "quickstart_qwen3": DatasetSpec(samples=1024, seq_length=64, vocab_size=1000, shifted=True),
}


def cache_dir() -> Path:
    """``$MSMON_CACHE_DIR`` or ``~/.cache/msmon``."""
    return Path(os.environ.get("MSMON_CACHE_DIR") or Path.home() / ".cache" / "msmon").expanduser()


def spec_of(name: str) -> DatasetSpec:
    """The spec of a generated dataset; MsmonError naming the known ones otherwise."""
    if name not in DATASETS:
        known = ", ".join(sorted(DATASETS))
        raise MsmonError(f"unknown generated dataset '{name}'", f"use one of: {known}")
    return DATASETS[name]


def dataset_path(name: str) -> str:
    """The MindRecord file of a generated dataset (pure: nothing is created)."""
    spec = spec_of(name)
    return str(cache_dir().absolute() / "datasets" / f"{name}-v{spec.version}.mindrecord")


def is_generated(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a dataset msmon generates (so it may be created on demand)."""
    name, _, version = Path(path).stem.rpartition("-v")
    return name in DATASETS and version == str(DATASETS[name].version) and str(path) == dataset_path(name)
