"""run_name and project_name: generated when absent, safe characters, never an existing run (MS1xx)."""

from __future__ import annotations

import os
import re

from msmon.findings import Finding, error
from msmon.validate.context import CheckContext

SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
NAME_MAX = 255  # bytes of one directory name on Linux file systems (ext4, xfs; PC_NAME_MAX)
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")


def model_name(ctx: CheckContext) -> str:
    """The model's name for generated run names: trainer.model_name, else the model config's type."""
    for key in ("trainer.model_name", "model.model_config.type", "model.arch.type"):
        value = ctx.get(key)
        if isinstance(value, str) and value.strip():
            cleaned = _UNSAFE_CHARS.sub("_", value.strip()).strip("._-")
            if cleaned:
                return cleaned
    return "run"


def needs_generated_name(run_name: str | None) -> bool:
    return run_name is None or not run_name.strip() or run_name.strip().lower() == "auto"


def name_problem(value: str) -> str:
    """Why ``value`` cannot be a directory name, or ''."""
    if "/" in value or "\\" in value:
        return "contains a path separator"
    if value in {".", ".."} or ".." in value:
        return "contains '..'"
    if not SAFE_NAME.match(value):
        bad = "".join(sorted(set("".join(_UNSAFE_CHARS.findall(value)))))
        return f"contains characters other than letters, digits, '-', '_', '.' ({bad!r})"
    if len(value.encode()) > NAME_MAX:
        return f"is {len(value.encode())} characters long; a directory name has at most {NAME_MAX}"
    return ""


def check_names(ctx: CheckContext) -> list[Finding]:
    findings: list[Finding] = []
    for key in ("project_name", "run_name"):
        value = getattr(ctx.settings, key)
        if key == "run_name" and needs_generated_name(value):
            continue
        problem = name_problem(value) if value else "is empty"
        if problem:
            findings.append(
                error(
                    "MS101" if key == "run_name" else "MS102",
                    f"monitor_config.{key}",
                    f"{key} {value if len(value) <= 60 else value[:40] + '...'!r} {problem}",
                    "use a shorter name" if problem.startswith("is ") and "long" in problem else
                    "use only letters, digits, '-', '_' and '.', e.g. llama_lr5e-3_v2",
                )
            )
    if findings or not ctx.settings.run_name:
        return findings
    run_dir = ctx.save_dir() / ctx.settings.project_name / ctx.settings.run_name
    if not ctx.resume and os.path.isdir(run_dir) and any(run_dir.iterdir()):
        findings.append(
            error(
                "MS103",
                "monitor_config.run_name",
                f"run directory {run_dir} already holds data: this run would overwrite or mix with it",
                "pick a new run_name (or 'auto'), or continue that run with `msmon run --resume`",
            )
        )
    return findings
