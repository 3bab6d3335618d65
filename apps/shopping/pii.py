"""Synthetic customers and the PII they leak into free text, with an exact answer key.

Every piece of PII is generated here and placed into text by :class:`TextBuilder`, which records
its character span, so curation's scrubber can be scored for recall and precision per type.
Values look real (valid phone-number plans, Luhn-valid card numbers, plausible addresses) but are
made up from a seeded generator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

PiiType = Literal["NAME", "EMAIL", "PHONE", "ADDRESS", "CARD", "ORDER_ID"]

FIRST_NAMES = (
    "James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David", "Elizabeth",
    "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen",
    "Daniel", "Nancy", "Matthew", "Lisa", "Anthony", "Betty", "Mark", "Sandra", "Paul", "Ashley", "Steven",
    "Emily", "Andrew", "Donna", "Kenji", "Aiko", "Wei", "Mei", "Arjun", "Priya", "Mohammed", "Fatima",
    "Lukas", "Anna", "Jonas", "Lena", "Pierre", "Camille", "Giulia", "Marco", "Sofia", "Mateo", "Lucia",
    "Olumide", "Chiamaka", "Sven", "Ingrid", "Tomasz", "Agnieszka", "Siobhan", "Declan", "Hannah", "Noah",
)
LAST_NAMES = (
    "Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez", "Martinez",
    "Hernandez", "Lopez", "Wilson", "Anderson", "Taylor", "Thomas", "Moore", "Jackson", "Martin", "Lee",
    "Thompson", "White", "Harris", "Clark", "Lewis", "Walker", "Young", "Allen", "King", "Wright", "Nguyen",
    "Tanaka", "Sato", "Wang", "Chen", "Patel", "Sharma", "Khan", "Müller", "Schmidt", "Schneider", "Fischer",
    "Dubois", "Lefèvre", "Rossi", "Bianchi", "Fernández", "González", "Okafor", "Adeyemi", "Johansson",
    "Kowalski", "Nowak", "O'Brien", "Murphy", "Kelly", "Becker", "Novak", "Silva", "Costa",
)
EMAIL_DOMAINS = ("gmail.com", "outlook.com", "yahoo.com", "icloud.com", "proton.me", "gmx.de", "web.de",
                 "hotmail.co.uk", "acme-corp.com", "mail.com")
US_STREETS = ("Maple", "Oak", "Pine", "Cedar", "Elm", "Washington", "Lake", "Hill", "Sunset", "Park", "Main",
              "Highland", "Willow", "Jefferson", "Lincoln", "Riverside")
US_SUFFIXES = ("Street", "St.", "Avenue", "Ave", "Road", "Rd", "Boulevard", "Blvd", "Lane", "Drive", "Court")
US_CITIES = (("Springfield", "IL", "627"), ("Portland", "OR", "972"), ("Austin", "TX", "787"),
             ("Denver", "CO", "802"), ("Seattle", "WA", "981"), ("Boston", "MA", "021"),
             ("Chicago", "IL", "606"), ("San Jose", "CA", "951"))
UK_STREETS = ("Baker Street", "High Street", "Church Road", "Station Road", "Victoria Road", "Mill Lane",
              "Queens Road", "Kings Avenue")
UK_CITIES = (("London", "NW1"), ("Manchester", "M1"), ("Leeds", "LS2"), ("Bristol", "BS1"), ("Glasgow", "G2"))
DE_STREETS = ("Hauptstraße", "Bahnhofstraße", "Gartenweg", "Schillerstraße", "Lindenallee", "Bergstraße")
DE_CITIES = (("Berlin", "10"), ("München", "80"), ("Hamburg", "20"), ("Köln", "50"), ("Leipzig", "04"))
US_AREA_CODES = ("212", "415", "646", "312", "617", "206", "303", "512", "702", "808", "404", "213")


@dataclass
class Customer:
    """A shop customer: the raw (not yet pseudonymous) id and the PII they may type."""

    customer_id: str
    first: str
    last: str
    email: str
    phone: str
    phone_region: str  # ISO region that parses the phone number (libphonenumber style)
    address: str
    card: str


@dataclass
class Span:
    """One PII occurrence: ``text[start:end] == value``."""

    type: PiiType
    start: int
    end: int
    value: str


@dataclass
class TextBuilder:
    """Concatenate text pieces, remembering where each PII piece landed."""

    parts: list[str] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    length: int = 0

    def add(self, text: str) -> TextBuilder:
        self.parts.append(text)
        self.length += len(text)
        return self

    def pii(self, kind: PiiType, value: str) -> TextBuilder:
        self.spans.append(Span(kind, self.length, self.length + len(value), value))
        return self.add(value)

    def text(self) -> str:
        return "".join(self.parts)


def luhn_check_digit(digits: str) -> str:
    """The digit that makes ``digits + d`` pass the Luhn check."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 0:  # these positions get doubled once the check digit is appended
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return str((10 - total % 10) % 10)


def luhn_valid(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return len(digits) >= 2 and total % 10 == 0


def _digits(rng: np.random.Generator, n: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, size=n))


def make_card(rng: np.random.Generator) -> str:
    """A Luhn-valid Visa/Mastercard/Amex number in a common written format."""
    kind = int(rng.integers(0, 3))
    if kind == 2:  # Amex: 15 digits, 4-6-5 groups
        body = ("34" if rng.random() < 0.5 else "37") + _digits(rng, 12)
        num = body + luhn_check_digit(body)
        sep = (" ", "-", "")[int(rng.integers(0, 3))]
        return sep.join((num[:4], num[4:10], num[10:]))
    prefix = "4" if kind == 0 else str(51 + int(rng.integers(0, 5)))
    body = prefix + _digits(rng, 15 - len(prefix))
    num = body + luhn_check_digit(body)
    sep = (" ", "-", "")[int(rng.integers(0, 3))]
    return sep.join(num[i : i + 4] for i in range(0, 16, 4))


def make_phone(rng: np.random.Generator) -> tuple[str, str]:
    """A phone number of a real numbering plan in one of many written formats; returns (text, region)."""
    region = ("US", "US", "GB", "DE", "FR", "IN")[int(rng.integers(0, 6))]
    fmts: tuple[str, ...]
    if region == "US":
        area = US_AREA_CODES[int(rng.integers(0, len(US_AREA_CODES)))]
        exch = str(int(rng.integers(2, 10))) + _digits(rng, 2)
        line = _digits(rng, 4)
        fmts = (f"({area}) {exch}-{line}", f"{area}-{exch}-{line}", f"{area}.{exch}.{line}",
                f"+1 {area} {exch} {line}", f"+1-{area}-{exch}-{line}", f"{area}{exch}{line}")
    elif region == "GB":
        mob = "7" + str(int(rng.integers(4, 10))) + _digits(rng, 8)
        fmts = (f"0{mob[:4]} {mob[4:]}", f"+44 {mob[:4]} {mob[4:]}", f"+44 (0){mob[:4]} {mob[4:]}", f"0{mob}")
    elif region == "DE":
        sub = _digits(rng, 7 + int(rng.integers(0, 2)))
        sub = str(int(rng.integers(1, 10))) + sub[1:]
        fmts = (f"+49 30 {sub}", f"030 {sub}", f"+49 (0)30 {sub}", f"0176 {sub[:7]}", f"+49 176 {sub[:7]}")
    elif region == "FR":
        nums = "6" + _digits(rng, 8)
        pairs = " ".join(nums[i : i + 2] for i in range(1, 9, 2))
        fmts = (f"0{nums[0]} {pairs}", f"+33 {nums[0]} {pairs}", f"0{nums}", f"+33{nums}")
    else:
        mob = str(int(rng.integers(7, 10))) + _digits(rng, 9)
        fmts = (f"+91 {mob[:5]} {mob[5:]}", f"+91-{mob}", f"0{mob[:5]} {mob[5:]}")
    return fmts[int(rng.integers(0, len(fmts)))], region


def make_address(rng: np.random.Generator) -> str:
    style = int(rng.integers(0, 3))
    if style == 0:
        city, state, zip3 = US_CITIES[int(rng.integers(0, len(US_CITIES)))]
        street = US_STREETS[int(rng.integers(0, len(US_STREETS)))]
        suffix = US_SUFFIXES[int(rng.integers(0, len(US_SUFFIXES)))]
        num = int(rng.integers(1, 9900))
        apt = f", Apt {int(rng.integers(1, 40))}" if rng.random() < 0.3 else ""
        return f"{num} {street} {suffix}{apt}, {city}, {state} {zip3}{_digits(rng, 2)}"
    if style == 1:
        city, pc = UK_CITIES[int(rng.integers(0, len(UK_CITIES)))]
        street = UK_STREETS[int(rng.integers(0, len(UK_STREETS)))]
        flat = f"Flat {int(rng.integers(1, 30))}, " if rng.random() < 0.3 else ""
        letters = "ABDEFGHJLNPQRSTUWXYZ"
        tail = f"{int(rng.integers(1, 10))}{letters[int(rng.integers(0, 20))]}{letters[int(rng.integers(0, 20))]}"
        return f"{flat}{int(rng.integers(1, 300))} {street}, {city} {pc} {tail}"
    city, plz2 = DE_CITIES[int(rng.integers(0, len(DE_CITIES)))]
    street = DE_STREETS[int(rng.integers(0, len(DE_STREETS)))]
    return f"{street} {int(rng.integers(1, 200))}, {plz2}{_digits(rng, 3)} {city}"


def make_email(rng: np.random.Generator, first: str, last: str) -> str:
    f, la = _ascii(first).lower(), _ascii(last).lower().replace("'", "")
    style = int(rng.integers(0, 5))
    local = (f"{f}.{la}", f"{f[0]}{la}{int(rng.integers(1, 99))}", f"{f}_{la[0]}", f"{la}.{f}",
             f"{f}{int(rng.integers(1970, 2006))}")[style]
    return f"{local}@{EMAIL_DOMAINS[int(rng.integers(0, len(EMAIL_DOMAINS)))]}"


def make_order_id(rng: np.random.Generator) -> str:
    style = int(rng.integers(0, 3))
    if style == 0:
        return f"ORD-{int(rng.integers(2023, 2027))}-{_digits(rng, 6)}"
    if style == 1:
        alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
        return "#" + "".join(alphabet[int(i)] for i in rng.integers(0, len(alphabet), size=8))
    return f"{int(rng.integers(100, 999))}-{_digits(rng, 7)}-{_digits(rng, 7)}"


def _ascii(s: str) -> str:
    table = str.maketrans({"ü": "u", "è": "e", "é": "e", "á": "a", "í": "i", "ö": "o", "ä": "a", "ß": "ss"})
    return s.translate(table)


def make_customers(n: int, seed: int) -> list[Customer]:
    rng = np.random.default_rng([seed, 17])
    out = []
    for i in range(n):
        first = FIRST_NAMES[int(rng.integers(0, len(FIRST_NAMES)))]
        last = LAST_NAMES[int(rng.integers(0, len(LAST_NAMES)))]
        phone, region = make_phone(rng)
        out.append(Customer(
            customer_id=f"cust-{i:06d}", first=first, last=last, email=make_email(rng, first, last),
            phone=phone, phone_region=region, address=make_address(rng), card=make_card(rng),
        ))
    return out


def add_pii_sentence(tb: TextBuilder, rng: np.random.Generator, c: Customer) -> None:
    """Append one sentence that leaks a piece of the customer's PII (several phrasings per type)."""
    kind = int(rng.integers(0, 8))
    if kind == 0:
        tb.add(("Hi, this is ", "hello, my name is ", "Hey it's ")[int(rng.integers(0, 3))])
        tb.pii("NAME", f"{c.first} {c.last}").add(". ")
    elif kind == 1:
        tb.add(("You can email me at ", "my email is ", "contact: ")[int(rng.integers(0, 3))])
        tb.pii("EMAIL", c.email).add(" ")
    elif kind == 2:
        tb.add(("Call me on ", "my number is ", "phone ")[int(rng.integers(0, 3))])
        tb.pii("PHONE", c.phone).add(" if needed. ")
    elif kind == 3:
        tb.add(("Please ship to ", "deliver to ", "my address is ")[int(rng.integers(0, 3))])
        tb.pii("ADDRESS", c.address).add(". ")
    elif kind == 4:
        tb.add(("My card ", "card number ", "I paid with ")[int(rng.integers(0, 3))])
        tb.pii("CARD", c.card).add(" was declined, why? ")
    elif kind == 5:
        tb.add(("Where is my order ", "any update on order ", "re: order ")[int(rng.integers(0, 3))])
        tb.pii("ORDER_ID", make_order_id(rng)).add("? ")
    elif kind == 6:
        tb.add("I'm ").pii("NAME", c.first + " " + c.last).add(", reach me at ")
        tb.pii("PHONE", c.phone).add(" or ").pii("EMAIL", c.email).add(". ")
    else:
        tb.add("Send it to ").pii("NAME", f"{c.first} {c.last}").add(", ")
        tb.pii("ADDRESS", c.address).add(". ")
