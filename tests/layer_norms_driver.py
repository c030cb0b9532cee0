"""Child process for the per-layer gradient norm tests: one quickstart (legacy Llama or mcore Qwen3) trained by the
real mindformers Trainer, monitored with ``layer_grad_norm`` and health, each model path in its own process.

    python layer_norms_driver.py WORKDIR MODEL STEPS INTERVAL [GROW_FROM FACTOR]

With GROW_FROM, a test callback makes block 1's gradients grow from that step on without changing what the
network computes: at every step end it divides some of the block's weights by FACTOR and multiplies the weights
that undo it by FACTOR (the legacy attention's wq/wk and wv/wo and its ffn's w3/w2; the mcore linear_qkv, whose
query and key are normalised by the qk layer norms, and linear_proj). A weight divided by c has c times its
gradient. Writes ``outputs.json`` (per step: mindformers' global norm and the raw squared sums of ``net_outputs[5]``,
the wrapper's parameter names) and prints one JSON line: the run directory and the settings used.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_training import QUICKSTARTS, quickstart_parts, write_quickstart_config  # noqa: E402

from msmon.config.coerce import build  # noqa: E402
from msmon.config.schema import MINDFORMERS_MONITOR_KEYS, MonitorSettings  # noqa: E402

METRICS = ["loss", "grad_norm", "layer_grad_norm", "learning_rate", "step_time_ms"]
BLOCK = 1
#: (divided, multiplied) weight pairs of block BLOCK whose product the network computes with.
PAIRS = {
    "legacy": [("attention.wq", "attention.wk"), ("attention.wv", "attention.wo"),
               ("feed_forward.w3", "feed_forward.w2")],
    "mcore": [("self_attention.linear_qkv", "self_attention.linear_proj")],
}
PREFIX = {"legacy": f"model.layers.{BLOCK}.", "mcore": f"decoder.layers.{BLOCK}."}


def main() -> int:
    work, model, steps, interval = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    grow_from, factor = (int(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 else (None, 1.0)
    os.chdir(work)
    path = write_quickstart_config(
        work, steps=steps, source=QUICKSTARTS[model], log_interval=interval, track_metrics=METRICS,
        monitor_type=["file", "mindinsight", "tensorboard"], project_name="layers", run_name=model,
        save_dir=str(work.parent / "monitor_logs"),
    )
    training, ours = quickstart_parts(path)
    settings, findings = build(MonitorSettings, ours, "monitor_config", ignore=MINDFORMERS_MONITOR_KEYS)
    assert not findings, findings
    import mindspore as ms
    from mindspore.train import Callback

    from msmon.engine.session import MonitorSession
    from msmon.health import attach
    from msmon.runner.trainer import train

    outputs: dict[int, dict] = {}
    names: list[str] = []

    class Outputs(Callback):
        def on_train_step_end(self, run_context):
            params = run_context.original_args()
            out = params.net_outputs
            outputs[params.cur_step_num] = {"global_norm": float(out[4].asnumpy().item()),
                                            "squares": [float(v) for v in out[5].asnumpy().reshape(-1)]}
            if not names:
                names.extend(p.name for p in params.train_network.optimizer.parameters)

    class Grow(Callback):
        def on_train_step_end(self, run_context):
            params = run_context.original_args()
            if grow_from is None or params.cur_step_num < grow_from:
                return
            weights = {p.name: p for p in params.train_network.optimizer.parameters}
            for divided, multiplied in PAIRS[model]:
                for name, scale in ((divided, 1 / factor), (multiplied, factor)):
                    weight = weights[f"{PREFIX[model]}{name}.weight"]
                    weight.set_data(ms.Tensor(weight.asnumpy() * scale))

    run_dir = settings.run_dir()
    session = MonitorSession(settings, run_dir, config=training).start()
    health = attach(session, settings, run_dir, training)
    try:
        train(training, [session.callback(), Outputs(), Grow()], work / "logs")
    finally:
        session.close("completed")
        health.close()
    (work / "outputs.json").write_text(json.dumps({"names": names, "steps": outputs}), encoding="utf-8")
    print(json.dumps({"run_dir": str(run_dir), "training_wrapper": training.get("runner_wrapper")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
