"""The controller's scheduling rules (staleness, dynamic sampling, task order) and token-in-token-out rollouts.

Run: ``.venv/bin/python -m pytest tests/training/rl/test_scheduling.py -q``
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from apps import load_env
from harness.agent import ModelAccess, render_ids
from harness.tasks import Task
from infra.engines.base import Completion, GenerationRequest
from training.cascade import cap_per_task, quick_profile
from training.rl.controller import GroupBuffer, RLConfig, TaskStream
from training.rl.rollout import EpisodeJob, RolloutSettings, run_episodes
from training.rl.trajectory import Trajectory


def _traj(group: int, reward: float, version: int, task: str = "t") -> Trajectory:
    return Trajectory(task_id=task, group=group, sample=0, tokens=[1, 2], mask=[0, 1], logprobs=[0.0, -1.0],
                      chunks=[-1, 0], versions=[version], reward=reward)


def test_dynamic_sampling_drops_exactly_the_zero_variance_groups() -> None:
    buf = GroupBuffer(max_lag=0)
    groups = {"all0": [0.0, 0.0, 0.0], "all1": [1.0, 1.0, 1.0], "mixed": [0.0, 1.0, 0.0], "tiny": [0.5, 0.5, 0.5001]}
    kept = {name: buf.add([_traj(i, r, 0) for r in rs], version=0) for i, (name, rs) in enumerate(groups.items())}
    assert kept == {"all0": False, "all1": False, "mixed": True, "tiny": True}
    assert buf.zero_var == 2 and buf.stale == 0 and len(buf) == 2
    off = GroupBuffer(max_lag=0, dynamic_sampling=False)
    assert off.add([_traj(0, 1.0, 0), _traj(0, 1.0, 0)], version=0) and off.zero_var == 0


def test_staleness_bound_is_enforced_when_a_group_arrives_and_when_it_is_taken() -> None:
    buf = GroupBuffer(max_lag=1)
    mixed = [0.0, 1.0]
    # a group is as old as its oldest token: versions 2 and 4 -> lag 3 at version 5
    assert not buf.add([_traj(0, mixed[0], 2), _traj(0, mixed[1], 4)], version=5)
    assert buf.stale == 1
    assert buf.add([_traj(1, r, 4) for r in mixed], version=5)  # lag 1: fine
    assert buf.add([_traj(2, r, 5) for r in mixed], version=5)  # lag 0
    assert buf.take(3, version=5) is None and len(buf) == 2  # not enough: nothing taken
    # the policy moved on to version 6: group 1 (version 4, lag 2) went stale while it waited
    taken = buf.take(1, version=6)
    assert taken is not None and [g[0].group for g in taken] == [2]
    assert buf.stale == 2 and len(buf) == 0
    sync = GroupBuffer(max_lag=0)  # sync mode: only the current policy's groups
    assert not sync.add([_traj(3, r, 4) for r in mixed], version=5)


def test_sync_mode_has_no_lag_and_rejects_tail_carry_over() -> None:
    cfg = RLConfig(agent=Path("a"), out=Path("o"), mode="sync", async_ratio=3)
    assert cfg.max_lag == 0
    assert RLConfig(agent=Path("a"), out=Path("o"), mode="async", async_ratio=2).max_lag == 2
    with pytest.raises(ValueError, match="tail_fraction needs mode=async"):
        RLConfig(agent=Path("a"), out=Path("o"), mode="sync", tail_fraction=0.25)


def test_task_stream_covers_every_task_each_epoch_and_resumes_from_its_position() -> None:
    tasks = [Task(task_id=f"t{i}", app="travel", kind="plan", messages=[{"role": "user", "content": "x"}])
             for i in range(5)]
    stream = TaskStream(tasks, seed=3)
    first = [stream.next().task_id for _ in range(10)]
    assert sorted(first[:5]) == sorted(first[5:]) == [f"t{i}" for i in range(5)]
    assert first[:5] != first[5:]  # a fresh shuffle per epoch
    resumed = TaskStream(tasks, seed=3, position=7)
    assert [resumed.next().task_id for _ in range(3)] == first[7:10]


def test_quick_profile_deep_merges_and_cap_per_task_balances() -> None:
    data = {"out": "a", "rl": {"steps": 30, "rollout": {"max_steps": 2}}, "quick": {"rl": {"steps": 3}, "out": "q"}}
    assert quick_profile(data) == {"out": "q", "rl": {"steps": 3, "rollout": {"max_steps": 2}}}
    trajs = [_traj(0, 1.0, 0, task="easy") for _ in range(5)] + [_traj(1, 1.0, 0, task="hard")]
    kept = cap_per_task(trajs, 2, seed=0)
    assert sorted(t.task_id for t in kept) == ["easy", "easy", "hard"]


# ------------------------------------------------------------------------------------------------ rollouts
class TextEngine:
    """Replies with scripted texts, tokenised with the real tokenizer (eos appended): real token ids, so the
    trajectory can be checked against the chat template's own rendering."""

    def __init__(self, tokenizer: Any, replies: Sequence[str]) -> None:
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []
        self.weights_version, self.tokens_per_second, self.asleep = 7, None, False

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.prompts.append(list(req.prompt))
            text = self.replies.pop(0)
            ids = self.tokenizer(text + self.tokenizer.eos_token, add_special_tokens=False)["input_ids"]
            out.append([Completion(request_id=req.request_id, index=0, token_ids=ids, text=text,
                                   logprobs=[-0.5] * len(ids), finish_reason="eos", prompt_tokens=len(req.prompt),
                                   latency_ms=1.0, weights_version=self.weights_version)])
        return out


def test_rollout_is_token_in_token_out_and_masks_every_token_the_model_did_not_write(
        worlds: dict[str, Path], tiny_agent: Path) -> None:
    from harness.agent_dir import load_agent

    tok = load_agent(tiny_agent).tokenizer
    app = load_env(worlds["shopping"], "shopping")
    task = next(t for t in _tasks(worlds["shopping"]) if not t.hidden and t.kind != "bundle")
    call = '<tool_call>\n{"name": "search_catalog", "arguments": {"query": "boots"}}\n</tool_call>'
    engine = TextEngine(tok, [call, "These look right."])
    [traj] = run_episodes([EpisodeJob(task, 0, 0, 1)], app, ModelAccess(engine=engine, tokenizer=tok),
                          RolloutSettings(max_steps=3))
    assert traj.steps == 2 and traj.versions == [7, 7] and traj.reason is None
    # the trajectory is exactly the conversation as the chat template renders it (up to its closing newline)
    system = {"role": "system", "content": app.spec.system_prompt}
    full = tok.apply_chat_template([system, *traj.messages], tools=app.spec.prompt_schemas(), tokenize=False)
    assert tok.decode(traj.tokens, skip_special_tokens=False) == full.removesuffix("\n")
    # each prompt was the sequence so far, never a re-rendering
    assert engine.prompts[0] == render_ids(tok, [system, *traj.messages[:1]], app.spec.prompt_schemas())
    assert engine.prompts[1] == traj.tokens[:len(engine.prompts[1])]
    # mask: 1 exactly on the two completions (with their eos), which carry their log-probs and step index
    policy = [t for t, m in zip(traj.tokens, traj.mask, strict=True) if m]
    eos = tok.eos_token
    assert tok.decode(policy, skip_special_tokens=False) == call + eos + "These look right." + eos
    assert {c for c, m in zip(traj.chunks, traj.mask, strict=True) if m} == {0, 1}
    assert all((lp == -0.5) == bool(m) for lp, m in zip(traj.logprobs, traj.mask, strict=True))
    assert traj.messages[2]["role"] == "tool" and "<tool_response>" in full  # the search result came back


def _tasks(world: Path) -> list[Task]:
    from apps.evaluate import load_tasks

    return load_tasks(world)


def test_cascade_skips_finished_stages_and_reruns_what_a_change_makes_stale(tmp_path: Path) -> None:
    from apps.shopping.sft import SOURCE  # any app's SFT source: the recorded stages never read it
    from training.cascade import STAGES, Cascade, CascadeConfig

    calls: list[str] = []

    class Recorded(Cascade):
        def __getattribute__(self, name: str) -> Any:
            if name.startswith("stage_"):
                stage = name.removeprefix("stage_")
                return lambda: (calls.append(stage), self._manifest(stage, {}, {}, []))  # type: ignore[arg-type]
            return super().__getattribute__(name)

    task = Task(task_id="t0", app="travel", kind="plan", messages=[{"role": "user", "content": "x"}])
    cfg = CascadeConfig(out=tmp_path, world=tmp_path, tasks=tmp_path, heldout=[tmp_path], app="travel",
                        seed_sft={"base": "tiny", "world": tmp_path, "sid": tmp_path})

    def run(c: CascadeConfig) -> list[str]:
        calls.clear()
        Recorded(c, [task], [task], lambda: None, None, lambda a, t, o: {},  # type: ignore[arg-type,return-value]
                 sft=SOURCE).run()
        return list(calls)

    assert run(cfg) == list(STAGES)
    assert run(cfg) == []  # everything done: a rerun does nothing
    changed = cfg.model_copy(update={"sft2": cfg.sft2.model_copy(update={"lr": 1e-5})})
    assert run(changed) == ["sft2", "rl", "report"]  # the changed stage and everything after it
    assert run(changed) == []
