"""msmon's CPU stand-ins for the MoE layer's ops compute what the ops compute (msmon/runner/moe_cpu.py).

Each stand-in runs in MindSpore's graph mode on the CPU (inside a Cell, as mindformers calls them) and is compared
with the op's documented result computed in numpy. In a child process: the graph-mode context is process-wide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r'''
import json, types
import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from msmon.runner.moe_cpu import moe_standins

ms.set_context(mode=0, device_target="CPU")
s = moe_standins({"dispatcher": types.SimpleNamespace(MoEAlltoAllTokenDispatcher=object)})
rng = np.random.default_rng(0)


class Apply(nn.Cell):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def construct(self, *args):
        return self.fn(*args)


def topk(x):
    return s["topk"]()(x, 2)
def sort(x):
    return s["sort"]()(x, dim=1)
def fmod(x):
    return s["fmod"]()(x, 5)
def cumsum(x):
    return s["cumsum"]()(x, 0)
def index_select(x, index):
    return s["index_select"]()(x, 0, index)
def swiglu(x):
    return s["swiglu"]()(x, -1)
def grouped(x, w, ends):
    return s["grouped_matmul"](split_item=3, group_type=0)([x], [w], None, None, None, None, None, ends)[0]


out = {}
x = rng.standard_normal((1, 6, 4)).astype(np.float32)
values, indices = Apply(topk)(Tensor(x))
order = np.argsort(-x, axis=-1)[..., :2]
out["topk"] = [float(np.abs(values.asnumpy() - np.take_along_axis(x, order, -1)).max()),
               int((indices.asnumpy() != order).sum()), str(indices.dtype)]
row = rng.permutation(8).astype(np.float32).reshape(1, 8)
values, indices = Apply(sort)(Tensor(row))
out["sort"] = [float(np.abs(values.asnumpy() - np.sort(row, 1)).max()),
               int((indices.asnumpy() != np.argsort(row, 1)).sum()), str(indices.dtype)]
ints = np.array([0, 3, 7, 12, -7], np.int64)
out["fmod"] = int((Apply(fmod)(Tensor(ints)).asnumpy() != np.fmod(ints, 5)).sum())
counts = np.array([2, 0, 3, 1], np.int64)
out["cumsum"] = int((Apply(cumsum)(Tensor(counts)).asnumpy() != np.cumsum(counts)).sum())
table = rng.standard_normal((6, 3)).astype(np.float32)
pick = np.array([4, 0, 4, 2], np.int64)
out["index_select"] = float(np.abs(Apply(index_select)(Tensor(table), Tensor(pick)).asnumpy() - table[pick]).max())
halves = rng.standard_normal((5, 8)).astype(np.float32)
a, b = halves[:, :4], halves[:, 4:]
out["swiglu"] = float(np.abs(Apply(swiglu)(Tensor(halves)).asnumpy() - a / (1 + np.exp(-a)) * b).max())
rows = rng.standard_normal((7, 3)).astype(np.float32)
weights = rng.standard_normal((3, 3, 5)).astype(np.float32)
ends = np.array([2, 2, 6], np.int64)  # expert 0: rows 0-1, expert 1: none, expert 2: rows 2-5, row 6 in no group
expected = np.zeros((7, 5), np.float32)
expected[0:2] = rows[0:2] @ weights[0]
expected[2:6] = rows[2:6] @ weights[2]
out["grouped_matmul"] = float(np.abs(Apply(grouped)(Tensor(rows), Tensor(weights), Tensor(ends)).asnumpy()
                                     - expected).max())
print("RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    cwd = tmp_path_factory.mktemp("moe_cpu")
    script = cwd / "standins.py"  # MindSpore compiles graph functions from a source file only
    script.write_text(CHILD, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, proc.stderr[-3000:]
    return json.loads(line.removeprefix("RESULT "))


def test_top_k_and_sort_give_the_values_and_int64_indices_of_the_ops(results: dict) -> None:
    for name in ("topk", "sort"):
        error, wrong, dtype = results[name]
        assert error < 1e-6 and wrong == 0 and dtype == "Int64", (name, results[name])


def test_fmod_keeps_the_sign_of_the_dividend_cumsum_and_index_select_are_exact(results: dict) -> None:
    assert results["fmod"] == 0 and results["cumsum"] == 0 and results["index_select"] == 0.0


def test_swiglu_is_swish_of_the_first_half_times_the_second(results: dict) -> None:
    assert results["swiglu"] < 1e-5


def test_grouped_matmul_multiplies_each_group_by_its_expert_and_leaves_rows_past_the_groups_zero(results: dict
                                                                                                 ) -> None:
    assert results["grouped_matmul"] < 1e-5
