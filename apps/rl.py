"""The apps' RL environments for the training runtime: picklable factories a Ray worker calls in its own process."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from functools import partial
from pathlib import Path

from eval.run import EvalConfig
from harness.env import AppEnv
from harness.kit import AppKit
from harness.tasks import Task
from training.cascade import Evaluator
from training.rl.workers import EnvFactory

REPORTED = ("success", "recall@10", "hit@10", "ndcg@10", "reward")


def env_factory(kit: AppKit, world: Path, *, retrieval_teacher: bool = False) -> EnvFactory:
    """The app over ``world`` as an RL environment, built in the worker's process (the kit's module-level
    ``env`` function and the world path pickle by reference). ``retrieval_teacher``: teach with the app's
    retrieval fallback answering an item's SID (:func:`~training.rl.rollout.fallback_teacher`) instead of the
    app's own teacher (shopping: the compact protocol's planned call)."""
    if retrieval_teacher:
        return partial(_without_teacher, kit.env, Path(world))
    return partial(kit.env, Path(world))


def _without_teacher(make: Callable[[Path], AppEnv], world: Path) -> AppEnv:
    return dataclasses.replace(make(world), teacher=None)


def harness_evaluator(kit: AppKit, world: Path, cfg: EvalConfig | None = None) -> Evaluator:
    """An :data:`~training.cascade.Evaluator`: ``sidekick eval``'s replay of tasks in the harness (greedy by
    default), its report written to the given directory; returns the overall metrics."""
    from apps.evaluate import load_eval_model
    from eval.run import run_evaluation

    eval_cfg = cfg or EvalConfig()

    def evaluate(agent_dir: Path | None, tasks: Sequence[Task], out: Path) -> dict[str, float]:
        envs = {kit.name: kit.env(Path(world))}
        with ExitStack() as stack:
            model = load_eval_model(Path(agent_dir), envs, eval_cfg, stack) if agent_dir is not None else None
            who = str(agent_dir) if agent_dir is not None else "none (the fallbacks)"
            report = run_evaluation(tasks, envs, model, eval_cfg, Path(out), meta={"agent": who})
        overall = report["overall"]
        return {k: float(overall.get(k) or 0.0) for k in REPORTED}

    return evaluate
