"""Build the real mindformers Trainer from a training config (msmon's keys removed) and train."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msmon.runner.quickstart import ensure_dataset, is_generated


def prepare_output(training_config: dict[str, Any], log_dir: Path) -> dict[str, Any]:
    """Point mindformers' outputs (``output_dir``, ``./output/log``) into ``log_dir/output``.

    Sets ``LOCAL_DEFAULT_PATH`` too; it must happen before the first ``import mindformers`` of the
    process, which already writes ``<LOCAL_DEFAULT_PATH>/log``.
    """
    output = (log_dir / "output").absolute()
    os.environ["LOCAL_DEFAULT_PATH"] = str(output)
    config = dict(training_config)
    config["output_dir"] = str(output)
    return config


def ensure_generated_data(training_config: Mapping[str, Any]) -> None:
    """Generate the datasets of msmon's cache that the config reads (``${msmon_dataset:NAME}``)."""
    for section in ("train_dataset", "eval_dataset"):
        loader = (training_config.get(section) or {}).get("data_loader") or {}
        for key in ("dataset_dir", "dataset_files"):
            paths = loader.get(key)
            for path in paths if isinstance(paths, list) else [paths]:
                if isinstance(path, str) and is_generated(path):
                    ensure_dataset(path)


def import_framework(log_dir: Path) -> None:
    """Import mindformers with its logs under ``log_dir/output`` and register msmon's CPU support."""
    os.environ["LOCAL_DEFAULT_PATH"] = str((log_dir / "output").absolute())
    from msmon.runner.cpu_support import register_cpu_support

    register_cpu_support()


def train(training_config: dict[str, Any], callbacks: list[Any], log_dir: Path) -> None:
    """Train with the mindformers Trainer; ``training_config`` has msmon's keys already removed."""
    config = prepare_output(training_config, log_dir)
    ensure_generated_data(config)
    import_framework(log_dir)
    from mindformers import MindFormerConfig, Trainer
    from mindformers.core.context import build_context

    mf_config = MindFormerConfig(**config)
    build_context(mf_config)
    trainer = Trainer(mf_config, callbacks=list(callbacks) or None)
    trainer.train()
