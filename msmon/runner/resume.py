"""Resuming a run (``msmon run CONFIG --resume``, ``msmon resume RUN_DIR``, an automatic restart): the checkpoint it
continues from and the keys that make mindformers continue from it.

mindformers' CheckpointMonitor writes ``<output>/checkpoint/rank_N/<prefix>_rank_N-<epoch>_<step>.<ckpt|safetensors>``
(``checkpoint/checkpoint/rank_N`` in mindformers 1.9 when ``use_legacy_format`` was left to a dict config: runs
before msmon set it). A checkpoint is usable when every rank's file of it is whole (``compat.checkpoint_file``), and
its step is the ``step_num`` inside the files, not the one in the name. Before a user's resume: the run exists, is
not running, and has a complete checkpoint that fits the plan; each failure is one line (exit 1) and nothing is
created.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from msmon import layout
from msmon.compat import package_version, use_legacy
from msmon.compat.checkpoint_file import FORMATS, CheckpointFile, Incomplete, read_checkpoint
from msmon.compat.template import checkpoint_saving
from msmon.config.loader import override_value
from msmon.errors import ExitCode, MsmonError, describe
from msmon.run_record import RunRecord, recorded
from msmon.status import RunStatus
from msmon.util import procs
from msmon.util.mapping import dotted_get
from msmon.util.numbers import positive_int

logger = logging.getLogger("msmon")

RANK_DIR = re.compile(r"^rank_(\d+)$")
RANK_IN_NAME = re.compile(r"_rank_(\d+)")
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


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from: rank 0's file, its step, and how many ranks wrote it."""

    root: Path  # the directory holding rank_N/
    name: str  # rank 0's file name; rank r's is the same with _rank_r
    fmt: str  # ckpt | safetensors
    step: int
    ranks: int

    @property
    def path(self) -> Path:
        return self.root / "rank_0" / self.name

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "step": self.step, "format": self.fmt, "ranks": self.ranks}


def rank_name(name: str, rank: int) -> str:
    """The file name rank ``rank`` gave the checkpoint rank 0 named ``name`` (mindformers' own rule)."""
    return RANK_IN_NAME.sub(f"_rank_{rank}", name, count=1)


def checkpoint_roots(run_dir: Path) -> list[Path]:
    """Directories under the run's checkpoint directory that hold ``rank_N/`` directories."""
    base = run_dir / layout.CHECKPOINTS
    return [root for root in (base, base / "checkpoint") if (root / "rank_0").is_dir()]


def _rank_dirs(root: Path) -> list[Path]:
    return sorted((p for p in root.iterdir() if p.is_dir() and RANK_DIR.match(p.name)),
                  key=lambda p: int(p.name.split("_")[1]))


def _whole(path: Path, skipped: list[str]) -> CheckpointFile | None:
    try:
        found = read_checkpoint(path)
    except (OSError, Incomplete) as exc:
        skipped.append(f"{path.name}: {describe(exc)}")
        return None
    if found.step is None:
        skipped.append(f"{path.name}: holds no step_num")
        return None
    return found


def _candidates(root: Path, skipped: list[str]) -> list[CheckpointFile]:
    """Rank 0's whole checkpoint files under ``root``, the latest step first (then the newest file)."""
    files = [p for p in (root / "rank_0").iterdir() if p.suffix in FORMATS and p.is_file()]
    whole = [found for path in files if (found := _whole(path, skipped)) is not None]
    return sorted(whole, key=lambda c: (c.step or 0, c.path.stat().st_mtime), reverse=True)


def _point(root: Path, first: CheckpointFile, skipped: list[str]) -> ResumePoint | None:
    """``first`` (rank 0's file) as a resume point when every other rank has the same step whole."""
    ranks = _rank_dirs(root)
    for rank_dir in ranks[1:]:
        rank = int(rank_dir.name.split("_")[1])
        other = rank_dir / rank_name(first.path.name, rank)
        found = _whole(other, skipped) if other.is_file() else None
        if found is None or found.step != first.step:
            skipped.append(f"{first.path.name}: rank {rank}'s file {other.name} is missing, cut short or another step")
            return None
    return ResumePoint(root, first.path.name, first.format, int(first.step or 0), len(ranks))


def latest_checkpoint(run_dir: Path, *, before: int | None = None) -> ResumePoint | None:
    """The run's latest checkpoint whose files are whole on every rank (of a step before ``before`` when given), or
    None; half-written ones are skipped (each named in a debug line)."""
    skipped: list[str] = []
    best: ResumePoint | None = None
    for root in checkpoint_roots(run_dir):
        for candidate in _candidates(root, skipped):
            if before is not None and (candidate.step or 0) >= before:
                continue
            if best is not None and (candidate.step or 0) <= best.step:
                break
            point = _point(root, candidate, skipped)
            if point is not None:
                best = point
                break
    for line in skipped:
        logger.debug("msmon: checkpoint skipped: %s", line)
    return best


def checkpoint_files(run_dir: Path) -> list[CheckpointFile]:
    """Every whole checkpoint file of every rank (its step read from inside)."""
    skipped: list[str] = []
    found = []
    for root in checkpoint_roots(run_dir):
        for rank_dir in _rank_dirs(root):
            found += [whole for path in sorted(rank_dir.iterdir()) if path.suffix in FORMATS and path.is_file()
                      and (whole := _whole(path, skipped)) is not None]
    return found


def training_layout(training: Mapping[str, Any], world_size: int) -> dict[str, Any]:
    """What run.json records of a run's layout (``FIXED_KEYS`` and the world size)."""
    found: dict[str, Any] = {key: dotted_get(training, key) for key in FIXED_KEYS}
    found["world_size"] = world_size
    return found


def layout_changes(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[str]:
    """``KEY was A, now B`` for each recorded layout value the current plan changes."""
    if not recorded:
        return []
    return [f"{key} was {recorded[key]!r}, now {current.get(key)!r}" for key in recorded
            if key in current and recorded[key] != current.get(key)]


def check_fits(point: ResumePoint, training: Mapping[str, Any], world_size: int,
               recorded_layout: Mapping[str, Any] | None = None) -> None:
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
    if version not in RESUME_VERIFIED:
        raise MsmonError(f"msmon's resume keys were proven with mindformers {', '.join(RESUME_VERIFIED)}; "
                         f"the installed version is {version or 'unknown'}",
                         "set resume_training and load_checkpoint yourself and run without --resume",
                         ExitCode.INVALID)


def resume_overrides(point: ResumePoint, run_dir: Path, training: Mapping[str, Any],
                     data_position: int | None = None) -> list[str]:
    """``KEY=VALUE`` overrides that make mindformers resume from ``point`` (after the user's own overrides); the
    link directory a single-process safetensors resume needs is (re)made here. ``data_position``: the batches to
    skip when they are not the checkpoint's step (after a rollback, msmon.runner.rollback)."""
    parallel = bool(training.get("use_parallel"))
    link_dir = run_dir / layout.RESUME_LINKS
    if point.fmt == "safetensors" and not parallel:
        link_to(point.path, link_dir / HYPER_PARAM_FILE)
    keys = resume_keys(fmt=point.fmt, parallel=parallel, root=str(point.root), name=point.name,
                       link_dir=str(link_dir))
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


def further_command(config: str, overrides: Sequence[str], training: Mapping[str, Any]) -> str:
    """The `msmon run` line that trains a completed run one more epoch, in its own run directory."""
    more = (positive_int(dotted_get(training, "runner_config.epochs")) or 1) + 1
    kept = [item for item in overrides if not item.startswith("runner_config.epochs=")]
    return " ".join(["msmon run", config, *kept, "--resume", f"runner_config.epochs={more}"])


def resume_point(run_dir: Path, *, training: Mapping[str, Any], world_size: int, total_steps: int | None,
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
