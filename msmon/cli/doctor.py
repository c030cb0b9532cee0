"""`msmon doctor [CONFIG] [--json] [--port N]`: can this environment run a monitored training?"""

from __future__ import annotations

import json

import typer

from msmon.cli.common import handle_errors
from msmon.errors import ExitCode


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)


@handle_errors
def doctor(
    config: str = typer.Argument(None, help="Also check this training YAML: its save_dir, device target, board port."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document to stdout."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="The board port to check (with CONFIG)."),
) -> None:
    """Check versions, the tested pair, devices, msrun and known-bad combinations (exit 0 fine, 1 a problem)."""
    from msmon.cli.render import finding_line
    from msmon.ops.doctor import diagnose

    report = diagnose(config, port)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        width = max(len(name) for name in report.versions) + 2
        print(f"{'python':<{width}}{report.python}")
        for name, version in report.versions.items():
            note = ""
            if name == "mindformers" and version is not None:
                note = "   (tested pair)" if report.tested_pair else "   (not a tested pair)"
            print(f"{name:<{width}}{version or 'not installed'}{note}")
        shown = "; ".join(f"{name} {'yes' if d.available else 'no'} ({d.detail})" for name, d in report.devices.items())
        print(f"{'devices':<{width}}{shown}")
        print(f"{'msrun':<{width}}{report.msrun or 'not found'}")
        if report.config is not None:
            c = report.config
            print(f"{'config':<{width}}{c['path']}: save_dir {c['save_dir']} ({c['free_mb']} MB free), "
                  f"device_target {c['device_target']}, board port {c['board_port']} "
                  f"{'free' if c['port_free'] else 'busy'}")
        for finding in report.findings:
            print(finding_line(finding))
        errors = sum(f.is_error for f in report.findings)
        warnings = len(report.findings) - errors
        print(f"{'ok' if report.ok else 'problems'}: {errors} error(s), {warnings} warning(s)")
    if not report.ok:
        raise typer.Exit(ExitCode.INVALID)
