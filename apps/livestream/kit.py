"""The livestream app's kit: the fact-sheet agent over a world's streams, its reward and the simulated viewer."""

from __future__ import annotations

from pathlib import Path

from apps.livestream.agent import livestream_app
from apps.livestream.env import request_constraints, reward_fn, simulated_user
from apps.livestream.world import STREAMS_FILE
from harness.env import AppEnv
from harness.kit import AppKit
from harness.tasks import Task

HERE = Path(__file__).parent


def env(world: Path) -> AppEnv:
    spec = livestream_app(Path(world))
    return AppEnv(spec=spec, reward_fn=reward_fn(spec.catalog), user_fn=simulated_user,
                  request_fn=request_constraints)


def check_task(task: Task) -> str | None:
    return None if task.answer is not None else \
        f"livestream task {task.task_id} has no answer (use '' for unanswerable questions)"


def kit() -> AppKit:
    from apps.livestream.sft import SOURCE

    return AppKit(name="livestream", env=env, sft=SOURCE, check_task=check_task, world_files=(STREAMS_FILE,),
                  configs={"world": HERE / "world.yaml"})
