"""Shopping task constraints: their keys, and whether an item satisfies them.

Keys of ``Task.constraints`` for ``app="shopping"`` (all optional):

- ``category``: list[str], a category-path prefix the item must be under;
- ``attributes``: dict[str, str], exact (case-insensitive) facet values, e.g. ``{"colour": "black"}``;
- ``features``: list[str], every one must be in the item's ``features`` attribute;
- ``price_min`` / ``price_max``: float, inclusive bounds in the item's currency;
- ``in_stock``: bool, the item must have stock (default True);
- bundles only: ``budget`` (float, total price cap) and ``slots`` (one category path per slot).
"""

from __future__ import annotations

from typing import Any

from harness.catalog import Item


def item_matches(item: Item, constraints: dict[str, Any]) -> bool:
    """True when ``item`` meets every per-item constraint (bundle ``budget`` is checked elsewhere)."""
    category = constraints.get("category")
    if category and item.category_path[: len(category)] != list(category):
        return False
    for key, want in (constraints.get("attributes") or {}).items():
        have = item.attributes.get(key)
        if have is None or str(have).lower() != str(want).lower():
            return False
    features = constraints.get("features")
    if features:
        have_f = item.attributes.get("features", [])
        have_set = {f.lower() for f in have_f} if isinstance(have_f, list) else set()
        if not all(f.lower() in have_set for f in features):
            return False
    price = item.price
    if constraints.get("price_max") is not None and (price is None or price > constraints["price_max"]):
        return False
    if constraints.get("price_min") is not None and (price is None or price < constraints["price_min"]):
        return False
    return not (constraints.get("in_stock", True) and not item.in_stock)


_ATTR_PHRASE = {"colour": "in {v}", "material": "made of {v}", "brand": "from {v}", "size": "in size {v}"}


def hidden_constraints_text(hidden: dict[str, Any]) -> str:
    """The user's answer stating the hidden constraints, e.g. ``"I'd like it in red, from Acme, under $45."``."""
    parts = [_ATTR_PHRASE.get(k, k + " {v}").format(v=v) for k, v in (hidden.get("attributes") or {}).items()]
    if hidden.get("price_max") is not None:
        parts.append(f"under ${float(hidden['price_max']):g}")
    return "I'd like it " + ", ".join(parts) + "." if parts else "Anything is fine."
