"""Livestream vocabulary: the taxonomy, brands, fact-sheet specs and viewer question/answer templates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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
# world.render_fact), ``{n}`` (the raw value) and ``{probe}`` / ``{x}`` (what the viewer asked about).
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
