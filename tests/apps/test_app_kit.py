"""The app table: a toy fourth app, defined only here, is served, evaluated and trained on by the real jobs.

The toy app ("mugs": find the mug the user describes) is one module — this file — and one line in the table
(``apps.APPS``, patched for the test). Serving, offline evaluation and an RL step run on it without any
other module knowing it exists.

    .venv/bin/python -m pytest tests/apps/test_app_kit.py -q
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import BaseModel, Field
from transformers import LlamaConfig, LlamaForCausalLM

import apps
from apps.serve import load_apps
from eval.run import EvalConfig, run_evaluation
from harness.agent import AppSpec, Final, ModelAccess, TurnContext
from harness.catalog import Catalog, Item
from harness.env import AppEnv, Reward
from harness.kit import AppKit
from harness.protocol import ToolRegistry, render_call
from harness.session import SessionState
from harness.tasks import Message, Target, Task
from serving.server import AgentServer
from training.rl.rollout import EpisodeJob, RolloutSettings, run_episodes
from training.rl.trainer import PolicyTrainer, TrainerSettings

# ------------------------------------------------------------------------------------------------ the toy app
MUGS = [Item(item_id=f"mug-{c}", title=f"{c} mug", category_path=["Kitchen", "Mugs"], attributes={"colour": c},
             price=9.0, stock=5) for c in ("red", "blue", "green")]


class PickArgs(BaseModel):
    item_id: str = Field(description="The mug to show.")


def pick(args: PickArgs, ctx: TurnContext) -> Final:
    return Final(reply=f"Here is the {args.item_id}.", item_ids=[args.item_id])


def fallback(ctx: TurnContext, reason: str) -> Final:
    """The first mug whose colour the user named, else the first mug."""
    text = " ".join(m["content"] for m in ctx.session.messages if m["role"] == "user").lower()
    named = [i.item_id for i in ctx.catalog if str(i.attributes["colour"]) in text]
    return Final(reply="Try this one.", item_ids=named[:1] or [next(iter(ctx.catalog)).item_id])


def reward(task: Task, final: Final) -> Reward:
    assert task.target is not None
    hit = bool(set(final.item_ids) & set(task.target.item_ids))
    return Reward(float(hit), hit, {"hit": float(hit)})


def env(world: Path) -> AppEnv:
    catalog, _ = Catalog.load(Path(world) / "catalog.jsonl")
    tools = ToolRegistry([_pick_tool()])
    spec = AppSpec(name="mugs", system_prompt="You find mugs.", tools=tools, catalog=catalog, fallback=fallback)
    return AppEnv(spec=spec, reward_fn=reward, user_fn=lambda task, text: "a mug please",
                  request_fn=lambda task: {})


def _pick_tool() -> Any:
    from harness.protocol import Tool

    return Tool(name="pick", description="Show one mug to the user.", args=PickArgs, handler=pick)


def kit() -> AppKit:
    return AppKit(name="mugs", env=env)


@pytest.fixture
def mugs_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy app in the table (this module's kit) and a world of three mugs and three tasks."""
    monkeypatch.setitem(apps.APPS, "mugs", __name__)
    world = tmp_path / "mugs"
    world.mkdir()
    (world / "catalog.jsonl").write_text("".join(i.model_dump_json() + "\n" for i in MUGS))
    tasks = [Task(task_id=f"mug-task-{c}", app="mugs", kind="find", messages=[Message(role="user",
                  content=f"I want a {c} mug")], target=Target(kind="single", slots=[[f"mug-{c}"]]))
             for c in ("red", "blue", "green")]
    (world / "tasks.jsonl").write_text("".join(t.model_dump_json() + "\n" for t in tasks))
    (world / "manifest.json").write_text(json.dumps({"app": "mugs"}))
    return world


# ------------------------------------------------------------------------------------------------ the tests
def test_the_table_knows_the_toy_app_only_through_its_one_line(mugs_world: Path) -> None:
    assert apps.world_app_name(mugs_world) == "mugs"
    assert apps.kit("mugs").name == "mugs"
    with pytest.raises(apps.AppError, match="unknown app 'cups'"):
        apps.kit("cups")


def test_a_served_turn_of_the_toy_app(mugs_world: Path, scripted: Any) -> None:
    envs = load_apps([mugs_world])  # through the table: the world's manifest names the app
    engine = scripted([render_call("pick", {"item_id": "mug-blue"})])
    server = AgentServer({n: e.spec for n, e in envs.items()}, ModelAccess(engine, engine.tokenizer))
    try:
        result = server.run_turn("mugs", SessionState(app="mugs"), "a blue one", 5000.0)
    finally:
        server.close()
    assert not result.degraded and result.final.item_ids == ["mug-blue"]
    # a model naming a mug that does not exist is grounded away: the fallback answers, degraded
    engine = scripted([render_call("pick", {"item_id": "mug-gold"})] * 5)
    server = AgentServer({n: e.spec for n, e in envs.items()}, ModelAccess(engine, engine.tokenizer))
    try:
        bad = server.run_turn("mugs", SessionState(app="mugs"), "a green one", 5000.0)
    finally:
        server.close()
    assert bad.degraded and bad.reason == "step_limit" and bad.final.item_ids == ["mug-green"]


def test_an_offline_evaluation_of_the_toy_app(mugs_world: Path, scripted: Any, tmp_path: Path) -> None:
    from apps.evaluate import evaluate, load_tasks

    # without a model: each app's fallback alone (what `sidekick eval --logs DIR` does without an agent)
    report = evaluate(None, mugs_world, tmp_path / "fallback", EvalConfig(workers=1), baselines=["bm25"])
    assert report["by_app"]["mugs"]["tasks"] == 3 and report["overall"]["success"] == 1.0
    assert "bm25" in report["baselines"]
    # with a model that always picks the red mug: one task of three succeeds
    engine = scripted([render_call("pick", {"item_id": "mug-red"})], cycle=True)
    report = run_evaluation(load_tasks(mugs_world), {"mugs": apps.load_env(mugs_world)},
                            ModelAccess(engine, engine.tokenizer), EvalConfig(workers=1), tmp_path / "model")
    assert report["overall"]["success"] == pytest.approx(1 / 3) and report["overall"]["degraded"] == 0.0


def test_one_rl_step_on_the_toy_app(mugs_world: Path, scripted: Any) -> None:
    """Two samples of one task through the RL rollout (one right, one wrong), then one policy update."""
    engine = scripted([render_call("pick", {"item_id": "mug-red"}), render_call("pick", {"item_id": "mug-blue"})])
    model = ModelAccess(engine, engine.tokenizer)
    env_ = apps.kit("mugs").env(mugs_world)
    task = next(t for t in _tasks(mugs_world) if t.task_id.endswith("red"))
    jobs = [EpisodeJob(task=task, group=0, sample=s, seed=s) for s in range(2)]
    trajs = run_episodes(jobs, env_, model, RolloutSettings(temperature=0.0, max_new_tokens=32))
    assert [t.reward for t in trajs] == [1.0, 0.0] and [t.success for t in trajs] == [True, False]
    assert all(sum(t.mask) > 0 for t in trajs)
    torch.manual_seed(0)
    vocab = len(engine.tokenizer.get_vocab())
    policy = LlamaForCausalLM(LlamaConfig(vocab_size=max(vocab, 64), hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    trainer = PolicyTrainer(policy, pad_id=1, settings=TrainerSettings(lr=1e-2))
    parts = trainer.rl_step(trajs)
    assert parts and all(v == v for v in parts.values())  # numbers, not NaN
    changed = [k for k, v in policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "one RL step on the toy app must move the policy"


def _tasks(world: Path) -> list[Task]:
    from apps.evaluate import load_tasks

    return load_tasks(world)


def test_tasks_of_an_app_not_in_the_table_are_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from apps.cli import main

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "tasks.jsonl").write_text(json.dumps({"task_id": "t1", "app": "cups", "kind": "x",
                                                  "messages": [{"role": "user", "content": "hi"}]}) + "\n")
    monkeypatch.setattr(sys, "argv", ["sidekick", "eval", "run", "--logs", str(logs), "--out", str(tmp_path / "o")])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = " ".join(capsys.readouterr().err.split())
    assert exit_.value.code == 2 and "unknown app 'cups'; expected one of shopping, livestream, travel" in err
    assert "Traceback" not in err
