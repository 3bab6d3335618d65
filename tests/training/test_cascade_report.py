"""The cascade report's stage-to-stage deltas: paired by task over the per-task files each evaluation wrote.

Run: .venv/bin/python -m pytest tests/training/test_cascade_report.py -q
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.cascade import stage_deltas


def _write(d: Path, success: list[float]) -> None:
    d.mkdir(parents=True)
    rows = [{"task_id": f"t{i}", "app": "shopping", "kind": "explicit", "values": {"agent": {"success": s}}}
            for i, s in enumerate(success)]
    (d / "per_task.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_stage_deltas_pair_each_later_agent_with_an_earlier_one(tmp_path: Path) -> None:
    _write(tmp_path / "seed_sft", [0, 0, 1, 1])
    _write(tmp_path / "sft2", [0, 1, 1, 1])
    _write(tmp_path / "final", [1, 1, 1, 1])
    got = stage_deltas(tmp_path, n_boot=200)
    assert list(got) == ["sft2 - seed_sft", "final - sft2", "final - seed_sft"]
    first = got["sft2 - seed_sft"]["success"]
    assert (first["n"], first["a"], first["b"], first["delta"]) == (4, 0.5, 0.75, 0.25)
    assert got["final - seed_sft"]["success"]["delta"] == pytest.approx(0.5)
    # per-task differences [1, 1, 0, 0]: a resample of four zeros (p = 1/16 > 2.5 %) keeps 0 inside the interval
    assert got["final - seed_sft"]["success"]["lo"] == 0.0 and not got["final - seed_sft"]["success"]["excludes_zero"]
    assert stage_deltas(tmp_path / "missing") == {}
