"""One settings object for every Sidekick process: defaults < YAML file < ``SIDEKICK_*`` env vars.

The YAML file is ``$SIDEKICK_CONFIG`` if set, else ``./sidekick.yaml`` if it exists. Constructor
arguments (e.g. CLI overrides) beat everything. Nested fields use ``__`` in env names.

>>> Settings().seed
0
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

DEFAULT_CONFIG_FILE = Path("sidekick.yaml")


def config_file() -> Path | None:
    """The YAML settings file in force, or None. A named file that does not exist is an error."""
    named = os.environ.get("SIDEKICK_CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise FileNotFoundError(f"SIDEKICK_CONFIG points to {path}, which is not a file")
        return path
    return DEFAULT_CONFIG_FILE if DEFAULT_CONFIG_FILE.is_file() else None


class Settings(BaseSettings):
    """Process-wide settings. Unknown keys in the YAML file or ``SIDEKICK_`` env are errors."""

    model_config = SettingsConfigDict(env_prefix="SIDEKICK_", env_nested_delimiter="__", extra="forbid")

    home: Path = Field(default=Path("runs"), description="Where runs, caches and outputs go by default.")
    cache_dir: Path = Field(
        default=Path.home() / ".cache" / "sidekick",
        description="Content-keyed caches (embeddings, converted models).",
    )
    seed: int = Field(default=0, ge=0, description="Default seed for every stochastic step.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = Field(
        default="text", description="'json' = one JSON object per log line (for log shippers)."
    )
    workers: int = Field(default=0, ge=0, description="Worker processes for parallel stages; 0 = CPU count.")
    ray_address: str | None = Field(default=None, description="Join this Ray cluster; None = start a local one.")
    anonymise_key_file: Path | None = Field(
        default=None, description="File holding the HMAC key for user pseudonyms (never written to outputs)."
    )
    api_key: SecretStr | None = Field(default=None, description="Key for admin REST routes; None = admin off.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = config_file()
        if path is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=path))
        return tuple(sources)

    def resolved_workers(self) -> int:
        return self.workers or (os.cpu_count() or 1)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, read once."""
    return Settings()
