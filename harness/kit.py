"""An app's kit: everything serving, evaluation and training need to know about one app, in one value.

Each app folder builds one in ``apps/<name>/kit.py``; the app table (``apps/__init__.py``) maps names to
them and is the only place that knows which apps exist. Serving, eval, the cascade and RL take a kit (or
the parts it hands out) and never branch on an app's name, so a new app is one folder and one line.

    kit = apps.kit("shopping")
    env = kit.env(Path("runs/w"))                # AppEnv: spec, reward, simulated user, frontend request
    sid = kit.sid(env, agent) if kit.sid else None
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.agent import SidResources
from harness.env import AppEnv, RewardFn
from harness.tasks import Task

SidFn = Callable[[AppEnv, Any], "SidResources | None"]
"""``sid(env, agent)``: SID retrieval for an agent (``harness.agent_dir.Agent``) over the app's catalog."""


@dataclass(frozen=True)
class AppKit:
    """One app, as the jobs see it. Every callable is a module-level function (picklable for Ray workers).

    - ``env(world)``: the app over a world directory — :class:`~harness.env.AppEnv` (spec, reward,
      simulated user, the request a frontend sends for a task);
    - ``sid``: SID retrieval for an agent over the app's catalog; None = the app retrieves by text;
    - ``sft``: the app's SFT data source (``training.sft_data.SftSource``: ``corpus(cfg)``, ``build(cfg)``);
      None = no SFT data of its own yet;
    - ``check_task(task)``: what is wrong with a task for this app (e.g. no ground truth), None = fine;
    - ``world_files``: files besides ``catalog.jsonl`` the env's tools read (a world that has them is preferred
      over one that has only the catalog, e.g. a curated copy);
    - ``configs``: the app's default config files by name (``sft``, ``rl``, ``cascade``, ``curate``, ...);
    - ``form_request(task)``: what a form frontend sends for a task (its constraints as fields) where the app
      has such a frontend, in place of ``env``'s request (the text a chat frontend sends); None = no form;
    - ``reward_weights(weights)``: the app's reward with its parts weighted by a config's ``{name: weight}``
      (checked at once: a ValueError names an unknown or bad weight), as a function of the env it scores in
      (``-> (env -> RewardFn)``); None = the reward has no weights to set. :meth:`weighted_env` applies it.
    """

    name: str
    env: Callable[[Path], AppEnv]
    sid: SidFn | None = None
    sft: Any = None
    check_task: Callable[[Task], str | None] | None = None
    world_files: tuple[str, ...] = ()
    configs: Mapping[str, Path] = field(default_factory=dict)
    form_request: Callable[[Task], dict[str, Any]] | None = None
    reward_weights: Callable[[Mapping[str, float]], Callable[[AppEnv], RewardFn]] | None = None

    def weighted_reward(self, weights: Mapping[str, float]) -> Callable[[AppEnv], RewardFn] | None:
        """The reward builder for ``weights`` (None for no weights: the app's own reward); a ValueError says
        what is wrong with them, or that the app's reward takes none."""
        if not weights:
            return None
        if self.reward_weights is None:
            raise ValueError(f"the {self.name} app's reward has no weights to set (got {', '.join(weights)})")
        return self.reward_weights(weights)

    def task_problem(self, task: Task) -> str | None:
        """Why ``task`` cannot be run with this app (another app's task, no ground truth), or None."""
        if task.app != self.name:
            return f"task {task.task_id} is for app {task.app!r}, not {self.name!r}"
        return self.check_task(task) if self.check_task is not None else None
