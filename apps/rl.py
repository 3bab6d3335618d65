"""The apps' RL environments for the training runtime: picklable factories a Ray worker calls in its own process."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from eval.run import EvalConfig
from harness.agent import SidResources
from harness.tasks import Task
from training.cascade import Evaluator
from training.models import Agent
from training.rl.rollout import EnvApp

REPORTED = ("success", "recall@10", "hit@10", "ndcg@10", "reward")


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


def harness_evaluator(world: Path, name: str, cfg: EvalConfig | None = None) -> Evaluator:
    """An :data:`~training.cascade.Evaluator`: ``sidekick eval``'s replay of tasks in the harness (greedy by
    default), its report written to the given directory; returns the overall metrics."""
    from apps.evaluate import eval_app, load_eval_model
    from eval.run import run_evaluation

    eval_cfg = cfg or EvalConfig()

    def evaluate(agent_dir: Path, tasks: Sequence[Task], out: Path) -> dict[str, float]:
        apps = {name: eval_app(Path(world), name)}
        with ExitStack() as stack:
            model = load_eval_model(Path(agent_dir), apps, eval_cfg, stack)
            report = run_evaluation(tasks, apps, model, eval_cfg, Path(out), meta={"agent": str(agent_dir)})
        overall = report["overall"]
        return {k: float(overall.get(k) or 0.0) for k in REPORTED}

    return evaluate
