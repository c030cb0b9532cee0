"""The reference runs a run must follow (MS813): each one a source msmon reads, the tags well formed. Only the kind
of each source is read here (a million-step reference takes seconds to load: the run loads it)."""

from __future__ import annotations

from pathlib import Path

from msmon.errors import MsmonError
from msmon.findings import Finding, error
from msmon.reference.band import parse_tags
from msmon.reference.load import reference_kind
from msmon.validate.context import CheckContext

CODE = "MS813"


def check_reference(ctx: CheckContext) -> list[Finding]:
    reference = ctx.settings.reference
    findings: list[Finding] = []
    for index, run in enumerate(reference.runs):
        try:
            reference_kind(Path(run))
        except MsmonError as exc:
            findings.append(error(CODE, f"monitor_config.reference.runs[{index}]", exc.message, exc.hint))
    try:
        parse_tags(reference.tags)
    except MsmonError as exc:
        findings.append(error(CODE, "monitor_config.reference.tags", exc.message, exc.hint))
    return findings
