"""Bundle requests over themes made from the catalog's own departments: SFT data that teaches the planner the
*form* of a bundle request, whatever its theme.

A world has few bundle themes (the demo's ten), and a task split by wording family holds some of them out
entirely, so a small model trained on the rest learns the themes it saw, not the request: on the demo's
held-out themes the quick agent planned ``find`` for 62 of 66 bundle requests. These examples give it many
themes: each department of the catalog (the level above the leaves: "Sports > Fitness") and each top-level
category, named in a few phrasings, asked for in many wordings with a total budget, answered with
``find_bundle`` over some of its leaves and a budget that fits them. Nothing here reads a task: the themes
come from the catalog's category paths and the budgets from its prices, so no held-out request, theme phrase
or answer is among them (the phrasings below avoid the world's own theme phrases, e.g. "essentials",
"starter kit", "gear to start").

Which slots a new theme gets at serving time is decided by grounding
(:class:`apps.shopping.grounding.NearestDepartment`); what these examples teach is to plan the bundle.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable

import numpy as np

from harness.catalog import Item
from harness.tasks import Task

THEME_NAMES = ("the {name} basics", "a complete {name} set", "a {name} bundle", "a full {name} set-up",
               "one of each for {name}", "a {name} package", "all the {name} things I need", "my {name} kit")
"""How a theme is named ({name}: a department or top-level category, lower case)."""
REQUESTS = ("I need {theme}, total budget ${budget}", "Can you put together {theme}? I can spend about {budget}.",
            "help me get {theme} for under {budget} dollars", "put together {theme} for me, {budget} max",
            "I'd like {theme}. Everything together under ${budget}, please.", "{theme} for at most {budget} in total",
            "looking to buy {theme}, my budget is {budget} for all of it",
            "Could you assemble {theme} within {budget} dollars?", "{theme}, {budget} bucks altogether",
            "shop {theme} for me - {budget} is the limit")
"""How a bundle is asked for with its total budget (the world's three wordings and seven more)."""
MAX_SLOTS = 5


def _medians(items: Iterable[Item]) -> dict[tuple[str, ...], float]:
    """Per leaf path: the median price of its in-stock priced items."""
    prices: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for item in items:
        if item.price is not None and (item.stock is None or item.stock > 0):
            prices[tuple(item.category_path)].append(float(item.price))
    return {path: float(np.median(p)) for path, p in prices.items()}


def theme_groups(items: Iterable[Item]) -> dict[str, list[tuple[str, ...]]]:
    """Theme name (lower case) -> the leaf paths a bundle of it draws from: every department (path minus its leaf)
    and every top-level category with two or more stocked leaves. A department name that recurs under several
    tops ("Tools") is named with its top ("garden tools")."""
    medians = _medians(items)
    groups: dict[tuple[str, ...], list[tuple[str, ...]]] = defaultdict(list)
    for path in sorted(medians):
        for depth in range(1, len(path)):
            groups[path[:depth]].append(path)
    last = defaultdict(set)
    for key in groups:
        last[key[-1].lower()].add(key)
    out: dict[str, list[tuple[str, ...]]] = {}
    for key, leaves in groups.items():
        if len(leaves) < 2:
            continue
        name = key[-1].lower() if len(last[key[-1].lower()]) == 1 else f"{key[0]} {key[-1]}".lower()
        out[name] = leaves
    return out


def catalog_bundle_tasks(items: Iterable[Item], n: int, seed: int = 0) -> list[Task]:
    """``n`` bundle tasks (kind ``bundle``, ids ``theme-bundle-<k>``) over the catalog's themes, deterministic for
    the seed: a theme, 2 to 5 of its leaves, a request wording and a budget of 1.1-1.5x the leaves' median prices
    (rounded up to 50, as the world's bundles). Their constraints are what ``plan_call`` reads (slots, budget);
    they have no target and are never evaluated on."""
    items = list(items)
    medians = _medians(items)
    groups = theme_groups(items)
    if n <= 0 or not groups:
        return []
    rng = random.Random(f"{seed}:theme-bundles")
    names = sorted(groups)
    out = []
    for k in range(n):
        name = names[k % len(names)] if k < len(names) else rng.choice(names)
        leaves = groups[name]
        size = rng.randint(2, min(MAX_SLOTS, len(leaves)))
        slots = sorted(rng.sample(leaves, size), key=leaves.index)
        budget = math.ceil(sum(medians[s] for s in slots) * rng.uniform(1.1, 1.5) / 50.0) * 50
        theme = rng.choice(THEME_NAMES).format(name=name)
        text = rng.choice(REQUESTS).format(theme=theme, budget=budget)
        out.append(Task.model_validate({
            "task_id": f"theme-bundle-{k:05d}", "app": "shopping", "kind": "bundle",
            "messages": [{"role": "user", "content": text[0].upper() + text[1:] if rng.random() < 0.5 else text}],
            "constraints": {"slots": [list(s) for s in slots], "budget": float(budget), "in_stock": True},
            "meta": {"theme": name}}))
    return out
