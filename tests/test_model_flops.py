"""Model FLOPs and TFLOPS: msmon's figures are the ones mindformers prints (its own count, both model paths, the
canonical completed runs); the formula msmon uses without mindformers' count equals mindformers' mcore formula and
agrees with the legacy graph's count within the factor docs/backends.md gives; MFU against a peak."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from helpers_training import QUICKSTARTS, mindformers_step_lines
from omegaconf import OmegaConf

from msmon.compat.devices import peak_tflops
from msmon.config.loader import QUICKSTARTS_DIR
from msmon.engine.step_costs import ModelFlops, Throughput, llama_ffn, model_flops, transformer_flops

FULL_FLOPS = re.compile(r"Full model flops (?:is|calculated:) (\d+)")


def quickstart_model(model: str) -> dict:
    config = OmegaConf.to_container(OmegaConf.load(QUICKSTARTS[model]))
    assert isinstance(config, dict)
    return config


def test_the_formula_equals_mindformers_mcore_count_for_the_qwen3_quickstart() -> None:
    from mindformers.models.utils import num_floating_point_operations

    model = quickstart_model("mcore")["model"]["model_config"]
    args = SimpleNamespace(
        group_query_attention=True, num_attention_heads=4, num_query_groups=2, num_experts=None, num_layers=2,
        mtp_num_layers=None, moe_ffn_hidden_size=None, ffn_hidden_size=256, moe_latent_size=None,
        moe_shared_expert_intermediate_size=None, swiglu=True, multi_latent_attention=False, kv_channels=16,
        attention_output_gate=False, hidden_size=64, seq_length=64, padded_vocab_size=1000, hybrid_layer_pattern=None,
        experimental_attention_variant=None, linear_attention_freq=None)
    try:
        theirs = num_floating_point_operations(args, 2)
    except AttributeError as exc:  # a mindformers whose formula reads another argument
        pytest.skip(f"mindformers' formula needs {exc}")
    assert transformer_flops(model, samples=2, seq=64) == theirs == 149_815_296


def mindformers_mcore_flops(model: dict, samples: int, seq: int, **moe: object) -> float:
    """mindformers 1.9's own count (``num_floating_point_operations``) for a Qwen3-like ``model`` config."""
    from mindformers.models.utils import num_floating_point_operations

    args = SimpleNamespace(
        group_query_attention=True, num_attention_heads=model["num_attention_heads"],
        num_query_groups=model["num_key_value_heads"], num_layers=model["num_hidden_layers"], mtp_num_layers=None,
        ffn_hidden_size=model["intermediate_size"], moe_latent_size=None, swiglu=True, multi_latent_attention=False,
        kv_channels=model["head_dim"], attention_output_gate=False, hidden_size=model["hidden_size"],
        seq_length=seq, padded_vocab_size=model["vocab_size"], hybrid_layer_pattern=None,
        experimental_attention_variant=None, linear_attention_freq=None, num_experts=model.get("num_experts"),
        moe_router_topk=model.get("num_experts_per_tok"), moe_ffn_hidden_size=model.get("moe_intermediate_size"),
        moe_shared_expert_intermediate_size=None, moe_layer_freq=1)
    for key, value in moe.items():
        setattr(args, key, value)
    return float(num_floating_point_operations(args, samples))


def test_moe_flops_count_the_active_experts_as_mindformers_does() -> None:
    """Routed top-k plus shared experts, the dense layers apart: the MoE quickstart's figure is mindformers' printed
    count (112,066,560, tests/test_quickstart_moe.py), and so are a shared expert and DeepSeek's dense first layer."""
    config = OmegaConf.to_container(OmegaConf.load(QUICKSTARTS_DIR / "quickstart-moe.yaml"))
    assert isinstance(config, dict)
    model = config["model"]["model_config"]
    assert transformer_flops(model, 2, 64) == mindformers_mcore_flops(model, 2, 64) == 112_066_560
    shared = {**model, "n_shared_experts": 2}
    assert transformer_flops(shared, 2, 64) == mindformers_mcore_flops(
        model, 2, 64, moe_shared_expert_intermediate_size=128)
    sized = {**model, "moe_shared_expert_intermediate_size": 96, "first_k_dense_replace": 1, "num_hidden_layers": 3}
    assert transformer_flops(sized, 2, 64) == mindformers_mcore_flops(
        {**model, "num_hidden_layers": 3}, 2, 64, moe_shared_expert_intermediate_size=96, moe_layer_freq=[0, 1, 1])
    every_other = {**model, "num_hidden_layers": 4, "moe_layer_freq": 2}
    assert transformer_flops(every_other, 2, 64) == mindformers_mcore_flops(
        {**model, "num_hidden_layers": 4}, 2, 64, moe_layer_freq=2)
    dense = {key: value for key, value in model.items() if key != "num_experts"}
    assert transformer_flops(model, 2, 64) < transformer_flops(dense, 2, 64)  # 2 of 4 experts of 64 < one MLP of 256


def test_a_subclass_in_mfloss_monitors_place_gives_mindformers_count() -> None:
    class MFLossMonitor:
        mf_calculated, full_model_flops, device_num = True, 8.0e12, 8

    class DumpRouting(MFLossMonitor):  # tests/moe_callbacks.py: registered under MFLossMonitor's name
        pass

    mcore = {"use_legacy": False, "model": {"model_config": {}}}
    assert model_flops([DumpRouting()], mcore, 2, 64, 8) == ModelFlops(1.0e12, "mindformers")


def test_the_legacy_mlp_width_follows_llama_and_moe_counts_the_routed_experts_only() -> None:
    assert llama_ffn(64, {"multiple_of": 32}) == 192
    assert llama_ffn(4096, {"multiple_of": 256, "ffn_dim_multiplier": 1.3}) == 14336  # LLaMA-2 70B-like rounding
    dense = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 1000, "intermediate_size": 256}
    moe = {**dense, "num_experts": 64, "moe_router_topk": 2, "moe_ffn_hidden_size": 128}
    flops_dense, flops_moe = transformer_flops(dense, 2, 64), transformer_flops(moe, 2, 64)
    assert flops_dense is not None and flops_moe == flops_dense  # 2 experts of 128 = one MLP of 256: same FLOPs
    assert transformer_flops({"hidden_size": 64}, 2, 64) is None  # sizes missing: no figure


def test_mindformers_count_wins_and_mcore_is_divided_by_its_devices() -> None:
    class MFLossMonitor:
        mf_calculated, full_model_flops, device_num = True, 8.0e12, 8

    mcore = {"use_legacy": False, "model": {"model_config": {}}}
    assert model_flops([MFLossMonitor()], mcore, 2, 64, 8) == ModelFlops(1.0e12, "mindformers")
    assert model_flops([MFLossMonitor()], {"use_legacy": True}, 2, 64, 8) == ModelFlops(8.0e12, "mindformers")
    MFLossMonitor.mf_calculated = False  # it could not count (pynative, a GroupMatMul MoE): the formula
    legacy = quickstart_model("legacy")
    assert model_flops([MFLossMonitor()], legacy, 2, 64, 1) == ModelFlops(137_232_384.0, "config")


def test_tflops_use_the_logging_steps_own_time_and_mfu_the_peak() -> None:
    class Element:
        shape, dtype = (2, 65), "Int32"

    speed = Throughput(quickstart_model("legacy"), 64, 1, peak=0.5)
    record: dict = {}
    speed.add(record, {"train_dataset_element": [Element()], "list_callback": []}, 0.05, 0.02)
    assert record["model_flops"] == 137_232_384.0
    assert record["tflops_per_device"] == pytest.approx(137_232_384.0 / 0.02 / 1e12)
    assert record["mfu"] == pytest.approx(record["tflops_per_device"] / 0.5)
    assert record["throughput"] == pytest.approx(128 / 0.05)
    assert peak_tflops("ascend 910") == 256.0 and peak_tflops("CPU") is None and peak_tflops(None) is None


def test_the_peak_follows_the_device_and_the_runs_compute_dtype() -> None:
    """Huawei's figures by chip or tier: BF16 for a bfloat16 run, FP16 otherwise; the Ascend 910 has FP16 only; an
    unlisted chip (the 910B1, an A3 chip name) has no peak, so no MFU."""
    assert peak_tflops("Ascend910B3", "bfloat16") == 294.9 and peak_tflops("Ascend910B3", "float16") == 313.0
    assert peak_tflops("Ascend910B2", None) == 376.0 and peak_tflops("ascend910b4", "bfloat16") == 245.8
    assert peak_tflops("A3-752T", "bfloat16") == 353.9 and peak_tflops("a3-560t", "float16") == 280.0
    assert peak_tflops("Ascend910", "bfloat16") == 256.0
    assert peak_tflops("Ascend910B1", "bfloat16") is None and peak_tflops("Ascend910_9391") is None

    class Element:
        shape, dtype = (2, 65), "Int32"

    for dtype, peak in (("bfloat16", 294.9), ("float16", 313.0)):
        config = quickstart_model("legacy")
        config["model"]["model_config"]["compute_dtype"] = dtype
        record: dict = {}
        Throughput(config, 64, 1, device="Ascend910B3").add(
            record, {"train_dataset_element": [Element()], "list_callback": []}, 0.05, 0.02)
        assert record["mfu"] == pytest.approx(record["tflops_per_device"] / peak)


@pytest.mark.parametrize("name", ["completed_legacy", "completed_mcore"])
def test_msmon_tflops_are_the_figures_mindformers_prints(canonical, name: str) -> None:
    """The run's MFLossMonitor counted the FLOPs (legacy: the compiled graph; mcore: the formula): msmon's
    model_flops is that count at every log, and its TFLOPS per device, over the train step's own time, the figure
    mindformers prints for that step to the print's 3 decimals."""
    run = canonical(name)
    text = (run.run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace")
    found = FULL_FLOPS.search(text)
    assert found is not None, "mindformers logged no FLOPs count"
    printed = mindformers_step_lines(run.run_dir)
    rows = run.records()
    assert len(rows) == run.steps // run.log_interval
    gaps = []
    for row in rows:
        assert row["model_flops"] == int(found.group(1))
        gaps.append(round(row["tflops_per_device"], 3) - printed[row["step"]]["tflops_per_device"])
    print(f"measured: {name} msmon - printed TFLOPS, rounded as printed: {sorted(gaps)}")
    assert max(abs(gap) for gap in gaps) <= 0.0011  # the printed last digit, and one more where a clock tick differs
    assert sum(gap == 0 for gap in gaps) >= len(gaps) * 0.7
    assert "mfu" not in rows[-1]  # CPU: no peak, no MFU


def test_the_formula_is_within_the_documented_factor_of_the_legacy_graph_count(canonical) -> None:
    run = canonical("completed_legacy")
    text = (run.run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace")
    found = FULL_FLOPS.search(text)
    assert found is not None
    formula = transformer_flops(quickstart_model("legacy")["model"]["model_config"], 2, 64)
    assert formula is not None
    ratio = formula / int(found.group(1))
    print(f"measured: formula / graph count = {ratio:.4f}")
    assert ratio == pytest.approx(0.956, abs=0.005)  # docs/backends.md


def test_the_ending_gives_the_median_tflops_and_mfu(tmp_path) -> None:
    import json

    from msmon.view.ending import speed_lines
    from msmon.view.series import load_run

    rows = [{"step": s, "time": 1.0 + s, "tflops_per_device": t, "mfu": t / 300.0}
            for s, t in ((10, 100.0), (20, 112.0), (30, 120.0))]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    info = {"status": "completed", "device_count": 8, "device_target": "Ascend"}
    (tmp_path / "run.json").write_text(json.dumps(info))
    assert speed_lines(load_run(tmp_path)) == ["  speed: 112 TFLOPS per device, MFU 37% on 8 x Ascend (median of the "
                                               "logged steps)"]
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 10, "time": 1.0, "loss": 2.0}) + "\n")
    assert speed_lines(load_run(tmp_path)) == []
