"""Stage configs: a YAML file, then CLI overrides, validated by the stage's pydantic model in one place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from infra.recordio import format_validation_error

C = TypeVar("C", bound=BaseModel)


class ConfigError(ValueError):
    """A config could not be loaded; the message names the file and the field."""


def load_config(model: type[C], path: Path | None = None, overrides: dict[str, Any] | None = None,
                transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> C:
    """``model`` from the YAML mapping at ``path`` (optional), then non-None ``overrides`` on top;
    ``transform`` may rewrite the file's mapping first (e.g. merge in a profile)."""
    data = read_yaml(path) if path is not None else {}
    if transform is not None:
        data = transform(data)
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    source = str(path) if path is not None else "command line"
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {model.__name__}: {format_validation_error(err)}") from err


def read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in the YAML file at ``path`` ({} for an empty file); ConfigError naming the file otherwise."""
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        loaded = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
    return dict(loaded)
