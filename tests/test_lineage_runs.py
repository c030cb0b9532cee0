"""Runs compared where users already look: the canonical runs (tests/canonical.py) of both quickstarts (three
learning rates on the legacy Llama, one mcore Qwen3, one interrupted), read back by MindInsight's REST API (the
session's real `mindinsight start`: Lineage Analysis and the hyperparameter-importance endpoint), TensorBoard's
event reader and HParams plugin metadata, and the session's real MLflow server."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from canonical import PROJECT, git_commit, session_mindinsight, session_mlflow
from conftest import run_msmon
from engine_support import get_json, post_json, wait_until

from msmon.compat import marshmallow_breaks_mindinsight_search, package_version, pandas_breaks_mindinsight_lineage

pytestmark = [pytest.mark.board]

RATES = {"lr_1e_3": 1e-3, "completed_legacy": 5e-3, "lr_2e_2": 2e-2}
QWEN3 = "completed_mcore"
INTERRUPTED = "interrupted_legacy"
#: The filter MindInsight's own Lineage Analysis page sends (its ui/dist tableFilter).
PAGE_FILTER = {"lineage_type": {"in": ["model"]}, "sorted_name": "summary_dir", "sorted_type": "ascending"}
PANDAS_2 = pandas_breaks_mindinsight_lineage(package_version("pandas"))
MARSHMALLOW_4 = marshmallow_breaks_mindinsight_search(package_version("marshmallow"))


@pytest.fixture
def runs(canonical) -> dict[str, Any]:
    """The five runs, built (once per session) before any board reads them."""
    return {name: canonical(name) for name in (*RATES, QWEN3, INTERRUPTED)}


def run_dir(runs: dict[str, Any], name: str) -> Path:
    return runs[name].run_dir


def records(runs: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return runs[name].records()


def lineages(names: list[str]) -> dict[str, dict[str, Any]]:
    """MindInsight's Lineage Analysis list (POST /lineagemgr/lineages), train_id -> model_lineage, once every run of
    ``names`` is listed with its end state."""
    url = f"{session_mindinsight()}/lineagemgr/lineages"

    def listed() -> dict[str, dict[str, Any]] | None:
        objects = post_json(url, {}, timeout=30)["object"]
        found = {o["summary_dir"]: o["model_lineage"] for o in objects}
        wanted = [found.get(f"./{name}") for name in names]
        done = all(v is not None and v["user_defined"].get("status") not in (None, "running") for v in wanted)
        return found if done else None

    found = wait_until(listed, 120, interval=1)
    assert found, post_json(url, {}, timeout=30)
    return found


ALL = [*RATES, QWEN3, INTERRUPTED]


def test_every_run_ended_as_expected(runs: dict[str, Any]) -> None:
    for name in (*RATES, QWEN3):
        run = runs[name]
        assert run.code == 0, (name, run.output[-3000:])
        assert [r["step"] for r in records(runs, name)] == list(range(run.log_interval, run.steps + 1,
                                                                       run.log_interval))
    assert runs[INTERRUPTED].code == 130
    assert json.loads((run_dir(runs, INTERRUPTED) / "run.json").read_text())["status"] == "interrupted"


def test_mindinsight_lineage_lists_every_run_with_its_learning_rate_and_final_loss(runs: dict[str, Any]) -> None:
    found = lineages(ALL)
    for name, lr in RATES.items():
        lineage = found[f"./{name}"]
        # the lineage proto holds loss and learning_rate as float32: MindInsight returns 6.417086 for 6.417086124420166
        final = pytest.approx(records(runs, name)[-1]["loss"], rel=1e-6)
        assert lineage["learning_rate"] == pytest.approx(lr, rel=1e-12)
        assert lineage["loss"] == final and lineage["metric"]["final_loss"] == final
        assert lineage["metric"]["best_loss"] == pytest.approx(min(r["loss"] for r in records(runs, name)), rel=1e-6)
        assert lineage["metric"]["steps"] == runs[name].steps and lineage["user_defined"]["status"] == "completed"
        assert (lineage["optimizer"], lineage["batch_size"], lineage["epoch"], lineage["device_num"]) == (
            "AdamW", 2, 1, 1)
        assert lineage["network"] == "LlamaForCausalLM" and lineage["user_defined"]["num_layers"] == 2
        assert lineage["train_dataset_path"].endswith("quickstart-v1.mindrecord")
    interrupted = found[f"./{INTERRUPTED}"]
    assert interrupted["user_defined"]["status"] == "interrupted"
    assert interrupted["metric"]["steps"] == records(runs, INTERRUPTED)[-1]["step"] < runs[INTERRUPTED].steps


def test_mindinsight_reads_the_mcore_hyperparameters(runs: dict[str, Any]) -> None:
    lineage = lineages(ALL)[f"./{QWEN3}"]
    assert lineage["network"] == "Qwen3ForCausalLM" and lineage["learning_rate"] == 5e-3
    assert {k: lineage["user_defined"][k] for k in ("num_layers", "num_heads", "num_kv_heads", "hidden_size",
                                                    "intermediate_size", "vocab_size", "seq_length", "param_dtype",
                                                    "lr_schedule", "seed")} == {
        "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "hidden_size": 64, "intermediate_size": 256,
        "vocab_size": 1000, "seq_length": 64, "param_dtype": "float32", "lr_schedule": "ConstantWarmUpLR", "seed": 42}
    assert lineage["metric"]["final_loss"] == pytest.approx(records(runs, QWEN3)[-1]["loss"], rel=1e-6)


@pytest.mark.xfail(MARSHMALLOW_4, strict=True, reason="MindInsight 2.3.1's validators lack marshmallow 4's data_key")
def test_mindinsight_lineage_page_search_answers(runs: dict[str, Any]) -> None:
    lineages(ALL)
    answer = post_json(f"{session_mindinsight()}/lineagemgr/lineages", PAGE_FILTER, timeout=30)
    listed = [o["summary_dir"] for o in answer["object"]]
    assert listed == sorted(listed) and {f"./{n}" for n in ALL} <= set(listed)
    assert {"metric/final_loss", "user_defined/num_layers"} <= set(answer["customized"])


@pytest.mark.xfail(PANDAS_2 or MARSHMALLOW_4, strict=True, reason="MindInsight 2.3.1 needs pandas < 2 (it calls "
                   "DataFrame.iteritems) and marshmallow < 4; the constraints pin pandas 1.5.3, marshmallow 3.26.2")
def test_mindinsight_hyperparameter_importance_answers(runs: dict[str, Any]) -> None:
    lineages(ALL)
    with_lr = {"summary_dir": {"in": [f"./{name}" for name in RATES]}}
    answer = post_json(f"{session_mindinsight()}/optimizer/targets/search", with_lr, timeout=60)
    assert answer["metadata"]["train_ids"] and sorted(answer["metadata"]["train_ids"]) == sorted(
        f"./{name}" for name in RATES)
    targets = {t["name"]: t for t in answer["targets"]}
    assert {"[M]final_loss", "[M]best_loss", "loss"} <= set(targets)
    importance = {h["name"]: h for h in targets["[M]final_loss"]["hyper_parameters"]}
    assert 0 < importance["learning_rate"]["importance"] <= 1  # three runs that differ only in it
    lrs = next(p for p in answer["metadata"]["possible_hyper_parameters"] if p["name"] == "learning_rate")
    assert sorted(lrs["data"]) == sorted(RATES.values())


def _tensorboard(path: Path) -> tuple[dict[str, Any], Any, dict[str, list[float]]]:
    """(HParams of the session start, the session end, scalar tag -> values) read by TensorBoard itself."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    accumulator = EventAccumulator(str(path))
    accumulator.Reload()
    content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    hparams = {k: v.string_value if v.HasField("string_value") else v.number_value for k, v in start.hparams.items()}
    scalars = {tag: [e.value for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}
    return hparams, end, scalars


def test_tensorboard_reads_the_hparams_of_every_run(runs: dict[str, Any]) -> None:
    from tensorboard.plugins.hparams import api_pb2

    for name, lr in RATES.items():
        hparams, end, scalars = _tensorboard(run_dir(runs, name))
        assert hparams["learning_rate"] == lr and hparams["optimizer"] == "AdamW" and hparams["num_layers"] == 2
        assert hparams["model"] == "LlamaForCausalLM" and hparams["lr_schedule"] == "CosineWithWarmUpLR"
        assert end.status == api_pb2.STATUS_SUCCESS
        final = records(runs, name)[-1]["loss"]
        assert scalars["final_loss"] == [pytest.approx(final, rel=1e-6)] and scalars["steps"] == [runs[name].steps]
    hparams, _, _ = _tensorboard(run_dir(runs, QWEN3))
    assert (hparams["num_layers"], hparams["num_kv_heads"], hparams["model"]) == (2, 2, "Qwen3ForCausalLM")
    _, end, _ = _tensorboard(run_dir(runs, INTERRUPTED))
    assert end.status == api_pb2.STATUS_UNKNOWN  # the plugin has no "aborted"


def test_mlflow_returns_params_tags_and_results(runs: dict[str, Any]) -> None:
    url = session_mlflow()
    experiment = get_json(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name={PROJECT}")
    found = post_json(f"{url}/api/2.0/mlflow/runs/search",
                      {"experiment_ids": [experiment["experiment"]["experiment_id"]], "max_results": 1000}, timeout=30)
    by_name = {run["info"]["run_name"]: run for run in found["runs"]}
    assert set(by_name) >= set(ALL)
    versions = {name: package_version(name) for name in ("msmon", "mindspore", "mindformers")}
    for name, lr in RATES.items():
        run = by_name[name]
        params = {p["key"]: p["value"] for p in run["data"]["params"]}
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
        assert float(params["hp.learning_rate"]) == lr and params["lr_schedule.learning_rate"] == str(lr)
        assert params["hp.optimizer"] == "AdamW" and params["hp.num_layers"] == "2"
        closing = {key: json.loads((run_dir(runs, name) / "run.json").read_text()).get(key)
                   for key in ("backends", "backends_failed_to_close")}  # why, if the end state is missing
        assert (tags["msmon.status"], run["info"]["status"]) == ("completed", "FINISHED"), closing
        assert tags["mlflow.source.git.commit"] == git_commit()
        assert {k: tags[f"msmon.{k}_version"] for k in versions} == versions
        assert metrics["final_loss"] == pytest.approx(records(runs, name)[-1]["loss"], rel=1e-6)
        assert metrics["steps"] == runs[name].steps
    qwen3 = {p["key"]: p["value"] for p in by_name[QWEN3]["data"]["params"]}
    assert (qwen3["hp.num_layers"], qwen3["hp.num_kv_heads"], qwen3["hp.model"]) == ("2", "2", "Qwen3ForCausalLM")
    interrupted = by_name[INTERRUPTED]
    assert interrupted["info"]["status"] == "KILLED"
    assert {t["key"]: t["value"] for t in interrupted["data"]["tags"]}["msmon.status"] == "interrupted"
    assert not math.isnan(float(qwen3["hp.learning_rate"]))


def test_compare_puts_the_learning_rate_first(runs: dict[str, Any]) -> None:
    result = run_msmon("compare", *(str(run_dir(runs, name)) for name in RATES), env={"COLUMNS": "200"})
    assert result.code == 0, result.stderr
    differing = result.stdout[result.stdout.index("Config keys that differ"):]
    assert differing.index("lr_schedule.learning_rate") < differing.index("monitor_config")
