"""A valid CPU training config (text) that the validate tests mutate."""

from __future__ import annotations

from typing import Any

import yaml

BASE_YAML = """\
seed: 0
run_mode: train
trainer:
  type: CausalLanguageModelingTrainer
  model_name: llama_tiny
context:
  mode: 0
  device_target: CPU
runner_config:
  epochs: 1
  batch_size: 2
  sink_mode: False
runner_wrapper:
  type: MsmonCPUTrainOneStepCell
  use_clip_grad: True
lr_schedule:
  type: CosineWithWarmUpLR
  learning_rate: 5.e-3
  warmup_steps: 10
  total_steps: 200
model:
  model_config:
    type: LlamaConfig
    fused_rms_norm: False
    use_flash_attention: False
    compute_dtype: float32
monitor_config:
  enable_monitor: True
  monitor_type: [file]
  project_name: demo
  run_name: r1
  log_interval: 10
  track_metrics: [loss, grad_norm, learning_rate, throughput, global_step]
  save_dir: ./monitor_logs
"""


def base_config() -> dict[str, Any]:
    return yaml.safe_load(BASE_YAML)


def with_monitor(**changes: Any) -> str:
    """BASE_YAML with monitor_config keys replaced (None deletes a key)."""
    data = base_config()
    for key, value in changes.items():
        if value is None:
            data["monitor_config"].pop(key, None)
        else:
            data["monitor_config"][key] = value
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


def with_section(path: str, value: Any) -> str:
    """BASE_YAML with one dotted key set."""
    data = base_config()
    node = data
    *parents, last = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
