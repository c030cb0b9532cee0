"""Health end to end with the real mindformers Trainer on CPU, on the canonical diverged runs (tests/canonical.py):
lr 1e4 kills the legacy network (its gradients exactly 0: ``dead_series``), lr 50 turns the mcore network's loss NaN
(``nonfinite``), each reported within a few logged steps. ``action: stop`` ends `msmon run` with exit code 4 at a
graceful step end (the checkpoint callback saves, a real webhook and a command hook receive the alert);
``action: alert`` lets the run complete while a hanging webhook, command hook and MLflow server slow no step. An
alert names its flight recorder file: every step before it at full resolution. `msmon replay` recomputes the live
alerts of a real run. (The stall of `msmon run`, judged by its parent over every rank: test_run_ranks.py,
test_resume.py, test_ranks_unit.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_msmon

HERE = Path(__file__).resolve().parent

#: What a learning rate far too high does to each quickstart (legacy: 1e4, mcore: 50): (canonical run, detector,
#: words of its message).
DEATH = {"legacy": ("diverged_stop_legacy", "dead_series", ("grad_norm is exactly 0", "loss is exactly")),
         "mcore": ("lr_50_mcore", "nonfinite", ("is NaN", "is Inf"))}


@pytest.fixture(params=list(DEATH))
def diverged(request, canonical):
    name, detector, words = DEATH[request.param]
    return canonical(name), detector, words


def test_the_dead_network_is_reported_within_a_few_logged_steps(diverged):
    run, detector, words = diverged
    dead = [a for a in run.alerts() if a["detector"] == detector]
    assert dead and dead[0]["severity"] == "critical"
    assert dead[0]["step"] <= 5 * run.log_interval  # within 5 logged steps
    assert any(word in dead[0]["message"] for word in words)
    assert "HEALTH ALERT [critical]" in run.output


def test_with_action_alert_the_run_completes_and_hanging_hooks_slow_no_step(canonical):
    run = canonical("lr_50_mcore")
    assert run.code == 0, run.output[-2000:]
    info = run.info
    first = run.alerts()[0]
    assert first["action"] == "alert"
    assert info["status"] == "completed" and info["alert_count"] >= 1 and info["last_step"] == run.steps
    # the webhook and the command hang: no step after the alert waited for them
    assert max(r["step_time_ms"] for r in run.records() if r["step"] > first["step"]) < 1500
    assert [r["step"] for r in run.records()] == list(range(run.log_interval, run.steps + 1, run.log_interval))


def test_the_alert_names_a_context_file_with_every_step_before_it(diverged):
    run, detector, _ = diverged
    dead = next(a for a in run.alerts() if a["detector"] == detector)
    assert dead["context_file"] == f"context/step_{dead['step']}_{detector}.jsonl"
    lines = [json.loads(line) for line in (run.run_dir / dead["context_file"]).read_text().splitlines()]
    assert [line["step"] for line in lines] == list(range(1, dead["step"] + 1))  # one line per step, not per log
    records = {r["step"]: r for r in run.records()}
    for line in lines:
        assert {"time", "step_time_ms", "loss", "grad_norm", "loss_scale", "overflow"} <= set(line)
        record = records.get(line["step"])
        if record is not None:  # a logged step: the same values as its record (NaN as NaN)
            assert json.dumps([line["loss"], line["grad_norm"]]) == json.dumps([record["loss"], record["grad_norm"]])
    if detector == "dead_series":  # the dead network's zero gradient, step by step
        assert any(line["grad_norm"] == 0.0 for line in lines)
    else:  # the mcore network's loss turns NaN: the first such step is in the window
        assert any(line["loss"] != line["loss"] for line in lines)


def test_replay_of_the_real_run_directory_recomputes_the_live_alerts(diverged, tmp_path):
    run, _, _ = diverged
    replayed = run_msmon("replay", str(run.run_dir), "--json", cwd=tmp_path)
    assert replayed.code == 0, replayed.stderr
    key = ("step", "detector", "severity", "message")
    live = [{k: a[k] for k in key} for a in run.alerts() if a["detector"] != "stall"]
    assert [{k: a[k] for k in key} for a in json.loads(replayed.stdout)] == live


def test_stop_action_ends_the_run_gracefully_with_exit_4(canonical):
    run = canonical("diverged_stop_legacy")
    assert run.code == 4, run.output[-2000:]
    info = run.info
    assert info["status"] == "stopped_by_monitor" and info["exit_code"] == 4
    assert "dead_series" in (info["error"] or "") and info["alert_count"] >= 1
    first = next(a for a in run.alerts() if a["detector"] == "dead_series")
    assert first["action"] == "stop"
    assert first["step"] <= info["last_step"] <= first["step"] + 5 * run.log_interval  # stopped soon after
    assert info["last_step"] < run.steps
    # the checkpoint callback saved at the graceful end
    from msmon.runner.checkpoints import saved_checkpoints

    assert [step for step, _ in saved_checkpoints(run.run_dir)] == [info["last_step"]]
    assert "HEALTH ALERT [critical]" in run.output and "run stopped_by_monitor" in run.output
    # every alert reaches the webhook and the command hook: the absurd grad norm first (grad_norm_bound judges from
    # step 1, its action alert), then the dead network's stop
    received = run.extra["webhook"]
    expected = [(a["step"], a["detector"], a["action"]) for a in run.alerts()]
    assert [(a["step"], a["detector"], a["action"]) for a in received] == expected
    assert expected[-1] == (first["step"], "dead_series", "stop") and expected[0][1] == "grad_norm_bound"
    hooked = [json.loads(line) for line in Path(run.extra["command_hook"]).read_text().splitlines() if line]
    assert [(a["step"], a["detector"]) for a in hooked] == [(step, name) for step, name, _ in expected]


@pytest.mark.parametrize("name", ["lr_50_legacy", "lr_50_mcore"])
def test_replay_of_a_run_started_with_overrides_recomputes_its_live_alerts(canonical, name, tmp_path):
    """A run started with lr_schedule.learning_rate=50 was replayed against its YAML's peak ("learning rate 22.5 is
    above the configured peak 0.005"): replay reads the config the run trained with."""
    run = canonical(name)
    assert run.code == 0, run.output[-2000:]
    replayed = run_msmon("replay", str(run.run_dir), "--json", cwd=tmp_path)
    assert replayed.code == 0, replayed.stderr
    key = ("step", "detector", "severity", "message")
    live = [{k: a[k] for k in key} for a in run.alerts() if a["detector"] != "stall"]
    assert [{k: a[k] for k in key} for a in json.loads(replayed.stdout)] == live
    assert "above the configured peak" not in replayed.stdout


#: What lr 50 does to each quickstart, and the detector that says so first: the legacy loss stays finite and far
#: above chance (thousands); the mcore loss is 17,775 at the second log, NaN from the third.
WRONG_FROM_STEP_1 = {"lr_50_legacy": "chance_level", "lr_50_mcore": "nonfinite"}


@pytest.mark.parametrize("name", list(WRONG_FROM_STEP_1))
def test_a_run_wrong_from_its_first_step_is_alerted_within_three_logs(canonical, name):
    """lr_schedule.learning_rate=50 on a quickstart (1,000 tokens: chance level ln(1000) = 6.91) ended with "alerts:
    none" on the legacy path: every detector judged it against its own past. chance_level judges it against physics
    from the first log, with the real Trainer's records; on the mcore path the loss turns NaN at the third log."""
    run = canonical(name)
    assert run.code == 0, run.output[-2000:]
    logged = [r["step"] for r in run.records()]
    first = run.alerts()[0] if run.alerts() else None
    assert first is not None, [(r["step"], r.get("loss")) for r in run.records()[:5]]
    assert first["step"] in logged[:3] and first["severity"] == "critical"
    assert first["detector"] == WRONG_FROM_STEP_1[name]
    if first["detector"] == "chance_level":
        assert first["values"]["vocab_size"] == 1000 and "worse than chance" in first["message"]
        bound = next(a for a in run.alerts() if a["detector"] == "grad_norm_bound")  # the grad norm says so too
        assert bound["step"] in logged[:3] and bound["values"]["grad_norm_initial"] < 10
    assert "alerts: none" not in run.output


@pytest.mark.parametrize("name", ["completed_legacy", "completed_mcore", "lr_1e_3", "lr_2e_2"])
def test_the_clean_canonical_runs_raise_nothing_from_the_first_step_detectors(canonical, name):
    """chance_level, grad_norm_bound and flat_start judge against physics from the first log: silent on a clean run
    (lr_2e_2's loss first rises above ln(1000), its grad norm to several times step 1's)."""
    run = canonical(name)
    first_step = {"chance_level", "grad_norm_bound", "flat_start"}
    assert [a for a in run.alerts() if a["detector"] in first_step] == []
    if run.log_interval > 1:
        assert run.records()[0]["grad_norm_initial"] > 0  # step 1's grad norm, from the held steps
