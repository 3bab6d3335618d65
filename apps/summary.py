"""Look inside world directories: summarise them, and validate their record files against the contracts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from data_curation.records import Session
from harness.catalog import Catalog, Item
from harness.tasks import Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.manifest import read_manifest
from infra.recordio import RecordError, RecordReader

RECORD_TYPES: dict[str, type[BaseModel]] = {"item": Item, "session": Session, "task": Task}
_BY_STEM = {"catalog": "item", "items": "item", "logs": "session", "sessions": "session", "tasks": "task"}


@dataclass
class ValidateResult:
    path: Path
    record_type: str
    good: int
    bad: int
    blank_lines: int
    quarantine: Path | None


def _record_type(path: Path, given: str | None) -> str:
    if given is not None:
        if given not in RECORD_TYPES:
            raise RecordError(path, None, f"unknown record type {given!r} (choose from {', '.join(RECORD_TYPES)})")
        return given
    stem = path.name.split(".")[0]
    if stem not in _BY_STEM:
        raise RecordError(path, None, "cannot tell the record type from the file name; pass --as item|session|task")
    return _BY_STEM[stem]


def validate_file(path: Path, record_type: str | None = None, *, skip_bad: bool = False,
                  quarantine: Path | None = None) -> ValidateResult:
    """Stream one file through its contract (catalogs also reject duplicate ids)."""
    kind = _record_type(path, record_type)
    if kind == "item":
        _, stats = Catalog.load(path, skip_bad=skip_bad, quarantine=quarantine)
    else:
        reader = RecordReader(path, RECORD_TYPES[kind], skip_bad=skip_bad, quarantine=quarantine)
        for _ in reader:
            pass
        stats = reader.stats
    return ValidateResult(path, kind, stats.good, stats.bad, stats.blank_lines, stats.quarantine)


def validate_path(path: Path, record_type: str | None = None, *, skip_bad: bool = False,
                  quarantine: Path | None = None) -> list[ValidateResult]:
    """Validate one file, or every contract file of a world directory (one shared quarantine file)."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_file():
        return [validate_file(path, record_type, skip_bad=skip_bad, quarantine=quarantine)]
    files = [f for name in (CATALOG_FILE, LOGS_FILE, TASKS_FILE)
             for f in (path / name, (path / name).with_suffix(".parquet")) if f.is_file()]
    if not files:
        raise RecordError(path, None, "no catalog, logs or tasks files here (.jsonl or .parquet)")
    if skip_bad:
        quarantine = quarantine or path / "quarantine.jsonl"
        quarantine.unlink(missing_ok=True)  # one run, one quarantine file
    return [validate_file(f, None, skip_bad=skip_bad, quarantine=quarantine) for f in files]


def _first_lines(path: Path, n: int) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(json.loads(line))
            if len(out) >= n:
                break
    return out


def _examples(world: Path) -> dict[str, str]:
    """One example task per kind (first seen in the first 2000 tasks), and the first item's title."""
    examples: dict[str, str] = {}
    tasks = world / TASKS_FILE
    if tasks.is_file():
        for task in _first_lines(tasks, 2000):
            kind = task.get("kind", "?")
            if kind not in examples and task.get("messages"):
                examples[kind] = str(task["messages"][0].get("content", ""))[:160]
    catalog = world / CATALOG_FILE
    if catalog.is_file():
        for item in _first_lines(catalog, 1):
            examples["item"] = f"{item.get('title')} — {' > '.join(item.get('category_path', []))}"
    return examples


def summarise_world(world: Path) -> dict[str, Any]:
    """Counts from the manifest, file sizes and example records of a world directory."""
    if not world.is_dir():
        raise FileNotFoundError(f"{world}: not a directory")
    manifest = read_manifest(world)
    files = {name: info["bytes"] for name, info in manifest.get("files", {}).items()}
    return {"app": manifest.get("app", manifest.get("stage", "?")), "counts": manifest.get("counts", {}),
            "files": files, "examples": _examples(world), "config": manifest.get("config", {})}
