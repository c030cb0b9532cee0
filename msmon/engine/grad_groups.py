"""Per-group gradient norms (``layer_grad_norm``): parameter names -> groups, and each group's norm from the
train-step wrapper's per-gradient squared sums (``net_outputs[5]``, msmon.compat ``LOCAL_NORM_OPTION``).

Groups: each transformer block (``layers.N``; a block list under another name keeps it, e.g. ``mtp.layers.0``),
the embedding, the final norm, the output head and ``other`` (whatever matches none; absent when empty). The
legacy Llama names (``model.layers.0.attention.wq.weight``, ``model.tok_embeddings.embedding_weight``,
``model.norm_out.weight``, ``lm_head.weight``) and the mcore ones (``decoder.layers.0.mlp.linear_fc1.weight``,
``embedding.word_embeddings.weight``, ``decoder.final_layernorm.weight``, ``output_layer.weight``) both map.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from msmon.config.metrics import GROUP_NORM_PREFIX
from msmon.foreign import Cell, ConfigValue, Tensor

logger = logging.getLogger("msmon")

#: Name parts that only say where the model lives (dropped from a block's group name).
ROOTS = frozenset({"model", "decoder", "encoder", "transformer", "backbone", "network", "language_model"})
BLOCK_LISTS = frozenset({"layers", "layer"})
HEADS = frozenset({"lm_head", "output_layer", "output"})
TAIL = ("final_norm", "head", "other")


def group_of(name: str) -> str:
    """The group of one parameter name."""
    parts = name.split(".")
    for position, part in enumerate(parts[:-1]):
        if part in BLOCK_LISTS and parts[position + 1].isdigit():
            prefix = [p for p in parts[:position] if p not in ROOTS]
            return ".".join([*prefix, "layers", parts[position + 1]])
    lowered = name.lower()
    if "embed" in lowered:
        return "embedding"
    if any(part in HEADS for part in parts):
        return "head"
    if "norm" in lowered:
        return "final_norm"
    return "other"


def _order(group: str) -> tuple[int, str, int]:
    """Display order: embedding, the blocks by list and number, final norm, head, other."""
    if group == "embedding":
        return 0, "", 0
    if group in TAIL:
        return 2 + TAIL.index(group), "", 0
    prefix, _, number = group.rpartition(".")
    return 1, prefix, int(number)


@dataclass(frozen=True)
class GradGroups:
    """The group of each trained parameter, in the wrapper's order."""

    names: tuple[str, ...]  # group names in display order
    index: tuple[int, ...]  # position in ``names`` of each parameter's group

    @classmethod
    def of(cls, parameter_names: Sequence[str]) -> GradGroups:
        groups = [group_of(name) for name in parameter_names]
        names = tuple(sorted(set(groups), key=_order))
        position = {name: i for i, name in enumerate(names)}
        return cls(names, tuple(position[g] for g in groups))

    def totals(self, values: Sequence[float]) -> dict[str, float]:
        """Group -> the sum of its parameters' ``values`` (one per parameter, in the wrapper's order), in float64."""
        sums = [0.0] * len(self.names)
        for position, value in zip(self.index, values, strict=True):
            sums[position] += value
        return dict(zip(self.names, sums, strict=True))

    def norms(self, squares: Tensor) -> dict[str, float]:
        """``grad_norm/<group>`` -> sqrt(sum of the group's squared sums), summed in float64 on the host (NaN and
        Inf kept). ``squares``: the Tensor or array of ``net_outputs[5]`` (one read: a device sync on Ascend)."""
        values = squares.tolist() if hasattr(squares, "tolist") else list(squares)  # Tensor.tolist: 5 us, asnumpy 17
        totals = self.totals(values if isinstance(values, list) else [values])
        return {GROUP_NORM_PREFIX + name: math.sqrt(total) for name, total in totals.items()}


def trained_weights(network: Cell) -> list[Tensor] | None:
    """The parameters a train-step wrapper differentiates (its ``weights``, else its optimizer's ``parameters``)."""
    weights = getattr(network, "weights", None)
    if weights is None:
        weights = getattr(getattr(network, "optimizer", None), "parameters", None)
    return list(weights) if weights is not None else None


def groups_of_network(network: Cell, sizes: ConfigValue) -> tuple[GradGroups | None, str]:
    """The groups of the parameters a train-step wrapper differentiates (``trained_weights``), checked against the
    element counts it returned with the squared sums (``net_outputs[6]``); (None, why) when they do not match: msmon
    never guesses which norm belongs to which parameter."""
    params = trained_weights(network)
    if params is None:
        return None, "the train-step wrapper exposes neither weights nor optimizer.parameters"
    counts = [int(n) for n in sizes] if isinstance(sizes, list | tuple) else []
    expected = [math.prod(int(d) for d in p.shape) for p in params]
    if counts != expected:
        return None, (f"{len(counts)} squared sums do not match the wrapper's {len(params)} parameters "
                      "(element counts differ)")
    return GradGroups.of([p.name for p in params]), ""
