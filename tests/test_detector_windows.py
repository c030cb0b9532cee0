"""The detectors' incremental windows (#47: a million-record replay) equal the refits they replaced, on random series:
the running least-squares fit and sorted medians of grad_explosion, the sorted baseline of throughput_drop, the
level and noise of loss_spike."""

from __future__ import annotations

import math
import random
import statistics
from collections import deque

import pytest

from msmon.config.health import DeadSeriesSettings, LossSpikeSettings
from msmon.health.detectors.dead_series import DeadSeriesDetector
from msmon.health.detectors.log_window import LogWindow, MedianWindow, fit_slope
from msmon.health.detectors.loss_spike import Q75_OF_ABS_DIFF, LossSpikeDetector, noise_of_sorted


def series(rng: random.Random, kind: str, n: int) -> list[float]:
    """log(grad_norm)-like values: noisy flat, noisy growth, heavy-tailed, exact growth, constant, large offset."""
    if kind == "flat":
        return [rng.gauss(0.0, 0.03) for _ in range(n)]
    if kind == "growth":
        return [0.01 * i + rng.gauss(0.0, 0.02) for i in range(n)]
    if kind == "heavy":
        return [rng.gauss(0.0, 0.03) + (math.log(5.0) if rng.random() < 0.05 else 0.0) for _ in range(n)]
    if kind == "exact":
        return [math.log(1.3 * 1.03 ** i) for i in range(n)]
    if kind == "constant":
        return [math.log(2.0)] * n
    return [9.0 + rng.gauss(0.0, 1e-4) for _ in range(n)]  # offset: the sums' cancellation


@pytest.mark.parametrize("kind", ["flat", "growth", "heavy", "exact", "constant", "offset"])
@pytest.mark.parametrize("seed", range(4))
def test_the_running_fit_and_median_equal_a_refit_of_the_window(kind: str, seed: int) -> None:
    rng = random.Random(seed)
    window, refit = LogWindow(), deque[tuple[int, float]]()
    width = rng.choice([9, 20, 60])
    step = rng.randrange(1, 2_000_000)
    compared = 0
    for value in series(rng, kind, 700):
        step += rng.choice([1, 1, 1, 2, 10])
        window.append(step, value)
        refit.append((step, value))
        while len(window) > width or (len(window) > 3 and rng.random() < 0.05):
            assert window.popleft() == refit.popleft()
        if len(window) < 3:
            continue
        (slope, t), (want_slope, want_t) = window.fit(), fit_slope(list(refit))
        assert slope == pytest.approx(want_slope, rel=1e-6, abs=1e-12)
        assert t == pytest.approx(want_t, rel=1e-6, abs=1e-9) or (math.isinf(want_t) and math.isinf(t))
        assert window.median() == statistics.median(y for _, y in refit)
        compared += 1
    assert compared > 600


def test_an_exact_fit_keeps_its_infinite_t_statistic() -> None:
    window = LogWindow()
    for step in range(1_000_000, 1_000_200):
        window.append(step, math.log(1.03 ** (step - 1_000_000)))
        if len(window) > 60:
            window.popleft()
    assert window.fit()[1] == math.inf


@pytest.mark.parametrize("seed", range(5))
def test_the_median_window_equals_the_median_of_its_deque(seed: int) -> None:
    rng = random.Random(seed)
    window = MedianWindow(rng.choice([1, 2, 5, 50]))
    for _ in range(1000):
        window.append(rng.choice([rng.gauss(2350.0, 15.0), 783.0, 2350.0]))
        assert window.median() == statistics.median(window.values)
        assert window.ordered == sorted(window.values)


def old_noise_scale(values: list[float]) -> float:
    """loss_spike's noise before #47: the 75th percentile of the window's step-to-step changes, sorted each log."""
    diffs = sorted(abs(b - a) for a, b in zip(values, values[1:], strict=False))
    return diffs[int(0.75 * (len(diffs) - 1))] / Q75_OF_ABS_DIFF if diffs else 0.0


@pytest.mark.parametrize("seed", range(5))
def test_the_loss_spike_baseline_keeps_the_level_and_noise_a_refit_gives(seed: int) -> None:
    rng = random.Random(seed)
    settings = LossSpikeSettings()
    detector = LossSpikeDetector(settings)
    for step in range(1, 3000):
        spike = 6.0 if rng.random() < 0.01 else 1.0
        detector.observe({"step": step, "loss": spike * (2.0 + 5.0 * math.exp(-step / 500) + rng.gauss(0.0, 0.05))})
        baseline = list(detector._baseline)
        assert noise_of_sorted(detector._changes) == old_noise_scale(baseline)
        assert detector._level.median() == statistics.median(baseline[-max(settings.level_window, 1):])


def test_dead_series_counts_a_constant_series_across_the_window_only() -> None:
    detector = DeadSeriesDetector(DeadSeriesSettings(window=5))
    values = [1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]
    fired = [step for step, value in enumerate(values, 1)
             if detector.observe({"step": step, "loss": value}) is not None]
    assert fired == [10]
