"""A test callback that reads the MoE routers' token shares independently of msmon (``REGISTER_PATH`` = this
directory; ``callbacks[0]: {type: MFLossMonitor, auto_register: moe_callbacks.DumpRouting}``).

``DumpRouting`` takes ``MFLossMonitor``'s place: importing this module registers it under that name (mindformers'
registry keeps the last class registered under a name), so the Trainer builds it with the arguments it gives the
stock monitor, first of all callbacks. At every step end, before ``MFLossMonitor`` zeroes them, it appends each MoE
layer's ``fi_accu`` (the router's per-expert share of the step's routed token slots, ``gbs_aux_loss``) to the file
``$MSMON_TEST_ROUTING_DUMP`` as ``{"step": N, "layers": {"0": [...], ...}}``, then does what ``MFLossMonitor`` does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mindformers.core.callback.callback import MFLossMonitor
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister
from mindformers.wrapper.wrapper import get_real_models


class DumpRouting(MFLossMonitor):
    def on_train_step_end(self, run_context: Any) -> None:
        cb_params = run_context.original_args()
        model = get_real_models(cb_params.train_network).get_gpt_model()
        layers = {str(i): layer.mlp.router.fi_accu.asnumpy().tolist() for i, layer in enumerate(model.decoder.layers)
                  if hasattr(getattr(layer, "mlp", None), "router")}
        output = Path(os.environ["MSMON_TEST_ROUTING_DUMP"])
        with output.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"step": int(cb_params.cur_step_num), "layers": layers}) + "\n")
        super().on_train_step_end(run_context)


MindFormerRegister.register_cls(DumpRouting, MindFormerModuleType.CALLBACK, "MFLossMonitor")
