"""The livestream tests' one stream: earbuds, headphones and a sold-out serum, as an app without a world dir."""

from __future__ import annotations

import pytest

from apps.livestream.agent import livestream_app
from apps.livestream.world import Stream
from harness.agent import AppSpec
from harness.catalog import Catalog, Item

EARBUDS, HEADPHONES, SERUM = "lv-a", "lv-b", "lv-c"


@pytest.fixture
def app() -> AppSpec:
    """One stream: earbuds on screen 60–300 s, headphones 310–600 s, a sold-out serum 610–900 s."""
    items = [
        Item(item_id=EARBUDS, title="Voltix Pro Earbuds", category_path=["Electronics", "Audio", "Earbuds"],
             attributes={"brand": "Voltix", "shipping_days": 3, "returns_days": 14, "discount_percent": 20,
                         "colours": ["black", "white"], "waterproof": False, "battery_hours": 30,
                         "warranty_months": 12},
             price=49.99, stock=12),
        Item(item_id=HEADPHONES, title="Sonaro Max Headphones", category_path=["Electronics", "Audio", "Headphones"],
             attributes={"brand": "Sonaro", "shipping_days": 5, "discount_percent": 10, "colours": ["black", "silver"],
                         "battery_hours": 40, "waterproof": True},
             price=89.99, stock=3),
        Item(item_id=SERUM, title="GlowLab Serum 30ml", category_path=["Beauty", "Skincare", "Serum"],
             attributes={"brand": "GlowLab", "vegan": True, "ingredients": ["water", "glycerin", "niacinamide"],
                         "discount_percent": 15},
             price=19.99, stock=0),
    ]
    stream = Stream(stream_id="stream-t", host="Mia", title="Mia's audio live", start_ts=0, duration_s=1000,
                    item_ids=[EARBUDS, HEADPHONES, SERUM], windows=[(60, 300), (310, 600), (610, 900)])
    return livestream_app(catalog=Catalog(items), streams=[stream])
