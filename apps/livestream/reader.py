"""The livestream reader: what a viewer's question asks, about which product — without a model.

It is the app's fallback (what a viewer gets when the model is out of budget or absent) and the teacher
whose answers the SFT data holds. A question is read in three steps:

1. **Which product.** Named ones — brand and noun ("the Voltix earbuds", "los earbuds de Voltix"), the brand
   or the noun alone when it is unique on the stream, an ordinal in show order ("the 2nd one", "el
   segundo", "das dritte", "le 4e", "#3"), a relative reference ("the one before this", "el anterior",
   "das davor", "celui d'avant": the product shown before the one on screen) — else the product on
   screen (or the request's ``item_id``). Two products and a comparison word make a comparison.
2. **Which fact.** Cue words per fact in English, Spanish, German and French (``_CUES``; the first rule
   that matches decides, specific facts before generic ones such as "how much" / "cuánto"); accents are
   folded, repeated letters squeezed, and every word of five or more letters also stands with two letters
   swapped (viewers type fast). A value of a list fact ("pink", "size M", "shea butter") makes a yes/no
   question about that list. Cues for what no fact sheet has (restock dates, gift wrap…) and chit-chat
   ("your favourite…") make "not sure" answers.
3. **The answer**, rendered from the fact sheet (:mod:`apps.livestream.vocab`'s answer templates): it
   cites exactly the facts it states, so it invents nothing.

``Reader(languages=("en",), relative=False, plain=True)`` is the English-keyword reader the app had before (the
baseline of ``bench/livestream.py``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from apps.livestream.world import (
    ALLERGENS,
    BEAUTY_INGREDIENTS,
    BOOL_A,
    CLOTHING_SIZES,
    COMPARISONS,
    DRINK_INGREDIENTS,
    EU_SHOE_SIZES,
    HAIR_TYPES,
    MEMBER_A,
    ORDINALS,
    PALETTE,
    PRICE_A,
    RING_SIZES,
    SAVOURY_INGREDIENTS,
    SHADES,
    SKIN_TYPES,
    SPECIAL_FACTS,
    STOCK_A,
    STOCK_SOLD_OUT_A,
    SWEET_INGREDIENTS,
    THRESHOLDS,
    VALUE_A,
    Stream,
    render_fact,
)
from harness.agent import Final, TurnContext
from harness.catalog import AttributeValue, Catalog, Item

LANGUAGES = ("en", "es", "de", "fr")

# Every rule: (fact keys in order of preference, {language: pattern}). Patterns see folded text (lower case, no
# accents, ß -> ss). () = something no fact sheet has: the answer is "not sure".
_Rule = tuple[tuple[str, ...], dict[str, str]]
_NEVER_ON_SHEET: _Rule = ((), {
    "en": r"restock|back in stock|recycl|gift|what year|came out|release[ds]? |in stores?\b|\bshops?\b|"
          r"fair ?trade|free sample|samples?\b|(?:have you|did you) sold|sold today|how many (?:have )?sold|"
          r"black friday|cyber monday|next .{0,12}sale|go(?:ing)? (?:on sale|cheaper)|bundle|design(?:ed|er)|packag|"
          r"\bwrap|warehouse|when .{0,20}(?:back|again)\b|(?:be|get) (?:any )?cheaper|in the \w+ sales?\b|"
          r"when .{0,25}(?:getting|get|have) (?:more|new|some more)\b|more coming",
    "es": r"repon|reposicion|vuelve[n]? a (?:haber|estar|tener)|cuando vuelve|regalo|envolver|reciclab|tiendas?\b|"
          r"muestras? (?:gratis|de regalo)|\bmuestritas?\b|"
          r"disen|empaque|paquete|embalaje|black friday|cuantos? (?:han )?vendid|comercio justo|mas barato (?:en|el)|"
          r"proxim[oa]s? (?:oferta|rebaja|descuento|venta)",
    "de": r"nachschub|wieder (?:da|verfugbar|auf lager|lieferbar|rein)|geschenk|verpack|recycel|im laden|geschaft|"
          r"proben?\b|designer|entworfen|bundle|black friday|\bverkauft|fair ?trade|billiger (?:am|im|zum)|"
          r"nachste[nrs]? (?:sale|angebot|rabatt|aktion)",
    "fr": r"reassort|de retour|cadeau|emball|recycl|magasin|boutique|echantillon|concu|designer|black friday|"
          r"vendus?\b|commerce equitable|moins cher (?:au (?!final|total|bout)|le |pour )|prochaine?s? (?:promo|solde)|"
          r"revien(?!t a\b|nent a\b)|de nouveau",
})
_OFF_TOPIC: dict[str, str] = {
    "en": r"\byour (?:favou?rite|cat|dog|name|zodiac|age|camera|lunch|sister|mom|setup)|\bfavou?rite\b|"
          r"\bhow old are you|\bwhere are (?:you|u)\b|\bweather\b|\braining\b|what time is it|\bsong\b|\bmusic\b|"
          r"what time .{0,40}(?:finish|end|start)|\b(?:programme|stream|show|live) (?:finish|end|start)",
    "es": r"\beres\b|\bfavorit[oa]|\btu (?:gato|perro|nombre|signo|edad|camara)|\bcuantos anos tienes|\bde donde eres|"
          r"\bclima\b|\bllov|que hora es|donde estas|cancion|\bmusica\b",
    "de": r"\bbist du\b|\blieblings|\bdein(?:e|en)? (?:katze|hund|name|sternzeichen|kamera)|\bwie alt bist du|"
          r"\bwoher kommst|"
          r"\bwetter\b|\bregnet|wie spat|wo bist du|\blied\b|\bmusik\b",
    "fr": r"\bes-tu\b|\btu es\b|\bprefere|\bton (?:chat|chien|nom|signe|age)|\bta (?:camera)|\bquel age as-tu|"
          r"\btu viens d'ou|"
          r"\bmeteo\b|\bpleut|quelle heure|ou es-tu|t'es ou|\ble son\b|musique|chanson",
}
_CUES: tuple[_Rule, ...] = (
    _NEVER_ON_SHEET,
    (("discount_percent",), {
        "en": r"discount|how much off|% off|percent(?:age)? off|percentage|more off|sale on\b|how big is the sale|"
              r"markdown|\bsav(?:e|ing)s? (?:on|with)\b|how much (?:do|would|will|can) (?:i|you|we) save|reduced|"
              r"knock(?:ed)? off|money off|off the (?:price|rrp)",
        "es": r"descuento|rebaja|cuanto (?:me )?ahorr|% menos",
        "de": r"rabatt|reduziert|ersparnis|prozent|wie viel (?:spare|sparst)|% weniger",
        "fr": r"remise|reduction|\breduc|rabais|pourcentage|combien (?:j'economise|on economise)|% de moins"}),
    (("weight_g",), {
        "en": r"heav|weigh|lighter|\bgrams?\b|\bkgs?\b|\blbs?\b",
        "es": r"\bpesa|\bpeso\b|pesad|\blivian|\bliger|gramos|kilos",
        "de": r"wiegt|gewicht|\bschwer|\bleicht|gramm|\bkilo",
        "fr": r"\bpese|\bpoids\b|lourd|leger|grammes|\bkilo"}),
    (("capacity_mah",), {
        "en": r"\bmah\b|how big is the battery|battery capacity|battery size",
        "es": r"capacidad de (?:la )?bateria|\bmah\b",
        "de": r"akkukapazitat|kapazitat des akkus|\bmah\b",
        "fr": r"capacite de (?:la )?batterie|\bmah\b"}),
    (("capacity_l",), {
        "en": r"\blit(?:er|re)s?\b|\bhold\b|\bholds\b|how many l\b",
        "es": r"\blitros?\b|\bcaben?\b",
        "de": r"\blitern?\b|\bfasst\b|passt (?:da )?(?:rein|hinein)",
        "fr": r"\blitres?\b|\bcontient combien|\bcontenance"}),
    (("capacity_mah", "capacity_l"), {"en": r"capacity", "es": r"capacidad", "de": r"kapazitat|fassungsvermogen",
                                      "fr": r"capacite"}),
    (("volume_ml",), {
        "en": r"\bml\b|bottle|how much product|more product|how big|bigger|\bvolume",
        "es": r"\bml\b|mililitr|botella|frasco|cuanto producto|mas grande|que tan grande|cuanto trae",
        "de": r"\bml\b|milliliter|flasche|wie gross|grosser|inhalt(?!sstoff)|wie viel (?:ist )?drin",
        "fr": r"\bml\b|millilitr|flacon|bouteille|plus grand|(?:combien|plus) de produit|quelle contenance"}),
    (("stock",), {
        "en": r"stock(?! up)|\bleft\b|sold out|sell(?:ing)? out|remaining|\bqty\b|quantity|units|any more\b|"
              r"still (?:got|have|available|up for grabs|around)|\bgone\b|run(?:ning)? out|ran out|"
              r"can i still (?:get|buy|grab|order)|how many (?:do you have|are there|you got|u got|have you got)",
        "es": r"stock|(?<!como )\bquedan?\b(?! (?:grande|chic|pequen|ajustad|holgad|bien|mal))|agot|"
              r"existencias|"
              r"unidades|todavia hay|aun hay|cuantos hay|cuantas hay|hay mas|"
              r"sigue(?:n)? (?:habiendo|disponible)|todavia (?:tienes|tienen|hay|teneis)|(?:teneis|tienes) todavia|"
              r"puedo (?:pillar|comprar|conseguir|agarrar)",
        "de": r"lager|vorrat|ausverkauft|noch (?:da|welche|zu haben|erhaltlich)|wie viele (?:gibt|sind|habt)|"
              r"restbestand|noch verfugbar|\bubrig|noch (?:abgreifen|kaufen|bestellen|haben|ergattern)|"
              r"noch was da|alles weg|schon weg|wie viele (?:hast|habt|gibt)|"
              r"\bgibt(?:'s| es)\b.{0,30}\bnoch\b",
        "fr": r"stock|\breste\b|\brestent\b|restant|epuise|rupture|encore (?:en|des|dispo)|"
              r"combien (?:il )?en (?:reste|avez)"}),
    (("returns_days",), {
        "en": r"\breturn|send (?:\S+ ){0,5}back|refund|exchange|money back|take (?:it|them) back",
        "es": r"devol|devuelv|reembols|cambio|regresar",
        "de": r"ruckgabe|rucksend|zuruck(?:geben|schicken|senden)|umtausch|erstatt|widerruf",
        "fr": r"retour|rembours|renvoy|echange"}),
    (("warranty_months",), {"en": r"warrant|guarantee", "es": r"garantia", "de": r"garantie|gewahrleistung",
                            "fr": r"garanti"}),
    (("shipping_days",), {
        "en": r"\bship|deliver|arriv|sooner|faster|\d+ days|get it (?:by|in|before|soon|quick|fast)|postage|"
              r"how (?:fast|quick|soon)|how long .{0,60}(?:ship|deliver|take to (?:get|arrive|come)|to get)|"
              r"get to me|to my (?:place|door|house)|"
              r"get here|gets here|turnaround|dispatch|(?:get|reach|come to) me|at my door|"
              r"when (?:would|will|could|can) i (?:get|have)",
        "es": r"envio|envia|enviar|mandan|llega|entrega|tarda|demora|cuantos dias|mas rapido|\d+ dias",
        "de": r"versand|versend|liefer|ankommen|\bkommt\b.{0,30}\ban\b|dauert|wie schnell|schneller|zustell|"
              r"verschick|wann (?:ist|kommt|hab|war)|\d+ tage|wie viele tage|bei mir|bestell|nach hause|"
              r"braucht .{0,40}(?:bis|zu mir)",
        "fr": r"livraison|livr|expedi|envoi|\barrive|recevoir|recoit|delai|combien de jours|plus vite|"
              r"plus rapide|\d+ jours|l'avoir (?:en|avant|d'ici) \d|recoi[st]"}),
    (("price",), {
        "en": r"price|\bcost|cheap|wallet|affordable|\bdeal\b|on sale|\$|damage|set me back|going for|\bpay\b|"
              r"\bbucks\b|\bquid\b|\bfiver\b|\btenner\b|expensive|"
              r"pricey|\bworth\b|\bcharg(?:e|ing) (?:for|me)|how much (?:is|are|for|r|it|we|u|you)\b|"
              r"(?:asking|selling it|listed|go(?:ing)?) (?:for|at)\b",
        "es": r"precio|cuesta|economic|\bvale\b|\bsale\b|barat|\bcaro\b|\bcara\b|oferta|pagar|\bplata\b|\blana\b|pesos|"
              r"cuanto es|cuanto esta|a cuanto|(?:pedis|pides|piden) por",
        "de": r"preis|kostet|kosten|teuer|billig|gunstig|angebot|zahlen|\beuro|\bkohle\b|hinblatter|blechen|"
              r"was (?:willst|verlangst|nimmst) du|was (?:wollt|verlangt|nehmt) ihr",
        "fr": r"\bprix\b|coute|\bcher\b|\bchere\b|tarif|\bballes\b|payer|\bpromo|vends combien"}),
    (("brand",), {
        "en": r"\bbrand\b|who makes|who made|manufacturer|what make\b|what company|who(?:'s| is) it by|\blabel\b|"
              r"\bmaker\b|made by who",
        "es": r"\bmarca|quien (?:lo |la )?(?:hace|fabrica)|fabricante|empresa|compania",
        "de": r"\bmarke|hersteller|wer (?:stellt|macht|produziert)|\bfirma\b",
        "fr": r"\bmarque|fabricant|qui (?:le |la )?(?:fabrique|fait)|entreprise|societe"}),
    (("material",), {
        "en": r"made (?:of|from|out of|outta)|material|\bfabric\b|what'?s it made\b(?! in)",
        "es": r"hech[oa] de|material|\btela\b|tejido|de que (?:esta|es)",
        "de": r"aus was|woraus|material|\bstoff\b|aus welchem (?:stoff|material)",
        "fr": r"en quoi|matiere|materiau|tissu|fait de quoi"}),
    (("origin_country",), {
        "en": r"\bmade\b|country|come[s]? from|origin|produced|manufactured|where'?s it from|where is it from",
        "es": r"de donde|donde (?:se )?(?:hace|fabrica|hizo|produce)|hech[oa] en|\bpais|origen|fabricad",
        "de": r"woher|hergestellt|herkunft|\bland\b|produziert|gemacht|kommt (?:das|es) (?:her|aus)",
        "fr": r"d'ou|fabrique|origine|\bpays\b|produit (?:en|ou)|vient d'ou|fait (?:en|ou)"}),
    (("dishwasher_safe",), {"en": r"dishwasher", "es": r"lavavajilla|lavaplato", "de": r"spulmaschine|spuler",
                            "fr": r"lave-?vaisselle"}),
    (("machine_washable",), {"en": r"\bwash", "es": r"lavadora|lavar|lavable", "de": r"waschmaschine|wasch",
                             "fr": r"machine a laver|laver|lavable|lave-linge|en machine"}),
    (("waterproof",), {
        "en": r"waterproof|water ?proof|water ?resist|shower|in the rain|swim|get wet|splash",
        "es": r"impermeable|resistente al agua|ducha|bajo la lluvia|mojar|nadar|sumergible",
        "de": r"wasserdicht|wasserfest|dusche|im regen|nass|schwimmen",
        "fr": r"etanche|impermeable|douche|sous la pluie|mouill|nager"}),
    (("induction_compatible",), {"en": r"induction", "es": r"induccion", "de": r"induktion", "fr": r"induction"}),
    (("gluten_free",), {"en": r"gluten|\bgf\b|celiac|coeliac", "es": r"gluten|celiac", "de": r"gluten|zoliak",
                        "fr": r"gluten|coeliaque"}),
    (("vegan",), {"en": r"vegan|plant[- ]based|animal products?", "es": r"vegan|productos? animal",
                  "de": r"vegan|tierische", "fr": r"vegan|vegetalien|origine animale"}),
    (("cruelty_free",), {"en": r"cruelty|test(?:s|ed|ing)? on animals|animal test",
                         "es": r"testad[oa] en animales|maltrato|crueldad",
                         "de": r"tierversuch|tierleid", "fr": r"teste sur (?:les )?animaux|cruaute"}),
    (("fragrance_free", "scent"), {
        "en": r"fragrance|unscented|perfume|scent-?free", "es": r"fragancia|perfume",
        "de": r"duftfrei|parfum|ohne duft|duftstoff", "fr": r"parfum|sans odeur"}),
    (("hypoallergenic", "suitable_for"), {
        "en": r"hypo ?allergenic|sensitive skin", "es": r"hipo ?alergenic|piel sensible",
        "de": r"hypoallergen|empfindliche haut", "fr": r"hypoallergenique|peau sensible"}),
    (("batteries_required",), {"en": r"batteries|battery (?:needed|required|included)", "es": r"\bpilas\b",
                               "de": r"batterien", "fr": r"\bpiles\b"}),
    (("burn_hours",), {"en": r"\bburn", "es": r"\barde|quema|se consume", "de": r"brenn", "fr": r"brule|combustion"}),
    (("battery_hours", "burn_hours"), {
        "en": r"battery|charge|\bhours?\b|\bhrs?\b",
        "es": r"bateria|carga|\bhoras?\b", "de": r"akku|aufladen|ladung|stunden",
        "fr": r"batterie|charge|autonomie|heures?"}),
    (("gemstone",), {"en": r"stone|\bgem", "es": r"piedra|\bgema", "de": r"\bstein|edelstein", "fr": r"pierre|gemme"}),
    (("ingredients",), {"en": r"ingredient", "es": r"ingrediente", "de": r"zutat|inhaltsstoff", "fr": r"ingredient"}),
    (("allergens", "ingredients"), {
        "en": r"allerg|contain|\bnuts?\b|peanut", "es": r"alerg|contiene|\bnueces|cacahuate|mani\b",
        "de": r"allerg|enthalt|\bnusse|erdnuss", "fr": r"allerg|contient|\bnoix|arachide|cacahuete"}),
    (("colours",), {"en": r"\bcolou?r(?:s|ways?)?\b|\bshades?\b", "es": r"\bcolou?r(?:es|citos?)?\b|\btonos?\b",
                    "de": r"\bfarben?\b", "fr": r"\bcouleurs?\b|\bteintes?\b|\bcoloris\b"}),
    (("fit",), {
        "en": r"\bfit\b|\bfits\b|true to size|oversized|runs? (?:small|big|large|tight|loose)|size up|size down|"
              r"\bsnug\b|\bloose\b|\btight\b|\bbaggy\b|\broomy\b|\bfitted\b|sizing",
        "es": r"horma|queda (?:grande|chic|pequen|ajustad)|calce|talla (?:grande|pequena|normal|real)|\bcorte\b|"
              r"oversize|holgad|ajustad|como (?:me |te |le )?queda",
        "de": r"passform|fallt (?:gross|klein|normal)|fallt .{0,40}\baus\b|eher (?:klein|gross)|grossenecht",
        "fr": r"\bcoupe\b|taille (?:grand|petit|normalement|comment)|grand ou petit|petit ou grand|ajust"}),
    (("bed_size", "sizes"), {"en": r"bed size|what size is", "es": r"tamano de (?:la )?cama|para que cama",
                             "de": r"bettgrosse|fur welches bett", "fr": r"taille de lit|pour quel lit"}),
    (("sizes", "bed_size", "volume_ml"), {"en": r"\bsizes?\b", "es": r"\btallas?\b|tamano|\bnumero\b",
                                          "de": r"\bgrossen?\b", "fr": r"\btailles?\b|pointure"}),
    (("connectivity",), {
        "en": r"connect|bluetooth|wi-?fi|wireless|wired|cable", "es": r"conect|bluetooth|wifi|inalambric|cable",
        "de": r"verbind|bluetooth|wlan|kabel", "fr": r"connect|bluetooth|wifi|sans fil|cable"}),
    (("wattage_w",), {"en": r"watt|powerful|\bpower\b|how many w\b", "es": r"potencia|potente|vatios",
                      "de": r"leistung|\bwatt\b",
                      "fr": r"puissan|\bwatts?\b"}),
    (("works_with",), {
        "en": r"works? (?:\S+ )?with|compatible|support|pair (?:\S+ )?with|sync",
        "es": r"funciona con|compatible|sirve con",
        "de": r"kompatibel|funktioniert (?:das |es )?mit|geht (?:das |es )?mit|womit",
        "fr": r"fonctionne avec|compatible|marche avec"}),
    (("pieces",), {"en": r"pieces|\bpcs\b|\bpc\b", "es": r"piezas", "de": r"teile\b|vielen teilen|teilig|\bstuck\b",
                   "fr": r"pieces|morceaux"}),
    (("flavour",), {"en": r"flavou?r|taste", "es": r"sabor|\bsabe\b", "de": r"geschmack|schmeckt",
                    "fr": r"\bgout|saveur"}),
    (("calories_per_serving",), {"en": r"calori|kcal|\bcals?\b|fattening", "es": r"calori|kcal", "de": r"kalorie|kcal",
                                 "fr": r"calorie|kcal"}),
    (("best_before_months",), {
        "en": r"shelf life|\bkeep\b|\bkeeps\b|expir|best before|\bexp\b|go(?:es)? bad|\bstale\b|stays? (?:good|fresh)|"
              r"use[- ]by",
        "es": r"caduc|vencimiento|\bvence\b|se conserva|echa a perder",
        "de": r"haltbar|ablauf|verfall|schlecht werden",
        "fr": r"peremption|se conserve|date limite|\bdlc\b|perime"}),
    (("scent",), {"en": r"smell|scent|\baroma", "es": r"\bolor|huele|aroma", "de": r"\bduft|riecht|geruch",
                  "fr": r"odeur|\bsent\b|\bsenteur|parfum"}),
    (("thickness_mm",), {"en": r"thick", "es": r"grosor|grueso|espesor", "de": r"\bdick|starke\b",
                         "fr": r"epais"}),
    (("min_age_years",), {
        "en": r"\bage\b|\bages\b|years?[- ]olds?|\d+ ?yo\b|\bkids?\b|child|toddler|\bmonths old|turning \d+|"
              r"\b(?:nephew|niece|son|daughter|grandson|granddaughter|grandkid)\b",
        "es": r"\bedad|\banos\b|\bnin[oa]s?\b|\bhij[oa]\b", "de": r"\balter\b|\bjahre|\bkind(?:er)?\b|jahrig",
        "fr": r"\bage\b|\bans\b|enfant|\bgamin"}),
    (("players",), {"en": r"players?\b|\bplay\b|how many (?:people|of us|kids)\b", "es": r"jugador|jugar",
                    "de": r"spieler|spielen",
                    "fr": r"joueurs?|jouer"}),
    (("height_cm",), {"en": r"\btall|height|how high", "es": r"\balto\b|altura|que tan alt", "de": r"\bhoch\b|hohe\b",
                      "fr": r"\bhaut\b|hauteur"}),
    (("length_cm",), {"en": r"how long is|length|\blong is\b", "es": r"\blargo\b|longitud|cuanto mide",
                      "de": r"wie lang (?:ist|sind)|die lange\b|\bcm lang", "fr": r"longueur|\blong de\b"}),
    (("ingredients",), {
        "en": r"ingredient|what'?s (?:\S+ )?in\b|what is (?:\S+ )?in\b|\bin it\b|\binside\b|made with",
        "es": r"ingrediente|que (?:tiene|lleva|contiene)\b|composicion",
        "de": r"zutat|inhaltsstoff|was ist (?:da )?drin|was (?:ist )?da drin",
        "fr": r"ingredient|composition|qu'?est-ce qu'il y a dedans|y a quoi dedans|dedans"}),
    (("suitable_for",), {
        "en": r"suitable|meant for|good for|for everyone|work for|\bok for\b|okay for|\bfor my\b|who should|for whom|"
              r"who(?:'s| is) (?:it|this|that|\S+) for|made for|right for|recommend|what type|which type|for who\b",
        "es": r"sirve para|apto para|bueno para|para (?:piel|cabello|pelo|perros?|gatos?|mi)|para quien|para que tipo|"
              r"a quien (?:va|le)",
        "de": r"geeignet|gut fur|fur (?:trockene|fettige|hunde|katzen|mein)|fur wen|fur welche",
        "fr": r"convient|adapte|bon pour|pour (?:les )?(?:peaux?|cheveux|chiens?|chats?|mon|ma)|pour qui|"
              r"pour quel"}),
)
"""Question cue -> the facts it asks about, in order; the first rule that matches decides."""

_HOW_MUCH: _Rule = (("price",), {"en": r"how much|\$\$|\bhow \$", "es": r"cuanto", "de": r"wie ?viel",
                                 "fr": r"combien"})
"""Bare "how much" asks the price, but only when no fact cue and no list value explain the question better."""

_PROBE_POOLS: dict[str, tuple[str, ...]] = {
    "colours": (*PALETTE, *SHADES, "silver", "cream", "sage green", "terracotta", "blush pink"),
    "sizes": (*CLOTHING_SIZES, *EU_SHOE_SIZES, *RING_SIZES),
    "ingredients": (*BEAUTY_INGREDIENTS, *SWEET_INGREDIENTS, *SAVOURY_INGREDIENTS, *DRINK_INGREDIENTS),
    "allergens": ALLERGENS,
    "works_with": ("Alexa", "Google Home", "Apple HomeKit", "SmartThings", "iPhone", "Android", "Strava",
                   "Apple Health", "Google Fit"),
    "suitable_for": (*SKIN_TYPES, *HAIR_TYPES, "puppies", "adult dogs", "senior dogs", "kittens", "adult cats",
                     "senior cats", "dogs", "cats", "rabbits"),
}
"""Values a viewer may ask about for a list fact ("does it come in pink?"), longest matched first."""

_ORDINAL_WORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "en": tuple((w,) for w in ORDINALS),
    "es": (("primer", "primero", "primera"), ("segundo", "segunda"), ("tercer", "tercero", "tercera"),
           ("cuarto", "cuarta"), ("quinto", "quinta"), ("sexto", "sexta"), ("septimo", "septima", "setimo"),
           ("octavo", "octava"), ("noveno", "novena"), ("decimo", "decima"), ("undecimo", "onceavo", "onceava"),
           ("duodecimo", "doceavo", "doceava")),
    "de": tuple(tuple(stem + end for end in ("", "e", "n", "r", "s", "m")) for stem in (
        "erst", "zweit", "dritt", "viert", "funft", "sechst", "siebt", "acht", "neunt", "zehnt", "elft", "zwolft")),
    "fr": (("premier", "premiere"), ("deuxieme", "second", "seconde"), ("troisieme",), ("quatrieme",),
           ("cinquieme",), ("sixieme",), ("septieme",), ("huitieme",), ("neuvieme",), ("dixieme",), ("onzieme",),
           ("douzieme",)),
}
_ARTICLES = r"(?:the|el|la|lo|los|las|del|al|der|die|das|den|dem|des|vom|le|la|l'|du|au)"
_PRODUCT_NOUNS = (r"(?:one|item|product|thing|piece|pick|deal|option|uno|una|producto|articulo|cosa|teil|produkt|"
                  r"artikel|ding|sache|angebot|article|produit|truc)")
_NUMBERED = re.compile(r"(?:#|\bno\.? ?|\bnr\.? ?|\bn[o°º]\.? ?|\bnumber ?|\bnumero ?|\bnummer ?|\bitem ?|"
                       r"\bproduct ?|\bproducto ?|\bprodukt ?|\bproduit ?|\barticulo ?|\bartikel ?|\barticle ?)"
                       r"(\d{1,2})\b"
                       r"|\b(\d{1,2}) ?(?:st|nd|rd|th|o|a|º|ª|e|er|eme|ieme|\.)(?= |$|\?|!|,)"
                       # "el 3", "das 2": an article and a bare number closing a phrase ("¿tenéis todavía el 3?")
                       r"|\b(?:el|la|le|das|the) (\d{1,2})(?= ?[?!.,]|$| (?:o|ou|oder|or|y|et|und|and|vs)\b)")
_PREVIOUS: dict[str, str] = {
    "en": r"\b(?:the|that) (?:last|previous|earlier|prior) (?:one|thing|item|product|piece|pick)\b|"
          r"\bbefore (?:this|that|it|the current)\b|\ba (?:moment|minute|min|sec|second|bit|little while) ago\b|"
          r"\bearlier\b|\bjust now\b|\b(?:were|was) showing before\b|\bbefore you switched\b|"
          r"\bprevious(?:ly)?\b|\bone before\b|\bjust (?:showed|had|did)\b|"
          r"\bshowed (?:us )?(?:before|earlier|a sec ago|just now)\b|\b(?:right|just) before\b",
    "es": r"\banterior\b|\bde antes\b|\bhace un rat(?:o|ito)\b|\bjusto antes\b|\b(?:el|la|lo) ultim[oa]\b|"
          r"\blo que (?:mostraste|ensenaste) antes\b|\bantes de (?:este|esto|esta)\b|\bque pasaste antes\b|"
          r"\bhace (?:un )?(?:momento|momentito|segundo|minuto|nada)\b|"
          r"\b(?:el|la|lo) que (?:tenias|tenia|ensenabas|mostrabas|llevabas)\b",
    "de": r"\bdavor\b|\bvorher\b|\bvor(?:her)?ige[nrms]?\b|\bvon eben\b|\beben gezeigt|\bvorhin\b|"
          r"\b(?:gerade|grad|grade) eben\b|\bletzte[nrms]?\b",
    "fr": r"\bprecedent(?:e)?\b|\bd'avant\b|\bjuste avant\b|\btout a l'heure\b|\bdernier\b|\bderniere\b",
}
_THIS_REF: dict[str, str] = {
    "en": r"\b(?:this|these|that|those|it)\b|on screen|you'?re (?:holding|showing|wearing|using)|in your hands?|"
          r"you'?ve got there|you (?:have|got) there|right here|right now|\bcurrent\b",
    "es": r"\b(?:este|esta|esto|estos|estas|ese|esa|eso)\b|en pantalla|en la mano|el que tienes|de ahora|"
          r"que (?:estas )?(?:ensenando|mostrando|ensenas|muestras)",
    "de": r"\b(?:dieser|diese|dieses|das hier|den hier|die hier|das da|der da|die da|aktuelle[nrs]?|gerade|grad|"
          r"das teil|das ding)\b|in der hand",
    "fr": r"\b(?:ce|cet|cette|ces|celui-ci|celle-ci|celui-la|celle-la|ca)\b|a l'ecran|qu'on voit|en main|"
          r"que tu (?:montres|as|tiens|portes)|que t'as",
}
_COMPARE: dict[str, str] = {
    "en": r"\bor\b|\bvs\.?\b|\bversus\b|\bthan\b|\bcompared\b|\bbetter\b|\bwhich\b",
    "es": r"\bo\b|\bvs\.?\b|\b(?:mas|menos) \w+ que\b|\bcomparad|\bcual\b|\bmejor\b",
    "de": r"\boder\b|\bvs\.?\b|\bals\b|\bverglichen\b|\bwelche[srnm]?\b|\bbesser\b",
    "fr": r"\bou\b|\bvs\.?\b|\b(?:plus|moins) \w+ que\b|\bpar rapport\b|\blequel\b|\blaquelle\b|\bmieux\b",
}
_OF = (r"(?:(?:made|sold|brought to you) by(?: the)?|made from|from the|by the|from|by|of|de chez|hech[oa] por|"
       r"de la marca|marca|de|del|de la|chez|von der (?:marke|firma)|vom hersteller|der marke|von|vom|der|bei|du|d'|"
       r"de la marque|marque)")
"""Words between a product's noun and its brand: "the earbuds from Voltix", "los earbuds de Voltix"."""
SORRY = "Sorry, I'm not sure — the fact sheet doesn't say."
OFF_TOPIC_REPLY = "Sorry, I'm not sure — I can only help with the products on this stream."
WHICH_ONE = "Sorry, I'm not sure which product you mean — could you name it?"


def fold(text: str) -> str:
    """Lower case, accents and ß folded, curly quotes straightened, letters repeated 3+ times squeezed to 2."""
    text = text.replace("ß", "ss").replace("’", "'").replace("‘", "'").lower()
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return re.sub(r"([a-z])\1{2,}", r"\1\1", text)


_SLANG = tuple((re.compile(p), r) for p, r in (
    (r"\b(?:dis|dat|ths|thiss|tis)\b", "this"), (r"\bda\b(?= [a-z])", "the"), (r"\b(?:u|yu)\b", "you"),
    (r"\bur (?=[a-z]+ing\b)", "you're "), (r"\bur\b", "your"), (r"\bb4\b", "before"),
    (r"\b(?:wat|wut|wht|whats)\b", "what"), (r"\bhw\b", "how"),
    (r"\bh8\b", "hate"), (r"\boutta\b", "out of"), (r"\b(?:til|till|untill)\b", "until"), (r"\brn\b", "right now"),
    (r"\b(?:pls|plz|plss)\b", "please"), (r"\byrs?\b", "year"), (r"\bhrs?\b", "hours"), (r"\b(?:gonna)\b", "going to"),
    (r"\b(?:this|that|the|which|last|other|first|next|new) 1\b", "\\g<0>ne"),
    (r"\b(?:ok|good|safe|okay) 4\b", "\\g<0>_"),
    (r"\bfrm\b", "from"), (r"\bprev\b", "previous"), (r"\bthicc\b", "thick"),
    (r"\b(is|it|this|that|one|thing|good|ok|made|meant|them|these|those|\w+s) 4(?= ?[?!.]|$)", "\\1 for"),
    (r"\bbatterys\b", "batteries"), (r"\bcuz\b", "because"),
    (r"\bcb\b", "combien"), (r"\bkoi\b", "quoi"), (r"\bqd\b", "quand"), (r"\bc(?= [a-z])", "c'est"),
    (r"\b(?:pk|pq)\b", "pourquoi"), (r"\bds\b", "dans"), (r"\bpr\b", "pour"), (r"\bxq\b", "porque"),
    (r"\bq\b(?= [a-z])", "que"), (r"\bxfa\b", "por favor"),
    (r"\bno(?=\d)", "no "), (r"\b(\d{1,2}(?:st|nd|rd|th)) 1\b", "\\1 one"), (r"\bprc\b", "price"),
    (r"\bmch\b", "much"), (r"\bavail\b", "available"), (r"\bppl\b", "people"), (r"\bwht\b", "what"),
    (r"\bexp\b", "expiry"), (r"\binduct\b", "induction"), (r"\bqty\b", "quantity"), (r"\bnr(?=\d)", "nr "),
    (r"\bw/", "with "), (r"\bthx\b", "thanks"),
))
"""Chat spellings read as words: 'dis' -> 'this', 'b4' -> 'before', 'this 1' -> 'this one', 'no5' -> 'no 5'."""


def unslang(text: str) -> str:
    for pattern, repl in _SLANG:
        text = pattern.sub(repl, text)
    return text.replace(" 1ne", " one").replace(" 4_", " for")


_TARGETS: dict[str, tuple[str, ...]] = {
    "en": ("price", "prices", "cost", "cheaper", "cheap", "expensive", "stock", "left", "available", "shipping", "ship",
           "ships", "delivery", "deliver", "arrive", "quicker", "faster", "sooner", "return", "returns", "refund",
           "warranty", "guarantee", "battery", "batteries", "charge", "hours", "waterproof", "colours", "colors",
           "colour", "color", "sizes", "size", "material", "fabric", "ingredients", "ingredient", "calories",
           "serving", "allergens", "allergy", "vegan", "gluten", "dishwasher", "washable", "wash", "induction",
           "fragrance", "unscented", "hypoallergenic", "flavour", "flavor", "taste", "scent", "smell", "thick",
           "thickness", "players", "height", "tall", "length", "long", "compatible", "connect", "bluetooth",
           "wireless", "pieces", "shelf", "expire", "expiry", "brand", "makes", "made", "country", "origin", "weigh",
           "weight", "heavy", "lighter", "discount", "sale", "capacity", "liters", "litres", "watts", "powerful",
           "suitable", "stone", "gemstone", "burn", "restock", "recyclable", "packaging", "gift", "bundle", "sample",
           "designed", "stores", "which", "what", "much", "many", "does", "this", "that", "before", "previous",
           "cruelty", "tested", "animals", "works", "needs", "need", "still", "sold"),
    "es": ("precio", "cuesta", "cuanto", "barato", "caro", "envio", "llega", "tarda", "garantia", "bateria", "colores",
           "tallas", "talla", "ingredientes", "calorias", "devolucion", "descuento", "marca", "material", "quedan",
           "agotado", "impermeable", "vegano", "gluten", "lavavajillas", "peso", "pesa", "tamano", "anterior",
           "piezas", "sabor", "olor", "jugadores", "altura", "largo"),
    "de": ("preis", "kostet", "billiger", "teuer", "versand", "lieferung", "garantie", "akku", "farben", "grosse",
           "grossen", "zutaten", "kalorien", "ruckgabe", "rabatt", "marke", "material", "lager", "ausverkauft",
           "wasserdicht", "vegan", "gewicht", "wiegt", "davor", "vorher", "teile", "geschmack", "spieler", "lange",
           "woraus"),
    "fr": ("prix", "combien", "coute", "moins", "cher", "livraison", "garantie", "batterie", "couleurs", "tailles",
           "ingredients", "calories", "retour", "remise", "marque", "matiere", "stock", "epuise", "etanche",
           "vegan", "poids", "precedent", "pieces", "saveur", "odeur", "joueurs", "hauteur", "longueur"),
}
"""Words a misspelt question word is corrected to (one letter added, dropped, changed or swapped)."""


@functools.cache
def _known(word: str) -> bool:
    """A real word of English, Spanish, German or French (wordfreq), which is never 'corrected'."""
    from wordfreq import zipf_frequency

    return any(zipf_frequency(word, lang) >= 2.5 for lang in LANGUAGES)


def _edits1(word: str) -> set[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    deletes = {a + b[1:] for a, b in splits if b}
    swaps = {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    changes = {a + c + b[1:] for a, b in splits if b for c in letters}
    return deletes | swaps | changes | {a + c + b for a, b in splits for c in letters}


@functools.lru_cache(maxsize=4096)
def _corrected(targets: frozenset[str], text: str) -> str:
    def fix(m: re.Match[str]) -> str:
        w = m.group()
        if w in targets or _known(w):
            return w
        return min(targets & _edits1(w), default=w)

    out = re.sub(r"[a-z]{4,}", fix, text)
    return out if out != text else ""


def find_word(word: str, text: str) -> re.Match[str] | None:
    return re.search(r"(?<![\w])" + re.escape(word.lower()) + r"(?![\w])", text)


def _with_swaps(rest: str) -> str:
    """Every one-swap variant of each word of 5+ letters of ``rest``, with its neighbours (viewers swap two letters:
    'rpice', 'fair traed'), one variant per line."""
    words = rest.split()
    out = []
    for i, w in enumerate(words):
        if len(w) < 5 or not w.isalpha():
            continue
        before, after = " ".join(words[max(0, i - 2):i]), " ".join(words[i + 1:i + 3])
        out += [f"{before} {w[:j] + w[j + 1] + w[j] + w[j + 2:]} {after}" for j in range(len(w) - 1)]
    return "\n".join(out)


def _umlauts(text: str) -> str:
    """``text`` with German umlauts typed as two letters read as folded ones ("guenstiger" -> "gunstiger",
    "zurueckschicken" -> "zuruckschicken"): tried only when nothing else matched, so "blue" stays "blue" first."""
    return re.sub(r"(?<=[a-z])([aou])e(?=[a-z])", r"\1", text)


def _leaf(item: Item) -> str:
    return item.category_path[-1].lower()


def _short(item: Item) -> str:
    brand = item.attributes.get("brand")
    return f"{brand} {_leaf(item)}" if isinstance(brand, str) else item.title


def _value(item: Item, key: str) -> AttributeValue | None:
    if key in SPECIAL_FACTS:
        special: AttributeValue | None = getattr(item, key)
        return special
    return item.attributes.get(key)


_UNIT_NUMBER = re.compile(r"(\d+)\s*-?\s*(?:days?|d\b|hours?|hrs?|h\b|years?|yrs?|yo\b|y/o|months?|dias?|horas?|anos|"
                          r"tage?n?|stunden?|std|jahre?n?|jours?|heures?|ans\b|mois|meses)")


def _number(text: str) -> int | None:
    """The number a threshold question asks about: one with a unit (days, hours, years…), else the last one."""
    m = _UNIT_NUMBER.search(text)
    if m:
        return int(m.group(1))
    numbers = re.findall(r"\d+", text)
    return int(numbers[-1]) if numbers else None


def streams_of(ctx: TurnContext) -> dict[str, Stream]:
    """The app's streams by id (its resources' ``streams``; {} for resources without them)."""
    streams = getattr(ctx.resources, "streams", None)
    return streams if isinstance(streams, dict) else {}


def _on_screen_index(stream: Stream, ts: float) -> int | None:
    """Index of the product on screen at ``ts``, or of the last one shown before it (between products)."""
    shown = [k for k, (start, _) in enumerate(stream.windows) if start <= ts]
    return shown[-1] if shown else None


_GAP = r"(?:,?[\s-]+(?!(?:or|o|ou|oder|vs|and|y|und|et)\b)[\w'&-]+){0,3}?,?[\s-]+"
"""A few words between a product's brand and its noun, but not a word that joins two products ("or", "und")."""
_TAIL = r"(?:-(?:teil|ding|sache|thing|stuff))?(?:\s+(?:makes|sells|macht|hace|company|brand|label))?"


@functools.lru_cache(maxsize=4096)
def _name_patterns(brand: str, leaf: str, plain: bool
                   ) -> tuple[tuple[re.Pattern[str], ...], re.Pattern[str] | None, re.Pattern[str]]:
    """Compiled once per product: ``(brand and noun together, brand alone, noun alone)`` (brand folded, noun as
    shown; plain: brand right before the noun, noun exactly)."""
    lf = re.escape(fold(leaf)).replace(r"\ ", " ")
    lf = lf[:-1] + "s?" if lf.endswith("s") and not lf.endswith("ss") else lf + "s?"
    leaf_only = re.compile(rf"(?<!\w){re.escape(leaf)}(?!\w)" if plain else rf"(?<!\w){lf}(?!\w)")
    if not brand:
        return (), None, leaf_only
    b = re.escape(brand)
    if plain:
        return (re.compile(rf"(?<!\w){b}(?:'s)?(?:\s+\S+)?\s+{re.escape(leaf)}(?!\w)"),
                re.compile(rf"(?<!\w){re.escape(leaf)}\s+(?:from|by)\s+{b}(?!\w)")), None, leaf_only
    named = (re.compile(rf"(?<!\w){b}(?:'s)?{_GAP}{lf}{_TAIL}(?!\w)"),
             re.compile(rf"(?<!\w){b}(?:'s)?[\s-]+{lf}{_TAIL}(?!\w)"),
             re.compile(rf"(?<!\w){lf}{_TAIL}[\s-]+(?:{_OF}\s+)?{b}{_TAIL}(?!\w)"))
    return named, re.compile(rf"(?<!\w){b}(?!\w)"), leaf_only


@dataclass(frozen=True)
class Reading:
    """What a question asks: the products (first = the subject), the fact key (None: nothing on a fact sheet),
    the text with product names blanked, and whether it is chit-chat."""

    products: list[Item]
    key: str | None
    rest: str
    off_topic: bool


class Reader:
    """Reads viewer questions in ``languages`` (a subset of en, es, de, fr); ``relative`` resolves "the one
    before this"; ``plain`` reads the text as typed (lower case only: no accent folding, chat spellings, typo
    repair, brand-only or loosely spaced names, or numbered references beyond "#3" / "item 3" / "the 3rd one")."""

    def __init__(self, languages: Sequence[str] = LANGUAGES, relative: bool = True, plain: bool = False) -> None:
        unknown = [lang for lang in languages if lang not in LANGUAGES]
        if unknown or not languages:
            raise ValueError(f"languages {list(languages)}: choose from {', '.join(LANGUAGES)}")
        self.languages, self.relative, self.plain = tuple(languages), relative, plain

        def join(patterns: dict[str, str]) -> re.Pattern[str] | None:
            parts = [patterns[lang] for lang in self.languages if lang in patterns]
            return re.compile("|".join(f"(?:{p})" for p in parts)) if parts else None

        self._cues = [(keys, p) for keys, pats in _CUES if (p := join(pats)) is not None]
        self._targets = frozenset() if plain else frozenset(w for lang in self.languages for w in _TARGETS[lang])
        self._how_much = join(_HOW_MUCH[1])
        self._off_topic = join(_OFF_TOPIC)
        self._previous = join(_PREVIOUS) if relative else None
        self._this = join(_THIS_REF)
        self._compare = join(_COMPARE)
        words = {w: n for lang in self.languages for n, forms in enumerate(_ORDINAL_WORDS[lang], start=1)
                 for w in forms}
        alternatives = "|".join(sorted(map(re.escape, words), key=len, reverse=True))
        self._ordinal_words = words
        shown = r"(?:showed|shown|held up|had|presented|did|brought out|put up|featured|mentioned)"
        self._ordinal = re.compile(
            rf"\b(?:{_ARTICLES} ?)({alternatives})\b(?: {_PRODUCT_NOUNS}\b)?|\b({alternatives}) {_PRODUCT_NOUNS}\b|"
            rf"\b{shown}(?: us| tonight| today)? ({alternatives})\b")
        self._numbered = _NUMBERED if not plain else re.compile(
            r"\bthe (\d{1,2})(?:st|nd|rd|th) (?:item|one|product)\b|\bitem (\d{1,2})\b|#(\d{1,2})\b")

    # -------------------------------------------------------------------------------------- products
    def _named(self, text: str, items: list[Item], here: str | None) -> list[tuple[int, int, str]]:
        """``(start, end, item_id)`` of products named by brand and noun (either order, a few words apart), by
        the brand or the noun alone when unique on the stream (else when the product ``here`` has it)."""
        leaves = [_leaf(i) for i in items]
        brands = [fold(str(i.attributes.get("brand", ""))) for i in items]
        refs: list[tuple[int, int, str]] = []
        for item, leaf, brand in zip(items, leaves, brands, strict=True):
            named, brand_only, leaf_only = _name_patterns(brand, leaf, self.plain)
            both = [m for pattern in named for m in pattern.finditer(text)]
            if both:  # the shortest span per start: "the Voltix earbuds or the Sonaro headphones" names two
                both = [min((m for m in both if m.start() == start), key=lambda m: m.end() - m.start())
                        for start in sorted({m.start() for m in both})]
                refs += [(m.start(), m.end(), item.item_id) for m in both]
                continue
            if brand_only is not None and (brands.count(brand) == 1 or item.item_id == here):
                refs += [(m.start(), m.end(), item.item_id) for m in brand_only.finditer(text)]
            if leaves.count(leaf) == 1 or item.item_id == here:
                refs += [(m.start(), m.end(), item.item_id) for m in leaf_only.finditer(text)]
        return refs

    def referenced_items(self, text: str, stream: Stream | None, catalog: Catalog, here: str | None = None,
                         ts: float | None = None) -> tuple[list[str], str]:
        """Products a question names, in order (ordinals, names, "the one before this"), and the (folded)
        question with those references blanked out (so 'Golden Hour' is not read as 'hours')."""
        low = text.lower() if self.plain else unslang(fold(text))
        if stream is None:
            return [], low
        n_items = len(stream.item_ids)
        refs: list[tuple[int, int, str]] = []
        for m in self._ordinal.finditer(low):
            n = self._ordinal_words[m.group(1) or m.group(2) or m.group(3)]
            if 1 <= n <= n_items:
                refs.append((m.start(), m.end(), stream.item_ids[n - 1]))
        for m in self._numbered.finditer(low):
            n = int(next(g for g in m.groups() if g))
            if 1 <= n <= n_items:
                refs.append((m.start(), m.end(), stream.item_ids[n - 1]))
        refs += self._named(low, [catalog[i] for i in stream.item_ids if i in catalog], here)
        if self._previous is not None and ts is not None:
            before = self._previous.search(low)
            index = _on_screen_index(stream, ts)
            if before and index is not None:
                previous = index - 1 if stream.on_screen(ts) is not None else index
                alone = not refs or bool(self._compare and self._compare.search(low))
                if previous >= 0 and alone and all(before.end() <= s or before.start() >= e for s, e, _ in refs):
                    tail = re.match(r"\s+(?:this|that|esto|este|das|ca|celui-ci)\b(?: one)?", low[before.end():])
                    end = before.end() + (tail.end() if tail else 0)  # "the one before this" names one product
                    refs.append((before.start(), end, stream.item_ids[previous]))
        kept: list[tuple[int, int, str]] = []
        for start, end, item_id in sorted(refs, key=lambda r: (r[0], r[0] - r[1])):  # longest first at a start
            if all(end <= s or start >= e for s, e, _ in kept):
                kept.append((start, end, item_id))
        rest = low
        for start, end, _ in kept:
            rest = rest[:start] + " " * (end - start) + rest[end:]
        return list(dict.fromkeys(item_id for _, _, item_id in kept)), rest

    # -------------------------------------------------------------------------------------- facts
    def _probe(self, rest: str, original: str, key: str, values: list[str]) -> str | None:
        """The value asked about in a yes/no list question, or None (letter sizes must be upper case)."""
        pool = sorted({*_PROBE_POOLS.get(key, ()), *values}, key=len, reverse=True)
        for word in pool:
            if word.isalpha() and word.isupper() and len(word) <= 3 and not re.fullmatch(r"X+[SL]", word):
                if re.search(rf"(?<![\w]){word}(?![\w])", original) or re.search(
                        rf"\b(?:size|talla|taille|grosse|gr\.?)\s+{word.lower()}(?![\w])", rest):
                    return word  # "M", or "size m" in a message typed in lower case
            elif find_word(fold(word), rest):
                return word
        return None

    def _rule_keys(self, text: str) -> tuple[str, ...] | None:
        """The facts of the first cue rule ``text`` matches; only when none does, its typo variants' (but a
        misspelt cue of something no fact sheet has wins over any other: "fair traed" is not "made")."""
        text = re.sub(r"\s+", " ", text)
        text = self._corrected(text) or text
        swaps = _with_swaps(text)
        if self._cues and not self._cues[0][0] and self._cues[0][1].search(swaps):
            return ()
        for candidate in (text, swaps, _umlauts(text)):
            keys = next((keys for keys, pattern in self._cues if pattern.search(candidate)), None)
            if keys is not None:
                return keys
        return None

    def _corrected(self, text: str) -> str:
        """``text`` with each unknown word of 4+ letters that is one edit from a question word replaced by it
        ('pric' -> 'price', 'batterys' -> 'batteries'); '' when nothing changes. Memoised: one question asks it
        for its clause, its whole text and its "how much"."""
        return _corrected(self._targets, text) if self._targets else ""

    def question_key(self, rest: str, original: str, item: Item) -> str | None:
        """The fact a question asks about, or None when it asks for something no fact sheet has."""
        has = set(item.attributes) | {"price", "stock"}
        clauses = [c for c in re.split(r"[,;:.!]\s+|\s+-\s+", rest.strip()) if c.strip()]
        keys = self._rule_keys(clauses[-1]) if len(clauses) > 1 else None  # the question after a preamble
        if keys and not any(k in has for k in keys):
            keys = self._rule_keys(rest) or keys  # "mon fils a 5 ans, … c'est adapté ?": the preamble says what
        if keys is None:
            keys = self._rule_keys(rest)
        if keys is not None:
            return next((k for k in keys if k in has), None)
        for key in _PROBE_POOLS:
            value = item.attributes.get(key)
            if isinstance(value, list) and self._probe(rest, original, key, value):
                return key
        if self._asks_how_much(rest):
            return "price"
        return None

    def _asks_how_much(self, rest: str) -> bool:
        """A bare "how much" / "cuánto" / "combien", typed right or with a typo ("cmobien", "cunato")."""
        return self._how_much is not None and (
            self._how_much.search(rest) is not None or self._how_much.search(self._corrected(rest)) is not None)

    def asks_anything(self, rest: str) -> bool:
        return self._rule_keys(rest) is not None or self._asks_how_much(rest)

    def read(self, question: str, ctx: TurnContext) -> Reading:
        """Products and fact of ``question`` in the request's context (stream, time, item)."""
        stream = self._stream(ctx)
        here = self._here(ctx, stream)
        ts = ctx.constraints.get("ts_offset_s")
        refs, rest = self.referenced_items(question, stream, ctx.catalog, here,
                                           float(ts) if isinstance(ts, int | float) else None)
        chit_chat = bool(self._off_topic and self._off_topic.search(rest)) and not refs
        ids = list(refs)
        if not ids and here is not None:
            ids = [here]
        elif len(ids) == 1 and here is not None and here != ids[0] and self._compare and self._compare.search(rest) \
                and self._this and any(m.group() not in ("it", "ca", "es") for m in self._this.finditer(rest)):
            ids = [here, *ids]  # "this or the Voltix earbuds?" (not "is the previous one left or is it gone")
        products = [ctx.catalog[i] for i in ids if i in ctx.catalog]
        key = self.question_key(rest, question, products[0]) if products and not chit_chat else None
        return Reading(products, key, rest, chit_chat)

    # -------------------------------------------------------------------------------------- a model's call
    def resolve(self, ref: str, ctx: TurnContext) -> str | None:
        """The product a model's ``answer`` call names (:func:`apps.livestream.agent.answer`), or None:
        ``this`` (or nothing) = the request's product or the one on screen; ``before`` = the one shown just
        before it; ``#N`` = the N-th shown; an item id; else the brand and/or noun as the viewer wrote them,
        read as a question's product names are (unique on the stream, or the one on screen)."""
        stream = self._stream(ctx)
        here = self._here(ctx, stream)
        text = ref.strip()
        low = fold(text).strip(" .!?")
        if low in ("", "this", "it"):
            return here
        if text in ctx.catalog and (stream is None or text in stream.item_ids):
            return text
        if stream is None:
            return None
        ts = ctx.constraints.get("ts_offset_s")
        if low == "before":
            index = _on_screen_index(stream, float(ts)) if isinstance(ts, int | float) else None
            if index is None:
                return None
            previous = index - 1 if stream.on_screen(float(ts)) is not None else index  # type: ignore[arg-type]
            return stream.item_ids[previous] if previous >= 0 else None
        number = re.fullmatch(r"#?\s*(\d{1,3})", low)
        if number:
            n = int(number.group(1))
            return stream.item_ids[n - 1] if 1 <= n <= len(stream.item_ids) else None
        items = [ctx.catalog[i] for i in stream.item_ids if i in ctx.catalog]
        named = sorted(self._named(unslang(low), items, here), key=lambda r: (r[0], r[0] - r[1]))
        return named[0][2] if named else None

    def reply(self, ctx: TurnContext, products: Sequence[Item], key: str) -> Final:
        """The answer about ``products`` (one, or two compared) on fact ``key`` of the viewer's last question,
        rendered from the fact sheet as :meth:`answer` renders it (yes/no for a value or a number the question
        states); "not sure" when the first product's sheet has no such fact or the two do not compare."""
        question = _last_user_text(ctx)
        stream = self._stream(ctx)
        _, rest = self.referenced_items(question, stream, ctx.catalog, self._here(ctx, stream))
        item = products[0]
        if key not in (set(item.attributes) | {"price", "stock"}):
            return Final(reply=SORRY, data={"cited_facts": []})
        compared = answer_comparison(item, products[1], key) if len(products) > 1 else None
        if len(products) > 1 and compared is None:
            return Final(reply=SORRY, data={"cited_facts": []})
        text, cited = compared or answer_fact(item, key, rest, question, self)
        return Final(reply=text, item_ids=list(dict.fromkeys(f.rpartition(".")[0] for f in cited)),
                     data={"cited_facts": cited})

    # -------------------------------------------------------------------------------------- answer
    def answer(self, ctx: TurnContext, reason: str = "no_model") -> Final:
        """The fallback: read the last question, answer from the fact sheet; 'not sure' when the sheet does not
        say or the question is off topic. ``reason`` (budget, step_limit, no_model) does not change it."""
        question = _last_user_text(ctx)
        return self._answer(question, self.read(question, ctx))

    def sure(self, ctx: TurnContext) -> Final | None:
        """The answer when the words name a product (or one is on screen) and either a fact of its sheet or a
        question about something no fact of the sheet says ("does it come with a warranty": "not sure"), not
        chit-chat; else None: what the reader is sure of (:attr:`harness.agent.AppSpec.first_answer`). On the first
        300 questions of the third development set (wordings the reader was never tuned on) it was sure of a fact on
        68 %, right on 0.93 of those against 0.77 for the SmolLM2 student; of a question no sheet answers on 8 %,
        right on 0.96 against 0.83; on the rest the reader was right on 0.46-0.88 and the student on 0.70-1.00
        (README, "The reader first, the model for the rest")."""
        question = _last_user_text(ctx)
        r = self.read(question, ctx)
        if r.off_topic or not r.products or (r.key is None and not self.asks_anything(r.rest)):
            return None
        return self._answer(question, r)

    def _answer(self, question: str, r: Reading) -> Final:
        """The answer to ``question`` as read (``r``)."""
        if r.off_topic:
            return Final(reply=OFF_TOPIC_REPLY, data={"cited_facts": []})
        if not r.products:
            reply = WHICH_ONE if self.asks_anything(r.rest) else OFF_TOPIC_REPLY
            return Final(reply=reply, data={"cited_facts": []})
        if r.key is None:
            return Final(reply=SORRY if self.asks_anything(r.rest) else OFF_TOPIC_REPLY, data={"cited_facts": []})
        compared = answer_comparison(r.products[0], r.products[1], r.key) if len(r.products) > 1 else None
        text, cited = compared or answer_fact(r.products[0], r.key, r.rest, question, self)
        return Final(reply=text, item_ids=list(dict.fromkeys(f.rpartition(".")[0] for f in cited)),
                     data={"cited_facts": cited})

    @staticmethod
    def _stream(ctx: TurnContext) -> Stream | None:
        sid = ctx.constraints.get("stream_id")
        return streams_of(ctx).get(str(sid)) if sid else None

    @staticmethod
    def _here(ctx: TurnContext, stream: Stream | None) -> str | None:
        """The product the request points at: its ``item_id``, else the one on screen at ``ts_offset_s``."""
        ts = ctx.constraints.get("ts_offset_s")
        on_screen = stream.on_screen(float(ts)) if stream is not None and isinstance(ts, int | float) else None
        return next((i for i in (ctx.constraints.get("item_id"), on_screen)
                     if isinstance(i, str) and i in ctx.catalog), None)


def _last_user_text(ctx: TurnContext) -> str:
    for message in reversed(ctx.session.messages):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


def answer_fact(item: Item, key: str, rest: str, original: str, reader: Reader) -> tuple[str, list[str]]:
    """The answer about ``item``'s fact ``key`` (yes/no for flags, membership and thresholds) and its citations."""
    fid, value = f"{item.item_id}.{key}", _value(item, key)
    if value is None:
        return SORRY, []
    if key == "price":
        discount = item.attributes.get("discount_percent")
        if discount is None:
            return f"It's {render_fact('price', value)} right now.", [fid]
        text = PRICE_A[1].format(p=render_fact("price", value), d=render_fact("discount_percent", discount))
        return text, [fid, f"{item.item_id}.discount_percent"]
    if key == "stock":
        return (STOCK_A[0].format(n=value) if value else STOCK_SOLD_OUT_A), [fid]
    v = render_fact(key, value)
    probe = reader._probe(rest, original, key, value) if isinstance(value, list) and key in MEMBER_A else None
    number = _number(rest) if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, bool):
        text = BOOL_A[key][0 if value else 1] if key in BOOL_A else ("Yes." if value else "No.")
    elif isinstance(value, list) and probe is not None:
        text = MEMBER_A[key][0 if probe in value else 1].format(v=v, probe=probe)
    elif isinstance(value, int) and key in THRESHOLDS and number is not None:
        rule = THRESHOLDS[key]
        yes = value <= number if rule.yes_when == "le" else value >= number
        text = rule.answers[0 if yes else 1].format(v=v, n=value)
    elif key in VALUE_A:
        text = VALUE_A[key][0].format(v=v, n=value)
    else:
        text = f"{key.replace('_', ' ').capitalize()}: {v}."
    return text, [fid]


def answer_comparison(a: Item, b: Item, key: str) -> tuple[str, list[str]] | None:
    """Which of two products wins on a numeric fact (the world's comparison rules), or None if not comparable."""
    rule = COMPARISONS.get(key)
    va, vb = _value(a, key), _value(b, key)
    if rule is None or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (va, vb)):
        return None
    assert isinstance(va, int | float) and isinstance(vb, int | float)
    cited = [f"{a.item_id}.{key}", f"{b.item_id}.{key}"]
    if va == vb:
        return rule.tie.format(v=render_fact(key, va)), cited
    a_wins = (va < vb) == (rule.wins == "lower")
    winner, (vw, vl) = (a, (va, vb)) if a_wins else (b, (vb, va))
    plural = _leaf(winner).endswith("s") and not _leaf(winner).endswith("ss")
    return f"The {_short(winner)} {rule.verb[1 if plural else 0]}: {render_fact(key, vw)} vs {render_fact(key, vl)}.", \
        cited


READER = Reader()
"""The app's reader: every language, relative references."""


def warm_up() -> None:
    """Load the word lists typo repair consults (~2 s, once per process) before the first viewer's question, not
    during it (:func:`apps.livestream.agent.livestream_app` calls it)."""
    from wordfreq import zipf_frequency

    for lang in LANGUAGES:
        zipf_frequency("warmup", lang)


def sure_answer(ctx: TurnContext) -> Final | None:
    """:meth:`Reader.sure` of the app's reader: the livestream agent's ``first_answer``."""
    return READER.sure(ctx)


def fallback(ctx: TurnContext, reason: str) -> Final:
    """The livestream fallback: :data:`READER` answers."""
    return READER.answer(ctx, reason)
