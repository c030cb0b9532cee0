"""A TensorBoard event directory as a reference: mindformers' own (its ``tensorboard:`` section), Megatron-LM's and
common PyTorch tags, read event by event with TensorBoard's own loader (bounded memory: only the points of the tags
a metric may come from are kept, in arrays).

``TAGS`` is the default mapping, msmon metric -> the tags tried in order; ``tags`` (msmon metric -> tag) overrides
it per metric. ``iteration-time`` is milliseconds in mindformers' files and seconds in Megatron-LM's (a directory
with an ``lm loss`` tag, ``lm_loss`` as tensorboardX spells it, and no ``loss`` tag): the latter are multiplied by
1000. The global batch size is the ``batch-size`` scalar both write, when it never changes."""

from __future__ import annotations

import heapq
from array import array
from collections.abc import Collection, Iterator, Mapping
from itertools import groupby
from pathlib import Path

from msmon.errors import MsmonError
from msmon.reference.curve import METRICS, CurveBuilder, ReferenceCurve, ReferenceKind

EVENT_GLOB = "events.out.tfevents.*"
#: msmon metric -> the tags tried, first found wins: mindformers (``MFLossMonitor``), Megatron-LM, then PyTorch's
#: usual spellings (Hugging Face's Trainer writes ``train/loss``).
TAGS: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "lm loss", "lm_loss", "train/loss", "train_loss", "loss/train", "Loss/train"),
    "grad_norm": ("grad-norm", "grad_norm", "train/grad_norm", "global_norm", "gradient_norm"),
    "learning_rate": ("learning-rate", "learning_rate", "train/learning_rate", "lr", "train/lr"),
    "step_time_ms": ("iteration-time", "step_time_ms"),
}
BATCH_TAG = "batch-size"
MEGATRON_LOSS = ("lm loss", "lm_loss")  # tensorboardX writes a space as "_"


def event_files(directory: Path) -> list[Path]:
    """The event files of ``directory``, else of its one sub-directory that has some (mindformers appends
    ``rank_N``); MsmonError when several sub-directories do."""
    own = sorted(directory.glob(EVENT_GLOB))
    if own:
        return own
    below = sorted({path.parent for path in directory.glob(f"*/{EVENT_GLOB}")})
    if len(below) > 1:
        names = ", ".join(path.name for path in below)
        raise MsmonError(f"{directory}: event files in {len(below)} sub-directories ({names})",
                         "pass one of them (mindformers writes one per rank: rank_N)")
    return sorted(below[0].glob(EVENT_GLOB)) if below else []


def _scalars(files: list[Path]) -> Iterator[tuple[str, int, float]]:
    """(tag, step, value) of every scalar in ``files``: TF1 ``simple_value``s and TF2 scalar tensors."""
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    for path in files:
        for event in LegacyEventFileLoader(str(path)).Load():
            for value in event.summary.value:
                kind = value.WhichOneof("value")
                if kind == "simple_value":
                    yield value.tag, event.step, value.simple_value
                elif kind == "tensor" and not value.tensor.tensor_shape.dim:
                    yield value.tag, event.step, float(make_ndarray(value.tensor))


class _Series:
    """One tag's points in file order."""

    def __init__(self) -> None:
        self.steps = array("q")
        self.values = array("d")

    def points(self, metric: str, scale: float) -> Iterator[tuple[int, str, float]]:
        """(step, metric, value) in step order, a step's points in the order written."""
        order = sorted(range(len(self.steps)), key=self.steps.__getitem__)
        return ((self.steps[i], metric, self.values[i] * scale) for i in order)


def _chosen(found: Collection[str], tags: Mapping[str, str]) -> dict[str, str]:
    """msmon metric -> tag: ``tags`` where given, else the first default tag present."""
    chosen = {}
    for metric in METRICS:
        candidates = (tags[metric],) if metric in tags else TAGS[metric]
        tag = next((t for t in candidates if t in found), None)
        if tag is not None:
            chosen[metric] = tag
    return chosen


def load(directory: Path, tags: Mapping[str, str] | None = None) -> ReferenceCurve:
    """The curve of one run's event files, read once; only the tags a metric may come from are kept (in arrays)."""
    tags = dict(tags or {})
    unknown = sorted(set(tags) - set(METRICS))
    if unknown:
        raise MsmonError(f"tags for unknown metrics: {', '.join(unknown)}", f"map msmon's {', '.join(METRICS)}")
    wanted = {tag for metric in METRICS for tag in ((tags[metric],) if metric in tags else TAGS[metric])}
    kept: dict[str, _Series] = {}
    found: set[str] = set()
    batches: set[float] = set()
    for tag, step, value in _scalars(event_files(directory)):
        found.add(tag)
        if tag == BATCH_TAG:
            batches.add(value)
        if tag in wanted:
            series = kept.setdefault(tag, _Series())
            series.steps.append(step)
            series.values.append(value)
    seconds = not found.isdisjoint(MEGATRON_LOSS) and "loss" not in found
    merged = heapq.merge(*(kept[tag].points(metric, 1000.0 if metric == "step_time_ms" and seconds else 1.0)
                           for metric, tag in _chosen(found, tags).items()), key=lambda point: point[0])
    builder = CurveBuilder()
    for step, points in groupby(merged, key=lambda point: point[0]):
        builder.add(step, {metric: value for _, metric, value in points})
    batch = int(next(iter(batches))) if len(batches) == 1 else None
    names = ", ".join(sorted(found)[:20]) or "none"
    return builder.build(directory, ReferenceKind.TENSORBOARD, global_batch_size=batch,
                         missing_loss=f"scalar tags found: {names}; name the loss's tag: tags={{'loss': TAG}}")
