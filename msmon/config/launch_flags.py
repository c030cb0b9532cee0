"""``run_mindformer.py``'s flags on ``msmon run``: the same names and meaning, turned into config overrides.

``msmon run CONFIG --run_mode finetune --load_checkpoint CKPT`` trains what
``python run_mindformer.py --config CONFIG --run_mode finetune --load_checkpoint CKPT`` trains: each flag sets the
key run_mindformer.py sets (after the YAML and msmon's ``KEY=VALUE`` overrides), ``--options KEY=VALUE ...``
merges like its ``--options``, and ``--register_path DIR`` exports ``REGISTER_PATH`` as it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from msmon.errors import ExitCode, MsmonError
from msmon.util.tables import shipped_rows


class FlagKind(Enum):
    TEXT = "text"
    INTEGER = "integer"
    BOOLEAN = "boolean"  # run_mindformer.py's str2bool: True/False
    BOOLEAN_OR_TEXT = "boolean or text"  # str2bool_or_str (resume_training: True, False or a checkpoint name)


@dataclass(frozen=True)
class LaunchFlag:
    """One flag of run_mindformer.py (mindformers 1.8-1.9) and the config key it sets."""

    name: str
    key: str
    kind: FlagKind
    help: str


#: launch_flags.toml: one row a flag.
LAUNCH_FLAGS: tuple[LaunchFlag, ...] = tuple(
    LaunchFlag(row["name"], row["key"], FlagKind(row["kind"]), row["help"])
    for row in shipped_rows(__file__, "flag")
)
OPTIONS = "--options"
REGISTER_PATH = "--register_path"
BY_NAME = {flag.name: flag for flag in LAUNCH_FLAGS}


@dataclass(frozen=True)
class LaunchArgs:
    """What run_mindformer.py's flags on a command line ask for."""

    overrides: tuple[str, ...] = ()
    register_path: str | None = None


def parse_launch_flags(args: Sequence[str]) -> tuple[list[str], LaunchArgs]:
    """(the ``KEY=VALUE`` overrides among ``args``, what its run_mindformer.py flags ask for); MsmonError (exit 2)
    for an unknown flag or a value of the wrong kind. Flags take ``--flag VALUE`` or ``--flag=VALUE``."""
    plain: list[str] = []
    flagged: list[str] = []
    options: list[str] = []
    register_path = None
    items = list(args)
    while items:
        item = items.pop(0)
        if not item.startswith("--"):
            plain.append(item)
            continue
        name, has_value, value = item.partition("=")
        if name == OPTIONS:
            options += [value] if has_value else []
            while items and not items[0].startswith("--"):
                options.append(items.pop(0))
            continue
        if name != REGISTER_PATH and name not in BY_NAME:
            raise MsmonError(f"no such option: {name}", "`msmon run --help` lists the options and run_mindformer.py's "
                             "flags it accepts", ExitCode.USAGE)
        if not has_value:
            if not items:
                raise MsmonError(f"{name} needs a value", f"write {name} VALUE", ExitCode.USAGE)
            value = items.pop(0)
        if name == REGISTER_PATH:
            register_path = value
        else:
            flag = BY_NAME[name]
            flagged.append(f"{flag.key}={_typed(flag, value)}")
    return plain, LaunchArgs(tuple(flagged + options), register_path)


def _typed(flag: LaunchFlag, value: str) -> str:
    """``value`` as an override value of the flag's kind."""
    if flag.kind in (FlagKind.BOOLEAN, FlagKind.BOOLEAN_OR_TEXT) and value.lower() in ("true", "false"):
        return value.capitalize()
    if flag.kind is FlagKind.BOOLEAN:
        raise MsmonError(f"{flag.name} {value!r}: expected True or False", f"write {flag.name} True", ExitCode.USAGE)
    if flag.kind is FlagKind.INTEGER:
        try:
            return str(int(value))
        except ValueError:
            raise MsmonError(f"{flag.name} {value!r}: expected an integer", f"write {flag.name} 1",
                             ExitCode.USAGE) from None
    from msmon.config.loader import override_value  # OmegaConf: not at `msmon --help`'s import

    return override_value(value)


def help_text() -> str:
    """The flags for ``msmon run --help``."""
    lines = [f"{flag.name} {flag.kind.value.upper().replace(' ', '_')}: {flag.help} ({flag.key})"
             for flag in LAUNCH_FLAGS]
    lines += [f"{OPTIONS} KEY=VALUE ...: merged into the config, as run_mindformer.py's --options",
              f"{REGISTER_PATH} DIR: exported as REGISTER_PATH (auto_register modules)"]
    return "run_mindformer.py's flags, same names and meaning: " + "; ".join(lines) + "."
