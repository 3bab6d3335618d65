"""``manifest.json``: what a stage read, how it was configured, what code ran, what it wrote.

Every stage writes one into its output directory, so any directory says where it came from.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def code_version() -> str:
    """``git describe`` of the source tree when there is one, else the package version."""
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=root, capture_output=True, text=True, timeout=5, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("sidekick")
        except PackageNotFoundError:
            return "unknown"


def write_manifest(
    out_dir: Path,
    *,
    stage: str,
    config: dict[str, Any],
    counts: dict[str, Any],
    inputs: list[Path] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write ``out_dir/manifest.json`` with a checksum of every file under ``out_dir``."""
    files = {
        str(p.relative_to(out_dir)): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
        for p in sorted(out_dir.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    manifest = {
        "stage": stage,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code_version": code_version(),
        "inputs": [str(p) for p in inputs or []],
        "config": config,
        "counts": counts,
        "files": files,
        **(extra or {}),
    }
    path = out_dir / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, default=str) + "\n")
    return path


def read_manifest(out_dir: Path) -> dict[str, Any]:
    path = out_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{out_dir} has no {MANIFEST} (not a Sidekick stage output?)")
    data: dict[str, Any] = json.loads(path.read_text())
    return data
