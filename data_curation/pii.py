"""Find PII in free text and replace it with typed placeholders (``<EMAIL>``, ``<PHONE>``, ``<NAME>``…).

Detectors, one per type, each built for precision first and then recall:

- ``EMAIL``: RFC-shaped addresses (plus tags, sub-domains), the ``name [at] host [dot] com`` form and addresses said
  aloud or spaced against bots (``lucy dot hart 77 at hotmail dot co dot uk``, ``ana punto belen arroba yahoo punto
  es``, ``kwame.b @ gmail . com``);
- ``IBAN``: country code + check digits + 11-30 alphanumerics, accepted only if the ISO 7064 mod-97
  check passes;
- ``CARD``: 13-19 digits written whole or in card groupings (4-4-4-4, 4-6-5, …) that pass Luhn;
- ``IP``: dotted-quad IPv4 with octets <= 255; IPv6 validated by :mod:`ipaddress`;
- ``ORDER_ID``: Amazon-style ``123-1234567-1234567``, prefixed ids (``ORD-2024-123456``, ``PO12345``),
  ``#`` codes, and any id-shaped token right after "order / confirmation / tracking / invoice (no.)";
- ``NATIONAL_ID``: US SSN, UK National Insurance numbers, and id-shaped tokens after "SSN / passport /
  national id / tax id / Aadhaar / DNI / BSN …";
- ``ADDRESS``: a house number + street words + a street type (US/UK, with flat/apt, city, state + ZIP
  or UK postcode), German ``…straße 12, 10115 Berlin`` forms, French/Spanish/Italian ``12 rue …`` /
  ``Via Roma 5``, US ``City, ST 12345``, PO boxes, and post codes after "zip / postcode";
- ``PHONE``: :class:`phonenumbers.PhoneNumberMatcher` over several regions (numbers valid in a region's
  plan), plus merely *possible* numbers that carry a ``+`` prefix or follow a phone cue ("call", "tel");
- numbers said word by word or spelt one character at a time ("oh one six one, double four nine …", "K as in Kilo,
  7 7 3 0", "X Y Z dash 4 0 1 8"): a phone, or the type the cue before them names (:func:`_spelt_values`);
- ``NAME``: :mod:`data_curation.names` (cue phrases, capitalised runs, shipped name lists; with
  ``names: lexicon`` person names of 105 countries, with ``names: ner`` a spaCy model's PERSON spans).

Overlaps are resolved by type rank (the order of :data:`PII_TYPES`), then by length: an IBAN is not
also a phone number, a house number is not a phone number. Non-PII numbers (prices, sizes, years,
quantities, model numbers) match none of these shapes and survive.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import phonenumbers
from phonenumbers import Leniency, PhoneNumberMatcher

from data_curation.address import STREET_TYPES, TRIP_OR_MODEL_BEFORE, find_addresses
from data_curation.lexicon import load_lexicon
from data_curation.names import NameFinder
from data_curation.ner import DEFAULT_MODEL as DEFAULT_NER_MODEL
from data_curation.ner import SpacyPersons
from data_curation.tagger import NAME_VETO, PiiTagger, Reading
from data_curation.tagger import THRESHOLD as TAGGER_THRESHOLD
from data_curation.tagger import TYPES as TAGGER_TYPES

PII_RULES_VERSION = 18
"""Bumped whenever a detector changes what it finds (curation stages that scrub then re-run)."""
PII_TYPES: tuple[str, ...] = ("EMAIL", "IBAN", "CARD", "IP", "ORDER_ID", "NATIONAL_ID", "ADDRESS", "PHONE", "NAME")
"""Every type the scrubber knows, in overlap-priority order."""
assert TAGGER_TYPES == PII_TYPES, "data_curation.tagger.TYPES must name the scrubber's types (its labels are read as them)"
PLACEHOLDERS: dict[str, str] = {t: f"<{t}>" for t in PII_TYPES}
_RANK = {t: i for i, t in enumerate(PII_TYPES)}


@dataclass(frozen=True, order=True)
class Detection:
    """One PII span in the original text: ``text[start:end]`` is of ``type``."""

    start: int
    end: int
    type: str


# -- structured types ----------------------------------------------------------------------------
_EMAIL = re.compile(
    r"(?<![\w.%+'-])[\w][\w.%+'-]*@(?:[^\W_](?:[\w-]*[^\W_])?\.)+(?:[A-Za-z]{2,24}|xn--[a-z0-9-]+)(?![\w-])"
    r"|(?<![\w.+-])[\w.+-]+(?:\s*[\[(](?:dot|punto|ponto|point)[\])]\s*[\w+-]+)*\s*"
    r"[\[(](?:at|arroba|chiocciola|arobase|klammeraffe)[\])]\s*[\w-]+"
    r"(?:\s*(?:[\[(](?:dot|punto|ponto|point)[\])]|\.)\s*[\w-]+)+"
    r"|(?i:(?<![\w.+-])[\w.+-]+@[\w-]+(?:\s+dot\s+[\w-]+)+)"  # "o.ndiaye@ucad dot sn"
)  # "lena dot k at gmx dot de" and other spoken forms: _EMAIL_SPELT
# Spelt out or spaced ("park . jiwoo92 @ naver . com", "lindiwe underscore zulu at webmail dot co dot za", "jp.quintero
# arroba gmail punto com", "priya dot nair 92 at gmail dot com"): parts joined by spoken separators, an at, and a domain
# that ends in a top-level domain; a plain word before a spoken "at" is no mailbox ("look at amazon dot com").
_SPOKEN_DOT = r"(?:\s*\b(?:dot|punto|ponto|point|punkt)\b\s*|\.)"
_SPOKEN_JOIN = r"(?:\s*\b(?:dot|punto|ponto|point|punkt|underscore|underbar|guion bajo|gui[oó]n|dash|hyphen|tiret)\b\s*|[._-])"
_LABEL = r"[^\W_](?:[\w-]*[^\W_])?"
_TLD = r"(?:[a-z]{2}|com|net|org|edu|gov|info|biz|online|store|shop|app|dev|mail)(?![\w-])"


def _spelt_email_re(at: str, join: str, dot: str) -> re.Pattern[str]:
    return re.compile(rf"(?i)(?<![\w.+-])(?P<local>[\w+-]+(?:{join}[\w+-]+)*(?:\s+\d{{1,4}})?)(?P<at>{at})"
                      rf"{_LABEL}(?:{dot}{_LABEL})*{dot}{_TLD}(?![.@]\w)")


_EMAIL_SPELT = (  # with "@" a dot may have a space on each side ("hodan.w @ gmail . com", not "…@yahoo.com. Hi");
    # with a spoken at the dots are said or bare
    _spelt_email_re(r"\s*@\s*", rf"(?:\s+[._-]\s+|[._-]|{_SPOKEN_JOIN})", rf"(?:\s+\.\s+|{_SPOKEN_DOT})"),
    _spelt_email_re(r"\s+(?:at|arroba|chiocciola|arobase|klammeraffe)\s+", _SPOKEN_JOIN, _SPOKEN_DOT),
)
_NOT_MAILBOX = frozenset(
    "look looking looked arrive arrived arriving be is am are was were stay staying stayed meet meeting me us "
    "them him her it shop shopping shopped buy buying bought sell selling sold sells available found order "
    "ordered cheaper cheap sale check checked there here this that and or but not only even also just still "
    "listed price priced cost costs deal deals review reviews online go went going see saw seen log login logged "
    "sign signed anything something nothing everything site website page app store item items stock live living "
    "work working play playing watch watching lunch dinner breakfast home cheapest prices listing offer offers "
    "ships shipped delivered arrives".split())


def _spelt_emails(text: str) -> Iterator[Detection]:
    if "@" not in text and not re.search(r"(?i)\b(?:at|arroba|chiocciola|arobase|klammeraffe)\b", text):
        return
    for m in (m for pattern in _EMAIL_SPELT for m in pattern.finditer(text)):
        local = m.group("local")
        if m.group("at").strip() != "@" and local.lower() in _NOT_MAILBOX:
            continue  # "cheaper at walmart.com", "look at amazon dot com": a word before a spoken at is no mailbox
        yield Detection(m.start(), m.end(), "EMAIL")


_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_CARD = re.compile(r"(?<![\w.,-])\d(?:[ -]?\d){12,22}(?![\w-])")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = re.compile(rf"(?<![\w.])(?:{_OCTET}\.){{3}}{_OCTET}(?!\w|\.\d)")
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?![\w:])")
_VERSION_CUE = re.compile(r"(?i)\b(?:version|ver\.?|v\.?|release|firmware|build)\s*$")
_ORDER = re.compile(
    r"\b\d{3}-\d{7}-\d{7}\b"
    r"|\b(?:ORD|ORDER|PO|INV|SO|RMA|RET|TXN|REF|CONF|TRK)(?:[-_#:]?[A-Z0-9]{2,14}){1,3}\b"
    r"|(?<![\w#])#[A-Z0-9]{6,14}\b"
)
_ORDER_WORDS = (
    r"order|confirmation|tracking|invoice|booking|reference|ref|parcel|shipment|consignment|awb|waybill|"
    r"pedido|encomenda|commande|bestellung|beställning|bestilling|bestelling|tilaus|ordine|comanda|zamówienie|"
    r"objednávka|sipariş|заказ|замовлення|đơn hàng|mã|rechnung|factura|fattura|facture|reserva|prenotazione|"
    r"réservation|buchung|dhl|ups|fedex|usps|dpd|gls|ems|sendung|pnr|№|注文番号|订单号|訂單號|주문번호|رقم الطلب|الطلب رقم|"
    r"package|return|claim|ticket|case|transaction|txn|receipt|purchase|delivery|kundennummer|auftrag|lieferschein|"
    r"bon de commande|numéro de commande|número de pedido|numero d'ordine|nr zamówienia|sipariş no|siparis|"
    r"customer (?:no|number|id)|rma|return label|pedido nº|paquete|colis|pacco|przesyłka|посылка|отправление|"
    r"reservation|reservierung|bestellnummer|auftragsnummer|sendungsnummer|rechnungsnummer|"
    r"номер заказа|номер брони|бронь|confirmation code|booking code|itinerary|e-?ticket|voucher|locator|"
    r"予約番号|お問い合わせ番号|追跡番号|快递单号|运单号|单号|예약번호|송장번호|운송장|"
    r"rastreo|seguimiento|guía|dossier|résa|suivi|sendungsverfolgung|tracciamento|rastreio|kumbukumbu"
)
_ORDER_CUE = re.compile(
    rf"(?i:(?:\b|(?<=\W))(?:{_ORDER_WORDS})(?:\s*(?:no\.?|nr\.?|n\.|nº|n°|№|number|num|numaram|numarası|numarasi|id|code|draft|is|was|says|#|"
    r"reference\b|ref\b|for (?:the|my|our|this|your) [\w-]+))*)"
    r"\s*[:#]?\s*(?P<id>#?[A-Za-z0-9](?:[A-Za-z0-9-]|[/.](?=[A-Za-z0-9])|(?<=\d{4}) (?=\d{4}\b|\d{2}(?!\s*[A-Za-z])))"
    r"{4,40})(?![\w/])"
)
_ORDER_CONTEXT = re.compile(rf"(?i)\b(?:{_ORDER_WORDS})\b")
_ORDER_SHAPES = re.compile(
    r"\b[A-Z]{1,4}-\d{5,12}(?:-[A-Z0-9]{1,4})?\b"  # CAT-00912, KF-20931-ZA
    r"|\b1Z ?[0-9A-Z]{3} ?[0-9A-Z]{3} ?[0-9A-Z]{2} ?[0-9A-Z]{4} ?[0-9A-Z]{3,4}\b"  # UPS
    r"|\b[A-Z]{2} ?\d{3} ?\d{3} ?\d{3} ?[A-Z]{2}\b"  # UPU S10 (postal tracking)
    r"|\b[A-Z]{1,3}\d{12,22}\b"  # long carrier numbers (JD0146…)
    r"|\b\d{3}-\d{7}-\d{3,7}\b"  # marketplace order numbers
    r"|\b(?=[\w-]*[A-Z])\d{2,6}-[A-Z0-9]{2,8}(?:-[A-Z0-9]{2,8})+\b"  # 7781-2290-RU, 99-SA-482751
    r"|\b[A-Z]{2,5}[/-]20\d{2}[/-]\d{1,4}(?:[/-]\d{1,8})?\b"  # INV/2025/04417, AB-2025/11/0093
    r"|\b20\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])-\d{3,8}\b"  # 20251104-0087: date-stamped
    r"|\b9[2-5]\d{2}(?: ?\d{4}){4} ?\d{2}\b"  # USPS tracking, 22 digits
)
_DATE = re.compile(r"\d{1,4}[/.-]\d{1,2}(?:[/.-]\d{2,4})?")


def _date_like(token: str) -> bool:
    """A date's shape with a day and a month that exist ("10/12/2025", "2025-03", "3.4."), not "66-55-2231"."""
    if not _DATE.fullmatch(token):
        return False
    parts = [int(p) for p in re.split(r"[/.-]", token)]
    day_month = lambda a, b: 1 <= a <= 31 and 1 <= b <= 12  # noqa: E731
    if len(str(parts[0])) >= 3 or parts[0] > 31:  # year first: 2025-03(-14)
        return 1 <= parts[1] <= 12 and (len(parts) < 3 or 1 <= parts[2] <= 31)
    return day_month(parts[0], parts[1]) or day_month(parts[1], parts[0])
_ORDER_HASH = re.compile(r"(?<![\w#])#\d{3,12}\b")
_SSN = re.compile(r"\b(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}\b")
_NINO = re.compile(r"\b(?!BG|GB|NK|KN|TN|NT|ZZ)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D]\b")
_ID_CUE = re.compile(
    r"(?i:\b(?:ssn|social security(?: number| no\.?)?|social|passport(?: number| no\.?)?|national id(?: number)?|"
    r"id (?:number|no\.?)|tax id|tin|steuer[- ]?id|personalausweis(?:nummer)?|aadhaar|pan|dni|nie|nif|bsn|"
    r"personnummer|cpf|curp|nino|ni number|kennitala|pesel|codice fiscale|cf|cpr|hetu|henkilötunnus|"
    r"rut|run|rfc|nir|insee|sofinummer|bsn|pps|ppsn|sin|nric|fin|hkid|mynumber|emirates id|"
    r"id card|identity card|carte d'identité|cédula|cedula|dni|documento|rg|nin|bvn|ktp|nik|tckn|tc kimlik)"
    r"(?:\s+(?:details|number|no\.?|nr\.?|is|here|for [\w ]{1,30}?))*\s*(?:is|:|#|-)?\s*)"
    r"(?P<id>[A-Z0-9](?:[A-Z0-9.-]| (?=[A-Z0-9])){4,24}[A-Z0-9])\b"
)
_CODICE_FISCALE = re.compile(r"\b[A-Z]{6}\d{2}[A-EHLMPR-T]\d{2}[A-Z]\d{3}[A-Z]\b")
# Shapes that are national ids wherever they appear: Brazilian CPF, Chilean RUT, Mexican CURP, Spanish NIE.
_ID_SHAPES = re.compile(
    r"\b\d{3}\.\d{3}\.\d{3}-\d{2}\b"  # CPF
    r"|\b\d{1,2}\.\d{3}\.\d{3}-[\dkK]\b"  # RUT
    r"|\b[A-Z]{4}\d{6}[HM][A-Z]{5}[A-Z\d]\d\b"  # CURP
    r"|\b[XYZ]-?\d{7}-?[A-Z]\b"  # NIE
    r"|\b[A-Z]{3}[PCHFATBLJG][A-Z]\d{4}[A-Z]\b"  # Indian PAN
    r"|\b\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])-[1-8]\d{6}\b"  # Korean resident registration number
    r"|\b756[. ]?\d{4}[. ]?\d{4}[. ]?\d{2}\b"  # Swiss AHV/AVS
    r"|\b[A-Z]{1,2}\d{6} ?\([0-9A]\)"  # Hong Kong HKID
    r"|\b784-?(?:19|20)\d{2}-?\d{7}-?\d\b"  # Emirates ID
    r"|\b[STFGM]\d{7}[A-Z]\b"  # Singapore NRIC / FIN
    r"|\b\d{2}\.\d{2}\.\d{2}-\d{3}\.\d{2}\b"  # Belgian national number
    r"|\b9\d{2}-(?:5\d|6[0-5]|7\d|8[0-8]|9[0-24-9])-\d{4}\b"  # US ITIN
    r"|\b[A-ZÑ&]{4}\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])[A-Z0-9]{3}\b"  # Mexican RFC
)
# Numbers that are national ids only when their check digits agree (so prices, phones and order numbers
# rarely pass): Chinese resident id, Swedish / Danish / Finnish / Norwegian personal numbers, French NIR,
# Spanish DNI, Aadhaar, PESEL, Turkish TCKN.
_ID_CHECKED = re.compile(
    r"(?P<cn>(?<![0-9A-Za-z])[1-9]\d{5}(?:19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])\d{3}[\dXx](?![0-9A-Za-z]))"
    r"|(?P<nordic>\b(?:19|20)?\d{6}[-+]\d{4}\b)"
    r"|(?P<fi>\b\d{6}[-+A]\d{3}[0-9A-FHJ-NPR-Y]\b)"
    r"|(?P<nir>\b[12] ?\d{2} ?(?:0[1-9]|1[0-2]|[2-9]\d) ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}\b)"
    r"|(?P<dni>\b\d{8}-?[A-Z]\b)"
    r"|(?P<aadhaar>\b[2-9]\d{3} \d{4} \d{4}\b)"
    r"|(?P<eleven>(?<![\d+-])\b\d{11}\b(?![-\d]))"
    r"|(?P<thirteen>(?<![\d+-])\b\d{13}\b(?![-\d]))"
)
# A cue for an identity number anywhere in the text; the id is the first number-like token within 40
# characters after it ("KYC is asking aadhaar, here: 4821 7390 5521", "driver's licence no. D1234-5678").
_ID_CUE_FAR = re.compile(
    r"(?i:\b(?:ssn|social security|passport|national id|id (?:number|no)|identity (?:number|card|document)|tax id|"
    r"tax (?:number|no|code)|vat(?: number| no)?|steuer[- ]?id|steuernummer|personalausweis|aadhaar|aadhar|pan card|"
    r"personnummer|national insurance|kennitala|pesel|codice fiscale|hetu|sofinummer|social insurance|"
    r"emirates id|cédula|cedula|kimlik|driver'?s? licen[cs]e|driving licen[cs]e|licen[cs]e (?:no|number)|"
    r"nhs (?:no|number)|medicare|health card|insurance number|member(?:ship)? id|student id|employee id|kyc|"
    r"resident registration|teudat zehut|zehut|sozialversicherungs\w*|fødselsnummer|personal (?:number|id|code)|"
    r"isikukood|asmens kodas|rodné číslo|birth number|mykad|ic (?:number|no)|philsys|ghana card|omang|iqama|civil id|"
    r"kra pin|pinfl|rijksregisternummer|numéro d'assurance sociale|personas kods|cédula de (?:identidad|ciudadanía)|"
    r"căn cước(?: công dân)?|cccd|cmnd|carte vitale|numéro de sécurité sociale|sécurité sociale|nhi number|"
    r"ird number|trn|national registration|registration number|id no|identification number|"
    r"voter id|residence permit|permit number|kimlik no|pps number|id card|identity no|tax file number|"
    r"my ?number card|citizen (?:id|number)|national (?:number|identity)|personalnummer|henkilötunnus|ahv|avs)\b)"
    r"|주민등록번호|주민번호|개인통관고유부호|外国人登録|身份证号?|身分證|マイナンバー|תעודת זהות|ת\"ז|ת\.ז\.?|رقم الهوية|الرقم الوطني|"
    r"\b(?:ІПН|ИНН|ИИН|РНОКПП|СНИЛС|ЕГН|ΑΜΚΑ|ΑΦΜ|ΑΔΤ|AMKA|AFM|OIB|JMBG|EMŠO|CNP|PIC|DUI|CIN|NIC|NIN|NID|NIK|"
    r"IIN|NISS|NAS|C\.I\.|CI|RG|TC)\b|個人番号|居民身份证|"
    r"\b(?:інн|инн|снилс|паспорт|ідентифікаційний код|личный номер|numéro de sécurité sociale|sécurité sociale|"
    r"seguridad social|número de identidad|carteira de identidade|codice identificativo|rodné číslo|"
    r"id-?nummer|steuernummer|burgerservicenummer|personnummer|cpr-?nummer|henkilötunnus|isikukood|"
    r"เลขบัตรประชาชน|เลขประจำตัวประชาชน|บัตรประชาชน)"
    # short acronyms only in capitals ("ona nie mówi" is Polish, not a Spanish NIE)
    r"|\b(?:SSN|DNI|NIE|NIF|BSN|CPF|CURP|NINO|CPR|RUT|RFC|NIR|INSEE|PPSN?|SIN|NRIC|HKID|NIN|BVN|KTP|NIK|TCKN|TFN|TIN|"
    r"PAN|VAT|RRN|AHV|AVS|TZ|CNIC|NID|EGN|JMBG|OIB|CUIL|CUIT|DPI|NIT|INE|QID|TFN|IRD|SSS|UMID|NIDA)\b"
)
_ID_TOKEN = re.compile(r"(?<![\w.+-])(?=[\w .-]*\d)[A-Z0-9](?:[A-Z0-9./-]| (?=[A-Z0-9]))*[A-Z0-9](?![\w-])")

# -- addresses -----------------------------------------------------------------------------------
_STATES = (
    "AL|AK|AZ|AR|CA|CO|CT|DE|FL|GA|HI|ID|IL|IN|IA|KS|KY|LA|ME|MD|MA|MI|MN|MS|MO|MT|NE|NV|NH|NJ|NM|NY|NC|ND|OH|"
    "OK|OR|PA|RI|SC|SD|TN|TX|UT|VT|VA|WA|WV|WI|WY|DC"
)
_ST_TYPES = (
    r"(?:Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Terrace|Ter|"
    r"Circle|Cir|Parkway|Pkwy|Highway|Hwy|Square|Sq|Crescent|Cres|Close|Grove|Gardens|Gdns|Mews|Trail|Trl|"
    r"Alley|Plaza|Pike|Parade|Esplanade|Quay|Wharf)\.?"
)
_CAPWORD = r"[A-Z][\w'’.-]*"
# A town's word: capitalised, or a short abbreviation with its dot ("St. Louis"); a sentence's full stop after a town is
# not part of it, nor is the next sentence's first word ("… 50007 Köln. Can you …").
_CITY_WORD = r"[A-ZÀ-Þ](?:[a-zß-ÿ'’-]+(?:\.[a-zß-ÿ'’-]+)*|[a-zß-ÿ]{0,2}\.)"
_CITY = rf"{_CITY_WORD}(?:[ -]{_CITY_WORD}){{0,2}}"
_UNIT = r"(?:Apt\.?|Apartment|Suite|Ste\.?|Unit|Flat|Floor|Fl\.?|Room|Rm\.?|#)\s*[A-Za-z0-9-]{1,6}"
_ZIP = r"\d{5}(?:-\d{4})?"
_UKPC = r"[A-Z]{1,2}\d[A-Z\d]?\s?\d[ABD-HJLNP-UW-Z]{2}"
_DE_PLZ_CITY = rf"\d{{4,5}}\s+{_CITY}"
_ADDRESS = re.compile(
    "|".join((
        # US / UK: [Flat 3, ]221B Baker Street[, Apt 5][, City][, ST 12345 | NW1 6XE | 12345]
        rf"(?:{_UNIT},?\s+)?\b\d{{1,6}}[A-Za-z]?(?:-\d{{1,4}})?\s+(?:(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West)\.?\s+)?"
        rf"(?:{_CAPWORD}\s+){{1,4}}?{_ST_TYPES}(?![\w])(?:\s+(?:N|S|E|W|NE|NW|SE|SW)\b)?(?:,?\s+{_UNIT})?(?:,\s*{_CITY})?"
        rf"(?:,?\s+(?:{_STATES})\s+{_ZIP}\b|,?\s+{_UKPC}\b|,?\s+{_ZIP}\b)?",
        # German / Austrian / Swiss: Hauptstraße 12a, 10115 Berlin | Berliner Straße 5
        rf"\b(?:[A-ZÄÖÜ][\wäöüß-]*(?:straße|strasse|str\.|weg|allee|platz|gasse|ring|damm|ufer|chaussee|steig|pfad)"
        rf"|[A-ZÄÖÜ][\wäöüß-]+\s+(?:Straße|Strasse|Str\.|Weg|Allee|Platz|Gasse|Ring|Damm))"
        rf"\s+\d{{1,4}}\s?[a-zA-Z]?(?![\w])(?:,?\s+{_DE_PLZ_CITY})?",
        # French: 12 bis rue de la Paix, 75002 Paris
        rf"\b\d{{1,4}}(?:\s?(?:bis|ter))?,?\s+(?:rue|avenue|av\.|boulevard|bd|place|chemin|allée|impasse|quai|route|cours)"
        rf"\s+(?:(?:de|du|des|la|le|l'|d')\s*)*[A-ZÀ-Þ][\w'’-]+(?:\s+[A-ZÀ-Þ][\w'’-]+)*(?:,?\s+\d{{5}}\s+{_CITY})?",
        # Spanish / Italian / Portuguese: Calle Mayor 5, 28013 Madrid | Via Roma 12
        rf"\b(?:Calle|Avenida|Av\.|Plaza|Paseo|Via|Viale|Piazza|Corso|Rua|Travessa)\s+"
        rf"(?:(?:de|del|la|las|los|da|do|dos|della|di)\s+)*[A-Z][\w'’-]+(?:\s+[A-Z][\w'’-]+)*,?\s+\d{{1,4}}[a-zA-Z]?"
        rf"(?![\w])(?:,?\s+{_DE_PLZ_CITY})?",
        # US city, state and ZIP on their own; PO boxes
        rf"\b{_CITY},\s*(?:{_STATES})\s+{_ZIP}\b",
        rf"\b(?:P\.?\s?O\.?\s?Box|Post Office Box)\s+\d{{1,8}}\b(?:,\s*{_CITY})?(?:,?\s+(?:{_STATES})\s+{_ZIP}\b)?",
    ))
)
_POSTCODE_CUE = re.compile(
    rf"(?i:\b(?:zip(?: code)?|postcode|post code|postal code|plz|eircode|cep|pin(?: ?code)?|cap|code postal|c\.p\.|cp|postnummer|código postal|codigo postal|почтовый индекс|индекс)\s*(?:is|es|est|ist|é|:|#)?\s*[:#]?\s*)"
    rf"(?P<id>{_ZIP}|{_UKPC}|[A-Z]\d[A-Z]\s?\d[A-Z]\d|[AC-FHKNPRTV-Y]\d{{2}}\s?[AC-FHKNPRTV-Y0-9]{{4}}|\d{{4}}\s?[A-Z]{{2}}|"
    rf"\d{{4,5}}-\d{{3}}|\d{{2}}-\d{{3}}|\d{{3}}-\d{{4}}|\d{{3}}\s?\d{{3}}|\d{{4,6}})\b"
)
# Digital addresses: Ghana Post GPS ("GA-184-2290"), after their cue
_GPS_ADDRESS = re.compile(r"(?i:\b(?:gps|digital address|ghanapost|ghana post)(?: address| code)?\s*(?:is|:)?\s*)"
                          r"(?P<id>[A-Z]{2}-?\d{3,4}-?\d{3,4})\b")
# Inside an address span: a cue for a phone, a person, an e-mail or a customer number ends the address
# ("…Chennai 600034, contact Sujatha…", "…1203室，收件人 王秀英，电话 138…", "…, card holder is Milica…").
_ADDRESS_STOP = re.compile(
    r"(?i:(?<![\w-])(?:contact(?: person| number| no\.?)?|tel(?!\s*aviv)\.?|tlf|phone|mob(?:ile)?|cell(?:phone)?|whatsapp|"
    r"recipient|receiver|addressee|card ?holder|name on (?:the )?card|attn|attention|e-?mail|kundennummer|"
    r"customer (?:no|number|id)|for the attention of)(?![\w-]))"
    r"|电话|電話|手机|手機|收件人|收货人|收貨人|联系人|連絡先|携帯|받는 ?사람|연락처|전화|เบอร์|โทร|ผู้รับ|جوال|هاتف|"
    r"المستلم|טלפון|נייד|тел\.?|телефон|получатель|[、，,]\s*(?=[^\s、，,]{1,8}(?: [^\s、，,]{1,8})?\s*(?:宛|様))"
    r"|\s[—–]\s*(?=[^\d\s,]{2,12}(?: [^\d\s,]{2,12})?\s*$)"
    r"|(?<=[.!?] )(?i:groetjes|groeten|(?:best |kind )?regards|thanks|thank you|thx|cheers|saludos|grüße|gruß|merci|"
    r"cordialement|bisous|love|obrigad[oa]|grazie|gracias|danke)\b"
)
_PHONE_CANDIDATE = re.compile(r"(?<![0-9A-Za-zÀ-ɏ_+(])(?:\(?\+\s?)?\(?\d(?:[\d().\-/]|[ \t](?=[\d(+]))*\d\)?")
_ROUND_RANGE = re.compile(r"[1-9]\d*0{3,}\s*[-–]\s*[1-9]\d*0{3,}")
_PHONE_CUE = re.compile(r"(?i)\b(?:call|phone|tel(?!\s*aviv)|tlf|tfn|telefon|telefone|teléfono|telefono|telephone|mobile|mob|cell|"
                        r"number|whatsapp|text me|reach me|fax|ring|contact|cel|celular|móvil|movil|handy|portable|"
                        r"cellulare|numaram|telefonu|sđt|sdt|hp|no hp|nomor|номер|телефон|тел|моб)\b"
                        r"|电话|電話|手机|手機|携帯|連絡先|전화|휴대폰|핸드폰|연락처|เบอร์|โทร|جوال|هاتف|رقم|טלפון|נייד")


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_ok(compact: str) -> bool:
    """ISO 13616 IBAN check: move the first four characters to the end, letters to numbers, mod 97 == 1."""
    if not 15 <= len(compact) <= 34:
        return False
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in moved)) % 97 == 1


def _iban(text: str) -> Iterator[Detection]:
    for m in _IBAN.finditer(text):
        raw = m.group()
        # Try the longest prefix first: a following all-caps word may have been swallowed.
        for end in range(len(raw), 14, -1):
            if raw[end - 1] != " " and iban_ok(raw[:end].replace(" ", "")) and (end == len(raw) or raw[end] == " "):
                yield Detection(m.start(), m.start() + end, "IBAN")
                break


_IBAN_CUED = re.compile(r"(?i:\biban\b|\baccount(?: number| no\.?)?|\bkonto(?:nummer)?|\bcompte|\bcuenta|\bconta)"
                        r"\s*(?:is|:|#)?\s*(?P<id>[A-Z]{2}\d{2}(?: ?[A-Z0-9]{2,4}){2,8})\b")


def _iban_cued(text: str) -> Iterator[Detection]:
    """An IBAN-shaped value right after "IBAN" even when cut short (no check digits to verify)."""
    for m in _IBAN_CUED.finditer(text):
        yield Detection(m.start("id"), m.end("id"), "IBAN")


def _other_cue_before(text: str, start: int) -> bool:
    """An order, tracking or identity cue right before a Luhn-valid number, and no card word: the number is
    that cue's value ("DPD 15505000448812", "SA ID 8001…"), not a card."""
    window = text[max(0, start - 28) : start]
    return bool(_ORDER_CONTEXT.search(window) or _ID_CUE_FAR.search(window)) and not _CARD_WORD.search(window)


_CARD_WORD = re.compile(r"(?i)\b(?:card|visa|mastercard|master card|amex|cc|credit|debit|kreditkarte|tarjeta|carte|"
                        r"cartão|carta|karta|kart|カード|卡)")


def _cued_not_cards(text: str, found: list[Detection]) -> list[Detection]:
    """A Luhn-valid number that an order or identity rule also found, right after its cue and with no card word
    before it, is that value ("DPD 15505000448812"), not a card; a card no other rule found stays a card."""
    others = {(d.start, d.end) for d in found if d.type in ("ORDER_ID", "NATIONAL_ID")}
    return [d for d in found if not (d.type == "CARD" and (d.start, d.end) in others and _other_cue_before(text, d.start))]


def _card_shape(groups: list[str]) -> bool:
    lens = [len(g) for g in groups]
    if len(lens) == 1:
        return True
    return (all(n == 4 for n in lens[:-1]) and 1 <= lens[-1] <= 4) or lens in ([4, 6, 5], [4, 6, 4])


def _cards(text: str) -> Iterator[Detection]:
    for m in _CARD.finditer(text):
        raw = m.group()
        seps = set(re.findall(r"[ -]", raw))
        if len(seps) > 1:
            continue
        groups = re.split(r"[ -]", raw)
        # Longest run of groups first, so a number followed by a year or a count is still found.
        for n in range(len(groups), 0, -1):
            digits = "".join(groups[:n])
            if 13 <= len(digits) <= 19 and _card_shape(groups[:n]) and luhn_ok(digits) \
                    and not (len(digits) == 13 and id13_ok(digits)):
                yield Detection(m.start(), m.start() + len(" ".join(groups[:n])), "CARD")
                break


_CARD_CUE = re.compile(r"(?i)\b(?:card|visa|mastercard|master card|amex|cc|credit|debit|kreditkarte|tarjeta|carte|cartão)"
                       r"(?:\s+(?:no\.?|number|num|is|#|details))*\s*[:#]?\s*$")
_CARD_TAIL = re.compile(r"(?i)^\s*(?:exp|expiry|expires|valid|cvv|cvc)\b")
_DIGIT_GROUPS = re.compile(r"(?<![\w.,-])\d{2,6}(?:[ -]\d{2,6})+(?![\w-])|(?<![\w.,-])\d{8,19}(?![\w-])")


def _card_fragments(text: str) -> Iterator[Detection]:
    """Digit groups after "card is" / before "exp 12/29": part of a card number (8+ digits)."""
    for m in _DIGIT_GROUPS.finditer(text):
        if sum(c.isdigit() for c in m.group()) >= 8 and (
                _CARD_CUE.search(text[max(0, m.start() - 30) : m.start()]) or _CARD_TAIL.match(text[m.end() :])):
            yield Detection(m.start(), m.end(), "CARD")


def _ips(text: str) -> Iterator[Detection]:
    for m in _IPV4.finditer(text):
        if not _VERSION_CUE.search(text, max(0, m.start() - 12), m.start()):
            yield Detection(m.start(), m.end(), "IP")
    if text.count(":") >= 2:
        for m in _IPV6.finditer(text):
            try:
                ipaddress.IPv6Address(m.group())
            except ValueError:
                continue
            yield Detection(m.start(), m.end(), "IP")


def _a_word(token: str) -> bool:
    """A word of English, Spanish, French, German or Portuguese ("STILL", "BLACK"), not a record locator ("QXPLMN")."""
    from wordfreq import zipf_frequency

    return any(zipf_frequency(token.lower(), lang) >= 1.5 for lang in ("en", "es", "fr", "de", "pt"))


def _order_ids(text: str) -> Iterator[Detection]:
    for m in _ORDER_SHAPES.finditer(text):
        if _ID_CUE_FAR.search(text, max(0, m.start() - 28), m.start()) \
                and not _ORDER_CONTEXT.search(text, max(0, m.start() - 28), m.start()):
            continue  # "개인통관고유부호 P240118835672": an order's shape after an identity cue is the identity number
        yield Detection(m.start(), m.end(), "ORDER_ID")
    for m in _ORDER_HASH.finditer(text):
        if _ORDER_CONTEXT.search(text, max(0, m.start() - 40), m.start()):
            yield Detection(m.start(), m.end(), "ORDER_ID")
    for m in _ORDER.finditer(text):
        raw = m.group()
        if raw.startswith("#"):
            if any(c.isdigit() for c in raw) or _ORDER_CONTEXT.search(text, max(0, m.start() - 40), m.start()):
                yield Detection(m.start(), m.end(), "ORDER_ID")
        elif sum(c.isdigit() for c in raw) >= 5:
            yield Detection(m.start(), m.end(), "ORDER_ID")
    for m in _ORDER_CUE.finditer(text):
        token = m.group("id")
        digits = sum(c.isdigit() for c in token)
        if _date_like(token) or re.fullmatch(r"(?i)\d+(?:st|nd|rd|th|am|pm|kg|cm|mm|ml|gb|tb)", token):
            continue  # "delivery 10/12/2025", "return 30days"
        if _ID_SHAPES.fullmatch(token) or _CODICE_FISCALE.fullmatch(token):
            continue  # "the booking is S8734521D": a national id's own shape wins over the order cue
        if digits >= 4 or (digits >= 1 and token.lstrip("#").isupper() and len(token) >= 6) or token.startswith("#") \
                or (token.isalpha() and token.isupper() and 5 <= len(token) <= 8
                    and sum(c in "AEIOUY" for c in token) <= 1 and not _a_word(token)):
            yield Detection(m.start("id"), m.end("id"), "ORDER_ID")  # "dossier QXPLMN": a record locator's letters


# -- values read out or spelt: "oh seven seven double oh nine …", "P as in Peter, 4 4 7 1", "A B C dash 7 7 1 2" --------
_DIGIT_WORDS = {
    **dict.fromkeys(("zero", "nought", "cero", "zéro", "null", "nul"), "0"),
    **dict.fromkeys(("one", "uno", "eins", "um"), "1"), **dict.fromkeys(("two", "dos", "deux", "zwei", "zwo", "dois", "due"), "2"),
    **dict.fromkeys(("three", "tres", "trois", "drei", "três", "tre"), "3"),
    **dict.fromkeys(("four", "cuatro", "quatre", "vier", "quatro", "quattro"), "4"),
    **dict.fromkeys(("five", "cinco", "cinq", "fünf", "fuenf", "cinque"), "5"),
    **dict.fromkeys(("six", "seis", "sechs", "sei"), "6"), **dict.fromkeys(("seven", "siete", "sept", "sieben", "sete", "sette"), "7"),
    **dict.fromkeys(("eight", "ocho", "huit", "acht", "oito", "otto"), "8"),
    **dict.fromkeys(("nine", "nueve", "neuf", "neun", "nove"), "9"),
}
_REPEAT_WORDS = {"double": 2, "triple": 3, "doble": 2, "doppel": 2, "doppio": 2}
_SPELT_TOKEN = re.compile(r"\+|[^\W_]+|[,/-]")
_SPELT_HINT = re.compile(  # two digit words in a row, or four characters one by one
    rf"(?i)\b(?:{'|'.join(sorted({*_DIGIT_WORDS, *_REPEAT_WORDS, 'oh', 'o', 'hundred'}, key=len, reverse=True))})"
    rf"[\s,/-]+(?:{'|'.join(sorted({*_DIGIT_WORDS, *_REPEAT_WORDS, 'oh', 'o', 'hundred'}, key=len, reverse=True))})\b"
    r"|(?<!\w)\w[\s,/-]+\w[\s,/-]+\w[\s,/-]+\w(?!\w)")
_AS_IN = re.compile(r"\s+(?:as in|like|for|wie|comme|como|de)\s+[A-Z][a-z]+")  # "P as in Peter", "B wie Berta"


def _spelt_values(text: str) -> Iterator[Detection]:
    """Numbers read out word by word or character by character ("my number is oh seven nine eight, four four one,
    two two zero six", "zero four one two, five five five", "plus two three three …", "07700 nine hundred 418",
    "P as in Peter, 4 4 7 1 9 0 3 2", "A B C dash 7 7 1 2"): a run of digit words (English, Spanish, French,
    German, Portuguese, Italian; "double" / "triple" repeat the next), single characters, digit groups and the
    dashes or commas between them. A run holding 7+ digits with at least two spelt tokens is a value; a shorter one
    (3+ digits, 6+ spelt tokens) only right after a cue for its type. The type comes from the cue before it (an
    identity number, an order, a card), else a phone (7-15 digits) or a reference."""
    if not _SPELT_HINT.search(text):  # most texts say no digit word and spell nothing: skip them cheaply
        return
    toks = [(m.start(), m.end(), m.group()) for m in _SPELT_TOKEN.finditer(text)]
    i = 0
    while i < len(toks):
        chars, spelt, singles, j, first, last = "", 0, 0, i, None, None
        repeat = 1
        while j < len(toks):
            s, e, t = toks[j]
            if j > i and text[toks[j - 1][1] : s].strip():
                break  # only spaces between the parts of one value: "41 D:6" or "0958 I'm" is no run
            low = t.lower()
            nxt = toks[j + 1][2].lower() if j + 1 < len(toks) and not text[e : toks[j + 1][0]].strip() else ""
            if low in _DIGIT_WORDS or (low in ("oh", "o") and (chars or nxt in _DIGIT_WORDS or nxt in _REPEAT_WORDS)
                                       and (nxt in _DIGIT_WORDS or nxt in _REPEAT_WORDS or nxt in ("oh", "o")
                                            or (chars and chars[-1:].isdigit()))):
                chars += _DIGIT_WORDS.get(low, "0") * repeat
                spelt += 1
            elif low in _REPEAT_WORDS and (nxt in _DIGIT_WORDS or nxt in ("oh", "o") or (len(nxt) == 1 and nxt.isdigit())):
                repeat = _REPEAT_WORDS[low]
                first = s if first is None else first
                j += 1
                continue
            elif low in ("hundred", "thousand") and chars[-1:].isdigit() and toks[j - 1][2].lower() in _DIGIT_WORDS:
                chars += "00" if low == "hundred" else "000"
                spelt += 1
            elif t.isdigit() and len(t) <= 6:
                chars += t * repeat if len(t) == 1 else t
                singles += len(t) == 1
            elif (len(t) == 1 and t.isalpha() and t.isupper() and t not in ("I", "A")) or (
                    len(t) == 1 and t in ("A", "I") and (nxt[:1].isdigit() or (len(nxt) == 1 and nxt.isalpha()))):
                chars += t
                singles += 1
                as_in = _AS_IN.match(text, e)
                if as_in is not None:  # "P as in Peter": the word that spells the letter is part of the value
                    spelt += 1
                    e = as_in.end()
                    while j + 1 < len(toks) and toks[j + 1][0] < e:
                        j += 1
            elif (low == "plus" or t == "+") and not chars:
                chars += "+"
            elif t in (",", "-", "/") or low in ("dash", "hyphen", "slash"):
                if not chars or chars[-1] in "-, ":
                    break
                chars += "-" if t == "-" or low in ("dash", "hyphen") else " "
                j += 1
                continue  # a separator joins two parts; it does not end the value
            else:
                break
            repeat = 1
            first = s if first is None else first
            last = e
            j += 1
        if first is None or last is None:
            i += 1
            continue
        digits = sum(c.isdigit() for c in chars)
        before = text[max(0, first - 40) : first]
        cue_id = _ID_CUE_FAR.search(before) is not None and _ORDER_CONTEXT.search(before) is None
        cue_order = _ORDER_CONTEXT.search(before) is not None
        cued = cue_id or cue_order or _PHONE_CUE.search(before) is not None or _CARD_CUE.search(before) is not None
        counting = "".join(c for c in chars if c.isdigit()) in "0123456789"  # "one two three four five six seven"
        said = spelt >= 2 or singles >= 4  # two words said for digits, or four characters one by one
        if said and (digits >= 7 or (cued and digits >= 3 and spelt + singles >= 6)) and not (counting and not cued):
            if cue_id:
                kind = "NATIONAL_ID"
            elif cue_order:
                kind = "ORDER_ID"
            elif _CARD_CUE.search(before) and 13 <= digits <= 19:
                kind = "CARD"
            elif 7 <= digits <= 15 and not any(c.isalpha() for c in chars):
                kind = "PHONE"
            else:
                kind = "ORDER_ID"
            yield Detection(first, last, kind)
        i = max(i + 1, j)  # a run is read once: its later tokens start no run of their own (linear time)


# The backstop for identifiers in formats no rule above knows: a token of letters, digits and - / . joins that holds
# a run of 5+ digits, or 6+ digits in all, or digit groups separated by single spaces or dashes holding 8+ digits
# in all, is somebody's reference (an order, booking, ticket, account or id number) unless it reads as a quantity:
# money ("12,499.00", "$125000"), a number with a unit ("20000mAh", "1080p"), a date, a time or a range of
# round numbers ("10000-15000"), a resolution ("3840x2160") or a version ("firmware 2.10.45101").
_ID_BACKSTOP = re.compile(r"(?<![A-Za-z0-9À-ɏ_@.+/-])#?[A-Za-z0-9](?:[A-Za-z0-9]|[-/.](?=[A-Za-z0-9])|[ -](?=\d)(?<=\d[ -]))*"
                          r"(?![A-Za-z0-9À-ɏ_@])")  # a CJK or Thai letter may touch it: "单号是SF1428837290561，"
_QUANTITY = re.compile(
    r"(?i)\d{1,3}(?:[,.' ]\d{3})+(?:[.,]\d{1,2})?|\d+[.,]\d{1,2}|"  # 12,499.00 / 1.299.000 / 1299.99
    r"\d+(?:[.,]\d+)?(?:mah|wh|kwh|mm|cm|km|m|kg|g|mg|lb|lbs|oz|ml|l|gb|tb|mb|kb|hz|khz|mhz|ghz|w|kw|v|mp|p|k|"
    r"fps|dpi|rpm|btu|lm|nm|cc|ft|in|mi|x|mph|kmh|km/h|steps|pcs|pc|yrs?|years?|miles?|pts?|points?|eur|usd|gbp|"
    r"inr|jpy|cny|rmb|yen|euros?|dollars?|rupees?|rs|₹|€|\$|£|¥)|"
    r"\d+(?:[.,]\d+)?(?:\s*[x×]\s*\d+(?:[.,]\d+)?){1,3}(?:mm|cm|m|in|ft)?"  # 3840x2160, 80x28x202 (cm)
)
_MONEY_BEFORE = re.compile(r"(?i)(?:[$€£¥₹₩₽]|rs\.?|inr|usd|eur|gbp|jpy|cny|rmb|mxn|brl|aud|cad|chf|sek|nok|dkk|pln|"
                           r"czk|huf|try|aed|sar|zar|ngn|kes|egp|php|idr|vnd|thb|krw|rub|uah|r\$)\s*$")
_MONEY_AFTER = re.compile(r"(?i)^\s*(?:[$€£¥₹₩₽]|rs\b|inr|usd|eur|euros?|gbp|pounds?|dollars?|rupees?|yen|yuan|won|"
                          r"pesos?|reais|real|lei|zł|zl|kč|kc|ft|forint|lira|dirhams?|riyals?|rand|naira|shillings?|"
                          r"dong|baht|rubles?|roubles?|hryvnias?|mxn|brl|aud|cad|chf|sek|nok|dkk|pln|czk|huf|aed|sar|"
                          r"zar|ngn|kes|egp|php|idr|vnd|thb|krw|rub|uah|/-|k\b|m\b|bn\b|million|billion|lakh|crore|"
                          r"mil|mill|miles?|km|kms|steps?|views?|followers?|likes?|subs|subscribers?|people|users?)")
_TIME = re.compile(r"\d{1,2}[:.h]\d{2}(?::\d{2})?")


_CAMEL_BEFORE = re.compile(r"\b[A-Z][a-z]+[A-Z][A-Za-z]*\s+$")  # "PowerCore 10000": a model's name, then its number


def _id_backstop(text: str, taken: Sequence[Detection]) -> Iterator[Detection]:
    for m in _ID_BACKSTOP.finditer(text):
        raw = m.group()
        if " " in raw or (raw.count("-") and all(g.isdigit() for g in raw.split("-"))):
            groups = re.split(r"[ -]", raw)
            if all(g.isdigit() for g in groups) and (
                    _NUMBERS_CUE.search(text, max(0, m.start() - 16), m.start())
                    or all(re.fullmatch(r"(?:19|20)\d\d", g) for g in groups)):
                continue  # "prices 1299 1499 1999", "2019 2020 2021": numbers listed, not one number
            if all(g.isdigit() for g in groups) and sum(map(len, groups)) < 8 and (
                    len(groups) != 2 or max(map(len, groups)) < 5 or groups[0].endswith("000")):
                continue  # under 8 digits in groups: only two parts, one of 5+ digits ("12-34567")
        digits = sum(c.isdigit() for c in raw)
        run = max((len(r) for r in re.findall(r"\d+", raw)), default=0)
        if run < 5 and digits < 6:
            continue
        if any(m.start() < t.end and m.end() > t.start for t in taken):
            continue
        core = raw.lstrip("#")
        if _QUANTITY.fullmatch(core) or _date_like(core) or _TIME.fullmatch(core) \
                or re.fullmatch(r"\d{4}-\d{2}-\d{2}(?:T[\d:]+)?", core) \
                or _ROUND_RANGE.fullmatch(core):
            continue
        if _MONEY_BEFORE.search(text, max(0, m.start() - 6), m.start()) or _MONEY_AFTER.match(text[m.end():m.end() + 14]) \
                or (core.isdigit() and (_AMOUNT_BEFORE.search(text, max(0, m.start() - 16), m.start())
                                        or _AMOUNT_AFTER.match(text[m.end():m.end() + 10]))):
            continue
        if _VERSION_CUE.search(text, max(0, m.start() - 12), m.start()) \
                or _PRODUCT_CODE_CUE.search(text, max(0, m.start() - 24), m.start()) \
                or (core.isdigit() and len(core) <= 5 and not _ORDER_CONTEXT.search(text, max(0, m.start() - 40),
                                                                        m.start()) and (
                    _CAMEL_BEFORE.search(text, max(0, m.start() - 30), m.start())
                    or TRIP_OR_MODEL_BEFORE.search(text, max(0, m.start() - 40), m.start()))):
            continue  # "PowerCore 10000", "the Rajdhani 12952": a model's or a train's number
        compact = re.sub(r"[ -]", "", core)
        if (len(compact) == 13 and compact.isdigit() and _ean13_ok(compact)) or _isbn10_ok(compact):
            continue  # a barcode or a book's ISBN names a product, not a person
        kind = "NATIONAL_ID" if _ID_CUE_FAR.search(text, max(0, m.start() - 40), m.start()) \
            and not _ORDER_CONTEXT.search(text, max(0, m.start() - 40), m.start()) else "ORDER_ID"
        yield Detection(m.start(), m.end(), kind)


_AMOUNT_BEFORE = re.compile(r"(?i)\b(?:budget|about|around|approx\.?|under|over|below|above|up to|upto|max|min|"
                            r"maximum|minimum|than|costs?|price[sd]?|paid|pay|spent|salary|income|worth|only|just)\s*:?\s*$")
_AMOUNT_AFTER = re.compile(r"(?i)^\s*(?:max|min|maximum|minimum|tops|or so|ish|or less|or more|at most|at least)\b")
_NUMBERS_CUE = re.compile(r"(?i)\b(?:prices?|costs?|sizes?|years?|models?|rooms?|seats?|pages?|scores?|between|"
                          r"from|numbers|options|quantities|qty)\s*:?\s*$")
_PRODUCT_CODE_CUE = re.compile(r"(?i)\b(?:isbn(?:-1[03])?|ean(?:-13)?|upc|gtin|barcode|sku|asin|mpn|model(?: no\.?| number)?|"
                               r"part(?: no\.?| number)?|p/n|art\.?-?nr\.?|artikelnummer|référence produit|modelo|modèle)"
                               r"\s*[:#]?\s*$")


_BOOK_CUE = re.compile(r"(?i)\b(?:isbn(?:-1[03])?|ean(?:-13)?|upc|gtin|barcode|asin)\b(?:\s*(?:is|number|no\.?|code|#|:))*"
                       r"\s*$")
"""A product-number cue right before a number ("ISBN is", "EAN:"): what follows is no phone."""


def _book_number(raw: str) -> bool:
    """An ISBN written in its groups: ten characters in four hyphenated groups with a valid check digit
    ("0-306-40615-2"), or thirteen digits from 978 / 979 with a valid EAN check ("978-0-306-40615-7")."""
    groups = raw.split("-")
    compact = "".join(groups)
    if len(groups) == 4 and _isbn10_ok(compact):
        return True
    return len(compact) == 13 and compact.isdigit() and compact[:3] in ("978", "979") and _ean13_ok(compact)


def _isbn10_ok(d: str) -> bool:
    if not re.fullmatch(r"\d{9}[\dXx]", d):
        return False
    return sum((10 - i) * (10 if c in "Xx" else int(c)) for i, c in enumerate(d)) % 11 == 0


def _valid_date(yy: str, mm: str, dd: str) -> bool:
    return 1 <= int(mm) <= 12 and 1 <= int(dd) <= 31


def _id_checks(kind: str, raw: str) -> bool:
    """The check digits of one national id shape (see ``_ID_CHECKED``)."""
    d = "".join(c for c in raw if c.isalnum())
    if kind == "cn":
        total = sum(int(c) * w for c, w in zip(d[:17], (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2), strict=True))
        return "10X98765432"[total % 11] == d[17].upper()
    if kind == "nordic":
        core = d[-10:]  # Swedish YYMMDD-NNNC (Luhn) or Danish DDMMYY-NNNN (a date)
        return (_valid_date(core[:2], core[2:4], core[4:6]) and luhn_ok(core)) or _valid_date(core[4:6], core[2:4], core[:2])
    if kind == "fi":
        return _valid_date(d[4:6], d[2:4], d[:2]) and "0123456789ABCDEFHJKLMNPRSTUVWXY"[int(d[:9]) % 31] == d[9]
    if kind == "nir":
        body = d[:13].replace("2A", "19").replace("2B", "18")
        return body.isdigit() and 97 - int(body) % 97 == int(d[13:15])
    if kind == "dni":
        return "TRWAGMYFPDXBNJZSQVHLCKE"[int(d[:8]) % 23] == d[8]
    if kind == "aadhaar":
        return _verhoeff_ok(d)
    if kind == "eleven":
        return _pesel_ok(d) or _tckn_ok(d) or _fodselsnummer_ok(d)
    if kind == "thirteen":  # with no cue, a number that is also a valid EAN-13 is taken for a barcode
        return id13_ok(d) and not _ean13_ok(d)
    return False


def _ean13_ok(d: str) -> bool:
    """The EAN-13 barcode check digit (weights 1, 3, 1, 3, …)."""
    return (10 - sum(int(c) * (3 if i % 2 else 1) for i, c in enumerate(d[:12])) % 10) % 10 == int(d[12])


def id13_ok(d: str) -> bool:
    """A 13-digit national id by its check digit: Thai citizen id, Romanian CNP, South African id (a date of
    birth, then Luhn). Such a number is not taken for a 13-digit card."""
    n = [int(c) for c in d]
    thai = n[0] != 0 and (11 - sum(x * (13 - i) for i, x in enumerate(n[:12])) % 11) % 10 == n[12]
    r = sum(x * int(w) for x, w in zip(n[:12], "279146358279", strict=True)) % 11
    cnp = 1 <= n[0] <= 8 and _valid_date(d[1:3], d[3:5], d[5:7]) and (1 if r == 10 else r) == n[12]
    za = _valid_date(d[:2], d[2:4], d[4:6]) and n[10] in (0, 1) and luhn_ok(d)
    return thai or cnp or za


def _verhoeff_ok(digits: str) -> bool:
    d = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 2, 3, 4, 0, 6, 7, 8, 9, 5), (2, 3, 4, 0, 1, 7, 8, 9, 5, 6),
         (3, 4, 0, 1, 2, 8, 9, 5, 6, 7), (4, 0, 1, 2, 3, 9, 5, 6, 7, 8), (5, 9, 8, 7, 6, 0, 4, 3, 2, 1),
         (6, 5, 9, 8, 7, 1, 0, 4, 3, 2), (7, 6, 5, 9, 8, 2, 1, 0, 4, 3), (8, 7, 6, 5, 9, 3, 2, 1, 0, 4),
         (9, 8, 7, 6, 5, 4, 3, 2, 1, 0))
    p = ((0, 1, 2, 3, 4, 5, 6, 7, 8, 9), (1, 5, 7, 6, 2, 8, 3, 0, 9, 4), (5, 8, 0, 3, 7, 9, 6, 1, 4, 2),
         (8, 9, 1, 6, 0, 4, 3, 5, 2, 7), (9, 4, 5, 3, 1, 2, 6, 8, 7, 0), (4, 2, 8, 6, 5, 7, 3, 9, 0, 1),
         (2, 7, 9, 3, 8, 0, 6, 4, 1, 5), (7, 0, 4, 6, 9, 1, 3, 2, 5, 8))
    c = 0
    for i, ch in enumerate(reversed(digits)):
        c = d[c][p[i % 8][int(ch)]]
    return c == 0


def _pesel_ok(d: str) -> bool:
    month = int(d[2:4]) % 20
    check = (10 - sum(int(c) * w for c, w in zip(d[:10], (1, 3, 7, 9, 1, 3, 7, 9, 1, 3), strict=True)) % 10) % 10
    return 1 <= month <= 12 and 1 <= int(d[4:6]) <= 31 and check == int(d[10])


def _tckn_ok(d: str) -> bool:
    n = [int(c) for c in d]
    return n[0] != 0 and (sum(n[0:9:2]) * 7 - sum(n[1:8:2])) % 10 == n[9] and sum(n[:10]) % 10 == n[10]


def _fodselsnummer_ok(d: str) -> bool:
    n = [int(c) for c in d]
    k1 = 11 - sum(a * b for a, b in zip(n[:9], (3, 7, 6, 1, 8, 9, 4, 5, 2), strict=True)) % 11
    k2 = 11 - sum(a * b for a, b in zip(n[:10], (5, 4, 3, 2, 7, 6, 5, 4, 3, 2), strict=True)) % 11
    return _valid_date(d[4:6], d[2:4], d[:2]) and k1 % 11 == n[9] and k2 % 11 == n[10]


def _national_ids(text: str) -> Iterator[Detection]:
    for rx in (_SSN, _NINO, _CODICE_FISCALE):
        for m in rx.finditer(text):
            yield Detection(m.start(), m.end(), "NATIONAL_ID")
    for m in _ID_CHECKED.finditer(text):
        kind = m.lastgroup
        if kind is not None and _id_checks(kind, m.group()):
            yield Detection(m.start(), m.end(), "NATIONAL_ID")
    for m in _ID_CUE.finditer(text):
        if sum(c.isdigit() for c in m.group("id")) >= 5:
            yield Detection(m.start("id"), m.end("id"), "NATIONAL_ID")
    for m in _ID_SHAPES.finditer(text):
        yield Detection(m.start(), m.end(), "NATIONAL_ID")
    for m in _ID_CUE_FAR.finditer(text):
        tok = _ID_TOKEN.search(text, m.end(), min(len(text), m.end() + 40))
        if tok is not None and 6 <= sum(c.isdigit() for c in tok.group()) <= 20 \
                and sum(c.isalpha() for c in tok.group()) <= 4:
            yield Detection(tok.start(), tok.end(), "NATIONAL_ID")


# "Address: …", "địa chỉ giao hàng: Số 12 ngõ 45 Phố Huế", "پتہ: مکان نمبر 14، گلی 3، …": after a word for address and a
# colon (or "is"), the rest of the sentence is the address when it holds a number, whatever its format or script.
_ADDRESS_CUE = re.compile(
    r"(?i)(?<![\w@.-])(?<!ip )(?<!web )(?<!mac )(?<!wallet )(?<!mail )"  # not "IP address", "e-mail address"
    r"(?:address|addr|adresse|adres|adresa|adressen|dirección|direccion|indirizzo|endereço|endereco|morada|alamat|"
    r"địa chỉ|dia chi|адрес|адреса|地址|住所|주소|ที่อยู่|ঠিকানা|पता|پتہ|پتا|عنوان|العنوان|כתובת|διεύθυνση|"
    r"አድራሻ|cinwaan(?:ka)?|ناونیشان|osoite|cím|naslov|manzil|anwani|adirẹsi|adreso)"
    r"(?:\s+(?:de|da|do|del|di|für|for|of|giao hàng|nhận hàng|lengkap|pengiriman|entrega|envío|envio|livraison|"
    r"consegna|lieferung|delivery|shipping|billing|postal|postale|is|es|est|ist|é|è|là))*\s*(?:[:：፡፦=]|\bis\b)\s*")
_CUED_ADDRESS_END = re.compile(
    r"\n|;|\s[|–—-]\s|[!?？！。]"
    r"|(?<!\b[^\W\d_])(?<!\b[^\W\d_]{2})(?<!\b[^\W\d_]{3})(?<!\b[^\W\d_]{4})\.(?=\s*$|\s+[^\W\d_])"
    r"|\.(?=\s+(?:[a-zß-ÿ]|(?:I|I'm|Can|Could|Would|Please|Hi|Hello|Thanks|Do|Does|Is|Are|What|Where|When|How|Any|My|"
    r"The|This|We|You|Just|Need|Send|Ship|Also|And|But|So|Pls|Ok|OK)\b))"
    # a sentence ends: "Leipzig. just browsing", "M1 8AW. I need", "Köln. Can you"; not "Hauptstr. 5" nor an
    # abbreviation before a name ("Kel. Sukajadi", "Co. Galway")
    r"|\s(?=\S*@)|\s(?=\+?\d[\d ().-]{7,}\d)"  # an e-mail, a phone or a card after it is not the address
    # with _ADDRESS_STOP's cues (a phone, a recipient, an e-mail, a closing), these introduce the next thing said
    r"|(?i:\s(?:i'm|i am|my name|reach me|name|nama|a\.n\.|call|thanks|thank you|please|pls|gracias|merci|danke|"
    r"terima kasih)\b)")


def _cued_addresses(text: str) -> Iterator[Detection]:
    for m in _ADDRESS_CUE.finditer(text):
        ends = [e.start() for e in (_CUED_ADDRESS_END.search(text, m.end()), _ADDRESS_STOP.search(text, m.end())) if e]
        stop = min(ends, default=len(text))
        raw = text[m.end() : stop]
        span = raw.rstrip(" ,.;:،，、")
        if span and any(c.isdigit() for c in span) and len(span) <= 160 and len(span.split()) >= 2:
            yield Detection(m.end(), m.end() + len(span), "ADDRESS")


def _addresses(text: str) -> Iterator[Detection]:
    """Address spans of every rule, overlapping ones merged ("Moda Cd. 41 D" + "D:6, 34710 Kadıköy")."""
    spans = [m.span() for m in _ADDRESS.finditer(text)]
    spans.extend(find_addresses(text))
    spans.extend(m.span("id") for m in _POSTCODE_CUE.finditer(text)
                 if len(m.group("id")) == 6 or not re.match(r"(?i)pin\b(?! ?code)", m.group()))
    spans.extend(m.span("id") for m in _GPS_ADDRESS.finditer(text))
    spans.sort()
    merged: list[list[int]] = []
    for s, e in spans:
        if merged and (s < merged[-1][1] or _ADDRESS_GAP.fullmatch(text, merged[-1][1], s)):
            merged[-1][1] = max(merged[-1][1], e)
        elif e > s:
            merged.append([s, e])
    for s, e in merged:
        if e < len(text) and text[e] == "." and re.search(r"(?<![^\W\d_])[A-Z][a-z]{1,3}$", text[s:e]):
            e += 1  # "… 36000 Guanajuato, Gto.": a state's abbreviation keeps its full stop
        yield Detection(s, e, "ADDRESS")


# Address chains: an address in a format no street rule knows, told by its shape. A sentence is cut into pieces at
# commas (, ، ，); a piece is a *number piece* when it holds a number (a house,
# unit, block or post code number, in any script's digits) among at most six words of which at most two are
# lower-case Latin words of up to four letters ("3. tv", "2º Esq", "piso 5 dto. B", "101동 1203호"), and a *name
# piece* when it is one to four capitalised or non-Latin words ("Hoan Kiem", "مصر الجديدة"). Consecutive pieces of
# both kinds form a chain; a chain of two or more pieces with a number piece is an address when it joins a found
# address, ends in a post code beside a place name ("4000-443 Porto", "Chandigarh 160015", "MT 59772", "C1193AAE
# CABA", "(Québec) H3H 1G6"), or opens with a house number before a capitalised street ("27 Ngo Quyen") and has
# three or more pieces. Only order or identifier spans may lie inside it (they become part of the address).
_PIECE_SEP = re.compile(r"\s*[,،，]\s*")
# Street, road, building and unit words of scripts other than Latin (and Vietnamese administrative words): a chain
# holding one is an address without a post code ("١٥ شارع الثورة، مصر الجديدة، القاهرة", "تهران، خیابان ولیعصر،
# کوچه نسترن، پلاک ۱۲، واحد ۳", "רחוב דיזנגוף 120, דירה 8, תל אביב"); a piece ending in one starts the chain there.
# Words that are also common words elsewhere (Persian "واحد" unit, Arabic "one") count before a number only.
_STREET_OTHER = re.compile(
    r"(?<![^\W\d_])(?:[\d٠-٩۰-۹]{1,5}\s+)?(?:شارع|طريق|حي|مبنى|عمارة|شقة|ميدان|جادة|خیابان|خيابان|کوچه|كوچه|بلوار|"
    r"میدان|بن‌بست|(?:پلاک|واحد|طبقه)(?=\s*[\d۰-۹٠-٩])|[לבהומש]{0,2}(?:רחוב|רח'|שדרות|שד'|דירה|קומה)|улица|ул\.|"
    r"проспект|просп\.|"
    r"переулок|пер\.|шоссе|вулиця|вул\.|οδός|οδ\.|λεωφόρος|λεωφ\.|मार्ग|गली|ซอย|ถนน|(?i:phường|quận|huyện|đường|"
    r"xã|thị trấn))(?![^\W\d_])")
_OTHER_SCRIPT = re.compile(r"[^\W\d_A-Za-zÀ-ɏḀ-ỿ]")  # a letter of a script other than Latin
_PIECE_WORD = re.compile(r"[^\s,،，]+")
_HANGUL_LETTER = re.compile(r"[\uac00-\ud7af]")
_POSTCODE_END = re.compile(
    r"(?:^|\s)(?:\d{4,6}|\d{3} \d{2}|\d{4}-\d{3}|\d{2}-\d{3}|\d{5}-\d{3}|[A-Z]\d[A-Z] ?\d[A-Z]\d|[A-Z]\d{4}[A-Z]{3}|"
    r"[A-Z]{1,2}\d[A-Z\d]? ?\d[A-Z]{2}|[A-Z]\d{2} ?[A-Z0-9]{4}|\d{4} ?[A-Z]{2})(?:\s|$)")
_STREET_FIRST = re.compile(r"^#?\d{1,5}[A-Za-z]?(?:[/-]\d{1,4}[A-Za-z]?)?\s+[A-ZÀ-ÞĐ]")
_NOT_ADDRESS_WORDS = re.compile(rf"(?i)\b(?:{_ORDER_WORDS}|size|qty|quantity|item|model|price|total|colou?r|"
                                r"pack|pcs|set|version|seat|row|gate|flight|room for|table for)\b")


def _piece_kind(piece: str) -> str | None:
    words = _PIECE_WORD.findall(piece)
    if not words or len(words) > 6 or len(piece) > 50 or _HANGUL_LETTER.search(piece):
        return None  # Korean addresses are found whole by their own rule; a chain would take the sentence around
    if _NOT_ADDRESS_WORDS.search(piece) or _ADDRESS_STOP.search(piece):
        return None  # "收件人 黄思远", "tel 555…": a person or a phone after the address
    lower = [w for w in words if w[0].islower() and w.isascii() and w.isalpha()]
    has_number = any(any(c.isdigit() for c in w) for w in words)
    if has_number:
        if len(lower) > 2 or any(len(w) > 4 for w in lower):
            return None
        return "number"
    latin = [w for w in words if w.isascii() or re.match(r"[A-Za-zÀ-ɏḀ-ỿ]", w)]
    if len(words) <= 4 and all(w[0].isupper() or w.casefold().rstrip(".") in _PARTICLE_WORDS for w in latin) \
            and not all(w.casefold() in _PARTICLE_WORDS for w in words):
        return "name"
    return None


_ADDRESS_JOINT = re.compile(r"[\s,.;:/\-–—]*(?:[^\W\d_]{1,10}\.?[\s,.;:/\-–—]*)?")


def _joined_addresses(text: str, found: list[Detection]) -> list[Detection]:
    """Two address spans with only punctuation and at most one short word between them are one address, the gap
    included: "… Camella Homes, Brgy" + ". " + "Molino III, Bacoor", "…, ap. 27" + ", sector " + "5, București 050871",
    "… Rio de Janeiro" + " - " + "RJ, 22050-001" (each piece was found on its own; the gap between them was left)."""
    addresses = sorted(d for d in found if d.type == "ADDRESS")
    if len(addresses) < 2:
        return found
    merged: list[Detection] = [addresses[0]]
    for d in addresses[1:]:
        last = merged[-1]
        gap = text[last.end : d.start]
        if d.start >= last.end and len(gap) <= 16 and _ADDRESS_JOINT.fullmatch(gap) is not None \
                and not any(x.type != "ADDRESS" and x.start < d.start and x.end > last.end for x in found):
            merged[-1] = Detection(last.start, max(last.end, d.end), "ADDRESS")
        else:
            merged.append(d)
    return sorted([d for d in found if d.type != "ADDRESS"] + merged)


def _address_chains(text: str, found: list[Detection]) -> list[Detection]:
    """``found`` with address chains (above) added; the identifier or order spans inside a chain are dropped."""
    out = list(found)
    for sentence in _SENTENCE.finditer(text):
        s0, s1 = sentence.span()
        cuts = [s0, *[x for m in _PIECE_SEP.finditer(text, s0, s1) for x in m.span()], s1]
        pieces = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
        kinds = [_piece_kind(text[a:b]) for a, b in pieces]
        i = 0
        while i < len(pieces):
            j = i
            while j + 1 < len(pieces) and kinds[j + 1] is not None:
                j += 1
            if j + 1 < len(pieces):  # a piece that opens with an address piece may close the chain ("8000 Aarhus C
                head = _address_head(text, *pieces[j + 1])  # please")
                if head is not None:
                    j += 1
                    pieces[j], kinds[j] = (pieces[j][0], head), _piece_kind(text[pieces[j][0]:head])
            if kinds[i] is None:  # a piece that ends in an address piece may open a chain ("… para Rua X 312")
                tail = _address_tail(text, *pieces[i])
                if tail is None or j == i:
                    i += 1
                    continue
                pieces[i], kinds[i] = (tail, pieces[i][1]), _piece_kind(text[tail:pieces[i][1]])
            for a in range(i, j):  # the longest acceptable chain (of up to 8 pieces) from the first start that has one
                span = next((sp for b in range(min(j, a + 7), a, -1)
                             if (sp := _chain_span(text, pieces[a:b + 1], kinds[a:b + 1], out)) is not None), None)
                if span is not None:  # joined with the addresses it overlaps; orders and addresses inside it go
                    joined = [d for d in out if d.type == "ADDRESS" and d.start < span[1] and d.end > span[0]]
                    lo, hi = min([span[0], *(d.start for d in joined)]), max([span[1], *(d.end for d in joined)])
                    out = [d for d in out if not (d.type in ("ORDER_ID", "ADDRESS") and lo <= d.start and d.end <= hi)]
                    out.append(Detection(lo, hi, "ADDRESS"))
                    break
            i = j + 1
    return out


# Sentences end at ! ? and their CJK forms, a line break, or a full stop after a word of 4+ letters ("… 2º Esq,
# 4000-443 Porto. NIF …"), or after one of 3 letters or a number before a capital ("Ha Noi. Tran …", "MT 59772.
# Order …"); not after an abbreviation, an initial or a number in an address ("P.O. Box", "TP. Hồ", "3. tv").
_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|\.(?=\S)|(?<![^\W\d_]{4})(?<![^\W\d_]{3})(?<!\d)\."
                       r"|(?<![^\W\d_]{4})\.(?!\s+[A-ZÀ-ÞĐ]))+")


def _address_tail(text: str, start: int, end: int) -> int | None:
    """Where the address piece at the end of a longer piece begins: from the right, numbers, capitalised words and
    particles, up to the first other word ("deve ir para Rua de Santa Catarina 312" -> "Rua de Santa …"); it holds
    a number (a city alone before a street stays: cities are kept)."""
    words = list(_PIECE_WORD.finditer(text, start, end))
    k = len(words)
    while k > 0:
        w = words[k - 1].group()
        if not (any(c.isdigit() for c in w) or w[0].isupper() or w.startswith("#")
                or w.casefold() in _PARTICLE_WORDS or _OTHER_SCRIPT.match(w)):
            break
        k -= 1
    if k == len(words):
        return None
    street = _STREET_OTHER.search(text, words[k].start(), end)
    if street is not None:
        return street.start()  # "عايز أغير عنوان التوصيل لـ ١٥ شارع الثورة": from the house number or street word
    if not any(any(c.isdigit() for c in m.group()) for m in words[k:]):
        return None
    return words[k].start()


def _address_head(text: str, start: int, end: int) -> int | None:
    """Where the address piece at the start of a longer piece ends: numbers, capitalised words and particles from the
    left, up to the first other word ("8000 Aarhus C please" -> "8000 Aarhus C"), if it holds a number."""
    words = list(_PIECE_WORD.finditer(text, start, end))
    k = 0
    while k < len(words):
        w = words[k].group()
        if not (any(c.isdigit() for c in w) or w[0].isupper() or w.casefold() in _PARTICLE_WORDS
                or _OTHER_SCRIPT.match(w)):
            break
        k += 1
    if k == 0 or k == len(words) or not any(any(c.isdigit() for c in m.group()) for m in words[:k]):
        return None
    return start + len(text[start:words[k - 1].end()].rstrip(".,;:"))


def _chain_span(text: str, pieces: list[tuple[int, int]], kinds: list[str | None],
                found: list[Detection]) -> tuple[int, int] | None:
    start, end = pieces[0][0], pieces[-1][1]
    trailing = re.search(r"(?:[\s.—–-]+[a-z]{1,4})+[\s.?!]*$", text[pieces[-1][0]:end])
    if trailing is not None and trailing.start() > 0:  # "…, MT 59901. ok": the chain ends before "ok"
        end = pieces[-1][0] + trailing.start()
    end = start + len(text[start:end].rstrip(" .,;:!?—–-"))
    cue = max(text.rfind(":", start, pieces[0][1]), text.rfind("：", start, pieces[0][1]))
    if cue >= 0:  # "Anschrift: Berliner Straße 5, …": the address starts after its cue
        start = cue + 1
    street = _STREET_OTHER.search(text, start, pieces[0][1])
    if street is not None:
        start = street.start()  # "الرجاء الشحن إلى ٤٢ شارع التحرير، …": the words before the street are no address
    first = text[start:pieces[0][1]]
    house = re.search(r"#?\d{1,5}[A-Za-z]?(?:[/-]\d{1,4}[A-Za-z]?)?\s+[A-ZÀ-ÞĐ]", first)
    lead = house or re.search(r"[#(]?\d|(?<![^\W\d_])[A-ZÀ-ÞĐ]|(?<![^\W\d_])" + _OTHER_SCRIPT.pattern, first)
    if lead is None or "number" not in kinds or len(pieces) < 2:
        return None
    start += lead.start()
    for d in found:  # other values inside it: not an address chain
        if d.start < end and d.end > start and d.type not in ("ADDRESS", "ORDER_ID"):
            return None
    joins = any(d.type == "ADDRESS" and d.start < end and d.end > start for d in found)
    last = text[pieces[-1][0]:pieces[-1][1]]
    postcode = kinds[-1] == "number" and _POSTCODE_END.search(last) is not None and (
        re.search(r"[A-ZÀ-ÞĐ][^\W\d_]", last) is not None or _OTHER_SCRIPT.search(last) is not None)
    street_first = len(pieces) >= 3 and house is not None and house.start() == lead.start()
    street_other = _STREET_OTHER.search(text, start, end) is not None
    if joins or postcode or street_first or street_other:
        return start, end
    return None


_PARTICLE_WORDS = frozenset({"de", "da", "do", "del", "la", "le", "van", "von", "der", "den", "bin", "al", "el", "i",
                             "y", "e", "di", "du", "des", "dos", "das"})


def _cut_addresses(text: str, found: list[Detection]) -> tuple[list[Detection], list[tuple[int, int]]]:
    """Addresses cut at a cue for a phone, a person or a customer number inside them ("…Chennai 600034, contact
    Sujatha 94440 17382"), so that the phone and the name are found with their own types; the cut-off tails
    are returned too, for :func:`_cover_tails`."""
    out, tails = [], []
    for d in found:
        cut = _ADDRESS_STOP.search(text, d.start + 1, d.end) if d.type == "ADDRESS" else None
        if cut is None:
            out.append(d)
            continue
        end = d.start + len(text[d.start : cut.start()].rstrip(" ,;:.，、。-—–\n"))
        if end > d.start:
            out.append(Detection(d.start, end, "ADDRESS"))
        tails.append((cut.start(), d.end))
    return out, tails


# Between two address spans: commas and brackets, or up to three capitalised words or abbreviations
# ("…Quận 1, TP. Hồ Chí Minh 700000": "TP. Hồ Chí" between the district and the city with its post code).
_ADDRESS_GAP = re.compile(r"[\s,(]{0,3}(?:[A-ZÀ-ÞĐ][^\W\d_]{0,11}\.?\s+){0,3}")
_TAIL_FILLER = frozenset("is are was the a an to for of and or please pls my his her their our name number no nr "
                         "de la le el der die das und et y e".split())


def _cover_tails(text: str, found: list[Detection], tails: list[tuple[int, int]]) -> list[Detection]:
    """What no detector claimed in a cut-off address tail stays scrubbed as ADDRESS (less the cue words), so
    cutting an address never lets a value through."""
    extra = []
    for a, b in tails:
        pos = a
        for d in [*(d for d in found if d.start < b and d.end > a), Detection(b, b, "ADDRESS")]:
            piece = text[pos : min(d.start, b)] if d.start > pos else ""
            if piece:
                chars = list(piece)
                for m in _ADDRESS_STOP.finditer(text, pos, pos + len(piece)):  # the cue words themselves are no value
                    chars[m.start() - pos : m.end() - pos] = " " * (m.end() - m.start())
                rest = "".join(chars)
                core = re.search(r"[^\W_](?:.*[^\W_])?", rest, re.S)
                if core is not None and (any(c.isdigit() for c in core.group()) or any(
                        w.casefold() not in _TAIL_FILLER for w in re.findall(r"[^\W\d_]+", core.group()))):
                    extra.append(Detection(pos + core.start(), pos + core.end(), "ADDRESS"))
            pos = max(pos, d.end)
    return extra


class PhoneFinder:
    """Phone numbers via libphonenumber: valid in one of ``regions``, or possible with ``+``/a cue.

    The matcher runs only on digit runs that could be a phone number (7+ digits, phone punctuation)
    and not already taken by a higher-ranked type; regions are tried in order until the run's
    digits are explained, so a typical number costs one or two parses.
    """

    def __init__(self, regions: Sequence[str]) -> None:
        self.regions = tuple(regions)

    def find(self, text: str, taken: Sequence[Detection] = ()) -> Iterator[Detection]:
        for cand in _PHONE_CANDIDATE.finditer(text):
            digits = sum(c.isdigit() for c in cand.group())
            if digits < 7 or any(cand.start() < t.end and cand.end() > t.start for t in taken) \
                    or _ROUND_RANGE.fullmatch(cand.group()):
                continue  # "10000-25000 steps": two round numbers are a range, not a phone
            if _book_number(cand.group()) or _BOOK_CUE.search(text, max(0, cand.start() - 30), cand.start()):
                continue  # "ISBN 0-306-40615-2": a book's number, not a phone
            if re.fullmatch(r"\d{1,2}([/.-])\d{1,2}\1(?:19|20)\d\d", cand.group()) and _date_like(cand.group()):
                continue  # "it came on 03-11-2025": a date, not a phone
            yield from self._match(text, cand.start(), cand.end(), digits)

    def _match(self, text: str, start: int, end: int, digits: int) -> Iterator[Detection]:
        sub = text[start:end]
        spans: set[tuple[int, int]] = set()
        if "+" in sub:
            # International form: the country code says the plan; a possible number is enough
            # ("+44 7667 445676" is outside the assigned ranges but is still somebody's phone).
            spans.update((m.start, m.end) for m in PhoneNumberMatcher(sub, None, leniency=Leniency.POSSIBLE)
                         if sum(c.isdigit() for c in m.raw_string) >= 8)
            if not spans and sub.lstrip().startswith("+") and 8 <= digits <= 15:
                spans.add((0, len(sub)))  # "+234 1 271 4400": a + and 8-15 digits is a phone whatever its plan
        if not spans:
            for region in self.regions:
                spans.update((m.start, m.end) for m in PhoneNumberMatcher(sub, region, leniency=Leniency.VALID))
                if sum(c.isdigit() for s, e in spans for c in sub[s:e]) >= digits - 2:
                    break
            if sum(c.isdigit() for s, e in spans for c in sub[s:e]) < digits and re.match(r"\(|0|8 ", sub):
                for region in self.regions:  # a trunk 0 or an area code in brackets: the whole run may be one
                    try:  # region's number ("(11) 91234-5678" is Brazilian, not the German "91234-5678")
                        whole = phonenumbers.parse(sub, region)
                    except phonenumbers.NumberParseException:
                        continue
                    if phonenumbers.is_valid_number(whole):
                        spans = {(0, len(sub))}
                        break
        if not spans and digits >= 8 and _PHONE_CUE.search(text, max(0, start - 30), start):
            spans.update((m.start, m.end) for m in PhoneNumberMatcher(sub, self.regions[0], leniency=Leniency.POSSIBLE)
                         if sum(c.isdigit() for c in m.raw_string) >= 9)
            if not spans and digits <= 15 and re.fullmatch(r"\(?\d[\d ()./-]*\d", sub):
                spans.add((0, len(sub)))  # "Tlf 412 55 093": 8-15 digits right after a phone cue
        for s, e in spans:
            ext = _EXTENSION.match(text, start + e)  # "(415) 555-0139 ext. 22", "418 555-0172 poste 4"
            yield Detection(start + s, ext.end() if ext else start + e, "PHONE")


_EXTENSION = re.compile(r"(?i)\s*,?\s*(?:ext\.?|extension|x|poste|durchwahl|dw\.?|int\.?|interno|ramal|anexo)\s*"
                        r"\d{1,5}\b")
_HONORIFICS = re.compile(r"(?i)(?:(?:mr|mrs|ms|miss|mx|dr|prof|madame|monsieur|mme|mlle|herr|frau|señora?|sra?|"
                         r"srta|signora?|sig|senhora?|sayın|attn:?|c/o)\.?\s+)+")


# Letters glued to a number by hyphens make one reference ("ALG-PL-774190", "SPX-VN-2403-88172", "HX-4420-RM"):
# the letters go with it, and it is a reference, not a phone number.
_GLUED_BEFORE = re.compile(r"(?<![\w-])(?:[A-Z][A-Z0-9]{0,5}-){1,3}$")
_GLUED_AFTER = re.compile(r"(?:-[A-Z][A-Z0-9]{0,5}){1,2}(?![\w-])")


_SPACED_BEFORE = re.compile(r"(?<![\w-])[A-Z]{2,4} $")  # "tracking NZ 8834 1129 04", "PTG 4410 9982"
_LETTERS_AFTER = re.compile(r"[A-Z]{1,3}(?![\w-])")  # "TT 4421 9083 7GB"


def _glued_references(text: str, found: list[Detection]) -> list[Detection]:
    out = []
    for d in found:
        if d.type in ("ORDER_ID", "PHONE") and sum(c.isdigit() for c in text[d.start : d.end]) >= 8 \
                and (prefix := _SPACED_BEFORE.search(text, max(0, d.start - 5), d.start)) \
                and not _ORDER_CONTEXT.fullmatch(prefix.group().strip()) and not _PHONE_CUE.fullmatch(prefix.group().strip()) \
                and _ORDER_CONTEXT.search(text, max(0, d.start - 45), d.start):  # "DHL 1550…" names the carrier
            tail = _LETTERS_AFTER.match(text, d.end)
            d = Detection(prefix.start(), tail.end() if tail else d.end, "ORDER_ID")
        if d.type in ("ORDER_ID", "PHONE", "NATIONAL_ID"):
            before = _GLUED_BEFORE.search(text, max(0, d.start - 24), d.start)
            after = _GLUED_AFTER.match(text, d.end)
            if before is not None or after is not None:
                kind = "ORDER_ID" if d.type == "PHONE" else d.type
                d = Detection(before.start() if before else d.start, after.end() if after else d.end, kind)
        out.append(d)
    return out


# Directions that complete an address where streets have no numbers or the rider needs a landmark: "(opposite the
# Total filling station)", "(tapat ng 7-Eleven, kulay asul na gate)", "Hanuman Mandir ke peeche, Andheri East".
_DIRECTION = (r"(?:opposite|near(?:by)?|behind|next to|beside|across from|in front of|close to|facing|adjacent to|"
              r"frente a|enfrente de|cerca de|detrás de|detras de|atrás de|atras de|al lado de|junto a|entre|"
              r"em frente|perto de|ao lado de|próximo a|proximo a|derrière|derriere|près de|pres de|en face de|"
              r"à côté de|a cote de|gegenüber|gegenuber|neben|hinter|depan|dekat|belakang|samping|seberang|sebelah|"
              r"tapat ng|malapit sa|katabi ng|likod ng|nyuma ya|karibu na|mbele ya|kando ya|ke peeche|ke piche|"
              r"ke paas|ke saamne|ke samne|7ad|janb|wara)")
_DIRECTIONS_AFTER = re.compile(rf"(?i)\s*(?:\(\s*(?:[^\s()]+\s+){{0,3}}?{_DIRECTION}\b[^)\n]{{0,120}}\)"
                               rf"|\s*,\s*{_DIRECTION}\b[^.!?\n]{{0,100}})")
_DIRECTION_GAP = re.compile(rf"(?i)\s*(?:{_DIRECTION})\s*,?\s*")


def _with_directions(text: str, found: list[Detection]) -> list[Detection]:
    """Addresses grown over the directions right after them, and joined across one ("… Hanuman Mandir ke peeche,
    Andheri East …"); never over another value."""
    others = sorted(d.start for d in found if d.type != "ADDRESS")
    addresses = sorted((d for d in found if d.type == "ADDRESS"), key=lambda d: d.start)
    out = [d for d in found if d.type != "ADDRESS"]
    grown: list[Detection] = []
    for d in addresses:
        if grown and _DIRECTION_GAP.fullmatch(text, grown[-1].end, d.start):
            grown[-1] = Detection(grown[-1].start, max(grown[-1].end, d.end), "ADDRESS")
            continue
        grown.append(d)
    for d in grown:
        m = _DIRECTIONS_AFTER.match(text, d.end)
        limit = next((s for s in others if s >= d.end), len(text))
        if m is not None and m.end() <= limit:
            d = Detection(d.start, d.start + len(text[d.start:m.end()].rstrip(" ,;")), "ADDRESS")
        out.append(d)
    return out


def _phones_past_addresses(text: str, found: list[Detection], phones: list[Detection]) -> list[Detection]:
    """``found`` with the phone numbers: one that runs past an address's end cuts the address before it ("…, 4000-123
    Porto 912 448 305": the address had taken "912 448"); one inside an address stays the address's."""
    addresses = [d for d in found if d.type == "ADDRESS"]
    out = [d for d in found if d.type != "ADDRESS"]
    for p in phones:
        hit = [a for a in addresses if a.start < p.end and a.end > p.start]
        if hit and not all(a.start < p.start and a.end < p.end for a in hit):
            continue  # a number inside an address
        for a in hit:
            addresses[addresses.index(a)] = Detection(a.start, a.start + len(text[a.start:p.start].rstrip(" ,;:-/")),
                                                      "ADDRESS")
        out.append(p)
    return out + [a for a in addresses if a.end > a.start]


_STREET_TYPE = re.compile(rf"(?i)(?:{STREET_TYPES})(?![^\W\d_])\s*")


def _not_street_names(text: str, found: list[Detection], names: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Names that are a street's inside an address found ("Rua Oscar Freire, 1200, …", "Calle Gabriela Mistral 45"):
    the street type before or opening them says so; they stay the address's."""
    out = []
    for s, e in names:
        street = any(d.type == "ADDRESS" and d.start <= s < d.end and (
            _STREET_TYPE.fullmatch(text, d.start, s) or _STREET_TYPE.match(text, s)) for d in found)
        if not street:
            out.append((s, e))
    return out


def _names_out_of_addresses(text: str, found: list[Detection], names: list[tuple[int, int]]) -> list[Detection]:
    """An address whose first comma-separated piece is a full name the name finder found ("Kiona Yazzie, Hopi
    Hall Rm 214, …") starts after that piece: the name is scrubbed as a name (one word may be a district)."""
    out = []
    for d in found:
        if d.type == "ADDRESS":
            for s, e in names:
                comma = re.match(r"\s*,\s*", text[e : d.end])
                opens = s <= d.start < e or (d.start < s and _HONORIFICS.fullmatch(text[d.start : s]))
                if opens and comma is not None and e + comma.end() < d.end and " " in text[s:e].strip():
                    d = Detection(e + comma.end(), d.end, "ADDRESS")  # "Madame Chloé Dubois, 8 avenue Foch, …"
        out.append(d)
    return out


_CAPS_WORD = re.compile(r"\b[A-ZÀ-ÞĀ-ſ][A-ZÀ-ÞĀ-ſ'’-]+\b")
_LATIN_WORD = re.compile(r"\b[A-Za-zÀ-ÿĀ-ſ][A-Za-zÀ-ÿĀ-ſ'’-]+\b")


def _shouting(text: str) -> bool:
    """Three or more words, most of them (60 %) in capitals: a message typed with caps lock, whose names the
    case cannot tell."""
    caps = len(_CAPS_WORD.findall(text))
    return caps >= 3 and caps >= 0.6 * len(_LATIN_WORD.findall(text))


def _decapitalised(text: str, common: frozenset[str]) -> str:
    """Every all-capitals word written in lower case if it is a ``common`` word ("SHIP TO" -> "ship to") and
    capitalised if not ("ADEYEMI" -> "Adeyemi", "MADRID" -> "Madrid"), character for character (a word whose lower
    case changes its length stays as it is), so spans found in it are spans of ``text``."""
    def one(m: re.Match[str]) -> str:
        w = m.group()
        low = w.lower() if w.casefold() in common or len(w) < 3 else w[0] + w[1:].lower()
        return low if len(low) == len(w) else w
    return _CAPS_WORD.sub(one, text)


def resolve(candidates: Iterable[Detection]) -> list[Detection]:
    """Non-overlapping detections: higher-ranked types first, then longer spans; sorted by position."""
    accepted: list[Detection] = []
    for d in sorted(set(candidates), key=lambda d: (_RANK[d.type], d.start - d.end, d.start)):
        if d.end > d.start and all(d.end <= a.start or d.start >= a.end for a in accepted):
            accepted.append(d)
    return sorted(accepted)


class Scrubber:
    """``scrub(text) -> (scrubbed, detections)``; detections are in the original text's coordinates.

    Results are memoised for up to ``cache_size`` distinct texts (logs repeat canned assistant replies
    and popular requests); the cache is dropped whole when full, so memory stays bounded.
    """

    def __init__(self, phone_regions: Sequence[str], names: NameFinder | None = None, cache_size: int = 50_000,
                 tagger: PiiTagger | None = None) -> None:
        self.phones = PhoneFinder(phone_regions)
        self.names = names or NameFinder()
        self.tagger = tagger
        self.cache_size = cache_size
        self._cache: dict[str, tuple[str, list[Detection]]] = {}

    @classmethod
    def configured(cls, phone_regions: Sequence[str], names: str = "ner", ner_model: str = DEFAULT_NER_MODEL,
                   protected: frozenset[str] = frozenset(), tagger: bool = False,
                   tagger_dir: Path | None = None) -> Scrubber:
        """The scrubber ``anonymise`` config asks for: ``names`` is 'rules', 'lexicon' or 'ner'; ``tagger`` adds the
        learned PII tagger's spans (:mod:`data_curation.tagger`)."""
        if names not in ("rules", "lexicon", "ner"):
            raise ValueError(f"anonymise.names: {names!r} is not one of rules, lexicon, ner")
        lexicon = load_lexicon() if names != "rules" else None
        ner = SpacyPersons(ner_model) if names == "ner" else None
        return cls(phone_regions, NameFinder(lexicon=lexicon, protected=protected, ner=ner),
                   tagger=PiiTagger(model_dir=tagger_dir) if tagger else None)

    def detect(self, text: str, tagged: bool = True) -> list[Detection]:
        """The detections of ``text``; ``tagged``: with the tagger's (when there is one). The re-read of message
        tails joined to the next messages (:meth:`scrub_turns`, a value cut by sending too soon) goes without:
        across a joint the tagger runs a value on into the next message ("…@gmail.com." / "ok."). A cue that
        closed the message before, read with the next message whole ("my name is" / "…"), is read with it."""
        if not text:
            return []
        found: list[Detection] = [Detection(m.start(), m.end(), "EMAIL") for m in _EMAIL.finditer(text)]
        found.extend(_spelt_emails(text))  # the longer read wins ("tomasz underscore nowak at onet dot pl")
        found.extend(_spelt_values(text))
        tails: list[tuple[int, int]] = []
        if any(c.isdigit() for c in text):
            for detector in (_iban, _cards, _card_fragments, _ips, _order_ids, _national_ids, _addresses, _iban_cued,
                             _cued_addresses):
                found.extend(detector(text))
            found, tails = _cut_addresses(text, resolve(_cued_not_cards(text, found)))
            found = _phones_past_addresses(text, found, list(self.phones.find(
                text, [d for d in found if d.type != "ADDRESS"])))
            found = _glued_references(text, _address_chains(text, [*found, *_id_backstop(text, found)]))
            found = _with_directions(text, found)
        elif "#" in text or _ORDER_CONTEXT.search(text):  # "#A1B2C3", "booking ref is QXTRFB"
            found.extend(_order_ids(text))
        graded = self.names.find_graded(text, [(d.start, d.end) for d in found])
        if _shouting(text):  # "NAME ON TICKET SHOULD BE OLUWAFEMI ADEYEMI": read it as if not shouted
            common = self.names.lexicon.common if self.names.lexicon is not None else frozenset()
            graded = [*graded, *self.names.find_graded(_decapitalised(text, common), [(d.start, d.end) for d in found])]
        reading = self.tagger.read(text) if self.tagger is not None and tagged else None
        if reading is not None:  # a name on its words' evidence alone, in words the tagger reads as no PII at all
            graded = [g for g in graded if not g[2] or (p := reading.pii_prob(g[0], g[1])) is None or p >= NAME_VETO]
        names = _not_street_names(text, found, [(s, e) for s, e, _ in graded])
        out = resolve([*_names_out_of_addresses(text, found, names), *(Detection(s, e, "NAME") for s, e in names)])
        if tails:
            out = resolve([*out, *_cover_tails(text, out, tails)])
        return _joined_addresses(text, self._with_tagged(text, out, reading) if reading is not None else out)

    def _with_tagged(self, text: str, found: list[Detection], reading: Reading) -> list[Detection]:
        """``found`` plus the parts of the tagger's spans (:meth:`_tagged`) that no detection covers: the rules'
        detections stay as they are (a tagged span never displaces one), and a tagged part right next to a
        detection of its own type joins it ("Lena" found, "Lena Chen" tagged: one name)."""
        out = list(found)
        for d in self._tagged(text, found, reading):
            for a, b in _uncovered(text, d.start, d.end, out):
                if d.type == "NAME":  # a name's piece is judged again on its own
                    kept = self.names.tagged(text, a, b)
                    if kept is None:
                        continue
                    a, b = kept
                elif not any(c.isdigit() or c == "@" for c in text[a:b]) and (d.type != "ADDRESS" or b - a < 3):
                    continue  # an address's piece ("phường Hàng Gai") goes with it; a word beside an e-mail does not
                near = [x for x in out if x.type == d.type and ((x.end <= a and not text[x.end : a].strip())
                                                                 or (b <= x.start and not text[b : x.start].strip()))]
                for x in near:
                    out.remove(x)
                    a, b = min(a, x.start), max(b, x.end)
                out.append(Detection(a, b, d.type))
        return sorted(out)

    def _tagged(self, text: str, found: Sequence[Detection], reading: Reading) -> list[Detection]:
        """The PII tagger's spans (grown to whole words) that no detection holds whole, each kept only when sure
        (:data:`~data_curation.tagger.THRESHOLD`) and past the precision rules: a name by
        :meth:`NameFinder.tagged`, any other type by :func:`_tagged_value_ok` (a reference reads as no quantity,
        price, date, barcode, flight or model number; an e-mail has an at and a dot; an address has its pieces)."""
        out = []
        for span in reading.spans:
            if span.prob < TAGGER_THRESHOLD:
                continue
            a, b = _whole_words(text, span.start, span.end)
            if any(d.start <= a and b <= d.end for d in found):
                continue
            if span.type == "NAME":
                kept = self.names.tagged(text, a, b)
                if kept is not None:
                    out.append(Detection(*kept, "NAME"))
            elif _tagged_value_ok(text, a, b, span.type):
                out.append(Detection(a, b, span.type))
        return out

    def prefetch(self, texts: Sequence[str]) -> None:
        """Let the tagger read ``texts`` in batches ahead of scrubbing them (nothing to do without a tagger)."""
        if self.tagger is not None:
            self.tagger.prefetch([t for t in texts if t and t not in self._cache])

    def scrub_turns(self, texts: Sequence[str]) -> list[tuple[str, list[Detection]]]:
        """Scrub one speaker's consecutive messages: a number split across two of them ("card is 4916 3388" /
        "1205 7726") is found from both halves together, a value after a cue that closed the message before
        ("my passport number is" / "X1234567") from the cue, and a name found in one message in the others."""
        out = [self.scrub(t) for t in texts]
        extra: dict[int, list[Detection]] = {}
        for i in range(len(texts) - 1):
            tail = _TAIL_DIGITS.search(texts[i])
            head = _HEAD_DIGITS.match(texts[i + 1])
            if tail is None or head is None:
                continue
            kind = _fragment_type(texts[i][: tail.start()] + " " + texts[i + 1][head.end("d") :],
                                  tail.group("d") + head.group("d"))
            if kind is None:
                continue
            extra.setdefault(i, []).append(Detection(tail.start("d"), tail.end("d"), kind))
            extra.setdefault(i + 1, []).append(Detection(head.start("d"), head.end("d"), kind))
        for i in range(len(texts) - 1):  # "tomasz.wojcik" / "@wp.pl"
            local = re.search(r"(?<![\w.+-])[\w.+-]{2,64}\s*$", texts[i])
            domain = re.match(r"\s*@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,24}\b", texts[i + 1])
            if local is not None and domain is not None:
                extra.setdefault(i, []).append(Detection(local.start(), local.start() + len(local.group().rstrip()), "EMAIL"))
                lead = len(domain.group()) - len(domain.group().lstrip())
                extra.setdefault(i + 1, []).append(Detection(lead, domain.end(), "EMAIL"))
        for i in range(len(texts) - 1):  # "my passport number is" / "X1234567": a cue closes one message
            cue = _TRAILING_CUE.search(texts[i])
            if cue is not None and texts[i + 1].strip():
                prefix = texts[i][cue.start() :].rstrip() + " "
                for d in self.detect(prefix + texts[i + 1]):
                    if d.start >= len(prefix):
                        extra.setdefault(i + 1, []).append(Detection(d.start - len(prefix), d.end - len(prefix), d.type))
        i = 0
        while i < len(texts) - 1:  # "call +1 (347)" / "555" / "0172 after 5pm", "…3 Quay Street" / "Galway H91…"
            parts = self._across(texts, [dets for _, dets in out], i)
            for start, end, kind, k in parts:
                extra[k] = [x for x in extra.get(k, []) if x.end <= start or end <= x.start]  # the longer read wins
                extra[k].append(Detection(start, end, kind))
            i = max([i + 1, *(k for *_, k in parts)])  # a value read across three messages is not read again
        seen = {texts[i][d.start : d.end] for i, (_, dets) in enumerate(out) for d in dets if d.type == "NAME"}
        if seen:  # "it was bought by Sky" / "Sky Montgomery-Wells, 07700 …": a name found once is a name elsewhere
            for i, text in enumerate(texts):
                spans = self.names.propagate(text, seen)
                if spans:
                    extra.setdefault(i, []).extend(Detection(s, e, "NAME") for s, e in spans)
        for i, dets in extra.items():  # what the other message's cue says a span is wins over its own guess
            own = [d for d in out[i][1] if not any((d.start, d.end) == (x.start, x.end) for x in dets)]
            found = resolve([*own, *dets])
            out[i] = (_render(texts[i], found), found)
        return out

    def _across(self, texts: Sequence[str], found: Sequence[Sequence[Detection]],
                i: int) -> list[tuple[int, int, str, int]]:
        """Values cut by sending a message too soon: when message ``i`` ends in a digit or a value and the next starts
        with a digit, a dash, a plus or a bracket, or ``i`` ends in a value and the next is short, the two (or three) are read as one text (of
        the first, its last ~160 characters), and what crosses a message boundary is split back into each message's
        part."""
        text = texts[i].rstrip()
        ends_in_value = bool(text) and any(d.end >= len(text) - 1 for d in found[i])
        window = [i]
        for k in range(i + 1, min(len(texts), i + 3)):
            nxt = texts[k].lstrip()
            cut_short = ends_in_value or text[-1:].isdigit() or text[-1:] == ")"  # "… (21) 99812", "call +1 (347)"
            goes_on = cut_short and (nxt[:1].isdigit() or nxt[:1] in ("-", "–", "+", "("))  # "-3407", "555"
            if not nxt or len(nxt) > 100 or not (goes_on or (ends_in_value and len(nxt) <= 60)):
                break
            window.append(k)
            text = texts[k].rstrip()
            ends_in_value = bool(text) and any(d.end >= len(text) - 1 for d in found[k])
        if len(window) < 2:
            return []
        # only the first message's tail is read again (a value cut at its end starts there): not all of a long text
        cut = texts[i].rfind(" ", 0, max(0, len(texts[i]) - _ACROSS_TAIL)) + 1
        joined, offsets = texts[i][cut:], [-cut]
        for k in window[1:]:
            joined += "" if texts[k].lstrip()[:1] in "-–" else " "
            offsets.append(len(joined))
            joined += texts[k]
        out = []
        for d in self.detect(joined, tagged=False):
            parts = []
            for k, off in zip(window, offsets, strict=True):
                a, b = max(d.start, off, 0), min(d.end, off + len(texts[k]))
                piece = joined[a:b]
                lead, trail = len(piece) - len(piece.lstrip(" -–,")), len(piece) - len(piece.rstrip(" -–,"))
                if b - a - lead - trail > 0:
                    parts.append((a - off + lead, b - off - trail, d.type, k))
            if d.type == "NAME":
                continue  # a name's rules read a message's own words ("お届け先は山田 花子です" / "ユニクロの…です")
            later = [texts[k][a:b] for a, b, _, k in parts[1:]]
            if d.type == "ADDRESS" and not all((p[:1].isupper() or p[:1].isdigit()) and any(c.isdigit() for c in p)
                                               for p in later):
                continue  # an address goes on with a capitalised place and a code ("Galway H91 E2K4"), not "items"
            if len(parts) >= 2:  # only what crosses a boundary: each message's own values are found on their own
                out.extend(parts)
        return out

    def scrub(self, text: str) -> tuple[str, list[Detection]]:
        hit = self._cache.get(text)
        if hit is None:
            hit = self._scrub(text)
            if len(self._cache) >= self.cache_size:
                self._cache.clear()
            self._cache[text] = hit
        return hit[0], list(hit[1])

    def _scrub(self, text: str) -> tuple[str, list[Detection]]:
        found = self.detect(text)
        return (_render(text, found) if found else text), found


def _uncovered(text: str, start: int, end: int, found: Sequence[Detection]) -> list[tuple[int, int]]:
    """The pieces of ``text[start:end]`` outside every detection in ``found``, trimmed of spaces (not of
    punctuation: the comma or the degree sign between two parts of an address is part of the value); pieces
    without a letter or digit are dropped."""
    cuts = sorted((max(start, d.start), min(end, d.end)) for d in found if d.start < end and d.end > start)
    pieces, pos = [], start
    for a, b in cuts:
        if a > pos:
            pieces.append((pos, a))
        pos = max(pos, b)
    if pos < end:
        pieces.append((pos, end))
    out = []
    for a, b in pieces:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if any(c.isalnum() for c in text[a:b]):
            out.append((a, b))
    return out


def _whole_words(text: str, start: int, end: int) -> tuple[int, int]:
    while start > 0 and text[start - 1].isalnum():
        start -= 1
    while end < len(text) and text[end].isalnum():
        end += 1
    return start, end


_SPELT_AT = re.compile(r"(?i)@|\b(?:at|arroba|chez)\b|[\[(]at[\])]")
_SPELT_DOT = re.compile(r"(?i)\.|\b(?:dot|punto|point|ponto|punkt)\b|[\[(]dot[\])]")


def _tagged_value_ok(text: str, start: int, end: int, kind: str) -> bool:
    """A tagger's span of a type other than NAME is a value, not a look-alike (see :meth:`Scrubber._tagged`)."""
    value = text[start:end]
    digits = sum(c.isdigit() for c in value)
    if kind == "EMAIL":  # an at and a dot, each written or spelt out
        return _SPELT_AT.search(value) is not None and _SPELT_DOT.search(value) is not None and len(value) >= 6
    if kind == "ADDRESS":  # pieces of an address, not "Palawan sa Nov 8-11" or "Sacher, 12.": three pieces, or two
        pieces = [p for p in re.split(r"[,،、，]", value) if re.search(r"\w", p)]  # with a post code
        return digits > 0 and (len(pieces) >= 3 or (len(pieces) == 2 and re.search(r"\d{4}", value) is not None))
    if kind == "IP":
        return digits >= 4
    if _FLIGHT_NUMBER.fullmatch(value) or (digits < 5 and not re.search(r"[^\W\d_]", value)):
        return False  # "TK 2412", "6E 5312": a flight; "1351": four digits alone say too little
    return digits >= 4 and not _reads_as_quantity(text, start, end)


_FLIGHT_NUMBER = re.compile(r"(?:[A-Z]{2}|[A-Z]\d|\d[A-Z])\s?\d{1,4}[A-Z]?")


def _reads_as_quantity(text: str, start: int, end: int) -> bool:
    """Digits that name an amount or a product, not a person or an order: a quantity with its unit, a date or a
    time, money, a version, a product code after its cue, a valid EAN-13 or ISBN-10, a model's or a train's number
    after its name."""
    core = text[start:end].lstrip("#")
    compact = re.sub(r"[ -]", "", core)
    return bool(_QUANTITY.fullmatch(core) or _date_like(core) or _TIME.fullmatch(core)
                or _MONEY_BEFORE.search(text, max(0, start - 6), start) or _MONEY_AFTER.match(text[end : end + 14])
                or _PRODUCT_CODE_CUE.search(text, max(0, start - 24), start)
                or _VERSION_CUE.search(text, max(0, start - 12), start)
                or (len(compact) == 13 and compact.isdigit() and _ean13_ok(compact)) or _isbn10_ok(compact)
                or _CAMEL_BEFORE.search(text, max(0, start - 30), start)
                or TRIP_OR_MODEL_BEFORE.search(text, max(0, start - 40), start))


def _render(text: str, found: Sequence[Detection]) -> str:
    parts = []
    pos = 0
    for d in found:
        parts.append(text[pos : d.start])
        parts.append(PLACEHOLDERS[d.type])
        pos = d.end
    parts.append(text[pos:])
    return "".join(parts)


# A cue that ends a message, its value in the next one.
_TRAILING_CUE = re.compile(
    r"(?i)\b(?:ssn|social security(?: number| no\.?)?|passport(?: number| no\.?)?|national id(?: number)?|"
    r"id (?:number|no\.?)|tax (?:id|number|code)|dni|nie|nif|cpf|bsn|pesel|aadhaar|personnummer|nino|"
    r"national insurance(?: number)?|codice fiscale|cédula|cedula|curp|rut|nric|emirates id|kimlik(?: no)?|"
    r"order(?: number| no\.?| id| #)?|tracking(?: number| no\.?| code)?|invoice(?: number| no\.?)?|"
    r"booking (?:ref(?:erence)?|number|code)|confirmation(?: number| code)?|reference(?: number)?|"
    r"iban|account(?: number)?|card(?: number)?|e-?mail(?: address)?|my name(?:'s| is)?|(?:full )?name|"
    r"recipient|address|ship(?: it)? to|deliver(?: it)? to|send(?: it)? to|phone(?: number)?|mobile(?: number)?|"
    r"my number)\s*(?:is|:|#|-|=)?\s*$"
)
_ACROSS_TAIL = 160
"""Characters of a message's end read together with the messages after it (:meth:`Scrubber._across`)."""
_TAIL_DIGITS = re.compile(r"(?P<d>(?:\+\s?)?\d{2,6}(?:[ .-]\d{1,6})*)\s*[.!?…]*\s*$")
_HEAD_DIGITS = re.compile(r"^\s*(?:[^\W\d]+[.!,]?\s+){0,2}(?P<d>\d{1,6}(?:[ .-]\d{1,6})*)(?![\w])")
_PHONE_FRAGMENT_CUE = re.compile(r"(?i)\b(?:call|phone|tel|mobile|cell|number|número|numero|nummer|whatsapp|text|ring|"
                                 r"sđt|sdt|телефон|тел|电话|電話|contact)\b")
_IBAN_FRAGMENT_CUE = re.compile(r"(?i)\b(?:iban|account|konto|compte|cuenta|conta|bank)\b")


def _fragment_type(context: str, joined: str) -> str | None:
    """The type of a number split over two messages, from the words around it and its digits."""
    digits = "".join(c for c in joined if c.isdigit())
    if len(digits) < 7:
        return None
    if _IBAN_FRAGMENT_CUE.search(context) or re.match(r"\s*[A-Z]{2}\d{2}", joined):
        return "IBAN"
    if re.search(r"(?i)\b(?:card|visa|mastercard|amex|exp|expiry|cvv|cvc)\b", context) \
            or (13 <= len(digits) <= 19 and luhn_ok(digits) and "+" not in joined):
        return "CARD"
    if "+" in joined or _PHONE_FRAGMENT_CUE.search(context):
        return "PHONE"
    return None
