"""Item, Catalog, Task and Target contracts: what they accept and what they refuse."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.catalog import Catalog, Item
from harness.tasks import Message, Target, Task


def test_item_defaults_and_stock() -> None:
    item = Item(item_id=" a1 ", title="T", category_path=["x"])
    assert item.item_id == "a1" and item.currency == "USD" and item.in_stock and item.attributes == {}
    assert not Item(item_id="a", title="T", category_path=["x"], stock=0).in_stock


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"item_id": ""}, "item_id"), ({"title": ""}, "title"), ({"category_path": []}, "category_path"),
     ({"category_path": [""]}, "category_path"), ({"price": -0.01}, "price"), ({"rating": 5.5}, "rating"),
     ({"currency": "usd"}, "currency"), ({"stock": -1}, "stock"), ({"attributes": {"": "x"}}, "attributes"),
     ({"attributes": {"a": {"nested": 1}}}, "attributes"), ({"colour": "red"}, "colour")],
)
def test_item_rejects(fields: dict[str, object], field: str) -> None:
    base: dict[str, object] = {"item_id": "a", "title": "T", "category_path": ["x"]}
    with pytest.raises(ValidationError, match=field):
        Item.model_validate({**base, **fields})


def test_catalog_basics(items: list[Item]) -> None:
    catalog = Catalog(items)
    assert len(catalog) == 2 and "a1" in catalog and catalog.get("zz") is None and catalog.ids() == ["a1", "a2"]
    with pytest.raises(ValueError, match="duplicate item_id 'a1'"):
        catalog.add(items[0])
    assert catalog.remove("a1").item_id == "a1" and "a1" not in catalog


def test_target_shapes() -> None:
    assert Target(kind="single", slots=[["a"]]).item_ids == ["a"]
    assert Target(kind="bundle", slots=[["a", "b"], ["b", "c"]]).item_ids == ["a", "b", "c"]
    for kind, slots, msg in [("single", [["a", "b"]], "exactly one slot with one"),
                             ("set", [["a"], ["b"]], "exactly one slot"), ("bundle", [["a"]], "at least two"),
                             ("set", [[]], "at least one item id")]:
        with pytest.raises(ValidationError, match=msg):
            Target(kind=kind, slots=slots)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="slot_names"):
        Target(kind="bundle", slots=[["a"], ["b"]], slot_names=["x"])


def test_task_needs_its_ground_truth() -> None:
    """What ground truth a task needs is its app's to say (the app's kit), not the Task schema's."""
    from apps import kit

    msg = [Message(role="user", content="hi")]
    shopping = Task(task_id="t", app="shopping", kind="explicit", messages=msg)
    assert "shopping task t has no target" in (kit("shopping").task_problem(shopping) or "")
    livestream = Task(task_id="t", app="livestream", kind="question", messages=msg)
    assert "livestream task t has no answer" in (kit("livestream").task_problem(livestream) or "")
    assert kit("shopping").task_problem(livestream) == "task t is for app 'livestream', not 'shopping'"
    with pytest.raises(ValidationError, match="messages"):
        Task(task_id="t", app="travel", kind="plan", messages=[])
    assert Task(task_id="t", app="travel", kind="plan", messages=msg).target is None
