"""Report and compare on canonical runs of `msmon run` (tests/canonical.py): the series of a completed run, the
alerts of a diverged one, the command-line overrides of another, and two runs that differ only in their learning
rate. Every page is written outside the run directory (``--out``): canonical runs are read, never changed."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import run_msmon
from test_view_unit import chromium_open, page_data


def test_report_series_match_metrics_jsonl(canonical, tmp_path: Path) -> None:
    run = canonical("completed_legacy")
    out = tmp_path / "a.html"
    result = run_msmon("report", str(run.run_dir), "--out", str(out), "--png", str(tmp_path / "png"))
    assert result.code == 0, result.stderr
    html = out.read_text()
    panels = {p["metric"]: p["series"][0] for p in page_data(html)["panels"]}
    rows = run.records()
    assert len(rows) == run.steps // run.log_interval
    for metric in ("loss", "grad_norm", "learning_rate", "throughput"):
        expected = [(r["step"], r[metric]) for r in rows if metric in r and math.isfinite(r[metric])]
        assert list(zip(panels[metric]["x"], panels[metric]["y"], strict=True)) == expected, metric
    info = run.info
    for value in (info["run_name"], info["mindspore_version"], info["mindformers_version"], "CosineWithWarmUpLR"):
        assert value in html
    from matplotlib import image

    for name in ("loss", "grad_norm", "learning_rate", "throughput", "overview"):
        png = tmp_path / "png" / f"{name}.png"
        pixels = image.imread(png)
        assert png.stat().st_size > 10_000 and len({tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])}) > 20


def test_report_shows_the_command_line_overrides(canonical, tmp_path: Path) -> None:
    run = canonical("completed_mcore")
    out = tmp_path / "mcore.html"
    assert run_msmon("report", str(run.run_dir), "--out", str(out)).code == 0
    assert "seed=42" in out.read_text()


def test_report_shows_the_real_alerts(canonical, tmp_path: Path) -> None:
    run = canonical("diverged_stop_legacy")
    alerts = run.alerts()
    assert alerts, "the dead network raised no alert"
    out = tmp_path / "b.html"
    assert run_msmon("report", str(run.run_dir), "--out", str(out)).code == 0
    html = out.read_text()
    data = page_data(html)
    assert [(a["step"], a["detector"], a["message"]) for a in data["alerts"]] == [
        (a["step"], a["detector"], a["message"]) for a in sorted(alerts, key=lambda a: (a["step"], a["time"]))
    ]
    for alert in alerts:
        assert alert["detector"] in html and alert["message"].replace("<", "&lt;").replace(">", "&gt;") in html
    shot, dom = chromium_open(out, tmp_path)
    assert 'data-msmon-ready="' in dom


def test_compare_shows_exactly_the_differing_keys(canonical, tmp_path: Path) -> None:
    from msmon.view.compare import compare_runs

    low, high = canonical("completed_legacy"), canonical("lr_2e_2")
    comparison = compare_runs([low.run_dir, high.run_dir])
    assert [key for key, _ in comparison.diff] == ["lr_schedule.learning_rate"]  # the config that trained
    assert [key for key, _ in comparison.monitor_diff] == ["monitor_config.run_name"]  # msmon's keys, apart
    losses = [r["loss"] for r in low.records()]
    assert comparison.summaries[0].final_loss == losses[-1] and comparison.summaries[0].best_loss == min(losses)
    result = run_msmon("compare", str(low.run_dir), str(high.run_dir), env={"COLUMNS": "200"})
    assert result.code == 0, result.stderr
    for text in ("lr_schedule.learning_rate", "0.005", "0.02", "completed_legacy", "lr_2e_2"):
        assert text in result.stdout
    out = tmp_path / "compare.html"
    assert run_msmon("compare", str(low.run_dir), str(high.run_dir), "--out", str(out)).code == 0
    loss = page_data(out.read_text())["panels"][0]
    assert [s["y"] for s in loss["series"]] == [[r["loss"] for r in run.records()] for run in (low, high)]
    _, dom = chromium_open(out, tmp_path)
    assert 'data-msmon-ready="' in dom


def test_the_report_written_by_run_names_how_it_ended(canonical) -> None:
    """`msmon run --report` writes the report when the run ends, completed, failed or interrupted."""
    for name, words in (("completed_legacy", ["completed"]), ("interrupted_legacy", ["interrupted"]),
                        ("failed_compile_legacy", ["failed", "the run logged no step", "For &#39;Mul&#39;"])):
        run = canonical(name)
        page = (run.run_dir / "report.html").read_text()
        assert all(word in page for word in words), name
        assert f"report: {run.run_dir / 'report.html'}" in run.output, name
    assert json.loads((canonical("interrupted_legacy").run_dir / "run.json").read_text())["exit_code"] == 130
