"""The config msmon hands mindformers (``mindformers.yaml``, ``msmon export``) is the user's config as mindformers
itself loads it: mindformers' config template applied, its own YAML parser's values, msmon's keys removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import run_msmon
from helpers_training import QUICKSTARTS, QUICKSTARTS_DIR, parse_step_lines, write_quickstart_config
from launch import msmon_env
from test_validate_mindformers_configs import CONFIGS

from msmon.config.loader import load_config
from msmon.config.mindformers_yaml import check_run_mode, mindformers_config, render
from msmon.errors import MsmonError

#: Loads each config twice with mindformers' own MindFormerConfig (the template applied): from the user's YAML, as
#: run_mindformer.py does (``--run_mode train`` where the YAML has none), and from msmon's mindformers.yaml.
COMPARE = """
import json, sys
from pathlib import Path
import yaml
from mindformers import MindFormerConfig
from msmon.config.loader import load_config
from msmon.config.mindformers_yaml import mindformers_config, render
from msmon.util.mapping import flatten

def plain(config):
    return flatten(json.loads(json.dumps(config, default=str)))

differences = {}
for index, path in enumerate(sys.argv[2:]):
    mode = {} if "run_mode" in (yaml.safe_load(open(path)) or {}) else {"run_mode": "train"}
    theirs = plain(MindFormerConfig(path, **mode))
    written = Path(sys.argv[1]) / f"{index}.yaml"
    written.write_text(render(mindformers_config(load_config(path))))
    ours = plain(MindFormerConfig(str(written)))
    keys = set(theirs) | set(ours)
    differences[path] = sorted(k for k in keys if theirs.get(k, "<absent>") != ours.get(k, "<absent>"))
print("DIFFERENCES " + json.dumps(differences))
"""


def training_configs() -> list[Path]:
    """mindformers' shipped YAMLs that train (a trainer and a model: not the checkpoint converters)."""
    found = []
    for path in CONFIGS:
        data = yaml.safe_load(path.read_text()) or {}
        if "model" in data and "trainer" in data:
            found.append(path)
    return found


def test_every_shipped_config_loads_in_mindformers_exactly_as_run_mindformer_loads_it(tmp_path: Path) -> None:
    paths = training_configs()
    assert len(paths) >= 20
    env = {**os.environ, "LOCAL_DEFAULT_PATH": str(tmp_path / "mindformers")}
    proc = subprocess.run([sys.executable, "-c", COMPARE, str(tmp_path), *map(str, paths)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env=env)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DIFFERENCES ")), None)
    assert line is not None, proc.stderr[-3000:]
    differences = json.loads(line.removeprefix("DIFFERENCES "))
    assert set(differences) == {str(p) for p in paths}
    assert {path: keys for path, keys in differences.items() if keys} == {}


def test_msmon_keys_go_overrides_and_interpolations_are_resolved_mindformers_values_stay(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path)
    text = config.read_text()
    assert "  weight_decay: 0.0\n" in text
    config.write_text(text.replace("  weight_decay: 0.0\n", "  weight_decay: 1e-5\n"))  # PyYAML: the string '1e-5'
    training = mindformers_config(load_config(config, ["runner_config.epochs=3"]))
    assert training["runner_config"]["epochs"] == 3
    assert training["optimizer"]["weight_decay"] == "1e-5"  # what mindformers' yaml.safe_load makes of it
    assert "${" not in render(training) and training["train_dataset"]["data_loader"]["dataset_dir"].endswith(
        ".mindrecord")
    assert "monitor_config" not in training or set(training["monitor_config"]) <= {"monitor_on"}
    assert yaml.safe_load(render(training)) == training


def test_layer_norms_turn_on_the_wrappers_local_norm_and_a_missing_run_mode_trains(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, track_metrics=["loss", "layer_grad_norm"])
    config.write_text(config.read_text().replace("run_mode: train\n", ""))
    training = mindformers_config(load_config(config))
    assert training["runner_wrapper"]["local_norm"] is True and training["run_mode"] == "train"


def test_base_config_paths_become_absolute(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("seed: 7\n")
    config = tmp_path / "child.yaml"
    config.write_text("base_config: ['base.yaml']\nrun_mode: train\nmonitor_config:\n  run_name: r\n")
    assert mindformers_config(load_config(config))["base_config"] == [str(tmp_path / "base.yaml")]


@pytest.mark.parametrize("mode", ["predict", "eval", "predict_with_train_model", "serve"])
def test_only_training_run_modes_are_accepted(mode: str) -> None:
    with pytest.raises(MsmonError, match="run_mode"):
        check_run_mode(mode)
    check_run_mode("finetune")
    check_run_mode(None)


@pytest.mark.parametrize("command", [["run", "--dry-run"], ["run"], ["export"]])
def test_a_shipped_predict_config_is_refused_and_nothing_is_created(tmp_path: Path, command: list[str]) -> None:
    predict = next((p for p in CONFIGS if p.name == "predict_qwen3.yaml"), None)
    if predict is None:
        pytest.skip("this mindformers ships no predict_qwen3.yaml")
    result = run_msmon(command[0], str(predict), *command[1:], cwd=tmp_path, timeout=300)
    assert result.code == 1, result.stdout + result.stderr
    assert "run_mode is 'predict'" in result.stderr and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_export_to_a_directory_or_an_unwritable_place_names_the_path_and_leaves_nothing(tmp_path: Path) -> None:
    """-o DIR said "/.tmp.ye5gx7hv.tmp: cannot write (Is a directory)"; -o /proc/x.yaml named a temporary file,
    after msmon_cpu.py was written (a half export)."""
    target = tmp_path / "out"
    target.mkdir()
    result = run_msmon("export", "quickstart", "-o", str(target), cwd=tmp_path)
    lines = [line for line in result.stderr.strip().splitlines()  # a cold registry cache says so first (run alone)
             if not line.startswith("msmon: reading the installed mindformers' registry once")]
    assert result.code == 1 and lines == [
        f"error: --out {target} is a directory (give a file path, e.g. --out {target / 'exported.yaml'})"]
    too_long = target / ("x" * 300 + ".yaml")  # msmon_cpu.py is written beside it, then the config fails
    result = run_msmon("export", "quickstart", "-o", str(too_long), cwd=tmp_path)
    assert result.code == 1 and f"{too_long}: cannot write (File name too long)" in result.stderr
    assert list(target.iterdir()) == []  # the module written first is removed again
    result = run_msmon("export", "quickstart", "-o", "/proc/x.yaml", cwd=tmp_path)
    assert result.code == 1 and "error: /proc/msmon_cpu.py: cannot write" in result.stderr
    assert "Traceback" not in result.stderr and ".tmp" not in result.stderr


@pytest.mark.training
@pytest.mark.parametrize("source", [QUICKSTARTS["legacy"], QUICKSTARTS_DIR / "quickstart-moe.yaml"],
                         ids=lambda path: path.stem)
def test_export_of_a_quickstart_trains_under_plain_run_mindformer(tmp_path: Path, source: Path) -> None:
    """The README and export's help say plain mindformers loads what export writes; it failed with "Can't find class
    type wrapper class name MsmonCPUTrainOneStepCell in class registry". Export names msmon's CPU support through
    mindformers' own auto_register (msmon_cpu.py beside the file, generated datasets made) and plain
    ``run_mindformer.py --config FILE --register_path DIR`` trains it (20 steps; a training of its own: no msmon in
    the process is the point). The legacy model and the MoE one: the MoE quickstart is the mcore (Qwen3) path with
    experts, so it needs every CPU stand-in the dense mcore quickstart needs, and the MoE ones besides."""
    config = write_quickstart_config(tmp_path, steps=20, source=source)
    out = tmp_path / "exported" / "exported.yaml"
    out.parent.mkdir()
    result = run_msmon("export", str(config), "-o", str(out), "output_dir=" + str(tmp_path / "output"), cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert f"--register_path {out.parent}" in result.stderr and (out.parent / "msmon_cpu.py").is_file()
    exported = yaml.safe_load(out.read_text())
    assert "monitor_config" not in exported or not {"enable_monitor", "save_dir"} & set(exported["monitor_config"])
    script = Path(__file__).resolve().parent / "launches" / "run_mindformer.py"
    env = {**msmon_env(tmp_path), "LOCAL_DEFAULT_PATH": str(tmp_path / "output")}
    proc = subprocess.run([sys.executable, str(script), "--config", str(out), "--register_path", str(out.parent)],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = parse_step_lines(proc.stdout + proc.stderr)
    assert max(printed) == 20 and printed[20]["loss"] < printed[1]["loss"], printed


def test_export_of_an_invalid_config_writes_nothing(tmp_path: Path) -> None:
    config = write_quickstart_config(tmp_path, log_interval=0)
    out = tmp_path / "exported.yaml"
    result = run_msmon("export", str(config), "-o", str(out), cwd=tmp_path)
    assert result.code == 1 and not out.exists()
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error MS") and "log_interval" in lines[0]  # the finding, as validate prints it
    assert lines[-1].endswith("nothing was exported (`msmon validate " + str(config) + "` shows every finding)")


def test_export_of_every_shipped_config_writes_it_and_names_the_inputs_this_machine_lacks(tmp_path: Path) -> None:
    """A user exports on a workstation for a cluster: every shipped config carries a placeholder or an input path of
    the cluster, and export refused them all ("N error(s) in the config; nothing was exported"). Now the file is
    written and each missing input named; any other error still writes nothing (test above)."""
    from typer.testing import CliRunner

    from msmon.cli.main import app

    named = 0
    trained = [path for path in training_configs()
               if (yaml.safe_load(path.read_text()) or {}).get("run_mode", "train") in ("train", "finetune")]
    assert len(trained) >= 10
    for index, path in enumerate(trained):
        out = tmp_path / f"{index}.yaml"
        result = CliRunner().invoke(app, ["export", str(path), "-o", str(out)])
        assert result.exit_code == 0 and out.is_file(), (path, result.output)
        assert "nothing was exported" not in result.output and "Traceback" not in result.output
        missing = [line for line in result.output.splitlines() if line.startswith("  error MS011")]
        if missing:
            assert "input(s) the training reads are missing on this machine" in result.output
        named += len(missing)
    assert named >= 10


def test_the_run_directorys_mindformers_yaml_is_what_export_writes(canonical, tmp_path: Path) -> None:
    run = canonical("completed_legacy")
    exported = run_msmon("export", str(run.config), cwd=run.cwd)
    assert exported.code == 0, exported.stderr
    from msmon.runner.cpu_support import for_plain_mindformers

    trained = yaml.safe_load((run.run_dir / "mindformers.yaml").read_text())  # plus the keys plain mindformers needs
    assert yaml.safe_load(exported.stdout) == for_plain_mindformers(trained)
    assert not list(run.cwd.glob("msmon_cpu.py"))  # to stdout: no file written
    info_log = (run.run_dir / "logs" / "output" / "log" / "rank_0" / "info.log").read_text(errors="replace")
    assert "_apply_template: Some configs in yaml are useless for train" in info_log  # loaded through the template


@pytest.mark.parametrize("model", ["quickstart", "quickstart-qwen3"])
def test_a_checkpoint_to_start_from_reaches_the_loader_that_reads_it(model: str) -> None:
    """`--load_checkpoint DIR` on a quickstart (mindformers 1.9's checkpoint: section, `load_path: ''`) becomes the
    section's load_path (1.9.0 maps the legacy key only onto an absent one: the flag was silently ignored); a
    checkpoint file (the rank layout's .ckpt or .safetensors) drops the section, since only the legacy loader reads a
    file; a load_path the user set is kept."""
    directory = mindformers_config(load_config(model, ["load_checkpoint=/ckpt/iteration_00000200"]))
    assert directory["checkpoint"]["load_path"] == "/ckpt/iteration_00000200"
    assert directory["checkpoint"]["no_load_optim"] is True  # weights only, as mindformers maps resume_training False
    assert directory["load_ckpt_format"] == "safetensors"  # the layout's format: with ckpt 1.9.0 refuses a directory
    for file in ("/ckpt/rank_0/llama_tiny_rank_0-1_200.ckpt", "/ckpt/rank_0/m.safetensors"):
        assert "checkpoint" not in mindformers_config(load_config(model, [f"load_checkpoint={file}"]))
    kept = mindformers_config(load_config(model, ["load_checkpoint=/a", "checkpoint.load_path=/b"]))
    assert kept["checkpoint"]["load_path"] == "/b"
    assert mindformers_config(load_config(model))["checkpoint"]["load_path"] == ""


def test_an_override_reaches_into_a_list_by_index() -> None:
    """`msmon run quickstart callbacks.1.save_checkpoint_steps=50`, as a new user would write it, changes the
    CheckpointMonitor entry (was: "Cannot merge incompatible container types"); an index past the list is one line."""
    from msmon.errors import ExitCode

    loaded = load_config("quickstart", ["callbacks.1.save_checkpoint_steps=50", "callbacks[1].keep_checkpoint_max=4",
                                        "callbacks.0.per_print_times=2"])
    handed = mindformers_config(loaded)  # what mindformers gets (was: the dot-index overrides silently dropped)
    for config in (loaded.resolved(), handed):
        saving = config["callbacks"][1]
        assert (saving["type"], saving["save_checkpoint_steps"], saving["keep_checkpoint_max"]) == \
            ("CheckpointMonitor", 50, 4)
        assert config["callbacks"][0] == {"type": "MFLossMonitor", "per_print_times": 2}
    with pytest.raises(MsmonError) as caught:
        load_config("quickstart", ["callbacks.9.save_checkpoint_steps=50"])
    assert caught.value.exit_code == ExitCode.USAGE and "callbacks.9.save_checkpoint_steps" in str(caught.value)
