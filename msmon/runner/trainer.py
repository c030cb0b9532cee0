"""Train with the real mindformers Trainer from the run directory's ``mindformers.yaml``, loaded and started the way
``run_mindformer.py`` does (its ``main``: output path, context, Trainer, train), with msmon's callback added."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from msmon.compat import import_failure, use_legacy
from msmon.config.datasets import is_generated
from msmon.errors import MsmonError
from msmon.foreign import Callback, ConfigValue
from msmon.runner import cpu_barrier, skip_epochs
from msmon.runner.quickstart import ensure_dataset


def use_output_dir(log_dir: Path) -> Path:
    """Point mindformers' outputs into ``log_dir/output`` (layout.FRAMEWORK_OUTPUT of a run directory) through
    ``LOCAL_DEFAULT_PATH``; it must happen before the process's first ``import mindformers``, which already
    writes ``<LOCAL_DEFAULT_PATH>/log``."""
    output = (log_dir / "output").absolute()
    os.environ["LOCAL_DEFAULT_PATH"] = str(output)
    return output


def ensure_generated_data(training_config: Mapping[str, ConfigValue]) -> None:
    """Generate the datasets of msmon's cache that the config reads (``${msmon_dataset:NAME}``)."""
    for section in ("train_dataset", "eval_dataset"):
        loader = (training_config.get(section) or {}).get("data_loader") or {}
        for key in ("dataset_dir", "dataset_files"):
            paths = loader.get(key)
            for path in paths if isinstance(paths, list) else [paths]:
                if isinstance(path, str) and is_generated(path):
                    ensure_dataset(path)


def import_framework(log_dir: Path) -> None:
    """Import mindformers with its logs under ``log_dir/output`` and register msmon's CPU support.

    MsmonError with one line naming the reason when ``import mindformers`` itself fails.
    """
    use_output_dir(log_dir)
    try:
        import mindformers  # noqa: F401 - its own failure is the environment's, not the training's
    except Exception as exc:  # noqa: BLE001 - mindformers' import can raise anything (missing package, version clash)
        raise MsmonError(import_failure("mindformers", exc), "`msmon doctor` checks the environment") from exc
    from msmon.runner.cpu_support import register_cpu_support

    register_cpu_support()


def serve_cluster() -> None:
    """msrun's scheduler (``MS_ROLE=MS_SCHED``) runs the training's command too: MindSpore serves the cluster inside
    ``init()`` (the MCCL backend whatever the device) and ends the process there once every rank has left it.
    run_mindformer.py's scheduler imports mindformers and builds its context only to call it; here nothing of
    mindformers is imported or read."""
    from mindspore.communication import init

    init()


def prepare_mcore(training_config: Mapping[str, ConfigValue]) -> None:
    """For an mcore model (``use_legacy`` false): record its separate losses and MoE routing, and on CPU put msmon's
    stand-ins for the graph pieces without a CPU kernel in place (before the network is built)."""
    if use_legacy(training_config):
        return
    import mindformers

    from msmon.engine import routing
    from msmon.engine.step_outputs import install_loss_parts
    from msmon.runner.mcore_cpu import apply_if_needed

    install_loss_parts(mindformers.__version__)
    routing.install(mindformers.__version__)
    apply_if_needed(training_config)


def prepare_training(training_config: Mapping[str, ConfigValue]) -> None:
    """What msmon does before any Trainer trains (the native form, and the hook in a user's launch): its generated
    datasets, the mcore losses and CPU stand-ins, the CPU barrier of a resumed multi-rank CPU run, the epoch loop of
    a data skip that crosses an epoch."""
    ensure_generated_data(training_config)
    prepare_mcore(training_config)
    cpu_barrier.apply_if_needed(training_config)
    skip_epochs.apply_if_needed(training_config)


def train(config_path: Path, callbacks: list[Callback], log_dir: Path) -> None:
    """Train from ``config_path`` (``mindformers.yaml``: msmon's keys already removed) as run_mindformer.py would,
    with mindformers' outputs (checkpoints, strategies, its logs) in ``log_dir/output``."""
    import_framework(log_dir)
    from mindformers import MindFormerConfig, Trainer
    from mindformers.core.context import build_context
    from mindformers.utils.file_utils import set_output_path

    config = MindFormerConfig(str(config_path))  # mindformers' config template applied, as for run_mindformer.py
    config.output_dir = str(use_output_dir(log_dir))
    prepare_training(config)
    set_output_path(config.output_dir)
    build_context(config)
    trainer = Trainer(config, callbacks=list(callbacks) or None)
    trainer.train()
