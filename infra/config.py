"""Stage configs: a YAML file, then CLI overrides, validated by the stage's pydantic model in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from infra.recordio import format_validation_error

C = TypeVar("C", bound=BaseModel)


class ConfigError(ValueError):
    """A config could not be loaded; the message names the file and the field."""


def load_config(model: type[C], path: Path | None = None, overrides: dict[str, Any] | None = None) -> C:
    """``model`` from the YAML mapping at ``path`` (optional), then non-None ``overrides`` on top."""
    data: dict[str, Any] = {}
    source = "command line"
    if path is not None:
        source = str(path)
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found")
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from err
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
        data.update(loaded)
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {model.__name__}: {format_validation_error(err)}") from err
