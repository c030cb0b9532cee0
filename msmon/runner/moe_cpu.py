"""CPU stand-ins for the ops of mindformers' mcore mixture-of-experts layer that have no CPU kernel in MindSpore 2.9.

mindformers 1.9 trains experts only through ``FFNGroupedGEMM`` (``moe_grouped_gemm: True``) with the ``alltoall``
token dispatcher. In graph mode on CPU its router and dispatcher stop at ``TopkExt`` (the top-k choice),
``SortExt``, ``FmodScalar``, ``IndexSelect``, ``CumsumExt`` (the permutation of tokens by expert), ``MoveTo`` (the
split sizes copied to the host) and its experts at ``GroupedMatmul`` and ``Swiglu``. msmon.runner.mcore_cpu puts
these stand-ins in their place in mindformers' modules before the network is built, one per op, each computing
what the op computes from ops that have a CPU kernel (and a gradient):

- ``TopkExt`` / ``SortExt``: ``TopK`` / ``Sort``, indices as int64;
- ``FmodScalar``: the remainder (``x - trunc(x / y) * y``); ``CumsumExt``: ``CumSum``; ``IndexSelect``: ``Gather``;
- ``MoveTo``: nothing (on a CPU the tensor is already on the host): the dispatcher is built without it;
- ``GroupedMatmul`` (``split_item 3``, ``group_type 0``, ``group_list`` cumulative): every expert's matmul on every
  row, each row keeping its own group's (rows past the last group stay zero, as in the op);
- ``Swiglu``: ``a * sigmoid(a) * b`` for the two halves ``a, b`` of the split axis.

Each is a ``jit_class`` (mindformers also creates some of them inside its graph functions).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Self

from msmon.foreign import Mindformers, Passed, Tensor


def moe_standins(modules: Mapping[str, ModuleType]) -> dict[str, type]:
    """role -> stand-in for the MoE roles of ``msmon.compat.MCORE_CPU_PATCHES`` (imports mindspore)."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.ops import operations as P

    class _Primitive:
        """The Python-side calls mindformers makes on the op objects it keeps (recompute, attributes)."""

        def recompute(self, mode: bool = True) -> Self:
            return self

        def add_prim_attr(self, name: str, value: Passed) -> Self:
            return self

    @ms.jit_class
    class MsmonCPUTopkExt(_Primitive):
        """``TopkExt(input, k, dim=-1, largest=True, sorted=True)`` on the last axis."""

        def __call__(self, x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Tensor:
            values, indices = P.TopK(sorted)(x, k)
            return values, ops.cast(indices, ms.int64)

    @ms.jit_class
    class MsmonCPUSortExt(_Primitive):
        """``SortExt(input, dim=-1, descending=False, stable=False)``."""

        def __call__(self, x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
            values, indices = ops.sort(x, dim, descending)
            return values, ops.cast(indices, ms.int64)

    @ms.jit_class
    class MsmonCPUFmodScalar(_Primitive):
        """``FmodScalar(input, other)``: the remainder with the sign of ``input``."""

        def __call__(self, x: Tensor, other: int) -> Tensor:
            return x - ops.cast(ops.trunc(ops.cast(x, ms.float64) / other), x.dtype) * other

    @ms.jit_class
    class MsmonCPUCumsumExt(_Primitive):
        """``CumsumExt(input, dim, dtype=None)``."""

        def __call__(self, x: Tensor, dim: int, dtype: Passed = None) -> Tensor:
            total = P.CumSum()(x, dim)
            return total if dtype is None else ops.cast(total, dtype)

    @ms.jit_class
    class MsmonCPUIndexSelect(_Primitive):
        """``IndexSelect(input, dim, index)``."""

        def __call__(self, x: Tensor, dim: int, index: Tensor) -> Tensor:
            return P.Gather()(x, index, dim)

    @ms.jit_class
    class MsmonCPUSwiglu(_Primitive):
        """``Swiglu(input, dim=-1)``: Swish of the first half times the second half."""

        def __call__(self, x: Tensor, dim: int = -1) -> Tensor:
            first, second = ops.split(x, x.shape[dim] // 2, dim)
            return first * ops.sigmoid(first) * second

    @ms.jit_class
    class MsmonCPUGroupedMatmul(_Primitive):
        """``GroupedMatmul(split_item=3, group_type=0)([x], [w], ..., group_list)`` with ``group_list`` the cumulative
        row counts of the ``E`` groups: rows ``[group_list[e-1], group_list[e])`` of ``x`` (T, h) times ``w[e]``
        (E, h, H)."""

        def __init__(self, split_item: int = 3, group_type: int = 0, transpose_a: bool = False,
                     transpose_b: bool = False) -> None:
            self.transpose_b = transpose_b

        def __call__(self, x: Tensor, weight: Tensor, bias: Passed = None, scale: Passed = None,
                     offset: Passed = None, antiquant_scale: Passed = None, antiquant_offset: Passed = None,
                     group_list: Passed = None) -> tuple[Tensor]:
            rows, experts = x[0], weight[0]
            count = experts.shape[0]
            index = ops.reshape(ops.arange(0, rows.shape[0], 1, dtype=ms.int64), (-1, 1))
            ends = ops.reshape(ops.cast(group_list, ms.int64), (1, -1))
            group = ops.cast(ops.reduce_sum(ops.cast(index >= ends, ms.float32), 1), ms.int32)
            keep = ops.one_hot(group, count, ops.ones((), rows.dtype), ops.zeros((), rows.dtype))  # (T, E)
            every = P.BatchMatMul(transpose_b=self.transpose_b)(ops.tile(ops.expand_dims(rows, 0), (count, 1, 1)),
                                                                experts)  # (E, T, H)
            keep = ops.expand_dims(ops.transpose(keep, (1, 0)), 2)  # (E, T, 1)
            return (ops.reduce_sum(every * keep, 0),)

    dispatcher = modules["dispatcher"].MoEAlltoAllTokenDispatcher

    class MsmonCPUMoEAlltoAllTokenDispatcher(dispatcher):  # type: ignore[misc, valid-type]
        """mindformers' alltoall dispatcher without the device-to-host copy (``MoveTo``) of the split sizes."""

        def __init__(self, config: Mindformers) -> None:
            super().__init__(config)
            self.d2h = _HostCopy()

    @ms.jit_class
    class _HostCopy(_Primitive):
        """``MoveTo(x, "CPU", blocking)`` on a CPU: ``x`` itself."""

        def __call__(self, x: Tensor, to: str = "CPU", blocking: bool = True) -> Tensor:
            return x

    return {
        "topk": MsmonCPUTopkExt,
        "sort": MsmonCPUSortExt,
        "fmod": MsmonCPUFmodScalar,
        "cumsum": MsmonCPUCumsumExt,
        "index_select": MsmonCPUIndexSelect,
        "swiglu": MsmonCPUSwiglu,
        "grouped_matmul": MsmonCPUGroupedMatmul,
        "dispatcher": MsmonCPUMoEAlltoAllTokenDispatcher,
    }
