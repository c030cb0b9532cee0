"""Report, compare and live view on two real quickstart runs of `msmon run` (one on a terminal, one piped)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, run_msmon
from test_view_unit import ANSI, chromium_open, page_data, run_in_pty

QUICKSTART = REPO / "configs" / "quickstart_cpu.yaml"
STEPS = 150  # log_interval 10: 15 records per run

pytestmark = pytest.mark.training


@dataclass
class RealRuns:
    root: Path
    a: Path  # default learning rate, trained on a pseudo-terminal (live panel)
    b: Path  # learning_rate 1e4 and seed 1 (the dead network: alerts), stdout piped (plain lines)
    a_terminal: str
    b_stdout: str


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> RealRuns:
    root = tmp_path_factory.mktemp("view_real")
    common = [str(QUICKSTART), f"monitor_config.save_dir={root / 'save'}", "monitor_config.verbose=false",
              f"train_dataset.data_loader.num_samples={2 * STEPS}"]
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "MSMON_DEBUG")} | {"TERM": "xterm-256color"}
    terminal = run_in_pty([sys.executable, "-m", "msmon", "run", *common, "monitor_config.run_name=run_a"], env,
                          columns=140, cwd=root, timeout=300).decode("utf-8", "replace")
    piped = subprocess.run(
        [sys.executable, "-m", "msmon", "run", *common, "monitor_config.run_name=run_b", "seed=1",
         "lr_schedule.learning_rate=1.e+4"],
        cwd=root, env=env, capture_output=True, text=True, timeout=300,
    )
    assert piped.returncode == 0, piped.stderr[-3000:]
    save = root / "save" / "quickstart"
    status = json.loads((save / "run_a" / "run.json").read_text())["status"]
    assert status == "completed", ANSI.sub("", terminal)[-3000:]
    return RealRuns(root, save / "run_a", save / "run_b", ANSI.sub("", terminal), piped.stdout)


def test_live_panel_on_the_terminal_run(real: RealRuns) -> None:
    out = real.a_terminal
    assert "╭─ msmon" in out and f"step {STEPS}/{STEPS}" in out and "100.0%" in out
    assert "Training Over" not in out and "step:[" not in out  # mindformers' INFO lines stay off the terminal ...
    assert "Training Over" in (real.a / "logs" / "console.log").read_text()  # ... and are all in the run directory
    assert "heartbeat" in out and "dropped records 0" in out
    assert "msmon: step " not in out  # no plain lines on a terminal


def test_plain_lines_when_piped(real: RealRuns) -> None:
    lines = [line for line in real.b_stdout.splitlines() if line.startswith("msmon: step ")]
    assert [int(line.split()[2].split("/")[0]) for line in lines] == [r["step"] for r in records(real.b)]
    assert lines[-1].startswith(f"msmon: step {STEPS}/{STEPS}  loss ")
    assert "╭" not in real.b_stdout and "\x1b[" not in real.b_stdout


def test_report_series_match_metrics_jsonl(real: RealRuns, tmp_path: Path) -> None:
    out = tmp_path / "a.html"
    result = run_msmon("report", str(real.a), "--out", str(out), "--png", str(tmp_path / "png"))
    assert result.code == 0, result.stderr
    html = out.read_text()
    panels = {p["metric"]: p["series"][0] for p in page_data(html)["panels"]}
    rows = records(real.a)
    assert len(rows) == STEPS // 10
    for metric in ("loss", "grad_norm", "learning_rate", "throughput"):
        expected = [(r["step"], r[metric]) for r in rows if metric in r and math.isfinite(r[metric])]
        assert list(zip(panels[metric]["x"], panels[metric]["y"], strict=True)) == expected, metric
    info = json.loads((real.a / "run.json").read_text())
    for value in (info["run_name"], info["mindspore_version"], info["mindformers_version"], "CosineWithWarmUpLR"):
        assert value in html
    assert "monitor_config.run_name=run_a" in html  # the command-line overrides are shown
    from matplotlib import image

    for name in ("loss", "grad_norm", "learning_rate", "throughput", "overview"):
        png = tmp_path / "png" / f"{name}.png"
        pixels = image.imread(png)
        assert png.stat().st_size > 10_000 and len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])}) > 20


def test_report_shows_the_real_alerts(real: RealRuns, tmp_path: Path) -> None:
    alerts = [json.loads(line) for line in (real.b / "alerts.jsonl").read_text().splitlines()]
    assert alerts, "the dead network raised no alert"
    out = tmp_path / "b.html"
    assert run_msmon("report", str(real.b), "--out", str(out)).code == 0
    html = out.read_text()
    data = page_data(html)
    assert [(a["step"], a["detector"], a["message"]) for a in data["alerts"]] == [
        (a["step"], a["detector"], a["message"]) for a in sorted(alerts, key=lambda a: (a["step"], a["time"]))
    ]
    for alert in alerts:
        assert alert["detector"] in html and alert["message"].replace("<", "&lt;").replace(">", "&gt;") in html
    shot, dom = chromium_open(out, tmp_path)
    assert 'data-msmon-ready="' in dom
    (real.root / "report_b.png").write_bytes(shot.read_bytes())


def test_compare_shows_exactly_the_differing_keys(real: RealRuns, tmp_path: Path) -> None:
    from msmon.view.compare import compare_runs

    comparison = compare_runs([real.a, real.b])
    assert {key for key, _ in comparison.diff} == {"lr_schedule.learning_rate", "seed", "monitor_config.run_name"}
    assert [key for key, _ in comparison.diff][-1] == "monitor_config.run_name"  # hyperparameters first
    losses = [r["loss"] for r in records(real.a)]
    assert comparison.summaries[0].final_loss == losses[-1] and comparison.summaries[0].best_loss == min(losses)
    result = run_msmon("compare", str(real.a), str(real.b), env={"COLUMNS": "200"})
    assert result.code == 0, result.stderr
    for text in ("lr_schedule.learning_rate", "10000.0", "0.005", "seed", "run_a", "run_b"):
        assert text in result.stdout
    out = tmp_path / "compare.html"
    assert run_msmon("compare", str(real.a), str(real.b), "--out", str(out)).code == 0
    loss = page_data(out.read_text())["panels"][0]
    assert [s["y"] for s in loss["series"]] == [[r["loss"] for r in records(run)] for run in (real.a, real.b)]
    _, dom = chromium_open(out, tmp_path)
    assert 'data-msmon-ready="' in dom
