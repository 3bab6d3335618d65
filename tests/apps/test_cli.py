"""The `sidekick` CLI as a user runs it: real subprocesses, exit codes, one-line errors.

    pytest -m integration tests/apps/test_cli.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SIDEKICK = str(Path(sys.executable).parent / "sidekick")


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SIDEKICK, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=cwd)


def _one_line_error(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert expected in " ".join(proc.stderr.split()), proc.stderr


def test_shopping_world_summary_and_validate(tmp_path: Path) -> None:
    out = tmp_path / "w"
    proc = run("world", "shopping", "--out", out, "--items", 2000, "--tasks", 100, "--sessions", 100)
    assert proc.returncode == 0, proc.stderr
    assert "items=2,000" in proc.stdout
    summary = run("world", "summary", out, "--json")
    assert summary.returncode == 0, summary.stderr
    data = json.loads(summary.stdout)
    assert data["app"] == "shopping" and data["counts"]["tasks"] == 100 and "bundle" in data["counts"]["tasks_by_kind"]
    assert "shopping world" in run("world", "summary", out).stdout
    check = run("validate", out)
    assert check.returncode == 0 and "2,000" in check.stdout


def test_config_file_and_overrides(tmp_path: Path) -> None:
    cfg = tmp_path / "w.yaml"
    cfg.write_text("items: 600\ntasks: 10\nsessions: 5\nseed: 3\n")
    proc = run("world", "shopping", "--out", tmp_path / "w", "--config", cfg, "--sessions", 7)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "w" / "manifest.json").read_text())
    config = manifest["config"]
    assert (config["items"], config["sessions"], config["seed"]) == (600, 7, 3)


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    out = tmp_path / "w"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    proc = run("world", "shopping", "--out", out, "--items", 100)
    assert proc.returncode == 2
    _one_line_error(proc, "is not empty; pass --force")
    assert (out / "precious.txt").read_text() == "keep me"


def test_bad_option_values_are_one_line_errors(tmp_path: Path) -> None:
    proc = run("world", "shopping", "--out", tmp_path / "w", "--items", 3)
    assert proc.returncode == 2
    _one_line_error(proc, "field 'items': Input should be greater than or equal to 50")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("itemz: 100\n")
    proc = run("world", "shopping", "--out", tmp_path / "w2", "--config", cfg)
    assert proc.returncode == 2
    _one_line_error(proc, "field 'itemz': Extra inputs are not permitted")


def test_validate_stops_at_the_first_bad_record_or_quarantines(tmp_path: Path) -> None:
    out = tmp_path / "w"
    assert run("world", "shopping", "--out", out, "--items", 300, "--tasks", 20, "--sessions", 20).returncode == 0
    lines = (out / "logs.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]  # truncated JSON
    lines[5] = lines[5].replace('"user_id"', '"userid"')
    (out / "logs.jsonl").write_text("\n".join(lines) + "\n")
    proc = run("validate", out)
    assert proc.returncode == 1
    _one_line_error(proc, "logs.jsonl:3: bad JSON")
    proc = run("validate", out, "--skip-bad")
    assert proc.returncode == 3, proc.stderr
    entries = [json.loads(x) for x in (out / "quarantine.jsonl").read_text().splitlines()]
    assert [(e["line"], e["kind"]) for e in entries] == [(3, "bad_json"), (6, "invalid")]
    assert "field 'user_id': Field required" in entries[1]["reason"]


def test_validate_a_single_file_by_type(tmp_path: Path) -> None:
    f = tmp_path / "mine.jsonl"
    f.write_text(json.dumps({"item_id": "a", "title": "A", "category_path": ["x"]}) + "\n")
    proc = run("validate", f)
    assert proc.returncode == 1
    _one_line_error(proc, "pass --as item|session|task")
    assert run("validate", f, "--as", "item").returncode == 0
    proc = run("validate", f, "--as", "task")
    assert proc.returncode == 1
    _one_line_error(proc, "mine.jsonl:1: field 'task_id': Field required")


def test_missing_things_are_one_line_errors(tmp_path: Path) -> None:
    proc = run("world", "summary", tmp_path)
    assert proc.returncode == 1
    _one_line_error(proc, "has no manifest.json")
    proc = run("validate", tmp_path / "nothing")
    assert proc.returncode == 1
    _one_line_error(proc, "no such file or directory")


def test_import_movielens(tmp_path: Path) -> None:
    proc = run("world", "import-movielens", "--out", tmp_path / "ml")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "ml" / "manifest.json").read_text())
    counts = manifest["counts"]
    assert (counts["users"], counts["items"], counts["interactions"]) == (943, 1682, 100_000)


def test_travel_world(tmp_path: Path) -> None:
    proc = run("world", "travel", "--out", tmp_path / "t", "--items", 60, "--requests", 20)
    assert proc.returncode == 0, proc.stderr
    assert "items=60" in proc.stdout and "tasks=20" in proc.stdout
    assert run("validate", tmp_path / "t").returncode == 0


def test_livestream_world(tmp_path: Path) -> None:
    proc = run("world", "livestream", "--out", tmp_path / "l", "--items", 4, "--questions", 50)
    assert proc.returncode == 0, proc.stderr
    assert "streams=4" in proc.stdout and "tasks=50" in proc.stdout
    assert (tmp_path / "l" / "streams.jsonl").is_file()
    assert run("validate", tmp_path / "l").returncode == 0


def test_train_rl_and_cascade_refuse_bad_inputs_before_starting_ray(tmp_path: Path) -> None:
    rl = tmp_path / "rl.yaml"
    rl.write_text(f"agent: {tmp_path / 'nope'}\nout: {tmp_path / 'out'}\nworld: {tmp_path}\n")
    _one_line_error(run("train", "rl", rl), "set app")  # no default app: the config names it
    rl.write_text(f"app: shopping\nagent: {tmp_path / 'nope'}\nout: {tmp_path / 'out'}\nworld: {tmp_path}\n")
    _one_line_error(run("train", "rl", rl), "not an agent directory")
    rl.write_text(f"app: shopping\nagent: {tmp_path}\nout: {tmp_path / 'out'}\n")
    _one_line_error(run("train", "rl", rl), "set world")
    cascade = Path(__file__).resolve().parents[2] / "apps/shopping/cascade.yaml"
    _one_line_error(run("train", "cascade", cascade, "--stage", "bogus"), "--stage bogus: expected one of")
    _one_line_error(run("train", "cascade", cascade, "--out", tmp_path / "c", "--workers", "0"), "workers")
    bad = tmp_path / "cascade.yaml"
    text = cascade.read_text()
    assert "  max_steps: 300" in text and "rl:\n  steps: 3" in text
    bad.write_text(text.replace("  max_steps: 300", "  max_step: 300"))
    _one_line_error(run("train", "cascade", bad), "max_step")  # a typo in the seed SFT section, found at load
    bad.write_text(text.replace("rl:\n  steps: 3", "rl:\n  steps: 0"))
    _one_line_error(run("train", "cascade", bad), "steps")  # and one in the RL section
