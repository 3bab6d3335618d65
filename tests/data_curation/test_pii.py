"""PII scrubbing: planted PII in many formats is replaced by the right placeholder; other numbers survive.

    pytest tests/data_curation/test_pii.py
"""

from __future__ import annotations

import pytest

from data_curation.config import DEFAULT_PHONE_REGIONS
from data_curation.names import NameFinder
from data_curation.pii import Detection, Scrubber, iban_ok, luhn_ok, resolve


@pytest.fixture(scope="module")
def scrubber() -> Scrubber:
    return Scrubber(DEFAULT_PHONE_REGIONS)


PLANTED = [
    # phones: international, split by spaces / dots / dashes, national formats of several countries
    ("call me at +1 (415) 555 0132 tomorrow", "call me at <PHONE> tomorrow"),
    ("my number: 415.555.0132, thanks", "my number: <PHONE>, thanks"),
    ("(212) 555-0199 or 212-555-0199", "<PHONE> or <PHONE>"),
    ("ring 020 7946 0958 or 07700 900 123", "ring <PHONE> or <PHONE>"),
    ("phone 06 12 34 56 78 please", "phone <PHONE> please"),
    ("+33 6 12 34 56 78", "<PHONE>"),
    ("tel. +49 (0)30 123 456 78", "tel. <PHONE>"),
    ("Call 0049 30 1234567", "Call <PHONE>"),
    ("+44 7667 445676 is my mobile", "<PHONE> is my mobile"),
    ("+91-9876543210", "<PHONE>"),
    # emails, including plus tags, sub-domains and the bracketed form
    ("write to jane.doe+shop@example.co.uk about it", "write to <EMAIL> about it"),
    ("Mail: J.Smith_99@mail.acme-corp.com.", "Mail: <EMAIL>."),
    ("jane [at] example [dot] org", "<EMAIL>"),
    # names next to punctuation, with cues, lower case, particles, possessives
    ("Thanks for the help —Maria Garcia, Berlin", "Thanks for the help —<NAME>, Berlin"),
    ("please forward to (John Smith) at reception", "please forward to (<NAME>) at reception"),
    ("my name is lena chen", "my name is <NAME>"),
    ("Hi, I'm Olumide Adeyemi.", "Hi, I'm <NAME>."),
    ("Regards, Siobhan O'Brien", "Regards, <NAME>"),
    ("Sincerely,\nAnna-Lena Schmidt", "Sincerely,\n<NAME>"),
    ("cc: Priya Sharma", "cc: <NAME>"),
    ("My colleague Dr Patel recommended it", "My colleague <NAME> recommended it"),
    ("It's Hannah's birthday", "It's <NAME>'s birthday"),
    ("Send it to Ludwig van Beethoven, please", "Send it to <NAME>, please"),
    # cards (Luhn), IBANs (mod 97), IPs, national ids
    ("card 4111 1111 1111 1111 exp 12/27", "card <CARD> exp 12/27"),
    ("card 4111-1111-1111-1111", "card <CARD>"),
    ("Amex 3782 822463 10005 declined", "Amex <CARD> declined"),
    ("My IBAN is DE89 3704 0044 0532 0130 00 and GB82WEST12345698765432", "My IBAN is <IBAN> and <IBAN>"),
    ("server 192.168.1.20 and 2001:db8::8a2e:370:7334 keep failing", "server <IP> and <IP> keep failing"),
    ("ssn 123-45-6789 and NI number AB 12 34 56 C", "ssn <NATIONAL_ID> and NI number <NATIONAL_ID>"),
    ("passport number X1234567 expired", "passport number <NATIONAL_ID> expired"),
    # addresses: US, UK, German, French, Italian, city + state + ZIP, PO box
    ("ship to 221B Baker Street, London NW1 6XE", "ship to <ADDRESS>"),
    ("deliver to 1600 Pennsylvania Ave NW, Washington, DC 20500", "deliver to <ADDRESS>"),
    ("Flat 14, 253 Mill Lane, Manchester M1 8SA.", "<ADDRESS>."),
    ("123 Oak St., Apt 5, Austin, TX 78701", "<ADDRESS>"),
    ("Anschrift: Berliner Straße 5, 10115 Berlin", "Anschrift: <ADDRESS>"),
    ("Lindenallee 77, 10484 Berlin", "<ADDRESS>"),
    ("12 rue de la Paix, 75002 Paris", "<ADDRESS>"),
    ("Via Roma 12, 00184 Roma", "<ADDRESS>"),
    ("Springfield, IL 62704 is where I live", "<ADDRESS> is where I live"),
    ("PO Box 4521, Denver, CO 80201", "<ADDRESS>"),
    ("my office is 12 Main Street, Boston", "my office is <ADDRESS>"),
    ("office: Calle Mayor 5, 28013 Madrid", "office: <ADDRESS>"),
    # "office" is an address cue only as "office is" / "office:", not in "office chair"
    ("looking for office chair my number is 030 68612734 if needed.",
     "looking for office chair my number is <PHONE> if needed."),
    # order ids
    ("order ORD-2024-123456 and 111-2223334-5556667 and #K7XQ2M9P", "order <ORDER_ID> and <ORDER_ID> and <ORDER_ID>"),
    ("where is my order #ABCDEFGH", "where is my order <ORDER_ID>"),
    ("order number 88812345 never arrived", "order number <ORDER_ID> never arrived"),
]


@pytest.mark.parametrize(("text", "expected"), PLANTED, ids=[p[0][:40] for p in PLANTED])
def test_planted_pii_is_replaced(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


SURVIVES = [
    "boots under 80, size 42, from 2019, $49.99 each, 1kg bag, model XR-2000, 3 pairs",
    "any peat-free planter below $85?",
    "I need gear to start running, total budget $350",
    "iPhone 15 Pro 256GB and Galaxy S23 Ultra",
    "4K TV 55 inch 2023 model QN55Q80C",
    "a 2-pack of 500ml bottles for ages 3+",
    "Samsung T5 1TB SSD",
    "version 1.2.3.4 of the app",
    "meeting at 10:30:45 on 12/05/2024",
    "ISBN 978-0-306-40615-7 and EAN 4006381333931",
    "price 1299 1499 1999 and years 2019 2020 2021",
    # brand names that look like names must not become <NAME>
    "I'm looking for the Jasper tent in navy",
    "Do you have Jasper's navy canvas tent?",
    "Summit boots size 42 under 120",
    "Willow & Stone sofa in grey",
    "Aurora Home lamp",
    "This is Summit gear?",
    "Tent by Jasper (navy, canvas)",
    "Blue canvas tent from Jasper",
    "Nova Orchard Juniper Ember Harbor",
    "JASPER TENT NAVY SIZE 42",
]


@pytest.mark.parametrize("text", SURVIVES)
def test_non_pii_survives(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text) == (text, [])


def test_detections_are_in_original_coordinates(scrubber: Scrubber) -> None:
    text = "I'm Lena Chen, reach me at 030 3236132 or lchen31@web.de."
    scrubbed, found = scrubber.scrub(text)
    assert scrubbed == "I'm <NAME>, reach me at <PHONE> or <EMAIL>."
    assert [(text[d.start : d.end], d.type) for d in found] == [
        ("Lena Chen", "NAME"), ("030 3236132", "PHONE"), ("lchen31@web.de", "EMAIL")]


def test_scrubbing_is_idempotent(scrubber: Scrubber) -> None:
    once = scrubber.scrub("Hi, this is Mei Wang, +1 212 555 0101, 8 Elm Street, Boston, MA 02118")[0]
    assert once == "Hi, this is <NAME>, <PHONE>, <ADDRESS>"
    assert scrubber.scrub(once) == (once, [])


def test_overlaps_resolve_by_type_rank_then_length() -> None:
    found = resolve([Detection(0, 10, "PHONE"), Detection(2, 30, "ADDRESS"), Detection(0, 4, "NAME"),
                     Detection(40, 50, "NAME"), Detection(40, 44, "NAME")])
    assert found == [Detection(2, 30, "ADDRESS"), Detection(40, 50, "NAME")]


def test_checksums() -> None:
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert iban_ok("DE89370400440532013000") and not iban_ok("DE89370400440532013001")
    assert not iban_ok("DE8937")


def test_name_finder_with_own_lists() -> None:
    finder = NameFinder(first=frozenset({"zorba"}), last=frozenset({"quux"}))
    assert finder.find("ask Zorba Quux today") == [(4, 14)]
    assert finder.find("the Zorba tent") == []
    assert finder.find("this is Zorba.") == [(8, 13)]
