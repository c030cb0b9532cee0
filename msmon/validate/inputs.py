"""The files the training reads: checkpoints, strategies, the model directory, the dataset (MS011).

A placeholder (``/path/to/...``) or a missing local path fails the training only after the cluster started and
the model was built: an error before anything starts. Remote paths (``obs://``, ``s3://``) and a model name in
``load_checkpoint`` (no path separator) are left to mindformers; msmon's generated datasets are created on demand.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from msmon.config.datasets import is_generated
from msmon.findings import Finding, error, warning
from msmon.foreign import ConfigValue
from msmon.validate.context import CheckContext

#: The code of every finding about an input the training reads: on a workstation a cluster's config lacks them all.
INPUT_CODE = "MS011"
#: Where mindformers reads a file or directory before the first step (dotted key -> what it is).
INPUTS = {
    "load_checkpoint": "the checkpoint to start from",
    "src_strategy_path_or_dir": "the strategy of load_checkpoint",
    "pretrained_model_dir": "the pretrained model's directory",
    "model.pretrained_model_dir": "the pretrained model's directory",
    "train_dataset.data_loader.dataset_dir": "the training dataset",
    "train_dataset.data_loader.dataset_files": "the training dataset",
    "train_dataset.data_loader.config.data_path": "the training dataset (Megatron: weights and path prefixes)",
}
MEGATRON_PATHS = "train_dataset.data_loader.config.data_path"
#: Data loaders that read files named by dataset_dir / dataset_files.
FILE_LOADERS = ("MindDataset", "TFRecordDataset")
PLACEHOLDER = re.compile(r"(^|/)path/to(/|$)|<[^<>]+>|\bTODO\b|\bYOUR_", re.IGNORECASE)
REMOTE = re.compile(r"^[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def check_inputs(ctx: CheckContext) -> list[Finding]:
    findings = []
    for key, what in INPUTS.items():
        for value in _paths(ctx.get(key)):
            finding = _judge(ctx, key, what, value)
            if finding is not None:
                findings.append(finding)
    loader = "train_dataset.data_loader"
    if ctx.get(f"{loader}.type") in FILE_LOADERS and not (_paths(ctx.get(f"{loader}.dataset_dir")) or _paths(
            ctx.get(f"{loader}.dataset_files"))):
        findings.append(error(INPUT_CODE, f"{loader}.dataset_dir", f"the training dataset ({ctx.get(f'{loader}.type')})"
                              " names no dataset_dir or dataset_files: there is nothing to train on",
                              "set train_dataset.data_loader.dataset_dir (or --train_dataset_dir PATH)"))
    if ctx.get("run_mode") == "finetune" and not ctx.get("load_checkpoint") and not ctx.get(
            "model.pretrained_model_dir") and not ctx.get("pretrained_model_dir"):
        findings.append(warning(INPUT_CODE, "load_checkpoint", "run_mode finetune without load_checkpoint: the "
                                "fine-tune starts from randomly initialised weights",
                                "name the pretrained checkpoint: --load_checkpoint PATH"))
    return findings


def _paths(value: ConfigValue) -> list[str]:
    if isinstance(value, str) and value.strip():
        return [value.strip()]
    if isinstance(value, list):
        return [item.strip() for item in value if isinstance(item, str) and item.strip()]
    return []


def _judge(ctx: CheckContext, key: str, what: str, value: str) -> Finding | None:
    if REMOTE.match(value) or is_generated(value):
        return None
    if PLACEHOLDER.search(value):
        return error(INPUT_CODE, key, f"{key} {value!r} is a placeholder: {what} would be missing when the training "
                     "starts", f"point {key} at the real path (or remove the key)")
    if key == "load_checkpoint" and "/" not in value and not value.startswith("."):
        return None  # a model name mindformers resolves itself
    if key == MEGATRON_PATHS and re.fullmatch(r"[\d.]+", value):
        return None  # a weight of the blend
    path = Path(value).expanduser()
    path = path if path.is_absolute() else ctx.cwd / path
    if not os.path.exists(path) and not (key == MEGATRON_PATHS and os.path.exists(path.with_name(path.name + ".bin"))):
        return error(INPUT_CODE, key, f"{key} {str(path)!r} does not exist: {what} cannot be read when the training "
                     "starts", f"fix the path of {key} (relative paths count from {ctx.cwd})")
    return None
