"""What a good travel agent calls under the compact protocol, read off a task's answer key.

The compact protocol (:data:`apps.travel.agent.PLAN_PROMPT`) is one call per request, ``plan(day, start, end,
hotel, end_hotel, stops, must, want, avoid, price_level, budget, mode)``. :func:`plan_call` gives it for a task:
its constraints in the call's words (times as "HH:MM", lodgings by name, defaults left out). It is the
served-format SFT target (:mod:`apps.travel.sft`) and the cascade's teacher (:func:`plan_teacher`), which may
read the answer key because it only ever acts on training tasks.
"""

from __future__ import annotations

from typing import Any

from apps.travel.checker import PlanConstraints, Poi, format_minutes
from harness.env import AppEnv, Episode
from harness.protocol import render_call
from harness.tasks import Task

PLAN = "plan"
_DEFAULT = PlanConstraints(day="mon", start_min=0, end_min=1)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 2)


def plan_call(task: Task, pois: dict[str, Poi]) -> tuple[str, dict[str, Any]]:
    """``(tool name, arguments)`` a good agent calls for ``task``."""
    c = PlanConstraints.model_validate({k: v for k, v in task.constraints.items() if k in PlanConstraints.model_fields})
    args: dict[str, Any] = {"day": c.day, "start": format_minutes(c.start_min), "end": format_minutes(c.end_min)}
    if c.start_poi in pois:
        args["hotel"] = pois[c.start_poi].name
        if c.end_poi in pois and c.end_poi != c.start_poi:
            args["end_hotel"] = pois[c.end_poi].name
    if (c.min_stops, c.max_stops) != (_DEFAULT.min_stops, _DEFAULT.max_stops):
        args["stops"] = [c.min_stops, c.max_stops]
    for key, values in (("must", c.must_categories), ("want", c.want_tags), ("avoid", c.avoid_tags)):
        if values:
            args[key] = list(values)
    if c.max_price_level != _DEFAULT.max_price_level:
        args["price_level"] = c.max_price_level
    if c.budget is not None:
        args["budget"] = _number(c.budget)
    args["mode"] = c.mode
    return PLAN, args


def task_call(env: AppEnv, task: Task) -> tuple[str, dict[str, Any]]:
    return plan_call(task, env.spec.resources.pois)


def plan_teacher(episode: Episode, model: Any) -> str:
    """The cascade's teacher under the compact protocol: :func:`plan_call` for the episode's task, written as the
    model writes a call (``AppEnv.teacher``)."""
    return render_call(*task_call(episode.env, episode.task))
