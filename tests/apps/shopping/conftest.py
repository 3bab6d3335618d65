"""Shared fixtures of the shopping agent tests: a hand-made catalog (the scripted engine is in tests/conftest.py).

Run: .venv/bin/python -m pytest tests/apps/shopping -q
"""

from __future__ import annotations

import pytest

from harness.catalog import Catalog, Item

BOOTS = ["Outdoor", "Footwear", "Hiking boots"]
TENTS = ["Outdoor", "Camping", "Tents"]
BAGS = ["Outdoor", "Camping", "Sleeping bags"]
KNIVES = ["Home", "Kitchen", "Knives"]


def _item(item_id: str, title: str, path: list[str], price: float | None, stock: int | None,
          rating: float | None, **attrs: str | list[str]) -> Item:
    return Item(item_id=item_id, title=title, category_path=path, attributes=dict(attrs), price=price, stock=stock,
                rating=rating)


def make_catalog() -> Catalog:
    """Eight items: three boots (one sold out), two tents, two sleeping bags, a knife with untracked stock."""
    return Catalog([
        _item("b1", "Northpeak waterproof hiking boots - Black", BOOTS, 89.99, 5, 4.6, brand="Northpeak",
              colour="black", material="leather", size="42", features=["waterproof"]),
        _item("b2", "Trailco hiking boots, brown", BOOTS, 59.99, 2, 4.1, brand="Trailco", colour="brown",
              material="suede", size="43", features=[]),
        _item("b3", "Summit hiking boots red", BOOTS, 120.0, 0, 4.9, brand="Summit", colour="red",
              material="leather", size="42", features=["waterproof"]),
        _item("t1", "Camp tent 2 person green", TENTS, 150.0, 3, 4.5, brand="Campo", colour="green"),
        _item("t2", "Budget tent 1 person", TENTS, 60.0, 1, 3.9, brand="Campo", colour="grey"),
        _item("s1", "Down sleeping bag", BAGS, 120.0, 4, 4.8, brand="Dreamy", colour="blue"),
        _item("s2", "Synthetic sleeping bag", BAGS, 40.0, 9, 4.0, brand="Dreamy", colour="red"),
        _item("k1", "Chef knife steel", KNIVES, 35.0, None, None, brand="Edge"),
    ])


@pytest.fixture
def catalog() -> Catalog:
    return make_catalog()
