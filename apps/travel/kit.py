"""The travel app's kit: the day planner over a city's POIs, the constraint-checking reward, the simulated traveller."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from apps.travel.agent import travel_app
from apps.travel.env import form_request, request_constraints, reward_fn, simulated_user
from harness.env import AppEnv
from harness.kit import AppKit

HERE = Path(__file__).parent


def env(world: Path) -> AppEnv:
    spec = travel_app(Path(world))
    pois = spec.resources.pois
    return AppEnv(spec=spec, reward_fn=reward_fn(pois), user_fn=partial(simulated_user, pois=pois),
                  request_fn=request_constraints)


def kit() -> AppKit:
    from apps.travel.sft import SOURCE

    return AppKit(name="travel", env=env, sft=SOURCE, configs={"world": HERE / "world.yaml"}, form_request=form_request)
