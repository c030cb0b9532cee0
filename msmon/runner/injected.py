"""Inside a process of ``msmon run CONFIG -- COMMAND``: the mindformers ``Trainer`` that the user's code builds gets
msmon's callback, session, heartbeat and health, and a config without msmon's keys; no line of the user's code
changes.

``install()`` (called by msmon's ``sitecustomize``) arms an import hook: when mindformers is first imported, every
YAML it loads (``MindFormerConfig(path)``) loses msmon's keys before mindformers' template sees them, as in
``msmon run``; ``Trainer.__init__``, ``train`` and ``finetune`` are wrapped. The wrapped ``__init__`` hands
mindformers the run directory's ``mindformers.yaml`` in place of CONFIG's path; the wrapped ``train`` and
``finetune`` open this rank's monitor (msmon.runner.worker's ``Worker``: the same session, result file and
signals as the native form), append the callback, train, and leave the rank's result.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from msmon.foreign import ConfigValue, Mindformers, Passed

if TYPE_CHECKING:
    from msmon.runner.worker import Worker

logger = logging.getLogger("msmon")

TRAINER_MODULE = "mindformers.trainer.trainer"
CONFIG_MODULE = "mindformers.tools.register.config"
ACTIVE_LINE = "msmon: monitoring this process's mindformers Trainer (msmon run CONFIG -- COMMAND)"


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of each module it watches so that the module is patched right after
    it runs; leaves ``sys.meta_path`` once every one is patched."""

    def __init__(self) -> None:
        self.pending: dict[str, Callable[[ModuleType], None]] = {
            CONFIG_MODULE: lambda module: patch_config(module.MindFormerConfig),
            TRAINER_MODULE: lambda module: patch(module.Trainer),
        }

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        patcher = self.pending.pop(name, None)
        if patcher is None:
            return None
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_and_patch(module: ModuleType) -> None:
            run_module(module)
            patcher(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Arm the hook (once per process)."""
    if not any(isinstance(finder, _PatchOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


def without_msmon_keys(config: dict[str, ConfigValue]) -> dict[str, ConfigValue]:
    """``config`` (a YAML as mindformers read it) as ``msmon run`` hands it over: msmon's keys removed from
    ``monitor_config`` (in place; mindformers' template refuses an unknown key)."""
    if isinstance(config.get("monitor_config"), dict):
        from msmon.config.split import split_monitor_config

        fit, _ = split_monitor_config(config)
        config.update({key: value for key, value in fit.items() if config.get(key) != value})
    return config


def patch_config(config_class: type) -> None:
    """Every YAML mindformers loads (``MindFormerConfig(path)``) loses msmon's keys before its template applies."""
    read = getattr(config_class, "_file2dict", None)
    if read is None or getattr(read, "_msmon_patched", False):
        return

    @functools.wraps(read)
    def file2dict(*args: Passed, **kwargs: Passed) -> Passed:
        loaded = read(*args, **kwargs)
        return without_msmon_keys(loaded) if isinstance(loaded, dict) else loaded

    file2dict._msmon_patched = True  # type: ignore[attr-defined]
    config_class._file2dict = staticmethod(file2dict)  # type: ignore[attr-defined]


class _Rank:
    """This process's monitor: one ``Worker`` for the first training, nothing for a nested one."""

    def __init__(self) -> None:
        from msmon.runner.protocol import RankSpec

        self.spec = RankSpec.from_env(os.environ)
        self.worker: Worker | None = None
        self.training = False

    def config_for_mindformers(self, args: Mindformers) -> Mindformers:
        """CONFIG's path -> the run directory's ``mindformers.yaml`` (overrides and interpolations resolved)."""
        if isinstance(args, str | os.PathLike):
            source = self.spec.config_path
            same = source is not None and Path(args).resolve() == source.resolve()
            return str(self.spec.mindformers_yaml) if same else args
        return args

    def around(self, trainer: Mindformers, train: Callable[..., Passed], args: tuple[Passed, ...],
               kwargs: dict[str, Passed]) -> Passed:
        """Train with msmon's callback and leave this rank's result, however the training ends."""
        if self.training:
            return train(trainer, *args, **kwargs)
        from msmon.runner.worker import Worker

        self.training = True
        self.worker = Worker(self.spec, own_process=False)
        try:
            self.worker.begin()
            logger.info(ACTIVE_LINE)
            callbacks = self.worker.monitor()
            from msmon.runner.trainer import prepare_training

            prepare_training(self.worker.training)  # as the native form does: datasets, mcore pieces, CPU barrier
            trainer.callbacks = [*(trainer.callbacks or []), *callbacks]
            result = train(trainer, *args, **kwargs)
        except BaseException as exc:
            self.worker.end(exc)
            raise
        finally:
            self.training = False
        self.worker.end(None)
        return result


_rank: _Rank | None = None


def _current() -> _Rank:
    global _rank
    if _rank is None:
        _rank = _Rank()
    return _rank


def patch(trainer_class: type) -> None:
    """Wrap ``__init__``, ``train`` and ``finetune`` of mindformers' Trainer (once)."""
    if getattr(trainer_class, "_msmon_patched", False):
        return
    init = trainer_class.__init__  # type: ignore[misc]

    @functools.wraps(init)
    def __init__(self: Mindformers, args: Mindformers = None, *rest: Passed, **kwargs: Passed) -> None:
        from msmon.runner.cpu_support import register_cpu_support

        register_cpu_support()  # a config that names msmon's CPU train-step wrapper builds on CPU as under msmon
        init(self, _current().config_for_mindformers(args), *rest, **kwargs)

    trainer_class.__init__ = __init__  # type: ignore[misc]
    for name in ("train", "finetune"):
        original = getattr(trainer_class, name)

        def monitored(self: Mindformers, *args: Passed, _original: Callable[..., Passed] = original,
                      **kwargs: Passed) -> Passed:
            return _current().around(self, _original, args, kwargs)

        setattr(trainer_class, name, functools.wraps(original)(monitored))
    trainer_class._msmon_patched = True  # type: ignore[attr-defined]
