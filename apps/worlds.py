"""What every world generator shares: the progress callback type and the closing manifest."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from infra.manifest import write_manifest

Progress = Callable[[int], None]
"""Called with the number of records just written (drives a progress bar; may be None)."""


def no_progress(_: int) -> None:
    return None


def finish_world(
    out: Path, app: str, config: BaseModel, counts: dict[str, Any], inputs: list[Path] | None = None
) -> Path:
    """Write ``manifest.json`` for a finished world directory."""
    return write_manifest(
        out, stage=f"world.{app}", config=config.model_dump(mode="json"), counts=counts, inputs=inputs,
        extra={"app": app},
    )
