"""What every check reads: the resolved training config and msmon's settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from msmon.config.loader import LoadedConfig
from msmon.config.schema import MonitorSettings
from msmon.foreign import ConfigValue
from msmon.launch_layout import LaunchLayout
from msmon.util.mapping import dotted_get


@dataclass
class CheckContext:
    """Inputs shared by the checks; ``training`` is the resolved config without unresolvable sections."""

    loaded: LoadedConfig
    training: dict[str, ConfigValue]
    section: dict[str, ConfigValue]
    settings: MonitorSettings
    resume: bool = False
    deep: bool = False  # read mindformers' registry again instead of msmon's cache
    cwd: Path = field(default_factory=Path.cwd)
    launch: LaunchLayout | None = None  # the launch to check as msmon run would (MS026); None: no launch

    def get(self, dotted: str, default: ConfigValue = None) -> ConfigValue:
        """A value of the resolved training config by dotted path."""
        return dotted_get(self.training, dotted, default)

    def has(self, dotted: str) -> bool:
        marker = object()
        return self.get(dotted, marker) is not marker

    @property
    def device_target(self) -> str:
        return str(self.get("context.device_target", "Ascend"))

    def save_dir(self) -> Path:
        path = Path(self.settings.save_dir).expanduser()
        return path if path.is_absolute() else self.cwd / path
