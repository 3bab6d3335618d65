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
    _write(tmp_path / "rl", [1, 1, 1, 1])
    got = stage_deltas(tmp_path, n_boot=200)
    assert list(got) == ["sft2 - seed_sft", "rl - sft2", "rl - seed_sft"]
    first = got["sft2 - seed_sft"]["success"]
    assert (first["n"], first["a"], first["b"], first["delta"]) == (4, 0.5, 0.75, 0.25)
    assert got["rl - seed_sft"]["success"]["delta"] == pytest.approx(0.5)
    # per-task differences [1, 1, 0, 0]: a resample of four zeros (p = 1/16 > 2.5 %) keeps 0 inside the interval
    assert got["rl - seed_sft"]["success"]["lo"] == 0.0 and not got["rl - seed_sft"]["success"]["excludes_zero"]
    assert stage_deltas(tmp_path / "missing") == {}


def test_final_is_rl_unless_an_earlier_stage_did_better_beyond_doubt(tmp_path: Path) -> None:
    from training.cascade import choose_final

    _write(tmp_path / "seed_sft", [1] * 10 + [0] * 10)
    _write(tmp_path / "sft2", [1] * 20)
    _write(tmp_path / "rl", [1] * 9 + [0] * 11)  # one task fewer than the seed: no doubt-free difference
    got = choose_final(tmp_path, n_boot=200)
    assert got["stage"] == "sft2"  # rl - sft2: differences eleven -1s and nine 0s, every resample below 0
    cell = got["evidence"]["rl - sft2"]
    assert cell["delta"] == pytest.approx(-0.55) and -0.45 < cell["hi"] < -0.2  # about -0.55 + 1.96 * 0.111
    assert got["evidence"]["rl - seed_sft"]["hi"] >= 0  # -0.05 on one task
    for d in ("sft2", "rl"):
        (tmp_path / d / "per_task.jsonl").unlink()
        (tmp_path / d).rmdir()
    _write(tmp_path / "sft2", [1] * 10 + [0] * 10)  # level with the seed, both far above RL: the later one
    _write(tmp_path / "rl", [0] * 20)
    assert choose_final(tmp_path, n_boot=200)["stage"] == "sft2"
    (tmp_path / "rl" / "per_task.jsonl").write_text((tmp_path / "seed_sft" / "per_task.jsonl").read_text())
    assert choose_final(tmp_path, n_boot=200)["stage"] == "rl"  # a tie keeps RL
    assert choose_final(tmp_path / "missing")["stage"] == "rl"


def _write_apps(d: Path, success: dict[str, list[float]]) -> None:
    d.mkdir(parents=True)
    rows = [{"task_id": f"{app}-{i}", "app": app, "kind": "k", "values": {"agent": {"success": s}}}
            for app, values in success.items() for i, s in enumerate(values)]
    (d / "per_task.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_model_serves_only_the_apps_where_it_beat_the_fallback(tmp_path: Path) -> None:
    from training.cascade import model_apps_gate

    _write_apps(tmp_path / "fallback", {"shopping": [0] * 8, "livestream": [1, 1, 1, 0], "travel": [1, 0],
                                        "x": [0, 0, 1, 0]})
    _write_apps(tmp_path / "final", {"shopping": [1] * 8, "livestream": [0, 1, 0, 0], "travel": [1, 0],
                                     "x": [1, 1, 1, 0]})
    gate = model_apps_gate(tmp_path / "fallback", tmp_path / "final", n_boot=200)
    # livestream worse, travel a tie, x ahead by 0.5 but on differences [1, 1, 0, 0], whose interval holds 0
    assert gate["model_apps"] == ["shopping"]
    ev = gate["evidence"]
    assert (ev["shopping"]["a"], ev["shopping"]["b"], ev["shopping"]["delta"], ev["shopping"]["lo"]) == (0, 1, 1, 1)
    assert (ev["x"]["delta"], ev["x"]["lo"]) == (0.5, 0.0)
    assert (ev["livestream"]["delta"], ev["travel"]["delta"], ev["travel"]["n"]) == (-0.5, 0.0, 2)
    assert model_apps_gate(tmp_path / "nothing", tmp_path / "final")["model_apps"] == []


def test_per_task_rates_pair_rl_tasks_before_and_after() -> None:
    """RL's own tasks: per task the pass share and mean reward of its episodes, then paired SFT-2 vs final."""
    from eval.paired import paired_compare
    from harness.tasks import Message, Task
    from training.cascade import per_task_rates
    from training.rl.trajectory import Trajectory

    tasks = [Task(task_id=f"t{i}", app="shopping", kind="vague", messages=[Message(role="user", content="x")])
             for i in range(3)]

    def ep(task: str, reward: float) -> Trajectory:
        return Trajectory(task_id=task, group=0, sample=0, tokens=[], mask=[], logprobs=[], chunks=[], reward=reward,
                          success=reward >= 1.0)

    def passes(t: Trajectory) -> bool:
        return t.success

    before = per_task_rates(tasks, [ep("t0", 0.0), ep("t0", 1.0), ep("t1", 0.5), ep("t1", 0.5)], passes)
    after = per_task_rates(tasks, [ep("t0", 1.0), ep("t0", 1.0), ep("t1", 1.0), ep("t1", 0.0)], passes)
    assert [r["values"]["agent"] for r in before] == [{"success": 0.5, "reward": 0.5}, {"success": 0.0, "reward": 0.5},
                                                      {"success": 0.0, "reward": 0.0}]  # t2 ran no episode: 0
    cmp = paired_compare(before, after, ("success", "reward"), n_boot=200)["groups"]["all"]
    # success per task 0.5 -> 1, 0 -> 0.5, 0 -> 0: mean 1/6 -> 1/2; reward 0.5 -> 1, 0.5 -> 0.5, 0 -> 0
    assert cmp["success"]["a"] == pytest.approx(1 / 6, abs=1e-5) and cmp["success"]["b"] == pytest.approx(0.5)
    assert cmp["reward"]["delta"] == pytest.approx(0.5 / 3, abs=1e-5)


@pytest.mark.parametrize(("low_below", "high", "low"), [(None, ["a", "b", "c"], ["z"]), (1.0, ["a", "b", "c"],
                                                                                          ["z", "a", "b"])])
def test_select_splits_by_certainty_and_rl_may_take_the_sometimes_passed(
        tmp_path: Path, low_below: float | None, high: list[str], low: list[str]) -> None:
    from harness.tasks import Message, Task
    from training.cascade import Cascade, CascadeConfig

    cfg = CascadeConfig.model_validate({
        "out": tmp_path, "world": tmp_path, "tasks": tmp_path, "heldout": [tmp_path], "app": "shopping",
        "seed_sft": {"base": "tiny", "world": tmp_path, "sid": tmp_path},
        "select": {"threshold": 0.25, "low_below": low_below}})
    certainty = {"z": 0.0, "a": 0.25, "b": 0.75, "c": 1.0}
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "certainty.jsonl").write_text(
        "".join(json.dumps({"task_id": k, "certainty": v}) + "\n" for k, v in certainty.items()))
    tasks = [Task(task_id=k, app="shopping", kind="vague", messages=[Message(role="user", content=k)])
             for k in certainty]
    cascade = Cascade(cfg, tasks, tasks, lambda: None, None, lambda *a: {}, sft=None)  # type: ignore[arg-type]
    cascade.stage_select()
    assert [t.task_id for t in cascade._subset("high")] == high
    assert sorted(t.task_id for t in cascade._subset("low")) == sorted(low)
