"""One agent step, one episode loop: serving, offline evaluation and RL rollout feed the model the same tokens.

The same scripted model answers one shopping task three ways — a served turn (the server's loop), an eval
replay (``eval.replay``) and an RL episode (``training.rl.rollout``) — and every path must send the model
the same prompts, token for token, and end with the same answer; the RL trajectory is exactly the last
prompt plus the last completion.

    .venv/bin/python -m pytest tests/harness/test_one_step.py -q
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import apps
from eval.replay import ReplayConfig, replay_task
from harness.agent import ModelAccess
from harness.protocol import render_call
from harness.session import SessionState
from harness.tasks import Task
from infra.recordio import read_records
from serving.server import AgentServer
from training.rl.rollout import EpisodeJob, RolloutSettings, run_episodes


def _single_turn_task(world: Path) -> tuple[Task, str]:
    """A task asked in one message with no filters from the frontend, and an in-stock target."""
    env = apps.load_env(world)
    for task in read_records(world / "tasks.jsonl", Task)[0]:
        if task.hidden or task.constraints.get("request") or task.target is None or task.target.kind == "bundle":
            continue
        item = env.spec.catalog.get(task.target.item_ids[0])
        if item is not None and item.in_stock:
            return task, item.item_id
    raise AssertionError("the test world has no single-turn task with an in-stock target")


def _script(item_id: str) -> list[str]:
    return [render_call("search_catalog", {"query": "something good"}),
            "Found it.\n" + render_call("respond", {"text": "This one.", "item_ids": [item_id]})]


def test_serving_eval_and_rl_send_the_same_tokens_and_get_the_same_answer(worlds: dict[str, Path],
                                                                          scripted: Any) -> None:
    world = worlds["shopping"]
    task, target = _single_turn_task(world)
    env = apps.load_env(world)
    text = task.messages[0].content

    served_engine = scripted(_script(target))
    server = AgentServer({"shopping": env.spec}, ModelAccess(served_engine, served_engine.tokenizer))
    try:
        served = server.run_turn("shopping", SessionState(app="shopping", constraints=env.request_fn(task)), text,
                                 60_000.0)
    finally:
        server.close()

    eval_engine = scripted(_script(target))
    replayed = replay_task(task, env, ModelAccess(eval_engine, eval_engine.tokenizer), ReplayConfig(workers=1))

    rl_engine = scripted(_script(target))
    [traj] = run_episodes([EpisodeJob(task=task, group=0, sample=0, seed=0)], env,
                          ModelAccess(rl_engine, rl_engine.tokenizer), RolloutSettings(temperature=0.0))

    # the same answer
    assert not served.degraded and served.final.item_ids == [target]
    assert replayed.end == "answered" and replayed.final["item_ids"] == [target] and replayed.success
    assert traj.item_ids == [target] and not traj.degraded and traj.reward == pytest.approx(replayed.reward["value"])
    # the same prompts, token for token, and the second extends the first (token in, token out)
    prompts = [[r.prompt for r in e.calls] for e in (served_engine, eval_engine, rl_engine)]
    assert len(prompts[0]) == 2 and prompts[0] == prompts[1] == prompts[2]
    first, second = prompts[0]
    completion = served.model_calls[0].completion.token_ids
    assert second[:len(first) + len(completion)] == [*first, *completion]
    # the RL sample is exactly what the model saw and wrote
    last = served.model_calls[-1]
    assert traj.tokens == [*last.prompt_ids, *last.completion.token_ids]
    assert sum(traj.mask) == sum(len(c.completion.token_ids) for c in served.model_calls)


def test_an_empty_reply_is_the_fallback_everywhere(worlds: dict[str, Path], scripted: Any) -> None:
    """Serving and RL both answer an empty reply from the fallback (degraded); RL trains on it with reward 0."""
    world = worlds["shopping"]
    task, _ = _single_turn_task(world)
    env = apps.load_env(world)
    served_engine = scripted([""])
    server = AgentServer({"shopping": env.spec}, ModelAccess(served_engine, served_engine.tokenizer))
    try:
        served = server.run_turn("shopping", SessionState(app="shopping"), task.messages[0].content, 60_000.0)
    finally:
        server.close()
    rl_engine = scripted([""])
    [traj] = run_episodes([EpisodeJob(task=task, group=0, sample=0, seed=0)], env,
                          ModelAccess(rl_engine, rl_engine.tokenizer), RolloutSettings(temperature=0.0))
    assert served.degraded and served.reason == "empty_reply"
    assert traj.degraded and traj.reason == "empty_reply" and traj.reward == 0.0
    assert traj.item_ids == served.final.item_ids and traj.reply == served.final.reply
