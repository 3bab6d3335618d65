"""The travel app's episode parts: the request a planner frontend sends, the reward from the itinerary checker,
and the simulated traveller."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

from pydantic import ValidationError

from apps.travel.agent import DAY_NAMES
from apps.travel.checker import (
    Itinerary,
    Poi,
    check_itinerary,
    format_minutes,
)
from harness.agent import Final
from harness.env import Reward
from harness.tasks import Task

FEASIBLE_WEIGHT, SCORE_WEIGHT = 0.5, 0.5
"""Reward = FEASIBLE_WEIGHT * feasible + SCORE_WEIGHT * checker score (the score is 0 when infeasible)."""


@dataclass(frozen=True)
class RewardWeights:
    """Weights of :func:`reward`: ``feasible * 1[feasible] + score * checker score``; they sum to 1."""

    feasible: float = FEASIBLE_WEIGHT
    score: float = SCORE_WEIGHT

    @classmethod
    def of(cls, weights: Mapping[str, float]) -> RewardWeights:
        """From a config's mapping (names left out keep their defaults); a ValueError names what is wrong."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(weights) - set(names))
        if unknown:
            raise ValueError(f"unknown travel reward weight {unknown[0]!r}; expected {', '.join(names)}")
        w = cls(**{k: float(v) for k, v in weights.items()})
        negative = [n for n in names if not getattr(w, n) >= 0]
        if negative:
            raise ValueError(f"travel reward weight {negative[0]} is {getattr(w, negative[0])}: weights are >= 0")
        if abs(w.feasible + w.score - 1.0) > 1e-6:
            raise ValueError(f"travel reward weights feasible + score sum to {w.feasible + w.score:g}, not 1 (the "
                             "reward stays in [0, 1])")
        return w


def request_constraints(task: Task) -> dict[str, Any]:
    """What a chat frontend sends for ``task``: the request text only (the agent reads day, times, lodging, stops
    and budget from it), plus any fields a task records as sent with it (``constraints["request"]``)."""
    request = task.constraints.get("request")
    return dict(request) if isinstance(request, dict) else {}


def form_request(task: Task) -> dict[str, Any]:
    """What a form frontend sends for ``task``: its stated constraints as fields (``hidden`` ones are told on
    asking); ``sidekick eval run --form``."""
    return {k: v for k, v in task.constraints.items() if k not in task.hidden}


# ------------------------------------------------------------------------------------------------ reward
def reward(task: Task, final: Final, pois: dict[str, Poi], weights: RewardWeights | None = None) -> Reward:
    """The checker as reward: ``w_feasible * feasible + w_score * score`` (by default 0.5 + 0.5 * score for a
    feasible plan, 0 otherwise or without an itinerary; ``weights``: :class:`RewardWeights`); ``score`` is
    :func:`check_itinerary`'s weighted score (rating, wanted tags, efficiency, variety). ``success`` = feasible.
    Parts also carry the number of violations, the score's components and, when the task has one, the score
    minus the reference plan's."""
    raw = final.data.get("itinerary")
    try:
        itinerary = Itinerary.model_validate(raw)
    except ValidationError:
        return Reward(value=0.0, success=False, parts={"feasible": 0.0, "score": 0.0, "violations": 1.0})
    result = check_itinerary(itinerary, task, pois)
    parts = {"feasible": float(result.feasible), "score": result.score, "violations": float(len(result.violations)),
             **{f"score_{k}": v for k, v in result.breakdown.items()}}
    if result.feasible and isinstance(task.meta.get("reference_score"), int | float):
        parts["vs_reference"] = result.score - float(task.meta["reference_score"])
    w = weights or RewardWeights()
    value = w.feasible * float(result.feasible) + w.score * result.score
    return Reward(value=value, success=result.feasible, parts=parts)


def reward_fn(pois: dict[str, Poi], weights: RewardWeights | None = None) -> Callable[[Task, Final], Reward]:
    """:func:`reward` bound to the POIs: the ``RewardFn`` that :class:`harness.env.AppEnv` holds."""
    return partial(reward, pois=pois, weights=weights)


# ------------------------------------------------------------------------------------------------ simulated user
def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _place(poi_id: str, pois: dict[str, Poi] | None) -> str:
    return pois[poi_id].name if pois and poi_id in pois else poi_id


def _answers(c: Mapping[str, Any], pois: dict[str, Poi] | None) -> list[tuple[str, str]]:
    """(question pattern, the user's answer) for every constraint the user knows."""
    out: list[tuple[str, str]] = []
    if c.get("day") in DAY_NAMES:
        out.append((r"\bday\b|\bwhen\b|\bdate\b", f"On {DAY_NAMES[c['day']]}."))
    if isinstance(c.get("start_min"), int) and isinstance(c.get("end_min"), int):
        window = f"From {format_minutes(c['start_min'])} to {format_minutes(c['end_min'])}."
        out.append((r"\btime|\bhours?\b|\bwhen\b|\buntil\b|\bwindow\b", window))
    if c.get("start_poi"):
        end = c.get("end_poi") or c["start_poi"]
        out.append((r"hotel|stay|start|where", f"We start at {_place(c['start_poi'], pois)} and end the day at "
                                               f"{_place(end, pois)}."))
    if isinstance(c.get("min_stops"), int) and isinstance(c.get("max_stops"), int):
        out.append((r"how many|stops|places", f"{c['min_stops']} to {c['max_stops']} stops."))
    if c.get("mode"):
        out.append((r"walk|transit|taxi|transport|get around|travel", f"We'll go by {c['mode']}."))
    likes = [*c.get("must_categories", []), *c.get("want_tags", [])]
    if likes:
        out.append((r"interest|like|want|prefer|must|see|enjoy", f"We'd like {_join([str(x) for x in likes])}."))
    if c.get("avoid_tags"):
        out.append((r"avoid|not want|don't want|dislike", f"Please avoid {_join(list(c['avoid_tags']))}."))
    if c.get("budget") is not None or c.get("max_price_level", 4) < 4:
        budget = f"at most {c['budget']:.0f} in total" if c.get("budget") is not None else "no fixed budget"
        out.append((r"budget|spend|cost|price|expensive|cheap",
                    f"{budget.capitalize()}, price level {c.get('max_price_level', 4)} of 4 at most."))
    return out


def simulated_user(task: Task, assistant_text: str, pois: dict[str, Poi] | None = None) -> str:
    """The traveller's reply to a clarifying question, from ``task.hidden`` first and then the constraints
    (``pois`` turns place ids into names); 'please go ahead' when nothing asked is known, thanks otherwise."""
    text = assistant_text.lower()
    if "?" not in text:
        return "Thanks, that works!"
    known = {**task.constraints, **task.hidden}
    said = [answer for pattern, answer in _answers(known, pois) if re.search(pattern, text)]
    return " ".join(dict.fromkeys(said)) if said else "Whatever you think is best — please go ahead and plan it."
