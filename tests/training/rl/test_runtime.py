"""The RL runtime end to end on a real local Ray cluster, the tiny model and the shopping environment.

Run: ``.venv/bin/python -m pytest tests/training/rl/test_runtime.py -m integration -q`` (a few minutes)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from apps import kit
from apps.evaluate import load_tasks
from apps.rl import env_factory
from harness.tasks import Task
from training.rl.controller import RLConfig, RLRun, StepStats
from training.rl.rollout import RolloutSettings
from training.rl.trainer import TrainerSettings
from training.rl.workers import EnvFactory

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def policy(worlds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cascade's seed in miniature: SFT (120 steps), then RFT on the retrieval teacher's passing episodes
    (60 steps), so the policy answers in the served format and sometimes rightly, far from always."""
    from sid.build import category_sids
    from training.cascade import RFTSettings, rft
    from training.rl.rollout import EpisodeJob
    from training.rl.workers import EnvWorker
    from training.sft import SFTConfig, train_sft

    root, world = tmp_path_factory.mktemp("rl-policy"), worlds["shopping"]
    sid = category_sids(world, root / "sid")
    cfg = SFTConfig.model_validate({
        "base": "tiny", "world": world, "sid": sid, "out": root / "sft", "cache_dir": root / "cache",
        "max_steps": 120, "batch_size": 16, "max_seq_len": 128, "lr": 3e-3, "warmup_steps": 5, "eval_every": 0,
        "save_every": 0, "precision": "fp32", "threads": 1, "log_every": 50})
    result = train_sft(cfg, SHOPPING.sft)
    assert result.final_dir is not None
    worker = EnvWorker(result.final_dir, _env(world), SHOPPING.sid, SETTINGS)
    tasks = _tasks(world, 1000)
    taught = [t for t in worker.run_teacher([EpisodeJob(t, g, 0, g) for g, t in enumerate(tasks)]) if t.success]
    assert len(taught) > len(tasks) // 2, "the BM25 teacher should solve most of these tasks"
    rft(result.final_dir, taught, RFTSettings(steps=60, batch_size=16, lr=1e-3), root / "warm", seed=0)
    (root / "warm" / "solvable.json").write_text(json.dumps([t.task_id for t in taught]))
    return root / "warm"


def _solvable(world: Path, agent: Path, n: int) -> list[Task]:
    """The first ``n`` tasks the teacher solved (a right answer is in the catalog and within reach)."""
    ids = set(json.loads((agent / "solvable.json").read_text()))
    return [t for t in _tasks(world, 1000) if t.task_id in ids][:n]


def _tasks(world: Path, n: int) -> list[Task]:
    return [t for t in load_tasks(world) if t.kind != "bundle" and not t.hidden][:n]


SHOPPING = kit("shopping")
SETTINGS = RolloutSettings(max_new_tokens=12, max_steps=1, temperature=0.6)


def _env(world: Path) -> EnvFactory:
    """The shopping env with the retrieval teacher: the policy these tests train answers an item's SID."""
    return env_factory(SHOPPING, world, retrieval_teacher=True)


def _config(agent: Path, out: Path, **overrides: object) -> RLConfig:
    base = {"agent": agent, "out": out, "steps": 4, "groups_per_step": 2, "group_size": 4, "env_workers": 2,
            "mode": "sync", "save_every": 2, "seed": 0, "rollout": SETTINGS, "trainer": TrainerSettings(lr=5e-4)}
    return RLConfig.model_validate({**base, **overrides})


def test_mean_reward_rises_on_a_task_set_the_tiny_model_can_learn(policy: Path, worlds: dict[str, Path],
                                                                  tmp_path: Path) -> None:
    """Two tasks, 32 episodes of them per update (G=8, 4 groups), the policy answering an item SID (the retrieval
    teacher's protocol, short enough to learn here): measured 0.05 -> 0.19 mean reward in 16 steps."""
    world = worlds["shopping"]
    cfg = _config(policy, tmp_path / "rl", steps=16, groups_per_step=4, group_size=8, save_every=100,
                  max_drop_rounds=2)
    run = RLRun(cfg, _solvable(world, policy, 2), _env(world), SHOPPING.sid)
    try:
        run.setup()
        result = run.run()
    finally:
        run.close()
    curve = [s.collected_reward for s in result.history]  # every rollout of the step, dropped groups included
    start, end = sum(curve[:4]) / 4, sum(curve[-4:]) / 4
    assert end > 2 * start and end > start + 0.06, f"mean reward did not rise clearly: {curve}"
    assert (result.final_dir / "agent.json").is_file()
    metrics = [json.loads(line) for line in (cfg.out / "logs/metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(1, 17))


def test_killing_an_environment_worker_does_not_stop_the_run(policy: Path, worlds: dict[str, Path],
                                                              tmp_path: Path) -> None:
    import ray

    world = worlds["shopping"]
    cfg = _config(policy, tmp_path / "rl", steps=4, mode="async")
    run = RLRun(cfg, _tasks(world, 8), _env(world), SHOPPING.sid)
    killed: list[int] = []

    def kill_once(stats: StepStats) -> None:
        if not killed:
            pid = ray.get(run.workers[0].pid.remote())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    try:
        run.setup()
        result = run.run(kill_once)
    finally:
        run.close()
    assert killed and result.steps == 4
    assert result.history[-1].worker_deaths >= 1
    assert (result.final_dir / "agent.json").is_file()


def test_resume_after_the_whole_run_is_killed(policy: Path, worlds: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "rl"
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump({
        "agent": str(policy), "out": str(out), "world": str(worlds["shopping"]), "app": "shopping",
        "max_tasks": 8, "steps": 6, "groups_per_step": 2, "group_size": 4, "env_workers": 2, "mode": "sync",
        "save_every": 2, "rollout": {"max_new_tokens": 12, "max_steps": 1}, "trainer": {"lr": 1e-3}}))
    cmd = [str(Path(sys.executable).parent / "sidekick"), "train", "rl", str(config)]
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    first = out / "checkpoints" / "step-000002" / "state.json"
    deadline = time.monotonic() + 300
    while not first.is_file():
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else "exited"
        assert time.monotonic() < deadline, "no checkpoint within 300 s"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray cluster it started, mid-run
    proc.wait(30)
    assert not (out / "final").exists()
    done = subprocess.run([*cmd, "--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "steps=6" in done.stdout
    state = json.loads(sorted((out / "checkpoints").glob("step-*/state.json"))[-1].read_text())
    assert state["step"] == 6 and [h["step"] for h in state["history"]] == list(range(1, 7))
    metrics = [json.loads(line)["step"] for line in (out / "logs/metrics.jsonl").read_text().splitlines()]
    assert metrics == list(range(1, 7))  # steps lost with the kill were run again, logged once
    assert (out / "final" / "agent.json").is_file()


def test_worker_pool_runs_every_job_once_in_job_order_policy_and_teacher(policy: Path,
                                                                        worlds: dict[str, Path]) -> None:
    from training.rl.pool import EnvWorkerPool
    from training.rl.rollout import EpisodeJob

    world = worlds["shopping"]
    jobs = [EpisodeJob(t, g, s, 10 * g + s) for g, t in enumerate(_solvable(world, policy, 3)) for s in range(2)]
    with EnvWorkerPool(policy, _env(world), SHOPPING.sid, SETTINGS, workers=2, chunk=2) as pool:
        sampled = pool.map(jobs)
        taught = pool.map(jobs, "run_teacher")
    for got in (sampled, taught):
        assert [(t.group, t.sample) for t in got] == [(j.group, j.sample) for j in jobs]
    assert all(t.success for t in taught)  # the teacher solved these tasks when the fixture picked them
