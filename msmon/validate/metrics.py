"""track_metrics: known names, and exposed by this training config (MS3xx).

With monitoring off nothing is recorded, so a metric the config does not expose is no error: a warning when
``enable_monitor`` is false, nothing at all without a monitor_config section (its metrics were never asked for).
"""

from __future__ import annotations

from msmon.config.coerce import suggest
from msmon.config.metrics import METRICS, canonical_metric, known_metric_names
from msmon.findings import Finding, error, warning
from msmon.validate.context import CheckContext


def check_metrics(ctx: CheckContext) -> list[Finding]:
    monitoring = ctx.settings.enable_monitor
    if not monitoring and not isinstance(ctx.training.get("monitor_config"), dict):
        return []
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
        spec = METRICS[canonical]
        exposure = spec.exposure(ctx.training)
        if not exposure.exposed:
            if spec.code == "MS302":
                message = (f"metric {name!r} is not produced by this training config: the dashboard would show a "
                           "flat line of placeholder zeros that looks perfect and means nothing")
            else:
                message = f"metric {name!r} cannot be recorded with this training config"
            if monitoring:
                findings.append(error(spec.code, path, message, exposure.fix))
            else:
                findings.append(warning(spec.code, path, message + " (monitoring is off: it matters once "
                                        "enable_monitor is true)", exposure.fix))
    return findings
