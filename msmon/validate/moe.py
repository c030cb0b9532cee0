"""The MoE keys of an mcore model (``use_legacy`` false, ``model.model_config.num_experts`` set): what mindformers'
training graph refuses when it builds the network (MS028) and expert parallelism against the layout (MS029).

Each rule names the mindformers source it comes from (the release in ``msmon.compat.MOE_RULES``): a config that
breaks one stops after the imports, the data and the model config, long after ``msmon validate`` could have said so.
"""

from __future__ import annotations

from msmon.compat import MOE_RULES, known, package_version, use_legacy
from msmon.config.metrics import MOE_EXPERT_KEYS, TOP_K_KEYS
from msmon.errors import MsmonError
from msmon.findings import Finding, error
from msmon.foreign import ConfigValue
from msmon.validate.context import CheckContext

MODEL = "model.model_config"
SCALING_KEYS = ("routed_scaling_factor", "moe_router_topk_scaling_factor")
GROUPED_KEYS = ("moe_grouped_gemm", "use_gmm")
BALANCING_KEY = "moe_router_load_balancing_type"


def _first(ctx: CheckContext, keys: tuple[str, ...]) -> tuple[str, ConfigValue]:
    """(the dotted path of the first of ``keys`` the model config sets, its value), else (the first key's, None)."""
    for key in keys:
        if ctx.has(f"{MODEL}.{key}"):
            return f"{MODEL}.{key}", ctx.get(f"{MODEL}.{key}")
    return f"{MODEL}.{keys[0]}", None


def _int(value: ConfigValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_moe(ctx: CheckContext) -> list[Finding]:
    """MS028 and MS029 for an mcore MoE model on a mindformers release msmon knows (nothing else)."""
    experts_path, experts = _first(ctx, MOE_EXPERT_KEYS)
    if use_legacy(ctx.training) or not experts:
        return []
    try:
        rules = known(MOE_RULES, package_version("mindformers"), "msmon's MoE checks")
    except MsmonError:
        return []
    findings = _graph_rules(ctx, rules, experts_path, _int(experts))
    if _int(experts):
        findings += _expert_parallel(ctx, int(experts), experts_path)
    return findings


def _graph_rules(ctx: CheckContext, rules: ConfigValue, experts_path: str, experts: int | None) -> list[Finding]:
    findings: list[Finding] = []
    path, grouped = _first(ctx, GROUPED_KEYS)
    if grouped is not True:
        written = "unset (mindformers' default False)" if grouped is None else repr(grouped)
        findings.append(error("MS028", path, f"moe_grouped_gemm is {written}: mindformers' training graph builds "
                              "experts only as grouped GEMM "
                              f"and stops with \"moe_grouped_gemm = 'False' is not supported now\" ({rules.grouped})",
                              f"set {MODEL}.moe_grouped_gemm: True"))
    balancing = ctx.get(f"{MODEL}.{BALANCING_KEY}", rules.default_balancing)
    if balancing not in rules.balancing_types:
        findings.append(error("MS028", f"{MODEL}.{BALANCING_KEY}", f"{BALANCING_KEY} {balancing!r} is not one the "
                              f"router accepts: {', '.join(rules.balancing_types)} ({rules.balancing})",
                              f"use one of {', '.join(rules.balancing_types)} (gbs_aux_loss: the shipped Qwen3-MoE)"))
    path, top_k = _first(ctx, TOP_K_KEYS)
    top_k = rules.default_top_k if top_k is None else top_k
    if _int(top_k) is not None and experts is not None and not 1 <= top_k <= experts:
        findings.append(error("MS028", path, f"top-k routing chooses {top_k} of {experts} experts ({experts_path}): "
                              "it must be between 1 and the number of experts", f"set {path} to at most {experts}"))
    path, scaling = _first(ctx, SCALING_KEYS)
    if scaling is None:
        findings.append(error("MS028", path, "no routed_scaling_factor: the router multiplies the top-k "
                              "probabilities by it unconditionally and stops with 'TypeError: Failed calling Mul "
                              f"with \"input=None\"' ({rules.scaling})",
                              f"set {MODEL}.routed_scaling_factor (1.0 leaves the probabilities as they are; the "
                              "shipped Qwen3-MoE config sets 1.5)"))
    return findings


def _expert_parallel(ctx: CheckContext, experts: int, experts_path: str) -> list[Finding]:
    ep = _int(ctx.get("parallel_config.expert_parallel", 1)) or 1
    findings: list[Finding] = []
    if experts % ep:
        findings.append(error("MS029", "parallel_config.expert_parallel", f"expert_parallel {ep} does not divide the "
                              f"{experts} experts ({experts_path}): each expert-parallel rank holds the same number",
                              "set parallel_config.expert_parallel to a divisor of the number of experts"))
    semi_auto = ctx.get("parallel.parallel_mode") in (1, "semi_auto_parallel")
    dp = _int(ctx.get("parallel_config.data_parallel", 1)) or 1
    mp = _int(ctx.get("parallel_config.model_parallel", 1)) or 1
    if semi_auto and (dp * mp) % ep:
        findings.append(error("MS029", "parallel_config.expert_parallel", f"expert_parallel {ep} does not divide "
                              f"data_parallel x model_parallel = {dp} x {mp}: the experts are laid out over those "
                              "ranks (FFNGroupedGEMM.shard raises)",
                              "make data_parallel x model_parallel a multiple of expert_parallel"))
    return findings
