"""SFT data of livestream and travel (their compact protocols' calls, read off the answer key): served-format chats
the loop accepts and rewards; a fallback teacher that solves nothing is a clear error.

    .venv/bin/python -m pytest tests/apps/test_teacher_sft.py -q
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import apps
from apps.teacher_sft import TEACHER_PREFIX
from harness.agent import AgentLoop, ModelAccess
from harness.env import Episode
from harness.protocol import render_call
from training.sft import SFTConfig
from training.sft_data import is_held_out


@pytest.mark.parametrize("app", ["livestream", "travel"])
def test_teacher_examples_replay_through_the_served_loop_as_successes(app: str, worlds: dict[str, Path],
                                                                    tmp_path: Path, scripted: Any) -> None:
    kit = apps.kit(app)
    cfg = SFTConfig.model_validate({"world": worlds[app], "sid": tmp_path / "sid", "out": tmp_path / "o"})
    data = kit.sft.build(cfg)
    assert data.train and data.counts["train"] == len(data.train)
    assert all(not is_held_out(e.source, cfg.eval_fraction) for e in data.train)
    assert all(is_held_out(e.source, cfg.eval_fraction) for e in data.eval)
    spec = kit.sft.trajectory_spec()
    assert kit.sft.corpus(cfg)[-len(spec.corpus()):] == spec.corpus()
    env = apps.load_env(worlds[app])
    tasks = {t.task_id: t for t in __import__("apps.evaluate", fromlist=["x"]).load_tasks(worlds[app])}
    for example in data.train[:5]:
        assert example.kind.startswith(TEACHER_PREFIX) and example.messages[0]["content"] == spec.system_prompt
        # the compact protocol: the system prompt, the user's message and the one call, no tool schemas
        assert [m["role"] for m in example.messages] == ["system", "user", "assistant"]
        assert example.tools == spec.tools == []
        if app == "livestream":  # the note a served turn gets: the product on screen and its facts
            assert example.messages[1]["note"].split("; facts: ")[1].startswith("price, stock")
        call = example.messages[-1]["tool_calls"][0]["function"]
        assert call["name"] == {"livestream": "answer", "travel": "plan"}[app]
        engine = scripted([render_call(call["name"], json.loads(call["arguments"]))])
        loop = AgentLoop(env.spec, ModelAccess(engine, engine.tokenizer))
        result = Episode(env, loop, tasks[example.source], max_turns=1).run()
        assert not result.degraded and result.reward.success, (example.source, result.final.reply)


def test_an_app_whose_teacher_solves_nothing_is_a_clear_error(worlds: dict[str, Path], tmp_path: Path) -> None:
    from apps.teacher_sft import FallbackSft
    from harness.env import AppEnv, Reward
    from training.sft_data import SftDataError

    base = apps.kit("livestream")

    def never(world: Path) -> AppEnv:
        env = base.env(world)
        return AppEnv(env.spec, lambda task, final: Reward(0.0, False), env.user_fn, env.request_fn)

    source = FallbackSft("sys", lambda: [], never)
    cfg = SFTConfig.model_validate({"world": worlds["livestream"], "sid": tmp_path / "sid", "out": tmp_path / "o"})
    with pytest.raises(SftDataError, match="answers none of"):
        source.build(cfg)
