"""CPU pitfalls measured on this kind of machine (docs/config.md, MS6xx): only when device_target is CPU."""

from __future__ import annotations

from msmon.config.metrics import MF_WRAPPERS
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext

DTYPE_KEYS = ("compute_dtype", "param_init_type", "softmax_compute_type", "rotary_dtype", "layernorm_compute_type")
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
    if ctx.get(f"{model_key}.use_flash_attention") is True:
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
    if ctx.get("use_legacy") is False:
        findings.append(
            error(
                "MS608",
                "use_legacy",
                "the mcore models (use_legacy: False) do not run on CPU (fused RmsNorm, Outer, hyper_parallel)",
                "use a legacy model (use_legacy: True) such as LlamaForCausalLM for CPU runs",
            )
        )
    return findings


def _check_dump(ctx: CheckContext) -> list[Finding]:
    if ctx.get("monitor_config.monitor_on") is not True:
        return []
    formats = [key for key in DUMP_FORMATS if ctx.get(f"monitor_config.{key}")]
    if not formats and ctx.get("monitor_config.dump_path", "./dump") is None:
        return []
    reason = f"{', '.join(formats)} need" if formats else "dump_path (default ./dump) inserts"
    return [
        error(
            "MS605",
            "monitor_config.monitor_on",
            f"monitor_on with {reason} a TensorDump op, which has no CPU kernel",
            "set monitor_config.monitor_on: False on CPU (or drop the *_local_* formats and set dump_path: null)",
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
