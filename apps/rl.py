"""The apps' RL environments for the training runtime: picklable factories a Ray worker calls in its own process."""

from __future__ import annotations

from pathlib import Path

from harness.agent import SidResources
from training.models import Agent
from training.rl.rollout import EnvApp


def env_app(world: Path, name: str) -> EnvApp:
    """The app over ``world`` as an RL environment: the serving spec, its reward and simulated user."""
    from apps.evaluate import eval_app

    app = eval_app(Path(world), name)
    return EnvApp(spec=app.spec, reward_fn=app.reward_fn, user_fn=app.user_fn)


def sid_for(app: EnvApp, agent: Agent) -> SidResources | None:
    """SID retrieval over the app's catalog for the shopping app (the others retrieve by text)."""
    if app.spec.name != "shopping":
        return None
    from apps.shopping.agent import sid_resources

    return sid_resources(app.spec.catalog, agent.sid_map, agent.token_map, agent.sid_start_id, agent.sid_end_id)
