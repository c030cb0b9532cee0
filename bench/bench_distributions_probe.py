"""The distributions probe's cost at one logging step, with and without its gradients, side by side.

    .venv/bin/python bench/bench_distributions_probe.py [--rounds 20]

The legacy CPU quickstart's trained weights (their names and shapes: 235k values in 5 groups) as MindSpore
Parameters, trained by mindformers' AdamW on random gradients. Two probes over the same window, one logging step
each per round, in alternating order: with the optimizer's first moments read (weights, updates and gradients: 15
histograms) and without (the train-step wrapper without an optimizer: weights and updates, 10 histograms); the
first two rounds (the files opened) left out. Printed: the median over the rounds of the copy as the step begins
and of the work as it ends, in ms, and their ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any

HIDDEN, VOCAB, FFN, LAYERS = 64, 1000, 192, 2


def shapes() -> dict[str, tuple[int, ...]]:
    """The legacy quickstart's trained weights (the counts its distributions record: 64,000 / 53,376 / 64)."""
    found: dict[str, tuple[int, ...]] = {"model.tok_embeddings.embedding_weight": (VOCAB, HIDDEN)}
    for layer in range(LAYERS):
        block = f"model.layers.{layer}."
        for name in ("wq", "wk", "wv", "wo"):
            found[f"{block}attention.{name}.weight"] = (HIDDEN, HIDDEN)
        found[f"{block}feed_forward.w1.weight"] = (FFN, HIDDEN)
        found[f"{block}feed_forward.w2.weight"] = (HIDDEN, FFN)
        found[f"{block}feed_forward.w3.weight"] = (FFN, HIDDEN)
        found[f"{block}attention_norm.weight"] = (HIDDEN,)
        found[f"{block}ffn_norm.weight"] = (HIDDEN,)
    found["model.norm_out.weight"] = (HIDDEN,)
    found["lm_head.weight"] = (VOCAB, HIDDEN)
    return found


def timed_log(probe: Any, optimizer: Any, grads: Any, step: int) -> tuple[float, float]:
    """(ms at the step's begin, ms at its end) of one logging step of ``probe`` around one optimizer step."""
    begun = time.perf_counter()
    probe.step_begin(step)
    copied = time.perf_counter()
    optimizer(grads)
    ending = time.perf_counter()
    probe.step_end(step)
    ended = time.perf_counter()
    return (copied - begun) * 1e3, (ended - ending) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    import mindspore as ms
    import numpy as np
    from mindformers.core.optim.adamw import AdamW

    from msmon.engine.probe.distributions import DistributionsProbe
    from msmon.engine.probe.window import Window
    from msmon.probe import ProbeKind, new_request

    ms.set_device("CPU")
    rng = np.random.default_rng(0)
    params = [ms.Parameter(ms.Tensor(rng.standard_normal(shape).astype(np.float32) * 0.02), name=name)
              for name, shape in shapes().items()]
    optimizer = AdamW(params, learning_rate=1e-3, betas=(0.9, 0.95))
    grads = tuple(ms.Tensor(rng.standard_normal(p.shape).astype(np.float32) * 1e-2) for p in params)
    networks = {"gradients": types.SimpleNamespace(weights=params, optimizer=optimizer),
                "none": types.SimpleNamespace(weights=params)}
    times: dict[str, list[tuple[float, float]]] = {kind: [] for kind in networks}
    lines = {}
    with tempfile.TemporaryDirectory() as temporary:
        window = Window(new_request(ProbeKind.DISTRIBUTIONS, args.rounds + 2, None), 1, args.rounds + 2)
        probes = {kind: DistributionsProbe(Path(temporary) / kind, 0, window, 1, network)
                  for kind, network in networks.items()}
        for probe in probes.values():
            probe.start()
        for step in range(1, args.rounds + 3):  # the first two warm up (the first opens the files)
            for kind in list(probes) if step % 2 else list(reversed(probes)):
                measured = timed_log(probes[kind], optimizer, grads, step)
                if step > 2:
                    times[kind].append(measured)
        lines = {kind: probe.stop(True) for kind, probe in probes.items()}
    print(f"{sum(int(np.prod(s)) for s in shapes().values()):,} weights, {len(params)} parameters, "
          f"{args.rounds} rounds")
    median = {kind: tuple(statistics.median(t[i] for t in times[kind]) for i in (0, 1)) for kind in networks}
    for kind in networks:
        print(f"{kind:10s} begin {median[kind][0]:7.2f} ms  end {median[kind][1]:7.1f} ms  ({lines[kind]})")
    print(f"with gradients / without: begin x{median['gradients'][0] / median['none'][0]:.2f}, "
          f"end x{median['gradients'][1] / median['none'][1]:.2f}")


if __name__ == "__main__":
    main()
