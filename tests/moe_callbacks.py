"""A test callback that reads the MoE routers' token shares independently of msmon (``REGISTER_PATH`` = this
directory; ``callbacks[0]: {type: MFLossMonitor, auto_register: moe_callbacks.DumpRouting}``), and a test-only
fault: a router pushed towards one expert from a known step.

``DumpRouting`` takes ``MFLossMonitor``'s place: importing this module registers it under that name (mindformers'
registry keeps the last class registered under a name), so the Trainer builds it with the arguments it gives the
stock monitor, first of all callbacks. At every step end, before ``MFLossMonitor`` zeroes them, it appends each MoE
layer's ``fi_accu`` (the router's per-expert share of the step's routed token slots, ``gbs_aux_loss``) to the file
``$MSMON_TEST_ROUTING_DUMP`` as ``{"step": N, "layers": {"0": [...], ...}}``, then does what ``MFLossMonitor`` does.

``$MSMON_TEST_ROUTER_PUSH`` = ``LAYER:EXPERT:STEP``: importing this module adds a fixed bias to the routers' logits
(``TopKRouter.gating``, read when the graph compiles at the first step), which ``DumpRouting`` gives every router at
the train's begin as an untrained parameter (``msmon_test_push``, zeros: the routing is unchanged); at the end of step
STEP it sets layer LAYER's bias for expert EXPERT to ``PUSH``: from step STEP + 1 on that router sends every token to
that expert (and its other top-k choices as before).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from mindformers.core.callback.callback import MFLossMonitor
from mindformers.parallel_core.training_graph.transformer.moe.router import TopKRouter
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
from mindformers.wrapper.wrapper import get_real_models
from mindspore import Parameter, Tensor

PUSH = 10.0  # added to one expert's logit: after the softmax it wins every token
_PUSH_ENV = os.environ.get("MSMON_TEST_ROUTER_PUSH")
_PUSH_AT = tuple(int(part) for part in _PUSH_ENV.split(":")) if _PUSH_ENV else None


class DumpRouting(MFLossMonitor):
    def on_train_begin(self, run_context: Any) -> None:
        if _PUSH_AT is not None:
            model = get_real_models(run_context.original_args().train_network).get_gpt_model()
            for layer in model.decoder.layers:
                router = layer.mlp.router
                router.msmon_test_push = Parameter(Tensor(np.zeros(router.expert_dim, np.float32)),
                                                   name="msmon_test_push", requires_grad=False)
        super().on_train_begin(run_context)

    def on_train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        model = get_real_models(cb_params.train_network).get_gpt_model()
        routers = {str(i): layer.mlp.router for i, layer in enumerate(model.decoder.layers)
                   if hasattr(getattr(layer, "mlp", None), "router")}
        layers = {index: router.fi_accu.asnumpy().tolist() for index, router in routers.items()}
        output = Path(os.environ["MSMON_TEST_ROUTING_DUMP"])
        with output.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"step": int(cb_params.cur_step_num), "layers": layers}) + "\n")
        if _PUSH_AT is not None and int(cb_params.cur_step_num) == _PUSH_AT[2]:
            push = routers[str(_PUSH_AT[0])].msmon_test_push
            bias = np.zeros(push.shape, np.float32)
            bias[_PUSH_AT[1]] = PUSH
            push.set_data(Tensor(bias))
        super().on_train_step_end(run_context)


def _pushed_gating(self: Any, inputs: Any) -> Any:
    """``Router.gating`` (mindformers 1.9), the push added to its logits."""
    weight = self.weight.astype(self.moe_router_dtype)
    return self.linear(inputs.astype(self.moe_router_dtype), weight) + self.msmon_test_push


if _PUSH_AT is not None:
    TopKRouter.gating = _pushed_gating

MindFormerRegister.register_cls(DumpRouting, MindFormerModuleType.CALLBACK, "MFLossMonitor")
