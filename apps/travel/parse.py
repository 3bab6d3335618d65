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
from typing import Any

from apps.travel.checker import Poi

_DAYS = {"mon": "mon", "monday": "mon", "tue": "tue", "tues": "tue", "tuesday": "tue", "wed": "wed",
         "wednesday": "wed", "thu": "thu", "thur": "thu", "thurs": "thu", "thursday": "thu", "fri": "fri",
         "friday": "fri", "sat": "sat", "saturday": "sat", "sun": "sun", "sunday": "sun"}
_DAY = re.compile(r"\b(" + "|".join(sorted(_DAYS, key=len, reverse=True)) + r")s?\b\.?", re.I)
_CLOCK = r"(\d{1,2})(?:[:.h](\d{2}))?\s*(am|pm|a\.m\.|p\.m\.)?"
_RANGE = re.compile(r"\b" + _CLOCK + r"\s*(?:-|–|—|to|till|until|and)\s*" + _CLOCK + r"(?![\d%])", re.I)
_CLOCK_WORDS = ((re.compile(r"\bmidnight\b", re.I), "24:00"), (re.compile(r"\bnoon\b|\bmidday\b", re.I), "12:00"))
_MODES = (("walk", re.compile(r"\b(?:walk(?:ing)?|on foot|by foot)\b", re.I)),
          ("taxi", re.compile(r"\b(?:taxis?|cabs?|uber|by car|drive|driving)\b", re.I)),
          ("transit", re.compile(r"\b(?:metro|subway|bus(?:es)?|trams?|public transport|public transit|transit|"
                                 r"underground)\b", re.I)))
_LODGING = ("lodging",)


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
    for m in _RANGE.finditer(text):
        h1, m1, p1, h2, m2, p2 = m.groups()
        bare = m1 is None and p1 is None and m2 is None and p2 is None
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
        if end <= start and p2 is None and end + 720 > start:
            end += 720
        if 0 <= start < end <= 24 * 60:
            return start, end
    return None


def weekday(text: str) -> str | None:
    """The first weekday named in ``text`` ("mon" ... "sun"), or None."""
    m = _DAY.search(text)
    return _DAYS[m.group(1).lower()] if m else None


def transport(text: str) -> str | None:
    """``walk``, ``taxi`` or ``transit`` when the words name a way of getting around (first listed wins)."""
    for mode, pattern in _MODES:
        if pattern.search(text):
            return mode
    return None


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


_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                 "ten": 10, "a couple of": 2, "a few": 3}
_N = r"(\d{1,2}|" + "|".join(sorted(_NUMBER_WORDS, key=len, reverse=True)) + r")"
_STOP = r"(?:stops?|places?|visits?|spots?|sights?|venues?|attractions?)"
_STOPS = (  # (pattern, which numbers are the min and the max)
    (re.compile(r"\bexactly\s+" + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I), "both"),
    (re.compile(r"\bat least\s+" + _N + r"\s+(?:and|,)?\s*(?:at most|no more than)\s+" + _N, re.I), "range"),
    (re.compile(r"\b(?:between\s+)?" + _N + r"\s*(?:-|–|to|and|or)\s*" + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I),
     "range"),
    (re.compile(r"\b(?:at most|no more than|up to|max(?:imum)?(?: of)?)\s+" + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I),
     "max"),
    (re.compile(r"\b(?:at least|minimum(?: of)?)\s+" + _N + r"\s+(?:\w+\s+)?" + _STOP, re.I), "min"),
    (re.compile(r"\b" + _N + r"\s+(?:\w+\s+)?" + _STOP + r"\b", re.I), "both"),
)
_MUST = re.compile(r"\b(?:must|definitely|have to|has to|need(?:s)? to|required?|don'?t want to miss|include)\b",
                   re.I)


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word.lower()]


def stop_counts(text: str) -> tuple[int, int] | None:
    """``(min_stops, max_stops)`` the words ask for ("2 to 4 stops", "exactly three places", "at most 5 visits"),
    or None; a bound not stated is left to the planner's default (``None`` in that slot is 1 / 8)."""
    for pattern, kind in _STOPS:
        m = pattern.search(text)
        if m is None:
            continue
        numbers = [_number(g) for g in m.groups() if g is not None]
        if kind == "both":
            return numbers[0], numbers[0]
        if kind == "range":
            return min(numbers), max(numbers)
        if kind == "max":
            return 1, numbers[0]
        return numbers[0], max(numbers[0], 8)
    return None


_SYNONYMS = {"food": ("eat", "meal", "lunch", "dinner", "restaurant"), "cafe": ("coffee", "café"),
             "nightlife": ("night spot", "nightlife", "drinks"), "culture": ("cultural",), "nature": ("outdoors",),
             "shopping": ("shop",)}


def must_categories(text: str, names: Iterable[str]) -> list[str]:
    """The categories or groups (``names``, e.g. "seafood", "museum", "street_food", "culture") named in a sentence
    of ``text`` that says the visit must happen ("it must include seafood", "I definitely want a museum"), in the
    order named; plurals count ("museums")."""
    out: list[tuple[tuple[int, int], str]] = []
    for k, sentence in enumerate(re.split(r"(?<=[.!?;])\s+", text)):
        if not _MUST.search(sentence):
            continue
        low = sentence.lower()
        spans: list[tuple[int, int, str]] = []
        for name in names:
            for form in (name, *_SYNONYMS.get(name, ())):
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


_END_CUE = re.compile(r"\b(?:move to|moving to|end(?:ing)?(?: the day)? (?:at|in)|finish(?:ing)? at|sleep at|"
                      r"check(?:ing)? in(?:to| at)?|back at|over to)\s*(?:the\s+)?$", re.I)
_MONEY = r"(?:eur|euros?|€|usd|dollars?|\$|gbp|pounds?|£|jpy|yen|¥)"
_BUDGET = re.compile(r"(?:budget|spend(?:ing)?|under|below|at most|max(?:imum)?|no more than|up to)\D{0,25}?"
                     r"(?:" + _MONEY + r"\s*(\d+(?:[.,]\d+)?)|(\d+(?:[.,]\d+)?)\s*" + _MONEY + r")", re.I)
_LEVEL = re.compile(r"(?:pricier than|more expensive than|price level(?: of)?|up to)\s*(?:(\$+)|(\d)\s*(?:of|/)\s*4)",
                    re.I)
_AVOID = re.compile(r"\b(?:avoid|no|not|without|skip|hate|don'?t like|dislike)\b", re.I)


def _at(text: str, name: str) -> int:
    return max(0, text.lower().find(name.lower()))


def _avoided(text: str, tags: Iterable[str]) -> list[str]:
    """Tags named in a sentence that says to avoid them ("please avoid crowded places", "no adults-only venues")."""
    out = []
    for sentence in re.split(r"(?<=[.!?;])\s+", text):
        if not _AVOID.search(sentence):
            continue
        low = sentence.lower()
        for tag in tags:
            words = re.escape(tag.lower().replace("_", " ")).replace(r"\ ", r"[\s_-]").replace(r"\-", r"[\s_-]")
            if re.search(r"\b" + words + r"\b", low) and tag not in out:
                out.append(tag)
    return out


def text_constraints(text: str, pois: Mapping[str, Poi]) -> dict[str, Any]:
    """Constraint fields (``PlanConstraints`` keys) the words of a trip request state; only what they state."""
    out: dict[str, Any] = {}
    if (counts := stop_counts(text)) is not None:
        out["min_stops"], out["max_stops"] = counts
    names = sorted({p.category for p in pois.values() if p.group not in _LODGING}
                   | {p.group for p in pois.values() if p.group not in _LODGING})
    if musts := must_categories(text, names):
        group_of = {p.category: p.group for p in pois.values()}
        covered = {group_of[m] for m in musts if m in group_of}  # "a fine-dining dinner": fine_dining covers food
        out["must_categories"] = [m for m in musts if m in group_of or m not in covered]
    if (day := weekday(text)) is not None:
        out["day"] = day
    if (window := time_window(text)) is not None:
        out["start_min"], out["end_min"] = window
    named = lodgings(text, pois.values())
    if named:
        ends = [p for p in named if _END_CUE.search(text[max(0, _at(text, pois[p].name) - 40):_at(text, pois[p].name)])]
        starts = [p for p in named if p not in ends]
        out["start_poi"] = (starts or named)[0]
        out["end_poi"] = (ends or [out["start_poi"]])[0]
    budget = _BUDGET.search(text)
    if budget is not None:
        out["budget"] = float(budget.group(1) or budget.group(2))
    level = _LEVEL.search(text)
    if level is not None:
        out["max_price_level"] = min(4, max(1, len(level.group(1)) if level.group(1) else int(level.group(2))))
    tags = sorted({t for p in pois.values() for t in p.tags})
    if avoid := _avoided(text, tags):
        out["avoid_tags"] = avoid
    if (mode := transport(text)) is not None:
        out["mode"] = mode
    return out
