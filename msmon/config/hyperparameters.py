"""The hyperparameters and results of a run, chosen once.

MindInsight's lineage, TensorBoard's HParams, MLflow's params and ``msmon compare`` (which puts these keys
first) all use this list. Each hyperparameter names the config keys it is read from, first present wins:
the legacy models' ``model.model_config`` spellings (``num_layers``, ``num_heads``, ``param_init_type``)
and the mcore ones (``num_hidden_layers``, ``num_attention_heads``, ``params_dtype``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from msmon.foreign import ConfigValue
from msmon.util.jsonfiles import JsonValue
from msmon.util.mapping import dotted_get
from msmon.util.numbers import as_number, positive_int

_MODEL = "model.model_config."
_INDEX = re.compile(r"^(.*)\[(\d+)\]$")


@dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter: its name everywhere, the config keys it is read from, number or text."""

    name: str
    paths: tuple[str, ...]
    number: bool = True


def _hp(name: str, *paths: str, number: bool = True) -> Hyperparameter:
    return Hyperparameter(name, paths, number)


#: The hyperparameters, most important first (``world_size`` is computed from the parallel layout).
HYPERPARAMETERS: tuple[Hyperparameter, ...] = (
    _hp("learning_rate", "lr_schedule.learning_rate"),
    _hp("lr_schedule", "lr_schedule.type", number=False),
    _hp("lr_end", "lr_schedule.lr_end", "lr_schedule.min_lr"),
    _hp("warmup_steps", "lr_schedule.warmup_steps"),
    _hp("warmup_ratio", "lr_schedule.warmup_ratio"),
    _hp("schedule_total_steps", "lr_schedule.total_steps"),
    _hp("optimizer", "optimizer.type", number=False),
    _hp("beta1", "optimizer.betas[0]", "optimizer.beta1"),
    _hp("beta2", "optimizer.betas[1]", "optimizer.beta2"),
    _hp("eps", "optimizer.eps"),
    _hp("weight_decay", "optimizer.weight_decay"),
    _hp("max_grad_norm", "runner_wrapper.max_grad_norm"),
    _hp("batch_size", "runner_config.batch_size", "train_dataset.batch_size", _MODEL + "batch_size"),
    _hp("gradient_accumulation_steps", "runner_config.gradient_accumulation_steps"),
    _hp("epochs", "runner_config.epochs"),
    _hp("seq_length", _MODEL + "seq_length"),
    _hp("model", "model.arch.type", _MODEL + "architectures", _MODEL + "type", "trainer.model_name", number=False),
    _hp("num_layers", _MODEL + "num_layers", _MODEL + "num_hidden_layers"),
    _hp("hidden_size", _MODEL + "hidden_size"),
    _hp("intermediate_size", _MODEL + "intermediate_size", _MODEL + "ffn_hidden_size"),
    _hp("num_heads", _MODEL + "num_heads", _MODEL + "num_attention_heads"),
    _hp("num_kv_heads", _MODEL + "n_kv_heads", _MODEL + "num_key_value_heads", _MODEL + "num_query_groups"),
    _hp("vocab_size", _MODEL + "vocab_size", _MODEL + "padded_vocab_size"),
    _hp("compute_dtype", _MODEL + "compute_dtype", number=False),
    _hp("param_dtype", _MODEL + "param_init_type", _MODEL + "params_dtype", number=False),
    _hp("seed", "seed"),
    _hp("data_parallel", "parallel_config.data_parallel"),
    _hp("model_parallel", "parallel_config.model_parallel"),
    _hp("pipeline_stage", "parallel_config.pipeline_stage"),
    _hp("micro_batch_num", "parallel_config.micro_batch_num"),
    _hp("data_path", "train_dataset.data_loader.dataset_dir", "train_dataset.data_loader.dataset_files",
        "train_dataset.data_loader.config.data_path", "train_dataset.data_loader.path", number=False),
)
WORLD_SIZE = "world_size"
#: The parallel dimensions whose product is the device count of a parallel run.
PARALLEL_DIMS = ("data_parallel", "model_parallel", "pipeline_stage", "context_parallel")
#: The results of a run, written when it ends (``status`` is the run's final status).
RESULTS: tuple[str, ...] = ("final_loss", "best_loss", "steps", "status")

Value = float | int | str


def _read(config: Mapping[str, ConfigValue], path: str) -> ConfigValue:
    """A config value by dotted path; ``key[i]`` takes item i of a list."""
    indexed = _INDEX.match(path)
    if indexed is None:
        return dotted_get(config, path)
    items = dotted_get(config, indexed.group(1))
    index = int(indexed.group(2))
    return items[index] if isinstance(items, list | tuple) and index < len(items) else None


def _value(raw: ConfigValue, number: bool) -> Value | None:
    if raw is None or raw == "" or raw == []:
        return None
    if number:
        value = as_number(raw, parse_strings=True)
        if value is None or not math.isfinite(value):
            return None
        return int(value) if isinstance(raw, int) and not isinstance(raw, bool) else value
    if isinstance(raw, list | tuple):
        return " ".join(str(item) for item in raw)
    return str(raw)


def world_size(config: Mapping[str, ConfigValue]) -> int:
    """Devices of the run as mindformers lays them out: the product of the parallel dimensions with
    ``use_parallel``, else 1."""
    if config.get("use_parallel") is not True:
        return 1
    size = 1
    for dim in PARALLEL_DIMS:
        size *= positive_int(dotted_get(config, f"parallel_config.{dim}")) or 1
    return size


def hyperparameters(config: Mapping[str, ConfigValue] | None) -> dict[str, Value]:
    """The run's hyperparameters (absent ones left out), in the order of HYPERPARAMETERS, then world_size."""
    config = config or {}
    found: dict[str, Value] = {}
    for hp in HYPERPARAMETERS:
        for path in hp.paths:
            value = _value(_read(config, path), hp.number)
            if value is not None:
                found[hp.name] = value
                break
    found[WORLD_SIZE] = world_size(config)
    return found


def config_key_rank(key: str) -> tuple[int, int]:
    """Where a flattened config key sorts in a comparison: a hyperparameter's own key first (in the order
    above), then keys named like one (``eval_dataset.batch_size``), then the others, ``monitor_config`` last."""
    for index, hp in enumerate(HYPERPARAMETERS):
        if any(key == path.split("[")[0] for path in hp.paths):
            return 0, index
    leaf = key.rsplit(".", 1)[-1]
    for index, hp in enumerate(HYPERPARAMETERS):
        if any(leaf == path.split("[")[0].rsplit(".", 1)[-1] for path in hp.paths):
            return 1, index
    return (3 if key.split(".", 1)[0] == "monitor_config" else 2), 0


@dataclass
class RunResults:
    """The loss results of a run, from its records in step order: the last loss (NaN/Inf kept), the lowest
    finite loss and its step, and the last logged step."""

    final_loss: float | None = None
    best_loss: float | None = None
    best_step: int | None = None
    steps: int = 0

    def add(self, records: Iterable[Mapping[str, JsonValue]]) -> RunResults:
        for record in records:
            step = record.get("step")
            if isinstance(step, int) and not isinstance(step, bool):
                self.steps = max(self.steps, step)
            loss = as_number(record.get("loss"))
            if loss is None:
                continue
            self.final_loss = loss
            if math.isfinite(loss) and (self.best_loss is None or loss < self.best_loss):
                self.best_loss, self.best_step = loss, step if isinstance(step, int) else None
        return self

    def values(self, status: str) -> dict[str, Value]:
        """The RESULTS as name -> value (a loss never logged is left out)."""
        found: dict[str, Value] = {"steps": self.steps, "status": status}
        if self.final_loss is not None:
            found["final_loss"] = self.final_loss
        if self.best_loss is not None:
            found["best_loss"] = self.best_loss
        return {name: found[name] for name in RESULTS if name in found}
