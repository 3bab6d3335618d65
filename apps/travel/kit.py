"""The travel app's kit: the day planner over a city's POIs, the constraint-checking reward, the simulated traveller."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path

from apps.travel.agent import travel_app
from apps.travel.env import RewardWeights, form_request, request_constraints, reward_fn, simulated_user
from apps.travel.plan import plan_teacher
from harness.env import AppEnv, RewardFn
from harness.kit import AppKit

HERE = Path(__file__).parent


def env(world: Path) -> AppEnv:
    spec = travel_app(Path(world))
    pois = spec.resources.pois
    return AppEnv(spec=spec, reward_fn=reward_fn(pois), user_fn=partial(simulated_user, pois=pois),
                  request_fn=request_constraints, teacher=plan_teacher)


def reward_weights(weights: Mapping[str, float]) -> Callable[[AppEnv], RewardFn]:
    """The checker reward with a config's weights (:meth:`RewardWeights.of` checks them: feasible and score
    summing to 1)."""
    return partial(_weighted_reward, RewardWeights.of(weights))


def _weighted_reward(weights: RewardWeights, env: AppEnv) -> RewardFn:
    return reward_fn(env.spec.resources.pois, weights)


def kit() -> AppKit:
    from apps.travel.sft import SOURCE

    return AppKit(name="travel", env=env, sft=SOURCE, configs={"world": HERE / "world.yaml"}, form_request=form_request,
                  reward_weights=reward_weights)
