"""monitor_type: each backend's package importable (found, not imported), MLflow URI well formed (MS5xx)."""

from __future__ import annotations

from urllib.parse import urlparse

from msmon.compat import findable
from msmon.findings import Finding, error
from msmon.validate.context import CheckContext

#: backend -> (import names that must be findable, pip package to install)
REQUIREMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "mindinsight": (("mindspore", "mindinsight"), "mindinsight==2.3.1 protobuf==3.20.1"),
    "tensorboard": (("tensorboardX",), "tensorboardX"),
    "mlflow": (("mlflow",), "'msmon[mlflow]'"),
    "file": ((), ""),
}
MLFLOW_SCHEMES = {"http", "https", "sqlite", "file", "postgresql", "mysql", "databricks"}


def check_backends(ctx: CheckContext) -> list[Finding]:
    findings: list[Finding] = []
    for index, backend in enumerate(ctx.settings.monitor_type):
        modules, package = REQUIREMENTS[backend]
        missing = [m for m in modules if not findable(m)]
        if missing:
            findings.append(
                error(
                    "MS502",
                    f"monitor_config.monitor_type[{index}]",
                    f"backend {backend!r} needs the Python package {', '.join(missing)}, which is not installed",
                    f"pip install {package}",
                )
            )
    if "mlflow" in ctx.settings.monitor_type:
        findings.extend(_check_mlflow_uri(ctx.settings.mlflow.tracking_uri))
    return findings


def _check_mlflow_uri(uri: str | None) -> list[Finding]:
    path = "monitor_config.mlflow.tracking_uri"
    if not uri:
        return [
            error(
                "MS503",
                path,
                "monitor_type includes mlflow but no tracking URI is set",
                "set monitor_config.mlflow.tracking_uri, e.g. http://127.0.0.1:5000 or sqlite:///mlflow.db",
            )
        ]
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if scheme not in MLFLOW_SCHEMES:
        return [error("MS504", path, f"tracking URI {uri!r} has no known scheme", "use http(s)://host:port or sqlite:///path.db")]
    if scheme in {"http", "https"} and not parsed.hostname:
        return [error("MS504", path, f"tracking URI {uri!r} has no host", "write http://HOST:PORT")]
    if scheme in {"http", "https"}:
        try:
            parsed.port  # noqa: B018 - raises on a malformed port
        except ValueError:
            return [error("MS504", path, f"tracking URI {uri!r} has an invalid port", "write http://HOST:PORT")]
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        return [error("MS504", path, f"tracking URI {uri!r} is malformed", "write sqlite:///relative.db or sqlite:////abs.db")]
    if scheme == "file":
        return [
            error(
                "MS504",
                path,
                "mlflow 3 refuses a plain file store",
                "use sqlite:///mlflow.db or a tracking server (http://host:port)",
            )
        ]
    return []
