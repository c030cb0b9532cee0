"""This training process's memory, read at logging steps only: its resident host memory (``/proc`` through psutil)
and, on a device whose MindSpore reports it (Ascend), the device memory allocated and its peak, in MiB. A device
read costs a call into the runtime; on CPU there is no device and nothing is read."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from msmon.errors import describe
from msmon.util.memory import MIB

logger = logging.getLogger("msmon")


def _device_readers() -> tuple[Callable[[], int], Callable[[], int]] | None:
    """MindSpore's (allocated, peak allocated) device-memory functions, or None on CPU, without them, or when no
    MindSpore is imported (nothing of it trains here: msmon never imports it for this)."""
    mindspore = sys.modules.get("mindspore")
    if mindspore is None or str(mindspore.get_context("device_target")).upper() == "CPU":
        return None
    for module_name in ("runtime", "hal"):  # mindspore.runtime from 2.5, mindspore.hal before
        module: Any = getattr(mindspore, module_name, None)
        allocated, peak = getattr(module, "memory_allocated", None), getattr(module, "max_memory_allocated", None)
        if callable(allocated) and callable(peak):
            return allocated, peak
    return None


class MemoryReads:
    """``read()`` -> (host, device, device peak) MiB; what cannot be read is None (decided at the first read)."""

    def __init__(self) -> None:
        self._process: Any = None
        self._device: tuple[Callable[[], int], Callable[[], int]] | None = None
        self._device_looked_up = False

    def read(self) -> tuple[float | None, float | None, float | None]:
        return self.host(), *self._device_mb()

    def host(self) -> float | None:
        if self._process is None:
            import psutil

            self._process = psutil.Process()
        return self._process.memory_info().rss / MIB

    def _device_mb(self) -> tuple[float | None, float | None]:
        if not self._device_looked_up:
            self._device_looked_up = True
            self._device = _device_readers()
        if self._device is None:
            return None, None
        allocated, peak = self._device
        try:
            return allocated() / MIB, peak() / MIB
        except (RuntimeError, ValueError) as exc:  # the runtime refuses: device memory is not recorded
            logger.warning("msmon: device memory is not recorded: %s", describe(exc))
            self._device = None
            return None, None
