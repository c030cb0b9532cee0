"""An msmon run directory as a reference: its metrics.jsonl (the rank ``msmon report`` shows) and the global
batch size of the config it trained with."""

from __future__ import annotations

from pathlib import Path

from msmon import layout
from msmon.compat.parallel import global_batch_size
from msmon.config.mindformers_yaml import read_run_config
from msmon.records import read_records, shown_rank
from msmon.reference.curve import METRICS, CurveBuilder, ReferenceCurve, ReferenceKind
from msmon.run_record import recorded
from msmon.util.numbers import as_number, positive_int


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` is a run directory (it holds every file of ``layout.MARKERS``)."""
    return path.is_dir() and all((path / name).is_file() for name in layout.MARKERS)


def _world_size(run_dir: Path) -> int:
    record = recorded(run_dir)
    shape = record.layout if record is not None else None
    return positive_int(shape.get("world_size") if shape is not None else None) or 1


def run_global_batch(run_dir: Path) -> int | None:
    """The samples one step of the run took over every rank (its config and world size), None when unknown."""
    config = read_run_config(run_dir)
    return global_batch_size(config, _world_size(run_dir)) if config else None


def load(run_dir: Path) -> ReferenceCurve:
    """The run's curve, read line by line; MsmonError for an unreadable metrics.jsonl or one without a loss."""
    ranks: dict[int, CurveBuilder] = {}
    for record in read_records(run_dir / layout.METRICS):
        rank = record.get("rank", 0)
        values = {name: number for name in METRICS if (number := as_number(record.get(name))) is not None}
        ranks.setdefault(rank if isinstance(rank, int) else 0, CurveBuilder()).add(record["step"], values)
    rank = shown_rank(set(ranks), {r for r, builder in ranks.items() if builder.has("loss")})
    return (ranks[rank] if rank is not None else CurveBuilder()).build(
        run_dir, ReferenceKind.RUN, global_batch_size=run_global_batch(run_dir),
        missing_loss="its metrics.jsonl has no loss: track it (monitor_config.track_metrics) or pass another run")
