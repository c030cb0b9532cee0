"""The distributions probe's gradients without a Trainer: a small MindSpore network trained by the real optimizers
(mindformers' AdamW, MindSpore's AdamWeightDecay and Adam), its gradients computed independently with
``mindspore.grad``; the gradient the probe reads back from the optimizer's first moment equals them within float32
rounding, and the ``gradients/<group>`` histograms hold them. An optimizer without a first moment msmon reads
(Momentum) gives no gradient histograms and says so; a logging step at which the optimizer did not run has none."""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_probe_units import drive

from msmon import layout
from msmon.engine.probe.gradients import first_moments
from msmon.engine.probe.histograms import histogram
from msmon.engine.probe.runner import ProbeRunner
from msmon.probe import ProbeKind, ProbeState, new_request, read_marks, write_request

NAMES = ["model.layers.0.attention.wq.weight", "model.layers.1.attention.wq.weight", "lm_head.weight"]
GROUPS = {"layers.0": [0], "layers.1": [1], "head": [2]}


def mindformers_adamw(params: list[Any]) -> Any:
    from mindformers.core.optim.adamw import AdamW

    return AdamW(params, learning_rate=1e-2, betas=(0.9, 0.95), weight_decay=0.1)


def adam_weight_decay(params: list[Any]) -> Any:
    from mindspore import nn

    return nn.AdamWeightDecay(params, learning_rate=1e-2, beta1=0.8, weight_decay=0.1)


def adam(params: list[Any]) -> Any:
    from mindspore import nn

    return nn.Adam(params, learning_rate=1e-2, beta1=0.85)


def momentum(params: list[Any]) -> Any:
    from mindspore import nn

    return nn.Momentum(params, learning_rate=1e-2, momentum=0.9)


class Training:
    """Three weight matrices, a loss on random batches, the gradients by ``mindspore.grad`` and the optimizer's step."""

    def __init__(self, make_optimizer: Callable[[list[Any]], Any]) -> None:
        import mindspore as ms

        rng = np.random.default_rng(7)
        self.params = [ms.Parameter(ms.Tensor(rng.standard_normal((8, 8)).astype(np.float32) * 0.3), name=name)
                       for name in NAMES]
        self.optimizer = make_optimizer(self.params)
        self.network = types.SimpleNamespace(weights=self.params, optimizer=self.optimizer)
        self._rng = rng
        self.gradients: dict[int, list[Any]] = {}

        def loss(x: Any, y: Any, *weights: Any) -> Any:
            hidden = ms.ops.tanh(ms.ops.matmul(x, weights[0]))
            hidden = ms.ops.tanh(ms.ops.matmul(hidden, weights[1]))
            return ms.ops.mean(ms.ops.square(ms.ops.matmul(hidden, weights[2]) - y))

        self._grad = ms.grad(lambda x, y: loss(x, y, *self.params), grad_position=None,
                             weights=ms.ParameterTuple(self.params))

    def step(self, step: int, *, optimize: bool = True) -> None:
        import mindspore as ms

        x = ms.Tensor(self._rng.standard_normal((16, 8)).astype(np.float32))
        y = ms.Tensor(self._rng.standard_normal((16, 8)).astype(np.float32))
        grads = self._grad(x, y)
        self.gradients[step] = [g.asnumpy().astype(np.float64) for g in grads]
        if optimize:
            self.optimizer(grads)


def probe(tmp_path: Path, training: Training, idle_at: int | None = None) -> tuple[Any, list[dict[str, Any]]]:
    """A runner taking a request of 3 logs at step 5 (log_interval 5); steps 1-20 trained; (mark, lines)."""
    runner = ProbeRunner(tmp_path, 0, None, interval=5)
    runner.network = training.network
    request = new_request(ProbeKind.DISTRIBUTIONS, 3, None)
    write_request(tmp_path, request)
    drive(runner, range(1, 21), 5, train=lambda step: training.step(step, optimize=step != idle_at))
    (mark,) = read_marks(tmp_path, request.id).values()
    assert mark.state is ProbeState.DONE and (mark.first_step, mark.last_step) == (6, 20)
    text = (tmp_path / mark.output / layout.DISTRIBUTIONS_FILE).read_text()
    return mark, [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("make_optimizer", [mindformers_adamw, adam_weight_decay, adam])
def test_the_gradient_read_from_the_first_moment_is_the_gradient_mindspore_computes(make_optimizer) -> None:
    """Elementwise, at every step of a short training: (m_t - beta1 m_{t-1}) / (1 - beta1) against mindspore.grad's
    gradient, within float32 rounding of the moment (its error is about 1e-7 of |m| over 1 - beta1)."""
    training = Training(make_optimizer)
    moments, why = first_moments(training.optimizer, training.params)
    assert moments is not None, why
    worst = 0.0
    for step in range(1, 16):
        before = [m.asnumpy().copy() for m in moments.states]
        training.step(step)
        read = moments.gradients(before, [m.asnumpy() for m in moments.states])
        for mine, truth, moment in zip(read, training.gradients[step], moments.states, strict=True):
            scale = max(np.abs(truth).max(), np.abs(moment.asnumpy()).max())
            worst = max(worst, float(np.abs(mine - truth).max() / scale))
    assert worst < 2e-6, worst


@pytest.mark.parametrize("make_optimizer", [mindformers_adamw, adam_weight_decay])
def test_the_probe_writes_each_groups_gradient_histogram_beside_weights_and_updates(tmp_path: Path,
                                                                                   make_optimizer) -> None:
    training = Training(make_optimizer)
    mark, lines = probe(tmp_path, training)
    assert [line["step"] for line in lines] == [10, 15, 20]
    assert "histograms of weights, updates and gradients of 3 group(s) at logging step(s) 10, 15, 20" == mark.message
    for line in lines:
        assert set(line["histograms"]) == {f"{kind}/{g}" for kind in ("weights", "updates", "gradients")
                                           for g in GROUPS}
        for group, members in GROUPS.items():
            truth = histogram(np.concatenate([training.gradients[line["step"]][i].reshape(-1) for i in members]))
            found = line["histograms"][f"gradients/{group}"]
            assert found["count"] == truth.count == 64
            assert found["sum_squares"] == pytest.approx(truth.squares, rel=1e-5)
            assert (found["min"], found["max"]) == pytest.approx((truth.minimum, truth.maximum), rel=1e-4, abs=1e-8)
            assert list(found["quantiles"].values()) == pytest.approx(list(truth.quantiles), rel=1e-4, abs=1e-8)


def test_without_a_first_moment_msmon_reads_the_probe_writes_no_gradients_and_says_why(tmp_path: Path) -> None:
    mark, lines = probe(tmp_path, Training(momentum))
    assert all(not any(tag.startswith("gradients/") for tag in line["histograms"]) for line in lines)
    assert len(lines) == 3 and all(len(line["histograms"]) == 6 for line in lines)
    assert mark.message == ("histograms of weights and updates of 3 group(s) at logging step(s) 10, 15, 20; no "
                            "gradients: the optimizer Momentum keeps no first moment msmon reads (mindformers AdamW, "
                            "mindspore AdamWeightDecay, mindspore Adam do)")


def test_a_logging_step_at_which_the_optimizer_did_not_run_has_no_gradients(tmp_path: Path) -> None:
    """An overflow or a skipped batch: the train step does not call the optimizer, its moments and step count stay."""
    mark, lines = probe(tmp_path, Training(mindformers_adamw), idle_at=15)
    tags = [{tag.split("/")[0] for tag in line["histograms"]} for line in lines]
    assert tags == [{"weights", "updates", "gradients"}, {"weights", "updates"}, {"weights", "updates", "gradients"}]
    assert mark.message.endswith("; no gradients at step(s) 15: the optimizer did not run (an overflow or a skipped "
                                 "step)")


def assert_gradients_are_the_clipped_grad_norms(lines: list[dict[str, Any]], records: dict[int, dict[str, Any]],
                                                 groups: list[str], max_grad_norm: float = 1.0) -> list[float]:
    """On a real run: at each logging step of a window, sqrt(sum_squares) of ``gradients/<group>`` is the recorded
    ``grad_norm/<group>`` (the train step's squared sums, before clipping) times the clip factor
    min(1, max_grad_norm / grad_norm) of that step (the quickstarts clip at 1.0). Returns the relative errors."""
    errors = []
    for line in lines:
        row = records[line["step"]]
        factor = min(1.0, max_grad_norm / row["grad_norm"])
        for group in groups:
            found = math.sqrt(line["histograms"][f"gradients/{group}"]["sum_squares"])
            expected = row[f"grad_norm/{group}"] * factor
            errors.append(abs(found - expected) / expected)
            assert found == pytest.approx(expected, rel=1e-4), (line["step"], group, found, expected, factor)
    return errors
