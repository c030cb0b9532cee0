"""MindInsight lineage beside the summary: the events MindSpore's ``SummaryRecord`` writes for
``add_value('custom_lineage_data' | 'train_lineage' | 'eval_lineage', ...)``, produced the same way (the
message serialised, wrapped by ``serialize_to_lineage_event`` into a ``LineageEvent`` and written by MindSpore's
``LineageWriter`` into ``events.out.events.summary.<time>.<device>.<host>_lineage``) without SummaryRecord's
writer process.

MindInsight 2.3.1 lists a run in Lineage Analysis once its lineage file holds a train lineage; it takes the
latest train and eval lineage of the file and merges every custom lineage event in file order. So the run is
listed from its start (hyperparameters, status ``running``) and its end rewrites loss, results and status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from msmon.config.hyperparameters import Value
from msmon.foreign import ProtoMessage

#: Hyperparameters that MindInsight's own train-lineage fields hold (its columns ``learning_rate``,
#: ``optimizer``, ``batch_size``, ``epoch``, ``device_num``, ``train_dataset_path``, ``network``); the others are
#: custom lineage (``user_defined/<name>``).
TRAIN_LINEAGE_FIELDS = frozenset({"learning_rate", "optimizer", "batch_size", "epochs", "world_size", "data_path",
                                  "model"})
#: The results MindInsight shows as metrics (``metric/<name>``, the targets of its hyperparameter importance).
METRICS = ("final_loss", "best_loss", "steps")
INT32_MAX = 2**31 - 1


def _finite_or_nan(value: float) -> float | str:
    """MindInsight reads the string "nan" as a missing number (``lineagemgr.model._parse_value``); a NaN or Inf
    in its JSON would break the page's JSON parsing."""
    return value if math.isfinite(value) else "nan"


def custom_lineage(values: Mapping[str, Value]) -> ProtoMessage:
    """A ``UserDefinedInfo`` as SummaryCollector packs one: one entry per key, int32 / double / str."""
    from mindspore.train import lineage_pb2

    info = lineage_pb2.UserDefinedInfo()
    for key, value in values.items():
        entry = info.user_info.add()
        if isinstance(value, int) and -INT32_MAX <= value <= INT32_MAX:
            entry.map_int32[key] = value
        elif isinstance(value, int | float):
            entry.map_double[key] = float(value)
        else:
            entry.map_str[key] = str(value)
    return info


def train_lineage(hyperparameters: Mapping[str, Value], final_loss: float | None) -> ProtoMessage:
    """A ``TrainLineage`` with the hyperparameters MindInsight has fields for, and the final loss once known."""
    from mindspore.train import lineage_pb2

    message = lineage_pb2.TrainLineage()
    hp = message.hyper_parameters
    if isinstance(lr := hyperparameters.get("learning_rate"), int | float):
        hp.learning_rate = float(lr)
    if "optimizer" in hyperparameters:
        hp.optimizer = str(hyperparameters["optimizer"])
    for field, name in (("batch_size", "batch_size"), ("epoch", "epochs"), ("device_num", "world_size")):
        value = hyperparameters.get(name)
        if isinstance(value, int) and 0 <= value <= INT32_MAX:
            setattr(hp, field, value)
    if "data_path" in hyperparameters:
        message.train_dataset.train_dataset_path = str(hyperparameters["data_path"])
    if "model" in hyperparameters:
        message.algorithm.network = str(hyperparameters["model"])
    if final_loss is not None:
        message.algorithm.loss = final_loss if math.isfinite(final_loss) else math.nan
    return message


def eval_lineage(results: Mapping[str, Value]) -> ProtoMessage:
    """An ``EvaluationLineage`` whose ``metric`` (JSON, as MindSpore's callbacks write it) holds the results."""
    from mindspore.train import lineage_pb2

    metrics = {name: _finite_or_nan(float(results[name])) if name != "steps" else results[name]
               for name in METRICS if name in results}
    return lineage_pb2.EvaluationLineage(metric=json.dumps(metrics))


class LineageFile:
    """One ``*_lineage`` file, written through MindSpore's ``LineageWriter`` (its CRC-framed event format)."""

    def __init__(self, path: Path) -> None:
        from mindspore.train.summary.writer import LineageWriter

        self.path = path
        self._writer = LineageWriter(str(path))

    def write(self, plugin: str, message: ProtoMessage) -> None:
        """``plugin`` is ``custom_lineage_data``, ``train_lineage`` or ``eval_lineage`` (SummaryRecord's names)."""
        from mindspore.train.summary._lineage_adapter import serialize_to_lineage_event

        self._writer.write(plugin, serialize_to_lineage_event(plugin, message.SerializeToString()))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()
