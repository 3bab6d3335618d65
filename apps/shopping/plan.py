"""What a good shopping agent calls under the compact protocol, read off a task's answer key.

The compact protocol (``PLAN_PROMPT`` in :mod:`apps.shopping.agent`) is one tool call per turn:
``find`` with the filters the shopper stated, ``find_bundle`` with the slots and the budget, or
``ask_user`` when the opening names a kind of product but none of the details the shopper will insist
on (a ``multi_turn`` task). :func:`plan_call` gives that call for a task at a given user turn; it is the
served-format SFT target (:func:`apps.shopping.sft.plan_examples`) and the cascade's teacher
(:func:`plan_teacher`), which may read the answer key because it only ever acts on training tasks.
"""

from __future__ import annotations

from typing import Any

from apps.shopping.constraints import hidden_constraints_text
from harness.env import Episode
from harness.protocol import render_call
from harness.tasks import Task

FIND, FIND_BUNDLE, ASK_USER = "find", "find_bundle", "ask_user"
_FACET_KEYS = ("brand", "colour", "material", "size")


def clarifying_question(task: Task) -> str:
    """The assistant's question for a ``multi_turn`` task, from the keys it must clarify (``meta.clarify``)."""
    clarify = list(task.meta.get("clarify", []))
    keys = [k for k in clarify if k != "price_max"]
    budget = "price_max" in clarify or "price_max" in task.hidden
    if keys:
        return f"Happy to help! Which {' and '.join(keys)} would you like" + (", and what is your budget?" if budget
                                                                          else "?")
    return "Happy to help! What is your budget?" if budget else "Happy to help! Any preferences?"


def _number(value: Any) -> int | float:
    """Prices as the shopper wrote them: 240, not 240.0."""
    v = float(value)
    return int(v) if v.is_integer() else round(v, 2)


def find_arguments(constraints: dict[str, Any]) -> dict[str, Any]:
    """``find`` arguments stating ``constraints`` (keys of :mod:`apps.shopping.constraints`), in a fixed order.

    The category is the path's last name (the catalog's leaf and top-level names are unique, and ``find``
    matches a name anywhere in a path); ``features`` gives its first feature.
    """
    args: dict[str, Any] = {}
    category = constraints.get("category")
    if category:
        args["category"] = str(category[-1])
    attrs = constraints.get("attributes") or {}
    for key in _FACET_KEYS:
        if attrs.get(key):
            args[key] = str(attrs[key])
    features = constraints.get("features") or []
    if features:
        args["feature"] = str(features[0])
    for key in ("price_min", "price_max"):
        if constraints.get(key) is not None:
            args[key] = _number(constraints[key])
    return args


def needs_question(task: Task) -> bool:
    """True when the opening leaves out constraints the shopper states only when asked."""
    return task.kind == "multi_turn" and bool(task.hidden)


def plan_call(task: Task, asked: bool) -> tuple[str, dict[str, Any]]:
    """``(tool name, arguments)`` a good agent calls for ``task``; ``asked``: it has asked its question already."""
    c = task.constraints
    if c.get("slots") and c.get("budget") is not None:
        return FIND_BUNDLE, {"slots": [str(s[-1]) for s in c["slots"]], "budget": _number(c["budget"])}
    if needs_question(task) and not asked:
        return ASK_USER, {"question": clarifying_question(task)}
    return FIND, find_arguments(c)


def answer_text(task: Task) -> str:
    """The shopper's answer to the question (:func:`apps.shopping.env.simulated_user` says the same)."""
    return hidden_constraints_text(task.hidden)


def plan_teacher(episode: Episode, model: Any) -> str:
    """The cascade's teacher under the compact protocol: the call :func:`plan_call` gives for the episode's task,
    written as the model writes one (``AppEnv.teacher``)."""
    asked = any(m.get("role") == "assistant" for m in episode.session.messages)
    name, args = plan_call(episode.task, asked)
    return render_call(name, args)
