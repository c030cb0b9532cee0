"""The mcore path's logic without training: use_legacy as mindformers reads it, MS608, where the CPU stand-ins
apply, the train-step layouts and the separate losses."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_support import settings
from helpers_training import QUICKSTART_QWEN3, QUICKSTARTS_DIR, shipped_mindformers_yaml
from test_engine_unit import Params, Stop

from msmon import compat
from msmon.config.loader import load_config
from msmon.engine.callback import StepObserver
from msmon.engine.record import StepProgress
from msmon.engine.step_outputs import install_loss_parts, publish_loss_parts, split_outputs, take_loss_parts
from msmon.errors import MsmonError
from msmon.runner import mcore_cpu
from msmon.validate import validate


def _codes(result) -> set[str]:
    return {f.code for f in result.findings}


def _validate(path: Path, *overrides: str):
    return validate(load_config(path, list(overrides)))


@pytest.mark.parametrize(
    ("config", "legacy"),
    [
        ({"use_legacy": False}, False),
        ({"use_legacy": 0}, False),
        ({"use_legacy": ""}, False),
        ({"use_legacy": True}, True),
        ({"use_legacy": "false"}, True),  # a non-empty string is true for mindformers' `if use_legacy`
        ({"use_legacy": "False"}, True),
        ({"use_legacy": None}, True),
        ({}, True),
        ({"use_legacy": True, "context": {"use_legacy": False}}, False),  # context wins
        ({"use_legacy": False, "context": {"use_legacy": None}}, True),  # a null there still wins: unset -> True
        ({"use_legacy": False, "context": {"mode": 0}}, False),
    ],
)
def test_use_legacy_is_read_as_mindformers_reads_it(config: dict, legacy: bool) -> None:
    assert compat.use_legacy(config) is legacy


def test_the_qwen3_quickstart_validates_with_no_mcore_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = _validate(QUICKSTART_QWEN3)
    assert result.valid and not result.findings, result.findings  # use_flash_attention: True is msmon's to replace
    assert _codes(_validate(QUICKSTART_QWEN3, "use_legacy=0")) == set()


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["context.mode=1"], "PyNative mode"),
        (["model.model_config.window_size=[128,0]"], "sliding-window attention (model.model_config.window_size)"),
        (["model.model_config.multi_latent_attention=True", "model.model_config.use_attn_mask_compression=True"],
         "multi-latent attention (model.model_config.multi_latent_attention); the compressed attention mask"),
    ],
)
def test_ms608_lists_the_real_blockers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, overrides: list[str],
                                       expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    [finding] = [f for f in _validate(QUICKSTART_QWEN3, *overrides).findings if f.code == "MS608"]
    assert finding.is_error and finding.path == "use_legacy" and expected in finding.message


def test_ms608_names_an_unknown_mindformers_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("msmon.validate.cpu.package_version", lambda name: "9.9.9")
    [finding] = [f for f in _validate(QUICKSTART_QWEN3).findings if f.code == "MS608"]
    assert "know mindformers 1.9.0, not the installed 9.9.9" in finding.message


def test_a_string_false_is_the_legacy_path_so_flash_attention_is_refused(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    codes = _codes(_validate(QUICKSTART_QWEN3, "use_legacy='false'"))
    assert "MS603" in codes and "MS608" not in codes


def test_the_shipped_qwen3_config_on_cpu_shows_only_the_blockers_msmon_does_not_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = shipped_mindformers_yaml("pretrain_qwen3_32b_4k.yaml")
    monkeypatch.chdir(tmp_path)
    codes = _codes(_validate(shipped, "context.device_target=CPU"))
    assert {"MS601", "MS604", "MS606"} <= codes  # sink_mode, bfloat16, the stock train-step wrapper
    assert not codes & {"MS602", "MS603", "MS608"}


@pytest.mark.parametrize(
    ("config", "applies"),
    [
        ({"use_legacy": False, "context": {"device_target": "CPU"}}, True),
        ({"use_legacy": False, "context": {"device_target": "cpu"}}, True),
        ({"use_legacy": False, "context": {"device_target": "Ascend"}}, False),
        ({"use_legacy": False, "context": {"mode": 0}}, False),  # mindformers' default device is Ascend
        ({"use_legacy": False}, False),
        ({"use_legacy": True, "context": {"device_target": "CPU"}}, False),
        ({"use_legacy": "false", "context": {"device_target": "CPU"}}, False),
    ],
)
def test_the_stand_ins_apply_to_mcore_models_on_cpu_only(config: dict, applies: bool) -> None:
    assert mcore_cpu.needs_mcore_cpu_support(config) is applies


def test_an_ascend_run_never_touches_mindformers(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(version: str) -> None:
        raise AssertionError("applied on Ascend")

    monkeypatch.setattr(mcore_cpu, "apply_mcore_cpu_support", refuse)
    assert mcore_cpu.apply_if_needed({"use_legacy": False, "context": {"device_target": "Ascend"}}) is False


def test_an_unknown_mindformers_version_is_one_clear_error_before_anything_is_patched() -> None:
    with pytest.raises(MsmonError) as caught:
        mcore_cpu.apply_mcore_cpu_support("2.0.0")
    assert str(caught.value).count("\n") == 0
    assert "written for mindformers 1.9.0; the installed version is 2.0.0" in caught.value.message
    assert caught.value.exit_code == 3


def test_the_patch_table_names_what_the_installed_mindformers_has_and_applying_it_replaces_them(tmp_path: Path) -> None:
    """In a child process (the patches are process-wide): each attribute is mindformers' original, then msmon's."""
    code = (
        "import importlib, mindformers\n"
        "from msmon.compat import MCORE_CPU_PATCHES\n"
        "from msmon.runner.mcore_cpu import apply_mcore_cpu_support\n"
        "patches = MCORE_CPU_PATCHES[mindformers.__version__]\n"
        "def names():\n"
        "    return {r: getattr(importlib.import_module(p.module), p.attribute).__name__ for r, p in patches.items()}\n"
        "print('BEFORE', sorted(names().items()))\n"
        "apply_mcore_cpu_support(mindformers.__version__)\n"
        "apply_mcore_cpu_support(mindformers.__version__)\n"
        "print('AFTER', sorted(names().items()))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "LOCAL_DEFAULT_PATH": str(tmp_path / "mindformers")})
    moe = ["topk", "sort", "fmod", "cumsum", "index_select", "dispatcher", "grouped_matmul", "swiglu"]
    assert ("BEFORE [('attention', 'FlashAttention'), ('cumsum', 'CumsumExt'), ('dispatcher', "
            "'MoEAlltoAllTokenDispatcher'), ('embedding', 'VocabParallelEmbedding'), ('fmod', 'FmodScalar'), "
            "('grouped_matmul', 'GroupedMatmul'), ('index_select', 'IndexSelect'), ('norm', 'FusedRMSNorm'), "
            "('outer', 'Outer'), ('sort', 'SortExt'), ('swiglu', 'Swiglu'), ('topk', 'TopkExt')]"
            ) in proc.stdout, proc.stderr[-2000:]
    after = proc.stdout.split("AFTER ")[1]
    assert all(f"('{role}', 'MsmonCPU" in after for role in ["attention", "embedding", "outer", *moe]), after
    assert "('norm', 'RMSNorm')" in after


def test_split_outputs_per_token_loss_keeps_the_five_tuple_and_a_network_six_tuple_is_not_a_layout() -> None:
    # calculate_per_token_loss: MFTrainOneStepCell divides by the token count itself and returns 5 values
    five = split_outputs((0.5, False, 1.0, 1e-3, 2.0))
    assert five == {"loss": 0.5, "overflow": False, "loss_scale": 1.0, "learning_rate": 1e-3, "grad_norm": 2.0}
    # the mcore GPTModel's own per-token 6-tuple (numerator, denominator, ...) never reaches callbacks as such
    assert split_outputs((64.0, 128.0, 0.0, 0.0, 0.0, 0.0)) == {"loss": 64.0}
    assert set(compat.TRAIN_STEP_OUTPUTS) == {3, 4, 5, 7}


def test_loss_parts_keep_lm_and_non_zero_parts_nan_included_and_are_taken_once() -> None:
    import numpy as np

    publish_loss_parts({"lm_loss": np.array([2.5], np.float32), "aux_loss": np.array([0.0], np.float32),
                        "mtp_loss": np.array([np.nan], np.float32), "indexer_loss": np.array([0.25], np.float32)})
    parts = take_loss_parts()
    assert parts.keys() == {"loss_lm", "loss_mtp", "loss_indexer"}
    assert parts["loss_lm"] == 2.5 and math.isnan(parts["loss_mtp"]) and parts["loss_indexer"] == 0.25
    assert take_loss_parts() == {}
    publish_loss_parts({"lm_loss": 0.0, "aux_loss": 0.0})
    assert take_loss_parts() == {"loss_lm": 0.0}


def test_the_observer_records_the_parts_published_in_the_same_step(tmp_path: Path) -> None:
    records: list[dict[str, Any]] = []
    observer = StepObserver(settings(tmp_path, log_interval=2), StepProgress(), records.append, Stop())
    for step in (1, 2, 3, 4):
        publish_loss_parts({"lm_loss": 3.0 + step, "aux_loss": 0.01 * step, "mtp_loss": 0.0})
        observer.step_end(Params(cur_step_num=step, net_outputs=(3.0 + step + 0.01 * step, False, 1.0, 1e-3, 1.0)))
    assert [(r["step"], r["loss_lm"], r["loss_aux"]) for r in records] == [(2, 5.0, 0.02), (4, 7.0, 0.04)]
    assert all("loss_mtp" not in r for r in records)


def test_loss_parts_are_not_recorded_for_an_unknown_mindformers_version(caplog: pytest.LogCaptureFixture) -> None:
    assert install_loss_parts("0.1.0") is False
    assert "loss_lm/loss_aux/loss_mtp are not recorded" in caplog.text


def test_a_routing_summary_names_the_busiest_expert_the_spread_and_the_idle_ones() -> None:
    from msmon.engine.routing import routing_summary

    record = routing_summary(3, [30.0, 10.0, 0.0, 0.0])
    assert {k: v for k, v in record.items() if "expert_" in k} == {
        "moe/layer_3/expert_0": 30.0, "moe/layer_3/expert_1": 10.0, "moe/layer_3/expert_2": 0.0,
        "moe/layer_3/expert_3": 0.0}
    assert record["moe/layer_3/max_load"] == 3.0  # 30 tokens against a mean of 10
    assert record["moe/layer_3/cv"] == pytest.approx(math.sqrt((400 + 0 + 100 + 100) / 4) / 10)
    assert record["moe/layer_3/idle_experts"] == 2.0
    even = routing_summary(0, [5.0, 5.0])
    assert (even["moe/layer_0/max_load"], even["moe/layer_0/cv"], even["moe/layer_0/idle_experts"]) == (1.0, 0.0, 0.0)


def test_the_routing_records_are_tracked_only_where_a_router_keeps_its_token_shares() -> None:
    from msmon.config.metrics import METRICS

    exposure = METRICS["moe_routing"].exposure
    moe = {"model": {"model_config": {"num_experts": 4, "moe_router_load_balancing_type": "gbs_aux_loss"}}}
    assert exposure(moe).exposed
    dense = exposure({"model": {"model_config": {"hidden_size": 64}}})
    assert not dense.exposed and "has no experts" in dense.fix
    other = exposure({"model": {"model_config": {"num_experts": 4, "moe_router_load_balancing_type": "seq_aux_loss"}}})
    assert not other.exposed and "'seq_aux_loss' keeps no per-expert token counts" in other.fix
    default = exposure({"model": {"model_config": {"n_routed_experts": 8}}})  # mindformers' default: sub_seq_aux_loss
    assert not default.exposed and "sub_seq_aux_loss" in default.fix


@pytest.mark.parametrize(("override", "path", "says"), [
    ("model.model_config.moe_grouped_gemm=False", "model.model_config.moe_grouped_gemm",
     "builds experts only as grouped GEMM"),
    ("model.model_config.moe_router_load_balancing_type=aux_loss", "model.model_config.moe_router_load_balancing_type",
     "'aux_loss' is not one the router accepts: sub_seq_aux_loss, seq_aux_loss, gbs_aux_loss"),
    ("model.model_config.routed_scaling_factor=null", "model.model_config.routed_scaling_factor",
     "Failed calling Mul with \"input=None\""),
    ("model.model_config.num_experts_per_tok=5", "model.model_config.num_experts_per_tok",
     "top-k routing chooses 5 of 4 experts"),
    ("model.model_config.num_experts_per_tok=0", "model.model_config.num_experts_per_tok",
     "top-k routing chooses 0 of 4 experts"),
])
def test_validate_names_each_moe_key_mindformers_training_graph_refuses(override: str, path: str, says: str) -> None:
    found = [f for f in _validate(QUICKSTARTS_DIR / "quickstart-moe.yaml", override).findings if f.code == "MS028"]
    assert [(f.path, f.is_error) for f in found] == [(path, True)], found
    assert says in found[0].message


def test_validate_checks_expert_parallelism_against_the_experts_and_the_semi_auto_layout() -> None:
    moe = QUICKSTARTS_DIR / "quickstart-moe.yaml"
    assert not [f for f in _validate(moe).findings if f.code in ("MS028", "MS029")]
    [uneven] = [f for f in _validate(moe, "parallel_config.expert_parallel=3").findings if f.code == "MS029"]
    assert "expert_parallel 3 does not divide the 4 experts" in uneven.message
    layout = _validate(moe, "parallel_config.expert_parallel=4", "parallel.parallel_mode=1",
                       "parallel_config.data_parallel=2")
    [wide] = [f for f in layout.findings if f.code == "MS029"]
    assert "does not divide data_parallel x model_parallel = 2 x 1" in wide.message


def test_the_dense_quickstart_made_moe_by_hand_gets_the_two_errors_that_would_stop_it(tmp_path: Path) -> None:
    """The issue's first attempt: the Qwen3 quickstart with a Qwen3-MoE model type and 4 experts, top-2."""
    found = _validate(QUICKSTART_QWEN3, "model.model_config.model_type=qwen3_moe",
                      "model.model_config.architectures=[Qwen3MoeForCausalLM]", "model.model_config.num_experts=4",
                      "model.model_config.num_experts_per_tok=2").findings
    assert sorted(f.path for f in found if f.code == "MS028") == [
        "model.model_config.moe_grouped_gemm", "model.model_config.routed_scaling_factor"]


def test_mindformers_own_moe_pretrain_config_passes_the_moe_checks(tmp_path: Path) -> None:
    shipped = tmp_path / "pretrain_qwen3_30b_a3b_4k.yaml"
    shipped.write_text(shipped_mindformers_yaml(shipped.name).read_text(encoding="utf-8"), encoding="utf-8")
    assert not [f for f in _validate(shipped).findings if f.code in ("MS028", "MS029")]


@pytest.mark.parametrize("on_host", [False, True], ids=["device", "host"])
def test_the_routing_window_sums_each_layers_shares_until_taken_and_skips_dense_layers(on_host: bool) -> None:
    """On the device (queued adds, Ascend) and in host memory (a CPU) alike."""
    from types import SimpleNamespace as Obj

    import mindspore as ms
    import numpy as np

    from msmon.engine import routing

    def layer(shares: list[float] | None) -> Any:
        if shares is None:  # a dense block: an MLP without a router
            return Obj(mlp=Obj())
        return Obj(mlp=Obj(router=Obj(fi_accu=ms.Parameter(ms.Tensor(np.array(shares, np.float32)), name="fi"))))

    model = Obj(decoder=Obj(layers=[layer([0.5, 0.25, 0.25, 0.0]), layer(None), layer([0.25] * 4)]))
    routing.enable(True, on_host=on_host)
    routing.add_shares(model, 2)
    for router in (model.decoder.layers[0].mlp.router, model.decoder.layers[2].mlp.router):
        shares = router.fi_accu.asnumpy().copy()
        ms.ops.assign(router.fi_accu, ms.ops.zeros_like(router.fi_accu))  # mindformers' zeroing after the add
        ms.ops.assign(router.fi_accu, ms.Tensor(shares))  # the next step's shares (the same here)
    routing.add_shares(model, 2)
    record = routing.take(8)  # 2 steps of 8 tokens, top-2: 32 routed slots a layer
    assert [record[f"moe/layer_0/expert_{e}"] for e in range(4)] == [16.0, 8.0, 8.0, 0.0]
    assert [record[f"moe/layer_2/expert_{e}"] for e in range(4)] == [8.0] * 4
    assert not any(key.startswith("moe/layer_1/") for key in record)
    assert record["moe/layer_0/idle_experts"] == 1.0 and record["moe/layer_2/cv"] == 0.0
    assert routing.take(8) == {}  # the window was emptied
    routing.enable(False)
