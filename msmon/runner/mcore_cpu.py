"""CPU support for mindformers' mcore models (``use_legacy: False``, e.g. the shipped Qwen3 configs).

Four pieces of their training graph have no CPU kernel in MindSpore 2.9: the core attention
(``FlashAttentionScore``: ``get_gpt_layer_local_spec`` always builds ``FlashAttention``), the fused
RMS norm (``RmsNorm``: the Qwen3 training spec and the final block norm always use it), the rotary
frequencies' ``Outer`` and the word embedding's gradient (``EmbeddingDenseBackward``). For a CPU run,
before the network is built, msmon puts plain-op stand-ins in their place in mindformers' modules:

- attention: scaled dot-product attention from BatchMatMul and softmax in float32 with the causal mask
  mindformers builds (grouped-query heads repeated; attention dropout kept);
- norm: mindformers' own non-fused ``RMSNorm`` (same ``weight`` parameter);
- outer: a broadcast multiply;
- embedding: ``VocabParallelEmbedding`` with a Gather lookup (its gradient has a CPU kernel).

Parameter names and shapes are unchanged. Never applied on Ascend. The installed mindformers version
must be one of ``msmon.compat.MCORE_CPU_PATCHES`` (else a one-line error: a graph built from moved or
changed modules would be silently wrong).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType

from msmon.compat import MCORE_CPU_PATCHES, MCORE_CPU_UNSUPPORTED, known, use_legacy
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue, Mindformers, Passed, Tensor
from msmon.runner.moe_cpu import moe_standins

WHAT = "msmon's CPU support for the mcore models"


def needs_mcore_cpu_support(config: Mapping[str, ConfigValue]) -> bool:
    """True for an mcore model trained on CPU (``context.device_target: CPU``, ``use_legacy`` false)."""
    context = config.get("context")
    target = context.get("device_target", "Ascend") if isinstance(context, Mapping) else "Ascend"
    return str(target).upper() == "CPU" and not use_legacy(config)


def apply_if_needed(config: Mapping[str, ConfigValue]) -> bool:
    """Put the stand-ins in place when ``config`` trains an mcore model on CPU; True when applied."""
    if not needs_mcore_cpu_support(config):
        return False
    import mindformers

    apply_mcore_cpu_support(mindformers.__version__)
    return True


def apply_mcore_cpu_support(version: str) -> None:
    """Replace the four graph pieces in mindformers' modules (idempotent; imports mindformers)."""
    patches = known(MCORE_CPU_PATCHES, version, WHAT)
    modules = {role: importlib.import_module(patch.module) for role, patch in patches.items()}
    standins = _standins(modules)
    for role, patch in patches.items():
        current = getattr(modules[role], patch.attribute, None)
        if current is standins[role]:
            continue
        if getattr(current, "__name__", None) != patch.original:
            raise MsmonError(
                f"{WHAT}: {patch.module}.{patch.attribute} is {current!r}, not mindformers' {patch.original}",
                "reinstall mindformers (another patch replaced it)",
                ExitCode.TRAINING_FAILED,
            )
        setattr(modules[role], patch.attribute, standins[role])


_STANDINS: dict[str, type] = {}


def _standins(modules: Mapping[str, ModuleType]) -> dict[str, type]:
    """role -> stand-in class (built once: they subclass MindSpore and mindformers classes)."""
    if _STANDINS:
        return _STANDINS
    import mindspore.common.dtype as mstype
    from mindformers.parallel_core.training_graph.tensor_parallel.layers import VocabParallelEmbedding
    from mindspore import nn, ops
    from mindspore.ops import operations as P

    class MsmonCPUAttention(nn.Cell):
        """FlashAttention's place (BNSD layout, causal mask): softmax(Q K^T * scale + mask) V in float32."""

        def __init__(self, config: Mindformers, layer_number: int, attn_mask_type: Passed = None,
                     attention_type: Passed = None,
                     attention_dropout: float | None = None, softmax_scale: float | None = None,
                     cp_comm_type: Passed = None) -> None:
            super().__init__()
            features = [f"{what} (model_config.{key})" for key, what in MCORE_CPU_UNSUPPORTED.items()
                        if getattr(config, key, None)]
            if config.input_layout != "BNSD" or attn_mask_type or attention_type or cp_comm_type:
                features.append(f"attention layout {config.input_layout} (context parallel or mask options)")
            self.heads = config.num_attention_heads
            self.repeat = self.heads // config.num_query_groups
            if not config.use_flash_attention and self.repeat > 1:
                features.append("use_flash_attention False with grouped-query attention (mindformers 1.9 then "
                                "repeats the key/value heads on the wrong axis; keep it True)")
            if features:
                raise MsmonError(f"{WHAT}: the CPU attention does not implement {', '.join(features)}",
                                 "change the named settings for CPU runs or train on Ascend", ExitCode.TRAINING_FAILED)
            self.scale = softmax_scale if softmax_scale is not None else config.kv_channels ** -0.5
            dropout = config.attention_dropout if attention_dropout is None else attention_dropout
            self.dropout = nn.Dropout(p=dropout)  # mindformers' Dropout uses DropoutExt: no CPU kernel
            self.qk = P.BatchMatMul(transpose_b=True)
            self.pv = P.BatchMatMul()
            self.softmax = P.Softmax(-1)

        def _heads(self, x: Tensor, repeat: int) -> Tensor:
            """(S, B, N, D) -> (B, N * repeat, S, D) in float32, each head repeated ``repeat`` times in place."""
            x = ops.transpose(ops.cast(x, mstype.float32), (1, 2, 0, 3))
            if repeat == 1:
                return x
            batch, heads, seq, dim = x.shape
            x = ops.tile(ops.expand_dims(x, 2), (1, 1, repeat, 1, 1))
            return ops.reshape(x, (batch, heads * repeat, seq, dim))

        def construct(self, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor,
                      attn_mask_type: Passed = None,
                      attention_bias: Passed = None, packed_seq_params: Passed = None, alibi_mask: Passed = None,
                      prefix: Passed = None, padding_mask: Passed = None, actual_seq_qlen: Passed = None,
                      actual_seq_kvlen: Passed = None) -> Tensor:
            seq, batch = query.shape[0], query.shape[1]
            scores = self.qk(self._heads(query, 1), self._heads(key, self.repeat)) * self.scale
            if attention_mask is not None:  # 1 = masked, broadcast over the heads
                scores = scores - ops.cast(attention_mask, mstype.float32) * 1e9
            probs = self.dropout(self.softmax(scores))
            out = self.pv(probs, self._heads(value, self.repeat))
            out = ops.reshape(ops.transpose(out, (2, 0, 1, 3)), (seq, batch, -1))
            return ops.cast(out, query.dtype)

    class MsmonCPUOuter(nn.Cell):
        """``Outer`` as a broadcast multiply."""

        def construct(self, x: Tensor, y: Tensor) -> Tensor:
            return ops.reshape(x, (-1, 1)) * ops.reshape(y, (1, -1))

    class MsmonCPUVocabParallelEmbedding(VocabParallelEmbedding):
        """The word embedding looked up with Gather (no tensor parallelism, as on one CPU device)."""

        def __init__(self, *args: Passed, **kwargs: Passed) -> None:
            super().__init__(*args, **kwargs)
            if self.enable_embedding_tp or self.sequence_parallel:
                raise MsmonError(f"{WHAT}: the CPU embedding does not implement tensor or sequence parallelism",
                                 "set parallel_config.model_parallel: 1 and use_seq_parallel: False",
                                 ExitCode.TRAINING_FAILED)
            self.gather = P.Gather()

        def embedding_func(self, input_: Tensor, weight: Tensor) -> Tensor:
            batch, seq = input_.shape
            output = self.gather(weight, self.reshape(input_, (batch * seq,)), 0)
            return self.reshape(output, (batch, -1, weight.shape[1]))

    _STANDINS.update(
        moe_standins(modules),
        attention=MsmonCPUAttention,
        norm=modules["norm"].RMSNorm,
        outer=MsmonCPUOuter,
        embedding=MsmonCPUVocabParallelEmbedding,
    )
    return _STANDINS
