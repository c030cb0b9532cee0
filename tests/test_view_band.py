"""The references' band and the parting step on the pages: `msmon compare --assert --out` and `msmon report` of a
run compared with references live draw the band the run was judged against and mark where it parts (Chromium
renders them)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import run_msmon
from test_view_unit import chromium_open, make_run, page_data

from msmon.view.report import build_report
from msmon.view.series import load_run

BAND_PIXEL = (222, 242, 230)  # the band's fill, rgba(22,163,74,0.14), over the white plot


def scaled_run(root: Path, name: str, scale: float, phase: float) -> Path:
    """A run directory whose loss is a falling curve x ``scale`` with its own batch noise (``phase``)."""
    run = make_run(root, name, steps=300, every=1, alerts=False, spike_at=None, nan_at=None)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        step = row["step"]
        row["loss"] = scale * (1.5 + 2.5 * math.exp(-step / 60)) * (1 + 0.02 * math.sin(0.9 * step + phase))
        row["grad_norm"] = 1.0 + 0.1 * math.sin(0.3 * step + phase)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def losses(run: Path) -> dict[int, float]:
    """step -> the finite losses of a short run (every point is drawn)."""
    drawn = load_run(run).sketch("loss").draw()
    return dict(zip(drawn.x, drawn.y, strict=True))


def band_pixels(shot: Path) -> int:
    from PIL import Image

    image = Image.open(shot).convert("RGB")
    return sum(1 for pixel in image.getdata() if all(abs(a - b) <= 3 for a, b in zip(pixel, BAND_PIXEL, strict=True)))


def test_compare_assert_out_draws_the_band_and_marks_the_parting_step(tmp_path: Path) -> None:
    """`compare RUN REF REF --assert --out page.html`: exit 6 and the verdict line as without --out; the page's loss,
    grad_norm and learning_rate panels carry the band (the references' spread, never narrower than the 5% floor: the
    loss band holds both references), the loss panel's run leaves it, the parting step is marked where the verdict
    says, and Chromium draws the band. A run inside the band: exit 0, the band drawn, no mark."""
    refs = [scaled_run(tmp_path, "ref_a", 1.0, 0.0), scaled_run(tmp_path, "ref_b", 1.03, 1.0)]
    parted = scaled_run(tmp_path, "parted", 1.3, 2.0)
    page = tmp_path / "parted.html"
    result = run_msmon("compare", str(parted), *map(str, refs), "--assert", "--out", str(page))
    assert result.code == 6, result.stderr
    assert "leaves the band of" in result.stderr and "loss parts at step 1:" in result.stderr
    data = page_data(page.read_text())
    panels = {p["metric"]: p for p in data["panels"]}
    assert {p for p in panels if "band" in panels[p]} == {"loss", "grad_norm", "learning_rate"}
    band = panels["loss"]["band"]
    assert band["x"][0] >= 1 and band["x"][-1] <= 300 and "2 reference runs (ref_a, ref_b)" in band["label"]
    ref_losses = [losses(r) for r in refs]
    middle = len(band["x"]) // 2
    step = int(band["x"][middle])
    assert band["low"][middle] < min(v[step] for v in ref_losses) <= max(v[step] for v in ref_losses) \
        < band["high"][middle] < losses(parted)[step]
    assert data["partings"] == [{"step": 1, "metric": "loss", "label": "parts: loss"}]
    assert "compare --assert: " in page.read_text() and "leaves the band" in page.read_text()
    shot, _ = chromium_open(page, tmp_path)
    assert band_pixels(shot) > 2000

    inside = scaled_run(tmp_path, "inside", 1.01, 3.0)
    result = run_msmon("compare", str(inside), *map(str, refs), "--assert", "--out", str(tmp_path / "in.html"))
    assert result.code == 0 and "stays inside the band" in result.stdout, result.stderr
    data = page_data((tmp_path / "in.html").read_text())
    assert data["partings"] == [] and "band" in data["panels"][0]


def test_the_report_of_a_run_compared_live_draws_its_band_and_the_alert_s_parting(tmp_path: Path) -> None:
    """`msmon report` of a run whose monitor_config named references: the band of those references, built with the
    run's own reference_drift settings (a 20% floor here), and the reference_drift alert's first parted step; a
    reference that has moved since is a note, the report is still written."""
    refs = [scaled_run(tmp_path, "ref_a", 1.0, 0.0), scaled_run(tmp_path, "ref_b", 1.03, 1.0)]
    run = scaled_run(tmp_path, "live", 1.3, 2.0)
    (run / "monitor_config.resolved.yaml").write_text(json.dumps({
        "enable_monitor": True, "run_name": "live", "log_interval": 1,
        "reference": {"runs": [str(r) for r in refs], "tags": []},
        "health": {"reference_drift": {"tolerance": 0.2, "metrics": ["loss"]}}}))
    alert = {"time": 1.0, "step": 12, "onset_step": 10, "detector": "reference_drift", "severity": "warning",
             "message": "loss left the reference band at step 10", "values": {"metric": "loss"}, "action": "alert"}
    (run / "alerts.jsonl").write_text(json.dumps(alert) + "\n")
    html = build_report(load_run(run))
    data = page_data(html)
    panels = {p["metric"]: p for p in data["panels"]}
    assert "band" in panels["loss"] and "band" not in panels["grad_norm"]  # the run's own metrics setting
    band = panels["loss"]["band"]
    assert min(high / low for low, high in zip(band["low"], band["high"], strict=True)) >= 1.2 ** 2 * 0.999
    assert data["partings"] == [{"step": 10, "metric": "loss", "label": "leaves the band: loss"}]
    page = tmp_path / "report.html"
    page.write_text(html)
    shot, _ = chromium_open(page, tmp_path)
    assert band_pixels(shot) > 2000

    (refs[1] / "metrics.jsonl").rename(refs[1] / "moved.jsonl")
    moved = build_report(load_run(run))
    assert all("band" not in p for p in page_data(moved)["panels"])
    assert "the reference band is not drawn: " in moved and "ref_b" in moved
