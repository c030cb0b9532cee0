"""A run's checkpoints: every one it saved, and the latest one whole on every rank (what a resume, a restart and a
rollback continue from).

mindformers' CheckpointMonitor writes one of two layouts under ``<output>/checkpoint/``:

- the rank layout (``use_legacy_format``, mindformers 1.8, and 1.9 without a ``checkpoint:`` section):
  ``rank_N/<prefix>_rank_N-<epoch>_<step>.<ckpt|safetensors>`` (``checkpoint/checkpoint/rank_N`` in mindformers 1.9
  when ``use_legacy_format`` was left to a dict config: runs before msmon set it); a checkpoint is usable when every
  rank's file of it is whole (``compat.checkpoint_file``), and its step is the ``step_num`` inside the files, not the
  one in the name;
- the iteration layout (mindformers 1.9 with a ``checkpoint:`` section: ``compat.internals.checkpoint_section``):
  ``iteration_<step:08d>/`` holding ``<prefix>-model-<rank:07d>-<ranks:07d>.safetensors`` and ``-opt-`` per rank,
  ``common.json`` (the step, written by rank 0 after its files) and, with several ranks, ``metadata.json``; usable
  when common.json holds the step and every rank's files are there and whole.

Both layouts are listed by ``saved_checkpoints``; ``latest_checkpoint`` picks the latest usable checkpoint of either.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from msmon import layout
from msmon.compat.checkpoint_file import FORMATS, CheckpointFile, Incomplete, read_checkpoint
from msmon.errors import describe
from msmon.util.jsonfiles import JsonObject, read_json_object

logger = logging.getLogger("msmon")

RANK_DIR = re.compile(r"^rank_(\d+)$")
RANK_IN_NAME = re.compile(r"_rank_(\d+)")
ITERATION_DIR = re.compile(r"^iteration_(\d+)$")
ITERATION_FILE = re.compile(r"^.*-(?P<kind>model|opt)-(?P<rank>\d{7})-(?P<ranks>\d{7})\.safetensors$")
COMMON_JSON = "common.json"  # the iteration layout's step, epoch, loss scale (rank 0 writes it after its files)
METADATA_JSON = "metadata.json"  # the iteration layout's shards (several ranks only)
#: ResumePoint.layout: rank_N/ files (use_legacy_format) or iteration_<step>/ directories (a checkpoint: section)
RANK_LAYOUT, ITERATION_LAYOUT = "rank", "iteration"


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run resumes from: rank 0's file (the rank layout) or its iteration directory, its step, and
    how many ranks wrote it."""

    root: Path  # the directory holding rank_N/ (or iteration_<step>/)
    name: str  # rank 0's file name; rank r's is the same with _rank_r (the iteration layout: the directory's name)
    fmt: str  # ckpt | safetensors
    step: int
    ranks: int
    layout: str = RANK_LAYOUT  # RANK_LAYOUT | ITERATION_LAYOUT

    @property
    def path(self) -> Path:
        return self.root / self.name if self.layout == ITERATION_LAYOUT else self.root / "rank_0" / self.name

    def to_json(self) -> JsonObject:
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


def _iteration_dirs(run_dir: Path) -> list[Path]:
    """The ``iteration_<step>/`` directories of the run's checkpoint directory, the latest first."""
    base = run_dir / layout.CHECKPOINTS
    found = [p for p in base.iterdir() if p.is_dir() and ITERATION_DIR.match(p.name)] if base.is_dir() else []
    return sorted(found, key=lambda p: int(p.name.split("_")[1]), reverse=True)


def _iteration_step(directory: Path) -> int | None:
    """The step common.json of an iteration directory holds (None: missing, unreadable, no step)."""
    try:
        step = read_json_object(directory / COMMON_JSON).get("step_num")
    except (OSError, ValueError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _iteration_point(directory: Path, skipped: list[str]) -> ResumePoint | None:
    """An ``iteration_<step>/`` directory as a resume point: its common.json holds the step, every rank's model (and,
    when saved, optimizer) file is there and whole, and several ranks left metadata.json."""
    step = _iteration_step(directory)
    if step is None:
        skipped.append(f"{directory.name}: no readable {COMMON_JSON} with a step_num")
        return None
    files: dict[tuple[str, int], tuple[Path, int]] = {}
    for path in directory.iterdir():
        match = ITERATION_FILE.match(path.name)
        if match is not None and path.is_file():
            files[(match["kind"], int(match["rank"]))] = (path, int(match["ranks"]))
    worlds = {ranks for _, ranks in files.values()}
    if len(worlds) != 1 or ("model", 0) not in files:
        skipped.append(f"{directory.name}: no model files of one world size")
        return None
    (world,) = worlds
    kinds = sorted({kind for kind, _ in files})
    missing = [f"{kind} of rank {rank}" for kind in kinds for rank in range(world) if (kind, rank) not in files]
    if missing or (world > 1 and not (directory / METADATA_JSON).is_file()):
        skipped.append(f"{directory.name}: missing {', '.join(missing) or METADATA_JSON}")
        return None
    for path, _ in files.values():
        try:
            read_checkpoint(path)
        except (OSError, Incomplete) as exc:
            skipped.append(f"{directory.name}/{path.name}: {describe(exc)}")
            return None
    return ResumePoint(directory.parent, directory.name, "safetensors", step, world, ITERATION_LAYOUT)


def latest_checkpoint(run_dir: Path, *, before: int | None = None) -> ResumePoint | None:
    """The run's latest checkpoint whose files are whole on every rank (of a step before ``before`` when given), of
    either layout, or None; half-written ones are skipped (each named in a debug line)."""
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
    for directory in _iteration_dirs(run_dir):
        point = _iteration_point(directory, skipped)
        if point is None or (before is not None and point.step >= before):
            continue
        if best is None or point.step > best.step:
            best = point
    for line in skipped:
        logger.debug("msmon: checkpoint skipped: %s", line)
    return best


def saved_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    """Every checkpoint the run saved, as (step, path): each whole file of every rank (its step read from inside) and
    each iteration directory (its common.json's step, else the one in its name)."""
    skipped: list[str] = []
    found = []
    for root in checkpoint_roots(run_dir):
        for rank_dir in _rank_dirs(root):
            found += [(whole.step, path) for path in sorted(rank_dir.iterdir())
                      if path.suffix in FORMATS and path.is_file()
                      and (whole := _whole(path, skipped)) is not None and whole.step is not None]
    for directory in _iteration_dirs(run_dir):
        step = _iteration_step(directory)
        found.append((step if step is not None else int(directory.name.split("_")[1]), directory))
    return found
