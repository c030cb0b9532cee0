"""layer_grad_norm without training: parameter names -> groups (the real names of both quickstarts), the per-group
reduction, msmon turning local_norm on in the config it hands to mindformers, the validate findings, the callback's
records (read only at logging steps), and the wrapper that keeps MFLossMonitor from printing the raw arrays."""

from __future__ import annotations

import logging
import math
import sys
import types
from typing import Any

import numpy as np
import pytest
from engine_support import settings
from helpers_training import QUICKSTART, QUICKSTART_QWEN3, quickstart_parts, write_quickstart_config
from test_engine_unit import CountingTensor, Params, Stop

from msmon.config.loader import load_config
from msmon.config.split import split_monitor_config
from msmon.engine import step_outputs
from msmon.engine.callback import StepObserver
from msmon.engine.grad_groups import GradGroups, group_of, groups_of_network
from msmon.engine.record import StepProgress
from msmon.engine.step_outputs import quiet_local_norm_print
from msmon.validate.validator import validate

#: The trained parameters, in the wrapper's order, of the two quickstarts (printed by a real run, mindformers 1.9).
LEGACY = [
    "model.tok_embeddings.embedding_weight",
    *(f"model.layers.{n}.{p}.weight" for n in (0, 1) for p in (
        "attention.wq", "attention.wk", "attention.wv", "attention.wo",
        "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")),
    "lm_head.weight",
    *(f"model.layers.{n}.{p}.weight" for n in (0, 1) for p in ("ffn_norm", "attention_norm")),
    "model.norm_out.weight",
]
MCORE = [
    "embedding.word_embeddings.weight",
    *(f"decoder.layers.{n}.{p}.weight" for n in (0, 1) for p in (
        "self_attention.linear_proj", "self_attention.linear_qkv", "mlp.linear_fc1", "mlp.linear_fc2")),
    "output_layer.weight",
    *(f"decoder.layers.{n}.{p}.weight" for n in (0, 1) for p in (
        "input_layernorm", "self_attention.q_layernorm", "self_attention.k_layernorm", "pre_mlp_layernorm")),
    "decoder.final_layernorm.weight",
]
GROUPS = ("embedding", "layers.0", "layers.1", "final_norm", "head")


@pytest.mark.parametrize("names", [LEGACY, MCORE], ids=["legacy", "mcore"])
def test_both_model_paths_map_every_parameter_to_a_named_group(names):
    groups = GradGroups.of(names)
    assert groups.names == GROUPS
    assert [groups.names[i] for i in groups.index] == [group_of(name) for name in names]
    assert sum(1 for name in names if group_of(name) == "layers.1") == sum(
        1 for name in names if group_of(name) == "layers.0") >= 4


def test_other_block_lists_and_leftovers_get_their_own_groups():
    assert group_of("mtp.layers.0.transformer_layer.mlp.linear_fc1.weight") == "mtp.layers.0"
    assert group_of("transformer.encoder.layers.12.self_attention.dense.weight") == "layers.12"
    assert group_of("model.rotary.inv_freq_bias") == "other"
    groups = GradGroups.of(["model.layers.10.w", "head.x", "model.layers.2.w", "bias", "mtp.layers.0.w",
                            "model.norm.weight", "model.embed_tokens.weight", "lm_head.weight"])
    assert groups.names == ("embedding", "layers.2", "layers.10", "mtp.layers.0", "final_norm", "head", "other")


def test_group_norms_are_the_root_sum_of_their_squares_and_keep_nan():
    groups = GradGroups.of(["model.layers.0.a", "model.layers.1.a", "model.layers.0.b", "lm_head.weight"])
    norms = groups.norms(np.array([9.0, 4.0, 16.0, 1.0], np.float32))
    assert norms == {"grad_norm/layers.0": 5.0, "grad_norm/layers.1": 2.0, "grad_norm/head": 1.0}
    assert math.sqrt(sum(v * v for v in norms.values())) == pytest.approx(math.sqrt(30.0))
    broken = groups.norms(np.array([9.0, math.nan, 16.0, math.inf], np.float32))
    assert broken["grad_norm/layers.0"] == 5.0 and math.isnan(broken["grad_norm/layers.1"])
    assert broken["grad_norm/head"] == math.inf


class Weight:
    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name, self.shape = name, shape

    def asnumpy(self) -> Any:  # the layer summaries copy and sum the weights (host memory: no device read)
        return np.ones(self.shape, np.float32)


def test_groups_are_refused_when_the_sizes_do_not_match_the_parameters():
    network = types.SimpleNamespace(weights=[Weight("model.layers.0.a", (4, 2)), Weight("lm_head.weight", (3,))])
    groups, why = groups_of_network(network, (8, 3))
    assert groups is not None and groups.names == ("layers.0", "head") and why == ""
    assert groups_of_network(network, (8, 4))[0] is None
    assert groups_of_network(network, (8,)) == (None, "1 squared sums do not match the wrapper's 2 parameters "
                                                      "(element counts differ)")
    assert groups_of_network(types.SimpleNamespace(), (8, 3))[0] is None


def _split(tmp_path, source=QUICKSTART, **monitor: Any) -> dict[str, Any]:
    path = write_quickstart_config(tmp_path, source=source, **monitor)
    return quickstart_parts(path)[0]


@pytest.mark.parametrize("source", [QUICKSTART, QUICKSTART_QWEN3], ids=["legacy", "mcore"])
def test_msmon_turns_local_norm_on_only_when_it_records_the_groups(tmp_path, source):
    tracked = ["loss", "grad_norm", "layer_grad_norm"]
    assert _split(tmp_path, source, track_metrics=tracked)["runner_wrapper"]["local_norm"] is True
    assert "local_norm" not in _split(tmp_path, source)["runner_wrapper"]
    assert "local_norm" not in _split(tmp_path, source, track_metrics=tracked, enable_monitor=False)["runner_wrapper"]
    conf = load_config(write_quickstart_config(tmp_path, source=source, track_metrics=tracked)).resolved()
    split_monitor_config(conf)
    assert "local_norm" not in conf["runner_wrapper"]  # the caller's config is untouched


@pytest.mark.parametrize(("wrapper", "fix"), [
    (None, "add runner_wrapper"), ({"type": "TrainOneStepCell"}, "returns no per-gradient norms"),
])
def test_validate_explains_a_wrapper_that_cannot_return_the_squared_sums(tmp_path, wrapper, fix):
    path = write_quickstart_config(tmp_path, overrides={"runner_wrapper": wrapper}, track_metrics=["layer_grad_norm"])
    result = validate(load_config(path), cwd=tmp_path)
    (finding,) = [f for f in result.findings if f.code == "MS304"]
    assert finding.is_error and fix in (finding.hint or "") and finding.path.startswith("monitor_config.track_metrics")
    good = write_quickstart_config(tmp_path, track_metrics=["layer_grad_norm"])
    assert not [f for f in validate(load_config(good), cwd=tmp_path).findings if f.code in ("MS302", "MS304")]


def test_validate_refuses_a_flight_recorder_out_of_range(tmp_path):
    path = write_quickstart_config(tmp_path, flight_recorder={"steps": -1, "max_files": 0})
    codes = [(f.code, f.path) for f in validate(load_config(path), cwd=tmp_path).findings if f.code == "MS404"]
    assert codes == [("MS404", "monitor_config.flight_recorder.steps"),
                     ("MS404", "monitor_config.flight_recorder.max_files")]


def _seven(loss: float, squares: list[float]) -> tuple[Any, ...]:
    norm = math.sqrt(sum(squares))
    return (CountingTensor(loss), CountingTensor(0.0), CountingTensor(1.0), CountingTensor(0.01),
            CountingTensor(norm), SquaresTensor(squares), (8, 8, 3))


class SquaresTensor(CountingTensor):
    def __init__(self, values: list[float]) -> None:
        super().__init__(0.0)
        self.values = values

    def asnumpy(self) -> Any:
        CountingTensor.reads += 1
        return np.array(self.values, np.float32)

    def tolist(self) -> list[float]:
        return self.asnumpy().tolist()


def test_the_callback_records_each_group_at_logging_steps_only(tmp_path):
    records: list[dict[str, Any]] = []
    network = types.SimpleNamespace(weights=[
        Weight("model.layers.0.a", (2, 4)), Weight("model.layers.1.a", (8,)), Weight("lm_head.weight", (3,))])
    s = settings(tmp_path, log_interval=5, track_metrics=["loss", "grad_norm", "layer_grad_norm"])
    observer = StepObserver(s, StepProgress(), records.append, Stop())
    CountingTensor.reads = 0
    for step in range(1, 11):
        before = CountingTensor.reads
        observer.step_end(Params(cur_step_num=step, train_network=network,
                                 net_outputs=_seven(float(step), [step * 1.0, 4.0, 9.0])))
        if step % 5:
            assert CountingTensor.reads == before, f"a device read on non-logging step {step}"
    assert [r["step"] for r in records] == [5, 10]
    record = records[1]
    assert record["grad_norm/layers.0"] == pytest.approx(math.sqrt(10.0)) and record["grad_norm/head"] == 3.0
    groups = [v for k, v in record.items() if k.startswith("grad_norm/")]
    assert math.sqrt(sum(v * v for v in groups)) == pytest.approx(record["grad_norm"])
    assert "local_norm" not in record and "layer_grad_norm" not in record


def test_mismatched_sizes_warn_once_and_record_no_group(tmp_path, caplog):
    records: list[dict[str, Any]] = []
    network = types.SimpleNamespace(weights=[Weight("model.layers.0.a", (5,))])
    observer = StepObserver(settings(tmp_path, log_interval=1, track_metrics=["loss", "layer_grad_norm"]),
                            StepProgress(), records.append, Stop())
    with caplog.at_level(logging.WARNING, logger="msmon"):
        for step in (1, 2):
            observer.step_end(Params(cur_step_num=step, train_network=network, net_outputs=_seven(1.0, [1, 2, 3])))
    warnings = [r.getMessage() for r in caplog.records if "layer_grad_norm" in r.getMessage()]
    assert len(warnings) == 1 and "do not match" in warnings[0]
    assert not [k for r in records for k in r if k.startswith("grad_norm/")]


def test_mindformers_output_reader_gets_five_outputs_and_prints_no_array(monkeypatch, caplog):
    printed: list[int] = []
    module = types.ModuleType("fake_mf_callback")

    def read(output: Any) -> Any:
        printed.append(len(output))
        return tuple(output[:5])

    module._get_loss_output = read  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_mf_callback", module)
    from msmon.compat import Patch

    patch = Patch("fake_mf_callback", "_get_loss_output", "_get_loss_output")
    monkeypatch.setattr(step_outputs, "LOSS_OUTPUT_READER", {"1.9.0": patch})
    assert quiet_local_norm_print("1.9.0") and quiet_local_norm_print("1.9.0")  # idempotent
    assert module._get_loss_output((1, 2, 3, 4, 5, [6.0], (7,))) == (1, 2, 3, 4, 5)
    assert module._get_loss_output((1, 2, 3)) == (1, 2, 3)
    assert printed == [5, 3]
    with caplog.at_level(logging.WARNING, logger="msmon"):
        assert not quiet_local_norm_print("0.1.0")
    assert "prints the raw local_norm array" in caplog.text
