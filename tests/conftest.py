"""Shared fixtures. Run the fast tier with `make test-fast`, fast + integration with `make test`."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.catalog import Item


@pytest.fixture
def items() -> list[Item]:
    return [
        Item(item_id="a1", title="Trail boots", category_path=["Outdoor", "Footwear", "Hiking boots"],
             attributes={"brand": "Northpeak", "size": "42", "features": ["waterproof"], "weight_g": 950,
                         "vegan": False, "rating_count": 12.5},
             price=79.99, stock=3, rating=4.5),
        Item(item_id="a2", title="Camp stove", description="Small.", category_path=["Outdoor"], price=None,
             stock=None, rating=None),
    ]


@pytest.fixture
def world_dir(tmp_path: Path) -> Path:
    """A tiny seeded shopping world (fast to generate)."""
    from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world

    out = tmp_path / "world"
    generate_shopping_world(ShoppingWorldConfig(items=3000, tasks=300, sessions=400, customers=100), out)
    return out
