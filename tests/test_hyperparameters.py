"""The one set of hyperparameters per run (msmon/config/hyperparameters.py), read from both model paths."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers_training import QUICKSTART, QUICKSTART_QWEN3, shipped_mindformers_yaml

from msmon.compat import missing_feature
from msmon.config.hyperparameters import HYPERPARAMETERS, RESULTS, RunResults, config_key_rank, hyperparameters
from msmon.config.loader import load_config
from msmon.view.compare import differing_keys

SHARED = {"learning_rate": 5e-3, "optimizer": "AdamW", "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.0,
          "batch_size": 2, "epochs": 1, "seq_length": 64, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
          "vocab_size": 1000, "compute_dtype": "float32", "param_dtype": "float32", "data_parallel": 1,
          "model_parallel": 1, "pipeline_stage": 1, "world_size": 1, "warmup_ratio": 0.05}


def _resolved(path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    monkeypatch.setenv("MSMON_CACHE_DIR", str(tmp_path / "cache"))
    return load_config(path).resolved()


def test_legacy_llama_quickstart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = hyperparameters(_resolved(QUICKSTART, monkeypatch, tmp_path))
    assert found.items() >= {**SHARED, "lr_schedule": "CosineWithWarmUpLR", "lr_end": 5e-4, "seed": 0,
                             "model": "LlamaForCausalLM", "max_grad_norm": 1.0}.items()
    assert found["data_path"].endswith("quickstart-v1.mindrecord")
    assert "num_kv_heads" not in found  # the legacy quickstart does not set n_kv_heads: absent, not guessed


def test_mcore_qwen3_quickstart_reads_the_mcore_spellings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = hyperparameters(_resolved(QUICKSTART_QWEN3, monkeypatch, tmp_path))
    # num_hidden_layers, num_attention_heads, num_key_value_heads, params_dtype, architectures
    assert found.items() >= {**SHARED, "lr_schedule": "ConstantWarmUpLR", "seed": 42, "model": "Qwen3ForCausalLM",
                             "num_kv_heads": 2, "intermediate_size": 256}.items()
    assert found["data_path"].endswith("quickstart_qwen3-v1.mindrecord")


@pytest.mark.skipif(missing_feature("qwen3_train_configs") is not None, reason="mindformers ships no Qwen3 config")
def test_mindformers_shipped_qwen3_config() -> None:
    path = shipped_mindformers_yaml("pretrain_qwen3_32b_4k.yaml")
    found = hyperparameters(load_config(path).resolved())
    assert found.items() >= {"learning_rate": 1e-6, "num_layers": 64, "hidden_size": 5120, "num_heads": 64,
                             "num_kv_heads": 8, "vocab_size": 151936, "seq_length": 4096, "compute_dtype": "bfloat16",
                             "param_dtype": "float32", "model_parallel": 4, "pipeline_stage": 4,
                             "world_size": 16}.items()
    assert found["data_path"] == "1 /path/to/wiki103-megatron_text_document"  # Megatron's weight-path list


def test_values_are_numbers_or_text_and_absent_ones_are_left_out() -> None:
    config = {"lr_schedule": {"learning_rate": "1.e-4", "warmup_steps": 0}, "optimizer": {"betas": [0.8]},
              "seed": True, "use_parallel": True, "parallel_config": {"data_parallel": 2, "model_parallel": 2}}
    found = hyperparameters(config)
    assert found == {"learning_rate": 1e-4, "warmup_steps": 0, "beta1": 0.8, "data_parallel": 2, "model_parallel": 2,
                     "world_size": 4}
    assert isinstance(found["warmup_steps"], int)


def test_results_follow_the_records() -> None:
    results = RunResults().add([{"step": 10, "loss": 3.0}, {"step": 20, "loss": 1.5}, {"step": 30, "loss": "NaN"},
                                {"step": 40}])
    assert results.steps == 40 and math.isnan(results.final_loss)
    assert (results.best_loss, results.best_step) == (1.5, 20)
    assert list(results.values("failed")) == list(RESULTS)
    assert RunResults().values("failed") == {"steps": 0, "status": "failed"}


def test_compare_puts_the_same_hyperparameters_first_in_their_order() -> None:
    a = {"zeta": 1, "seed": 0, "model": {"model_config": {"num_hidden_layers": 2}}, "monitor_config": {"x": 1},
         "eval_dataset": {"batch_size": 1}, "lr_schedule": {"learning_rate": 1e-3}, "optimizer": {"betas": [0.9, 0.9]}}
    b = {"zeta": 2, "seed": 1, "model": {"model_config": {"num_hidden_layers": 4}}, "monitor_config": {"x": 2},
         "eval_dataset": {"batch_size": 2}, "lr_schedule": {"learning_rate": 1e-2}, "optimizer": {"betas": [0.9, 0.95]}}
    assert [key for key, _ in differing_keys([a, b])] == [
        "lr_schedule.learning_rate", "optimizer.betas", "model.model_config.num_hidden_layers", "seed",
        "eval_dataset.batch_size", "zeta", "monitor_config.x",
    ]
    assert config_key_rank("lr_schedule.learning_rate") == (0, 0)
    assert len({hp.name for hp in HYPERPARAMETERS}) == len(HYPERPARAMETERS)
