"""The reference band and the reference_drift detector: tables written here (logic), then real runs replayed
against real references (`msmon replay RUN --reference REF`), and validate's MS813."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from msmon.config.health import HealthSettings, ReferenceDriftSettings
from msmon.errors import MsmonError
from msmon.health.monitor import HealthMonitor
from msmon.reference.band import build_band, parse_tags, reference_band
from msmon.reference.load import load_reference


def curve(level: float, steps: int = 300, wobble: float = 0.02, seed: float = 0.0) -> list[dict]:
    """A falling loss (4 -> ~1.5) and a grad norm near 1, with batch noise of its own phase per 'seed'."""
    return [{"step": s, "loss": level * (1.5 + 2.5 * math.exp(-s / 60)) * (1 + wobble * math.sin(0.9 * s + seed)),
             "grad_norm": 1.0 + 0.1 * math.sin(0.3 * s + seed)} for s in range(1, steps + 1)]


def table(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def drift(records: list[dict], references: list[Path], **settings) -> list:
    drift_settings = ReferenceDriftSettings(**settings)
    band = reference_band([str(p) for p in references], [], drift_settings)
    monitor = HealthMonitor(HealthSettings(reference_drift=drift_settings), None, reference=band)
    for record in records:
        monitor.observe({**record, "time": 1000.0 * record["step"]})
    return [a for a in monitor.alerts if a.detector == "reference_drift"]


def test_a_run_inside_its_references_band_raises_nothing_and_one_that_parts_is_named(tmp_path):
    refs = [table(tmp_path, "a", curve(1.0, seed=0.0)), table(tmp_path, "b", curve(1.03, seed=1.0))]
    assert drift(curve(1.01, seed=2.0), refs) == []  # a third 'seed' between and around them
    parted = curve(1.01, seed=2.0)
    for record in parted[149:]:
        record["loss"] *= 1.4  # the recipe changed at step 150: 40% higher from there
    found = drift(parted, refs)
    # the level is the median of the last 10 steps: outside once most of them are, 3 logs later the alert
    assert [(a.values["metric"], a.onset_step, a.step) for a in found] == [("loss", 154, 156)]
    assert "loss left the reference band at step 154" in found[0].message and "+" in found[0].message
    assert "2 reference runs (a.jsonl, b.jsonl)" in found[0].message


def test_the_band_is_the_references_spread_and_never_narrower_than_the_tolerance(tmp_path):
    one = [table(tmp_path, "a", curve(1.0))]
    assert drift(curve(1.04), one) == []  # inside 5%
    assert [a.onset_step for a in drift(curve(1.08), one)] == [1]  # 8% above a single reference: from step 1
    assert drift(curve(1.08), one, tolerance=0.1) == []
    band = build_band([load_reference(p) for p in one], ReferenceDriftSettings())
    assert set(band.bands) == {"loss", "grad_norm"} and band.step_scale == 1.0
    assert drift(curve(1.0, steps=400)[300:], one) == []  # beyond the references' last step: nothing to judge


def test_a_reference_with_another_batch_size_is_aligned_by_consumed_samples(tmp_path):
    """A reference at global batch 4 against a run at batch 2: the run's step 2s is the reference's step s."""
    from msmon.reference.band import step_scale
    from msmon.reference.curve import ReferenceCurve, ReferenceKind

    ref = ReferenceCurve(Path("r"), ReferenceKind.TABLE, load_reference(table(tmp_path, "a", curve(1.0))).steps,
                         {}, global_batch_size=4)
    assert step_scale(ReferenceDriftSettings(), [ref], 2) == 0.5
    assert step_scale(ReferenceDriftSettings(align="step"), [ref], 2) == 1.0
    assert step_scale(ReferenceDriftSettings(), [ref], None) == 1.0
    with pytest.raises(MsmonError, match="align is samples"):
        step_scale(ReferenceDriftSettings(align="samples"), [ref], None)


def test_tags_and_references_without_the_metrics_are_one_line_errors(tmp_path):
    assert parse_tags(["loss=lm loss", " grad_norm = grad-norm "]) == {"loss": "lm loss", "grad_norm": "grad-norm"}
    with pytest.raises(MsmonError, match="is not metric=tag"):
        parse_tags(["loss"])
    only_lr = table(tmp_path, "lr", [{"step": s, "loss": 1.0, "learning_rate": 1e-3} for s in range(1, 5)])
    with pytest.raises(MsmonError, match="share none of health.reference_drift.metrics"):
        build_band([load_reference(only_lr)], ReferenceDriftSettings(metrics=["grad_norm"]))


def test_validate_names_a_reference_that_is_no_source(tmp_path):
    from msmon.validate import validate_config

    good = table(tmp_path, "a", curve(1.0))
    result = validate_config(monitor_config={"monitor_type": "file", "run_name": "x1", "reference": {
        "runs": [str(good), str(tmp_path / "nowhere")], "tags": ["loss"]}})
    found = [(f.code, f.path) for f in result.findings if f.code == "MS813"]
    assert found == [("MS813", "monitor_config.reference.runs[1]"), ("MS813", "monitor_config.reference.tags")]
    assert all("nowhere: no such file" in f.message for f in result.findings if f.path.endswith("runs[1]"))


def test_the_first_exact_and_band_partings_name_the_metric_and_step(tmp_path):
    from msmon.health.agreement import first_band_parting, first_exact_parting

    base = curve(1.0)
    same, changed = load_reference(table(tmp_path, "same", base)), [dict(r) for r in base]
    changed[41]["grad_norm"] = math.nextafter(changed[41]["grad_norm"], 9.0)  # one bit at step 42
    assert first_exact_parting(same, load_reference(table(tmp_path, "a", base))) == (None, 300)
    found, common = first_exact_parting(load_reference(table(tmp_path, "b", changed)), same)
    assert (found.metric, found.step, common) == ("grad_norm", 42, 300)
    assert "grad_norm parts at step 42" in found.describe()
    sparse = load_reference(table(tmp_path, "c", [r for r in base if r["step"] % 10 == 0]))
    assert first_exact_parting(sparse, same) == (None, 30)  # the common logged steps only
    with pytest.raises(MsmonError, match="share no logged step"):
        first_exact_parting(load_reference(table(tmp_path, "d", curve(1.0, steps=5))),
                            load_reference(table(tmp_path, "e", [{**r, "step": r["step"] + 100} for r in base])))
    refs = [load_reference(table(tmp_path, "r1", curve(1.0, seed=0.0))),
            load_reference(table(tmp_path, "r2", curve(1.03, seed=1.0)))]
    settings = ReferenceDriftSettings()
    band = build_band(refs, settings)
    assert first_band_parting(load_reference(table(tmp_path, "in", curve(1.01, seed=2.0))), band, settings) is None
    out = first_band_parting(load_reference(table(tmp_path, "out", curve(1.3, seed=2.0))), band, settings)
    assert out is not None and (out.metric, out.step) == ("loss", 1) and out.low < out.expected < out.high < out.value


def noisy(level: float, seed: int, steps: int = 300, sigma: float = 0.1) -> list[dict]:
    """``curve``'s falling loss and flat grad norm at ``level``, each log scattered by a factor exp(N(0, sigma))."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"step": s, "loss": level * (1.5 + 2.5 * math.exp(-s / 60)) * math.exp(sigma * rng.standard_normal()),
             "grad_norm": level * math.exp(sigma * rng.standard_normal())} for s in range(1, steps + 1)]


def test_two_references_that_agree_closely_draw_a_band_no_narrower_than_their_own_noise(tmp_path):
    """Two seeds whose curves happen to agree say little about a third: the band is never narrower than noise_factor
    x the references' own scatter of one log (here 10%: +-6 x 0.1 in the logs, about -45%..+82%)."""
    import numpy as np

    from msmon.reference.band import step_noise

    refs = [table(tmp_path, "a", noisy(1.0, seed=0)), table(tmp_path, "b", noisy(1.0, seed=1))]
    third = noisy(1.4, seed=2)  # 40% above both, as far as another seed of a quickstart may lie
    assert drift(third, refs) == []
    assert drift(third, refs, noise_factor=0.0)  # their own spread alone: too narrow
    far = drift(noisy(2.5, seed=2), refs)  # 2.5x: outside, from the first logs
    assert far and "loss left" in far[0].message and "grad_norm left" in far[0].message, far
    assert drift(curve(1.08), [table(tmp_path, "one", noisy(1.0, seed=0))])  # one reference: the tolerance alone
    # the scatter of one log from the second differences: the trend (a falling loss, a schedule) adds nothing
    steps = np.arange(1, 2001, dtype=float)
    scattered = np.exp(2.0 - steps / 500 + 0.2 * np.random.default_rng(3).standard_normal(len(steps)))
    assert 0.18 < step_noise(scattered) < 0.22
    assert step_noise(5e-3 * np.cos(steps / 2000)) < 1e-3 and step_noise(np.array([1.0, 2.0])) == 0.0


def schedule(peak: float, steps: int = 200, warmup: int = 10, every: int = 1) -> list[dict]:
    """A learning rate warmed up linearly over ``warmup`` steps, then cosine to 0; logged every ``every`` steps."""
    def rate(s: int) -> float:
        if s <= warmup:
            return peak * s / warmup
        return peak * 0.5 * (1 + math.cos(math.pi * (s - warmup) / (steps - warmup)))
    return [{"step": s, "loss": 3.0, "learning_rate": rate(s)} for s in range(every, steps, every)]


def test_a_reference_logged_every_10_steps_and_one_logged_every_step_draw_one_narrow_band(tmp_path):
    """A sparse reference and a dense one of the same schedule: each smoothed value stands at its window's centre
    (a trailing median of 10 logs lags a ramp by 4.5 steps, one log a window lags nothing), and the band's grid has
    the dense reference's steps (the warm-up's peak falls between the sparse one's logs). Before both, the band was
    x3.2 wide and a doubled peak left it only at step 116, through the cosine's tail."""
    refs = [table(tmp_path, "sparse", schedule(5e-3, every=10)), table(tmp_path, "dense", schedule(5e-3))]
    settings = {"metrics": ("learning_rate",)}
    assert drift(schedule(5e-3), refs, **settings) == []  # the same schedule: inside all along
    doubled = drift(schedule(1e-2), refs, **settings)
    assert doubled and doubled[0].onset_step <= 15, [(a.onset_step, a.message) for a in doubled]
    band = build_band([load_reference(p) for p in refs], ReferenceDriftSettings(**settings)).bands["learning_rate"]
    assert math.exp(max(band.half_width)) < 1.3  # widest where the cosine nears 0 (before: x3.2 from the warm-up)


def test_references_logged_every_10_steps_hold_a_run_logged_every_step(tmp_path):
    """Both references logged every 10 steps, the run every step: between two of the references' logs their curve
    may be anywhere from one log's band to the other's (the warm-up's peak at step 10-11 lies between logs 10 and
    20), so the band spans both there. Before, the run's level between two logs was judged against the straight
    line between them, and the same schedule left the band where it bends (here at step 188, near the cosine's end;
    the recorded quickstart's seeds, thinned to every 10th step, at step 10 and again at 104)."""
    refs = [table(tmp_path, name, schedule(5e-3, every=10)) for name in ("a", "b")]
    settings = {"metrics": ("learning_rate",)}
    assert drift(schedule(5e-3), refs, **settings) == []
    doubled = drift(schedule(1e-2), refs, **settings)
    assert doubled and doubled[0].onset_step <= 20, [(a.onset_step, a.message) for a in doubled]
