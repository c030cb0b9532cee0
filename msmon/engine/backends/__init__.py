"""The backend registry: ``monitor_type`` names -> Backend classes (built-ins plus registered ones)."""

from __future__ import annotations

from typing import TypeVar

from msmon.engine.backends.base import Backend
from msmon.engine.backends.file import FileBackend
from msmon.engine.backends.mindinsight import MindInsightBackend
from msmon.engine.backends.mlflow import MlflowBackend
from msmon.engine.backends.tensorboard import TensorBoardBackend

B = TypeVar("B", bound=type[Backend])

_REGISTRY: dict[str, type[Backend]] = {
    cls.name: cls for cls in (FileBackend, MindInsightBackend, TensorBoardBackend, MlflowBackend)
}


def register_backend(cls: B) -> B:
    """Register a Backend subclass under its ``name`` (usable as a class decorator)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def unregister_backend(name: str) -> None:
    """Remove a registered backend (no error when absent)."""
    _REGISTRY.pop(name, None)


def backend_class(name: str) -> type[Backend]:
    """The class registered as ``name``; ValueError listing the valid names otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; valid: {', '.join(sorted(_REGISTRY))}") from None


def backend_names() -> list[str]:
    """Every registered backend name."""
    return sorted(_REGISTRY)
