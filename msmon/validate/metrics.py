"""track_metrics: known names, and exposed by this training config (MS3xx)."""

from __future__ import annotations

from msmon.config.coerce import suggest
from msmon.config.metrics import METRICS, canonical_metric, known_metric_names
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext


def check_metrics(ctx: CheckContext) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[str] = set()
    for index, name in enumerate(ctx.settings.track_metrics):
        path = f"monitor_config.track_metrics[{index}]"
        canonical = canonical_metric(name)
        if canonical is None:
            hint = suggest(name, known_metric_names()) or f"known metrics: {', '.join(METRICS)}"
            findings.append(error("MS301", path, f"unknown metric {name!r}", hint))
            continue
        if canonical in seen:
            findings.append(warning("MS303", path, f"metric {name!r} is listed twice", "remove the duplicate"))
            continue
        seen.add(canonical)
        exposure = METRICS[canonical].exposure(ctx.training)
        if not exposure.exposed:
            findings.append(
                error(
                    "MS302",
                    path,
                    f"metric {name!r} is not produced by this training config: the dashboard would show a flat line "
                    "of placeholder zeros that looks perfect and means nothing",
                    exposure.fix,
                )
            )
    return findings
