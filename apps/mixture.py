"""A multi-app cascade's parts, from the app table: one agent trained on several apps' tasks (``apps:`` in a cascade
config, e.g. ``apps/cascade.yaml``; :class:`training.cascade.MixtureApp`).

    sidekick train cascade apps/cascade.yaml --quick

- tasks: each app's training tasks interleaved by weight (:func:`training.mixture.interleave`), so the warm-up's
  and the probe's "first N tasks" hold each app's share; held-out tasks the same way for the report;
- environments: every app over its own world in each worker, its reward weighted as the config says
  (:meth:`harness.kit.AppKit.weighted_reward`); each task runs in its own app;
- SID retrieval: that of the app whose kit has it, as serving sets it up (one model access for every app);
- SFT: :class:`training.mixture.MixtureSft` over the kits' sources (``sft_weight``), which writes ``apps.json``
  into the agent directory: ``sidekick serve AGENT`` then serves every app on the world it was trained on;
- the report: ``sidekick eval``'s replay of the held-out tasks of every app, overall and per app.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import apps as app_table
from eval.run import EvalConfig
from harness.agent import SidResources
from harness.env import AppEnv, RewardFn
from harness.tasks import Task
from infra.layout import CATALOG_FILE
from training.cascade import CascadeConfig, Evaluator
from training.mixture import MixturePart, MixtureSft, interleave
from training.rl.workers import EnvFactory

REPORTED = ("success", "recall@10", "hit@10", "ndcg@10", "reward")
PER_APP = ("success", "reward")
"""Metrics the report gives per app too, as ``<app>/<metric>``; with ``<app>/words`` (mean words of the answers)
and ``<app>/turn_p95_ms`` (95th percentile of a turn's latency in that evaluation run)."""

AppParts = tuple[tuple[str, Path, Callable[[AppEnv], RewardFn] | None], ...]
"""(app name, world, its weighted reward builder or None) per app: what a worker builds the environments from."""


class MixtureSetupError(ValueError):
    """A multi-app cascade config that cannot run (an unknown app, a world or tasks missing, bad reward weights);
    the message names the field."""


@dataclass
class MixtureInputs:
    """Everything :class:`training.cascade.Cascade` takes besides its config."""

    tasks: list[Task]
    heldout: list[Task]
    env_factory: EnvFactory
    sid_factory: Callable[[AppEnv, Any], SidResources | None]
    evaluator: Evaluator
    sft: MixtureSft
    notes: list[str]


def mixture_inputs(cfg: CascadeConfig, eval_cfg: EvalConfig | None = None) -> MixtureInputs:
    """The cascade's tasks, environments, SFT source and evaluator for ``cfg.apps``; checks every app first."""
    from apps.evaluate import EvalSetupError, load_tasks

    assert cfg.apps, "a multi-app config (apps:)"
    parts, sources, train, held, notes = [], [], {}, {}, []
    for k, entry in enumerate(cfg.apps):
        where = f"apps[{k}]"
        try:
            kit = app_table.kit(entry.app)
        except app_table.AppError as e:
            raise MixtureSetupError(f"{where}.app: {e}") from e
        if not (Path(entry.world) / CATALOG_FILE).is_file():
            raise MixtureSetupError(f"{where}.world: {entry.world} has no {CATALOG_FILE} (a {entry.app} world is "
                                    f"needed: sidekick world {entry.app} --out {entry.world})")
        if kit.sft is None and entry.sft_share > 0:
            raise MixtureSetupError(f"{where}.sft_weight: the {entry.app} app has no SFT data of its own; set 0")
        try:
            reward = kit.weighted_reward(entry.reward)
        except ValueError as e:
            raise MixtureSetupError(f"{where}.reward: {e}") from e
        try:
            tasks = [t for t in load_tasks(entry.tasks) if t.app == entry.app]
            unique = {t.task_id: t for p in entry.heldout for t in load_tasks(p) if t.app == entry.app}
        except EvalSetupError as e:
            raise MixtureSetupError(f"{where}: {e}") from e
        if not tasks:
            raise MixtureSetupError(f"{where}.tasks: {entry.tasks} holds no {entry.app} tasks")
        ids = {t.task_id for t in tasks}
        heldout = [t for i, t in unique.items() if i not in ids]
        if len(heldout) < len(unique):
            notes.append(f"{entry.app}: {len(unique) - len(heldout)} of {len(unique)} held-out tasks are also "
                         "training tasks; the report leaves them out")
        if not heldout:
            raise MixtureSetupError(f"{where}.heldout: every held-out {entry.app} task is also a training task")
        parts.append((entry.app, Path(entry.world), reward))
        sources.append(MixturePart(entry.app, kit.sft, Path(entry.world), Path(entry.tasks), entry.sft_share))
        train[entry.app], held[entry.app] = tasks, heldout
    make_envs = partial(mixture_envs, tuple(parts))
    return MixtureInputs(tasks=interleave(train, cfg.weights), heldout=interleave(held, cfg.weights),
                         env_factory=make_envs, sid_factory=kit_sid,
                         evaluator=mixture_evaluator(make_envs, eval_cfg or EvalConfig()),
                         sft=MixtureSft([s for s in sources if s.source is not None]), notes=notes)


def mixture_envs(parts: AppParts) -> dict[str, AppEnv]:
    """Every app over its world (in a worker's process), its reward weighted where a builder is given."""
    out = {}
    for name, world, reward in parts:
        env = app_table.kit(name).env(world)
        out[name] = env if reward is None else dataclasses.replace(env, reward_fn=reward(env))
    return out


def kit_sid(env: AppEnv, agent: Any) -> SidResources | None:
    """SID retrieval of ``env``'s app for ``agent``, where its kit has it (None otherwise)."""
    sid = app_table.kit(env.spec.name).sid
    return sid(env, agent) if sid is not None else None


def mixture_evaluator(make_envs: Callable[[], dict[str, AppEnv]], cfg: EvalConfig) -> Evaluator:
    """An :data:`~training.cascade.Evaluator` over every app: ``sidekick eval``'s replay (greedy by default; no agent:
    the apps' fallbacks), its report written to the given directory; returns the overall metrics and
    ``<app>/success``, ``<app>/reward``."""
    from apps.evaluate import load_eval_model
    from eval.run import run_evaluation

    def evaluate(agent_dir: Path | None, tasks: Sequence[Task], out: Path) -> dict[str, float]:
        envs = make_envs()
        with ExitStack() as stack:
            model = load_eval_model(Path(agent_dir), envs, cfg, stack) if agent_dir is not None else None
            who = str(agent_dir) if agent_dir is not None else "none (the fallbacks)"
            report = run_evaluation(tasks, envs, model, cfg, Path(out), meta={"agent": who})
        metrics = {k: float(report["overall"].get(k) or 0.0) for k in REPORTED}
        timing = (report.get("timing") or {}).get("by_app") or {}
        for app, summary in report["by_app"].items():
            metrics |= {f"{app}/{k}": float(summary.get(k) or 0.0) for k in PER_APP}
            metrics[f"{app}/words"] = float(summary.get("answer_words") or 0.0)  # mean words of the final answers
            p95 = ((timing.get(app) or {}).get("turn_latency_ms") or {}).get("p95")
            if p95 is not None:
                metrics[f"{app}/turn_p95_ms"] = float(p95)
        return metrics

    return evaluate
