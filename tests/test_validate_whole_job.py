"""`msmon validate` checks the whole job against the installed mindformers, not only monitor_config (MS020-MS026).

The corpus: every training YAML the installed mindformers ships validates without a false error from these checks;
single-character misspellings (deletions, substitutions, transpositions: generated with a fixed seed, not picked)
of each top-level key of a shipped config and of each argument of its CheckpointMonitor are each reported with the
key they misspell. Then what users met, through the real CLI: a misspelled section trained silently with the default
optimizer, a misspelled CheckpointMonitor argument died with a TypeError, `runer_config:` got only MS601, the
override `lr_schedule.learning_rate=abc` passed, and validate called valid a config that `msmon run` refused.
"""

from __future__ import annotations

import importlib.util
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_msmon
from helpers_training import QUICKSTART, shipped_mindformers_yaml

from msmon.config.loader import load_config
from msmon.findings import Finding
from msmon.validate import validate
from msmon.validate.registry_cache import Builtins, load_builtins
from msmon.validate.top_level import known_top_level

WHOLE_JOB = {"MS020", "MS021", "MS022", "MS023", "MS024", "MS025", "MS026", "MS704"}
TRAINING_MODES = {"train", "finetune"}
TRAINING_SECTIONS = {"runner_config", "optimizer", "lr_schedule", "train_dataset", "callbacks", "runner_wrapper"}
SEED = 20261204
PER_KEY = 3  # misspellings per key
LETTERS = "abcdefghijklmnopqrstuvwxyz_"


@pytest.fixture(scope="session")
def registry() -> Builtins:
    """The installed mindformers' registry, read once for the session (a child process: never imported here)."""
    found = load_builtins()
    assert found.mindformers_error is None and found.schema is not None, found.mindformers_error
    return found


def _shipped_training_yamls() -> list[Path]:
    spec = importlib.util.find_spec("mindformers")
    if spec is None or not spec.origin:
        return []
    found = []
    for path in sorted((Path(spec.origin).parents[1] / "configs").rglob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and (data.get("run_mode") in TRAINING_MODES or
                                       data.get("run_mode") is None and len(TRAINING_SECTIONS & set(data)) >= 3):
            found.append(path)
    return found


TRAINING_YAMLS = _shipped_training_yamls()


def whole_job_errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.code in WHOLE_JOB and f.is_error]


def test_the_corpus_holds_the_shipped_training_configs() -> None:
    assert len(TRAINING_YAMLS) >= 10 and any(p.name == "pretrain_qwen3_32b_4k.yaml" for p in TRAINING_YAMLS)


@pytest.mark.parametrize("path", TRAINING_YAMLS, ids=[p.name for p in TRAINING_YAMLS])
def test_every_shipped_training_yaml_has_no_false_whole_job_error(path: Path, registry: Builtins, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    findings = validate(load_config(path)).findings
    assert whole_job_errors(findings) == []
    assert "MS704" not in {f.code for f in findings}


def misspellings(word: str, rng: random.Random, count: int = PER_KEY) -> list[str]:
    """``count`` different single-character misspellings of ``word``: a deletion, a substitution or a
    transposition of neighbours, each chosen at random."""
    found: list[str] = []
    for _ in range(50 * count):
        if len(found) == count:
            break
        kind, i = rng.choice(("delete", "substitute", "transpose")), rng.randrange(len(word))
        if kind == "delete":
            variant = word[:i] + word[i + 1:]
        elif kind == "substitute":
            variant = word[:i] + rng.choice(LETTERS.replace(word[i], "")) + word[i + 1:]
        else:
            i = min(i, len(word) - 2)
            variant = word[:i] + word[i + 1] + word[i] + word[i + 2:]
        if variant != word and variant not in found and re.fullmatch(r"[a-z][a-z0-9_]*", variant):
            found.append(variant)
    return found


def _nearest(variant: str, names: set[str]) -> set[str]:
    """The names one edit from ``variant`` (a variant one edit from two names misspells either: not asserted)."""
    from msmon.config.coerce import edits

    return {name for name in names if edits(variant, name) <= 1}


def test_generated_misspellings_of_every_top_level_key_name_the_key_and_its_line(registry: Builtins,
                                                                                 tmp_path: Path) -> None:
    assert registry.schema is not None
    source = shipped_mindformers_yaml("pretrain_qwen3_32b_4k.yaml")
    text = source.read_text(encoding="utf-8")
    keys = [k for k in yaml.safe_load(text) if k != "monitor_config"]  # monitor_config: msmon's MS001
    known = set(known_top_level(registry.schema))
    rng = random.Random(SEED)
    checked = 0
    for key in keys:
        for variant in misspellings(key, rng):
            if variant in known or _nearest(variant, known) != {key}:
                continue  # another valid key, or as near to a second one
            config = tmp_path / f"{variant}.yaml"
            config.write_text(re.sub(rf"(?m)^{key}:", f"{variant}:", text), encoding="utf-8")
            loaded = load_config(config)
            line = loaded.line_of(variant)
            found = [f for f in validate(loaded, cwd=tmp_path).findings if f.path == variant]
            assert [(f.code, f.severity.value, f.hint, f.line) for f in found] == [
                ("MS020", "error", f"did you mean '{key}'?", line)], (key, variant, found)
            checked += 1
    assert checked >= 2 * len(keys), checked


def _checkpoint_monitor(text: str) -> tuple[int, dict[str, Any]]:
    callbacks = yaml.safe_load(text)["callbacks"]
    return next((i, entry) for i, entry in enumerate(callbacks) if entry.get("type") == "CheckpointMonitor")


def test_generated_misspellings_of_a_callbacks_arguments_name_the_argument(registry: Builtins, tmp_path: Path) -> None:
    ctor = registry.classes["callback"]["CheckpointMonitor"]
    assert ctor is not None and not ctor.takes_kwargs
    text = shipped_mindformers_yaml("pretrain_qwen3_32b_4k.yaml").read_text(encoding="utf-8")
    index, entry = _checkpoint_monitor(text)
    arguments = [key for key in entry if key != "type"]
    assert len(arguments) >= 4
    rng = random.Random(SEED)
    checked = 0
    for argument in arguments:
        for variant in misspellings(argument, rng):
            if variant in ctor.names or _nearest(variant, set(ctor.names)) != {argument}:
                continue
            config = tmp_path / f"{variant}.yaml"
            config.write_text(re.sub(rf"(?m)^(\s+){argument}:", rf"\g<1>{variant}:", text, count=1), encoding="utf-8")
            loaded = load_config(config)
            path = f"callbacks[{index}].{variant}"
            found = [f for f in validate(loaded, cwd=tmp_path).findings if f.path == path]
            assert [(f.code, f.severity.value, f.hint, f.line) for f in found] == [
                ("MS024", "error", f"did you mean '{argument}'?", loaded.line_of(path))], (argument, variant, found)
            checked += 1
    assert checked >= 2 * len(arguments), checked


# -- what users met, through the real command ----------------------------------------------------------------------
def _findings(*args: str, cwd: Path) -> tuple[int, list[dict[str, Any]]]:
    result = run_msmon("validate", *args, "--json", cwd=cwd)
    assert "Traceback" not in result.stderr and result.code in (0, 1), result.stderr
    return result.code, json.loads(result.stdout)["findings"]


def _quickstart_with(tmp_path: Path, old: str, new: str) -> Path:
    text = QUICKSTART.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "train.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def _line(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(text))


def test_a_misspelled_section_is_an_error_naming_the_section_and_its_line(registry: Builtins, tmp_path: Path) -> None:
    config = _quickstart_with(tmp_path, "\noptimizer:", "\noptimzer:")
    code, found = _findings(str(config), cwd=tmp_path)
    assert code == 1 and [(f["code"], f["path"], f["line"], f["hint"]) for f in found if f["severity"] == "error"] == [
        ("MS020", "optimzer", _line(config, "optimzer:"), "did you mean 'optimizer'?")]
    assert "mindformers' defaults" in found[0]["message"]


def test_a_misspelled_checkpoint_monitor_argument_is_an_error_before_the_type_error(registry: Builtins,
                                                                                   tmp_path: Path) -> None:
    config = _quickstart_with(tmp_path, "    prefix: llama_tiny", "    prefx: llama_tiny")
    code, found = _findings(str(config), cwd=tmp_path)
    (finding,) = [f for f in found if f["severity"] == "error"]
    assert code == 1 and (finding["code"], finding["path"], finding["hint"]) == (
        "MS024", "callbacks[1].prefx", "did you mean 'prefix'?")
    assert finding["line"] == _line(config, "    prefx:") and "unexpected keyword argument" in finding["message"]


def test_a_misspelled_runner_config_is_named_beside_ms601(registry: Builtins, tmp_path: Path) -> None:
    config = _quickstart_with(tmp_path, "\nrunner_config:", "\nruner_config:")
    code, found = _findings(str(config), cwd=tmp_path)
    errors = {(f["code"], f["path"]): f for f in found if f["severity"] == "error"}
    assert code == 1 and errors[("MS020", "runer_config")]["hint"] == "did you mean 'runner_config'?"
    assert ("MS601", "runner_config.sink_mode") in errors  # the template's sink_mode: True, as before


def test_a_number_overridden_with_text_is_an_error_naming_the_override(registry: Builtins, tmp_path: Path) -> None:
    code, found = _findings("quickstart", "lr_schedule.learning_rate=abc", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["path"], f["line"]) for f in found] == [
        ("MS025", "lr_schedule.learning_rate", None)], found
    assert "the override lr_schedule.learning_rate=abc" in found[0]["message"]
    code, found = _findings("quickstart", "runner_config.epochs=two", "lr_schedule.learning_rate=1e-5", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["path"]) for f in found if f["code"] == "MS025"] == [
        ("MS025", "runner_config.epochs")]
    code, found = _findings("quickstart", "lr_schedule.learning_rate='1e-5'", cwd=tmp_path)  # text, but a number
    assert code == 1 and [(f["code"], f["severity"]) for f in found if f["code"] == "MS025"] == [
        ("MS025", "warning")]  # (the error here is MS806: lr_end 5e-4 above that peak)


def test_validate_reports_what_run_refuses_naming_the_flag(registry: Builtins, tmp_path: Path) -> None:
    for spelling in (["use_parallel=True"], ["--use_parallel", "True"]):
        code, found = _findings("quickstart", *spelling, cwd=tmp_path)
        assert code == 1 and [(f["code"], f["path"]) for f in found] == [("MS026", "use_parallel")]
        assert "--worker-num N" in found[0]["hint"]
    code, found = _findings("quickstart", "--use_parallel", "True", "--worker-num", "2", cwd=tmp_path)
    assert code == 0 and found == []
    code, found = _findings("quickstart", "--worker-num", "2", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["path"]) for f in found] == [("MS026", "use_parallel")]
    code, found = _findings("quickstart", "run_mode=predict", cwd=tmp_path)
    assert code == 1 and [(f["code"], f["path"]) for f in found] == [("MS026", "run_mode")]


def test_run_and_validate_refuse_with_one_rule() -> None:
    """msmon run's check (msmon.runner.msrun.check_config) stops on the first of validate's MS026 findings."""
    from msmon.errors import MsmonError
    from msmon.launch_layout import LaunchLayout
    from msmon.runner.msrun import check_config
    from msmon.validate.launch import launch_findings

    training = {"use_parallel": True, "parallel_config": {"data_parallel": 4}, "parallel": {"parallel_mode": 1}}
    for workers in (None, 2):
        (first, *_) = launch_findings(training, workers)
        with pytest.raises(MsmonError) as refused:
            check_config(training, LaunchLayout(workers))
        assert (refused.value.message, refused.value.hint) == (first.message, first.hint)
    assert launch_findings({**training, "parallel_config": {"data_parallel": 2}}, 2) == []


def test_the_keys_of_a_strict_section_and_the_users_own_values(registry: Builtins, tmp_path: Path) -> None:
    """A key runner_config's template refuses is an error (KeyError at the start); a top-level value of the user's own
    is none when the config refers to it (an interpolation, an anchor it uses) and a warning when nothing does."""
    text = QUICKSTART.read_text(encoding="utf-8").replace("  epochs:", "  epoch:", 1)
    text += "\nmy_seq: 64\nshared: &shared {seed_of_mine: 1}\nuses_it: *shared\nnote_to_self: tried lr 1e-3\n"
    text = text.replace("learning_rate: 5.e-3", "learning_rate: 5.e-3\n  my_peak: ${my_seq}", 1)
    config = tmp_path / "train.yaml"
    config.write_text(text, encoding="utf-8")
    code, found = _findings(str(config), cwd=tmp_path)
    codes = {(f["code"], f["path"], f["severity"]) for f in found}
    assert ("MS022", "runner_config.epoch", "error") in codes and code == 1
    assert next(f["hint"] for f in found if f["code"] == "MS022") == "did you mean 'epochs'?"
    assert {c for c in codes if c[0] in ("MS020", "MS021")} == {("MS021", "note_to_self", "warning"),
                                                                ("MS021", "uses_it", "warning")}


def test_a_checkpoint_section_on_a_release_that_reads_none() -> None:
    """MS027: mindformers 1.8 reads no checkpoint: section (msmon hands it none): silent when the CheckpointMonitor
    saves as the section says (the quickstarts carry both), a warning naming each key that saves differently, and
    one when no CheckpointMonitor saves at all; nothing on 1.9, which reads the section."""
    from msmon.config.loader import config_from_dict
    from msmon.config.schema import MonitorSettings
    from msmon.validate.context import CheckContext
    from msmon.validate.top_level import check_checkpoint_section

    def found(training: dict[str, Any], version: str) -> list[str]:
        ctx = CheckContext(config_from_dict(training), training, {}, MonitorSettings())
        return [f"{f.code} {f.severity}: {f.message}" for f in check_checkpoint_section(ctx, version)]

    quickstart = load_config(QUICKSTART).resolved()
    assert found(quickstart, "1.8.0") == [] and found(quickstart, "1.9.0") == []
    differs = {**quickstart, "checkpoint": {**quickstart["checkpoint"], "save_max": 7, "save_interleaved_steps": 50}}
    assert found(differs, "1.8.0") == ["MS027 warning: mindformers 1.8.0 reads no checkpoint: section; the "
                                       "CheckpointMonitor's keys apply instead: keep_checkpoint_max 3 (the "
                                       "section's save_max: 7), save_checkpoint_steps 100 (the section's "
                                       "save_interleaved_steps: 50)"]
    assert found(differs, "1.9.0") == []
    alone = {**quickstart, "callbacks": [{"type": "MFLossMonitor"}]}
    assert [f.split(":")[0] for f in found(alone, "1.8.0")] == ["MS027 warning"]
