"""What a trip request's own words say about its day, hours, start and transport: the travel fallback's reading of
text sent as a chat frontend sends it (no structured constraints).

Read generically, not off the world's templates: a weekday named anywhere (full, three-letter or plural), the first
time range ("9:00-18:00", "9:30–6pm", "from 10am to 4 pm", "between 9 and 17"), the lodging named in the text (the
city's hotel and hostel names; the longest name wins, and the day ends there too unless a second lodging is named
after it), and the transport words (walk, on foot; taxi, car, drive; metro, bus, tram, public transport). What the
words do not say stays unset; structured constraints a frontend sends win over the words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from apps.travel.checker import Poi

_DAYS = {"mon": "mon", "monday": "mon", "tue": "tue", "tues": "tue", "tuesday": "tue", "wed": "wed",
         "wednesday": "wed", "thu": "thu", "thur": "thu", "thurs": "thu", "thursday": "thu", "fri": "fri",
         "friday": "fri", "sat": "sat", "saturday": "sat", "sun": "sun", "sunday": "sun"}
_DAY = re.compile(r"\b(" + "|".join(sorted(_DAYS, key=len, reverse=True)) + r")s?\b\.?", re.I)
_CLOCK = r"(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?"
_RANGE = re.compile(r"\b" + _CLOCK + r"\s*(?:-|–|—|→|to|till|until|up to|up till|up until|through to|thru to|through|"
                    r"thru|and)\s*" +
                    _CLOCK + r"(?![\d%])", re.I)
_CLOCK_WORDS = ((re.compile(r"\bmidnight\b", re.I), "24:00"), (re.compile(r"\bnoon\b|\bmidday\b", re.I), "12:00"))
_MODES = (("walk", re.compile(r"\b(?:walk(?:s|ing)?|on foot|by foot|foot|feet|pedestrian|walkable|stroll(?:ing)?|"
                              r"wander(?:ing)?|hoof it|on feet|"
                              r"walking distance|on our feet|by legs?)\b", re.I)),
          ("taxi", re.compile(r"\b(?:taxis?|cabs?|cabbing|ubering|uber|lyft|bolt|grab|by car|drive|driving|"
                              r"ride[- ]?hail(?:ing)?|"
                              r"rideshares?|car service|chauffeur)\b", re.I)),
          ("transit", re.compile(r"\b(?:metro|subway|bus(?:es)?|trams?|public transport(?:ation)?|public transit|"
                                 r"transit|underground|trains?|light rail|day pass|travel ?card|the tube|"
                                 r"public transports)\b", re.I)))
_LODGING = ("lodging",)


def clock_minutes(hour: str, minute: str | None, half: str | None) -> int | None:
    """Minutes after midnight of a clock time's parts ("6", "30", "pm" -> 1110); None when they are no time."""
    return _minutes(hour, minute, half)


def _minutes(hour: str, minute: str | None, half: str | None) -> int | None:
    h, m = int(hour), int(minute or 0)
    half = (half or "").lower().replace(".", "")
    if m > 59 or h > 24 or (half and not 1 <= h <= 12):
        return None
    if half == "pm" and h != 12:
        h += 12
    elif half == "am" and h == 12:
        h = 0
    return h * 60 + m


def time_window(text: str) -> tuple[int, int] | None:
    """The first ``start-end`` time range in ``text`` as minutes after midnight, or None. An am / pm on the end only
    applies to the start too when that keeps the start first ("1-5pm" is 13:00-17:00, "9-5pm" 9:00-17:00); an end
    before its start without am / pm is read in the afternoon ("9 to 5" is 9:00-17:00). Bare numbers ("2 to 4
    stops") are a time range only after "from" or "between"."""
    for word, clock in _CLOCK_WORDS:
        text = word.sub(clock, text)
    text = _CLOCK_ARTICLE.sub("", text)  # "from the 9am until the 18:00" (an article before a time, as ESL writes)
    text = _INTERVAL.sub(r"\1 - \2", text)  # "[10am, 14:00]": an interval written as a bracketed pair
    text = re.sub(r"\s*\((?:when|by which|from which|at which)[^()\d]{0,60}\)", "", text)  # "18:00 (when we set out)"
    for m in _RANGE.finditer(text):
        h1, m1, p1, h2, m2, p2 = m.groups()
        bare = m1 is None and p1 is None and m2 is None and p2 is None
        window_before = text[max(0, m.start() - 50):m.start()]
        if bare and re.search(_STOP + r"\W{0,3}(?:\w+\W+){0,4}?\s*(?:from|between)?\s*$", window_before, re.I):
            continue  # "Visits: between 2 and 3"
        if bare and (not re.search(r"\b(?:from|between)\s*$", text[:m.start()], re.I)
                     or re.match(r"\s*(?:\w+\s+)?" + _STOP, text[m.end():], re.I)):
            continue
        end = _minutes(h2, m2, p2)
        start = _minutes(h1, m1, p1)
        if p1 is None and p2 is not None and end is not None:
            shared = _minutes(h1, m1, p2)
            if shared is not None and shared < end:
                start = shared
        if start is None or end is None:
            continue
        if end == 0 < start:
            end = 24 * 60  # "6:30pm to 12am", "18:30 until 00:00": midnight closing the day
        if end <= start and p2 is None and end + 720 > start:
            end += 720
        if 0 <= start < end <= 24 * 60:
            return start, end
    return _cued_window(text)


_BARE_CLOCK = r"(\d{1,2}(?:[:.h]\d{2})?\s*(?:am|pm)?)"
_INTERVAL = re.compile(r"\[\s*" + _BARE_CLOCK + r"\s*[,;]\s*" + _BARE_CLOCK + r"\s*\]", re.I)
_CLOCK_ARTICLE = re.compile(r"\b(?:the|las|la)\s+(?=\d{1,2}(?:[:.h]\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)?"
                            r"(?![\d%]|[:.]\d))", re.I)
_START_CUE = re.compile(
    r"\b(?:from|starting(?: at| around| from)?|start(?:s|ing)?(?: at| around| from)?|leav(?:e|ing)(?: at)?|"
    r"commenc(?:e|es|ing)(?: at| from)?|start time(?: of| is)?|kick(?:ing|s)? off(?: at)?|get(?:ting)? going(?: at)?|"
    r"set(?:ting)? (?:off|out)(?: at)?|head(?:s|ing)? off(?: at)?|out from|available from|"
    r"(?:start\w*|leav\w*|begin\w*|depart\w*|set(?:ting)? (?:off|out)|head\w* (?:out|off)|go(?:ing)? out)\b"
    r"[^.;!?\d]{0,30}\bat|"
    r"head(?:ing)? out(?: at)?|out the door(?: at)?|begin(?:ning)?(?: at)?|after|kick off(?: at)?|set off(?: at)?|"
    r"go(?:ing)? out(?: at)?|free (?:from|after)|no earlier than|not before|earliest(?: start)?(?: at| is)?|"
    r"depart(?:ure|ing)?(?: at| from)?|out|(?:mon|tues|wednes|thurs|fri|satur|sun)day,?)"
    r"\s*[:=]?\s*(?:about |around |at )?$", re.I)
_START_AFTER_CLOCK = re.compile(r"^\s*(?:onwards?|on\b|and later|or later|\((?:start|starting|departure)\))", re.I)
_END_AFTER_CLOCK = re.compile(r"^\s*(?:\((?:end|finish|finishing|return)\)|is (?:the end|when we (?:need to |have to |"
                              r"must |should )?(?:stop|finish|end|be back)))", re.I)
"""An end time named by what follows it: "… and at 9pm is the end", "21:00 is when we need to stop", "22:00
(finish)"."""
_UNTIL_CUE = re.compile(
    r"\b(?:by|until|till|til|before|no later than|done|done by|back by|finish(?:ed)?(?: by| at)?|"
    r"wrap(?:ped)? up(?: by| at)?|end(?:ing)?(?: by| at| around)?|home by|latest|return(?:ing)? by|curfew(?: is| at)?|"
    r"(?:have|need) to be back(?: at| by)?|conclud(?:e|es|ing)(?: no later than| at| by)?|end time(?: of| is)?|"
    r"hard stop(?: at)?|stop(?:ping)? (?:at|by)|required by|(?:come|get|coming|getting) back(?: at| by)?|"
    r"(?:at )?the latest(?: by| at)?|at latest|"
    r"arriv(?:e|al)(?: required)?(?: by| before)|must be (?:back|there|again)[^.;!?\d]{0,25}?(?: at| by| before)|"
    r"deadline(?: is| of)?)"
    r"\s*[:=]?\s*(?:about |around |at )?$", re.I)
_NOT_BEFORE = re.compile(r"(?:\bnot|n't|\b(?:cant|wont|dont)|\bnever|\bno)\b[^.;,!?\d]{0,25}\bbefore\s*"
                         r"(?:about |around |at )?$", re.I)
"""A start said as what cannot happen earlier: "we won't be ready before 5pm", "can't leave before 10"."""
_ONE_CLOCK = re.compile(r"\b(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?(?![\d%])", re.I)


def _cued_window(text: str) -> tuple[int, int] | None:
    """A start time after a start cue ("from 9am", "leaving at 10:30") and an end time after an end cue ("back
    by 18:00", "done by 5pm"), when the text states no range."""
    start = end = None
    for m in _ONE_CLOCK.finditer(text):
        h, mm, half = m.groups()
        before = text[max(0, m.start() - 40):m.start()]
        if mm is None and half is None and (
                not re.search(r"(?:at|around|about|by|till|until)\s*$", before, re.I)
                or re.match(r"\s*(?:(?:-|to|or|and)\s*\d{1,2}\s*)?(?:\w+\s+)?" + _STOP, text[m.end():], re.I)):
            continue  # a bare number that is not a time ("from 4 to 5 stops")
        minutes = _minutes(h, mm, half)
        if minutes is None:
            continue
        if start is None and (_START_CUE.search(before) or _START_AFTER_CLOCK.match(text[m.end():])
                              or _NOT_BEFORE.search(before)):
            start = minutes
        elif end is None and (_UNTIL_CUE.search(before) or _END_AFTER_CLOCK.match(text[m.end():])):
            end = minutes
    if start is not None and end is not None:
        if end == 0 < start:
            end = 24 * 60  # "back by 12am": midnight
        if end <= start and end < 720 < end + 720:
            end += 720
        if 0 <= start < end <= 24 * 60:
            return start, end
    return None


def weekday(text: str) -> str | None:
    """The first weekday named in ``text`` ("mon" ... "sun"), or None; a three-letter form only capitalised ("Sun",
    not "once the sun goes down")."""
    for m in _DAY.finditer(text):
        word = m.group(1)
        if len(word) > 5 or word[0].isupper() or m.group(0).endswith("."):
            return _DAYS[word.lower()]
    return None


_NOT = re.compile(r"\b(?:no|not|never|without|don'?t|won'?t|can'?t|avoid|hate|instead of|rather than|"
                  r"skip)\b(?!\s+(?:later|earlier|sooner|more|less|fewer|longer|biggie|worries|problem|rush|stress|"
                  r"a dealbreaker|a deal breaker|a must|essential|necessary|required|made of money|mess)\b)"
                  r"[^.;:,!?—–\u2600-\u27bf\U0001f000-\U0001faff]{0,20}$", re.I)
"""A way of getting around ruled out: a negation shortly before it in the same clause (an emoji or a dash ends a clause,
as a full stop does: "no vehicles — walking only"; "no later than 1pm, on foot" and "no biggie, taxis" rule nothing
out)."""


def transport(text: str) -> str | None:
    """``walk``, ``taxi`` or ``transit`` when the words name a way of getting around that they do not rule out ("no
    taxis, we walk" is walking); the first mentioned wins."""
    found = []
    for mode, pattern in _MODES:
        for m in pattern.finditer(text):
            if not _NOT.search(text[max(0, m.start() - 30):m.start()]):
                found.append((m.start(), mode))
                break
    return min(found)[1] if found else None


def lodgings(text: str, pois: Iterable[Poi]) -> list[str]:
    """POI ids of the lodgings whose names ``text`` holds, in the order the text names them (of overlapping names
    the longest)."""
    low = text.lower()
    found = [(m.start(), m.end(), poi.poi_id) for poi in pois if poi.group in _LODGING
             for m in re.finditer(r"\b" + re.escape(poi.name.lower()) + r"\b", low)]
    taken: list[tuple[int, int, str]] = []
    for start, end, poi_id in sorted(found, key=lambda f: (f[0], f[0] - f[1])):
        if all(end <= s or start >= e for s, e, _ in taken) and all(poi_id != p for _, _, p in taken):
            taken.append((start, end, poi_id))
    return [poi_id for _, _, poi_id in taken]


_MONEY = (r"(?:euros?|€|dollars?|bucks|\$|pounds?|quid|£|yen|¥|(?:eur|usd|gbp|jpy|chf|aud|cad|sek|nok|dkk|thb|sgd|hkd|"
          r"cny|inr|mxn|brl|krw|nzd|zar|pln|czk|huf|aed)\b)")
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                 "ten": 10, "a couple of": 2, "a few": 3}
_N = (r"(?<!\d[:.])(?<!level )(?<!lvl )(?<!tier )"  # not the minutes of "18:30", not a price level
      r"(\d{1,2}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")(?![:.]\d|\s*(?:am|pm|h)\b|\d|\s*"
      + _MONEY + r")")
"""A count: not a time ("9:30", "5pm") and not an amount of money ("60 EUR")."""
_STOP = (r"(?:stops?|places?|visits?|spots?|sights?|venues?|attractions?|activit(?:y|ies)|locations?|destinations?|"
         r"sites?|things(?: to (?:do|see))?|points?|pois?|options?|pit stops?|outings?|excursions?)")
_LABEL_HEAD = (r"(?:(?:required |total )?(?:number|count) of |no\.? of |num\.? |# ?)?" + _STOP +
               r"(?: count| number| total| required| wanted| desired| planned| requested)?")
_LABEL = _LABEL_HEAD + r"\s*(?:[:=—–-]|\bis\b)\s*"
_LABEL_BARE = _LABEL_HEAD + r"\s*[:=—–-]?\s*"
_STOPS = (  # (pattern, which numbers are the min and the max)
    (re.compile(_LABEL + r"min(?:imum)?\.?\s*[:=]?\s*" + _N + r"\s*[,;/]?\s*(?:and\s+)?max(?:imum)?\.?\s*[:=]?\s*"
                + _N, re.I), "range"),
    (re.compile(r"\b" + _N + r"\s*(?:<=|≤|=<)\s*" + _LABEL_HEAD + r"\s*(?:<=|≤|=<)\s*" + _N, re.I), "range"),
    (re.compile(_LABEL_BARE + r"(?:from\s+|between\s+)?" + _N + r"\s*(?:-|–|~|\.\.\.?|…|to|or|and|until|till|up to)\s*"
                + _N, re.I), "range"),
    (re.compile(_LABEL + r"(?:exactly |precisely |just |only )?" + _N +
                r"\b(?!\s*(?:min|max|or|at|to|and|-|–|until|till|tops|\+))", re.I), "both"),
    (re.compile(r"\b(?:exactly|precisely)\s+" + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I), "both"),
    (re.compile(r"\b" + _N + r"\s+(?:\w+\s+)?" + _STOP + r"\s+exactly\b", re.I), "both"),
    (re.compile(r"\bat least\s+" + _N + r"\s*(?:and|,)?\s*(?:at most|no more than|max(?:imum)?)\s+" + _N, re.I),
     "range"),
    (re.compile(r"\b" + _N + r"\s+(?:\w+\s+)?" + _STOP + r"\s+(?:max(?:imum)?|min(?:imum)?)\s*(?:and|,)\s*" + _N +
                r"\s+(?:min(?:imum)?|max(?:imum)?)\b", re.I), "range"),
    (re.compile(_LABEL_HEAD + r"(?:[^\w.;!?]+\w+){0,5}?[^\w.;!?]+between\s+" + _N + r"\s+and\s+" + _N, re.I), "range"),
    (re.compile(r"(?:>=|≥|=>)\s*" + _N + r"\s*(?:&|and|,)?\s*(?:<=|≤|=<)\s*" + _N, re.I), "range"),
    (re.compile(r"\bmin(?:imum)?\.?\s*[:=]?\s*" + _N + r"\s*[,;/&]?\s*(?:and\s+)?max(?:imum)?\.?\s*[:=]?\s*" + _N +
                r"\s+(?:\w+\s+)?" + _STOP, re.I), "range"),
    (re.compile(r"\b(?:between\s+|from\s+)?" + _N + r"\s*(?:-|–|~|\.\.\.?|…|to|and|or|until|till|up to|through)\s*"
                + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I), "range"),
)
_MIN_CUE = re.compile(r"\b" + _N + r"\s*\+|(?:>=|≥|=>)\s*" + _N +
                      r"|\b(?:at least|minimum(?: of| is| are| =)?|min\.?(?: is| =)?|no fewer than|no less than|"
                      r"not less than|not under|not less of|(?:a |the )?lower limit(?: of| is)?)\s+" + _N +
                      r"\b|\b" + _N + r"\s+(?:(?!and\b|or\b|to\b)\w+\s+)?(?:" + _STOP +
                      r"\s+)?(?:(?:minimum|min)\b(?!\.?\s*\d)|at (?:the )?(?:very )?least|or more)", re.I)
_MAX_CUE = re.compile(r"(?:<=|≤|=<)\s*" + _N +
                      r"|\b(?:at most|maximum(?: of| is| are| =)?|max\.?(?: is| =)?|no more than|up to|up until|"
                      r"not more (?:than|of)|no more of|not over|maximal|(?:an |with an |the )?upper limit(?: of| is)?|"
                      r"cap(?:ped)?(?: it)? at|top out at)\s+" + _N + r"\b|\b" + _N +
                      r"\s+(?:(?!and\b|or\b|to\b)\w+\s+)?(?:" + _STOP +
                      r"\s+)?(?:tops|max(?:imum)?\b(?!\.?\s*\d)|at (?:the )?(?:very )?most|or (?:fewer|less))", re.I)
_COUNT = re.compile(r"\b" + _N + r"\s+(?:(?!" + _MONEY + r")\w+\s+)?" + _STOP + r"\b", re.I)
_MUST = re.compile(  # not after "not" / "n't" / "no": "though it's not essential", "but is not necessary"
    r"(?<!\bnot )(?<!n't )(?<!\bno )"
    r"\b(?:must|definitely|have to|has to|need(?:s)? to|required?|requirement|don'?t want to miss|include|"
    r"(?:specifically )?requested|not optional|"
    r"(?:can'?t|cannot|won'?t|shouldn'?t|don'?t|do not) (?:miss|skip|leave out|forget)|"
    r"non[- ]?negotiable|essential|priority|"
    r"top of (?:the|my|our) list|for sure|no matter what|absolutely|mandatory|insist|a must|got to|gotta|important|"
    r"make sure|must[- ](?:see|do|have)|bucket list|really want|not leaving without|without fail|require[sd]?|"
    r"necessary|has got to|obligatory|key|main thing|need(?:s|ed)?|compulsory|fixed items?|unless there(?:'s| is| are)|"
    r"disappointed to miss|hate to miss|"
    r"(?:can'?t|cannot) (?:be )?(?:dropped|skipped|missed|leave without|go home without))\b", re.I)


_EXACTLY = re.compile(r"\b(?:not|no|nor)\s+(?:one|a single)\s+(?:stop\s+|place\s+)?(?:more|less|fewer)\s+"
                      r"(?:or|nor|and)\s+(?:one\s+)?(?:less|fewer|more)\b", re.I)


_BACK_REFERENCE = re.compile(r"^\W*(?:\w+\s+){0,4}?(?:that|this|those|these|them|it)\b(?:\s+\w+){0,3}\W*$", re.I)
"""A short sentence whose must points back at the one before: "We really must have that.", "That's a must."."""
_SOFT = re.compile(r"\b(?:if possible|if (?:it|they) (?:works?|fits?)|if you can|ideally|preferably|optional(?:ly)?|"
                   r"not essential|not required|would be nice|nice to have|not a must|bonus)\b", re.I)
"""Words that make "include X" a wish rather than a must."""


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def stop_counts(text: str) -> tuple[int, int] | None:
    """``(min_stops, max_stops)`` the words ask for ("2 to 4 stops", "exactly three places", "at most 5 visits",
    "Stops: min 2, max 4", "maximum 5 locations, minimum 2"), or None; a bound not stated is left to the planner's
    default (1 / 8)."""
    text = _EXACTLY.sub("", text)  # "2 stops, not one more or fewer" restates the count
    for pattern, kind in _STOPS:
        m = pattern.search(text)
        if m is None:
            continue
        numbers = [_number(g) for g in m.groups() if g is not None]
        if max(numbers) > 12:  # no day has that many stops: a number of something else
            continue
        if kind == "both":
            return numbers[0], numbers[0]
        return min(numbers), max(numbers)
    def first_count(pattern: re.Pattern[str]) -> int | None:  # "18+" is an age, not a count of stops
        counts = (_number(next(g for g in m.groups() if g is not None)) for m in pattern.finditer(text))
        return next((n for n in counts if n <= 12), None)

    near_stop = re.search(r"\b" + _STOP + r"\b", text, re.I) is not None
    low = first_count(_MIN_CUE) if near_stop else None
    high = first_count(_MAX_CUE) if near_stop else None
    if low is not None or high is not None:
        lo = low if low is not None else 1
        hi = high if high is not None else max(lo, 8)
        return min(lo, hi), max(lo, hi)
    m = _COUNT.search(text)
    if m is not None:
        return _number(m.group(1)), _number(m.group(1))
    return None


_SYNONYMS = {
    "food": ("eat", "eating", "meal", "lunch", "dinner", "restaurant", "bite", "food", "dining", "feed"),
    "cafe": ("coffee", "café", "espresso", "cup of tea", "tea room", "tearoom", "coffee shop", "flat white", "latte",
             "cappuccino"),
    "nightlife": ("night spot", "nightlife", "night life", "clubbing"),  # "a night out" is the evening itself
    "culture": ("cultural", "culture"), "nature": ("outdoors", "nature", "natural", "greenery", "green space"),
    "shopping": ("shop", "shopping", "retail"), "museum": ("museum", "exhibition", "exhibit"),
    "gallery": ("gallery", "galleries", "art"), "temple": ("temple", "shrine", "pagoda"),
    "castle": ("castle", "fortress", "palace", "fort"), "theatre": ("theatre", "theater", "show", "play", "musical"),
    "ramen": ("ramen", "noodle", "noodles", "ramen shop", "noodle shop", "ramen bar", "noodle bar"),
    "bakery": ("bakery", "bakeries", "pastry", "pastries", "bread", "croissant", "cake shop", "cakes"),
    "street_food": ("street food", "street-food", "food stall", "food stalls", "food truck", "hawker", "street eats"),
    "fine_dining": ("fine dining", "fine-dining", "fancy dinner", "fancy restaurant", "upscale", "michelin",
                    "tasting menu", "gourmet", "high-end restaurant", "upmarket restaurant", "posh restaurant",
                    "luxury restaurant", "fancy meal", "gastronomic", "fancy sit down", "fancy sit-down"),
    "seafood": ("seafood", "sea food", "fish", "oysters", "prawns", "shellfish"),
    "park": ("park",), "garden": ("garden", "gardens", "botanical"),
    "viewpoint": ("viewpoint", "view point", "lookout", "look-out", "overlook", "observation deck", "panorama point",
                  "panorama", "panoramic", "observation point"),
    "beach": ("beach", "seaside", "the sea", "sand"), "market": ("market", "bazaar", "flea market"),
    "mall": ("mall", "shopping centre", "shopping center"), "boutique": ("boutique", "boutiques", "little shops"),
    "bar": ("bar", "pub", "cocktail", "cocktails", "drinks"), "jazz_club": ("jazz",),
    "rooftop_lounge": ("rooftop", "roof-top", "sky bar", "skybar", "lounge on the roof", "bar on the roof",
                       "roof terrace", "roof bar"),
}
"""Other words for the world's categories and groups: a request names "noodles" for ramen, "fish" for seafood."""


def must_categories(text: str, names: Iterable[str]) -> list[str]:
    """The categories or groups (``names``, e.g. "seafood", "museum", "street_food", "culture") named in a sentence
    of ``text`` that says the visit must happen ("it must include seafood", "I definitely want a museum"), in the
    order named; plurals count ("museums")."""
    out: list[tuple[tuple[int, int], str]] = []
    sentences = re.split(r"(?<=[.!?;])\s+|\n", text)  # a sentence, or a line of a list
    for k, sentence in enumerate(sentences):
        cues = [m.group(0).lower() for m in _MUST.finditer(sentence)]
        if not cues and k + 1 < len(sentences) and _MUST.search(sentences[k + 1]) \
                and _BACK_REFERENCE.search(sentences[k + 1]):
            cues = ["that"]  # "Would you please put a park in? We really must have that."
        if not cues or (set(cues) <= {"include"} and _SOFT.search(sentence)):
            continue  # "if possible, include time outdoors"
        low = sentence.lower()
        spans: list[tuple[int, int, str]] = []
        for name in names:
            for form in sorted({name, *_SYNONYMS.get(name, ())}, key=len, reverse=True):
                words = re.escape(form.lower().replace("_", " ")).replace(r"\ ", r"[\s_-]")
                m = re.search(r"\b" + words + r"(?:e?s)?\b", low)
                if m is not None:
                    spans.append((m.start(), m.end(), name))
                    break
        for start, end, name in spans:  # "street food" is not also "food"
            inside = any(s <= start and end <= e and (e - s) > (end - start) for s, e, _ in spans)
            if not inside and all(n != name for _, n in out):
                out.append(((k, start), name))
    return [name for _, name in sorted(out)]


_START_LODGING = re.compile(r"\b(?:stay(?:ing)?|staying in|we'?re at|we are at|base(?:d)?|start(?:ing)?|hotel is|"
                            r"room is|hotel it is|accommodat\w*|lodging|sleep(?:ing)? (?:at|in)|booked (?:at|in|into)|"
                            r"digs are|leave from|leaving from|from|"
                            r"starting point is (?:our|my|the) (?:hotel|hostel|lodging)|"
                            r"check(?:ed)? in(?:to| at)?|currently at|tonight at)\b[^.;]{0,25}$", re.I)
_START_AFTER = re.compile(r"\W{0,3}(?:so )?(?:that'?s|that is|which is|it'?s) (?:our|where we) "
                          r"(?:start|starting point|base|head out|leave|set off)|\W{0,3}where we'?re staying|"
                          r"\W{0,3}where we are staying|"
                          r"\W{0,3}\(?(?:our )?current (?:accommodation|hotel|lodging)", re.I)
_END_AFTER = re.compile(r" after(?=\s*(?:[,.;!]|$|so\b))|"  # "crashing at X after, so end there"
                        r"\W{0,3}(?:\(?\s*(?:our |the )?new (?:accommodation|hotel|lodging|place)|"
                        r"for the (?:second )?night|that night|(?:is )?(?:our )?next (?:hotel|stop|place)|"
                        r"where we (?:sleep|stay|end)|where we(?:'re| are) (?:staying|stopping|sleeping) next)", re.I)
_END_CUE = re.compile(r"\b(?:move to|moving to|moving over to|switch(?:ing)? to|transfer(?:s|ring)? to|relocat\w* to|"
                     r"end @|finish @|arriv(?:e|ing) (?:to|at)|go(?:ing)? to sleep (?:in|at)|conclude at|"
                     r"end of (?:the )?(?:night|day)\s*[=:]|(?:end|finish|final|conclusion|closing) point:?|"
                     r"(?:the )?end is (?:in|at)(?: (?:an?|the)?\s*(?:other|another|new|different|second) "
                     r"(?:hotel|place|lodging),?)?|last point is(?: (?:the|our|a) new (?:hotel|place))?|"
                     r"night at|sleep(?:ing)? at|end up at|spend(?:ing)? the night at|stay(?:ing)? the night at|"
                     r"new (?:hotel|place|lodging)(?: is)?:?|next (?:hotel|place|stay)(?: is)?:?|then|"
                     r"finish(?:ing)?(?: of the day)?(?: must be| will be| is)? (?:at|in)|"
                     r"end of (?:the )?day(?: must be| is)? (?:at|in)|we go (?:in|to)|"
                     r"(?:go|move|head)(?:ing)? (?:on )?to|final destination:?|endpoint:?|end point:?|"
                     r"chang(?:e|ing)(?: hotels?)? to|swap(?:ping)? to|drop (?:us|me) (?:off )?at|drop[- ]?off:?|"
                     r"end(?: point| pt| location| loc)?\s*[:=]|finish\s*:\s*at|destination\s*[:=]|"
                     r"finish:|last stop(?: has to be| must be| is| should be| will be)?:?|final stop:?|afterwards|"
                     r"tonight (?:we )?(?:sleep|stay) (?:at|in)|"
                     r"(?:sleep|stay)(?:ing)? (?:at|in) .{0,10}(?:that|the) night|second (?:hotel|night)(?: at| is)?:?|"
                     r"end(?:s|ing)?(?: the day)? (?:at|in)|finish(?:ing)? at|sleep at|last stop\s*=|"
                      r"check(?:ing)? in(?:to| at)?|back at|over to)\s*(?:the\s+)?$", re.I)
_BUDGET = re.compile(r"(?<![\w.])(?:" + _MONEY + r"\s*(\d+(?:[.,]\d+)?)|(\d+(?:[.,]\d+)?)\s*" + _MONEY + r")", re.I)
"""An amount of money anywhere in the request: a trip request names money only for its budget."""
_LEVEL = re.compile(r"(?<![\w$])(\${1,4})(?![\w$])|"
                    r"\b(?:price )?(?:level|lvl|tier|category)\s*(?:of\s*|<=\s*|≤\s*|max(?:imum)?\s*(?:is\s*|of\s*)?|"
                    r":\s*)?(\d)\b|"
                    r"\b(\d)\s*(?:of|/|out of)\s*4\b", re.I)
_AVOID = re.compile(r"\b(?:avoid(?:ed|ing|s)?|hard pass(?: on)?|won'?t (?:go near|go to|do|visit|set foot)|not doing|"
                    r"unable to (?:manage|do|cope with|handle)|"
                    r"mustn'?t|refuse|no|not(?! (?:a requirement|a must|a rule|required|essential|necessary|needed|"
                    r"mandatory|compulsory|obligatory|important|more|less|later|earlier|over|under|above|below))|without|skip|hate|"
                    r"don'?t (?:like|want|need)|dislike|steer clear|"
                    r"keep (?:us )?(?:away|off)|stay away|none|nothing|never|can'?t stand|not into|rather not|spare us|"
                    r"away from|far from|free of|allergic to|please no|minus|exclude|excluding|except|zero|"
                    r"(?:do|does|did)n'?t|dont|doesnt|can'?t (?:go|take|bring|do)|off[- ]limits|out of the question|"
                    r"ban|banned|forbidden|last thing|rule out|ruled out|exclusions?|exclude[ds]?|unwanted|"
                    r"not wanted|no-go|"
                    r"deal ?breakers?|restrictions?|avoidances?|undesired|unacceptable|not acceptable)\b|-free\b",
                    re.I)
_WANT = re.compile(r"\b(?:(?<!n't )(?<!not )(?<!dont )wants?|ideally|would love|we'?d love|love|bonus|prefer|"
                   r"preferably|nice|like|fan of|into|enjoy|keen on|plus|extra points|appreciate|hoping for|"
                   r"if possible|desirable|optional|not required|not essential|would be nice|nice[- ]to[- ]have|"
                   r"pref(?:erences?)?)\b", re.I)
_TAG_WORDS = {
    "crowded": ("crowded", "crowds", "crowd", "high-crowd", "busy", "packed", "touristy", "tourist traps",
                "tourist trap", "hordes", "full places",
                "queues", "queue", "long lines", "lines", "mobbed", "heaving", "rammed", "throngs", "masses",
                "overcrowded", "high-footfall", "footfall", "high traffic", "heavily visited", "touristic",
                "heavily frequented", "frequented", "tourist sites", "tourist queues", "big crowds",
                "popular with tourists", "full of tourists", "tourists", "many people", "lots of people",
                "too many people", "too much people", "much people", "many tourists",
                "people everywhere", "mass tourism", "waiting in line", "hustle and bustle", "jam-packed", "swarming"),
    "adults-only": ("adults-only", "adults only", "adult only", "adult-only", "18+", "over-18s-only", "over-18s",
                    "over 18s", "over-18", "over 18", "21+",
                    "grown-ups only", "grown-up only", "grown-up", "grownup", "kids not allowed", "no kids allowed",
                    "adult venues", "adult places", "adult", "adults", "children not allowed", "not for kids",
                    "eighteen plus", "18 plus", "over eighteen", "over-eighteen",
                    "not for children", "kid-free", "child-free", "childfree", "over eighteens", "18 and over",
                    "age-restricted", "age restricted", "no minors", "minors", "don't allow kids",
                    "doesn't allow kids", "don't allow children", "kids can't", "children can't", "kids aren't",
                    "children aren't", "not kid", "not child", "not family"),
    "late-night": ("late-night", "late night", "open late"),  # not "after midnight": "arriving not after midnight"
    "free": ("free entry", "free admission", "free of charge", "no entrance fee", "no entry fee"),  # not "free Monday"
    "kid-friendly": ("kid-friendly", "kid friendly", "child-friendly", "family-friendly", "good for kids"),
    "outdoor": ("outdoor", "outdoors", "outside", "open-air", "open air"),
    "indoor": ("indoor", "indoors", "inside"),
}
"""Other words for the tags a request may avoid (and so must not read as a place to visit)."""


def _at(text: str, name: str) -> int:
    return max(0, text.lower().find(name.lower()))


_AVOIDED_AFTER = re.compile(r"[\w\s-]{0,20}?\b(?:(?:be|are|is|should be|must be|to be|get|being)\s+"
                            r"(?:avoided|excluded|ruled out|left out|off[- ]limits)\b|"
                            r"[\w\s-]{0,10}?\W{1,3}(?:please |pls )?avoid(?: them| those| it)?\W*$)")


_WANT_WORDS = {
    "view": ("view", "views", "scenic", "vista", "vistas", "panorama", "panoramas"),
    "historic": ("history", "historic", "historical", "heritage"),
    "local-favourite": ("locals", "local", "local favourite", "local favourites", "local favorite", "local favorites",
                        "neighbourhood", "neighborhood"),
    "photogenic": ("photogenic", "photo", "photos", "insta", "instagram", "instagrammable", "insta-worthy",
                   "picturesque", "pictures", "on camera", "camera"),
    "romantic": ("romantic", "romance"),
    "late-night": (*_TAG_WORDS["late-night"], "late-opening", "until late", "opening late"),
    "kid-friendly": (*_TAG_WORDS["kid-friendly"], "for children", "for kids", "kids", "children"),
    "outdoor": (*_TAG_WORDS["outdoor"], "fresh air"),
    "indoor": _TAG_WORDS["indoor"],
    "vegetarian": ("vegetarian", "veggie", "vegan"),
    "wheelchair-accessible": ("wheelchair", "step-free", "accessible"),
}
"""Words for the tags a request may like (scored by the checker, not required): the avoidable tags' words
(:data:`_TAG_WORDS`) and more."""
_WANT_CUE = re.compile(_WANT.pattern + r"|" + _SOFT.pattern + r"|\+1\b|\bnice[- ]?2[- ]?have|\bwould b nice|\bpref\b|"
                       r"\bsoft\b|\bshould\b|\bwould (?:be )?(?:great|lovely|welcome|appreciated)|\bif (?:poss|it fits|"
                       r"you can|convenient)|\bwhere (?:possible|convenient)|\bfavou?r\b|\bkeen\b|\bbraw\b", re.I)


def _wanted(text: str, tags: Iterable[str]) -> list[str]:
    """Tags liked in a clause that says so softly ("would love a good view", "photogenic spots would be nice, not a
    must", "Nice-to-have: places locals love"): the checker scores them; they are never required."""
    out: list[str] = []
    for clause in re.split(r"(?<=[.!?;])\s+|\n|[\u2600-\u27bf\U0001f000-\U0001faff]+", text):
        if not _WANT_CUE.search(clause):
            continue
        low = clause.lower()
        found = []
        for tag in tags:
            for form in sorted(_WANT_WORDS.get(tag, (tag, tag.replace("-", " "))), key=len, reverse=True):
                m = re.search(r"(?<![\w-])" + re.escape(form) + r"(?![\w])", low)
                if m is not None:
                    found.append((m.start(), tag))
                    break
        out.extend(tag for _, tag in sorted(found) if tag not in out)
    return out


def _avoided(text: str, tags: Iterable[str]) -> list[str]:
    """Tags named after an avoid word in the same clause ("please avoid crowded places", "no tourist traps",
    "we'd rather not do adults-only venues"), or as "<tag>-free"."""
    out = []
    clauses = (r"(?<=[.!?;])\s+|\n|\s[-–—]\s(?!(?:please |pls )?avoid)|[\u2600-\u27bf\U0001f000-\U0001faff]+|"
               r",\s*(?=but\b)|\bbut\b|[,:]\s*(?=(?:[a-z']+\s+){0,2}?" + _WANT.pattern[2:] + r")")
    for clause in re.split(clauses, text, flags=re.I):
        low = clause.lower()
        cues = [m.start() for m in _AVOID.finditer(low)]
        if not cues:
            continue
        wants = [m.start() for m in _WANT.finditer(low)]
        for tag in tags:
            forms = _TAG_WORDS.get(tag, (tag, tag.replace("-", " ")))
            for form in sorted(forms, key=len, reverse=True):
                m = re.search(r"(?<![\w-])" + re.escape(form.lower()) + r"(?![\w])", low)  # not "step-free"
                if m is None:
                    continue
                free = low[m.end():m.end() + 5] == "-free"
                cue = max((c for c in cues if c < m.start()), default=-1)
                liked = any(cue < w < m.start() for w in wants)  # "no later than 11pm, would be nice: romantic"
                after = _AVOIDED_AFTER.match(low, m.end())  # "crowded venues should be avoided"
                if (free or after or (cue >= 0 and not liked)) and tag not in out:
                    out.append(tag)
                break
    return out


_DIALECT_WORDS = {"nae": "no", "mair": "more", "tae": "to", "fae": "from", "aw": "all", "o'": "of", "oot": "out",
                  "aboot": "about", "dinnae": "don't", "cannae": "can't", "doesnae": "doesn't", "wi'": "with",
                  "intae": "into", "oor": "our", "aff": "off", "whit": "what", "ye": "you", "ma": "my",
                  "roond": "round"}
"""Scots words a request may be written in ("nae mair than 3 stops", "fae 9am tae 5pm"), read as their English."""
_DIALECT = re.compile(r"(?<![\w'])(?:" + "|".join(re.escape(w) for w in sorted(_DIALECT_WORDS, key=len, reverse=True))
                      + r")(?![\w'])|(?-i:\b[a-z]{2,}in')(?!\w)", re.I)
"""The Scots words, and a dropped g in a lower-case word ("walkin'", "stoppin'"; not a quoted "'Berlin'")."""


@lru_cache(maxsize=8)
def _names_pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    """One pattern for a catalog's lodging names, longest first (built once per catalog, not per request)."""
    if not names:
        return None
    return re.compile("|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)), re.I)


def text_constraints(text: str, pois: Mapping[str, Poi]) -> dict[str, Any]:
    """Constraint fields (``PlanConstraints`` keys) the words of a trip request state; only what they state."""
    text = text.replace("_", " ")  # keys written as identifiers: "t_start: 9am", "must_visit: a park"
    text = _DIALECT.sub(lambda m: _DIALECT_WORDS.get(m.group().lower(), m.group()[:-1] + "g"), text)
    out: dict[str, Any] = {}
    if (counts := stop_counts(text)) is not None:
        out["min_stops"], out["max_stops"] = counts
    names = sorted({p.category for p in pois.values() if p.group not in _LODGING}
                   | {p.group for p in pois.values() if p.group not in _LODGING})
    lodging = _names_pattern(tuple(p.name for p in pois.values() if p.group in _LODGING))
    unlodged = lodging.sub("the hotel", text) if lodging else text  # "Marlowe Hostel Museum Quarter" asks no museum
    if musts := must_categories(unlodged, names):
        group_of = {p.category: p.group for p in pois.values()}
        covered = {group_of[m] for m in musts if m in group_of}  # "a fine-dining dinner": fine_dining covers food
        out["must_categories"] = [m for m in musts if m in group_of or m not in covered]
    if (day := weekday(text)) is not None:
        out["day"] = day
    if (window := time_window(text)) is not None:
        out["start_min"], out["end_min"] = window
    named = lodgings(text, pois.values())
    if named:
        before = {p: text[max(0, _at(text, pois[p].name) - 50):_at(text, pois[p].name)] for p in named}
        after = {p: text[_at(text, pois[p].name) + len(pois[p].name):][:40] for p in named}
        ends = [p for p in named if _END_CUE.search(before[p]) or _END_AFTER.match(after[p])]
        starts = [p for p in named if p not in ends]
        cued = [p for p in starts if _START_LODGING.search(before[p]) or _START_AFTER.match(after[p])]
        if not ends and len(starts) == 2 and len(cued) == 1:  # one named as where we stay: the other is the end
            ends = [p for p in starts if p not in cued]
            starts = cued
        out["start_poi"] = (starts or named)[0]
        out["end_poi"] = (ends or [out["start_poi"]])[0]
    budget = _BUDGET.search(text)
    if budget is not None:
        out["budget"] = float(budget.group(1) or budget.group(2))
    level = _LEVEL.search(text)
    if level is not None:
        digits = level.group(2) or level.group(3)
        out["max_price_level"] = min(4, max(1, len(level.group(1)) if level.group(1) else int(digits)))
    tags = sorted({t for p in pois.values() for t in p.tags})
    if avoid := _avoided(text, tags):
        out["avoid_tags"] = avoid
    if want := [t for t in _wanted(text, tags) if t not in avoid]:
        out["want_tags"] = want
    if (mode := transport(text)) is not None:
        out["mode"] = mode
    return out
