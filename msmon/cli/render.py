"""Rich rendering of findings and of the resolved monitor_config (CLI only)."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from msmon.config.coerce import field_docs
from msmon.config.schema import MonitorSettings
from msmon.findings import Finding
from msmon.util.mapping import dotted_get
from msmon.validate.validator import ValidationResult

TOP_LEVEL = {name for name in MonitorSettings.__dataclass_fields__ if "." not in name}


def findings_table(findings: list[Finding]) -> Table:
    table = Table(title="Findings", show_lines=False, expand=False)
    for column in ("severity", "code", "key", "line", "message", "fix"):
        table.add_column(column, overflow="fold")
    for f in findings:
        style = "bold red" if f.is_error else "yellow"
        table.add_row(
            f"[{style}]{f.severity.value}[/]", f.code, f.path, str(f.line or ""), f.message, f.hint
        )
    return table


def _show(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def finding_line(f: Finding) -> str:
    """One greppable line per finding, for logs and pipes."""
    where = f"{f.path} (line {f.line})" if f.line else f.path
    return f"{f.severity.value} {f.code} {where}: {f.message}" + (f" -> {f.hint}" if f.hint else "")


def resolved_table(result: ValidationResult, show_all: bool) -> tuple[Table, int]:
    """The resolved monitor_config with each value's source; returns the count of hidden default keys."""
    table = Table(title="Resolved monitor_config", expand=False)
    for column in ("key", "value", "source"):
        table.add_column(column, overflow="fold")
    data = result.monitor_config()
    hidden = 0
    for key, *_ in field_docs(MonitorSettings):
        source = result.provenance.get(key, "default")
        if not show_all and source == "default" and key not in TOP_LEVEL:
            hidden += 1
            continue
        value = dotted_get(data, key)
        table.add_row(key, _show(value), source)
    for key, value in data.items():
        if key not in MonitorSettings.__dataclass_fields__:
            table.add_row(key, _show(value), "file (mindformers key)")
    return table, hidden


def print_result(console: Console, result: ValidationResult, config: str, show_all: bool) -> None:
    errors = sum(f.is_error for f in result.findings)
    warnings = len(result.findings) - errors
    console.print(f"config: {config}")
    if result.findings and console.is_terminal:
        console.print(findings_table(result.findings))
    else:
        for finding in result.findings:
            console.print(finding_line(finding), markup=False)
    table, hidden = resolved_table(result, show_all)
    console.print(table)
    if hidden:
        console.print(f"({hidden} nested keys at their defaults; --all shows them)")
    if result.pipeline.stages > 1:
        console.print(f"metrics from: {result.pipeline.describe()}", markup=False)
    run_dir = result.settings.run_dir()
    if result.valid:
        console.print(f"[bold green]valid[/]: {warnings} warning(s); run directory would be {run_dir}")
    else:
        console.print(f"[bold red]invalid[/]: {errors} error(s), {warnings} warning(s)")
