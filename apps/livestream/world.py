"""The livestream world: streams with products on show, fact sheets, viewer questions with grounded answers.

``sidekick world livestream --out DIR`` writes into DIR:

- ``catalog.jsonl`` — one ``Item`` per product shown on a stream. ``attributes`` is the product's
  **fact sheet** (brand, origin_country, shipping_days, returns_days, discount_percent and
  category-specific facts such as ingredients, colours, sizes, battery_hours, warranty_months…).
  ``price`` is the price during the stream (``discount_percent`` is off the usual price).
- ``streams.jsonl`` — one :class:`Stream` per livestream: host, title, start time, the products in
  show order and the window (seconds from the start) in which each one is on screen.
- ``tasks.jsonl`` — one ``Task(app="livestream")`` per viewer question, of four kinds:
  ``question`` (answerable from one product's fact sheet), ``comparison`` (two products on the same
  stream), ``unanswerable`` (about a product, but not in its fact sheet: ``answer=""``) and
  ``off_topic`` (not about the products: ``answer=""``). ``facts`` lists the fact ids the answer
  rests on, ``"<item_id>.<attribute>"`` (or ``.price`` / ``.stock``); every fact value is rendered in
  the answer text. ``constraints`` = ``{"stream_id", "item_id" (primary product or None),
  "item_ids" (all products asked about), "ts_offset_s" (seconds from stream start)}``.
  ``meta`` = ``{"template", "reference" (this_one | ordinal | named | none), "session_id"}`` plus
  ``"probe"`` (the colour, size or number asked about) for yes/no questions. A ``this_one``
  question ("does it come in pink??") means the product on screen at ``ts_offset_s``.
- ``logs.jsonl`` — one ``Session(app="livestream")`` per viewer per stream watched: the viewer's
  chat (their questions and some chatter) and view/click/cart/purchase events on products on show.

This world serves LiveThinking-style livestream Q&A (sub-second answers from product fact sheets,
rewarded for correctness, helpfulness and brevity). Everything is a function of the seed.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from apps.worlds import Progress, finish_world
from data_curation.records import Event, Session, Turn
from harness.catalog import AttributeValue, Catalog, Item
from harness.tasks import Message, Task
from infra.layout import CATALOG_FILE, LOGS_FILE, TASKS_FILE
from infra.recordio import RecordWriter

STREAMS_FILE = "streams.jsonl"
TASK_KINDS = ("question", "comparison", "unanswerable", "off_topic")
SPECIAL_FACTS = ("price", "stock")
"""Fact names that refer to ``Item`` fields rather than to ``Item.attributes``."""
START_TS = 1_735_689_600  # 2025-01-01T00:00:00Z
_WRITE_CHUNK = 256  # records per progress() call


class LivestreamWorldConfig(BaseModel):
    """How many streams, products, viewers and questions the livestream world has."""

    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, ge=0, description="Everything is a function of this seed. Default 0.")
    streams: int = Field(default=50, ge=1, description="Livestreams (one host each). Default 50.")
    products_per_stream_min: int = Field(
        default=6, ge=2, le=12, description="Fewest products shown on one stream (2–12). Default 6."
    )
    products_per_stream_max: int = Field(
        default=10, ge=2, le=12, description="Most products shown on one stream (2–12). Default 10."
    )
    questions: int = Field(default=2000, ge=0, description="Viewer questions = tasks. Default 2000.")
    viewers: int = Field(default=500, ge=1, description="Distinct viewers in the logs. Default 500.")
    unanswerable_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Share of questions about a product but not in its fact sheet."
    )
    off_topic_fraction: float = Field(
        default=0.1, ge=0, le=1, description="Share of questions not about the products (chit-chat)."
    )
    comparison_fraction: float = Field(
        default=0.15, ge=0, le=1, description="Share of questions comparing two products of the same stream."
    )
    this_one_fraction: float = Field(
        default=0.4, ge=0, le=1,
        description="Share of product questions asked while the product is on screen that say 'this one'/'it'.",
    )
    start_ts: int = Field(default=START_TS, ge=0, description="Unix time (s) of day 0 of the stream schedule.")

    @model_validator(mode="after")
    def _consistent(self) -> LivestreamWorldConfig:
        if self.products_per_stream_min > self.products_per_stream_max:
            raise ValueError("products_per_stream_min must be <= products_per_stream_max")
        total = self.unanswerable_fraction + self.off_topic_fraction + self.comparison_fraction
        if total > 1:
            raise ValueError(
                f"unanswerable_fraction + off_topic_fraction + comparison_fraction = {total:.3f} > 1; lower one"
            )
        return self


class Stream(BaseModel):
    """One livestream: the products in show order and when each one is on screen.

    ``windows[i]`` is ``[start_s, end_s)`` of ``item_ids[i]`` in seconds from ``start_ts``; windows are
    in order, do not overlap, and may leave gaps (intro, host chat) where no product is on screen.
    """

    model_config = ConfigDict(extra="forbid")

    stream_id: str = Field(min_length=1, description="Unique stream id, e.g. 'stream-0003'.")
    host: str = Field(min_length=1, description="Host's display name.")
    title: str = Field(min_length=1, description="Stream title as shown to viewers.")
    start_ts: int = Field(ge=0, description="Unix time (s) the stream starts.")
    duration_s: int = Field(gt=0, description="Length of the stream in seconds.")
    item_ids: list[str] = Field(min_length=1, description="Products in show order.")
    windows: list[tuple[int, int]] = Field(description="[start_s, end_s) on screen, one per item_ids entry.")

    @model_validator(mode="after")
    def _windows_fit(self) -> Stream:
        if len(self.windows) != len(self.item_ids):
            raise ValueError(f"{len(self.item_ids)} item_ids but {len(self.windows)} windows")
        if len(set(self.item_ids)) != len(self.item_ids):
            raise ValueError("item_ids repeat")
        previous_end = 0
        for item_id, (start, end) in zip(self.item_ids, self.windows, strict=True):
            if not previous_end <= start < end <= self.duration_s:
                raise ValueError(f"window of {item_id!r} [{start}, {end}) overlaps or leaves the stream")
            previous_end = end
        return self

    def on_screen(self, ts_offset_s: float) -> str | None:
        """The item on screen ``ts_offset_s`` seconds into the stream, or None between products."""
        for item_id, (start, end) in zip(self.item_ids, self.windows, strict=True):
            if start <= ts_offset_s < end:
                return item_id
        return None

    def shown_by(self, ts_offset_s: float) -> list[str]:
        """Items whose window has started by ``ts_offset_s`` (what a viewer can have seen)."""
        return [i for i, (start, _) in zip(self.item_ids, self.windows, strict=True) if start <= ts_offset_s]


# --------------------------------------------------------------------------------------------------
# Fact-sheet tables
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttrSpec:
    """How one fact is drawn: a choice, an int (range or choice), a bool, a subset or a contiguous run."""

    kind: Literal["choice", "ints", "int", "bool", "subset", "run"]
    values: tuple[str, ...] = ()
    ints: tuple[int, ...] = ()
    low: int = 0
    high: int = 0
    step: int = 1
    p_true: float = 0.5
    k_min: int = 1
    k_max: int = 1


def _choice(*values: str) -> AttrSpec:
    return AttrSpec("choice", values=values)


def _ints(*values: int) -> AttrSpec:
    return AttrSpec("ints", ints=values)


def _int(low: int, high: int, step: int = 1) -> AttrSpec:
    return AttrSpec("int", low=low, high=high, step=step)


def _bool(p_true: float) -> AttrSpec:
    return AttrSpec("bool", p_true=p_true)


def _subset(values: tuple[str, ...], k_min: int, k_max: int) -> AttrSpec:
    return AttrSpec("subset", values=values, k_min=k_min, k_max=k_max)


def _run(values: tuple[str, ...], k_min: int, k_max: int) -> AttrSpec:
    """A contiguous run of an ordered pool (size ranges: S–XL)."""
    return AttrSpec("run", values=values, k_min=k_min, k_max=k_max)


TAXONOMY: dict[str, dict[str, tuple[str, ...]]] = {
    "Beauty": {
        "Skincare": ("Serum", "Moisturiser", "Cleanser", "Sunscreen"),
        "Makeup": ("Lipstick", "Foundation", "Mascara"),
        "Haircare": ("Shampoo", "Hair oil", "Conditioner"),
    },
    "Fashion": {
        "Womenswear": ("Dress", "Blouse", "Jeans"),
        "Menswear": ("T-shirt", "Hoodie", "Chinos"),
        "Shoes": ("Sneakers", "Sandals", "Ankle boots"),
    },
    "Electronics": {
        "Audio": ("Earbuds", "Headphones", "Bluetooth speaker"),
        "Phone accessories": ("Power bank", "Phone case", "Fast charger"),
        "Smart home": ("Smart plug", "Security camera", "Smart bulb"),
    },
    "Kitchen": {
        "Cookware": ("Frying pan", "Saucepan", "Wok"),
        "Appliances": ("Air fryer", "Kettle", "Blender"),
        "Tableware": ("Mug set", "Bento box", "Dinner set"),
    },
    "Snacks": {
        "Sweets": ("Chocolate bar", "Cookies", "Gummies"),
        "Savoury": ("Potato chips", "Mixed nuts", "Rice crackers"),
        "Drinks": ("Green tea", "Coffee beans", "Matcha powder"),
    },
    "Home": {
        "Bedding": ("Duvet cover", "Pillow", "Sheet set"),
        "Decor": ("Scented candle", "Vase", "Throw blanket"),
        "Storage": ("Storage box", "Drawer organiser", "Laundry basket"),
    },
    "Fitness": {
        "Yoga": ("Yoga mat", "Yoga block", "Foam roller"),
        "Strength": ("Dumbbells", "Resistance bands", "Kettlebell"),
        "Wearables": ("Fitness tracker", "Smartwatch", "Smart scale"),
    },
    "Toys": {
        "Building": ("Building blocks", "Magnetic tiles"),
        "Plush": ("Teddy bear", "Plush dinosaur"),
        "Games": ("Board game", "Jigsaw puzzle", "Card game"),
    },
    "Jewellery": {
        "Necklaces": ("Pendant necklace", "Chain necklace"),
        "Earrings": ("Hoop earrings", "Stud earrings"),
        "Rings": ("Band ring", "Stacking ring"),
    },
    "Pet": {
        "Dog": ("Dog bed", "Chew toy", "Dog food"),
        "Cat": ("Cat tree", "Cat litter", "Cat treats"),
        "Pet care": ("Pet shampoo", "Grooming brush"),
    },
}

BRANDS: dict[str, tuple[str, ...]] = {
    "Beauty": ("GlowLab", "Dewdrop", "Lumi Skin", "Petal & Co", "Aurora Beauty", "Mochi Skin", "VelvetLeaf"),
    "Fashion": ("Northline", "Urban Thread", "Maple & Moss", "Softform", "Kinto Studio", "Riverstone", "Daybreak"),
    "Electronics": ("Voltix", "Sonaro", "Pulsewave", "Nimbus Tech", "Brightcell", "Auralink", "Zentro"),
    "Kitchen": ("Ironleaf", "Cookwell", "Haven Kitchen", "Copperpot", "Brewmate", "Salt & Stone", "Kobe Home"),
    "Snacks": ("Crunchy Cove", "Mochi Mochi", "Golden Harvest", "Nutty Days", "Sweet Fern", "Bean Theory"),
    "Home": ("Nestwell", "Linen Lane", "Hearth & Hue", "Calm Corner", "Oakhaus", "Tidy Nest", "Wick & Wax"),
    "Fitness": ("FlexCore", "Stride", "Zenfit", "IronPeak", "Pulse Athletics", "Balance Lab", "Motiv"),
    "Toys": ("Blocktopia", "Wonder Bear", "Tiny Tinker", "Playnest", "Jolly Jumble", "Puzzlepeak", "Dino Den"),
    "Jewellery": ("Silver Fern", "Aurelia", "Luna Gems", "Golden Hour", "Petite Stone", "Mira Jewels", "Stellar"),
    "Pet": ("Happy Paws", "Whisker Co", "Barkside", "Purrfect", "Tailwind Pets", "Furbud", "Snout & Co"),
}

PRICE_RANGE: dict[str, tuple[int, int]] = {  # by mid category, whole dollars (prices end in .99)
    "Skincare": (9, 80), "Makeup": (6, 45), "Haircare": (7, 40), "Womenswear": (15, 120), "Menswear": (12, 90),
    "Shoes": (25, 160), "Audio": (15, 250), "Phone accessories": (8, 60), "Smart home": (12, 120),
    "Cookware": (18, 150), "Appliances": (25, 220), "Tableware": (10, 80), "Sweets": (2, 15), "Savoury": (2, 12),
    "Drinks": (5, 40), "Bedding": (20, 150), "Decor": (10, 90), "Storage": (8, 50), "Yoga": (10, 90),
    "Strength": (12, 150), "Wearables": (30, 300), "Building": (15, 120), "Plush": (10, 45), "Games": (10, 60),
    "Necklaces": (15, 250), "Earrings": (10, 180), "Rings": (12, 200), "Dog": (5, 90), "Cat": (5, 160),
    "Pet care": (6, 30),
}

ADJECTIVES = ("Classic", "Pro", "Lite", "Max", "Air", "Soft", "Ultra", "Everyday", "Cloud", "Prime", "Mini")

PALETTE = ("black", "white", "grey", "navy", "beige", "pink", "red", "green", "blue", "yellow", "purple", "brown")
SHADES = ("nude", "rose", "berry", "coral", "red", "plum", "mocha", "peach")
CLOTHING_SIZES = ("XS", "S", "M", "L", "XL", "XXL")
EU_SHOE_SIZES = tuple(str(n) for n in range(35, 47))
RING_SIZES = ("5", "6", "7", "8", "9", "10", "11")
SKIN_TYPES = ("dry skin", "oily skin", "combination skin", "sensitive skin", "mature skin")
HAIR_TYPES = ("curly hair", "fine hair", "coloured hair", "dry hair", "oily scalp")
BEAUTY_INGREDIENTS = (
    "water", "glycerin", "niacinamide", "hyaluronic acid", "vitamin C", "retinol", "squalane", "aloe vera",
    "shea butter", "fragrance", "alcohol", "ceramides", "zinc oxide", "salicylic acid", "beeswax", "collagen",
)
SWEET_INGREDIENTS = (
    "sugar", "cocoa butter", "milk powder", "wheat flour", "oats", "almonds", "honey", "palm oil", "soy lecithin",
    "vanilla", "gelatin", "eggs", "peanuts", "coconut oil",
)
SAVOURY_INGREDIENTS = (
    "potatoes", "rice", "sunflower oil", "sea salt", "paprika", "almonds", "cashews", "soy sauce", "sugar",
    "wheat flour", "cheese powder", "seaweed", "peanuts",
)
DRINK_INGREDIENTS = ("green tea", "arabica coffee", "matcha", "jasmine", "ginger", "lemongrass", "milk powder", "sugar")
ALLERGENS = ("peanuts", "tree nuts", "milk", "soy", "wheat", "eggs")
ANIMAL_INGREDIENTS = frozenset({"milk powder", "honey", "gelatin", "eggs", "cheese powder", "beeswax", "collagen"})
ALLERGEN_OF: dict[str, str] = {
    "peanuts": "peanuts", "almonds": "tree nuts", "cashews": "tree nuts", "milk powder": "milk",
    "cheese powder": "milk", "soy lecithin": "soy", "soy sauce": "soy", "wheat flour": "wheat", "eggs": "eggs",
}
GLUTEN_INGREDIENTS = frozenset({"wheat flour", "soy sauce"})

COMMON_ATTRS: dict[str, AttrSpec] = {
    "origin_country": _choice(
        "China", "USA", "South Korea", "Japan", "France", "Italy", "Vietnam", "Germany", "UK", "Thailand", "India"
    ),
    "shipping_days": _int(1, 10),
    "returns_days": _ints(7, 14, 30),
    "discount_percent": _int(5, 60, 5),
}

TOP_ATTRS: dict[str, dict[str, AttrSpec]] = {
    "Beauty": {
        "volume_ml": _ints(15, 30, 50, 100, 150, 200, 250), "suitable_for": _subset(SKIN_TYPES, 1, 3),
        "ingredients": _subset(BEAUTY_INGREDIENTS, 3, 6), "vegan": _bool(0.5), "cruelty_free": _bool(0.7),
        "fragrance_free": _bool(0.5),
    },
    "Fashion": {
        "material": _choice("cotton", "linen", "polyester", "denim", "wool blend", "viscose"),
        "colours": _subset(PALETTE, 2, 5), "sizes": _run(CLOTHING_SIZES, 3, 6), "machine_washable": _bool(0.75),
    },
    "Electronics": {
        "colours": _subset(("black", "white", "silver", "blue", "pink", "green"), 1, 4),
        "weight_g": _int(20, 900, 10), "warranty_months": _ints(6, 12, 18, 24), "waterproof": _bool(0.4),
    },
    "Kitchen": {
        "material": _choice("stainless steel", "cast iron", "ceramic", "aluminium", "glass", "bamboo"),
        "colours": _subset(("black", "white", "cream", "sage green", "red", "navy"), 1, 3),
        "dishwasher_safe": _bool(0.6), "warranty_months": _ints(12, 24, 36, 60),
    },
    "Snacks": {
        "weight_g": _ints(50, 100, 150, 200, 250, 500, 1000),
        "flavour": _choice("milk chocolate", "dark chocolate", "strawberry", "matcha", "salted caramel", "mango"),
        "ingredients": _subset(SWEET_INGREDIENTS, 3, 6), "vegan": _bool(0.5), "gluten_free": _bool(0.5),
        "allergens": _subset(ALLERGENS, 0, 0), "calories_per_serving": _int(60, 300, 10),
        "best_before_months": _ints(3, 6, 9, 12, 18, 24),
    },
    "Home": {
        "material": _choice("cotton", "linen", "velvet", "ceramic", "glass", "bamboo", "wool", "polyester"),
        "colours": _subset(("white", "cream", "grey", "sage green", "terracotta", "navy", "blush pink"), 1, 4),
    },
    "Fitness": {
        "colours": _subset(PALETTE, 1, 4),
        "material": _choice("TPE", "natural rubber", "cork", "PVC", "neoprene", "nylon"),
        "weight_g": _int(100, 2000, 50),
    },
    "Toys": {
        "min_age_years": _ints(1, 3, 4, 6, 8, 10, 12, 14),
        "material": _choice("plastic", "wood", "plush polyester", "cardboard", "silicone"),
        "batteries_required": _bool(0.25),
    },
    "Jewellery": {
        "material": _choice(
            "sterling silver", "14k gold plated", "18k gold vermeil", "stainless steel", "rose gold plated", "titanium"
        ),
        "hypoallergenic": _bool(0.6),
        "gemstone": _choice("cubic zirconia", "pearl", "moissanite", "opal", "amethyst", "garnet"),
    },
    "Pet": {},
}

MID_ATTRS: dict[str, dict[str, AttrSpec]] = {
    "Makeup": {"colours": _subset(SHADES, 2, 5), "volume_ml": _ints(3, 5, 10, 30)},
    "Haircare": {"suitable_for": _subset(HAIR_TYPES, 1, 3)},
    "Womenswear": {"fit": _choice("slim", "regular", "relaxed", "oversized")},
    "Menswear": {"fit": _choice("slim", "regular", "relaxed", "oversized")},
    "Shoes": {
        "material": _choice("leather", "canvas", "mesh", "suede", "rubber"), "sizes": _run(EU_SHOE_SIZES, 5, 9),
        "waterproof": _bool(0.3),
    },
    "Audio": {
        "battery_hours": _int(4, 40),
        "connectivity": _choice("Bluetooth 5.3", "Bluetooth 5.0", "USB-C wired", "Bluetooth + AUX"),
    },
    "Smart home": {
        "works_with": _subset(("Alexa", "Google Home", "Apple HomeKit", "SmartThings"), 1, 3),
        "connectivity": _choice("Wi-Fi 2.4 GHz", "Wi-Fi + Bluetooth", "Zigbee", "Matter"),
    },
    "Cookware": {"induction_compatible": _bool(0.6), "weight_g": _int(400, 3000, 50)},
    "Appliances": {
        "wattage_w": _ints(800, 1000, 1200, 1500, 1800, 2200), "capacity_l": _int(1, 7),
        "material": _choice("plastic", "stainless steel", "glass"),
    },
    "Tableware": {"pieces": _ints(2, 4, 6, 12, 16)},
    "Savoury": {
        "flavour": _choice("sea salt", "spicy chilli", "barbecue", "sour cream", "seaweed", "honey mustard"),
        "ingredients": _subset(SAVOURY_INGREDIENTS, 3, 6),
    },
    "Drinks": {
        "flavour": _choice("original", "jasmine", "ginger", "vanilla", "lemongrass"),
        "ingredients": _subset(DRINK_INGREDIENTS, 1, 4),
    },
    "Bedding": {"bed_size": _choice("single", "double", "queen", "king"), "machine_washable": _bool(0.85)},
    "Storage": {"capacity_l": _int(5, 60, 5)},
    "Strength": {"weight_g": _int(1000, 20000, 500)},
    "Wearables": {
        "battery_hours": _int(24, 336, 24), "waterproof": _bool(0.7), "warranty_months": _ints(12, 24),
        "works_with": _subset(("iPhone", "Android", "Strava", "Apple Health", "Google Fit"), 1, 3),
        "material": _choice("silicone", "aluminium", "stainless steel", "glass"),
    },
    "Building": {"pieces": _ints(50, 100, 250, 500, 1000)},
    "Plush": {"machine_washable": _bool(0.6), "colours": _subset(PALETTE, 1, 2)},
    "Necklaces": {"length_cm": _ints(40, 45, 50, 55, 60)},
    "Rings": {"sizes": _run(RING_SIZES, 3, 6)},
    "Dog": {"suitable_for": _subset(("puppies", "adult dogs", "senior dogs"), 1, 3)},
    "Cat": {"suitable_for": _subset(("kittens", "adult cats", "senior cats"), 1, 3)},
    "Pet care": {"suitable_for": _subset(("dogs", "cats", "rabbits"), 1, 2)},
}

LEAF_ATTRS: dict[str, dict[str, AttrSpec]] = {
    "Power bank": {"capacity_mah": _ints(5000, 10000, 20000, 26800)},
    "Fast charger": {"wattage_w": _ints(20, 30, 45, 65, 100)},
    "Phone case": {"material": _choice("silicone", "TPU", "leather", "polycarbonate")},
    "Scented candle": {
        "scent": _choice("vanilla", "lavender", "sandalwood", "fig", "sea salt", "cedar"),
        "burn_hours": _int(20, 80, 5), "material": _choice("soy wax", "coconut wax", "beeswax"),
    },
    "Throw blanket": {"machine_washable": _bool(0.7)},
    "Yoga mat": {"thickness_mm": _ints(3, 4, 5, 6, 8, 10)},
    "Board game": {"players": _choice("2-4", "2-6", "1-4", "3-8")},
    "Card game": {"players": _choice("2-4", "2-6", "3-10")},
    "Jigsaw puzzle": {"pieces": _ints(100, 300, 500, 1000, 1500)},
    "Dog bed": {
        "material": _choice("memory foam", "polyester", "cotton canvas"), "sizes": _run(("S", "M", "L", "XL"), 2, 4),
        "machine_washable": _bool(0.6),
    },
    "Chew toy": {"material": _choice("natural rubber", "nylon", "rope", "silicone")},
    "Dog food": {
        "flavour": _choice("chicken", "lamb", "salmon", "beef", "duck"), "weight_g": _ints(500, 1000, 2000, 5000),
        "gluten_free": _bool(0.5),
    },
    "Cat tree": {
        "height_cm": _ints(60, 90, 120, 150, 180), "material": _choice("sisal and plush", "wood", "cardboard"),
    },
    "Cat litter": {
        "weight_g": _ints(2000, 5000, 10000), "scent": _choice("unscented", "lavender", "baby powder", "fresh linen"),
    },
    "Cat treats": {"flavour": _choice("tuna", "chicken", "salmon", "shrimp"), "weight_g": _ints(30, 50, 80, 150)},
    "Pet shampoo": {"volume_ml": _ints(250, 500), "fragrance_free": _bool(0.4)},
    "Grooming brush": {"material": _choice("bamboo and steel pins", "plastic", "rubber")},
}

# --------------------------------------------------------------------------------------------------
# Question and answer templates. ``{ref}`` is the product as the viewer names it; a question template
# without ``{ref}`` is used only for the product on screen. Answers see ``{v}`` (the fact rendered by
# render_fact), ``{n}`` (the raw value) and ``{probe}`` / ``{x}`` (what the viewer asked about).
# --------------------------------------------------------------------------------------------------

VALUE_Q: dict[str, tuple[str, ...]] = {
    "brand": ("what brand is {ref}?", "who makes {ref}", "brand??", "which brand is {ref} from?"),
    "origin_country": ("where is {ref} made?", "where's it made", "country of origin for {ref}?",
                       "where does {ref} come from"),
    "shipping_days": ("how long does shipping take for {ref}?", "ship to me fast?", "delivery time for {ref}?",
                      "when would {ref} arrive if i order now"),
    "returns_days": ("can i return {ref}?", "what's the return policy on {ref}", "returns ok?",
                     "how long do i have to return {ref}"),
    "discount_percent": ("how much off is {ref}?", "what's the discount on {ref}", "is there a discount??",
                         "how big is the sale on {ref}"),
    "volume_ml": ("how many ml is {ref}?", "how big is {ref}", "what size bottle is {ref}",
                  "how much product do you get"),
    "suitable_for": ("who is {ref} suitable for?", "who is {ref} meant for", "is {ref} for everyone?"),
    "ingredients": ("what's in {ref}?", "ingredients of {ref} pls", "what are the ingredients",
                    "full ingredient list for {ref}?"),
    "colours": ("what colours does {ref} come in?", "colors??", "which colours are available for {ref}",
                "what shades do you have for {ref}"),
    "material": ("what's {ref} made of?", "material?", "what material is {ref}"),
    "sizes": ("what sizes does {ref} come in?", "sizes??", "what size range for {ref}"),
    "fit": ("how does {ref} fit?", "is {ref} true to size or oversized", "what's the fit like"),
    "weight_g": ("how heavy is {ref}?", "weight of {ref}?", "is it heavy", "how much does {ref} weigh"),
    "warranty_months": ("does {ref} have a warranty?", "warranty??", "how long is the warranty on {ref}"),
    "battery_hours": ("how long does the battery last", "battery life of {ref}?",
                      "how many hours on one charge for {ref}"),
    "connectivity": ("how does {ref} connect?", "is {ref} bluetooth or wifi?", "wireless or wired?"),
    "capacity_mah": ("how many mah is {ref}?", "what's the capacity of {ref}", "how big is the battery"),
    "wattage_w": ("how many watts is {ref}?", "what's the wattage", "how powerful is {ref}"),
    "works_with": ("what does {ref} work with?", "compatible with what?", "what apps does {ref} support"),
    "capacity_l": ("how many liters is {ref}?", "what's the capacity of {ref}", "how much does {ref} hold"),
    "pieces": ("how many pieces in {ref}?", "how many pcs", "how many pieces do you get with {ref}"),
    "flavour": ("what flavour is {ref}?", "flavor??", "what does {ref} taste like"),
    "allergens": ("any allergens in {ref}?", "allergy info for {ref} pls", "allergens?"),
    "calories_per_serving": ("how many calories in {ref}?", "calories per serving?", "kcal??"),
    "best_before_months": ("what's the shelf life of {ref}?", "how long does {ref} keep", "expiry?"),
    "bed_size": ("what bed size is {ref}?", "what size is {ref}", "which bed size??"),
    "scent": ("what does {ref} smell like?", "what scent is it", "scent??"),
    "burn_hours": ("how long does {ref} burn?", "burn time?", "how many hours does {ref} last"),
    "thickness_mm": ("how thick is {ref}?", "thickness??", "is {ref} thick"),
    "min_age_years": ("what age is {ref} for?", "age range?", "what age is {ref} good for"),
    "players": ("how many players for {ref}?", "how many people can play", "how many can play {ref}"),
    "gemstone": ("what stone is in {ref}?", "what's the stone", "is that a real gem on {ref}"),
    "length_cm": ("how long is {ref}?", "chain length?", "what length is {ref}"),
    "height_cm": ("how tall is {ref}?", "height?", "how high is {ref}"),
}

VALUE_A: dict[str, tuple[str, ...]] = {
    "brand": ("It's from {v}.", "{v} makes it."),
    "origin_country": ("Made in {v}.", "It comes from {v}."),
    "shipping_days": ("Ships in {v}.", "Delivery takes about {v}."),
    "returns_days": ("You can return it within {v}.", "Returns accepted within {v}."),
    "discount_percent": ("{v} off during the stream.", "It's {v} off right now."),
    "volume_ml": ("It's {v}.", "{v} per bottle."),
    "suitable_for": ("It's made for {v}.", "Suitable for {v}."),
    "ingredients": ("Ingredients: {v}.",),
    "colours": ("It comes in {v}.", "Colours: {v}."),
    "material": ("It's made of {v}.", "Material: {v}."),
    "sizes": ("Sizes: {v}.", "It comes in sizes {v}."),
    "fit": ("It's a {v} fit.",),
    "weight_g": ("It weighs {v}.",),
    "warranty_months": ("Warranty: {v}.", "It comes with a {v} warranty."),
    "battery_hours": ("About {v} per charge.",),
    "connectivity": ("It connects via {v}.",),
    "capacity_mah": ("{v}.", "Capacity: {v}."),
    "wattage_w": ("{v}.", "It's {v}."),
    "works_with": ("It works with {v}.",),
    "capacity_l": ("It holds {v}.",),
    "pieces": ("{v} in the set.",),
    "flavour": ("It's {v}.", "Flavour: {v}."),
    "allergens": ("Allergens: {v}.",),
    "calories_per_serving": ("{v} per serving.",),
    "best_before_months": ("Shelf life is {v}.",),
    "bed_size": ("It's {v} size.",),
    "scent": ("It smells of {v}.", "Scent: {v}."),
    "burn_hours": ("About {v} of burn time.",),
    "thickness_mm": ("It's {v} thick.",),
    "min_age_years": ("It's for ages {n} and up.",),
    "players": ("{v} players.",),
    "gemstone": ("The stone is {v}.",),
    "length_cm": ("It's {v} long.",),
    "height_cm": ("It's {v} tall.",),
}

BOOL_Q: dict[str, tuple[str, ...]] = {
    "vegan": ("is {ref} vegan?", "is this vegan", "vegan??", "is {ref} vegan friendly?"),
    "cruelty_free": ("is {ref} cruelty free?", "cruelty-free??", "is {ref} cruelty-free"),
    "fragrance_free": ("is {ref} fragrance free?", "unscented?", "is {ref} fragrance-free??"),
    "machine_washable": ("can i machine wash {ref}?", "is it machine washable", "washing machine ok for {ref}?"),
    "waterproof": ("is {ref} waterproof?", "can i take {ref} in the shower", "waterproof??"),
    "dishwasher_safe": ("is {ref} dishwasher safe?", "can it go in the dishwasher", "dishwasher ok for {ref}?"),
    "induction_compatible": ("does {ref} work on induction?", "induction ok?", "can i use {ref} on induction"),
    "gluten_free": ("is {ref} gluten free?", "gf??", "is {ref} gluten-free"),
    "batteries_required": ("does {ref} need batteries?", "batteries needed?", "do i need batteries for {ref}"),
    "hypoallergenic": ("is {ref} hypoallergenic?", "safe for sensitive skin?", "is {ref} hypoallergenic??"),
}

BOOL_A: dict[str, tuple[str, str]] = {
    "vegan": ("Yes, it's vegan.", "No, it's not vegan."),
    "cruelty_free": ("Yes, it's cruelty-free.", "No, it isn't certified cruelty-free."),
    "fragrance_free": ("Yes, it's fragrance-free.", "No, it contains fragrance."),
    "machine_washable": ("Yes, it's machine washable.", "No — hand wash only."),
    "waterproof": ("Yes, it's waterproof.", "No, it's not waterproof."),
    "dishwasher_safe": ("Yes, it's dishwasher safe.", "No, hand wash only."),
    "induction_compatible": ("Yes, it works on induction.", "No, not for induction hobs."),
    "gluten_free": ("Yes, it's gluten-free.", "No, it contains gluten."),
    "batteries_required": ("Yes, it needs batteries.", "No batteries needed."),
    "hypoallergenic": ("Yes, it's hypoallergenic.", "No, it isn't hypoallergenic."),
}

MEMBER_Q: dict[str, tuple[str, ...]] = {
    "colours": ("does {ref} come in {probe}??", "{probe} available?", "do you have {ref} in {probe}",
                "is there a {probe} one"),
    "sizes": ("do you have {ref} in size {probe}?", "is there a {probe} in {ref}", "{probe} available??"),
    "ingredients": ("does {ref} have {probe} in it?", "is there {probe} in {ref}", "any {probe} in it?"),
    "allergens": ("does {ref} contain {probe}?", "any {probe} in {ref}?", "does it have {probe}"),
    "works_with": ("does {ref} work with {probe}?", "{probe} compatible??", "will {ref} work with my {probe}"),
    "suitable_for": ("is {ref} good for {probe}?", "ok for {probe}??", "would {ref} work for {probe}"),
}

MEMBER_A: dict[str, tuple[str, str]] = {
    "colours": ("Yes, {probe} is available — colours: {v}.", "No {probe}, sorry — colours: {v}."),
    "sizes": ("Yes, {probe} is available — sizes: {v}.", "No {probe}, sorry — sizes: {v}."),
    "ingredients": ("Yes, it contains {probe}. Ingredients: {v}.", "No {probe}. Ingredients: {v}."),
    "allergens": ("Yes, it contains {probe}. Allergens: {v}.", "No {probe}. Allergens: {v}."),
    "works_with": ("Yes, it works with {v}.", "No, it works with {v}."),
    "suitable_for": ("Yes — it's made for {v}.", "Not really — it's made for {v}."),
}


@dataclass(frozen=True)
class Threshold:
    """A yes/no question about a number: ``yes`` when ``value <= x`` (``le``) or ``value >= x`` (``ge``)."""

    yes_when: Literal["le", "ge"]
    questions: tuple[str, ...]
    answers: tuple[str, str]  # (yes, no)


THRESHOLDS: dict[str, Threshold] = {
    "shipping_days": Threshold(
        "le", ("will {ref} arrive within {x} days?", "can i get it in {x} days??", "need it in {x} days, possible?"),
        ("Yes — it ships in {v}.", "No, shipping takes {v}."),
    ),
    "battery_hours": Threshold(
        "ge", ("will {ref} last a {x} hour flight?", "can the battery go {x} hours?", "does {ref} last {x} hours"),
        ("Yes — about {v} per charge.", "No, it lasts about {v} per charge."),
    ),
    "min_age_years": Threshold(
        "le", ("is {ref} ok for my {x} year old?", "good for a {x}yo?", "can a {x} year old play with {ref}"),
        ("Yes — it's for ages {n} and up.", "No, it's for ages {n} and up."),
    ),
}


@dataclass(frozen=True)
class Comparison:
    """Which of two products wins on a number; ``lower`` or ``higher`` wins."""

    wins: Literal["lower", "higher"]
    questions: tuple[str, ...]
    verb: tuple[str, str]  # (singular, plural) subject
    tie: str


COMPARISONS: dict[str, Comparison] = {
    "price": Comparison(
        "lower", ("which is cheaper, {a} or {b}?", "{a} vs {b} which costs less", "is {a} cheaper than {b}?"),
        ("is cheaper", "are cheaper"), "Same price — both {v}.",
    ),
    "shipping_days": Comparison(
        "lower", ("which ships faster, {a} or {b}?", "{a} or {b}, which arrives sooner?"),
        ("ships faster", "ship faster"), "Both ship in {v}.",
    ),
    "discount_percent": Comparison(
        "higher", ("which has the bigger discount, {a} or {b}?", "more off on {a} or {b}?"),
        ("has the bigger discount", "have the bigger discount"), "Same discount — both {v} off.",
    ),
    "warranty_months": Comparison(
        "higher", ("which has the longer warranty, {a} or {b}?", "warranty {a} vs {b}?"),
        ("has the longer warranty", "have the longer warranty"), "Both have a {v} warranty.",
    ),
    "battery_hours": Comparison(
        "higher", ("which battery lasts longer, {a} or {b}?", "{a} or {b} for battery life?"),
        ("lasts longer", "last longer"), "Same battery life — both {v}.",
    ),
    "weight_g": Comparison(
        "lower", ("which is lighter, {a} or {b}?", "{a} or {b}, which weighs less?"), ("is lighter", "are lighter"),
        "Both weigh {v}.",
    ),
    "volume_ml": Comparison(
        "higher", ("which one is bigger, {a} or {b}?", "more product in {a} or {b}?"),
        ("has more product", "have more product"),
        "Both are {v}.",
    ),
}

PRICE_Q = ("pls price again", "how much is {ref}?", "price??", "how much for {ref}", "what's the price on {ref}",
           "{ref} how much 👀", "is {ref} on sale?", "what's the deal on {ref}")
PRICE_A = (
    "{p} right now — that's {d} off!", "It's {p} during the stream ({d} off).", "{p} with the live deal ({d} off).",
)
STOCK_Q = ("how many left of {ref}?", "is {ref} still in stock?", "any left??", "is {ref} sold out", "stock??")
STOCK_A = ("{n} left in stock right now.", "Only {n} left — grab it fast!")
STOCK_SOLD_OUT_A = "Sold out right now (0 left), sorry!"

UNANSWERABLE_Q = (
    "when will {ref} be restocked?", "is the packaging of {ref} recyclable?", "does {ref} come gift wrapped?",
    "what year did {ref} come out?", "is {ref} sold in stores too?", "is {ref} made with fair trade labor?",
    "does {ref} come with a free sample?", "how many of {ref} have you sold today?",
    "will {ref} go cheaper on black friday", "is there a bundle deal with {ref}?", "who designed {ref}?",
)
OFF_TOPIC_Q = (
    "what's the host's favourite movie?", "where are u streaming from", "what song is playing rn",
    "{host} how long have you been doing streams?", "what's your cat's name 😻", "who won the game last night",
    "is it raining there?", "what's your zodiac sign lol", "can you say hi to my sister maria",
    "{host} what did you have for lunch", "what time is it there?", "do you speak spanish?",
    "{host} are you doing a stream tomorrow?", "what camera do you stream with?", "how old are you {host}",
)
CHATTER = ("hiii 👋", "hello from {city}!", "love this stream", "❤️❤️❤️", "first time here", "omg",
           "the music is so good", "😍😍", "{host} you're the best", "watching from {city}", "lol")
CITIES = ("Ohio", "Manila", "Texas", "Lagos", "São Paulo", "Toronto", "Jakarta", "London", "Seoul", "Madrid")
HOSTS = ("Mia", "Jun", "Sofia", "Leo", "Aisha", "Ken", "Priya", "Marco", "Yuki", "Chloe", "Omar", "Lena")
HOOKS = ("flash deals", "up to 60% off", "new arrivals", "weekend haul", "late-night steals", "mega sale")
EMOJI = ("😍", "🙏", "🔥", "👀", "❤️", "😭", "🥺", "✨")

THIS_ONE_REFS = ("this one", "this", "it", "the one on screen", "the one you're holding", "{this} {leaf}")
THIS_ONE_CMP_REFS = ("this one", "this", "the one on screen", "{this} {leaf}")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth",
            "eleventh", "twelfth")
ORDINAL_REFS = ("the {ord} item", "the {ord} one", "item {n}", "#{n}", "the {ord} product")
NAMED_REFS = ("the {brand} {leaf}", "{that} {brand} {leaf}", "the {leaf} from {brand}", "{brand} {leaf}")
UNIQUE_LEAF_REFS = ("the {leaf}", "{that} {leaf}")

KEY_WEIGHT: dict[str, float] = {
    "price": 6, "stock": 2, "shipping_days": 3, "colours": 3, "sizes": 3, "brand": 1, "origin_country": 1,
    "returns_days": 1, "discount_percent": 1,
}
COUNT_UNITS: dict[str, str] = {
    "shipping_days": "day", "returns_days": "day", "warranty_months": "month", "battery_hours": "hour",
    "burn_hours": "hour", "best_before_months": "month", "min_age_years": "year", "pieces": "piece",
}
SUFFIX_UNITS: dict[str, str] = {
    "volume_ml": " ml", "weight_g": " g", "capacity_mah": " mAh", "wattage_w": " W", "discount_percent": "%",
    "length_cm": " cm", "height_cm": " cm", "thickness_mm": " mm", "capacity_l": " L", "calories_per_serving": " kcal",
}


def _keys_by_top() -> dict[str, list[str]]:
    keys: dict[str, list[str]] = {}
    for top, mids in TAXONOMY.items():
        names = dict.fromkeys(TOP_ATTRS[top])
        for mid, leaves in mids.items():
            names.update(dict.fromkeys(MID_ATTRS.get(mid, {})))
            for leaf in leaves:
                names.update(dict.fromkeys(LEAF_ATTRS.get(leaf, {})))
        keys[top] = list(names)
    return keys


TOP_KEYS = _keys_by_top()
"""Every fact name a product of each top category can have (unanswerable questions ask about the rest)."""


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------


def render_fact(name: str, value: AttributeValue) -> str:
    """A fact as it appears in answers: ``$24.99``, ``3 days``, ``50 ml``, ``black, pink``, ``yes``."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value) if value else "none"
    if name == "price":
        return f"${value:.2f}"
    if isinstance(value, int) and name in COUNT_UNITS:
        return f"{value} {COUNT_UNITS[name]}{'' if value == 1 else 's'}"
    if name in SUFFIX_UNITS:
        return f"{value}{SUFFIX_UNITS[name]}"
    return str(value)


def answer_facts(task: Task, catalog: Catalog) -> dict[str, AttributeValue]:
    """Resolve ``task.facts`` (``"<item_id>.<name>"``) to their values in ``catalog``.

    ``name`` is an attribute of the item, or ``price`` / ``stock``. Raises ``KeyError`` naming the
    first fact that does not resolve.
    """
    values: dict[str, AttributeValue] = {}
    for fact in task.facts:
        item_id, sep, name = fact.rpartition(".")
        item = catalog.get(item_id) if sep else None
        if item is None:
            raise KeyError(f"fact {fact!r}: no item {item_id!r} in the catalog")
        if name in item.attributes:
            values[fact] = item.attributes[name]
            continue
        special = getattr(item, name) if name in SPECIAL_FACTS else None
        if special is None:
            raise KeyError(f"fact {fact!r}: item {item_id!r} has no {name!r}")
        values[fact] = special
    return values


# --------------------------------------------------------------------------------------------------
# Products and streams
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Product:
    """An item with what the generator needs to talk about it."""

    item: Item
    top: str
    brand: str
    leaf: str  # lower-case leaf noun, e.g. "bluetooth speaker"
    specs: dict[str, AttrSpec]

    @property
    def short(self) -> str:
        return f"{self.brand} {self.leaf}"

    @property
    def plural(self) -> bool:
        """Leaves like "sneakers" or "coffee beans" are plural ("these sneakers are …"); "dress" is not."""
        return self.leaf.endswith("s") and not self.leaf.endswith("ss")

    @property
    def this(self) -> str:
        return "these" if self.plural else "this"

    @property
    def that(self) -> str:
        return "those" if self.plural else "that"


def _draw(rng: random.Random, spec: AttrSpec) -> AttributeValue:
    if spec.kind == "choice":
        return rng.choice(spec.values)
    if spec.kind == "ints":
        return rng.choice(spec.ints)
    if spec.kind == "int":
        return rng.randrange(spec.low, spec.high + 1, spec.step)
    if spec.kind == "bool":
        return rng.random() < spec.p_true
    k = min(rng.randint(spec.k_min, spec.k_max), len(spec.values))
    if spec.kind == "run":
        start = rng.randrange(len(spec.values) - k + 1)
        return list(spec.values[start : start + k])
    chosen = set(rng.sample(range(len(spec.values)), k))
    return [v for i, v in enumerate(spec.values) if i in chosen]  # pool order


def _derive(attrs: dict[str, AttributeValue]) -> None:
    """Make facts that follow from the ingredients agree with them (vegan, gluten, allergens, fragrance)."""
    ingredients = attrs.get("ingredients")
    if not isinstance(ingredients, list):
        return
    if "vegan" in attrs:
        attrs["vegan"] = not any(i in ANIMAL_INGREDIENTS for i in ingredients)
    if "gluten_free" in attrs:
        attrs["gluten_free"] = not any(i in GLUTEN_INGREDIENTS for i in ingredients)
    if "fragrance_free" in attrs:
        attrs["fragrance_free"] = "fragrance" not in ingredients
    if "allergens" in attrs:
        found = {ALLERGEN_OF[i] for i in ingredients if i in ALLERGEN_OF}
        attrs["allergens"] = [a for a in ALLERGENS if a in found]


def _make_product(rng: random.Random, item_id: str, top: str, taken: set[tuple[str, str]]) -> _Product:
    """A product of ``top`` whose (brand, leaf) is not in ``taken`` (so names are unambiguous on a stream)."""
    mid, leaf_name, brand = "", "", ""
    for _ in range(100):
        mid = rng.choice(list(TAXONOMY[top]))
        leaf_name = rng.choice(TAXONOMY[top][mid])
        brand = rng.choice(BRANDS[top])
        if (brand, leaf_name) not in taken:
            break
    taken.add((brand, leaf_name))
    specs = {**COMMON_ATTRS, **TOP_ATTRS[top], **MID_ATTRS.get(mid, {}), **LEAF_ATTRS.get(leaf_name, {})}
    attrs: dict[str, AttributeValue] = {"brand": brand}
    attrs.update((name, _draw(rng, spec)) for name, spec in specs.items())
    _derive(attrs)
    low, high = PRICE_RANGE[mid]
    title = f"{brand} {rng.choice(ADJECTIVES)} {leaf_name}"
    if "volume_ml" in attrs:
        title += f" {attrs['volume_ml']}ml"
    stock = 0 if rng.random() < 0.05 else int(rng.triangular(1, 500, 40))
    item = Item(
        item_id=item_id, title=title, description=f"{title}: {mid.lower()} by {brand}, shown live.",
        category_path=[top, mid, leaf_name], attributes=attrs, price=round(rng.randint(low, high) - 0.01, 2),
        currency="USD", stock=stock, rating=round(rng.uniform(3.2, 5.0), 1),
    )
    return _Product(item=item, top=top, brand=brand, leaf=leaf_name.lower(), specs=specs)


def _make_stream(
    rng: random.Random, index: int, start_ts: int, config: LivestreamWorldConfig, first_item: int
) -> tuple[Stream, list[_Product]]:
    tops = list(TAXONOMY)
    primary = rng.choice(tops)
    secondary = rng.choice(tops) if rng.random() < 0.3 else primary
    n = rng.randint(config.products_per_stream_min, config.products_per_stream_max)
    taken: set[tuple[str, str]] = set()
    products = [
        _make_product(rng, f"lv-{first_item + k:06d}", primary if rng.random() < 0.75 else secondary, taken)
        for k in range(n)
    ]
    t = rng.randint(60, 240)  # intro before the first product
    windows: list[tuple[int, int]] = []
    for _ in products:
        length = rng.randint(180, 600)
        windows.append((t, t + length))
        t += length + rng.randint(10, 60)  # host chat between products
    host = rng.choice(HOSTS)
    stream = Stream(
        stream_id=f"stream-{index:04d}", host=host, title=f"{host}'s {primary} live — {rng.choice(HOOKS)}",
        start_ts=start_ts, duration_s=t + rng.randint(60, 180), item_ids=[p.item.item_id for p in products],
        windows=windows,
    )
    return stream, products


def _build_streams(config: LivestreamWorldConfig) -> tuple[list[Stream], dict[str, _Product]]:
    """Every stream and its products (catalog order = stream order, then show order)."""
    rng = random.Random(f"livestream:{config.seed}:streams")
    streams: list[Stream] = []
    products: dict[str, _Product] = {}
    start = config.start_ts + rng.randint(17, 21) * 3600
    for index in range(config.streams):
        stream, shown = _make_stream(rng, index, start, config, len(products))
        streams.append(stream)
        products.update((p.item.item_id, p) for p in shown)
        start += stream.duration_s + rng.randint(4, 30) * 3600
    return streams, products


# --------------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------------


@dataclass
class _Draft:
    """A question before it gets its task id: text, ground truth and how it was made."""

    kind: str
    text: str
    answer: str
    facts: list[str] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)
    template: str = ""
    reference: str = "none"
    probe: str | int | None = None


@dataclass(frozen=True)
class _Ref:
    """How the viewer names the product: its text and kind (this_one, ordinal, named)."""

    product: _Product
    text: str
    kind: str


def _typo(rng: random.Random, template: str) -> str:
    """Swap two letters in one plain word of a template (never in a ``{slot}``: names stay resolvable)."""
    words = template.split(" ")
    plain = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
    if not plain:
        return template
    i = rng.choice(plain)
    w = words[i]
    j = rng.randrange(len(w) - 1)
    words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def _say(rng: random.Random, template: str, **slots: Any) -> str:
    """Fill a question template the way viewers type: typos, lower case, ??, emoji."""
    if rng.random() < 0.12:
        template = _typo(rng, template)
    text = template.format(**slots)
    if rng.random() < 0.3:
        text = text.lower()
    elif rng.random() < 0.4:
        text = text[:1].upper() + text[1:]
    roll = rng.random()
    if text.endswith("?") and roll < 0.15:
        text += "?" * rng.randint(1, 2)
    elif text.endswith("?") and roll < 0.3:
        text = text[:-1]
    if rng.random() < 0.12:
        text += " " + rng.choice(EMOJI)
    return text


def _pick(rng: random.Random, templates: Sequence[str], ref: _Ref) -> tuple[int, str]:
    """A template and its index; one without ``{ref}`` only for the product on screen."""
    allowed = [(i, t) for i, t in enumerate(templates) if "{ref}" in t or ref.kind == "this_one"]
    return rng.choice(allowed)


def _named(rng: random.Random, product: _Product, stream_leaves: list[str]) -> str:
    pool = NAMED_REFS + (UNIQUE_LEAF_REFS if stream_leaves.count(product.leaf) == 1 else ())
    return rng.choice(pool).format(brand=product.brand, leaf=product.leaf, that=product.that)


def _ordinal(rng: random.Random, stream: Stream, product: _Product) -> str:
    position = stream.item_ids.index(product.item.item_id)
    return rng.choice(ORDINAL_REFS).format(ord=ORDINALS[position], n=position + 1)


def _reference(
    rng: random.Random, stream: Stream, ts: int, products: dict[str, _Product], this_one_share: float
) -> _Ref:
    """The product a viewer asks about at ``ts`` and how they name it (on-screen products are favoured)."""
    on_screen = stream.on_screen(ts)
    if on_screen is not None and rng.random() < this_one_share:
        product = products[on_screen]
        return _Ref(product, rng.choice(THIS_ONE_REFS).format(leaf=product.leaf, this=product.this), "this_one")
    if on_screen is not None and rng.random() < 0.4:
        product = products[on_screen]
    else:
        product = products[rng.choice(stream.shown_by(ts))]
    if rng.random() < 0.25:
        return _Ref(product, _ordinal(rng, stream, product), "ordinal")
    leaves = [products[i].leaf for i in stream.item_ids]
    return _Ref(product, _named(rng, product, leaves), "named")


def _pick_key(rng: random.Random, ref: _Ref) -> str:
    """A fact to ask about, weighted by how often viewers ask it (never the brand they just named)."""
    names = [k for k in ref.product.item.attributes if k in VALUE_Q or k in BOOL_Q]
    keys = ["price", "stock"] + [k for k in names if not (k == "brand" and ref.kind == "named")]
    return rng.choices(keys, weights=[KEY_WEIGHT.get(k, 2.0) for k in keys])[0]


def _fact(product: _Product, name: str) -> str:
    return f"{product.item.item_id}.{name}"


def _price_or_stock_draft(rng: random.Random, ref: _Ref, key: str) -> _Draft:
    item = ref.product.item
    assert item.price is not None and item.stock is not None, "generated items always have price and stock"
    if key == "price":
        index, template = _pick(rng, PRICE_Q, ref)
        discount = render_fact("discount_percent", item.attributes["discount_percent"])
        answer = rng.choice(PRICE_A).format(p=render_fact("price", item.price), d=discount)
        facts = [_fact(ref.product, "price"), _fact(ref.product, "discount_percent")]
    else:
        index, template = _pick(rng, STOCK_Q, ref)
        answer = rng.choice(STOCK_A).format(n=item.stock) if item.stock > 0 else STOCK_SOLD_OUT_A
        facts = [_fact(ref.product, "stock")]
    return _Draft("question", _say(rng, template, ref=ref.text), answer, facts, template=f"{key}:{key}:{index}")


def _probe(rng: random.Random, values: list[str], pool: tuple[str, ...]) -> str:
    """Something to ask about: one of ``values`` (55 %) or one from ``pool`` that is not."""
    missing = [p for p in pool if p not in values]
    if values and (rng.random() < 0.55 or not missing):
        return rng.choice(values)
    return rng.choice(missing)


def _attribute_draft(rng: random.Random, ref: _Ref, key: str) -> _Draft:
    """A question on one fact: its value, yes/no on a flag, membership in a list, or a threshold."""
    product = ref.product
    value = product.item.attributes[key]
    v = render_fact(key, value)
    probe: str | int | None = None
    if isinstance(value, bool):
        index, template = _pick(rng, BOOL_Q[key], ref)
        qtype, answer = "bool", BOOL_A[key][0 if value else 1]
    elif isinstance(value, list) and key in MEMBER_Q and rng.random() < 0.5:
        index, template = _pick(rng, MEMBER_Q[key], ref)
        probe = _probe(rng, value, product.specs[key].values)
        qtype, answer = "member", MEMBER_A[key][0 if probe in value else 1].format(v=v, probe=probe)
    elif isinstance(value, int) and key in THRESHOLDS and rng.random() < 0.4:
        rule = THRESHOLDS[key]
        index, template = _pick(rng, rule.questions, ref)
        spread = max(2, value // 3)
        probe = max(1, value + rng.randint(-spread, spread))
        yes = value <= probe if rule.yes_when == "le" else value >= probe
        qtype, answer = "threshold", rule.answers[0 if yes else 1].format(v=v, n=value)
    else:
        index, template = _pick(rng, VALUE_Q[key], ref)
        qtype, answer = "value", rng.choice(VALUE_A[key]).format(v=v, n=value)
    text = _say(rng, template, ref=ref.text, probe=probe, x=probe)
    return _Draft("question", text, answer, [_fact(product, key)], template=f"{qtype}:{key}:{index}", probe=probe)


def _question_draft(rng: random.Random, ref: _Ref) -> _Draft:
    key = _pick_key(rng, ref)
    draft = _price_or_stock_draft(rng, ref, key) if key in SPECIAL_FACTS else _attribute_draft(rng, ref, key)
    draft.item_ids = [ref.product.item.item_id]
    draft.reference = ref.kind
    return draft


def _compare_value(product: _Product, key: str) -> int | float:
    value = product.item.price if key == "price" else product.item.attributes[key]
    assert isinstance(value, int | float) and not isinstance(value, bool), f"{key} is not a number"
    return value


def _comparison_draft(
    rng: random.Random, stream: Stream, ts: int, products: dict[str, _Product], first: _Ref
) -> _Draft:
    """Which of two products on the stream wins on price, shipping, discount, warranty, battery, …"""
    a = first.product
    others = [i for i in stream.shown_by(ts) if i != a.item.item_id]
    others = others or [i for i in stream.item_ids if i != a.item.item_id]
    b = products[rng.choice(others)]
    leaves = [products[i].leaf for i in stream.item_ids]
    b_text = _ordinal(rng, stream, b) if rng.random() < 0.3 else _named(rng, b, leaves)
    a_text = first.text
    if first.kind == "this_one":
        a_text = rng.choice(THIS_ONE_CMP_REFS).format(leaf=a.leaf, this=a.this)
    keys = [k for k in COMPARISONS if k == "price" or (k in a.item.attributes and k in b.item.attributes)]
    key = rng.choices(keys, weights=[4.0 if k == "price" else 1.0 for k in keys])[0]
    rule = COMPARISONS[key]
    index = rng.randrange(len(rule.questions))
    va, vb = _compare_value(a, key), _compare_value(b, key)
    if va == vb:
        answer = rule.tie.format(v=render_fact(key, va))
    else:
        a_wins = (va < vb) == (rule.wins == "lower")
        winner = a if a_wins else b
        vw, vl = (va, vb) if a_wins else (vb, va)
        verb = rule.verb[1 if winner.plural else 0]
        answer = f"The {winner.short} {verb}: {render_fact(key, vw)} vs {render_fact(key, vl)}."
    text = _say(rng, rule.questions[index], a=a_text, b=b_text)
    return _Draft(
        "comparison", text, answer, [_fact(a, key), _fact(b, key)], [a.item.item_id, b.item.item_id],
        template=f"comparison:{key}:{index}", reference=first.kind,
    )


def _unanswerable_draft(rng: random.Random, ref: _Ref) -> _Draft:
    """About the product, but its fact sheet does not say: a fact its category has elsewhere, or beyond any."""
    attrs = ref.product.item.attributes
    absent = [k for k in TOP_KEYS[ref.product.top] + ["warranty_months"] if k not in attrs]
    absent = [k for k in dict.fromkeys(absent) if k in VALUE_Q or k in BOOL_Q]
    if absent and rng.random() < 0.6:
        key = rng.choice(absent)
        index, template = _pick(rng, VALUE_Q.get(key) or BOOL_Q[key], ref)
        name = f"unanswerable:{key}:{index}"
    else:
        index, template = _pick(rng, UNANSWERABLE_Q, ref)
        name = f"unanswerable:generic:{index}"
    text = _say(rng, template, ref=ref.text)
    return _Draft("unanswerable", text, "", [], [ref.product.item.item_id], template=name, reference=ref.kind)


def _off_topic_draft(rng: random.Random, stream: Stream) -> _Draft:
    index = rng.randrange(len(OFF_TOPIC_Q))
    text = _say(rng, OFF_TOPIC_Q[index], host=stream.host)
    return _Draft("off_topic", text, "", template=f"off_topic:generic:{index}")


def _make_draft(
    rng: random.Random, kind: str, stream: Stream, ts: int, products: dict[str, _Product], this_one_share: float
) -> _Draft:
    """One viewer question of ``kind`` asked ``ts`` seconds into ``stream``."""
    if kind == "off_topic":
        return _off_topic_draft(rng, stream)
    ref = _reference(rng, stream, ts, products, this_one_share)
    if kind == "question":
        return _question_draft(rng, ref)
    if kind == "comparison":
        return _comparison_draft(rng, stream, ts, products, ref)
    if kind == "unanswerable":
        return _unanswerable_draft(rng, ref)
    raise ValueError(f"unknown task kind {kind!r} (expected one of {TASK_KINDS})")


# --------------------------------------------------------------------------------------------------
# Viewers, questions and sessions
# --------------------------------------------------------------------------------------------------


@dataclass
class _Asked:
    """A question in context: who asked it (attendance index), on which stream, when."""

    attendance: int
    stream: Stream
    ts: int
    draft: _Draft
    task_id: str = ""


def _attendance(rng: random.Random, viewers: int, n_streams: int) -> tuple[list[tuple[int, int]], list[float]]:
    """(viewer, stream) pairs, each a session, and a weight per pair for how much chat it carries."""
    popularity = [rng.lognormvariate(0, 0.8) for _ in range(n_streams)]
    cumulative = list(itertools.accumulate(popularity))
    chattiness = [rng.lognormvariate(0, 1.0) for _ in range(viewers)]
    pairs: list[tuple[int, int]] = []
    for viewer in range(viewers):
        wanted = 1
        while wanted < min(n_streams, 6) and rng.random() < 0.55:
            wanted += 1
        watched: list[int] = []
        while len(watched) < wanted:
            s = bisect.bisect_right(cumulative, rng.random() * cumulative[-1])
            s = min(s, n_streams - 1)
            if s not in watched:
                watched.append(s)
        pairs.extend((viewer, s) for s in sorted(watched))
    covered = {s for _, s in pairs}
    pairs.extend((rng.randrange(viewers), s) for s in range(n_streams) if s not in covered)
    weights = [chattiness[v] * popularity[s] for v, s in pairs]
    return pairs, weights


def _kinds(rng: random.Random, config: LivestreamWorldConfig) -> list[str]:
    """Exactly round(fraction * questions) of each kind, shuffled."""
    n = config.questions
    counts = {
        "unanswerable": round(n * config.unanswerable_fraction),
        "off_topic": round(n * config.off_topic_fraction),
        "comparison": round(n * config.comparison_fraction),
    }
    counts["question"] = n - sum(counts.values())
    kinds = [k for k in TASK_KINDS for _ in range(max(0, counts[k]))][:n]
    rng.shuffle(kinds)
    return kinds


def _ask_questions(
    config: LivestreamWorldConfig, streams: list[Stream], products: dict[str, _Product],
    pairs: list[tuple[int, int]], weights: list[float],
) -> list[_Asked]:
    """All viewer questions in time order, with task ids ``ls-q-000001``…"""
    rng = random.Random(f"livestream:{config.seed}:questions")
    kinds = _kinds(rng, config)
    chosen = rng.choices(range(len(pairs)), cum_weights=list(itertools.accumulate(weights)), k=len(kinds))
    asked: list[_Asked] = []
    for kind, pair in zip(kinds, chosen, strict=True):
        stream = streams[pairs[pair][1]]
        if kind == "off_topic":
            ts = rng.randrange(stream.duration_s)
        else:
            ts = rng.randrange(stream.windows[0][0], stream.windows[-1][1])
        draft = _make_draft(rng, kind, stream, ts, products, config.this_one_fraction)
        asked.append(_Asked(pair, stream, ts, draft))
    asked.sort(key=lambda a: a.stream.start_ts + a.ts)  # stable: ties keep generation order
    for number, a in enumerate(asked, start=1):
        a.task_id = f"ls-q-{number:06d}"
    return asked


def _session_id(attendance: int) -> str:
    return f"ls-sess-{attendance:06d}"


def _to_task(a: _Asked) -> Task:
    """The task record for one asked question (constraints and meta as documented at the top)."""
    d = a.draft
    meta: dict[str, Any] = {"template": d.template, "reference": d.reference, "session_id": _session_id(a.attendance)}
    if d.probe is not None:
        meta["probe"] = d.probe
    return Task(
        task_id=a.task_id, app="livestream", kind=d.kind, messages=[Message(role="user", content=d.text)],
        constraints={
            "stream_id": a.stream.stream_id, "item_id": d.item_ids[0] if d.item_ids else None,
            "item_ids": d.item_ids, "ts_offset_s": a.ts,
        },
        answer=d.answer, facts=d.facts, meta=meta,
    )


def _session_events(
    rng: random.Random, stream: Stream, join: int, leave: int, interested: set[str], order_prefix: str
) -> list[Event]:
    """Views of what was on screen while watching; clicks, carts and purchases, likelier if asked about."""
    events: list[Event] = []
    orders = 0
    for item_id, (start, end) in zip(stream.item_ids, stream.windows, strict=True):
        if end <= join or start >= leave:
            continue
        t = max(start, join)
        asked = item_id in interested
        events.append(Event(type="view", ts=float(stream.start_ts + t), item_id=item_id))
        for event_type, p_asked, p_other in (("click", 0.7, 0.2), ("cart", 0.5, 0.25), ("purchase", 0.5, 0.5)):
            if rng.random() >= (p_asked if asked else p_other):
                break
            t = min(leave, t + rng.randint(2, 60))
            order_id = None
            if event_type == "purchase":
                orders += 1
                order_id = f"{order_prefix}-{orders}"
            events.append(Event(type=event_type, ts=float(stream.start_ts + t), item_id=item_id, order_id=order_id))
    events.sort(key=lambda e: e.ts)
    return events


def _session(rng: random.Random, index: int, viewer: int, stream: Stream, asked: list[_Asked]) -> Session:
    """One viewer watching one stream: when they joined and left, what they typed, what they did."""
    if asked:
        join = max(0, min(a.ts for a in asked) - rng.randint(0, 900))
        leave = min(stream.duration_s, max(a.ts for a in asked) + rng.randint(5, 900))
    else:
        join = rng.randrange(max(1, stream.duration_s - 60))
        leave = min(stream.duration_s, join + rng.randint(60, stream.duration_s))
    turns = [Turn(role="user", text=a.draft.text, ts=float(stream.start_ts + a.ts)) for a in asked]
    for _ in range(rng.choices((0, 1, 2), weights=(6, 3, 1))[0]):
        text = rng.choice(CHATTER).format(city=rng.choice(CITIES), host=stream.host)
        turns.append(Turn(role="user", text=text, ts=float(stream.start_ts + rng.randint(join, leave))))
    turns.sort(key=lambda t: t.ts)
    interested = {i for a in asked for i in a.draft.item_ids}
    events = _session_events(rng, stream, join, leave, interested, f"order-{index:06d}")
    return Session(
        session_id=_session_id(index), user_id=f"viewer-{viewer:05d}", app="livestream",
        started_at=float(stream.start_ts + join), turns=turns, events=events,
        task_id=asked[0].task_id if asked else None,
    )


def _build_sessions(
    config: LivestreamWorldConfig, streams: list[Stream], pairs: list[tuple[int, int]], asked: list[_Asked]
) -> list[Session]:
    """One session per (viewer, stream) pair, in order of when it started."""
    rng = random.Random(f"livestream:{config.seed}:sessions")
    by_pair: dict[int, list[_Asked]] = {}
    for a in asked:  # already in time order
        by_pair.setdefault(a.attendance, []).append(a)
    sessions = [
        _session(rng, index, viewer, streams[s], by_pair.get(index, [])) for index, (viewer, s) in enumerate(pairs)
    ]
    sessions.sort(key=lambda x: (x.started_at, x.session_id))
    return sessions


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------


def _write(path: Path, model: type[BaseModel], records: Sequence[BaseModel], progress: Progress | None) -> int:
    with RecordWriter(path, model) as writer:
        for start in range(0, len(records), _WRITE_CHUNK):
            chunk = records[start : start + _WRITE_CHUNK]
            writer.write_many(chunk)
            if progress is not None:
                progress(len(chunk))
    return writer.count


def generate_livestream_world(
    config: LivestreamWorldConfig, out: Path, progress: Progress | None = None
) -> dict[str, Any]:
    """Write catalog, streams, tasks and logs into ``out`` and its manifest; return the counts."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    streams, products = _build_streams(config)
    pairs, weights = _attendance(random.Random(f"livestream:{config.seed}:viewers"), config.viewers, len(streams))
    asked = _ask_questions(config, streams, products, pairs, weights)
    tasks = [_to_task(a) for a in asked]
    sessions = _build_sessions(config, streams, pairs, asked)
    counts: dict[str, Any] = {
        "items": _write(out / CATALOG_FILE, Item, [p.item for p in products.values()], progress),
        "streams": _write(out / STREAMS_FILE, Stream, streams, progress),
        "tasks": _write(out / TASKS_FILE, Task, tasks, progress),
        "sessions": _write(out / LOGS_FILE, Session, sessions, progress),
        "tasks_by_kind": {kind: sum(t.kind == kind for t in tasks) for kind in TASK_KINDS},
    }
    finish_world(out, "livestream", config, counts)
    return counts
