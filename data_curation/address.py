"""Street addresses of many countries: a street core, then the unit, post code, city and country around it.

The **core** is a street name with its house number, in either order, recognised by a street-type
word of some language:

- type first: ``Rua das Flores 123``, ``Calle de Alcalá 45``, ``Carrer de Mallorca 401``,
  ``ulica Marszałkowska 10``, ``Jalan Sudirman 5``, ``12 rue de la Paix``, ``221B Baker Street``;
- type as a suffix of one word: ``Hauptstraße 5``, ``Prinsengracht 263``, ``Drottninggatan 12``,
  ``Mannerheimintie 3``; or as a word after the name: ``45 Adeola Odeku Street``, ``MG Road``;
- blocks of numbers as in Japan (``2-21-1 Shibuya``, ``東京都渋谷区渋谷2-21-1``), rural routes and post
  office boxes (``RR 2 Box 15``, ``P.O. Box 30123-00100``).

The core is then **extended** over what follows it, piece by piece (comma or space separated): unit
words (``Apt 4B``, ``apto 45``, ``piso 3``, ``Wohnung 7``, ``3º B``, ``floor 2``), post codes of many
countries (US, UK, Canada, Ireland, Netherlands, Portugal, Poland, Brazil, Japan, India, 4-6 digits),
and up to three capitalised words (city, region, country); and backwards over a unit or a building
name that precedes it ("Flat 302, Sai Residency, MG Road"). A lone lower-case word ends it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_L = r"[^\W\d_]"  # a letter of any script
_CAP = r"[A-ZÀ-ÞĀ-ſ][^\W\d_]*(?:['’.-][^\W\d_]+)*\.?"  # capitalised word (Latin)
_WORD = r"[^\W\d_]+(?:['’.-][^\W\d_]+)*\.?"
_NUM = r"\d{1,5}(?:\s?(?:bis|ter|quater|[A-Za-z])(?![^\W\d_]|\.))?(?:[-/]\d{1,4}(?:hg|hs|bv|[A-Za-z])?|-[IVX]{1,4}\b)?"
_LINK = r"(?:de|del|de la|de las|de los|da|das|do|dos|della|delle|di|du|des|la|le|les|l'|d'|van|von|der|den|het|y|e)"

_PREFIX_TYPES = (
    "rua|avenida|av\\.|avda\\.?|calle|c/|carrer|avinguda|passeig|paseo|plaza|pl\\.|praça|praca|travessa|largo|"
    "estrada|rodovia|alameda|camino|carretera|ronda|via|viale|piazza|piazzale|corso|vicolo|strada|"
    "carrera|cra\\.|kra\\.|cl\\.|diagonal|transversal|jirón|jr\\.|pasaje|psje\\.|callejón|privada|cerrada|"
    "rruga|bulevardi|sheshi|ulice|náměstí|ulica|cesta|iela|gatvė|tänav|odos|"
    "rue|avenue|boulevard|bd\\.?|bld|chemin|allée|allee|impasse|quai|route|cours|place|"
    "ulica|ul\\.|aleja|al\\.|osiedle|os\\.|jalan|jl\\.|calea|bulevardul|str\\.|strada|ulitsa|prospekt|"
    "utca|út|odos|leoforos|sokak|cadde|caddesi|mahallesi|soi|thanon|đường|duong|phố|pho|"
    "ул\\.|улица|пр\\.|просп\\.|проспект|пер\\.|переулок|вул\\.|вулиця|бул\\.|οδός|οδος|λεωφόρος|λεωφ\\."
)
STREET_TYPES = _PREFIX_TYPES
"""Street-type words written before the street's name ("Rua", "Calle", "rue", "ul."), as one regex alternation."""
_SUFFIX_WORDS = (
    "street|st\\.?|avenue|ave\\.?|road|rd\\.?|boulevard|blvd\\.?|lane|ln\\.?|drive|dr\\.?|court|ct\\.?|way|place|pl\\.?|"
    "terrace|crescent|close|grove|gardens|mews|row|walk|hill|parade|square|sq\\.?|circle|cir\\.?|parkway|pkwy|"
    "highway|hwy|trail|alley|plaza|pike|quay|wharf|path|green|park|rise|vale|view|heights|estate|marg|nagar|"
    "layout|colony|sector|block|cross|main|straße|strasse|str\\.|weg|allee|platz|gasse|ring|damm|ufer|"
    "straat|laan|gracht|plein|kade|singel|dijk|steeg|gatan|vägen|gata|gade|vej|gate|veien|vegen|katu|tie|polku|"
    "utca|caddesi|cad\\.|cd\\.|sokak|sokağı|sk\\.|iela|gatvė|tänav|maantee|puiestee|prospektas|cesta|ulica|út|"
    "körút|krt\\.|tér|náměstí|třída|ulice|vegur|gata"
)
# Street words that may be written in lower case ("45 adeola odeku street"); the others ("gate", "view",
# "park", "hill") count only capitalised, so "678, call when at the gate" is no address.
_SUFFIX_LOWER_OK = "street|st\\.?|avenue|ave\\.?|road|rd\\.?|boulevard|blvd\\.?|lane|ln\\.?|drive|highway|hwy|straße|strasse|str\\."
_SUFFIX_GLUED = (
    "straße|strasse|str\\.|weg|allee|platz|gasse|ring|damm|ufer|straat|laan|gracht|plein|kade|singel|dijk|steeg|"
    "dreef|markt|burgwal|gatan|vägen|gata|gade|vej|gate|veien|vegen|katu|tie|polku|kuja|utca|vegur|stræti|braut|"
    "stígur|tänav|iela|gatvė|ulica|cesta|straa|stroos"
)
_UNIT = (
    r"(?:apt\.?|apartment|apto\.?|apartamento|appartement|app\.?|appt\.?|suite|ste\.?|unit|flat|floor|fl\.?|"
    r"room|rm\.?|piso|planta|puerta|pta\.?|esc\.?|escalera|bloco|bloque|bl\.?|dpto\.?|depto\.?|departamento|"
    r"wohnung|whg\.?|etage|étage|stock|og|lok\.?|m\.|mieszkanie|interior|interno|int\.?|scala|piano|casa|lote|lot|plot|"
    r"bâtiment|batiment|bât\.?|bat\.|"
    r"house|hse|house no\.?|villa|dorm|bldg\.?|building|tower|torre|blk\.?|block|daire:?|d:|kat:?|lgh|bus|boîte|"
    r"no\.?|no:|nr\.?|nº|n°|#|kamar|phòng|quarto|habitación|hab\.|chambre|zimmer|stanza|oda|pmb|"
    r"д\.|дом|кв\.|квартира|корп\.|стр\.)"
)
_UNIT_PHRASE = rf"(?:{_UNIT}\s*[A-Za-z]?\d{{1,5}}[A-Za-z]?(?:[-/]\d{{1,4}}[A-Za-z]?)?|\d{{1,2}}F\b|\d{{1,3}}(?:st|nd|rd|th|º|ª|°|\.)?\s*(?:floor|fl\.?|piso|andar|etage|étage|stock|og)(?:\s+(?:links|rechts|mitte|li|re))?|\d{{1,3}}\s?[º°ª]\s?[A-Za-z]?|{_UNIT}\s+[A-Z]\b)"
_POSTCODES = (
    r"\d{5}-\d{3}",  # Brazil
    r"\d{5}(?:-\d{4})?",  # US, DE, FR, ES, IT, MX...
    r"[A-Z]{1,2}\d[A-Z\d]?\s?\d[ABD-HJLNP-UW-Z]{2}",  # UK
    r"[A-Z]\d[A-Z]\s?\d[A-Z]\d",  # Canada
    r"[AC-FHKNPRTV-Y]\d{2}\s?[AC-FHKNPRTV-Y0-9]{4}",  # Ireland (Eircode)
    r"\d{4}\s?[A-Z]{2}",  # Netherlands
    r"\d{3} \d{2}",  # Greece, Sweden, Czechia, Slovakia
    r"\d{4}-\d{3}",  # Portugal
    r"\d{2}-\d{3}",  # Poland
    r"〒?\s?\d{3}-\d{4}",  # Japan
    r"\d{3}\s?\d{3}",  # India
    r"\(?[A-Z]\d{4}[A-Z]{3}\)?",  # Argentina (CPA)
    r"\d{4,6}",  # many others
)
_POSTCODE = "(?:" + "|".join(_POSTCODES) + ")"

_CORE_PARTS = (
        # type first, then name, then number: Rua das Flores 123 / ulica Marszałkowska 10 / Via Roma, 5
        rf"(?i:\b(?:{_PREFIX_TYPES}))\s+(?:(?i:{_LINK})\s+)*(?:{_WORD}|\d{{1,2}}(?=\s+(?i:{_LINK})\s))(?:\s+(?:(?i:{_LINK})\s+)*{_WORD}){{0,4}}?,?\s+(?:(?i:n[º°o]|no:|nr|д|дом)\.?\s*)?{_NUM}(?![\w-])",
        # Colombia and neighbours: Carrera 7 # 71-21 / Calle 26 No. 13-19 / Cl. 80 Sur # 24-10
        r"(?i:\b(?:carrera|cra\.?|kr\.?|calle|cl\.?|avenida(?: calle| carrera)?|av\.?|ak|ac|diagonal|dg\.?|transversal|tv\.?))"
        r"\s+\d{1,3}\s?[A-Za-z]?(?:\s(?:bis|sur|este|norte))?\s*(?:#|(?i:no\.?|n[º°]))\s*\d{1,3}\s?[A-Za-z]?\s*-\s*\d{1,3}\b",
        # a street word then the number, in English as some countries write it: Street 14 / Road 5
        r"(?<![\w-])(?:Street|Road|St\.?|Rd\.?|Lane|Avenue|Ave\.?|Soi|Alley)\s+\d{1,4}[A-Za-z]?\b(?=\s*,)",
        # Japan in Latin letters: 1-chōme-1-2 Oshiage / 3-chome-5 Sakae; Korea: Yanghwa-ro 45, Teheran-ro 152
        rf"\b\d{{1,2}}-ch[oō]me(?:-\d{{1,4}}){{1,2}}\s+{_CAP}",
        rf"\b{_CAP}-(?:ro|gil|daero|dong)\s+\d{{1,4}}(?:-\d{{1,4}})?\b",
        # Thailand: 99/12 ซอยสุขุมวิท 31 แขวง… เขต… 10110
        r"\b\d{1,5}(?:/\d{1,4})?\s*(?:หมู่\s*\d+\s*)?(?:ซอย|ซ\.|ถนน|ถ\.|หมู่บ้าน|ตำบล|ต\.|แขวง)"
        # on to its post code when one follows in the Thai words (addresses leave spaces between their pieces)
        r"(?:[\u0e00-\u0e7f\d/ .]{0,100}?(?<![\d])\d{5}(?!\d)|[\u0e00-\u0e7f\d/.]*)",
        # a named road opening a message, without a number: "Ngong Road, Karen, Nairobi"
        rf"^\s*(?:{_CAP}\s+){{1,3}}(?:Road|Rd\.?|Street|St\.?|Avenue|Ave\.?|Lane|Drive|Highway|Marg)(?=\s*,)",
        # parcel lockers: Packstation 174 / Paczkomat WAW12A
        r"(?i:\b(?:packstation|postfiliale|paczkomat|pakketautomaat|parcel locker|amazon locker)\s*[A-Z]{0,3}\d{1,4}[A-Z]?\b)",
        # number, then type first: 12 rue de la Paix / 45, avenida Paulista
        rf"\b{_NUM},?\s+(?i:\b(?:{_PREFIX_TYPES}))\s+(?:(?i:{_LINK})\s+)*{_WORD}(?:\s+(?:(?i:{_LINK})\s+)*{_CAP}){{0,3}}",
        # number, then name, then a street word: 221B Baker Street / 45 adeola odeku street
        rf"\b{_NUM}\s+(?:{_WORD}\s+){{1,4}}?(?:(?i:{_SUFFIX_LOWER_OK})|(?=[A-Z])(?i:{_SUFFIX_WORDS}))(?![\w])",
        # glued suffix, then number: Hauptstraße 5 / Prinsengracht 263 / Drottninggatan 12
        rf"\b{_L}+(?i:{_SUFFIX_GLUED})\s+(?:(?i:no|nr|nº)[:.]?\s*)?{_NUM}(?![\w-])",
        # name words, a street word, a number: Berliner Straße 5 / Adeola Odeku Street 12
        rf"\b(?:{_CAP}\s+){{1,3}}(?i:(?:{_SUFFIX_WORDS}))\s+(?:(?i:no|nr|nº)[:.]?\s*)?{_NUM}(?![\w-])",
        # Japan: 2-21-1 Shibuya / 東京都渋谷区渋谷2-21-1 / 〒150-0002
        rf"\b\d{{1,4}}-\d{{1,4}}-\d{{1,4}}\s+{_CAP}(?:-(?:ku|shi|cho|machi|gun))?"
        rf"|\b\d{{1,4}}-\d{{1,4}}\s+{_CAP}-(?:ku|shi|cho|machi|gun)",
        r"(?:〒\s?\d{3}-\d{4}\s*)?[\u3040-\u30ff\u4e00-\u9fff]{2,}\d{1,4}(?:[-‐−ー丁目番地号の]\d{1,4}){1,3}[号]?",
        # rural routes, PO boxes, GPO boxes
        r"(?i:\b(?:rr|r\.r\.|rural route|hc|star route)\s*\d{1,4}(?:,?\s*box\s*\d{1,5})?)",
        r"(?i:\b(?:p\.?\s?o\.?\s?box|post office box|postfach|apartado(?: postal)?|caixa postal|bp|b\.p\.|gpo box|"
        r"pmb|p\.m\.b\.?|private (?:mail )?bag|locked bag|postbus|casilla(?: de correo)?|postboks|box)"
        r"\s*\d{1,8}(?:[- ]\d{2,5})*)",
        # a named road with the unit before it: Flat 302, Sai Residency, MG Road
        rf"(?i:\b{_UNIT})\s*[A-Za-z]?\d{{1,5}}[A-Za-z]?,\s+(?:{_CAP}\s+){{0,3}}{_CAP},\s+(?:{_CAP}\s+){{0,2}}(?i:(?:{_SUFFIX_WORDS}))(?![\w])",
)
_CORE = re.compile("|".join(_CORE_PARTS))
_STOPWORDS = ("(?i:and|or|but|please|pls|thanks|thank|thx|by|before|after|on|at|for|asap|ok|if|so|the|it|is|i|my|we|you|"
              "can|could|will|would|ship|send|deliver|tomorrow|today|call|ring|text|leave|door|gate|bei|por|per|para)")
_AFTER = re.compile(
    rf"(?:,\s*|\s+|\s*-\s*)(?:(?i:{_UNIT_PHRASE})|{_POSTCODE}(?:\s+{_CAP}(?:[ -/]{_CAP}){{0,2}}|\s+(?!{_STOPWORDS}\b){_WORD}"
    rf"(?:\s(?!{_STOPWORDS}\b){_WORD})?)?|{_CAP}(?:[ -]{_CAP}){{0,2}}(?:\s\d{{1,2}})?)(?![\w])"
)
_BEFORE = re.compile(rf"(?:{_UNIT_PHRASE}|{_CAP}(?:\s+{_CAP}){{0,2}})\s*,\s*$")
_STOP_AFTER = re.compile(r"(?i)^(?:,\s*|\s+)(?:and|or|but|please|thanks|thank|pls|by|before|after|on|at|for|asap|ok|"
                         r"if|so|the|it|is|i|my|we|you|can|could|will|would|ship|send|deliver|tomorrow|today|"
                         r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b")


# Anchors besides street cores: a post code next to a city, a unit, CJK / Hangul addresses.
_UK_AREAS = (
    "AB|AL|BA|BB|BD|BH|BL|BN|BR|BS|BT|B|CA|CB|CF|CH|CM|CO|CR|CT|CV|CW|DA|DD|DE|DG|DH|DL|DN|DT|DY|EC|EH|EN|EX|E|FK|FY|"
    "GL|GU|G|HA|HD|HG|HP|HR|HS|HU|HX|IG|IP|IV|KA|KT|KW|KY|LA|LD|LE|LL|LN|LS|LU|L|ME|MK|ML|M|NE|NG|NN|NP|NR|NW|N|OL|OX|"
    "PA|PE|PH|PL|PO|PR|RG|RH|RM|SA|SE|SG|SK|SL|SM|SN|SO|SP|SR|SS|ST|SW|SY|S|TA|TD|TF|TN|TQ|TR|TS|TW|UB|WA|WC|WD|WF|WN|"
    "WR|WS|WV|W|YO|ZE"
)
_AU_STATES = "NSW|VIC|QLD|WA|SA|TAS|ACT|NT"
_ANCHOR = re.compile(
    "|".join((
        rf"\b(?:\d{{5}}|\d{{3}} \d{{2}}|\d{{2}}-\d{{3}}|\d{{4}}-\d{{3}}|\d{{5}}-\d{{3}}|\d{{4}} ?[A-Z]{{2}})\s+{_CAP}",
        rf"{_CAP}(?:[ ,]+(?:[A-Z]{{2}}|{_AU_STATES}))?,?\s+(?:\d{{6}}|\d{{5}}(?:-\d{{4}})?|\d{{5}}-\d{{3}}|\d{{3}} \d{{2}})\b(?![ -]?\d)",
        rf"\b(?:{_AU_STATES})\s+\d{{4}}\b",
        r"(?:^|(?<=[\s,]))\d{1,2}\.\s?(?:OG|Obergeschoss|Etage|Stock|étage|piso|andar|verdieping|piętro)\b",  # "3. OG"
        r"\([A-Z]\d{4}[A-Z]{3}\)",  # Argentine CPA in brackets: "CABA (C1425BGH)"
        rf"(?<=, )\d{{4}}\s+{_CAP}",  # "Hannoluohkká 14, 9520 Guovdageaidnu"
        rf"\b{_CAP}\s+\d{{4}},\s+{_CAP}(?:\s+{_CAP})?",  # "Rondebosch 7700, Cape Town"
        rf"\b(?:{_UK_AREAS})\d[A-Z\d]?\s\d[ABD-HJLNP-UW-Z]{{2}}\b",  # UK post code of a real area, with its space
        r"\b[A-Z]{2}\s+[A-Z]\d[A-Z]\s?\d[A-Z]\d\b",
        rf"(?i:\b{_UNIT})\s*[A-Za-z]?\d{{1,5}}[A-Za-z]?(?:/\d{{1,5}})?(?=\s*,)",
        r"(?i:\b(?:apt|apartment|flat|unit|suite|apto|wohnung|whg|piso|dpto|depto|hse|house no|villa|dorm)\.?"
        r"\s*#?\d{1,5}[A-Za-z]?\b|\b(?:room|rm)\.?\s*#?\d{3,5}[A-Za-z]?\b)",
        r"(?:〒\s?\d{3}-\d{4}\s*)?[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]*[\u4e00-\u9fff\uac00-\ud7af]"
        r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af\d\-‐−]*\d+[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af\d\-‐− ,，]*",
        # space-separated CJK / Hangul address words with numbers: 서울특별시 마포구 와우산로 94, 302동 1104호 (04066)
        r"[\u4e00-\u9fff\uac00-\ud7af]+(?:[ ,，]+(?:[\u4e00-\u9fff\uac00-\ud7af]+|\d[\d\-]*[\u4e00-\u9fff\uac00-\ud7af]*"
        r"|\(\d{5}\)))+",
    ))
)
_CJK_MARK = re.compile(r"[市区縣县都道府省路街号號室楼樓丁番동호로길구시]")
_SEG_STOP = re.compile(r"(?i)^\s*(?:and|or|but|please|pls|thanks|thank|thx|call|ring|text|the|it|is|i|i'm|my|we|she|he|"
                       r"she's|he's|they|you|can|could|will|would|ship|send|deliver|before|after|by|for|asap|ok|if|so|"
                       r"leave|door|gate|tomorrow|today|mon|tue|wed|thu|fri|sat|sun|monday|tuesday|wednesday|thursday|"
                       r"friday|saturday|sunday|bei|por|per|para|merci|gracias|danke|obrigad[oa]|grazie|谢谢)\b"
                       # a phone or e-mail cue ("Oslo. Tlf 412 55 093"), not "Tel Aviv"
                       r"|^\s*(?:tel|tlf|tfn|phone|mob|mobile|cell|ph|fon|telefon|telefone|teléfono|telefono|whatsapp|"
                       r"e-?mail|mail)\b\.?:?\s*(?:[+(\d]|no\b|nr\b|number\b|$)")
_BUILDINGS = ("house|court|hall|tower|towers|building|residency|residence|apartments|mansions|plaza|centre|center|"
              "block|estate|heights|lodge|villa|villas|complex|condominium|condo|gardens|chambers|manor")
_SEG_WORD = re.compile(r"[^\s,，]+")


def _address_like(seg: str, lower: bool = False) -> bool:
    """A comma-separated piece that can continue an address: a unit, a post code, a short place name.
    In a message written all in lower case (``lower``), a lower-case word may be a place name too."""
    if lower:
        seg = " ".join(w if _SEG_STOP.match(w) or w in _LOWER_OK else w[:1].upper() + w[1:] for w in seg.split(" "))
    words = _SEG_WORD.findall(seg)
    if not words or len(words) > 5 or _SEG_STOP.match(seg):
        return False
    if re.fullmatch(rf"\s*(?:{_UNIT_PHRASE}|{_POSTCODE})(?:\s+\S+)?\s*", seg, flags=re.IGNORECASE):
        return True
    if any(c.isdigit() for c in seg):
        # "Hse 12", "piso 4 depto B", "3º izq" yes; "size 10 black please" no
        return len(words) <= 4 and all(
            any(c.isdigit() for c in w) or w[0].isupper() or not w[0].isascii() or w.lower() in _LOWER_OK
            or re.fullmatch(rf"(?i){_UNIT}", w) is not None or not w[0].isalpha() for w in words)
    return all(w[0].isupper() or not w[0].isascii() or w.lower() in _LOWER_OK for w in words if w[0].isalpha()) \
        and seg[:1] != "" and sum(w[0].isupper() or not w[0].isascii() for w in words if w[0].isalpha()) >= 1


_LOWER_OK = frozenset({"de", "del", "la", "el", "im", "am", "an", "der", "di", "da", "do", "dos", "das", "izq", "dcha",
                       "izquierda", "derecha", "bis", "ter", "city", "sur", "upon", "on", "le", "les", "y", "e"})


def _segment(rest: str) -> str:
    """The piece of ``rest`` up to a comma or sentence end; a full stop after an abbreviation or a number
    ("Oax.", "ul.", "Brgy.", "2. Stock") does not end it."""
    pos = 0
    while True:
        m = re.match(r"[^,，.;:!?()\n—–]*", rest[pos:])
        pos += m.end() if m else 0
        if pos < len(rest) and rest[pos] == "." and pos + 1 < len(rest) and rest[pos + 1].isalnum():
            pos += 1  # "TP.HCM"
            continue
        if pos < len(rest) and rest[pos] == "." and pos + 1 < len(rest) and rest[pos + 1] == " ":
            word = re.search(r"(\S+)$", rest[:pos])
            if word is not None and (len(word.group(1)) <= 4 or word.group(1).isdigit()):
                pos += 1
                continue
        return rest[:pos]


def _caps(seg: str) -> str:
    """``seg`` with each word capitalised but stop words (same length): a lower-case message's place names."""
    return re.sub(r"[^\W\d_]+", lambda m: m.group() if _SEG_STOP.match(m.group()) or m.group() in _LOWER_OK
                  else m.group()[:1].upper() + m.group()[1:], seg)


_BACK_CUE = re.compile(r"(?i)(?:^|[:：]|\b(?:is|to|at|address|addr\.?|adres\w*|delivery|shipping|ship|send|deliver|"
                       r"billing|home|office|flat|house))\s*[:：]?\s*$")


_WINDOW = 200
_COMMA_BEFORE = re.compile(r"[,，]\s*$")
_UNIT_BEFORE = re.compile(rf"(?i)\b{_UNIT}\s*$")
_PREMISES_BEFORE = re.compile(r"(?i)\b(?:shop|office|stall|kiosk|store|gala|godown|warehouse)\s+$")
_CITY_BEFORE = re.compile(rf"{_CAP}(?:\s+{_CAP}){{0,2}},?\s*$")


def _extend(text: str, start: int, end: int) -> tuple[int, int]:
    """Grow [start, end) over address-like comma-separated pieces on either side (a few at most)."""
    # Every look is bounded to a window of _WINDOW characters, so long messages cost linear time (an unbounded
    # slice per match made "Flat 3, " * 800 take seconds).
    lower = not re.search(r"\b[A-Z][^\W\d_]", text[start : start + _WINDOW])  # "calle 9 de julio 1540, piso 4 depto B"
    for _ in range(6):
        m = re.match(r"\.?\s*[,，]\s*|\s+[-—–]\s+|\s*/\s*|\s+", text[end : end + _WINDOW])
        if m is None:
            break
        rest = text[end + m.end() : end + m.end() + _WINDOW]
        seg = _segment(rest)
        if not seg.strip():
            break
        if not _address_like(seg, lower):
            # a piece like "NY 11226 please": take its address-shaped head only
            head = re.match(rf"(?:(?i:{_UNIT_PHRASE})|(?:{_WORD}\s+){{0,3}}(?i:{_POSTCODE})(?:\s+{_CAP})?"
                            rf"|{_CAP}(?:\s+{_CAP}){{0,2}}(?=\s+(?:[a-z]|$)))(?![\w])", _caps(seg) if lower else seg)
            if head is not None and not head.group()[:1].isdigit() and _SEG_STOP.match(head.group()):
                break
            if head is None or (m.group().strip() == "" and not head):
                break
            end = end + m.end() + head.end()
            continue
        end = end + m.end() + len(seg.rstrip())
    unit = _UNIT_BEFORE.search(text, max(0, start - _WINDOW), start)
    if unit is not None:
        start = unit.start()
    premises = _PREMISES_BEFORE.search(text, max(0, start - 20), start)
    if premises is not None and re.match(r"(?i)(?:no\.?|nr\.?|#|\d)", text[start : start + 3]):
        start = premises.start()  # "Shop No. 14, Linking Road, …"
    return _extend_back(text, start, lower), end


def _extend_back(text: str, start: int, lower: bool) -> int:
    """Grow an address start back over comma-separated pieces: units and numbered pieces at once; short
    place names ("Bandra West", "Zamalek") when a unit or a number, a cue or the message start comes before."""
    pending = start
    for _ in range(5):
        m = _COMMA_BEFORE.search(text, max(0, pending - _WINDOW), pending)
        if m is None:
            break
        floor = max(0, m.start() - _WINDOW)
        seg_start = max(floor, max(text.rfind(c, floor, m.start()) for c in ",，:;!?\n(") + 1)
        seg = text[seg_start:m.start()]
        unit = re.search(rf"(?i)\b{_UNIT}\s*[A-Za-z]?\d{{1,5}}[A-Za-z]?(?:/\d+)?\s*$|\b{_UNIT}\s+[A-Z]\s*$", seg)
        if unit is not None:
            building = re.search(rf"(?:{_CAP}\s+){{0,2}}{_CAP}\s+$", seg[: unit.start()])
            if building is not None and re.search(rf"(?i)\b(?:{_BUILDINGS}|hall|dorm|residences?)\s+$", building.group()):
                unit_start = seg_start + building.start()  # "Hopi Hall Rm 214"
            else:
                unit_start = seg_start + unit.start()
            start = pending = unit_start
            continue
        if _address_like(seg, lower) and len(_SEG_WORD.findall(seg)) <= 4 and (
                (re.search(r"\d", seg) and re.search(r"[^\W\d_]", seg)) or re.search(rf"(?i)\b(?:{_BUILDINGS})\s*$", seg)):
            start = pending = seg_start + len(seg) - len(seg.lstrip())  # "Flat 12, Kestrel House, 8 Pilgrim Street"
            continue
        tail = re.search(rf"(?:{_CAP}\s+){{0,2}}{_CAP}\s*$", _caps(seg) if lower else seg)
        if tail is None or _SEG_STOP.match(tail.group()) or not _address_like(tail.group(), lower):
            break
        pending = seg_start + tail.start()
        if _BACK_CUE.search(text, max(0, pending - _WINDOW), pending):
            start = pending  # "Zamalek, Cairo 11211" at the start; "delivery is Kilimani, …"
    return start


_CUE = re.compile(
    r"(?i:\b(?:(?:my |the |delivery |shipping |home |billing |new )?address(?: is)?|addr\.?|dirección|direccion|"
    r"endereço|endereco|indirizzo|adresse|adres|adresa|lieferadresse|адрес|адреса|διεύθυνση|delivery is|"
    r"deliver(?: it)? to|ship(?: it)? to|send(?: it)? to|giao tới|gửi tới|enviar a|livrer à|liefern an|"
    r"lieferung an|i live at|i'm at|i am at|we live at|located at|vivo en|moro na|abito in|j'habite|"
    r"(?:should |can |must )?go to|billing(?: address)?(?: is)?|(?:my |the )?office(?: is\b|(?=\s*[:：]))|invoices? to|"
    r"mail to)\b"
    r"|주소는?|地址|住所|ที่อยู่)"
    r"\s*[:：]?\s*"
)


def _after_cue(text: str) -> Iterator[tuple[int, int]]:
    """The comma-separated pieces after an address cue, when one of the first three holds a digit."""
    for m in _CUE.finditer(text):
        start = m.end()
        colon = re.match(r"[^:：\n]{0,25}[:：]\s*", text[start:])
        if colon is not None:
            start += colon.end()  # "adresse de livraison : 14 rue …"
        pieces = re.findall(r"[^,，\n]+", text[start:])[:3]
        if not pieces or not any(any(c.isdigit() for c in p) for p in pieces) or _SEG_STOP.match(pieces[0]):
            continue
        # "send it to Maria Garcia, 12 Main St": a name first is not part of the address
        first = _segment(text[start:])
        if not re.search(rf"\d|(?i:\b(?:{_UNIT}|{_PREFIX_TYPES}|{_SUFFIX_WORDS})(?!\w))", first):
            continue
        end = start + len(_segment(text[start:]).rstrip())
        if end > start:
            yield _extend(text, start, end)


_HANGUL = re.compile(r"[\uac00-\ud7af]")
# A Korean address word: a province, city, district, town or road name by its ending, or a numbered building or unit
_HANGUL_PLACE = re.compile(r"[\uac00-\ud7af]+(?:특별시|광역시|시|도|구|군|읍|면)|[\uac00-\ud7af]{2,}(?:로|길)|\d+(?:-\d+)?(?:동|호|층|번지)(?:으로|로|에|까지)?|\(\d{5}\)")


# A number after a CamelCase or mixed word is a model's ("PowerCore 10000"); after a trip word, a train's or a
# flight's ("Frecciarossa 9521", "train is the Vande Bharat 22436", "uçuşum PC 1172").
_MODEL_NUMBER = re.compile(r"\b[A-Z][a-z]+[A-Z][A-Za-z]*\s+\d")
"""A CamelCase word before a number: a model's name and number ("PowerCore 10000")."""
TRIP_OR_MODEL_BEFORE = re.compile(
    r"(?i)\b(?:train|trains|flight|flights|flug|vuelo|voo|vol|volo|uçuş\w*|bus|coach|ferry|platform|"
    r"carriage|frecciarossa|frecciargento|italo|eurostar|thalys|tgv|shinkansen|ktx|"
    r"amtrak|acela|rajdhani|shatabdi|vande|sgr|lego|model|edition|series|version)\b[^,.;:!?\n]{0,25}$")


def _hangul_trim(text: str, s: int, e: int) -> tuple[int, int] | None:
    """A space-separated Hangul anchor cut to its address words: from the first province / city / district / road
    word to the last word with a number or such an ending ("주문번호 20240517 배송지를 서울특별시 마포구 월드컵북로 396,
    101동 1203호 로 바꿔주세요" -> "서울특별시 … 1203호"); None without a road or a numbered word."""
    words = [(m.start() + s, m.end() + s, m.group()) for m in re.finditer(r"[^\s,，]+", text[s:e])]
    first = next((k for k, w in enumerate(words) if _HANGUL_PLACE.fullmatch(w[2]) and not w[2][:1].isdigit()), None)
    if first is None:
        return None
    last = max(k for k, w in enumerate(words) if k >= first and (
        _HANGUL_PLACE.fullmatch(w[2]) or re.fullmatch(r"\d+(?:-\d+)?", w[2])))
    kept = [w[2] for w in words[first:last + 1]]
    if not any(any(c.isdigit() for c in w) for w in kept) or len(kept) < 2:
        return None
    particle = re.search(r"(?<=[동호층지])(?:으로|로|에|까지)$", words[last][2])  # "1503호로 보내주세요"
    return words[first][0], words[last][1] - (len(particle.group()) if particle else 0)


def find_addresses(text: str) -> Iterator[tuple[int, int]]:
    """Character spans of street addresses (cores extended over unit, post code, city, country)."""
    yield from _after_cue(text)
    for m in _CORE.finditer(text):
        start, end = m.start(), m.end()
        for _ in range(6):  # space-joined pieces ("… Box 10543-00100 Nairobi", "… Ave Apt 6F"); commas: _extend
            nxt = _AFTER.match(text, end)
            if nxt is None or nxt.group()[:1] == "," or _STOP_AFTER.match(text[end:nxt.end()]):
                break
            end = nxt.end()
        before = _BEFORE.search(text[max(0, start - 60):start])
        if before is not None and re.match(rf"(?i){_UNIT}", before.group()):
            start = start - (len(text[max(0, start - 60):start]) - before.start())
        yield _extend(text, start, end)
    for m in _ANCHOR.finditer(text):
        raw = m.group()
        if _MODEL_NUMBER.search(raw) or TRIP_OR_MODEL_BEFORE.search(text, max(0, m.start() - 40), m.start()):
            continue  # "PowerCore 10000", "the Vande Bharat 22436", "flight PC 1172": a model's or a trip's number
        if _SEG_STOP.match(raw):
            continue  # "I'm 004417 in your loyalty thing": a pronoun before a number is no place before a post code
        if not raw.isascii() and not raw[:1].isalpha() and not raw.startswith("〒") and not _CJK_MARK.search(raw):
            continue
        if not raw.isascii() and raw[:1] not in "〒" and not raw[:1].isdigit() and not _CJK_MARK.search(raw) \
                and not raw[:1].isupper():
            continue
        if re.search(r"[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]", raw) and (
                len(set(_CJK_MARK.findall(raw))) < (2 if " " in raw.strip() else 1) or not re.search(r"\d", raw)):
            continue
        s, e = m.start(), m.end() - (len(raw) - len(raw.rstrip(" ,，")))
        if _HANGUL.search(raw) and " " in raw.strip():
            trimmed = _hangul_trim(text, s, e)
            if trimmed is not None:
                yield trimmed  # the pieces after it are not grown over: Korean particles and verbs follow
            continue
        city = _CITY_BEFORE.search(text, max(0, s - _WINDOW), s)
        if city is not None and (re.match(r"[A-Z]{2,3}\s", raw) or re.fullmatch(r"[A-Z]{1,2}\d[A-Z\d]?\s\d[A-Z]{2}", raw)):
            s = city.start()  # "Vancouver, BC V5T 3J9", "Edinburgh EH6 8RG"
        yield _extend(text, s, e)
