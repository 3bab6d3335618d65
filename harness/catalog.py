"""The catalog contract: ``Item`` records and an in-memory ``Catalog`` keyed by item id."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from infra.recordio import ReadStats, RecordReader, write_records

ItemId = Annotated[str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True)]
AttributeValue = str | int | float | bool | list[str]


class Item(BaseModel):
    """One thing a user can be given: a product, a movie, a point of interest.

    Unknown fields are rejected (a typo in a field name is an error, not silently lost data).
    """

    model_config = ConfigDict(extra="forbid")

    item_id: ItemId = Field(description="Stable unique id within the catalog.")
    title: Annotated[str, StringConstraints(min_length=1, max_length=2000)] = Field(
        description="Display title as listed (may contain the seller's typos)."
    )
    description: str = Field(default="", max_length=100_000, description="Free-text description.")
    category_path: list[Annotated[str, StringConstraints(min_length=1)]] = Field(
        min_length=1, description="Taxonomy path, root first, e.g. ['Outdoor', 'Footwear', 'Hiking boots']."
    )
    attributes: dict[str, AttributeValue] = Field(
        default_factory=dict, description="Facets: brand, colour, size, material, features, …"
    )
    price: float | None = Field(default=None, ge=0, description="Unit price in `currency`; None = not sold.")
    currency: Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")] = Field(
        default="USD", description="ISO-4217 code."
    )
    stock: int | None = Field(default=None, ge=0, description="Units in stock; None = not tracked.")
    rating: float | None = Field(default=None, ge=0, le=5, description="Mean rating, 0–5; None = unrated.")

    @field_validator("attributes")
    @classmethod
    def _attribute_keys(cls, v: dict[str, AttributeValue]) -> dict[str, AttributeValue]:
        for k in v:
            if not k.strip():
                raise ValueError("attribute names must be non-empty")
        return v

    @property
    def in_stock(self) -> bool:
        return self.stock is None or self.stock > 0


class Catalog:
    """Items by id, in file order. Duplicate ids are an error (they would make grounding ambiguous)."""

    def __init__(self, items: Iterable[Item] = ()) -> None:
        self._items: dict[str, Item] = {}
        for item in items:
            self.add(item)

    def add(self, item: Item) -> None:
        if item.item_id in self._items:
            raise ValueError(f"duplicate item_id {item.item_id!r}")
        self._items[item.item_id] = item

    def remove(self, item_id: str) -> Item:
        return self._items.pop(item_id)

    def get(self, item_id: str) -> Item | None:
        return self._items.get(item_id)

    def __getitem__(self, item_id: str) -> Item:
        return self._items[item_id]

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items.values())

    def ids(self) -> list[str]:
        return list(self._items)

    @classmethod
    def load(
        cls, path: Path | str, *, skip_bad: bool = False, quarantine: Path | str | None = None
    ) -> tuple[Catalog, ReadStats]:
        """Load a JSONL/Parquet catalog. A duplicate ``item_id`` is a bad record like any other."""
        reader = RecordReader(path, Item, skip_bad=skip_bad, quarantine=quarantine)
        catalog = cls()
        for item in reader:
            if item.item_id in catalog:
                reason = f"field 'item_id': duplicate id {item.item_id!r}"
                reader.reject(reader.last_line, "duplicate_id", reason, item)
                continue
            catalog.add(item)
        return catalog, reader.stats

    def save(self, path: Path | str) -> int:
        return write_records(path, self, Item)


CARD_TITLE_CHARS = 90
"""Titles in item cards are cut to this many characters (the model's context is small)."""
CARD_ATTRIBUTES = ("brand", "colour", "material", "size", "features")


def item_card(item: Item) -> dict[str, Any]:
    """An item as tools show it to the model (and SFT trajectories train on): id, title, price, category,
    rating and key facets; ``in_stock: false`` only when sold out."""
    attrs = []
    for key in CARD_ATTRIBUTES:
        value = item.attributes.get(key)
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        if value not in (None, ""):
            attrs.append(f"{key}: {value}")
    card: dict[str, Any] = {"item_id": item.item_id, "title": item.title[:CARD_TITLE_CHARS], "price": item.price,
                            "category": " > ".join(item.category_path), "rating": item.rating}
    if attrs:
        card["attrs"] = "; ".join(attrs)
    if not item.in_stock:
        card["in_stock"] = False
    return card
