"""mindformers internals msmon relies on, per release (plain data; no heavy imports).

Everything here was read from (and measured with) the mindformers sources of the versions named; the
code that acts on it checks the installed version against these tables and refuses a version it does
not know instead of guessing. Kept whole because it is the one place that knows mindformers' per-release internals
(docs/architecture.md): short, independent tables, each read from the sources of the releases it names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from msmon.compat.environment import release
from msmon.errors import ExitCode, MsmonError
from msmon.foreign import ConfigValue
from msmon.util.mapping import dotted_get

T = TypeVar("T")

#: Names of the parts of ``cb_params.net_outputs`` by tuple length: what ``MFTrainOneStepCell`` and
#: ``MFPipelineWithLossScaleCell`` return in mindformers 1.8-1.9 (legacy and mcore models alike; with
#: ``calculate_per_token_loss`` the cell divides by the token count itself and still returns 5 or 7).
TRAIN_STEP_OUTPUTS: dict[int, tuple[str, ...]] = {
    3: ("loss", "overflow", "loss_scale"),
    4: ("loss", "overflow", "loss_scale", "learning_rate"),
    5: ("loss", "overflow", "loss_scale", "learning_rate", "grad_norm"),
    7: ("loss", "overflow", "loss_scale", "learning_rate", "grad_norm", "local_norm", "local_norm_size"),
}

#: ``runner_wrapper`` key that makes ``MFTrainOneStepCell`` and ``MFPipelineWithLossScaleCell`` (and msmon's CPU
#: subclass: ``msmon.config.metrics.MF_WRAPPERS``) return 7 outputs: ``[5]`` = each gradient's squared sum (float32,
#: one per trained parameter in the order of the wrapper's ``weights`` = ``optimizer.parameters``, after the loss
#: scale is divided out and before the data-parallel all-reduce), ``[6]`` = their element counts (a tuple of ints).
#: The same in 1.8.0 and 1.9.0 (read in both sources; measured on 1.9.0, legacy and mcore models: on one device
#: sqrt(sum of [5]) equals ``global_norm`` to float32 precision).
LOCAL_NORM_OPTION = "local_norm"

_MCORE = "mindformers.parallel_core.training_graph."
_MOE = _MCORE + "transformer.moe."


@dataclass(frozen=True)
class Patch:
    """A module attribute msmon replaces, and the name of what must be there before it does."""

    module: str
    attribute: str
    original: str


#: mindformers version -> the module attributes the CPU support for the mcore models replaces
#: (msmon/runner/mcore_cpu.py): what the Qwen3 training spec, the final block norm, the rotary
#: frequencies and the word embedding are built from when the network is constructed, and the ops of the MoE layer
#: without a CPU kernel (top-k, sort, fmod, cumsum, index select, the dispatcher's host copy, grouped matmul, SwiGLU).
MCORE_CPU_PATCHES: dict[str, dict[str, Patch]] = {
    "1.9.0": {
        "attention": Patch(_MCORE + "base_models.gpt.gpt_layer_specs", "FlashAttention", "FlashAttention"),
        "norm": Patch(_MCORE + "transformer.norm", "FusedRMSNorm", "FusedRMSNorm"),
        "outer": Patch(_MCORE + "base_models.common.embeddings.rotary_pos_embedding", "Outer", "Outer"),
        "embedding": Patch(
            _MCORE + "base_models.common.embeddings.language_model_embedding",
            "VocabParallelEmbedding",
            "VocabParallelEmbedding",
        ),
        # the mixture-of-experts layer (msmon/runner/moe_cpu.py): router, token dispatcher, grouped experts
        "topk": Patch(_MOE + "router", "TopkExt", "TopkExt"),
        "sort": Patch(_MOE + "token_dispatcher", "SortExt", "SortExt"),
        "fmod": Patch(_MOE + "token_dispatcher", "FmodScalar", "FmodScalar"),
        "cumsum": Patch(_MOE + "token_dispatcher", "CumsumExt", "CumsumExt"),
        "index_select": Patch(_MOE + "token_dispatcher", "IndexSelect", "IndexSelect"),
        "dispatcher": Patch(_MOE + "ffn", "MoEAlltoAllTokenDispatcher", "MoEAlltoAllTokenDispatcher"),
        "grouped_matmul": Patch(_MOE + "ffn", "GroupedMatmul", "GroupedMatmul"),
        "swiglu": Patch(_MOE + "ffn", "Swiglu", "Swiglu"),
    },
}

#: Where mindformers waits for every rank with MindSpore's ``Barrier`` op before it loads a checkpoint to resume
#: (``preload_ckpt``, ``load_checkpoint_with_safetensors``): no CPU kernel ("Unsupported op [Barrier] on CPU"), so
#: a multi-rank CPU run could not resume. msmon/runner/cpu_barrier.py swaps these names.
CPU_BARRIER_PATCHES: dict[str, tuple[Patch, ...]] = dict.fromkeys(("1.8.0", "1.9.0"), (
    Patch("mindformers.trainer.utils", "barrier", "barrier"),
    Patch("mindformers.utils.load_checkpoint_utils", "barrier", "barrier"),
))

#: Why the mcore models of 1.8-1.9 train on one CPU rank only (measured with the Qwen3 and the MoE quickstarts on two
#: msrun ranks, docs/run.md).
MCORE_CPU_RANKS = ("the mcore models (use_legacy false) of mindformers 1.8-1.9 cannot train on several CPU ranks (data"
                   " parallel resets parallel_config and the model refuses the world size; semi-auto: CPU invalid)")
#: ``model.model_config`` keys (TransformerConfig attributes of the same name) that the CPU attention
#: stand-in does not implement, each blocking when true: its attention is the plain causal BNSD one.
MCORE_CPU_UNSUPPORTED: dict[str, str] = {
    "multi_latent_attention": "multi-latent attention",
    "use_eod_attn_mask_compression": "the compressed end-of-document attention mask (TND layout)",
    "use_attn_mask_compression": "the compressed attention mask",
    "use_ring_attention": "ring attention",
    "window_size": "sliding-window attention",
    "use_alibi_mask": "ALiBi attention",
    "track_max_attention_logit": "max attention logit tracking",
    "experimental_attention_variant": "sparse attention variants",
}


@dataclass(frozen=True)
class LossParts:
    """Where mindformers keeps the separate losses of an mcore model and who reads them.

    ``MFTrainOneStepCell`` (``print_separate_loss``) adds each step's lm / MoE auxiliary / MTP / indexer
    loss into parameters of ``parameter_register``; ``MFLossMonitor`` reads and zeroes them at every step
    end through ``function`` (only for MoE or MTP models; otherwise nobody reads them and they just sum up).
    """

    module: str
    function: str
    names: tuple[str, ...]  # parameter_register names, in the order ``function`` returns them


LOSS_PARTS: dict[str, LossParts] = {
    "1.9.0": LossParts(
        "mindformers.core.callback.callback", "_get_separate_loss", ("lm_loss", "aux_loss", "mtp_loss", "indexer_loss")
    ),
}

#: mindformers version -> the function through which ``MFLossMonitor`` reads the train-step outputs at every step
#: end. With 7 outputs it also logs ``f" norm_size: {sizes}\nlocal_norm:\n{squares}"`` at INFO: the raw arrays at
#: every step, and formatting the Tensor costs 0.65 ms for 21 parameters, 6 ms for 400 (measured on CPU), whether or
#: not a log filter drops the line afterwards. msmon/engine/step_outputs.py hands it the first 5 outputs (all it
#: reads) when ``layer_grad_norm`` is tracked.
LOSS_OUTPUT_READER: dict[str, Patch] = {
    version: Patch("mindformers.core.callback.callback", "_get_loss_output", "_get_loss_output")
    for version in ("1.8.0", "1.9.0")
}

#: mindformers version -> where ``MFLossMonitor`` zeroes the MoE routers' per-expert token shares (``fi_accu`` of
#: ``gbs_aux_loss``) at every step end, for an mcore model (msmon/engine/routing.py reads them first).
ROUTING_SHARES: dict[str, Patch] = {
    "1.9.0": Patch("mindformers.core.callback.callback", "MFLossMonitor._reset_accu_gbs_fi", "_reset_accu_gbs_fi"),
}

@dataclass(frozen=True)
class MoeRules:
    """What the mcore training graph of a mindformers release refuses in a MoE model config, and where."""

    balancing_types: tuple[str, ...]  # TopKRouter.SUPPORTED_LOAD_BALANCING_TYPES
    default_balancing: str  # TransformerConfig's default
    default_top_k: int
    grouped: str  # the source line of each refusal
    balancing: str
    scaling: str


_MOE_SRC = "mindformers/parallel_core/training_graph/"
#: mindformers version -> its MoE rules (msmon/validate/moe.py), read from the 1.9.0 sources and each reproduced on
#: the MoE quickstart.
MOE_RULES: dict[str, MoeRules] = {
    "1.9.0": MoeRules(
        ("sub_seq_aux_loss", "seq_aux_loss", "gbs_aux_loss"), "sub_seq_aux_loss", 2,
        _MOE_SRC + "base_models/gpt/moe_module_specs.py:38", _MOE_SRC + "transformer/moe/router.py:139,201",
        _MOE_SRC + "transformer/moe/router.py:295",
    ),
}

#: parameter_register name -> the record key msmon writes it under.
LOSS_PART_KEYS: dict[str, str] = {
    "lm_loss": "loss_lm",
    "aux_loss": "loss_aux",
    "mtp_loss": "loss_mtp",
    "indexer_loss": "loss_indexer",
}


_MONITOR_KEYS_18 = frozenset(
    {
        "monitor_on", "dump_path", "target", "invert", "step_interval", "local_loss_format", "local_norm_format",
        "device_local_norm_format", "device_local_loss_format", "optimizer_state_format", "weight_state_format",
        "max_attention_logit_format", "throughput_baseline", "print_struct", "check_for_global_norm",
        "global_norm_spike_threshold", "global_norm_spike_count_threshold", "stable_rank_config",
    }
)
#: mindformers' own ``monitor_config`` keys per release (the ``MonitorConfig`` template of
#: mindformers/tools/register/template.py): mindformers raises ``KeyError`` on any other key there (msmon's keys
#: are removed from the mindformers.yaml the training loads).
MONITOR_CONFIG_KEYS: dict[str, frozenset[str]] = {
    "1.8.0": _MONITOR_KEYS_18,
    "1.9.0": _MONITOR_KEYS_18 | {"health_checkpoint"},  # 1.9 moves the global-norm spike threshold in here
}
#: The keys that choose where ``TrainingStateMonitor`` writes a metric: 'tensorboard', 'log' or a list of them
#: (any other value raises ``ValueError``); 'tensorboard' without a TensorBoard writer becomes 'log'.
MONITOR_FORMAT_KEYS: tuple[str, ...] = (
    "local_loss_format", "local_norm_format", "device_local_norm_format", "device_local_loss_format",
    "optimizer_state_format", "weight_state_format", "max_attention_logit_format",
)
MONITOR_FORMATS = frozenset({"tensorboard", "log"})
#: mindformers' monitoring keys that live outside ``monitor_config``, and where they belong.
MONITORING_KEYS_ELSEWHERE: dict[str, str] = {
    "check_for_nan_in_loss_and_grad": "check_for_nan_in_loss_and_grad (top level of the config)",
    "use_skip_data_by_global_norm": "use_skip_data_by_global_norm (top level of the config)",
    "tensorboard_dir": "tensorboard.tensorboard_dir",
    "tensorboard_queue_size": "tensorboard.tensorboard_queue_size",
    "log_loss_scale_to_tensorboard": "tensorboard.log_loss_scale_to_tensorboard",
    "log_timers_to_tensorboard": "tensorboard.log_timers_to_tensorboard",
}


def monitor_config_keys(version: str | None) -> tuple[frozenset[str], str]:
    """mindformers' ``monitor_config`` keys for an installed ``version`` and the release they were read from: that
    release, else the newest known one not newer than it (the oldest for an older version, the newest when no
    version is given)."""
    known_releases = sorted(MONITOR_CONFIG_KEYS, key=release)
    if version in MONITOR_CONFIG_KEYS:
        return MONITOR_CONFIG_KEYS[version], version
    older = [r for r in known_releases if not version or release(r) <= release(version)]
    chosen = older[-1] if older else known_releases[0]
    return MONITOR_CONFIG_KEYS[chosen], chosen


def global_norm_spike_threshold(config: Mapping[str, ConfigValue] | None) -> float | None:
    """The global-norm spike threshold a training config sets, where mindformers 1.8-1.9 read it:
    ``monitor_config.health_checkpoint.global_norm_spike_threshold`` (1.9) over
    ``monitor_config.global_norm_spike_threshold``; None when neither is a number."""
    section = (config or {}).get("monitor_config")
    section = section if isinstance(section, Mapping) else {}
    health = section.get("health_checkpoint")
    for value in ((health or {}).get("global_norm_spike_threshold") if isinstance(health, Mapping) else None,
                  section.get("global_norm_spike_threshold")):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


#: The first mindformers release whose Trainer reads a top-level ``checkpoint:`` section (1.9.0:
#: ``trainer/utils.py`` ``convert_checkpoint_config``, called from ``Trainer._migrate_checkpoint_config`` for every
#: config; 1.8.0 reads no ``config.checkpoint`` and ignores the section). Where it is read:
#:
#: - without the section, every legacy checkpoint key (``CHECKPOINT_SECTION_KEYS``), at its default too, logs "The
#:   config X is deprecated. Please use config Y in `checkpoint_config` instead.";
#: - a non-empty section sets ``use_legacy_format`` False: ``CheckpointMonitor`` then saves
#:   ``<save_path>/iteration_<step:08d>/`` (``<prefix>-model-<rank:07d>-<ranks:07d>.safetensors``, ``-opt-`` beside it,
#:   ``common.json`` with the step last, ``metadata.json`` with several ranks) and ``latest_checkpointed_iteration.txt``
#:   (``save_path: ''`` is ``<output_dir>/checkpoint``), and its values win over the ``CheckpointMonitor`` entry's own
#:   (``BaseTrainer`` passes them as the callback's arguments); a resume is ``checkpoint.load_path: <iteration dir>``
#:   with ``checkpoint.no_load_optim: False``;
#: - but several ranks in data parallel mode cannot save that layout: its first save fails ("`get_strategy_metadata`
#:   returns `None`, which indicates there is no strategy info", measured with the quickstart on two CPU ranks, 1.9.0),
#:   so msmon hands mindformers no ``checkpoint:`` section there (the ``CheckpointMonitor``'s keys apply).
CHECKPOINT_SECTION_SINCE = (1, 9)
#: The ``load_ckpt_format`` of the iteration layout (1.9.0 saves it in safetensors only; with ``ckpt`` the Trainer's
#: ``preload_ckpt`` refuses its directory).
ITERATION_FORMAT = "safetensors"
#: A ``load_checkpoint`` ending so names one checkpoint file of the rank layout: 1.9.0's iteration loader takes only
#: directories (``verify_ckpt_valid``), so such a config trains in the legacy format.
LEGACY_CHECKPOINT_SUFFIXES = (".ckpt", ".safetensors")
#: ``parallel.parallel_mode`` values of data parallel (``ParallelMode.DATA_PARALLEL``), as mindformers reads them.
DATA_PARALLEL_MODES = (0, "data_parallel")
#: A legacy checkpoint key (top level, or the ``CheckpointMonitor`` entry's) -> its name in the ``checkpoint:``
#: section, as 1.9.0's ``convert_checkpoint_config`` pairs them (``no_*``: the legacy value negated).
CHECKPOINT_SECTION_KEYS: dict[str, str] = {
    "load_checkpoint": "load_path", "balanced_load": "load_balanced", "resume_training": "no_load_optim",
    "reshard_worker_num": "reshard_worker_num", "keep_checkpoint_max": "save_max",
    "save_checkpoint_steps": "save_interleaved_steps", "save_optimizer": "no_save_optim",
    "remove_redundancy": "save_remove_redundancy", "async_save": "async_save", "directory": "save_path",
    "prefix": "prefix",
}


def checkpoint_section(config: Mapping[str, ConfigValue] | None,
                       version: str | None) -> Mapping[str, ConfigValue] | None:
    """The ``checkpoint:`` section mindformers ``version`` reads from ``config`` (None: the config has none, or the
    release reads none, ``CHECKPOINT_SECTION_SINCE``; ``version`` None: read as the newest known release). When it
    is not None, the release saves and resumes in the iteration layout, and the section says how often and how many;
    None too for several ranks in data parallel mode, which cannot save that layout, and for a ``load_checkpoint``
    naming one checkpoint file, which only the legacy loader reads (msmon drops the section there:
    msmon.config.mindformers_yaml)."""
    if version is not None and release(version) < CHECKPOINT_SECTION_SINCE:
        return None
    config = config or {}
    if config.get("use_parallel") is True and dotted_get(config, "parallel.parallel_mode") in DATA_PARALLEL_MODES:
        return None
    if str(config.get("load_checkpoint") or "").endswith(LEGACY_CHECKPOINT_SUFFIXES):
        return None
    section = config.get("checkpoint")
    return section if isinstance(section, Mapping) and section else None


def use_legacy(config: Mapping[str, ConfigValue]) -> bool:
    """Whether mindformers builds a legacy model for ``config``, read as mindformers 1.8-1.9 read it.

    ``is_legacy_model()`` takes ``context.use_legacy`` when the key is there (even null) over the top-level
    ``use_legacy``; null or absent means True; any other value is the raw YAML value tested with Python
    truthiness: ``0`` and ``""`` mean the mcore models, the strings ``"false"`` / ``"False"`` the legacy ones.
    """
    context = config.get("context")
    source = context if isinstance(context, Mapping) and "use_legacy" in context else config
    value = source.get("use_legacy")
    return True if value is None else bool(value)


def known(table: Mapping[str, T], version: str | None, what: str) -> T:
    """The entry of ``table`` for an installed mindformers ``version``; a clear error for any other."""
    if version is not None and version in table:
        return table[version]
    known_versions = ", ".join(sorted(table))
    raise MsmonError(
        f"{what} was written for mindformers {known_versions}; the installed version is {version or 'unknown'}",
        f"install mindformers=={max(table)} or run this config on an Ascend device",
        ExitCode.TRAINING_FAILED,
    )


@dataclass(frozen=True)
class PipelineLayout:
    """Which global ranks hold the loss of a pipeline-parallel run, as mindformers 1.8-1.9 lays the stages out.

    ``mindformers.tools.utils.is_last_pipeline_stage``: a rank is in stage ``rank // (world_size // stages)``, so
    stage s holds ranks ``s * per_stage .. (s + 1) * per_stage - 1``; the loss the train step returns is valid on
    the last stage only (``MFLossMonitor``: "the loss on the last card is valid"), or, with the ``zero_bubble_v``
    scheduler, whose V puts the last model chunk on the first stage's devices, on rank 0's stage.
    """

    world_size: int
    stages: int = 1
    zero_bubble_v: bool = False

    @property
    def per_stage(self) -> int:
        return self.world_size // self.stages

    @property
    def valid(self) -> bool:
        """Whether the stages split the ranks evenly (mindformers' ``get_pipeline_rank_ids`` gives [-1] if not)."""
        return self.stages >= 1 and self.world_size >= self.stages and self.world_size % self.stages == 0

    def stage_of(self, rank: int) -> int:
        return rank // self.per_stage if self.valid else 0

    @property
    def loss_ranks(self) -> range:
        """The ranks whose train-step loss is the model's loss (every rank without pipeline stages)."""
        if not self.valid or self.stages == 1:
            return range(self.world_size)
        stage = 0 if self.zero_bubble_v else self.stages - 1
        return range(stage * self.per_stage, (stage + 1) * self.per_stage)

    @property
    def loss_rank(self) -> int:
        """The rank whose records msmon writes: the first rank of the stage holding the loss."""
        return self.loss_ranks[0] if self.world_size else 0

    def describe(self) -> str:
        """One line for ``msmon run --dry-run`` and ``msmon validate``."""
        if self.stages <= 1:
            return "rank 0 (no pipeline stages)"
        if not self.valid:
            return f"rank 0 ({self.stages} pipeline stages do not divide {self.world_size} ranks)"
        ranks = self.loss_ranks
        where = ("the first stage (zero_bubble_v keeps the loss on rank 0's stage)" if self.zero_bubble_v
                 else f"the last of {self.stages} pipeline stages")
        return (f"rank {self.loss_rank}: the first rank of {where}, ranks {ranks[0]}-{ranks[-1]} of {self.world_size}; "
                "the other stages hold no loss")


def pipeline_layout(config: Mapping[str, ConfigValue], world_size: int) -> PipelineLayout:
    """The pipeline layout of a training config on ``world_size`` ranks, read as mindformers 1.9 reads it: stages
    from ``parallel_config.pipeline_stage`` when ``use_parallel`` is true (``ParallelOperator._set_pipeline_stage``),
    the scheduler from ``parallel.pipeline_config.pipeline_scheduler``."""
    stages = dotted_get(config, "parallel_config.pipeline_stage") if config.get("use_parallel") is True else 1
    stages = stages if isinstance(stages, int) and not isinstance(stages, bool) and stages > 1 else 1
    scheduler = dotted_get(config, "parallel.pipeline_config.pipeline_scheduler")
    return PipelineLayout(max(1, world_size), stages, stages > 1 and scheduler == "zero_bubble_v")


@dataclass(frozen=True)
class LossFix:
    """``MFLossMonitor``'s correction of the raw loss of a parallel run (``_fix_loss_for_parallel``): it divides by
    the micro-batch count under pipeline stages, by ``micro_batch_interleave_num``, and by
    ``gradient_accumulation_steps`` unless ``calculate_per_token_loss``; it reads the pipeline stages from the
    auto-parallel context. ``attributes``: the monitor's attributes the method reads -> the training config key
    the Trainer fills each from (``BaseTrainer`` building the callbacks)."""

    module: str
    monitor: str
    method: str
    attributes: dict[str, str]
    #: parallel modes where the Trainer keeps gradient_accumulation_steps (elsewhere, and under pipeline stages,
    #: it resets them to 1: ``BaseTrainer._check_grad_accumulation_steps``)
    accumulation_modes: tuple[str, ...] = ("semi_auto_parallel", "auto_parallel")


_MF_LOSS_FIX = LossFix(
    "mindformers.core.callback.callback", "MFLossMonitor", "_fix_loss_for_parallel",
    {"mirco_size": "parallel_config.micro_batch_num", "micro_batch_interleave_num": "micro_batch_interleave_num",
     "gradient_accumulation_steps": "runner_config.gradient_accumulation_steps",
     "calculate_per_token_loss": "calculate_per_token_loss"},
)
#: 1.8.0 and 1.9.0: the same method, the same attributes, filled by BaseTrainer from the same keys (diffed).
LOSS_FIX: dict[str, LossFix] = {"1.8.0": _MF_LOSS_FIX, "1.9.0": _MF_LOSS_FIX}
