"""Bundle requests over the catalog's own themes (``apps.shopping.themes``): SFT data for the planner.

Run: .venv/bin/python -m pytest tests/apps/shopping/test_themes.py -q
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from apps.shopping.plan import FIND_BUNDLE, plan_call
from apps.shopping.sft import app_spec, plan_examples
from apps.shopping.themes import catalog_bundle_tasks, theme_groups
from harness.catalog import Catalog, Item
from tests.apps.shopping.conftest import BAGS, BOOTS, TENTS


def test_themes_are_departments_and_tops_with_two_stocked_leaves(catalog: Catalog) -> None:
    groups = theme_groups(catalog)
    # Outdoor: three leaves; Camping: two; Footwear, Home and Kitchen hold one leaf each: no bundle
    assert groups == {"outdoor": [tuple(BAGS), tuple(TENTS), tuple(BOOTS)], "camping": [tuple(BAGS), tuple(TENTS)]}


def test_a_department_name_under_two_tops_is_named_with_its_top() -> None:
    items = [Item(item_id=f"i{k}", title="x", category_path=path, price=10.0, stock=1) for k, path in enumerate(
        [["Garden", "Tools", "Rake"], ["Garden", "Tools", "Hose"], ["Kitchen", "Tools", "Knife"],
         ["Kitchen", "Tools", "Board"], ["Kitchen", "Tools", "Sold out"]])]
    items[-1] = items[-1].model_copy(update={"stock": 0})  # no stocked item: not a leaf of any theme
    groups = theme_groups(items)
    assert sorted(groups) == ["garden", "garden tools", "kitchen", "kitchen tools"]
    assert groups["kitchen tools"] == [("Kitchen", "Tools", "Board"), ("Kitchen", "Tools", "Knife")]


def test_bundle_tasks_plan_find_bundle_with_a_budget_that_fits(catalog: Catalog) -> None:
    tasks = catalog_bundle_tasks(catalog, 6, seed=3)
    assert [t.task_id for t in tasks] == [f"theme-bundle-{k:05d}" for k in range(6)]
    assert [t.meta["theme"] for t in tasks[:2]] == ["camping", "outdoor"]  # every theme once before any repeats
    # median prices of the in-stock items: sleeping bags (120, 40) -> 80, tents (150, 60) -> 105, boots
    # (89.99, 59.99; the red pair is sold out) -> 74.99
    median = {tuple(BAGS): 80.0, tuple(TENTS): 105.0, tuple(BOOTS): 74.99}
    for task in tasks:
        name, args = plan_call(task, asked=True)
        slots = [tuple(s) for s in task.constraints["slots"]]
        assert name == FIND_BUNDLE and args["slots"] == [s[-1] for s in slots]
        assert 2 <= len(slots) == len(set(slots)) and set(slots) <= set(theme_groups(catalog)[task.meta["theme"]])
        total = sum(median[s] for s in slots)
        # 1.1-1.5x the medians, rounded up to 50: the budget is in the words, as a shopper writes it
        assert args["budget"] % 50 == 0 and total * 1.1 <= args["budget"] < total * 1.5 + 50
        assert str(args["budget"]) in re.findall(r"\d+", task.messages[0].content)
    assert catalog_bundle_tasks(catalog, 6, seed=3) == tasks
    assert catalog_bundle_tasks(catalog, 6, seed=4) != tasks
    assert catalog_bundle_tasks(catalog, 0) == []


def test_theme_bundles_become_served_format_plan_examples(catalog: Catalog) -> None:
    tasks = catalog_bundle_tasks(catalog, 3)
    examples = plan_examples(tasks, app_spec())
    assert [e.source for e in examples] == [t.task_id for t in tasks]
    for example, task in zip(examples, tasks, strict=True):
        system, user, call = example.messages
        assert system["role"] == "system" and user == {"role": "user", "content": task.messages[0].content}
        function = call["tool_calls"][0]["function"]
        arguments = json.loads(function["arguments"])
        assert function["name"] == "find_bundle" and arguments["budget"] == task.constraints["budget"]
        assert arguments["slots"] == [s[-1] for s in task.constraints["slots"]]


def test_theme_bundles_without_plan_examples_are_a_config_error(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from training.sft import SFTConfig

    with pytest.raises(ValidationError, match="theme_bundles 5 needs trajectories_per_task > 0"):
        SFTConfig(world=tmp_path, sid=tmp_path, out=tmp_path, theme_bundles=5)
    assert SFTConfig(world=tmp_path, sid=tmp_path, out=tmp_path, theme_bundles=0).theme_bundles == 0
