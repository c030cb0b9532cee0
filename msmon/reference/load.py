"""``load_reference``: which kind of source a path is, and its curve.

A directory holding run.json and metrics.jsonl is an msmon run; one holding TensorBoard event files (or one
sub-directory of them, mindformers' ``rank_N``) is a TensorBoard directory; one holding mindformers' ``info.log``
(or ``rank_N/info.log``, ``log/rank_N/``, ``output/log/rank_N/`` below it) is a mindformers log. A file named
``.csv``, ``.jsonl``, ``.ndjson`` or ``.json`` is a table; ``info.log`` or a file with MFLossMonitor's step lines is
a mindformers log; an event file is a TensorBoard directory (its own)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from msmon.errors import MsmonError
from msmon.reference.curve import ReferenceCurve, ReferenceKind
from msmon.reference.sources import mindformers_log, run_dir, table, tensorboard

KNOWN = "an msmon run directory, a mindformers info.log (or its rank_N directory), a TensorBoard event directory, " \
        "or a .csv / .jsonl table"


def _detected(path: Path) -> tuple[ReferenceKind, Path]:
    """The kind of ``path`` and the file or directory to read."""
    if path.is_dir():
        if run_dir.is_run_dir(path):
            return ReferenceKind.RUN, path
        if tensorboard.event_files(path):
            return ReferenceKind.TENSORBOARD, path
        log = mindformers_log.log_in(path)
        if log is not None:
            return ReferenceKind.MINDFORMERS_LOG, log
        raise MsmonError(f"{path}: no reference source in this directory", f"pass {KNOWN}")
    if path.suffix.lower() in table.CSV_SUFFIXES + table.JSONL_SUFFIXES:
        return ReferenceKind.TABLE, path
    if path.name.startswith("events.out.tfevents."):
        return ReferenceKind.TENSORBOARD, path.parent
    try:
        if mindformers_log.is_step_log(path):
            return ReferenceKind.MINDFORMERS_LOG, path
    except OSError as exc:
        raise MsmonError(f"{path}: cannot read ({exc.strerror or exc})", "check the file's permissions") from None
    raise MsmonError(f"{path}: not a reference source (no MFLossMonitor step line, not a table)", f"pass {KNOWN}")


def reference_kind(path: Path) -> ReferenceKind:
    """Which kind of source ``path`` is (cheap: nothing is read beyond what tells the kind); MsmonError naming the
    file and the fix when it is none."""
    if not os.path.exists(path):  # os.path: False for a name too long
        raise MsmonError(f"{path}: no such file or directory", f"pass {KNOWN}")
    return _detected(Path(path))[0]


def load_reference(path: Path, tags: Mapping[str, str] | None = None) -> ReferenceCurve:
    """The reference curve of ``path`` (its kind detected); ``tags`` (msmon metric -> TensorBoard tag or table
    column) overrides the default names. MsmonError, one line naming the file and the fix, for anything else."""
    path = Path(path)
    reference_kind(path)
    kind, source = _detected(path)
    if kind is ReferenceKind.RUN:
        return run_dir.load(source)
    if kind is ReferenceKind.MINDFORMERS_LOG:
        return mindformers_log.load(source)
    if kind is ReferenceKind.TENSORBOARD:
        return tensorboard.load(source, tags)
    return table.load(source, tags)
