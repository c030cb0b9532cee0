"""CPU pitfalls measured on this kind of machine (docs/config.md, MS6xx): only when device_target is CPU."""

from __future__ import annotations

from msmon.compat import MCORE_CPU_PATCHES, MCORE_CPU_UNSUPPORTED, TEMPLATE_DUMP_PATH, package_version, use_legacy
from msmon.config.metrics import MF_WRAPPERS
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext

DTYPE_KEYS = ("compute_dtype", "param_init_type", "softmax_compute_type", "rotary_dtype", "layernorm_compute_type",
              "params_dtype", "softmax_compute_dtype", "layernorm_compute_dtype")  # legacy, then mcore spellings
DUMP_FORMATS = ("local_norm_format", "local_loss_format", "device_local_norm_format", "device_local_loss_format")
CPU_WRAPPER = "MsmonCPUTrainOneStepCell"


def _model_config_key(ctx: CheckContext) -> str:
    return "model.model_config" if ctx.has("model.model_config") else "model"


def check_cpu(ctx: CheckContext) -> list[Finding]:
    if ctx.device_target.upper() != "CPU":
        return []
    findings: list[Finding] = []
    if ctx.get("runner_config.sink_mode", True) is not False:
        findings.append(
            error(
                "MS601",
                "runner_config.sink_mode",
                "sink_mode is true (the template default): on CPU MindSpore silently disables sinking while "
                "mindformers multiplies the epochs by the sink count, so 20 steps become 400",
                "set runner_config.sink_mode: False",
            )
        )
    model_key = _model_config_key(ctx)
    fused = ctx.get(f"{model_key}.fused_rms_norm")
    if fused is True or (fused is None and "llama" in str(ctx.get(f"{model_key}.type", "")).lower()):
        findings.append(
            error(
                "MS602",
                f"{model_key}.fused_rms_norm",
                "fused RMS norm has no CPU kernel" + (" (LlamaConfig defaults it to True)" if fused is None else ""),
                f"set {model_key}.fused_rms_norm: False",
            )
        )
    legacy = use_legacy(ctx.training)
    if legacy and ctx.get(f"{model_key}.use_flash_attention") is True:  # mcore: msmon's stand-in replaces it
        findings.append(
            error(
                "MS603",
                f"{model_key}.use_flash_attention",
                "flash attention has no CPU kernel",
                f"set {model_key}.use_flash_attention: False",
            )
        )
    for key in DTYPE_KEYS:
        if str(ctx.get(f"{model_key}.{key}", "")).lower() == "bfloat16":
            findings.append(
                error(
                    "MS604",
                    f"{model_key}.{key}",
                    "bfloat16 fails on CPU (no CPU Reshape kernel)",
                    f"set {model_key}.{key}: float32 (float16 also runs)",
                )
            )
    findings.extend(_check_dump(ctx))
    findings.extend(_check_wrapper(ctx))
    if ctx.get("context.mode") == 1:
        findings.append(
            warning(
                "MS607",
                "context.mode",
                "PyNative mode on CPU is 20-50x slower than graph mode",
                "set context.mode: 0",
            )
        )
    if not legacy:
        findings.extend(_check_mcore(ctx, model_key))
    return findings


def _check_mcore(ctx: CheckContext, model_key: str) -> list[Finding]:
    """An mcore model on CPU: none when msmon's CPU support applies (msmon/runner/mcore_cpu.py), else the
    blockers in one finding."""
    blockers = []
    version = package_version("mindformers")
    if version is not None and version not in MCORE_CPU_PATCHES:
        blockers.append(
            f"msmon's CPU stand-ins for FlashAttentionScore, RmsNorm, Outer and EmbeddingDenseBackward (no CPU "
            f"kernels) know mindformers {', '.join(sorted(MCORE_CPU_PATCHES))}, not the installed {version}"
        )
    if ctx.get("context.mode") == 1:
        blockers.append("PyNative mode (context.mode: 1) needs mindformers' unpublished hyper_parallel package")
    blockers.extend(
        f"{what} ({model_key}.{key})" for key, what in MCORE_CPU_UNSUPPORTED.items() if ctx.get(f"{model_key}.{key}")
    )
    if not blockers:
        return []
    path = "context.use_legacy" if ctx.has("context.use_legacy") else "use_legacy"
    return [
        error(
            "MS608",
            path,
            "this mcore model (use_legacy false) cannot train on CPU: " + "; ".join(blockers),
            "remove what is listed, or use a legacy model (use_legacy: True) such as LlamaForCausalLM on CPU",
        )
    ]


def _check_dump(ctx: CheckContext) -> list[Finding]:
    if ctx.get("monitor_config.monitor_on") is not True:
        return []
    formats = [key for key in DUMP_FORMATS if ctx.get(f"monitor_config.{key}")]
    dump_path = ctx.get("monitor_config.dump_path") if ctx.has("monitor_config.dump_path") else TEMPLATE_DUMP_PATH
    if not formats and not dump_path:  # null: MS008; "": no dumps
        return []
    reason = f"{', '.join(formats)} need" if formats else "a dump_path inserts"
    return [
        error(
            "MS605",
            "monitor_config.monitor_on",
            f"monitor_on with {reason} a TensorDump op, which has no CPU kernel",
            "set monitor_config.monitor_on: False on CPU (or drop the monitor_config.*_local_*_format keys and set "
            "monitor_config.dump_path: '')",
        )
    ]


def _check_wrapper(ctx: CheckContext) -> list[Finding]:
    wrapper_type = ctx.get("runner_wrapper.type", "MFTrainOneStepCell")
    if wrapper_type not in MF_WRAPPERS or wrapper_type == CPU_WRAPPER:
        return []
    return [
        error(
            "MS606",
            "runner_wrapper.type",
            f"{wrapper_type} fails on CPU with 'Unsupported op [NPUGetFloatStatusV2]' (its overflow check assumes "
            "an Ascend device)" + ("; it is mindformers' default when runner_wrapper is absent" if not ctx.has(
                "runner_wrapper.type") else ""),
            f"set runner_wrapper.type: {CPU_WRAPPER} (msmon's CPU support registers it; same outputs)",
        )
    ]
