"""A finding: one problem (or risk) found in a config, with the key, the line and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum

from msmon.util.jsonfiles import JsonObject


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """A validation result item; ``code`` is stable across releases (docs/config.md lists them)."""

    severity: Severity
    code: str
    path: str
    message: str
    hint: str = ""
    line: int | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def with_line(self, line: int | None) -> Finding:
        return Finding(self.severity, self.code, self.path, self.message, self.hint, line)

    def to_dict(self) -> JsonObject:
        data = asdict(self)
        data["severity"] = self.severity.value
        return {key: data[key] for key in ("severity", "code", "path", "line", "message", "hint")}


def error(code: str, path: str, message: str, hint: str = "") -> Finding:
    return Finding(Severity.ERROR, code, path, message, hint)


def warning(code: str, path: str, message: str, hint: str = "") -> Finding:
    return Finding(Severity.WARNING, code, path, message, hint)
