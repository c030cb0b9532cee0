"""Load a training YAML with OmegaConf: overrides, interpolations, line numbers, clear errors."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from msmon.config.datasets import dataset_path
from msmon.errors import ExitCode, MsmonError, first_line
from msmon.foreign import ConfigValue

MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: Interpolations whose value comes from outside the file (the environment): never written resolved.
SECRET_SOURCES = re.compile(r"\$\{\s*(oc\.env|env|oc\.decode)\s*:")
#: The CPU quickstarts shipped inside the package, run by name: ``msmon run quickstart``.
QUICKSTARTS_DIR = Path(__file__).resolve().parent / "quickstarts"
_LAUNCH_TIME = datetime.now()


def _now(fmt: str = "%Y%m%d_%H%M%S") -> str:
    """``${now:FMT}``: the launch time, identical for every use within one process."""
    return _LAUNCH_TIME.strftime(fmt)


def _dataset(name: str) -> str:
    """``${msmon_dataset:NAME}``: the cache path of a dataset msmon generates (nothing is created here)."""
    return dataset_path(name)


for _name, _resolver in (("now", _now), ("msmon_dataset", _dataset)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_resolver(_name, _resolver)


@dataclass
class LoadedConfig:
    """A config as loaded: the unresolved tree (overrides applied), its source, and key lines."""

    conf: DictConfig
    path: Path | None = None
    text: str | None = None
    override_keys: set[str] = field(default_factory=set)
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, dotted: str) -> int | None:
        """The 1-based line of a key path (or its nearest parent) in the file, when known."""
        key = dotted
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0].split("[")[0] if "." in key else ""
        return None

    def section(self, name: str) -> ConfigValue:
        """A top-level section, unresolved, as a plain container (None when absent)."""
        node = self.conf.get(name) if name in self.conf else None
        return OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node

    def resolved(self) -> dict[str, ConfigValue]:
        """The whole config with interpolations resolved; unresolvable ones raise MsmonError."""
        try:
            return OmegaConf.to_container(self.conf, resolve=True)  # type: ignore[return-value]
        except OmegaConfBaseException as exc:
            key = getattr(exc, "full_key", "") or "?"
            raise MsmonError(
                f"{self.where()}: cannot resolve the interpolation at '{key}': {first_line(exc)}",
                "define the referenced key or environment variable, or give a default (${oc.env:VAR,default})",
            ) from exc

    def where(self) -> str:
        return str(self.path) if self.path else "<config>"


#: libyaml's composer when PyYAML has it (about 10x faster); PyYAML's own one says what is wrong with a bad file.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _compose(text: str) -> yaml.Node | None:
    """The YAML node tree of ``text`` (no Python objects are constructed); a YAMLError as PyYAML words it."""
    try:
        return yaml.compose(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        return yaml.compose(text, Loader=yaml.SafeLoader)  # raises again, with PyYAML's message and mark


def _line_map(root: yaml.Node | None) -> dict[str, int]:
    """Dotted key path -> line, from a YAML composition."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                dotted = f"{prefix}.{key_node.value}" if prefix else key_node.value
                lines.setdefault(dotted, key_node.start_mark.line + 1)
                walk(value_node, dotted)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                dotted = f"{prefix}[{index}]"
                lines.setdefault(dotted, item.start_mark.line + 1)
                walk(item, dotted)

    if root is not None:
        walk(root, "")
    return lines


def quickstart_names() -> list[str]:
    """The names of the shipped quickstarts (``quickstart``, ``quickstart-moe``, ``quickstart-qwen3``)."""
    return sorted(p.stem for p in QUICKSTARTS_DIR.glob("*.yaml"))


def config_file(path: str | os.PathLike[str]) -> Path:
    """The file a CONFIG argument names: the path itself, or a shipped quickstart's file when ``path`` is its name
    and no such file exists here (a file of that name in the working directory wins)."""
    file = Path(path)
    if not os.path.exists(file) and str(path) in quickstart_names():
        return QUICKSTARTS_DIR / f"{path}.yaml"
    return file


def is_quickstart(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is one of the shipped quickstarts (msmon's own file: never backed up or edited)."""
    return Path(path).resolve().parent == QUICKSTARTS_DIR


def read_config_text(path: str | os.PathLike[str]) -> str:
    """The file's text, or MsmonError naming the file and the fix."""
    file = Path(path)
    if not os.path.exists(file):
        builtin = ", ".join(quickstart_names())
        raise MsmonError(f"{file}: no such file", f"check the path of the config, or run a built-in one: {builtin}")
    if os.path.isdir(file):
        raise MsmonError(f"{file}: is a directory, not a YAML file", "pass the training YAML inside it")
    try:
        if file.stat().st_size > MAX_CONFIG_BYTES:
            raise MsmonError(f"{file}: larger than 16 MiB, not a training config", "pass the training YAML")
        data = file.read_bytes()
    except PermissionError as exc:
        raise MsmonError(f"{file}: permission denied", "make the file readable") from exc
    except OSError as exc:
        raise MsmonError(f"{file}: cannot read ({exc.strerror})", "check the file") from exc
    if b"\x00" in data:
        raise MsmonError(f"{file}: binary file, not YAML", "pass the training YAML")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MsmonError(f"{file}: not UTF-8 text (byte {exc.start})", "save the YAML as UTF-8") from exc
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise MsmonError(f"{file}: the file is empty",
                         "write a training YAML (mindformers ships them in configs/); msmon init FILE adds monitoring")
    return text


def _parse(text: str, where: str) -> tuple[DictConfig, yaml.Node]:
    """The config and its YAML node tree (the lines of its keys)."""
    try:
        root = _compose(text)
        if not isinstance(root, yaml.MappingNode):  # OmegaConf asserts on a scalar document such as "0"
            raise MsmonError(f"{where}: the top level must be a mapping of sections", "write `key: value` sections")
        conf = OmegaConf.create(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        bad_line = text.splitlines()[mark.line] if mark is not None and mark.line < len(text.splitlines()) else ""
        hint = "fix the YAML syntax"
        if "\t" in bad_line:
            hint = "indent with spaces, not tabs"
        elif "duplicate key" in str(problem):
            hint = "remove or rename the duplicated key"
        elif "constructor" in str(problem):
            hint = "remove the tag: only plain YAML is accepted (no !!python/... objects)"
        raise MsmonError(f"{where}:{line} invalid YAML: {problem}", hint) from exc
    except OmegaConfBaseException as exc:
        hint = "remove or rename the duplicated key" if "duplicate" in str(exc).lower() else "fix the YAML"
        raise MsmonError(f"{where}: invalid config: {first_line(exc)}", hint) from exc
    if not isinstance(conf, DictConfig):
        raise MsmonError(f"{where}: the top level must be a mapping of sections", "write `key: value` sections")
    return conf, root


def override_value(value: ConfigValue) -> str:
    """A value as an OmegaConf dotlist value (parsed as YAML): booleans and numbers bare, text in YAML's single
    quotes (``'`` doubled) with OmegaConf's interpolation escaped (``\\${``)."""
    if isinstance(value, bool | int | float):
        return str(value)
    return "'" + str(value).replace("'", "''").replace("${", "\\${") + "'"


def apply_overrides(conf: DictConfig, overrides: list[str], where: str) -> set[str]:
    """Apply ``key=value`` dotlist overrides in place (a value parsed as YAML, as OmegaConf's dotlist does; a key may
    go through a list by index: ``callbacks.1.save_checkpoint_steps=50`` or ``callbacks[1]...``); return the dotted
    keys they set."""
    keys: set[str] = set()
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise MsmonError(
                f"override '{item}' is not KEY=VALUE", "write e.g. monitor_config.log_interval=20", ExitCode.USAGE
            )
        try:
            parsed = OmegaConf.to_container(OmegaConf.from_dotlist([f"_={raw}"]), resolve=False)
            value = parsed["_"] if isinstance(parsed, dict) else None
            OmegaConf.set_struct(conf, False)
            OmegaConf.update(conf, key.strip(), value, merge=True, force_add=True)
        except (OmegaConfBaseException, yaml.YAMLError, ValueError) as exc:  # malformed: a usage error, as a
            raise MsmonError(f"{where}: override '{item}': {first_line(exc)}",  # missing '=' is
                             "check the key and value", ExitCode.USAGE) from exc
        except IndexError as exc:  # omegaconf's key parser on a key such as '[' (an empty path after splitting)
            raise MsmonError(f"{where}: override '{item}': {key.strip()!r} is not a dotted key",
                             "write e.g. monitor_config.log_interval=20", ExitCode.USAGE) from exc
        keys.add(key.strip())
    return keys


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> LoadedConfig:
    """Load a training YAML file (or a shipped quickstart by name) and apply dotlist overrides (interpolations stay
    unresolved)."""
    file = config_file(path)
    text = read_config_text(file)
    conf, root = _parse(text, str(file))
    loaded = LoadedConfig(conf=conf, path=file, text=text, lines=_line_map(root))
    loaded.override_keys = apply_overrides(conf, list(overrides or []), str(file))
    return loaded


def secrets_unresolved(loaded: LoadedConfig) -> LoadedConfig:
    """A copy whose environment interpolations (``${oc.env:TOKEN}``) resolve to their own text: how a run's config
    is shown and compared later, where those variables are not set (and secrets are never written resolved)."""

    def escape(node: ConfigValue) -> ConfigValue:
        if isinstance(node, dict):
            return {key: escape(value) for key, value in node.items()}
        if isinstance(node, list):
            return [escape(item) for item in node]
        return SECRET_SOURCES.sub(r"\\${\g<1>:", node) if isinstance(node, str) else node

    escaped: dict[str, ConfigValue] = escape(OmegaConf.to_container(loaded.conf, resolve=False))
    return dataclasses.replace(loaded, conf=OmegaConf.create(escaped))


def config_from_dict(data: dict[str, ConfigValue], overrides: list[str] | None = None) -> LoadedConfig:
    """Wrap a Python dict (the library API's ``monitor_config=dict(...)`` form) as a LoadedConfig."""
    try:
        conf = OmegaConf.create(data)
    except OmegaConfBaseException as exc:
        hint = "pass plain dicts, lists and scalars"
        raise MsmonError(f"<config>: invalid config: {first_line(exc)}", hint) from exc
    loaded = LoadedConfig(conf=conf)
    loaded.override_keys = apply_overrides(conf, list(overrides or []), "<config>")
    return loaded
