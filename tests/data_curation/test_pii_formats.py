"""PII rules for formats and phrasings outside the generator, each with a hand-written expectation.

    pytest tests/data_curation/test_pii_formats.py

Names that are also common words found by the words around them, brands and towns kept without a cue,
addresses without a street word, national ids recognised by their check digits, odd order ids. Every
case is written for this test (none comes from bench/pii_sets). The scrubber is ``names: lexicon``
(rules + the name lexicon, no spaCy model), so these are the rules' own results.
"""

from __future__ import annotations

import pytest

from data_curation.config import DEFAULT_PHONE_REGIONS
from data_curation.pii import Scrubber, _id_checks


@pytest.fixture(scope="module")
def scrubber() -> Scrubber:
    return Scrubber.configured(DEFAULT_PHONE_REGIONS, "lexicon")


REMOVED = [
    # names that are common words, told by a relative, a verb or a sign-off around them
    ("a raincoat for my granddaughter Daisy, age 6", "a raincoat for my granddaughter <NAME>, age 6"),
    ("Destiny said the strap broke after a week", "<NAME> said the strap broke after a week"),
    ("Joy here, did the blender ship?", "<NAME> here, did the blender ship?"),
    ("could Hunter please collect it at noon", "could <NAME> please collect it at noon"),
    ("just give it to Harmony at the desk", "just give it to <NAME> at the desk"),
    ("our neighbour called Wren will take it", "our neighbour called <NAME> will take it"),
    ("see you soon, love, Blessing", "see you soon, love, <NAME>"),
    ("it's a present for Honey, she loves green", "it's a present for <NAME>, she loves green"),
    ("Bitte an Familie Oberreiter liefern", "Bitte an Familie <NAME> liefern"),
    ("pls remind Faith the parcel is at the back door", "pls remind <NAME> the parcel is at the back door"),
    ("for my tía Carmela, size 38", "for my tía <NAME>, size 38"),
    ("can Ama and Kojo both collect?", "can <NAME> and <NAME> both collect?"),
    ("nkiruka and i want the twin room", "<NAME> and i want the twin room"),
    ("it should say 'Yesenia' not Yesennia", "it should say '<NAME>' not <NAME>"),
    # lower case, initials, particles, a common first name before a rare surname
    ("order was for thandiwe ngcobo", "order was for <NAME>"),
    ("signed, J. Oyelowo-Barnes", "signed, <NAME>"),
    ("deliver to Frederik van den Heuvel please", "deliver to <NAME> please"),
    ("Dawn Okonjo-Iweala wants a refund", "<NAME> wants a refund"),
    ("नमस्ते, मेरा नाम अनीता वर्मा", "नमस्ते, मेरा नाम <NAME>"),
    ("최유진 고객입니다, 배송 문의", "<NAME> 고객입니다, 배송 문의"),
    # addresses without a street word, or with one of a language the rules did not know
    ("Garden City, Cairo 11451", "<ADDRESS>"),
    ("Unit 9, Crescent Heights, Palm Grove, Colombo 00300", "<ADDRESS>"),
    ("dorm: Maple Hall Rm 318, 200 College Ave, Ithaca NY 14850", "dorm: <ADDRESS>"),
    ("Skólavörðustígur 12, 101 Reykjavík", "<ADDRESS>"),
    ("Calle 53 # 45-12, Medellín", "<ADDRESS>"),
    ("Packstation 118, 50667 Köln", "<ADDRESS>"),
    ("Private Bag 1043, Gaborone", "<ADDRESS>"),
    ("Villa 7, Street 22, Al Safa 1, Dubai", "<ADDRESS>"),
    ("Brīvības iela 55, Rīga", "<ADDRESS>"),
    ("send to 14 jalan bukit bintang, unit 7-2, 55100 kuala lumpur", "send to <ADDRESS>"),
    # national ids by their shape or check digits, with no cue
    ("440304198807151230 is on the form", "<NATIONAL_ID> is on the form"),
    ("use 730320-3942 for the invoice", "use <NATIONAL_ID> for the invoice"),
    ("230598-457W", "<NATIONAL_ID>"),
    ("2 88 06 75 112 042 54", "<NATIONAL_ID>"),
    ("dni 80607838Z", "dni <NATIONAL_ID>"),
    ("here: 7945 2669 8572", "here: <NATIONAL_ID>"),
    ("99120541069 for the courier form", "<NATIONAL_ID> for the courier form"),
    ("PAN AFKPT4821Q and RRN 920417-2345678", "PAN <NATIONAL_ID> and RRN <NATIONAL_ID>"),
    ("HKID Z683365(5)", "HKID <NATIONAL_ID>"),
    ("Emirates ID 784-1985-1234567-1", "Emirates ID <NATIONAL_ID>"),
    ("teudat zehut 392378790", "teudat zehut <NATIONAL_ID>"),
    ("my social is 078 05 1120", "my social is <NATIONAL_ID>"),
    # names after cues in more scripts and phrasings
    ("booked under Kowalczyk, 2 nights", "booked under <NAME>, 2 nights"),
    ("name on card: AMARA OKEKE", "name on card: <NAME>"),
    ("please address it to Գայանե Սարգսյան", "please address it to <NAME>"),
    ("আমার নাম সুমাইয়া আক্তার", "আমার নাম <NAME>"),
    ("it's for გიორგი ლომიძე, he collects tomorrow", "it's for <NAME>, he collects tomorrow"),
    ("カードに「はなちゃん おめでとう」と", "カードに「<NAME>ちゃん おめでとう」と"),
    ("2. OG, bei Yilmaz klingeln", "<ADDRESS>, bei <NAME> klingeln"),
    ("Dronningens gate 8, 7011 Trondheim, tlf 915 22 480", "<ADDRESS>, tlf <PHONE>"),
    ("the booking reference is S9412763H", "the booking reference is <NATIONAL_ID>"),
    # addresses: Japan and Korea in Latin letters, Thailand, a named road opening the message
    ("2-chome-4-1 Marunouchi, Chiyoda City, Tokyo 100-0005", "<ADDRESS>"),
    ("Busan, Haeundae-gu, Centum-ro 30, 12F", "<ADDRESS>"),
    ("ส่งที่ 45/7 ซอยอารีย์ 2 แขวงสามเสนใน เขตพญาไท กรุงเทพฯ 10400", "ส่งที่ <ADDRESS>"),
    ("Jomo Kenyatta Avenue, Nyali, Mombasa - house 12", "<ADDRESS>"),
    # order ids in odd formats; e-mail domains outside ASCII
    ("заказ №5583901 где?", "заказ №<ORDER_ID> где?"),
    ("invoice FV/2025/00812 has the wrong VAT", "invoice <ORDER_ID> has the wrong VAT"),
    ("and the other one 20250917-4410", "and the other one <ORDER_ID>"),
    ("mail: kontakt@bäckerei-müller.de", "mail: <EMAIL>"),
    ("reach me at k.mensah@ug dot edu dot gh", "reach me at <EMAIL>"),
    ("tracking 9405 5036 9930 0123 4567 89 shows nothing", "tracking <ORDER_ID> shows nothing"),
    ("order 55120 10 items", "order <ORDER_ID> 10 items"),  # the digit groups of a count are not the id's
]

KEPT = [
    "preferably Salomon or Merrell, size 44",  # brands that are surnames
    "a day trip to Nara from Osaka",  # a town that is also a name
    "Will you restock the linen duvet?",  # a modal at the start, not a name
    "Rose gold or silver for the watch strap?",  # a colour
    "need a room 2 nights, 2 adults",
    "delivery 10/12/2025 would be great",  # a date after an order word
    "Grace period for returns is 30 days",
    "Carolina Herrera perfume, the 80 ml",
    "Tory Burch or Ralph Lauren for the sandals?",  # brands named after people
    "is the 'ชาไทย' tea mix in stock?",  # a product in a script without spaces
    "can i pay with amex?",
    "is Seville's Giralda open on sundays?",  # a place's landmark
    "day trips to Sintra and Cabo da Roca?",
    "its wb 4471-22 in the system",
]


@pytest.mark.parametrize(("text", "expected"), REMOVED, ids=[t[:36] for t, _ in REMOVED])
def test_removed(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text", KEPT, ids=[t[:36] for t in KEPT])
def test_kept(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text)[0] == text


def test_a_name_found_in_one_message_is_a_name_in_the_others(scrubber: Scrubber) -> None:
    out = [text for text, _ in scrubber.scrub_turns(["it's from Hope", "Hope Okoro-Bassey, flat 2", "hope it fits"])]
    assert out == ["it's from <NAME>", "<NAME>, <ADDRESS>", "hope it fits"]  # same case only


@pytest.mark.parametrize(("turns", "expected"), [
    (["my passport number is", "X4471902, expires 2031"], ["my passport number is", "<NATIONAL_ID>, expires 2031"]),
    (["tracking no.", "RR-88104-55, still nothing"], ["tracking no.", "<ORDER_ID>, still nothing"]),
    (["full name:", "Oluwaseun Adebayo-Hart"], ["full name:", "<NAME>"]),
    (["my email is", "can you resend the receipt?"], ["my email is", "can you resend the receipt?"]),
])
def test_a_cue_closing_one_message_finds_the_value_in_the_next(scrubber: Scrubber, turns: list[str],
                                                               expected: list[str]) -> None:
    assert [text for text, _ in scrubber.scrub_turns(turns)] == expected


@pytest.mark.parametrize(("kind", "good", "bad"), [
    ("cn", "440304198807151230", "440304198807151231"),
    ("nordic", "730320-3942", "731320-3942"),  # Swedish (Luhn) / Danish (a date)
    ("fi", "230598-457W", "230598-457X"),
    ("nir", "2 88 06 75 112 042 54", "2 88 06 75 112 042 55"),
    ("dni", "80607838Z", "80607838A"),
    ("aadhaar", "7945 2669 8572", "7945 2669 8573"),
    ("eleven", "99120541069", "99120541068"),  # PESEL
    ("eleven", "10000000146", "10000000147"),  # Turkish TCKN
])
def test_national_id_check_digits(kind: str, good: str, bad: str) -> None:
    assert _id_checks(kind, good) and not _id_checks(kind, bad)


def test_long_words_of_scripts_without_spaces_scrub_in_linear_time(scrubber: Scrubber) -> None:
    """A word-letter pattern whose two branches both matched Thai letters backtracked exponentially
    (13 s for this 400-character message); every message must take milliseconds."""
    import time

    text = "สวัสดีค่ะ อยากสั่งรองเท้าสีดำ ไซส์ 42 ค่ะ ขอบคุณค่ะ " * 8 + "ก" * 300
    start = time.perf_counter()
    scrubber.scrub(text)
    assert time.perf_counter() - start < 2.0


# The identifier backstop: references in shapes no order / id rule knows, and the quantities it must leave alone.
BACKSTOP_REMOVED = [
    ("the courier said the waybill is 7731 0456 2219 9", "the courier said the waybill is <ORDER_ID> 9"),
    ("hey, it's about Q7-448120-ZX, still nothing", "hey, it's about <ORDER_ID>, still nothing"),
    ("kargo takip: KT-X5/918273A gelmedi", "kargo takip: <ORDER_ID> gelmedi"),
    ("小包的单号是YT7720019384451，还没到", "小包的单号是<ORDER_ID>，还没到"),
    ("it's under qb88213x4471 i think", "it's under <ORDER_ID> i think"),
    ("ok my passport K08812745 is the one on file", "ok my passport <NATIONAL_ID> is the one on file"),
]
BACKSTOP_KEPT = [
    "is the 20000mAh power bank allowed on a plane",
    "budget is about 120000 rupees, 150000 max",
    "I paid €1,249.99 for it, and the 1.299.000 VND one was cheaper",
    "the box is 120x60x45 cm and the screen 3840x2160",
    "firmware 4.10.22817 bricked it",
    "ISBN 978-1-4028-9462-6, the hardcover",
    "model no. 5002117 vs KD-65X85J, EAN 4006381333931",
    "sizes 36 38 40 42 and years 1998 1999 2000 2001",
    "we walk 10000-25000 most days",
    "flight on 2025-03-14 at 09:45, back 21.03.2025",
]


@pytest.mark.parametrize(("text", "expected"), BACKSTOP_REMOVED, ids=[t[:36] for t, _ in BACKSTOP_REMOVED])
def test_identifier_backstop_removes_references_of_unknown_shape(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text", BACKSTOP_KEPT, ids=[t[:36] for t in BACKSTOP_KEPT])
def test_identifier_backstop_keeps_quantities_dates_and_product_codes(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text) == (text, [])


# Address chains: comma-separated pieces of an address in a format no street rule knows (written for this test).
CHAIN_REMOVED = [
    ("send it to Kastanjevej 17, 2. th, 8000 Aarhus C please", "send it to <ADDRESS> please"),
    ("ship to Calle Ficticia 88, 3º Izq, 28013 Madrid. Thanks", "ship to <ADDRESS>. Thanks"),
    ("my address: P.O. Box 7781, Kalispell, MT 59901. ok?", "my address: <ADDRESS>. ok?"),
    ("deliver to 14 Le Loi, Ben Thanh, Quan 1, Saigon", "deliver to <ADDRESS>"),
    ("doručit: Na Poříčí 1041/12, 110 00 Praha 1, díky", "doručit: <ADDRESS>, díky"),
]
CHAIN_KEPT = [
    "Size 42, Colour Navy, Qty 2 please",
    "we are 4 adults, 2 kids, staying in Rome, Florence and Venice",
    "flying BA 117, London to New York, 2 adults",
    "the iPhone 15, Galaxy S24, Pixel 8 Pro: which is best",
    "Day 2, Louvre, Orsay, Eiffel Tower at 3pm",
]
# Shouted messages, and Han or Hangul names that sign a message.
SHOUTED_AND_SIGNED = [
    ("PLEASE CHANGE THE NAME TO ADEBAYO OKONKWO, THE TICKET IS WRONG",
     "PLEASE CHANGE THE NAME TO <NAME>, THE TICKET IS WRONG"),
    ("DO YOU SHIP TO PARIS OR MADRID? NEED THE DYSON V15 ASAP",
     "DO YOU SHIP TO PARIS OR MADRID? NEED THE DYSON V15 ASAP"),
    ("请问这个有蓝色的吗？张伟明", "请问这个有蓝色的吗？<NAME>"),
    ("배송 언제 되나요? 박지훈", "배송 언제 되나요? <NAME>"),
    ("배송 언제 되나요? 감사합니다", "배송 언제 되나요? 감사합니다"),
    ("这个还有货吗？北京", "这个还有货吗？北京"),
    # a booking for somebody: capitalised words that are no common word, place or brand
    ("Booking for Makoa Kealoha and his son, arriving Honolulu", "Booking for <NAME> and his son, arriving Honolulu"),
    ("booking for Friday, 2 adults", "booking for Friday, 2 adults"),
    ("tickets for Paris on the 5th", "tickets for Paris on the 5th"),
    ("seat for Mum and Dad", "seat for Mum and Dad"),
    # Vietnamese names written without tones; kin words of other languages before a name
    ("refund to pham thi huong please", "refund to <NAME> please"),
    ("ship it to Hoang Duc Anh at the office", "ship it to <NAME> at the office"),
    ("do van deliveries come on sunday", "do van deliveries come on sunday"),
    ("Ho Chi Minh City hotels under 50 USD", "Ho Chi Minh City hotels under 50 USD"),
    ("my nonna Graziella loves the blue one", "my nonna <NAME> loves the blue one"),
    # a first name that is a common word, before a rare surname, in lower case
    ("cant log in since the update, faith nwosu", "cant log in since the update, <NAME>"),
    ("the rose gold strap in size m", "the rose gold strap in size m"),
]


@pytest.mark.parametrize(("text", "expected"), CHAIN_REMOVED, ids=[t[:36] for t, _ in CHAIN_REMOVED])
def test_address_chains_remove_addresses_of_unknown_formats(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text", CHAIN_KEPT, ids=[t[:36] for t in CHAIN_KEPT])
def test_address_chains_keep_lists_of_sizes_places_and_products(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text) == (text, [])


@pytest.mark.parametrize(("text", "expected"), SHOUTED_AND_SIGNED, ids=[t[:36] for t, _ in SHOUTED_AND_SIGNED])
def test_shouted_names_and_cjk_signatures(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Numbers that looked like a phone or an address and are neither (written for this test).
NOT_PHONE_OR_ADDRESS = [
    ("The ISBN is 0-306-40615-2, is it in stock?", "The ISBN is 0-306-40615-2, is it in stock?"),  # ISBN-10 groups
    ("got 1-4028-9462-7 and 978-1-4028-9462-6 here", "got 1-4028-9462-7 and 978-1-4028-9462-6 here"),
    ("EAN: 4-006381-333931 on the box", "EAN: 4-006381-333931 on the box"),  # after its cue
    # a pronoun before six digits is no city before a PIN code: the number alone is scrubbed, not the message
    ("I'm 004417 in your loyalty thing", "I'm <ORDER_ID> in your loyalty thing"),
    # still found: a phone in ISBN-like groups whose check digit fails, a city before its PIN code
    ("call me at 0-306-40615-3 tonight", "call me at <PHONE> tonight"),
    ("ship to Nungambakkam, Chennai 600034 please", "ship to <ADDRESS> please"),
]


@pytest.mark.parametrize(("text", "expected"), NOT_PHONE_OR_ADDRESS, ids=[t[:36] for t, _ in NOT_PHONE_OR_ADDRESS])
def test_book_numbers_are_no_phones_and_a_pronoun_is_no_city(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Somebody's company: a popular first name after "travelling / staying / sharing ... with" (written for this test).
COMPANY = [
    ("I am travelling with Maria next week, 2 seats", "I am travelling with <NAME> next week, 2 seats"),
    ("sharing the room with James, need two towels", "sharing the room with <NAME>, need two towels"),
    ("a dinner with Sophie on Friday, table for two", "a dinner with <NAME> on Friday, table for two"),
    # a shopper's choice or a product's feature after "with" stays
    ("going with Apple or Samsung?", "going with Apple or Samsung?"),
    ("does it come with Alexa built in?", "does it come with Alexa built in?"),
    pytest.param("is the speaker compatible with Siri", "is the speaker compatible with Siri", marks=pytest.mark.xfail(
        strict=True, reason="known, from before: a rare first name closing a message is scrubbed ('Siri')")),
    ("travelling with Nike trainers only", "travelling with Nike trainers only"),
]


@pytest.mark.parametrize(("text", "expected"), COMPANY)
def test_a_popular_first_name_in_somebodys_company(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Addresses in scripts other than Latin, without a post code: told by a street, road, building or unit word of
# their script (Korean: by the endings of province, district and road names), from that word on.
OTHER_SCRIPTS = [
    ("배송지: 대구광역시 수성구 달구벌대로 2450, 305동 901호 으로 부탁드려요", "배송지: <ADDRESS> 으로 부탁드려요"),
    ("경기도 성남시 분당구 판교역로 166 으로 보내주세요", "<ADDRESS> 으로 보내주세요"),
    ("운동화 260 사이즈 있나요? 3일 안에 와요?", "운동화 260 사이즈 있나요? 3일 안에 와요?"),
    ("ممكن التوصيل إلى حي النرجس، طريق الملك سلمان، مبنى 77 بكرة", "ممكن التوصيل إلى <ADDRESS>"),
    ("الرجاء الشحن إلى ٤٢ شارع التحرير، الدقي، الجيزة", "الرجاء الشحن إلى <ADDRESS>"),
    ("عندكم واحد، 2 قطع من اللون الأسود؟", "عندكم واحد، 2 قطع من اللون الأسود؟"),  # "واحد" is "one" here
    ("יש לכם במידה 42? תשלחו לרחוב הרצל 15, דירה 3, חיפה", "יש לכם במידה 42? תשלחו <ADDRESS>"),
    ("המחיר 120, משלוח 3 ימים?", "המחיר 120, משלוח 3 ימים?"),
    ("ส่งที่ 55/7 ซอยอารีย์ 2 แขวงสามเสนใน เขตพญาไท กรุงเทพฯ 10400", "ส่งที่ <ADDRESS>"),
]


@pytest.mark.parametrize(("text", "expected"), OTHER_SCRIPTS, ids=[t[:24] for t, _ in OTHER_SCRIPTS])
def test_addresses_of_other_scripts_by_their_street_words(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Names by the words around them (written for this test): a title goes with the name; a verb that takes a person,
# also before a phone number or in lower case; a relative or a role set off after the name; a possessive before
# a birthday; lower-case names listed with one found.
AROUND = [
    ("could you leave it with Mrs. Nowakowska at no. 5", "could you leave it with <NAME> at no. 5"),
    ("Herr Baumgartner holt es morgen ab", "<NAME> holt es morgen ab"),
    ("pls ring Shirin at the gate", "pls ring <NAME> at the gate"),
    ("contact Subramanian Pillai 94440 17382 for the keys", "contact <NAME> <PHONE> for the keys"),
    ("call oluwadamilare when the rider is near", "call <NAME> when the rider is near"),
    ("Kendall, my daughter, wants the lilac one", "<NAME>, my daughter, wants the lilac one"),
    ("Faith, the lady at your Ikeja branch, promised a refund",
     "<NAME>, the lady at your Ikeja branch, promised a refund"),
    ("the cake topper for Wiremu's birthday", "the cake topper for <NAME>'s birthday"),
    ("seats for me, ngozi and chukwuemeka", "seats for me, <NAME> and <NAME>"),
    # kept: the same words as things
    ("does the ring come in size 7?", "does the ring come in size 7?"),
    ("the Pandora ring Moments in silver", "the Pandora ring Moments in silver"),
    ("call me when the Jordan 4 is back", "call me when the Jordan 4 is back"),
    ("me, mum and dad want the family pass", "me, mum and dad want the family pass"),
    ("Paris, the city of light, is our first stop", "Paris, the city of light, is our first stop"),
    # a surname that is also a product or place word, after a person cue; the place itself stays
    ("please ask Olivia Park at the front desk", "please ask <NAME> at the front desk"),
    ("deliver to Grace Bell please", "deliver to <NAME> please"),
    ("we walked through Victoria Park at dusk", "we walked through Victoria Park at dusk"),
]


@pytest.mark.parametrize(("text", "expected"), AROUND, ids=[t[:36] for t, _ in AROUND])
def test_names_by_the_words_around_them(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# References with letters glued on by hyphens, a dash-like number that is no real date, a building unit, a relative
# after a possessive of another language, "ordered by" in other languages, "the name should be" (written for this).
MORE_SHAPES = [
    ("status of KTX-DE-5520913 please", "status of <ORDER_ID> please"),
    ("ref SHP-TH-2291-55310 still pending", "ref <ORDER_ID> still pending"),
    ("please cancel order 77-41-9902", "please cancel order <ORDER_ID>"),
    ("it came on 03-11-2025, two days late", "it came on 03-11-2025, two days late"),
    ("livrer au 14 rue Oberkampf, bâtiment B, 75011 Paris", "livrer au <ADDRESS>"),
    ("es para mi abuela Remedios Quispe", "es para mi abuela <NAME>"),
    ("as botas compradas pela Iolanda", "as botas compradas pela <NAME>"),
    ("the name should be Tevita Fifita on the card", "the name should be <NAME> on the card"),
    ("the USB-C 65W charger in EU-42 box", "the USB-C 65W charger in EU-42 box"),
]


@pytest.mark.parametrize(("text", "expected"), MORE_SHAPES, ids=[t[:36] for t, _ in MORE_SHAPES])
def test_glued_references_dates_units_and_cues_of_other_languages(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Precision on text of other languages and travel talk (written for this test): chat words that are no names, places
# named after people, a model's or a train's number that is no post code; and name cues of other languages.
OTHER_LANGUAGES = [
    ("Habari, simu yangu imefika? Asante", "Habari, simu yangu imefika? Asante"),
    ("Mera order kab aayega bhai", "Mera order kab aayega bhai"),
    ("Kak, ada warna lain? Terima kasih", "Kak, ada warna lain? Terima kasih"),
    ("how far is the hotel from Aeroporto Francisco Sá Carneiro?",
     "how far is the hotel from Aeroporto Francisco Sá Carneiro?"),
    ("we walk down the Friedrich-Ebert-Straße to the museum", "we walk down the Friedrich-Ebert-Straße to the museum"),
    ("is the musée Rodin open on Monday?", "is the musée Rodin open on Monday?"),
    ("we visit the Hassan Mosque at 10", "we visit the Hassan Mosque at 10"),
    ("the SoundCore 20000 power bank in black", "the SoundCore 20000 power bank in black"),
    ("our train is the Rajdhani 12952, Mumbai to Delhi", "our train is the Rajdhani 12952, Mumbai to Delhi"),
    ("Jina langu ni Wanjiru Kamau, nipo Thika", "Jina langu ni <NAME>, nipo Thika"),
    ("mera naam Rohit Verma hai", "mera naam <NAME> hai"),
    ("Imię i nazwisko: Grzegorz Brzęczyszczykiewicz", "Imię i nazwisko: <NAME>"),
]


@pytest.mark.parametrize(("text", "expected"), OTHER_LANGUAGES, ids=[t[:36] for t, _ in OTHER_LANGUAGES])
def test_other_languages_places_and_numbers(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Forms and numbers of other countries (written for this test): a phone's extension, an e-mail with "(arroba)", a
# surname in capitals before the given name, a nickname in quotes, a phone right after an address.
FORMS = [
    ("ring (212) 555-0184 ext. 31 after lunch", "ring <PHONE> after lunch"),
    ("mi correo es lucia.ferrer (arroba) gmail.com", "mi correo es <EMAIL>"),
    ("Passenger: SUZUKI Haruto, seat 14C", "Passenger: <NAME>, seat 14C"),
    ("Họ và tên: TRẦN THỊ MAI", "Họ và tên: <NAME>"),
    ("BIG SALE Maria collection in stock", "BIG SALE Maria collection in stock"),
    ("the parcel is for Roberto \"Beto\" Sandoval", "the parcel is for <NAME>"),
    ("adresse : Rue de la Loi 16, 1000 Bruxelles 0475 21 84 36. merci", "adresse : <ADDRESS> <PHONE>. merci"),
]


@pytest.mark.parametrize(("text", "expected"), FORMS, ids=[t[:36] for t, _ in FORMS])
def test_forms_and_numbers_of_other_countries(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Directions that complete an address (written for this test): in brackets or after a comma, in several languages,
# and an address joined across one; never over the phone after it.
DIRECTIONS = [
    ("ship to 14 Adeola Odeku Street, Victoria Island (opposite Eko Hotel), call 0803 555 1234",
     "ship to <ADDRESS>, call <PHONE>"),
    ("kirim ke Jl. Melati No. 9, Bekasi (rumah cat biru depan masjid)", "kirim ke <ADDRESS>"),
    ("Flat 12, Shree Residency, Ganesh Mandir ke peeche, Kothrud, Pune 411038", "<ADDRESS>"),
    ("the hotel is at 5 Rue Lepic, 75018 Paris. Is it near the Moulin Rouge?",
     "the hotel is at <ADDRESS>. Is it near the Moulin Rouge?"),
]


@pytest.mark.parametrize(("text", "expected"), DIRECTIONS, ids=[t[:36] for t, _ in DIRECTIONS])
def test_directions_complete_an_address(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


# Lower-case names in chat, person words of other languages, thanks sign-offs (written for this test, after the
# dev10 set's misses): a rare name typed in lower case in a lower-case message; never an English word's
# inflection ("logins"), a compound's head ("wool poncho") or a brand.
CHAT = [
    ("lol me n oluwaseun r splitting the big box, whats the price",
     "lol me n <NAME> r splitting the big box, whats the price"),
    ("pls tell bartosz the blue one is fine", "pls tell <NAME> the blue one is fine"),
    ("ok so katarzyna is getting the mug and we want two", "ok so <NAME> is getting the mug and we want two"),
    ("ich glaube Marlene hat gesagt dass es passt", "ich glaube <NAME> hat gesagt dass es passt"),
    ("Thiago disse que a caixa chegou amassada", "<NAME> disse que a caixa chegou amassada"),
    ("kavya ne bola ki size chhota hai", "<NAME> ne bola ki size chhota hai"),
    ("Emre abi kargo ne zaman gelir", "<NAME> abi kargo ne zaman gelir"),
    ("Ravi Menon returned the kettle on monday", "<NAME> returned the kettle on monday"),
    ("Noor just asked about the green one", "<NAME> just asked about the green one"),
    ("got it, tnx, Tamatea", "got it, tnx, <NAME>"),
    # kept: lower-case chat without a name
    ("my logins keep failing on the app when i pay", "my logins keep failing on the app when i pay"),
    ("is the wool poncho from the last live still in stock", "is the wool poncho from the last live still in stock"),
    ("the bots keep buying the drops before me lol", "the bots keep buying the drops before me lol"),
]


@pytest.mark.parametrize(("text", "expected"), CHAT, ids=[t[:36] for t, _ in CHAT])
def test_lower_case_names_in_chat_and_person_words_of_other_languages(scrubber: Scrubber, text: str,
                                                                       expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


def test_a_value_cut_by_sending_too_soon_is_read_across_the_messages(scrubber: Scrubber) -> None:
    """A phone in three messages, an address whose town and code come next, an ID's last digits after a dash; an
    address does not run on into a next message of ordinary words."""
    turns = ["ring me on +44 (20)", "7946", "0018 after six please"]
    assert [t for t, _ in scrubber.scrub_turns(turns)] == ["ring me on <PHONE>", "<PHONE>", "<PHONE> after six please"]
    turns = ["send it to 12 Orchard Lane, Kilcullen", "Kildare W91 X2C3 thanks!"]
    assert [t for t, _ in scrubber.scrub_turns(turns)][1] == "<ADDRESS> thanks!"
    turns = ["tracking 304-5518820", "-7741102 sorry"]
    assert [t for t, _ in scrubber.scrub_turns(turns)][1] == "-<ORDER_ID> sorry"
    turns = ["deliver to 8 Harbour Road, Cobh", "thanks so much"]
    assert [t for t, _ in scrubber.scrub_turns(turns)][1] == "thanks so much"


SAID_OR_SPELT = [
    # numbers read out word by word: digit words of six languages, "double", "hundred", "plus", groups and commas
    ("ring me on oh one six one, double four nine, eight three two seven", "ring me on <PHONE>"),
    ("mobile: zero six one two, three four, five six, seven eight please", "mobile: <PHONE> please"),
    ("it's 0161 nine hundred 5522 after six", "it's <PHONE> after six"),
    ("whatsapp plus four four seven seven zero zero nine eight one two three", "whatsapp <PHONE>"),
    ("mi número es seis uno dos, tres cuatro cinco, seis siete ocho", "mi número es <PHONE>"),
    ("meine Nummer: null eins sieben sechs, zwei drei vier fünf sechs sieben", "meine Nummer: <PHONE>"),
    # spelt one character at a time after a cue for its kind
    ("licence number is K as in Kilo, 7 7 3 0 2 1 9", "licence number is <NATIONAL_ID>"),
    ("the booking code is X Y Z dash 4 0 1 8 thanks", "the booking code is <ORDER_ID> thanks"),
    # e-mails said aloud or spaced against bots
    ("write to tomasz underscore nowak at onet dot pl", "write to <EMAIL>"),
    ("correo: ana punto belen arroba yahoo punto es", "correo: <EMAIL>"),
    ("reach me at kwame.b @ gmail . com tonight", "reach me at <EMAIL> tonight"),
    ("its lucy dot hart 77 at hotmail dot co dot uk", "its <EMAIL>"),
    ("contact nadia at yandex.ru for the invoice", "contact <EMAIL> for the invoice"),
    ("mail me at wren88@yahoo.com. Do you ship to Oslo?", "mail me at <EMAIL>. Do you ship to Oslo?"),
    ("Hi. lena.k@gmx.de is mine", "Hi. <EMAIL> is mine"),
    # references: a carrier's letters before digit groups, a record locator of letters, a phone with (+cc)
    ("tracking number is RB 5521 0093 7716", "tracking number is <ORDER_ID>"),
    ("seguimiento KX 4410 2231 88 por favor", "seguimiento <ORDER_ID> por favor"),
    ("my booking ref is WQZPTF for tomorrow", "my booking ref is <ORDER_ID> for tomorrow"),
    ("booking reference for the hotel is 8KQ2TZ", "booking reference for the hotel is <ORDER_ID>"),
    ("Tel (+49) 30 1234 5678, ask for the desk", "Tel <PHONE>, ask for the desk"),
    # a checked id glued to the letters of a script without spaces
    ("身份证号码是11010519491231002X谢谢", "身份证号码是<NATIONAL_ID>谢谢"),
]


@pytest.mark.parametrize(("text", "expected"), SAID_OR_SPELT, ids=[t[:36] for t, _ in SAID_OR_SPELT])
def test_values_said_aloud_or_spelt_are_removed(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


SAID_KEPT = [
    "we need two, then three, then one more of the blue ones",
    "count with me: one two three four five six seven eight",
    "sizes S = 34-36, M = 38-40, L = 42-44",
    "I found it cheaper at walmart.com last week",
    "look at amazon dot com for the same kettle",
    "we stayed at home. it was raining all day",
    "the order STILL has not arrived, is the BLACK one in stock?",
    "track it with DHL or UPS, whichever is faster",
    "I think I'd like the A4 size and the B5 one",
]


@pytest.mark.parametrize("text", SAID_KEPT, ids=[t[:36] for t in SAID_KEPT])
def test_counting_sizes_shops_and_shouted_words_are_kept(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text)[1] == []


CUED_ADDRESSES = [
    # after a word for address and a colon, the rest of the sentence, whatever its format or script
    ("alamat: Perum Bumi Indah Blok D4 No. 7, Kel. Cempaka, Kec. Ilir, Jambi 36125", "alamat: <ADDRESS>"),
    ("Địa chỉ nhận hàng: Số 8 ngõ 12 Phố Hàng Bạc", "Địa chỉ nhận hàng: <ADDRESS>"),
    ("پتہ: مکان نمبر 22، گلی 9، سیکٹر جی ٹین، راولپنڈی", "پتہ: <ADDRESS>"),
    ("Adresse : Hauptstr. 7, 80331 München. Danke!", "Adresse : <ADDRESS>. Danke!"),
    ("my address is Flat 3, 19 Mill Road, Leeds LS2 4AB. just browsing lamps",
     "my address is <ADDRESS>. just browsing lamps"),
]


@pytest.mark.parametrize(("text", "expected"), CUED_ADDRESSES, ids=[t[:36] for t, _ in CUED_ADDRESSES])
def test_the_sentence_after_an_address_cue_is_the_address(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text", [
    "address: same as last time please",
    "what is the address of your store in Lyon?",
    "the IP address is on the router label",
    "my email address is on the order",
])
def test_an_address_cue_without_a_number_after_it_removes_nothing(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text)[1] == []


@pytest.mark.parametrize(("text", "expected"), [
    ("name on card is BUKOLA ADEYEMI-COLE", "name on card is <NAME>"),
    ("name as in passport OYELARAN TEMITOPE", "name as in passport <NAME>"),
    ("the name on the ticket should be PHAM QUYNH ANH", "the name on the ticket should be <NAME>"),
])
def test_a_name_in_capitals_after_a_document_cue_is_a_name(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text", [
    "name on the card: VISA GOLD",
    "the brand name is NIKE AIR",
    "the name on the order is wrong, ASAP fix",
])
def test_capitals_after_a_name_cue_that_are_words_are_kept(scrubber: Scrubber, text: str) -> None:
    assert scrubber.scrub(text)[1] == []


@pytest.mark.parametrize(("text", "expected"), [
    ("Send it to Lena Roth, Bergstraße 12, 80331 München. Can you gift-wrap it?",
     "Send it to <NAME>, <ADDRESS>. Can you gift-wrap it?"),
    ("my address is 12 Main St, Springfield. Please deliver before 5",
     "my address is <ADDRESS>. Please deliver before 5"),
    ("ship to 4 Elm St, St. Louis, MO 63101 thanks", "ship to <ADDRESS> thanks"),
])
def test_an_address_ends_with_its_town_not_with_the_next_sentence(scrubber: Scrubber, text: str, expected: str) -> None:
    assert scrubber.scrub(text)[0] == expected


@pytest.mark.parametrize("text, pieces, joined", [
    # two address pieces with a short gap: one address, the gap included
    ("Brgy 3. Molino III, Bacoor", ["Brgy 3", "Molino III, Bacoor"], ["Brgy 3. Molino III, Bacoor"]),
    ("ap. 27, sector 5, București", ["ap. 27", "5, București"], ["ap. 27, sector 5, București"]),
    ("Rio de Janeiro - RJ, 22050-001", ["Rio de Janeiro", "RJ, 22050-001"], ["Rio de Janeiro - RJ, 22050-001"]),
    # two words between them, or a long gap: two addresses
    ("Calle Olmo 14 and then Rua Augusta 12", ["Calle Olmo 14", "Rua Augusta 12"], ["Calle Olmo 14", "Rua Augusta 12"]),
    ("Calle Olmo 14, ................. Rua Augusta 12", ["Calle Olmo 14", "Rua Augusta 12"],
     ["Calle Olmo 14", "Rua Augusta 12"]),
])
def test_address_pieces_with_only_punctuation_or_one_word_between_are_one_address(
        text: str, pieces: list[str], joined: list[str]) -> None:
    from data_curation.pii import Detection, _joined_addresses

    found = [Detection(text.index(p), text.index(p) + len(p), "ADDRESS") for p in pieces]
    assert [text[d.start : d.end] for d in _joined_addresses(text, found)] == joined


def test_a_value_of_another_type_between_two_address_pieces_keeps_them_apart() -> None:
    from data_curation.pii import Detection, _joined_addresses

    text = "Rua X 12, Ana, Porto 4000"
    found = [Detection(0, 8, "ADDRESS"), Detection(10, 13, "NAME"), Detection(15, 25, "ADDRESS")]
    assert _joined_addresses(text, found) == found
