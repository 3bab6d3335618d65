"""`sidekick curate` as a user runs it: a real subprocess, resume on rerun, one-line errors.

    pytest -m integration tests/data_curation/test_curate_cli.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SIDEKICK = str(Path(sys.executable).parent / "sidekick")


def run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SIDEKICK, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def test_curate_world(tmp_path: Path) -> None:
    world, out, key = tmp_path / "w", tmp_path / "c", tmp_path / "keys" / "k"
    assert run("world", "shopping", "--out", world, "--items", 2000, "--tasks", 100, "--sessions", 300).returncode == 0
    cfg = tmp_path / "curate.yaml"
    cfg.write_text("select:\n  embedder: hashing\n  keep_fraction: 0.8\n")
    first = run("curate", world, "--out", out, "--config", cfg, "--new-key", key, "--workers", 1)
    assert first.returncode == 0, first.stderr
    assert "input_lines=300" in " ".join(first.stdout.split())
    report = json.loads((out / "report.json").read_text())
    assert report["funnel"]["balanced"] and report["config"]["select"]["keep_fraction"] == 0.8
    again = run("curate", world, "--out", out, "--config", cfg, "--key-file", key)
    assert again.returncode == 0, again.stderr
    assert all(not s["ran"] for s in json.loads((out / "report.json").read_text())["stages"].values())


def test_one_line_errors(tmp_path: Path) -> None:
    no_key = run("curate", tmp_path, "--out", tmp_path / "c", env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert no_key.returncode == 2 and "Traceback" not in no_key.stderr
    assert "no logs.jsonl" in " ".join(no_key.stderr.split())
    bad = run("curate", tmp_path, "--out", tmp_path / "c", "--keep-fraction", 0)
    assert bad.returncode == 2 and "keep_fraction" in bad.stderr and "Traceback" not in bad.stderr
