"""The travel app's SFT data: the compact protocol's ``plan`` call of each training task, read off its answer key
(:func:`apps.travel.plan.plan_call`) and kept only when the plan it gives is feasible
(:class:`apps.teacher_sft.AnswerKeySft`)."""

from __future__ import annotations

from apps.teacher_sft import AnswerKeySft
from apps.travel.agent import PLAN_PROMPT
from apps.travel.kit import env
from apps.travel.plan import task_call

SOURCE = AnswerKeySft(PLAN_PROMPT, env, task_call)
