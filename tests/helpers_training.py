"""Shared helpers for tests that train for real with the CPU quickstart (import, not a conftest).

    from helpers_training import QUICKSTART, quickstart_parts, training_yaml, write_quickstart_config

    path = write_quickstart_config(tmp_path, steps=30, log_interval=5, monitor_type=["file"])
    training, monitor = quickstart_parts(path)       # mindformers' dict (msmon keys removed), msmon's keys
    msmon.runner.trainer.train(training_yaml(training, tmp_path), [callback], tmp_path / "logs")  # the real Trainer

``write_quickstart_config(directory, *, steps=None, overrides=None, source=QUICKSTART, **monitor_overrides)
-> Path`` copies the shipped quickstart (or ``source``: ``QUICKSTART_QWEN3`` is the Qwen3 mcore one,
``QUICKSTARTS`` names both for parametrising) to ``directory/quickstart.yaml`` (interpolations kept) with
``save_dir`` = ``directory/monitor_logs``, ``run_name`` = ``test_run`` and ``verbose`` false unless given,
``steps`` training steps (batch 2, 400 by default), ``overrides`` as dotted-key -> value for any other
section, and ``monitor_overrides`` as monitor_config keys. Run tests inside tmp_path (monkeypatch.chdir):
``import mindformers`` writes ./output/log into the cwd unless LOCAL_DEFAULT_PATH is set first (train()
sets it). First step ~4-5 s (graph compile), then ~25-40 ms/step; the first call also generates the
dataset into $MSMON_CACHE_DIR (default ~/.cache/msmon, < 1 s).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from msmon.config.loader import QUICKSTARTS_DIR

QUICKSTART = QUICKSTARTS_DIR / "quickstart.yaml"
QUICKSTART_QWEN3 = QUICKSTARTS_DIR / "quickstart-qwen3.yaml"
#: Both model paths (same batch size and step key): the legacy Llama and the mcore Qwen3 mindformers ships.
QUICKSTARTS = {"legacy": QUICKSTART, "mcore": QUICKSTART_QWEN3}
#: The project (monitor_config.project_name) each quickstart writes its runs under.
PROJECTS = {"legacy": "quickstart", "mcore": "quickstart_qwen3"}
BATCH_SIZE = 2


def checkpoint_section(every: int, keep: int) -> dict[str, int]:
    """Overrides of the quickstarts' ``checkpoint:`` section (mindformers 1.9 reads it over the CheckpointMonitor's
    own keys, msmon.compat.internals.checkpoint_section): a checkpoint every ``every`` steps, the last ``keep`` kept."""
    return {"checkpoint.save_interleaved_steps": every, "checkpoint.save_max": keep}


def write_quickstart_config(
    directory: str | Path,
    *,
    steps: int | None = None,
    overrides: dict[str, Any] | None = None,
    source: Path = QUICKSTART,
    **monitor_overrides: Any,
) -> Path:
    """A copy of a quickstart config in ``directory`` with its outputs kept inside ``directory``."""
    directory = Path(directory)
    conf = OmegaConf.load(source)
    monitor = {"save_dir": str(directory / "monitor_logs"), "run_name": "test_run", "verbose": False}
    monitor.update(monitor_overrides)
    for key, value in monitor.items():
        OmegaConf.update(conf, f"monitor_config.{key}", value, force_add=True)
    if steps is not None:
        OmegaConf.update(conf, "train_dataset.data_loader.num_samples", steps * BATCH_SIZE)
    for key, value in (overrides or {}).items():
        OmegaConf.update(conf, key, value, force_add=True)
    path = directory / "quickstart.yaml"
    path.write_text(OmegaConf.to_yaml(conf, resolve=False), encoding="utf-8")
    return path


def training_yaml(training: dict[str, Any], directory: Path) -> Path:
    """``training`` written as the ``mindformers.yaml`` that ``msmon.runner.trainer.train`` loads (as
    run_mindformer.py would, mindformers' config template applied)."""
    from msmon.config.mindformers_yaml import render

    path = directory / "mindformers.yaml"
    path.write_text(render(training), encoding="utf-8")
    return path


def quickstart_parts(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the training dict for mindformers with msmon's keys removed, msmon's monitor_config keys)."""
    from msmon.config.loader import load_config
    from msmon.config.split import split_monitor_config

    return split_monitor_config(load_config(path).resolved())


_STEP = re.compile(r"step:\[\s*(\d+)/")
_FIELDS = {
    "loss": re.compile(r"(?<![a-z_])loss:\[?\s*([^/,\]\s]+)"),
    "learning_rate": re.compile(r"(?<![a-z_])lr: ([^,\s]+)"),
    "grad_norm": re.compile(r"global_norm: \[?([^\],\s]+)"),
    "loss_lm": re.compile(r"lm_loss: ([^,\s]+)"),
    "loss_mtp": re.compile(r"mtp_loss: ([^,\s]+)"),
    "loss_aux": re.compile(r"load_balancing_loss: ([^,\s]+)"),
    "tflops_per_device": re.compile(r"train_throughput_per_npu: ([0-9.]+)T"),
    "per_step_time_ms": re.compile(r"per_step_time: (\d+)ms"),
}


def mindformers_step_lines(run_dir: str | Path, rank: int = 0) -> dict[int, dict[str, float]]:
    """step -> the values ``MFLossMonitor`` printed for it (``{ Epoch:[..], step:[..], loss:[..] ...`` lines of
    ``<run dir>/logs/output/log/rank_N/info.log``), under msmon's metric names."""
    log = Path(run_dir) / "logs" / "output" / "log" / f"rank_{rank}" / "info.log"
    return parse_step_lines(log.read_text(encoding="utf-8", errors="replace"))


def parse_step_lines(text: str) -> dict[int, dict[str, float]]:
    """``mindformers_step_lines`` of any text holding MFLossMonitor's lines (its log file, or the terminal
    output of a run, which still has them when a full disk stopped the log file)."""
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        step = _STEP.search(line)
        if step is None or "Epoch:[" not in line:
            continue
        steps[int(step.group(1))] = {
            name: float(match.group(1)) for name, pattern in _FIELDS.items() if (match := pattern.search(line))
        }
    return steps


def shipped_mindformers_yaml(name: str) -> Path:
    """A YAML mindformers ships in its configs/ (the test is skipped when this version has none)."""
    spec = importlib.util.find_spec("mindformers")
    assert spec is not None and spec.origin
    found = sorted((Path(spec.origin).parents[1] / "configs").rglob(name))
    if not found:
        pytest.skip(f"this mindformers ships no {name}")
    return found[0]


def mcore_yaml(tmp_path: Path) -> str:
    """mindformers' own Qwen3 pretraining YAML (mcore), its dataset pointed at a directory that exists."""
    data_dir = tmp_path / "wiki103"
    data_dir.mkdir()
    (data_dir / "text_document.bin").write_bytes(b"")
    (data_dir / "text_document.idx").write_bytes(b"")
    return shipped_mindformers_yaml("pretrain_qwen3_32b_4k.yaml").read_text(encoding="utf-8").replace(
        "/path/to/wiki103-megatron_text_document", str(data_dir / "text_document"))
