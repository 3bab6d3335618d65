"""One agent for three apps: reward weights from config, a mixture config's errors, and (integration) a tiny-model
cascade over shopping, livestream and travel whose one agent directory serves all three over REST.

    .venv/bin/python -m pytest tests/apps/test_multi_app_agent.py -q                    # fast tier
    .venv/bin/python -m pytest tests/apps/test_multi_app_agent.py -q -m integration     # + the cascade and the server
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import apps
from apps.mixture import MixtureSetupError, mixture_inputs
from harness.agent import Final, TurnContext
from harness.budget import Budget
from harness.session import SessionState
from harness.tasks import Task
from training.cascade import CascadeConfig


def _tasks(world: Path) -> list[Task]:
    from apps.evaluate import load_tasks

    return load_tasks(world)


def _fallback_final(app: str, world: Path, task: Task) -> Final:
    env = apps.kit(app).env(world)
    user = [{"role": m.role, "content": m.content} for m in task.messages if m.role != "system"]
    session = SessionState(app=app, constraints=dict(env.request_fn(task)), messages=list(user))
    ctx = TurnContext(app=env.spec, session=session, constraints=session.constraints, budget=Budget(60_000.0),
                      model=None)
    return env.spec.fallback(ctx, "teacher")


# ------------------------------------------------------------------------------------------------ reward weights
def test_livestream_reward_weights_from_config_weigh_its_three_parts(worlds: dict[str, Path]) -> None:
    kit = apps.kit("livestream")
    env = kit.env(worlds["livestream"])
    task = next(t for t in _tasks(worlds["livestream"]) if len(set(t.facts)) == 2 and t.answer)
    answer = task.answer or ""
    assert len(answer.split()) >= 4
    final = Final(reply=answer, data={"cited_facts": [task.facts[0]]})  # the gold answer citing one of two facts
    default = env.reward_fn(task, final)
    assert default.parts["correctness"] == 1.0 and default.parts["helpfulness"] == 0.5
    assert default.value == pytest.approx(0.6 + 0.2 * 0.5 + 0.2 * 1.0)  # brevity 1: well under 30 words
    build = kit.weighted_reward({"correctness": 0.7, "helpfulness": 0.1, "brevity": 0.2, "max_words": 2})
    assert build is not None
    weighted = build(env)(task, final)
    # words >= 4 = 2 * max_words: brevity 1 - min(1, (words - 2) / 2) = 0, so R = 0.7 + 0.1 * 0.5 + 0.2 * 0
    assert weighted.parts["brevity"] == 0.0 and weighted.value == pytest.approx(0.75)


def test_travel_reward_weights_from_config_weigh_feasibility_and_score(worlds: dict[str, Path]) -> None:
    kit = apps.kit("travel")
    env = kit.env(worlds["travel"])
    task = _tasks(worlds["travel"])[0]
    final = _fallback_final("travel", worlds["travel"], task)
    default = env.reward_fn(task, final)
    assert default.success, "the fallback's plan of a template request is feasible"
    score = default.parts["score"]
    assert 0 < score < 1 and default.value == pytest.approx(0.5 + 0.5 * score)
    build = kit.weighted_reward({"feasible": 0.2, "score": 0.8})
    assert build is not None
    assert build(env)(task, final).value == pytest.approx(0.2 + 0.8 * score)


@pytest.mark.parametrize(("app", "weights", "match"), [
    ("livestream", {"speed": 1.0}, "unknown livestream reward weight 'speed'"),
    ("livestream", {"correctness": 0.9}, "sum to 1.3, not 1"),
    ("livestream", {"brevity": -0.2, "correctness": 1.0}, "brevity is -0.2"),
    ("travel", {"feasible": 0.6}, "sum to 1.1, not 1"),
    ("shopping", {"type": 1.0}, "the shopping app's reward has no weights"),
])
def test_bad_reward_weights_say_what_is_wrong(app: str, weights: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apps.kit(app).weighted_reward(weights)


def test_no_reward_weights_keep_the_apps_own_reward() -> None:
    assert apps.kit("shopping").weighted_reward({}) is None and apps.kit("travel").weighted_reward({}) is None


# ------------------------------------------------------------------------------------------------ the config's inputs
def _split(world: Path, out: Path, held: int) -> tuple[Path, Path]:
    """The world's tasks cut in two files: training, and the last ``held`` as held-out."""
    lines = (world / "tasks.jsonl").read_text().splitlines()
    (out / "train").mkdir(parents=True)
    (out / "held").mkdir()
    (out / "train" / "tasks.jsonl").write_text("\n".join(lines[:-held]) + "\n")
    (out / "held" / "tasks.jsonl").write_text("\n".join(lines[-held:]) + "\n")
    return out / "train", out / "held"


def _config(worlds: dict[str, Path], tmp_path: Path, **over: Any) -> dict[str, Any]:
    entries = []
    for app, weight, held in (("shopping", 2, 12), ("livestream", 1, 8), ("travel", 1, 4)):
        train, heldout = _split(worlds[app], tmp_path / "split" / app, held)
        entries.append({"app": app, "world": worlds[app], "tasks": train, "heldout": [heldout], "weight": weight})
    entries[1]["reward"] = {"correctness": 0.5, "helpfulness": 0.2, "brevity": 0.3}
    return {"out": tmp_path / "cascade", "apps": entries, "workers": 1, **over}


def test_mixture_inputs_interleave_each_apps_tasks_by_weight(worlds: dict[str, Path], tmp_path: Path,
                                                            make_sid_dir: Any) -> None:
    sid = make_sid_dir(worlds["shopping"], tmp_path / "sid")
    cfg = CascadeConfig.model_validate({**_config(worlds, tmp_path), "seed_sft": {"base": "tiny", "sid": sid}})
    mix = mixture_inputs(cfg)
    assert [t.app for t in mix.tasks[:8]] == ["shopping", "livestream", "travel", "shopping"] * 2
    assert apps_count(mix.tasks) == {"shopping": 68, "livestream": 32, "travel": 16}
    assert apps_count(mix.heldout) == {"shopping": 12, "livestream": 8, "travel": 4}
    envs = mix.env_factory()
    assert set(envs) == {"shopping", "livestream", "travel"}  # type: ignore[arg-type]
    assert [p.name for p in mix.sft.parts] == ["shopping", "livestream", "travel"]


def apps_count(tasks: list[Task]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tasks:
        out[t.app] = out.get(t.app, 0) + 1
    return out


@pytest.mark.parametrize(("k", "field", "value", "match"), [
    (1, "app", "podcast", r"apps\[1\]\.app: unknown app 'podcast'"),
    (0, "reward", {"type": 1.0}, r"apps\[0\]\.reward: the shopping app's reward has no weights"),
    (1, "reward", {"speed": 1.0}, r"apps\[1\]\.reward: unknown livestream reward weight 'speed'"),
    (2, "world", "/nonexistent/travel", r"apps\[2\]\.world: /nonexistent/travel has no catalog.jsonl"),
])
def test_a_bad_app_entry_is_named_before_anything_runs(worlds: dict[str, Path], tmp_path: Path, k: int, field: str,
                                                       value: Any, match: str) -> None:
    data = {**_config(worlds, tmp_path), "seed_sft": {"base": "tiny", "sid": tmp_path / "sid"}}
    data["apps"][k][field] = value
    with pytest.raises(MixtureSetupError, match=match):
        mixture_inputs(CascadeConfig.model_validate(data))


# ------------------------------------------------------------------------------------------------ the whole cascade
@pytest.mark.integration
def test_one_cascade_over_three_apps_makes_one_agent_that_serves_all_three(worlds: dict[str, Path], tmp_path: Path,
                                                                          make_sid_dir: Any) -> None:
    """Seed SFT on the three apps' examples mixed 2:1:1 (livestream and travel prompts are ~1-2k tiny tokens), the
    warm-up on each app's teacher, probe, select, SFT-2, one RL update, the report per app; then ``serve`` of the
    final directory alone (no --world: its apps.json) answers each app's REST route with the model loaded."""
    from apps.serve import build_server
    from eval.run import EvalConfig
    from serving.app import create_app
    from serving.background import BackgroundServer
    from serving.server import ServeConfig
    from training.cascade import Cascade

    sid = make_sid_dir(worlds["shopping"], tmp_path / "sid")
    cfg = CascadeConfig.model_validate({
        **_config(worlds, tmp_path),
        "seed_sft": {"base": "tiny", "sid": sid, "max_steps": 3, "batch_size": 4, "max_seq_len": 2400,
                     "align_items": 0, "targets_per_task": 1, "trajectories_per_task": 1, "warmup_steps": 1,
                     "eval_every": 0, "save_every": 0, "precision": "fp32", "threads": 1,
                     "cache_dir": tmp_path / "cache"},
        "warmup": {"steps": 3, "max_tasks": 24, "batch_size": 4},
        "rollout": {"max_new_tokens": 24, "max_steps": 1, "max_turns": 1},
        "probe": {"max_tasks": 8, "samples": 2, "temperature": 1.0},
        "sft2": {"steps": 2, "batch_size": 4},
        "rl": {"steps": 1, "groups_per_step": 2, "group_size": 2, "mode": "sync", "save_every": 1,
               "rollout": {"max_new_tokens": 24, "max_steps": 1, "max_turns": 1}},
        "report": {"max_tasks": 8, "rl_samples": 0}})
    mix = mixture_inputs(cfg, EvalConfig(workers=1, threads=1, max_new_tokens=24))
    report = Cascade(cfg, mix.tasks, mix.heldout, mix.env_factory, mix.sid_factory, mix.evaluator,
                     sft=mix.sft).run()
    out = cfg.out
    seed = json.loads((out / "seed_sft" / "sft" / "final" / "manifest.json").read_text())["counts"]
    # the three apps' examples, mixed 2:1:1 over their combined number
    mixed = [seed[f"mix/{a}"] for a in ("shopping", "livestream", "travel")]
    assert sum(mixed) == seed["train"] and all(n > 0 for n in mixed)
    assert abs(mixed[0] - seed["train"] / 2) <= 1 and abs(mixed[1] - seed["train"] / 4) <= 1
    rl = json.loads((out / "rl" / "manifest.json").read_text())["counts"]
    assert set(rl["tasks_by_app"]) <= {"shopping", "livestream", "travel"} and rl["steps"] == 1
    final = report["agents"]["final"]
    assert {"shopping/success", "livestream/success", "travel/success"} <= set(final)
    for stage in ("seed_sft", "sft2", "final", "fallback"):  # each stage's words and turn latency per app
        row = report["agents"][stage]
        assert {"livestream/words", "livestream/turn_p95_ms", "travel/turn_p95_ms"} <= set(row), stage
        assert row["livestream/turn_p95_ms"] > 0 and row["livestream/words"] > 0
    assert report["tasks"] == 8  # the first 8 held-out tasks, 2:1:1 -> 4, 2, 2
    recorded = json.loads((out / "final" / "apps.json").read_text())["apps"]
    assert recorded == {a: str(worlds[a].resolve()) for a in ("shopping", "livestream", "travel")}

    # the report replayed each app's fallback on the same tasks: the model serves only where it did better
    gate = json.loads((out / "final" / "model_apps.json").read_text())
    assert set(gate["evidence"]) == {"shopping", "livestream", "travel"} and report["model_apps"] == gate
    assert gate["model_apps"] == [a for a, c in gate["evidence"].items() if c["delta"] > 0 and c["lo"] > 0]
    measured = build_server(out / "final", [], ServeConfig())
    assert {a for a, served in measured.apps.items() if served.loop.model is not None} == set(gate["model_apps"])

    server = build_server(out / "final", [], ServeConfig(follow_measurement=False))  # --model-app all
    background = BackgroundServer(create_app(server))
    url = background.start()
    try:
        assert server.front is not None  # the model is loaded, not the fallback alone
        models = httpx.get(f"{url}/v1/models").json()["data"]
        assert {m["id"] for m in models} >= {"sidekick:shopping", "sidekick:livestream", "sidekick:travel"}
        shop = httpx.post(f"{url}/v1/shopping/sessions", json={"message": "a tent for two"}, timeout=60)
        on_screen = apps.kit("livestream").env(worlds["livestream"]).spec.resources.streams["stream-0000"].windows[0]
        live = httpx.post(f"{url}/v1/livestream/answer", timeout=60, json={
            "question": "how much is it?", "stream_id": "stream-0000", "ts_offset_s": on_screen[0] + 1})
        trip = httpx.post(f"{url}/v1/travel/plan", json={"request": "museums and lunch, Saturday 10:00-18:00"},
                          timeout=60)
        for reply in (shop, live, trip):
            assert reply.is_success, reply.text
            assert reply.json().get("reason") != "no_model"
        assert live.json()["answer"] and trip.json()["reply"]
        assert live.json()["reason"] == "sure", live.json()  # the reader reads "how much" of the product on screen
    finally:
        background.stop()
