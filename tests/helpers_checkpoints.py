"""Checkpoint files as mindformers' CheckpointMonitor writes them, made without MindSpore (for unit tests).

``write_ckpt(path, step)`` writes MindSpore's protobuf ``.ckpt`` layout (one ``Checkpoint`` message per entry: a
weight and the scalars mindformers appends); ``write_safetensors(path, step)`` a safetensors file with the same
entries. ``checkpoint_tree(run_dir, steps, fmt, ranks)`` lays out ``logs/output/checkpoint/rank_N/``;
``iteration_tree(run_dir, steps, ranks)`` mindformers 1.9's iteration layout (``iteration_<step:08d>/``), as a real
1.9.0 save of the quickstart with a ``checkpoint:`` section left it (file names, common.json keys).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _entry(tag: str, dims: list[int], kind: str, content: bytes) -> bytes:
    tensor = b"".join(_varint(1 << 3) + _varint(d) for d in dims) + _field(2, kind.encode()) + _field(3, content)
    return _field(1, _field(1, tag.encode()) + _field(2, tensor))


def _scalars(step: int) -> dict[str, np.ndarray]:
    return {"step_num": np.array(step, np.int64), "epoch_num": np.array(1, np.int64),
            "global_step": np.array([step], np.int32), "loss_scale": np.array(1.0, np.float32),
            "global_batch_size": np.array(2, np.int64)}


def write_ckpt(path: Path, step: int, crc: bool = False) -> Path:
    """A ``.ckpt`` file holding a 4x4 weight and mindformers' scalars for ``step``."""
    kinds = {np.dtype(np.int64): "Int64", np.dtype(np.int32): "Int32", np.dtype(np.float32): "Float32"}
    data = _entry("model.weight", [4, 4], "Float32", np.ones((4, 4), np.float32).tobytes())
    for name, value in _scalars(step).items():
        data += _entry(name, list(value.shape), kinds[value.dtype], value.tobytes())
    if crc:
        data += b"crc_num" + (12345).to_bytes(10, "big")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_safetensors(path: Path, step: int) -> Path:
    """A safetensors file holding a 4x4 weight and mindformers' scalars for ``step``."""
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"model.weight": np.ones((4, 4), np.float32), **_scalars(step)}, str(path))
    return path


def checkpoint_tree(run_dir: Path, steps: list[int], fmt: str = "ckpt", ranks: int = 1,
                    prefix: str = "llama") -> Path:
    """``<run_dir>/logs/output/checkpoint/rank_N/<prefix>_rank_N-1_<step>.<fmt>`` for each step and rank."""
    root = run_dir / "logs" / "output" / "checkpoint"
    write = write_ckpt if fmt == "ckpt" else write_safetensors
    for rank in range(ranks):
        for step in steps:
            write(root / f"rank_{rank}" / f"{prefix}_rank_{rank}-1_{step}.{fmt}", step)
    return root


def iteration_tree(run_dir: Path, steps: list[int], ranks: int = 1, prefix: str = "llama_tiny",
                   optimizer: bool = True) -> Path:
    """``<run_dir>/logs/output/checkpoint/iteration_<step:08d>/``: each rank's ``<prefix>-model-<rank:07d>-<ranks:07d>
    .safetensors`` (and ``-opt-``), rank 0's common.json, metadata.json with several ranks; and the tracker file."""
    from safetensors.numpy import save_file

    root = run_dir / "logs" / "output" / "checkpoint"
    for step in steps:
        directory = root / f"iteration_{step:08d}"
        directory.mkdir(parents=True, exist_ok=True)
        for rank in range(ranks):
            for kind in ("model", "opt") if optimizer else ("model",):
                save_file({f"{kind}.weight": np.ones((4, 4), np.float32)},
                          str(directory / f"{prefix}-{kind}-{rank:07d}-{ranks:07d}.safetensors"))
        if ranks > 1:
            (directory / "metadata.json").write_text(json.dumps({"storage_data": {}}))
        (directory / "common.json").write_text(json.dumps(
            {"epoch_num": 1, "step_num": step, "global_step": step, "loss_scale": 1.0, "global_batch_size": 2,
             "ckpt_status": None}, indent=4))
    if steps:
        (root / "latest_checkpointed_iteration.txt").write_text(str(max(steps)))
    return root


def cut(path: Path, keep: int = -20) -> Path:
    """``path`` cut short by ``-keep`` bytes (a save that died half-way)."""
    data = path.read_bytes()
    path.chmod(0o600)
    path.write_bytes(data[:keep])
    return path


__all__ = ["checkpoint_tree", "cut", "iteration_tree", "write_ckpt", "write_safetensors"]
