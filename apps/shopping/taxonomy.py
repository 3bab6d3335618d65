"""The shopping world's 3-level taxonomy, facets and vocabulary (data, not logic).

Each leaf is ``"noun|synonym|…"``: titles pick among the synonyms so the same kind of product is
listed under several names. Each top category has a facet profile: size system, materials,
features, and a price band (median USD, spread as a log-normal sigma).
"""

from __future__ import annotations

from dataclasses import dataclass

TAXONOMY: dict[str, dict[str, list[str]]] = {
    "Outdoor": {
        "Footwear": ["hiking boots|trekking boots|trail boots", "trail runners|trail running shoes",
                     "hiking sandals|sport sandals", "mountaineering boots|alpine boots"],
        "Camping": ["tent|backpacking tent|camping tent", "sleeping bag|sleep bag", "sleeping pad|camping mat",
                    "camp stove|backpacking stove", "lantern|camp lantern", "camp chair|folding chair"],
        "Packs": ["daypack|hiking backpack", "trekking pack|backpacking pack", "hydration pack"],
        "Clothing": ["rain jacket|waterproof jacket|shell jacket", "fleece jacket|fleece",
                     "hiking pants|trekking trousers", "base layer|thermal top"],
    },
    "Electronics": {
        "Audio": ["headphones|over-ear headphones", "earbuds|wireless earbuds|in-ear buds",
                  "bluetooth speaker|portable speaker", "soundbar"],
        "Computers": ["laptop|notebook", "monitor|display", "keyboard|mechanical keyboard",
                      "mouse|wireless mouse", "webcam|web camera"],
        "Phones": ["smartphone|mobile phone", "phone case|phone cover", "charger|fast charger|usb-c charger",
                   "power bank|portable battery"],
        "Cameras": ["mirrorless camera", "action camera", "tripod", "camera bag"],
    },
    "Home": {
        "Furniture": ["office chair|desk chair", "standing desk|sit-stand desk", "bookshelf|bookcase",
                      "sofa|couch", "bed frame"],
        "Decor": ["table lamp|desk lamp", "rug|area rug", "wall clock", "picture frame|photo frame"],
        "Bedding": ["duvet|comforter", "pillow|bed pillow", "sheet set|bed sheets", "blanket|throw"],
        "Storage": ["storage box|storage bin", "shoe rack", "laundry basket|laundry hamper"],
    },
    "Kitchen": {
        "Cookware": ["frying pan|skillet", "saucepan|sauce pot", "dutch oven|casserole pot", "wok"],
        "Appliances": ["blender", "coffee maker|coffee machine", "kettle|electric kettle", "toaster",
                       "air fryer"],
        "Tableware": ["dinner plates|plate set", "mugs|coffee mugs", "glasses|drinking glasses",
                      "cutlery set|flatware set"],
        "Tools": ["chef knife|kitchen knife", "cutting board|chopping board", "measuring cups",
                  "kitchen scale|food scale"],
    },
    "Fashion": {
        "Tops": ["t-shirt|tee", "shirt|button-down shirt", "sweater|jumper|pullover", "hoodie|hooded sweatshirt"],
        "Bottoms": ["jeans|denim jeans", "chinos|chino pants", "skirt", "shorts"],
        "Outerwear": ["winter coat|parka", "denim jacket", "blazer", "puffer jacket|down jacket"],
        "Shoes": ["sneakers|trainers", "boots|ankle boots", "loafers", "sandals"],
    },
    "Sports": {
        "Running": ["running shoes|road running shoes", "running shorts", "running watch|gps watch",
                    "running vest|hydration vest"],
        "Fitness": ["yoga mat|exercise mat", "dumbbells|dumbbell set", "resistance bands", "kettlebell",
                    "foam roller"],
        "Cycling": ["bike helmet|cycling helmet", "bike light|cycling light", "cycling gloves", "bike lock"],
        "Team sports": ["football|soccer ball", "basketball", "tennis racket", "shin guards"],
    },
    "Beauty": {
        "Skincare": ["moisturizer|moisturiser|face cream", "serum|face serum", "sunscreen|sunblock",
                     "cleanser|face wash"],
        "Haircare": ["shampoo", "conditioner", "hair dryer|blow dryer", "hair straightener|flat iron"],
        "Makeup": ["lipstick", "foundation", "mascara", "eyeshadow palette"],
        "Fragrance": ["perfume|eau de parfum", "cologne|eau de toilette", "body mist"],
    },
    "Baby": {
        "Gear": ["stroller|pushchair|buggy", "car seat|infant car seat", "baby carrier|baby sling",
                 "high chair"],
        "Nursery": ["crib|cot", "baby monitor", "changing table", "crib mattress"],
        "Feeding": ["baby bottles|feeding bottles", "bottle sterilizer", "breast pump", "bibs"],
        "Clothing": ["baby bodysuit|onesie", "sleep sack|baby sleeping bag", "baby socks"],
    },
    "Toys": {
        "Building": ["building blocks|brick set", "magnetic tiles", "marble run"],
        "Games": ["board game", "card game", "jigsaw puzzle|puzzle"],
        "Outdoor toys": ["scooter|kick scooter", "balance bike", "water gun|water blaster", "kite"],
        "Learning": ["science kit|stem kit", "coding robot", "kids microscope"],
    },
    "Books": {
        "Fiction": ["novel|paperback novel", "mystery novel|crime novel", "fantasy novel", "sci-fi novel"],
        "Non-fiction": ["cookbook|recipe book", "travel guide|guidebook", "biography", "history book"],
        "Kids": ["picture book", "early reader", "activity book"],
    },
    "Garden": {
        "Tools": ["pruning shears|secateurs", "garden hose|hose", "rake", "shovel|spade"],
        "Plants": ["seed kit|seeds", "planter|plant pot", "potting soil|compost"],
        "Furniture": ["patio chair|garden chair", "patio table|garden table", "hammock", "parasol|patio umbrella"],
        "Grilling": ["charcoal grill|bbq grill", "gas grill", "grill tools|bbq tools"],
    },
    "Pets": {
        "Dogs": ["dog bed", "dog leash|dog lead", "dog collar", "dog toy|chew toy", "dog food|kibble"],
        "Cats": ["cat tree|cat tower", "litter box|litter tray", "cat toy", "cat food"],
        "Small pets": ["hamster cage", "aquarium|fish tank", "bird cage"],
    },
    "Office": {
        "Supplies": ["notebook|notepad", "pens|ballpoint pens", "stapler", "desk organizer|desk tidy"],
        "Tech": ["printer", "label maker", "paper shredder"],
        "Bags": ["laptop bag|laptop sleeve", "briefcase", "messenger bag"],
    },
    "Travel": {
        "Luggage": ["carry-on suitcase|cabin bag|carry-on", "checked suitcase|large suitcase",
                    "duffel bag|holdall", "garment bag"],
        "Accessories": ["travel pillow|neck pillow", "packing cubes", "travel adapter|plug adapter",
                        "luggage tag", "toiletry bag|wash bag"],
    },
    "Grocery": {
        "Coffee & tea": ["coffee beans|whole bean coffee", "ground coffee", "green tea", "herbal tea"],
        "Snacks": ["trail mix", "protein bar|energy bar", "dark chocolate|chocolate bar", "crackers"],
        "Pantry": ["olive oil|extra virgin olive oil", "pasta|spaghetti", "rice|basmati rice", "honey"],
    },
}


@dataclass(frozen=True)
class FacetProfile:
    """Which facets a top category's items carry and the price band of its leaves."""

    sizes: tuple[str, ...]
    materials: tuple[str, ...]
    features: tuple[str, ...]
    price_median: float
    price_sigma: float = 0.5


SHOE_SIZES = tuple(str(s) for s in range(36, 47))
APPAREL_SIZES = ("XS", "S", "M", "L", "XL", "XXL")

PROFILES: dict[str, FacetProfile] = {
    "Outdoor": FacetProfile(SHOE_SIZES, ("nylon", "polyester", "leather", "gore-tex", "merino wool", "aluminium"),
                            ("waterproof", "lightweight", "insulated", "breathable", "packable", "windproof"), 90),
    "Electronics": FacetProfile((), ("plastic", "aluminium", "glass", "silicone"),
                                ("wireless", "noise cancelling", "fast charging", "water resistant", "bluetooth 5.3",
                                 "4k"), 120, 0.7),
    "Home": FacetProfile((), ("oak", "pine", "steel", "cotton", "linen", "velvet", "bamboo"),
                         ("easy assembly", "foldable", "machine washable", "hypoallergenic", "stackable"), 110, 0.7),
    "Kitchen": FacetProfile((), ("stainless steel", "cast iron", "ceramic", "glass", "bamboo", "non-stick aluminium"),
                            ("dishwasher safe", "induction ready", "bpa free", "oven safe", "programmable"), 45),
    "Fashion": FacetProfile(APPAREL_SIZES, ("cotton", "organic cotton", "wool", "denim", "linen", "polyester",
                                            "leather"),
                            ("slim fit", "relaxed fit", "stretch", "recycled", "water repellent"), 55),
    "Sports": FacetProfile(APPAREL_SIZES, ("polyester", "rubber", "neoprene", "steel", "foam", "carbon"),
                           ("lightweight", "breathable", "reflective", "adjustable", "non-slip"), 40, 0.6),
    "Beauty": FacetProfile((), ("natural", "vegan", "mineral", "organic"),
                           ("fragrance free", "spf 50", "cruelty free", "for sensitive skin", "long lasting"), 25),
    "Baby": FacetProfile(("0-3m", "3-6m", "6-12m", "12-24m"), ("cotton", "organic cotton", "plastic", "wood",
                                                                "aluminium"),
                         ("bpa free", "foldable", "lightweight", "machine washable", "adjustable"), 70, 0.7),
    "Toys": FacetProfile((), ("wood", "plastic", "cardboard", "fabric"),
                         ("ages 3+", "ages 8+", "educational", "battery free", "two player"), 30),
    "Books": FacetProfile((), ("paperback", "hardcover"), ("illustrated", "bestseller", "large print",
                                                           "signed edition"), 16, 0.3),
    "Garden": FacetProfile((), ("steel", "aluminium", "teak", "resin", "rubber"),
                           ("weatherproof", "foldable", "rust resistant", "uv resistant", "ergonomic"), 60, 0.7),
    "Pets": FacetProfile(("S", "M", "L"), ("nylon", "plush", "rubber", "sisal", "glass"),
                         ("chew resistant", "machine washable", "grain free", "orthopedic", "reflective"), 30, 0.6),
    "Office": FacetProfile((), ("paper", "plastic", "steel", "leather", "canvas"),
                           ("refillable", "recycled", "wireless", "compact", "water resistant"), 25, 0.8),
    "Travel": FacetProfile(("cabin", "medium", "large"), ("polycarbonate", "nylon", "aluminium", "canvas"),
                           ("tsa lock", "expandable", "lightweight", "spinner wheels", "water resistant"), 70, 0.6),
    "Grocery": FacetProfile(("250g", "500g", "1kg"), ("organic", "fair trade", "conventional"),
                            ("gluten free", "vegan", "no added sugar", "single origin", "decaf"), 9, 0.5),
}

BRANDS: tuple[str, ...] = (
    "Northpeak", "Altura", "Brightline", "Cobalt & Co", "Driftwood", "Evergrain", "Fjordic", "Granite Labs",
    "Halcyon", "Ironbark", "Juniper", "Kestrel", "Lumen", "Meridian", "Nimbus", "Oakhaven", "Pinecrest",
    "Quillon", "Redfern", "Solstice", "Tidewater", "Umbra", "Vantage", "Willow & Stone", "Xenith", "Yarrow",
    "Zephyr", "Aurora Home", "Basalt", "Cinder", "Dune", "Ember", "Foxglove", "Glacier", "Harbor", "Indigo Road",
    "Jasper", "Kinfolk", "Larkspur", "Mosswood", "Nova", "Orchard", "Pebble", "Quarry", "Riverbend", "Summit",
    "Trailhead", "Upland", "Verdant", "Wildwood",
)

COLOURS: tuple[str, ...] = (
    "black", "white", "grey", "navy", "blue", "red", "green", "olive", "beige", "brown", "pink", "yellow",
    "orange", "purple", "teal", "charcoal",
)
COLOUR_SYNONYMS: dict[str, str] = {"grey": "gray", "navy": "navy blue", "beige": "sand", "charcoal": "graphite"}

SELLERS: tuple[str, ...] = (
    "official store", "MegaMart", "ShopRight", "Bargain Bay", "TrendHub", "PrimeGoods", "CityOutlet",
    "DealDock", "UrbanCart", "GreenLeaf Supply",
)

ADJECTIVES: tuple[str, ...] = ("classic", "premium", "essential", "pro", "everyday", "ultra", "compact", "deluxe",
                               "sport", "signature")

BUNDLES: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    # name: (request phrasing, [(top, mid, leaf noun), …])
    "camping": ("everything for a first camping trip", [
        ("Outdoor", "Camping", "tent"), ("Outdoor", "Camping", "sleeping bag"),
        ("Outdoor", "Camping", "sleeping pad"), ("Outdoor", "Camping", "camp stove"),
        ("Outdoor", "Camping", "lantern")]),
    "home_office": ("a home office setup", [
        ("Home", "Furniture", "standing desk"), ("Home", "Furniture", "office chair"),
        ("Electronics", "Computers", "monitor"), ("Electronics", "Computers", "keyboard"),
        ("Electronics", "Computers", "webcam")]),
    "new_baby": ("the essentials for a newborn", [
        ("Baby", "Gear", "stroller"), ("Baby", "Gear", "car seat"), ("Baby", "Nursery", "crib"),
        ("Baby", "Feeding", "baby bottles"), ("Baby", "Nursery", "baby monitor")]),
    "first_kitchen": ("a starter kit for my first kitchen", [
        ("Kitchen", "Cookware", "frying pan"), ("Kitchen", "Cookware", "saucepan"),
        ("Kitchen", "Tools", "chef knife"), ("Kitchen", "Tools", "cutting board"),
        ("Kitchen", "Appliances", "kettle")]),
    "running": ("gear to start running", [
        ("Sports", "Running", "running shoes"), ("Sports", "Running", "running shorts"),
        ("Sports", "Running", "running watch")]),
    "travel": ("what I need for a long trip abroad", [
        ("Travel", "Luggage", "carry-on suitcase"), ("Travel", "Accessories", "travel pillow"),
        ("Travel", "Accessories", "packing cubes"), ("Travel", "Accessories", "travel adapter")]),
    "home_gym": ("a small home gym", [
        ("Sports", "Fitness", "yoga mat"), ("Sports", "Fitness", "dumbbells"),
        ("Sports", "Fitness", "resistance bands"), ("Sports", "Fitness", "foam roller")]),
    "barbecue": ("everything for a backyard barbecue", [
        ("Garden", "Grilling", "charcoal grill"), ("Garden", "Grilling", "grill tools"),
        ("Garden", "Furniture", "patio table"), ("Garden", "Furniture", "patio chair")]),
    "new_puppy": ("stuff for our new puppy", [
        ("Pets", "Dogs", "dog bed"), ("Pets", "Dogs", "dog leash"), ("Pets", "Dogs", "dog collar"),
        ("Pets", "Dogs", "dog toy"), ("Pets", "Dogs", "dog food")]),
    "skincare": ("a simple skincare routine", [
        ("Beauty", "Skincare", "cleanser"), ("Beauty", "Skincare", "serum"),
        ("Beauty", "Skincare", "moisturizer"), ("Beauty", "Skincare", "sunscreen")]),
}

VAGUE_PHRASES: dict[str, list[str]] = {
    # top category -> vague requests that only pin down the top (or mid) level
    "Outdoor": ["something for hiking", "gear for the mountains", "outdoor stuff for the weekend"],
    "Electronics": ["a nice gadget", "some tech for working from home", "something to listen to music"],
    "Home": ["something to make my flat cosier", "stuff for my new apartment"],
    "Kitchen": ["something for cooking", "a kitchen upgrade"],
    "Fashion": ["something to wear this autumn", "a new outfit piece"],
    "Sports": ["something to get fit", "workout gear"],
    "Beauty": ["a self-care treat", "something for my skin"],
    "Baby": ["a gift for a baby shower", "something for my baby"],
    "Toys": ["a present for a 7 year old", "a fun toy for kids"],
    "Books": ["a good read for the holidays", "a book as a gift"],
    "Garden": ["something for the garden", "stuff for the patio"],
    "Pets": ["something for my pet", "a treat for my dog or cat"],
    "Office": ["stuff for my desk", "office supplies"],
    "Travel": ["something for travelling", "travel gear"],
    "Grocery": ["something tasty for the pantry", "a snack box"],
}

# Facets that differ from the top category's profile for some mid categories (a tent has no shoe size).
SIZE_OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = {
    ("Outdoor", "Camping"): (),
    ("Outdoor", "Packs"): ("20L", "30L", "45L", "65L"),
    ("Outdoor", "Clothing"): APPAREL_SIZES,
    ("Fashion", "Shoes"): SHOE_SIZES,
    ("Sports", "Fitness"): (),
    ("Sports", "Cycling"): ("S", "M", "L"),
    ("Sports", "Team sports"): ("3", "4", "5"),
    ("Baby", "Gear"): (),
    ("Baby", "Nursery"): (),
    ("Baby", "Feeding"): (),
    ("Pets", "Cats"): (),
    ("Pets", "Small pets"): (),
    ("Travel", "Accessories"): (),
}
MATERIAL_OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = {
    ("Garden", "Plants"): ("terracotta", "plastic", "organic", "peat-free"),
    ("Garden", "Grilling"): ("stainless steel", "cast iron", "steel"),
    ("Kitchen", "Appliances"): ("stainless steel", "plastic", "glass", "brushed aluminium"),
    ("Office", "Supplies"): ("paper", "recycled paper", "plastic", "steel"),
    ("Electronics", "Phones"): ("plastic", "aluminium", "glass", "silicone", "leather"),
    ("Beauty", "Haircare"): ("natural", "vegan", "ceramic", "tourmaline"),
}
