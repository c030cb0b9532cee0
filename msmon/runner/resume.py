"""Resuming a run (``msmon run CONFIG --resume``, ``msmon resume RUN_DIR``, an automatic restart): the checkpoint it
continues from and the keys that make mindformers continue from it.

The checkpoints themselves, of either layout mindformers saves: ``msmon.runner.checkpoints``. Before a user's resume:
the run exists, is not running, and has a complete checkpoint that fits the plan; each failure is one line (exit 1)
and nothing is created.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from msmon import layout
from msmon.compat import package_version, use_legacy
from msmon.compat.internals import ITERATION_FORMAT, checkpoint_section
from msmon.compat.template import checkpoint_saving
from msmon.config.loader import override_value
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue
from msmon.run_record import RunRecord, recorded
from msmon.runner.checkpoints import ITERATION_LAYOUT, RANK_LAYOUT, ResumePoint, latest_checkpoint
from msmon.status import RunStatus
from msmon.util import procs
from msmon.util.jsonfiles import JsonValue
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int

logger = logging.getLogger("msmon")

#: The config keys that must not change between the attempts of a run (the layout of the checkpoint and the
#: meaning of a step); run.json records them (``layout``) when a run starts.
FIXED_KEYS = ("use_parallel", "parallel_config.data_parallel", "parallel_config.model_parallel",
               "parallel_config.pipeline_stage", "runner_config.batch_size",
               "runner_config.gradient_accumulation_steps")
#: mindformers releases whose resume keys below were proven by training (tests/test_resume.py, the 1.8 matrix).
RESUME_VERIFIED: tuple[str, ...] = ("1.8.0", "1.9.0")
#: The file a directory of ``load_checkpoint`` must hold for 1.8-1.9 to resume a single process from safetensors.
HYPER_PARAM_FILE = "hyper_param.safetensors"
GENERATED_NAME_HINT = ("a run_name that is generated (auto, ${now:...}) names a new run each time: "
                       "continue a run with `msmon resume RUN_DIR`")


def resume_keys(*, fmt: str, parallel: bool, root: str, name: str, link_dir: str,
                layout_name: str = RANK_LAYOUT) -> dict[str, ConfigValue]:
    """The keys that make mindformers 1.8-1.9 resume from CheckpointMonitor's per-rank files
    (``<root>/rank_N/<prefix>_rank_N-<epoch>_<step>.<fmt>``, ``use_legacy_format: True``), measured by training.

    - the iteration layout (1.9 with a ``checkpoint:`` section, ``<root>/<name>`` = ``iteration_<step>/``):
      ``checkpoint.load_path: <that directory>`` with ``checkpoint.no_load_optim: False`` and ``load_ckpt_format:
      safetensors`` (with ``ckpt``, 1.9's ``preload_ckpt`` refuses the directory: "not a valid path to load
      checkpoint"); mindformers reads the step,
      epoch and loss scale from its common.json, the weights and optimizer state from its safetensors files (every
      rank its shards), and skips the data to the step.

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
    if layout_name == ITERATION_LAYOUT:
        return {"checkpoint.load_path": f"{root}/{name}", "checkpoint.no_load_optim": False,
                "load_ckpt_format": ITERATION_FORMAT}
    if fmt == "safetensors" and not parallel:
        return {"use_legacy_format": True, "load_ckpt_format": fmt, "resume_training": True,
                "load_checkpoint": link_dir, "auto_trans_ckpt": False}
    return {"use_legacy_format": True, "load_ckpt_format": fmt, "resume_training": name, "load_checkpoint": root,
            "auto_trans_ckpt": False}


def training_layout(training: Mapping[str, ConfigValue], world_size: int) -> dict[str, ConfigValue]:
    """What run.json records of a run's layout (``FIXED_KEYS`` and the world size)."""
    found: dict[str, ConfigValue] = {key: dotted_get(training, key) for key in FIXED_KEYS}
    found["world_size"] = world_size
    return found


def layout_changes(recorded: Mapping[str, JsonValue] | None, current: Mapping[str, JsonValue]) -> list[str]:
    """``KEY was A, now B`` for each recorded layout value the current plan changes."""
    if not recorded:
        return []
    return [f"{key} was {recorded[key]!r}, now {current.get(key)!r}" for key in recorded
            if key in current and recorded[key] != current.get(key)]


def check_fits(point: ResumePoint, training: Mapping[str, ConfigValue], world_size: int,
               recorded_layout: Mapping[str, JsonValue] | None = None) -> None:
    """MsmonError (exit 1, one line) when ``point`` cannot resume this plan: another world size, a layout or batch
    the run did not have, a ``.ckpt`` for an mcore model, a mindformers release whose keys msmon has not proven."""
    where = f"checkpoint {point.path} (step {point.step})"
    if point.ranks != world_size:
        fix = f"resume with --worker-num {point.ranks}" if point.ranks > 1 else "resume without --worker-num"
        raise MsmonError(f"{where} was written by {point.ranks} rank(s); this run has {world_size}", fix)
    changes = layout_changes(recorded_layout, training_layout(training, world_size))
    if changes:
        raise MsmonError(f"{where}: the config changed the run's layout: {'; '.join(changes)}",
                         "resume with the layout the checkpoint was written with, or start a new run")
    if point.fmt == "ckpt" and not use_legacy(training):
        raise MsmonError(f"{where} is a .ckpt file; the mcore models (use_legacy: False) resume from safetensors",
                         "set the CheckpointMonitor's checkpoint_format: safetensors")
    version = package_version("mindformers")
    section = checkpoint_section(training, version)
    if point.layout == ITERATION_LAYOUT and section is None:
        raise MsmonError(f"{where} is in mindformers 1.9's iteration layout, which mindformers {version or 'unknown'} "
                         "reads only with a checkpoint: section in the config",
                         "resume with the config (and mindformers) the run was written with")
    if point.layout == RANK_LAYOUT and section is not None:
        raise MsmonError(f"{where} is in the rank layout (use_legacy_format); the config's checkpoint: section makes "
                         "mindformers read the iteration layout",
                         "resume with the config the run was written with (`msmon resume RUN_DIR` uses its own)")
    if version not in RESUME_VERIFIED:
        raise MsmonError(f"msmon's resume keys were proven with mindformers {', '.join(RESUME_VERIFIED)}; "
                         f"the installed version is {version or 'unknown'}",
                         "set resume_training and load_checkpoint yourself and run without --resume",
                         ExitCode.INVALID)


def resume_overrides(point: ResumePoint, run_dir: Path, training: Mapping[str, ConfigValue],
                     data_position: int | None = None) -> list[str]:
    """``KEY=VALUE`` overrides that make mindformers resume from ``point`` (after the user's own overrides); the
    link directory a single-process safetensors resume needs is (re)made here. ``data_position``: the batches to
    skip when they are not the checkpoint's step (after a rollback, msmon.runner.rollback)."""
    parallel = bool(training.get("use_parallel"))
    link_dir = run_dir / layout.RESUME_LINKS
    if point.layout == RANK_LAYOUT and point.fmt == "safetensors" and not parallel:
        link_to(point.path, link_dir / HYPER_PARAM_FILE)
    keys = resume_keys(fmt=point.fmt, parallel=parallel, root=str(point.root), name=point.name,
                       link_dir=str(link_dir), layout_name=point.layout)
    if data_position is not None and data_position != point.step:
        keys.update(data_skip_steps=data_position, ignore_data_skip=False)
    return [f"{key}={override_value(value)}" for key, value in keys.items()]


def link_to(target: Path, link: Path) -> None:
    """``link`` -> ``target`` (a symbolic link, a copy where the file system has none), replacing what was there."""
    link.parent.mkdir(parents=True, exist_ok=True)
    for old in link.parent.iterdir():
        if old.is_symlink() or old.is_file():
            old.unlink()
    try:
        os.symlink(target.absolute(), link)
    except OSError:
        shutil.copyfile(target, link)


def still_running(record: RunRecord) -> bool:
    """Whether the ``msmon run`` that wrote ``record`` still runs on this host."""
    pid = record.pid
    if record.status is not RunStatus.RUNNING or record.host != socket.gethostname() or pid is None:
        return False
    if not procs.pid_running(pid):
        return False
    return any("msmon" in part for part in procs.cmdline(psutil.Process(pid)))


def check_not_completed(record: RunRecord, run_dir: Path, *, total_steps: int | None, further: str) -> None:
    """MsmonError (exit 1) when the run completed and the plan (``total_steps``) has no step past its last one;
    ``further``: the command that trains it further (the hint)."""
    if record.status is not RunStatus.COMPLETED:
        return
    last = record.last_step
    if last is not None and total_steps is not None and total_steps > last:
        return
    raise MsmonError(f"run {run_dir} completed at step {last}; nothing to resume",
                     f"to train it further, give it more steps and resume it: {further}")


def further_command(config: str, overrides: Sequence[str], training: Mapping[str, ConfigValue]) -> str:
    """The `msmon run` line that trains a completed run one more epoch, in its own run directory."""
    more = (positive_int(dotted_get(training, "runner_config.epochs")) or 1) + 1
    kept = [item for item in overrides if not item.startswith("runner_config.epochs=")]
    return " ".join(["msmon run", config, *kept, "--resume", f"runner_config.epochs={more}"])


def resume_point(run_dir: Path, *, training: Mapping[str, ConfigValue], world_size: int, total_steps: int | None,
                 further: str, joins_run: bool = False) -> ResumePoint:
    """The checkpoint the run at ``run_dir`` resumes from; MsmonError saying why there is none that fits (a completed
    run whose plan has no step past its end: ``check_not_completed``)."""
    info = recorded(run_dir)
    if not joins_run:  # node 0 owns run.json; the other machines of a multi-machine run join the directory
        if info is None and not run_dir.is_dir():
            raise MsmonError(f"nothing to resume at {run_dir}: no run directory", GENERATED_NAME_HINT)
        if info is None:
            raise MsmonError(f"nothing to resume at {run_dir}: no readable run.json",
                             "it is not the run directory of an `msmon run`; start a new run")
        if still_running(info):
            raise MsmonError(f"run {run_dir} is still running (msmon pid {info.pid})",
                             "stop it first (Ctrl-C in its terminal), or watch it with `msmon runs`")
        check_not_completed(info, run_dir, total_steps=total_steps, further=further)
    point = latest_checkpoint(run_dir)
    if point is None:
        hint = ("add a CheckpointMonitor callback to the config (save_checkpoint_steps) so a run can be resumed"
                if checkpoint_saving(training) is None else "the run ended before it saved its first checkpoint")
        raise MsmonError(f"no complete checkpoint to resume from in {run_dir / layout.CHECKPOINTS}", hint)
    check_fits(point, training, world_size, info.layout if info is not None else None)
    return point
