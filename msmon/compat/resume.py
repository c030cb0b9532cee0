"""What msmon knows about resuming with mindformers 1.8-1.9: the keys it reads and where a multi-rank CPU resume
waits on an op without a CPU kernel. Measured by training (tests/test_resume.py); nothing here imports mindspore
or mindformers."""

from __future__ import annotations

from typing import Any

from msmon.compat.internals import Patch

#: Where mindformers waits for every rank with MindSpore's ``Barrier`` op before it loads a checkpoint to resume
#: (``preload_ckpt`` for .ckpt, ``load_checkpoint_with_safetensors``): the op has no CPU kernel ("Unsupported op
#: [Barrier] on CPU"), so a multi-rank CPU run could not resume. msmon/runner/cpu_barrier.py swaps these names.
CPU_BARRIER_PATCHES: dict[str, tuple[Patch, ...]] = dict.fromkeys(("1.8.0", "1.9.0"), (
    Patch("mindformers.trainer.utils", "barrier", "barrier"),
    Patch("mindformers.utils.load_checkpoint_utils", "barrier", "barrier"),
))

#: mindformers releases whose resume keys below were proven by training (tests/test_resume.py, the 1.8 matrix).
RESUME_VERIFIED: tuple[str, ...] = ("1.8.0", "1.9.0")
#: The file a directory of ``load_checkpoint`` must hold for 1.8-1.9 to resume a single process from safetensors.
HYPER_PARAM_FILE = "hyper_param.safetensors"


def resume_keys(*, fmt: str, parallel: bool, root: str, name: str, link_dir: str) -> dict[str, Any]:
    """The keys that make mindformers 1.8-1.9 resume from CheckpointMonitor's per-rank files
    (``<root>/rank_N/<prefix>_rank_N-<epoch>_<step>.<fmt>``, ``use_legacy_format: True``), measured by training.

    - ``resume_training: <file name of rank 0>`` with ``load_checkpoint: <root>`` (the directory holding
      ``rank_N/``): every rank reads ``rank_<its rank>/<the name with its rank>`` and its step, epoch, loss scale
      and optimizer state. Works for ``.ckpt`` (one process or many) and for safetensors with ``use_parallel``.
    - safetensors in one process: a directory holding ``rank_*`` needs ``use_parallel`` ("when input checkpoint
      file is rank dir, Please set use_parallel: True"), a file path fails 1.9's ``is_hf_checkpoint``
      ("checkpoint_path is not a directory"), and a directory of several safetensors loads all of them. What works:
      ``load_checkpoint: <a directory holding only hyper_param.safetensors>`` (a link to the chosen file) with
      ``resume_training: True``: the step and epoch come from hyper_param.safetensors, the weights and optimizer
      state from the same file (the only ``*.safetensors`` there).
    - ``resume_training: True`` with ``load_checkpoint: <root>`` lets mindformers pick by ``meta.json``, which
      names the file by the step counted from the last resume (``-1_100`` may hold step 300): not used.
    """
    if fmt == "safetensors" and not parallel:
        return {"use_legacy_format": True, "load_ckpt_format": fmt, "resume_training": True,
                "load_checkpoint": link_dir, "auto_trans_ckpt": False}
    return {"use_legacy_format": True, "load_ckpt_format": fmt, "resume_training": name, "load_checkpoint": root,
            "auto_trans_ckpt": False}
