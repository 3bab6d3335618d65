"""``OUT/stages/<nn_name>/``: one folder per stage, finished when its ``manifest.json`` is written.

A stage's *fingerprint* hashes what its output depends on: the pipeline version, the stage's config,
and the fingerprint of the stage before it (the first one hashes the input checksums, the seed and
the key's id — never the key). A rerun skips a stage whose manifest carries the same fingerprint,
keeps the finished parts of a stage that was interrupted (``stage.json`` holds the fingerprint it
was started with), and starts a stage afresh when anything it depends on changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path
from typing import Any

from infra.manifest import MANIFEST, write_manifest

PIPELINE_VERSION = 1
"""Bump when a stage's output for the same inputs and config changes, so old stage outputs are redone."""


def fingerprint(stage: str, config: Any, upstream: str) -> str:
    blob = json.dumps({"v": PIPELINE_VERSION, "stage": stage, "config": config, "up": upstream},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


class StageDir:
    """The folder of one stage: ``begin()`` before writing, ``finish()`` after, ``done`` to skip."""

    def __init__(self, root: Path, name: str, fp: str) -> None:
        self.name = name
        self.path = root / "stages" / name
        self.fingerprint = fp
        self._t0 = 0.0

    def _manifest(self) -> dict[str, Any] | None:
        path = self.path / MANIFEST
        if not path.is_file():
            return None
        data: dict[str, Any] = json.loads(path.read_text())
        return data

    @property
    def done(self) -> bool:
        m = self._manifest()
        return m is not None and m.get("fingerprint") == self.fingerprint

    def counts(self) -> dict[str, Any]:
        m = self._manifest()
        if m is None:
            raise FileNotFoundError(f"{self.path}: stage '{self.name}' has not finished")
        counts: dict[str, Any] = m["counts"]
        return counts

    def seconds(self) -> float:
        m = self._manifest()
        return float(m.get("seconds", 0.0)) if m else 0.0

    def begin(self) -> Path:
        """Make the folder ready; keep partial work only if it was started with the same fingerprint."""
        marker = self.path / "stage.json"
        started = json.loads(marker.read_text()).get("fingerprint") if marker.is_file() else None
        if self.path.exists() and started != self.fingerprint:
            shutil.rmtree(self.path)
        (self.path / MANIFEST).unlink(missing_ok=True)
        self.path.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"stage": self.name, "fingerprint": self.fingerprint}) + "\n")
        self._t0 = time.perf_counter()
        return self.path

    def finish(self, config: Any, counts: dict[str, Any], inputs: list[Path] | None = None) -> None:
        seconds = round(time.perf_counter() - self._t0, 3)
        write_manifest(self.path, stage=f"curate.{self.name}", config=config, counts=counts, inputs=inputs,
                       extra={"fingerprint": self.fingerprint, "seconds": seconds})
