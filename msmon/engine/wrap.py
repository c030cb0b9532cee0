"""Wrapping a framework function (or a class's method) that msmon taps, once per process, where msmon.compat (or
the caller) names it."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TypeVar

from msmon.compat import known
from msmon.errors import MsmonError
from msmon.foreign import Passed

T = TypeVar("T")

logger = logging.getLogger("msmon")


def entry_for(table: Mapping[str, T], version: str | None, what: str, without: str) -> T | None:
    """``table``'s entry for this mindformers ``version``, or None after one warning: ``what`` is unknown there and
    ``without`` says what happens instead."""
    try:
        return known(table, version, what)
    except MsmonError as exc:
        logger.warning("msmon: %s; %s", exc.message, without)
        return None


def wrap_once(module_name: str, attribute: str, wrap: Callable[[Callable[..., Passed]], Callable[..., Passed]]) -> None:
    """Replace ``module_name.attribute`` (a function, or a class's method: ``Model.train``) by ``wrap(original)``; a
    second call leaves the wrapper as it is."""
    owner: ModuleType | Passed = importlib.import_module(module_name)
    *path, name = attribute.split(".")
    for part in path:
        owner = getattr(owner, part)
    original = getattr(owner, name)
    if getattr(original, "msmon_wrapped", False):
        return
    wrapper = wrap(original)
    wrapper.msmon_wrapped = True  # type: ignore[attr-defined]
    setattr(owner, name, wrapper)
