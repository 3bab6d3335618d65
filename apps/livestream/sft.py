"""The livestream app's SFT data: the compact protocol's ``answer`` call of each training task, read off its answer
key (:func:`apps.livestream.plan.plan_call`) and kept only when it answers the task correctly
(:class:`apps.teacher_sft.AnswerKeySft`)."""

from __future__ import annotations

from typing import Any

from apps.livestream.agent import ANSWER_PROMPT
from apps.livestream.kit import env
from apps.livestream.plan import plan_call
from apps.teacher_sft import AnswerKeySft
from harness.env import AppEnv
from harness.tasks import Task


def task_call(env: AppEnv, task: Task) -> tuple[str, dict[str, Any]]:
    return plan_call(task, env.spec.catalog, getattr(env.spec.resources, "streams", {}))


SOURCE = AnswerKeySft(ANSWER_PROMPT, env, task_call)
