"""The layer summaries (``layer_update_ratio``, on with ``layer_grad_norm``) without training: both readers (host numpy,
the device graph) on real MindSpore Parameters against numpy, and the callback's timing: weights copied only at the
end of the step before a logging step, summed only at logging steps, keys in the records of logging steps only."""

from __future__ import annotations

import math
import types
from typing import Any

import numpy as np
import pytest
from engine_support import settings
from test_engine_unit import CountingTensor, Params, Stop

from msmon.engine import layer_summaries
from msmon.engine.callback import StepObserver
from msmon.engine.grad_groups import GradGroups
from msmon.engine.layer_summaries import DeviceReader, HostReader, LayerSummaries
from msmon.engine.record import StepProgress

NAMES = ["model.tok_embeddings.embedding_weight", "model.layers.0.attention.wq.weight",
         "model.layers.0.attention_norm.weight", "model.layers.1.attention.wq.weight", "lm_head.weight"]


def expected(before: list[np.ndarray], after: list[np.ndarray]) -> dict[str, float]:
    """The summaries by numpy in float64: per group sqrt(sum w^2) and sqrt(sum (w - w_before)^2) / that."""
    groups = GradGroups.of(NAMES)
    values: dict[str, float] = {}
    for position, name in enumerate(groups.names):
        members = [i for i, g in enumerate(groups.index) if g == position]
        weight = math.sqrt(sum(float(np.sum(after[i].astype(np.float64) ** 2)) for i in members))
        change = math.sqrt(sum(float(np.sum((after[i].astype(np.float64) - before[i].astype(np.float64)) ** 2))
                               for i in members))
        values[f"weight_norm/{name}"], values[f"update_ratio/{name}"] = weight, change / weight
    return values


@pytest.mark.parametrize("reader", [HostReader, DeviceReader], ids=["host", "device"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_both_readers_give_numpys_norms_and_ratios_on_real_parameters(reader, dtype):
    import mindspore as ms
    from mindspore import Parameter, Tensor, ops

    rng = np.random.default_rng(7)
    shapes = [(16, 8), (8, 8), (8,), (8, 8), (16, 8)]
    params = [Parameter(Tensor(rng.standard_normal(s).astype(dtype)), name=n) for n, s in zip(NAMES, shapes,
                                                                                            strict=True)]
    summaries = LayerSummaries(params, GradGroups.of(NAMES), reader())
    for _ in range(2):  # the device graph is built once and called again
        before = [p.asnumpy().copy() for p in params]
        summaries.snapshot()
        step = [rng.standard_normal(s).astype(dtype) * 1e-2 for s in shapes]
        for param, delta in zip(params, step, strict=True):
            if param.name != NAMES[3]:  # block 1 takes no update: ratio exactly 0
                ops.assign(param, param + Tensor(delta))
        got = summaries.at_logging_step()
        want = expected(before, [p.asnumpy() for p in params])
        assert list(got) == list(want)
        tolerance = 1e-6 if dtype == "float32" or reader is HostReader else 2e-3
        assert got == pytest.approx(want, rel=tolerance)
        assert got["update_ratio/layers.1"] == 0.0 and 1e-4 < got["update_ratio/layers.0"] < 1e-1
    assert summaries.at_logging_step() == {}  # the copy is used once
    assert ms.get_context("device_target") == "CPU" and isinstance(layer_summaries.reader_for_device(), HostReader)


class Weight:
    def __init__(self, name: str, values: list[float]) -> None:
        self.name, self.values = name, np.array(values, np.float32)
        self.shape = self.values.shape

    def asnumpy(self) -> np.ndarray:
        return self.values


class CountingReader(HostReader):
    def __init__(self) -> None:
        self.copies: list[int] = []
        self.sums: list[int] = []
        self.step = 0

    def copy(self, weights: Any) -> Any:
        self.copies.append(self.step)
        return super().copy(weights)

    def square_sums(self, weights: Any, copy: Any) -> tuple[list[float], list[float]]:
        self.sums.append(self.step)
        return super().square_sums(weights, copy)


def train(tmp_path, monkeypatch, interval: int, metrics: list[str], steps: int = 10):
    """Ten steps of a fake training whose one weight of each of two groups grows by 1 per step: the records, the
    reader, and the device reads of every step."""
    reader = CountingReader()
    monkeypatch.setattr(layer_summaries, "reader_for_device", lambda: reader)
    weights = [Weight("model.layers.0.a", [3.0, 4.0]), Weight("lm_head.weight", [1.0])]
    records: list[dict[str, Any]] = []
    observer = StepObserver(settings(tmp_path, log_interval=interval, track_metrics=metrics), StepProgress(),
                            records.append, Stop())
    reads = []
    for step in range(1, steps + 1):
        reader.step = step
        weights[0].values += 1.0
        before = CountingTensor.reads
        observer.step_end(Params(cur_step_num=step, train_network=types.SimpleNamespace(weights=weights),
                                 net_outputs=(CountingTensor(1.0),)))
        reads.append(CountingTensor.reads - before)
    return records, reader, reads


@pytest.mark.parametrize("metric", ["layer_grad_norm", "layer_update_ratio"])
def test_weights_are_copied_the_step_before_a_log_and_summed_at_it_only(tmp_path, monkeypatch, metric):
    records, reader, reads = train(tmp_path, monkeypatch, 5, ["loss", metric])
    assert reader.copies == [4, 9] and reader.sums == [5, 10]
    assert [reads[s - 1] for s in range(1, 11) if s % 5] == [0] * 8  # the copy reads no device value
    assert [r["step"] for r in records] == [5, 10]
    record = records[1]  # layers.0's weight went from [3+9, 4+9] to [3+10, 4+10]; the head's did not move
    assert record["weight_norm/layers.0"] == pytest.approx(math.hypot(13.0, 14.0))
    assert record["update_ratio/layers.0"] == pytest.approx(math.sqrt(2.0) / math.hypot(13.0, 14.0))
    assert record["weight_norm/head"] == 1.0 and record["update_ratio/head"] == 0.0


def test_at_log_interval_1_every_step_copies_and_the_first_record_has_no_ratio(tmp_path, monkeypatch):
    records, reader, _ = train(tmp_path, monkeypatch, 1, ["loss", "layer_update_ratio"], steps=3)
    assert reader.copies == [1, 2, 3] and reader.sums == [2, 3]
    assert not any(k.startswith(("weight_norm/", "update_ratio/")) for k in records[0])
    assert records[1]["update_ratio/layers.0"] == pytest.approx(math.sqrt(2.0) / math.hypot(5.0, 6.0))


def test_without_either_metric_nothing_is_copied(tmp_path, monkeypatch):
    records, reader, _ = train(tmp_path, monkeypatch, 5, ["loss", "grad_norm"])
    assert reader.copies == reader.sums == [] and len(records) == 2
    assert not any(k.startswith(("weight_norm/", "update_ratio/")) for r in records for k in r)
