"""mindformers' own training log as a reference: the step lines ``MFLossMonitor`` writes to
``output/log/rank_N/info.log`` (and its rotated ``info.log.1``, ``.2``, ... before it), in an msmon run directory
under ``logs/output/log/rank_N/``.

    { Epoch:[  1/  1], step:[   12/  400], loss:[6.912004/6.915837], per_step_time: 30ms, lr: 0.004969313,
      overflow cond: False, loss_scale: 1.0, global_norm: [1.0383421], train_throughput_per_npu: 0.005T

The global step is ``step + (epoch - 1) x steps per epoch`` (as MFLossMonitor writes it to TensorBoard); the loss is
the step's own (the first of ``[step/mean]``; in sink mode ``loss: X``), printed with 6 decimals; global_norm and lr
are printed as float32 (shortest round-trip digits, at most 8 decimals); per_step_time in whole milliseconds."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from msmon.errors import MsmonError
from msmon.reference.curve import CurveBuilder, ReferenceCurve, ReferenceKind
from msmon.util.numbers import as_number

LOG_NAME = "info.log"
_STEP = re.compile(r"Epoch:\[\s*(\d+)/\s*\d+\], step:\[\s*(\d+)/\s*(\d+)\]")
_FIELDS = {
    "loss": re.compile(r"(?<![\w-])loss:\s*\[?\s*([^/,\]\s]+)"),
    "grad_norm": re.compile(r"global_norm: \[?\s*([^\],\s]+)"),
    "learning_rate": re.compile(r"(?<![\w-])lr: \[?\s*([^\],\s]+)"),
    "step_time_ms": re.compile(r"per_step_time: (\d+)ms"),
}
_GLOBAL_BATCH = re.compile(r"\bglobal_batch_size(?:: | = [^=]*= )(\d+)\b")


def log_in(directory: Path) -> Path | None:
    """mindformers' info.log in ``directory`` or in its lowest ``rank_N`` (``log/rank_N``) below it, if any."""
    if (directory / LOG_NAME).is_file():
        return directory / LOG_NAME
    for parent in (directory, directory / "log", directory / "output" / "log"):
        ranks = sorted((int(p.name[5:]), p) for p in parent.glob("rank_*") if p.name[5:].isdigit())
        for _, rank in ranks:
            if (rank / LOG_NAME).is_file():
                return rank / LOG_NAME
    return None


def is_step_log(path: Path) -> bool:
    """Whether ``path`` is named info.log or its first MiB holds one of MFLossMonitor's step lines."""
    if path.name == LOG_NAME:
        return True
    with open(path, "rb") as handle:
        head = handle.read(1 << 20).decode("utf-8", errors="replace")
    return _STEP.search(head) is not None


def _files(log: Path) -> list[Path]:
    """The rotated files before ``log`` (the highest number is the oldest), then ``log``."""
    rotated = [p for p in log.parent.glob(f"{log.name}.*") if p.suffix[1:].isdigit()]
    return [*sorted(rotated, key=lambda p: -int(p.suffix[1:])), log]


def _lines(files: list[Path]) -> Iterator[str]:
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                yield from handle
        except OSError as exc:
            raise MsmonError(f"{path}: cannot read ({exc.strerror or exc})", "check the file's permissions") from None


def load(log: Path) -> ReferenceCurve:
    """The curve of one rank's log; MsmonError when it holds no step line."""
    builder = CurveBuilder()
    batch = None
    for line in _lines(_files(log)):
        if "step:[" not in line:
            if batch is None and "global_batch_size" in line and (found := _GLOBAL_BATCH.search(line)):
                batch = int(found.group(1))
            continue
        step = _STEP.search(line)
        if step is None:
            continue
        epoch, in_epoch, per_epoch = (int(n) for n in step.groups())
        values = {}
        for name, pattern in _FIELDS.items():
            match = pattern.search(line)
            number = as_number(match.group(1), parse_strings=True) if match else None
            if number is not None:
                values[name] = number
        builder.add(in_epoch + (epoch - 1) * per_epoch, values)
    return builder.build(log, ReferenceKind.MINDFORMERS_LOG, global_batch_size=batch,
                         missing_loss="no MFLossMonitor step line ('{ Epoch:[..], step:[..], loss:..'); keep "
                                      "MFLossMonitor among the callbacks, or pass its rank's info.log")
