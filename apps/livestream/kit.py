"""The livestream app's kit: the fact-sheet agent over a world's streams, its reward, the simulated viewer and the
compact protocol's teacher (the ``answer`` call read off the answer key, :mod:`apps.livestream.plan`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from apps.livestream.agent import livestream_app
from apps.livestream.env import RewardWeights, request_constraints, reward_fn, simulated_user
from apps.livestream.plan import plan_teacher
from apps.livestream.world import STREAMS_FILE
from harness.env import AppEnv, RewardFn
from harness.kit import AppKit
from harness.tasks import Task

HERE = Path(__file__).parent


def env(world: Path) -> AppEnv:
    spec = livestream_app(Path(world))
    return AppEnv(spec=spec, reward_fn=reward_fn(spec.catalog), user_fn=simulated_user,
                  request_fn=request_constraints, teacher=plan_teacher)


def reward_weights(weights: Mapping[str, float]) -> Callable[[AppEnv], RewardFn]:
    """The reward with a config's weights (:meth:`RewardWeights.of` checks them: correctness, helpfulness,
    brevity summing to 1, and max_words)."""
    return partial(_weighted_reward, RewardWeights.of(weights))


def _weighted_reward(weights: RewardWeights, env: AppEnv) -> RewardFn:
    return reward_fn(env.spec.catalog, weights)


def check_task(task: Task) -> str | None:
    return None if task.answer is not None else \
        f"livestream task {task.task_id} has no answer (use '' for unanswerable questions)"


def kit() -> AppKit:
    from apps.livestream.sft import SOURCE

    return AppKit(name="livestream", env=env, sft=SOURCE, check_task=check_task, world_files=(STREAMS_FILE,),
                  configs={"world": HERE / "world.yaml"}, reward_weights=reward_weights)
