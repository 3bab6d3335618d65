"""Person names in free text without a model: cue phrases, capitalised tokens and shipped name lists.

A *run* is a sequence of capitalised words joined by single spaces (name particles such as "van",
"de", "al" may sit inside). A run is a name when

- a **strong cue** precedes it ("my name is", "this is", "I'm", "send it to", "Mr", "Regards,", an
  em dash sign-off "—Maria") and it has two or more words, or one word that is a known name or is
  followed by punctuation or the end of the text ("This is Summit gear" is not a name);
- a **greeting cue** precedes it ("Hi", "Dear", "Thanks,") and it starts with a known first name;
- no cue, but it holds a known first name followed by a known surname ("(John Smith)").

Known names come from ``data/first_names.txt`` and ``data/surnames.txt`` (hand-compiled, several
hundred each across cultures). Brand words that happen to be first names ("Jasper", "Willow") are
only taken for names after a strong cue and when they stand alone, which is what keeps precision
on product text high. After a strong cue a name written in lower case is also found when its words
are known names ("my name is lena chen").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Protocol

from data_curation.lexicon import PRODUCT_NOUNS, PRODUCT_WORDS

if TYPE_CHECKING:
    from data_curation.lexicon import Lexicon


class PersonModel(Protocol):
    """A named-entity model: character spans of PERSON entities in a text."""

    def persons(self, text: str) -> list[tuple[int, int]]: ...


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# A letter of any script, with the combining vowel signs of Indic and South-East Asian scripts and the
# points of Arabic and Hebrew ("प्रिया", "สมศรี"), which ``\w`` leaves out.
_LET = r"(?:[^\W\d_]|(?![^\W\d\s])[\u0591-\u05c7\u064b-\u065f\u0900-\u0963\u0970-\u0dff\u0e00-\u0e7f\u1000-\u109f])"
_TOKEN = re.compile(rf"{_LET}++(?:['’\-]{_LET}++)*")
_PARTICLES = frozenset({"van", "von", "de", "da", "di", "del", "della", "der", "den", "du", "la", "le", "bin",
                        "ibn", "al", "el", "dos", "das", "ter", "ten", "y", "i", "binti", "bint", "dela", "delos",
                        "ben", "bat", "ould", "ap", "mac", "st"})
# Words that start sentences or follow cues in capitals but are not names (compared case-folded).
_NOT_NAMES = _words("""
a an the this that these those my your our their his her its i we you they he she it me us them i'm it's hi
hello hey dear thanks thank regards cheers best please yes no ok okay sorry sure great good fine well just
also very so really still not here there now then today tomorrow yesterday soon again back new looking
searching trying going interested ready happy glad calling writing hoping wondering buying shopping ordering
returning planning done need want would could should can will may might must shall do does did is are was were
be been am has have had what which who whom whose when where why how if but and or for to from with without
about into onto over under after before at by on in of off out up down any some every all both each few more
most other such only own same than too send ship deliver call email phone contact order address name street
road avenue lane drive court mr mrs ms miss mx dr prof sir madam monday tuesday wednesday thursday friday
saturday sunday january february march april june july august september october november december christmas
easter hej hola ciao salut bonjour hallo olá ola chào merhaba namaste moin servus hoi gracias danke merci obrigado
obrigada grazie salam shalom konnichiwa hei xin hallå ahoj cześć czesc szia sawubona jambo habari aloha
안녕하세요 안녕 こんにちは こんばんは おはよう 你好 您好 谢谢 привет здравствуйте مرحبا
है हूँ हूं हैं का की के और मेरा मेरी नाम जी here again team customer client guest sender user
herr frau familie famille familia família famiglia señor señora sr sra srta monsieur madame mme mlle signor
signora sig mevrouw meneer dhr mevr senhor senhora sayın sidekick shop unit flat suite apartment apt block lot plot
i'd i'll i've you'd you'll you've we'd we'll we've they'd they'll he'd she'd ids
שלום היי תודה السلام عليكم اهلا أهلا شكرا سلام ආයුබෝවන් вітаю добрий день γεια σας καλημέρα բարև გამარჯობა
baba mama papa lola lolo nana nani dadi amma appa abba ammi oma opa nonna nonno babcia dziadek babushka bibi yaya
jina langu simu asante tafadhali namba nataka hiyo mimi ndiyo hapana sawa tiketi karibu
mera meri bhai bhaiya abhi kya nahi haan yaar accha acha theek kitna bhejo jaldi
shukran habibi habibti yalla inshallah mashallah wallah esmi
kak kakak mbak gan terima kasih tolong mohon jumat sabtu senin selasa rabu kamis
salamat kuya opo paki dzień dzien dobry proszę prosze dziękuję dziekuje goedemiddag goedemorgen dm dm'd
""")
_STRONG = re.compile(
    r"(?:\bmy name is|\bname is|\bname's|\bname:|\bthis is|\bit's|\bit is|\bi'm|\bi am|\bim|\bcall me|"
    r"\b(?:send|ship|deliver|post|mail)(?: it| them| this| that| the parcel| the package)? to|\baddressed to|"
    r"\b(?:it|parcel|package|box|order|delivery|this|that|them)(?: should| can| will| must| could)? go(?:es)? to|"
    r"\b(?:give it|give them|hand it|hand them|pass it|leave it|leave them|return it|forward it)(?: to| with)|"
    r"\b(?:signed|placed|bought|ordered|booked|paid|picked up|collected|received) by|\bunder the name(?: of)?|"
    r"\b(?:zamówion\w*|kupion\w*|bestellt|gekauft|command[ée]e?s?|achet[ée]e?s?|pedid[oa]s?|comprad[oa]s?|"
    r"encomendad[oa]s?) (?:przez|von|par|por|pel[oa])|\bname (?:should|must|will|has to|needs to) be|"
    r"\b(?:booking|reservation|table|order|room) (?:is )?under|(?<!brand )(?<!product )(?<!model )(?<!file )(?<!user)"
    r"(?<!domain )(?<!street )(?<!company )(?<!shop )(?<!store )(?<!hotel )(?<!place )\bname|\bnamed as|"
    r"\b(?:recipient|receiver|addressee|consignee|holder|cardholder|beneficiary)(?: to| is| will be| should be|:)?|"
    r"\baddress(?: it| them| this)? to|\bname on (?:the )?card:?|\b(?:booked|reserved|registered|listed|filed) under|"
    r"\bon behalf of|\bbehalf of|"
    r"\b(?:herr|frau|familie|famille|familia|família|famiglia|señor|señora|sr\.?|sra\.?|srta\.?|monsieur|madame|"
    r"mme\.?|mlle\.?|signor|signora|sig\.?|sig\.ra|mevrouw|meneer|dhr\.?|mevr\.?|pani|senhor|senhora|sayın|"
    r"ustadh|sheikh|shaikh|sensei|san|sama)|"
    r"\battn:?|\battention:?|\bc/o|\bregards,?|\bsincerely,?|\bsigned,?|\bask for|\bspeak to|\bnamed|"
    r"\bcalled|\bmr\.?|\bmrs\.?|\bms\.?|\bmiss|\bdr\.?|\bprof\.?|\bfrom:|\bto:|\bcustomer:|(?:^|(?<=\s))(?:[—–]|--))\s*$"
)
# A relative, friend or role right before a name: "my daughter Rose", "our neighbour Pim", "Familie Brandstätter".
_KIN = re.compile(
    r"(?:\b(?:my|our|his|her|their|your|the|a|an|with|and|for|mi|mis|tu|su|nuestra|nuestro|minha|meu|nossa|nosso|"
    r"sua|seu|mein|meine|meinem|meiner|meinen|unsere|unser|ma|mon|mes|notre|mia|mio|nostra|nostro|moja|mój|мой|моя)"
    r"\s+(?:(?:little|baby|big|older|younger|elder|eldest|"
    r"youngest|oldest|best|new|old|dear|twin|lovely|future|ex)[- ]?)*"
    r"(?:daughter|son|wife|husband|hubby|mom|mum|mommy|mummy|mother|dad|daddy|father|parents|friend|bestie|bff|bf|gf|"
    r"boyfriend|girlfriend|fianc[ée]e?|partner|spouse|boss|manager|colleague|coworker|co-worker|assistant|secretary|"
    r"neighbou?r|cousin|niece|nephew|aunt|auntie|aunty|uncle|brother|sister|sis|bro|grandma|grandpa|grandmother|"
    r"grandfather|granny|gran|nan|nana|grandson|granddaughter|lola|lolo|tita|tito|babcia|"
    r"dziadek|nani|dadi|kid|kids|child|children|teacher|roommate|flatmate|"
    r"housemate|landlord|landlady|tenant|doorman|concierge|receptionist|nanny|driver|mate|buddy|pal|in-laws|"
    r"(?:mother|father|sister|brother|son|daughter)-in-law|godson|goddaughter|godmother|godfather|stepson|"
    r"stepdaughter|stepmom|stepdad|twins|guy|girl|lady|gentleman|man|woman|person|courier|host|student|coach|"
    r"doctor|nurse|vet|babysitter|employee|intern|buyer|seller|sender|recipient|client|customer|guest|"
    r"passenger|traveller|traveler|kids are|twins are|baby|"
    r"abuela|abuelo|abuelita|mamá|mama|papá|papa|tía|tia|tío|tio|hermana|hermano|hija|hijo|esposa|esposo|novia|novio|"
    r"prima|primo|sobrina|sobrino|amiga|amigo|mãe|mae|pai|filha|filho|avó|avô|irmã|irmão|oma|opa|mutter|vater|"
    r"tochter|sohn|schwester|bruder|freundin|freund|frau|mann|maman|fille|fils|sœur|soeur|frère|frere|amie|ami|"
    r"nonna|nonno|madre|padre|figlia|figlio|sorella|fratello|moglie|marito|zio|zia|anne|baba|abla|kardeşim|"
    r"mamy|tata|córka|syn|żona|mąż|siostra|brat|мама|папа|сестра|брат|дочь|сын|жена|муж|бабушка|дедушка)"
    r"(?:'s name is|,)?\s*$)"
    r"|(?:\b(?:familie|famille|family|familia|família|famiglia|rodzina|семья)\s*$)",
    re.IGNORECASE,
)
# Before a name: verbs and phrases that take a person ("tell Mateus", "gift for Faith", "love you Dilnoza").
_PERSON_BEFORE = re.compile(
    r"(?:\b(?:tell|ask|thank|thanks|thx|ty|love you|miss you|happy (?:birthday|bday|anniversary|graduation|"
    r"retirement)|congrats|congratulations|mazel tov|dear|meet|with love,?|hugs,?|gift for|present for|"
    r"surprise for|something for|card for|cake for|note for|engraving for|(?:it's|its|it is|this is|these are|"
    r"that's|that is|that was|they're|they are|one is|both are|all are) for|to:|for:|from:|(?:and|&|\+) me|"
    r"(?:parcel|package|order|delivery|box|gift|present) for)\s*,?\s*$)",
    re.IGNORECASE,
)
# Cues strong enough that the name needs no punctuation after it: "tell Mercy the booking is sorted".
_PERSON_OBJECT = re.compile(r"(?i:\b(?:tell|ask|thank|thanks|meet|remind|text|message|email|call|let|help|congratulate|contact|"
                            r"ring|ping|dm|whatsapp|tag|page|notify|inform|phone|"
                            r"dear|me(?: and| &| \+)|me,|"
                            # somebody's company: "travelling with Maria", "sharing the room with James"
                            # (not "going / coming with": a shopper's choice, "going with Apple", "comes with Alexa")
                            r"(?:travel+ing|travel+ed|staying|stayed|sharing|shared|living|flying|together|along|"
                            r"out|trip|holiday|vacation|dinner|lunch|date|room|tent) with)"
                            r"\s*$)")
_TITLES = (r"(?:mr|mrs|ms|mx|miss|dr|prof|herrn?|frau|fr|hr|pani|pan|pana|panu|sr|sra|srta|señor|señora|"
           r"señorita|mme|mlle|monsieur|madame|signor|signora|sig|dhr|mevr|senhor|senhora|sayın|bay|bayan|tuan|puan|"
           r"encik|bapak|pak|bu|ibu)\.?\s")
_TITLE_BEFORE = re.compile(rf"(?<![^\W\d_]){_TITLES}$", re.IGNORECASE)
_TITLE_FIRST = re.compile(_TITLES, re.IGNORECASE)
# Product nouns that are also verbs taking a person, and what may open the clause before such a verb.
_CALL_VERBS = frozenset({"ring", "call", "text", "page", "tag", "message", "contact"})
_CLAUSE_START = re.compile(r"(?i)(?:^|[.!?,;:\n—–-]|\b(?:pls|plz|please|and|then|just|or|also|kindly|can you|could you|"
                           r"can u|pls just))\s*$")
_PHONE_AFTER = re.compile(r"\s*(?:on|at|@|:|-)?\s*\+?\(?\d[\d\s().-]{6,}\d")
_PERSON_BEFORE_NARROW = re.compile(r"(?i:(?:^|[\"“‘'(]|[.!?]\s+)\s*(?:to|from|for)\s*$)")
# After a name: it speaks, acts or is somebody's ("Grant said", "Mercedes here", "Ahmad will be there").
_PERSON_AFTER = re.compile(
    r"(?:\s*,)?\s+(?:here\b|again\b|speaking\b|said\b|says\b|told\b|asked\b|asks\b|wants\b|wanted\b|"
    r"likes\b|loves\b|needs\b|needed\b|will (?:be|sign|pick|collect|come|call|get|take|receive|bring|meet|pay)\b|"
    r"is (?:picking|coming|visiting|my|our|allergic|turning|getting|going|at (?:home|work|the))\b|has (?:a|an|my)\b|"
    r"signs\b|signed\b|typed\b|wrote\b|recommended\b|bought\b|ordered\b|paid\b|picked\b|sent\b|gave\b|"
    r"can (?:pick|sign|collect|come|take|receive)\b|(?:and|&|\+) [Ii]\b|and me\b|from (?:\w+ ){1,2}here\b|"
    r"\((?:she|he|they|my)\b|,\s+(?:she|he|they)(?:'s|’s| is| was| will| has| said| wants| likes| loves)\b|"
    r",\s+(?:my|our|his|her)\s+|turns \d|returned\b|just (?:asked|said|told|bought|ordered|messaged|texted)\b|"
    # the same in other languages: "X vai receber", "X ha detto", "X a dit", "X hat gesagt", "X ne bola", "X y yo"
    r"vai (?:receber|buscar|pegar)\b|disse\b|dijo\b|ha detto\b|a dit\b|a fait\b|hat (?:gesagt|geschrieben|sie|es|ihn)\b|"
    r"ne (?:bola|kaha|bataya|liya|manga)\b|(?:y|e|et|und|i|ve) (?:yo|eu|moi|ich|ja|ben)\b|"
    r"(?:abla|abi|hanım|bey|ji|bhai|didi|san|chan|kun)\b)"
    r"|['’]s\s+(?:birthday|bday|b-day|mom|mum|dad|mother|father|wife|husband|boyfriend|girlfriend|sister|brother|"
    r"son|daughter|order|address|phone|number|email|name|place|house|flat|apartment|room|size|favourite|favorite)\b"
)
# A name set off by a relative or a role after it: "Jordan, my son, …", "Precious, the lady at your branch, …".
_APPOSITION = re.compile(
    r"\s*,\s+(?:my|our|his|her|their|your|the)\s+(?:(?:little|baby|big|older|younger|eldest|youngest|oldest|best|new|"
    r"old|dear|twin)\s+)?(?:daughter|son|wife|husband|mom|mum|mother|dad|father|friend|bestie|boyfriend|girlfriend|"
    r"fianc[ée]e?|partner|boss|manager|colleague|coworker|neighbou?r|cousin|niece|nephew|aunt|auntie|uncle|brother|"
    r"sister|grandma|grandpa|grandmother|grandfather|granny|grandson|granddaughter|kid|child|teacher|roommate|flatmate|"
    r"housemate|landlord|landlady|nanny|driver|lady|guy|man|woman|girl|gentleman|assistant|agent|rep|representative|"
    r"courier|rider|seller|staff|employee|cashier|clerk|salesman|saleswoman|salesperson|person)\b",
    re.IGNORECASE,
)
# "can Sipho pick it up", "Could Liberty please sign": a modal, the name, then an action.
_MODAL_BEFORE = re.compile(r"(?i:\b(?:can|could|would|will|should|did|does|may|might|has|have)\s*$)")
_ACTION_AFTER = re.compile(r"(?i:\s+(?:please\s+|also\s+|just\s+)?(?:pick|sign|collect|come|get|take|receive|be|have|"
                           r"call|text|grab|bring|pay|use|see|check|accept|open|try|wear|return|exchange|swap|join)\b)")
# Words before a lower-case name: "its for kwame", "my mom rosa-linda", "for ikaika kahananui".
_LOWER_CUE = re.compile(r"(?:\bfor|\bto|\bfrom|\bwith|\bmom|\bmum|\bdad|\bson|\bdaughter|\bwife|\bhusband|\bfriend|"
                        r"\bbrother|\bsister|\bniece|\bnephew|\bbaby|\bgrandma|\bgrandpa|\babuela|\babuelo|\bboss|"
                        r"\bpartner|\bbf|\bgf|\bcousin|\baunt|\buncle|\bshout out(?: to)?|\bask|@|\bcall|\bring|\btext|\btag|"
                        r"\bcontact|\bping|\bdm|\bme,|\bme and|\bme &|\bme n|\btell|^its|^it's|^it is|\bsi|\bkay|\bni)\s*$")
# A name closing a message: after a sentence end, a dash or nothing at all (the whole message).
_SIGN_OFF = re.compile(r"(?:^|[.!?\n]\s+|\s[-—–~]\s*|^[-—–~]\s*|(?i:\b(?P<thanks>love|thanks|thx|tnx|ty|tysm|cheers|"
                       r"regards|best|xoxo|xx|bye|ngā mihi|nga mihi|mahalo|asante|terima kasih|salamat|bedankt|"
                       r"teşekkürler|shukriya|dhanyavaad|"
                       r"ciao|merci|danke|gracias|obrigad[oa]|grazie|tack|dziękuję|спасибо|groetjes|groeten|grüße|gruß|"
                       r"saludos|abraços|beijos|bisous|cordialement|pozdrawiam|pozdrav|mvh|hälsningar|terveisin|"
                       r"selamlar|saygılarımla|с уважением),?\s+))"
                       rf"(?P<n>{_LET}++(?:['’\-]{_LET}++)*(?: {_LET}++(?:['’\-]{_LET}++)*){{0,3}})"
                       r"\s*[.!❤️🙏😊🙂✨💕💛♥]*\s*['\"’”]?\s*[.!]?\s*$")
# The last word of a message after a sentence end, a dash or a comma: "… не приймає. Юлія", "…, Василь".
_LAST_WORD = re.compile(rf"(?:[.!?,]|\s[-—–~])\s+(?P<n>{_LET}++)\s*[.!❤️🙏😊🙂✨💕💛♥]*\s*$")
# A name before an honorific or a copula, in scripts without spaces: "田中さくら です", "김민지입니다".
_CJK_HONORIFIC = re.compile(r"(?<![\u4e00-\u9fff\u3040-\u30ff])([\u4e00-\u9fff]{1,3}[\u3040-\u30ff]{0,4}|[\u30a0-\u30ff]{2,8}"
                            r"|[\u3041-\u3093]{2,4}(?=ちゃん|さん|くん|様|さま))"
                            r"\s*(?:です|さん|様|さま|ちゃん|くん|と申します)"
                            r"|(?!고객|회원|주문|배송|문의|감사|안녕|사장|선생|팀장|과장|부장|기사)([\uac00-\ud7af]{2,4})"
                            r"\s*(?:고객님?|회원님?)?\s*(?:입니다|이에요|예요|님|씨)")
_ANY_SCRIPT_CUE = re.compile(
    r"(?i:(?:\b(?:order |gift |parcel |package |it's |its )?for|\bnames?|\bto|\battn|\brecipient|\bfrom)[:：]\s*)"
    # "name on card is JOHN-PAUL NKOSANA", "name as in passport SHARMA PRIYA", "the name on the ticket: …"
    r"|(?i:\bname (?:on|in|for) (?:the |my |your |his |her )?(?:card|ticket|booking|passport|reservation|account|order|"
    r"parcel|package|id|visa|invoice)(?: should be| must be| is| reads)?\s*[:：]?\s*"
    r"|\bname as (?:in|on) (?:the |my |his |her )?(?:passport|id|card)\s*[:：]?\s*)"
    r"|(?i:\b(?:a nombre de|nombre(?: es)?|me llamo|soy|je m'appelle|je suis|nom|nome|mi chiamo|sono|ich bin|ich heiße|"
    r"nachname|vorname|first name|last name|surname|family name|given name|apellidos?|cognome|sobrenome|"
    r"passenger|guest|recipient|receiver|người nhận|tên|tên tôi là|mình là|em là|anh là|chị là|"
    r"имя|зовут|получатель|одержувач|звати|zovut|zvaty|zvut|παραλήπτης|όνομα|με λένε|adım|ismim|alıcı|nama saya|nama|penerima|"
    r"ako si|pangalan|jina(?: langu(?: ni)?)?|mera naam|meri naam|naam|esmi|ismi|ana ismi|naam is|"
    r"imię i nazwisko|imię|nazwisko|nombre y apellidos?|nom et prénom|prénom|empfänger|naam en adres)\b\s*[:：]?\s*)"
    r"|(?:收件人|收货人|收貨人|姓名|名字|亲爱的|親愛的|我叫|名義は|名前は|氏名|宛名|宛先|"
    r"入住人|联系人|聯絡人|乘客|乘机人|旅客|订票人|预订人|預訂人|宿泊者|予約者|お名前|성함|수령인|예약자|"
    r"받는 사람은|받는 사람|이름은|이름|받는분|नाम|मेरा नाम|ชื่อ|คุณ|اسمي|الاسم|المستلم|نام|שמי|שם|আমার নাম|নাম|"
    r"என் பெயர்|பெயர்|నా పేరు|పేరు|میرا نام|माझे नाव|ስሜ|ስም|სახელი|ჩემი სახელია|անունս|անուն|ชื่อผู้รับ|ผู้รับ)"
    r"\s*[:：]?\s*"
)
# A message signed with a Han or Hangul name after its last sentence ("…確認メールが来ません。鈴木一郎", "…3층. 이서연"),
# unless the words are a closing ("谢谢", "감사합니다") or end as a Korean sentence does.
_CJK_SIGNOFF = re.compile(r"(?:[。．.!！?？~～]|[。．.!！?？,，]\s|\s[-–—]\s?)\s*(?P<name>[\u4e00-\u9fff]{2,4}|[\uac00-\ud7af]{2,4})"
                          r"\s*[。.!！]?\s*$")
_CJK_CLOSINGS = frozenset("谢谢 謝謝 多谢 多謝 感谢 感謝 谢了 拜托 拜託 麻烦了 麻煩了 辛苦了 在线等 急急急 加油 谢谢您 感恩 "
                          "宜しく 以上 よろしく 감사 고마워 수고 부탁 안녕 감사감사 사랑해 화이팅 파이팅".split())
_HANGUL_ENDINGS = ("요", "다", "니", "까", "죠", "네", "세", "해", "함", "음", "임", "용", "여", "라", "자", "지", "은", "는",
                   "을", "를", "에", "도", "로", "와", "과", "의", "만", "고", "서")
_HANGUL_WORDS = frozenset("이번주 다음주 지난주 이번달 다음달 지난달 이번엔 정말로 진짜로 주문건 배송비 문의건 이거랑 고객님".split())
_HAN_SURNAMES = frozenset("李王张張刘劉陈陳杨楊黄黃赵趙吴吳周徐孙孫马馬朱胡郭何高林罗羅郑鄭梁谢謝宋唐许許韩韓冯馮邓鄧曹彭曾肖萧蕭"
                          "田董袁潘于蒋蔣蔡余杜叶葉程苏蘇魏吕呂丁任沈姚卢盧姜崔钟鍾谭譚陆陸汪范金石廖贾賈夏韦韋付方白邹鄒孟熊"
                          "秦邱江尹薛闫閆段雷侯龙龍史陶黎贺賀顾顧毛郝龚龔邵万萬钱錢严嚴覃武戴莫孔向汤湯欧歐")
_JA_SURNAMES = frozenset("佐藤 鈴木 高橋 田中 伊藤 渡辺 渡邊 山本 中村 小林 加藤 吉田 山田 佐々 山口 松本 井上 木村 斎藤 斉藤 清水 "
                         "山崎 森田 池田 橋本 阿部 石川 山下 中島 石井 小川 前田 岡田 長谷 藤田 後藤 近藤 村上 遠藤 青木 坂本 "
                         "福田 太田 西村 藤井 岡本 松田 中川 中野 原田 小野 竹内 金子 和田 中山 石田 上田 森本 原口 酒井 工藤".split())
_HANGUL_SURNAMES = frozenset("김이박최정강조윤장임한오서신권황안송류유전홍고문양손배백허남심노하곽성차주우구민진나지엄채원천방공현"
                             "함변염여추도소석선설마길연위표명기반왕금옥육인맹제모탁국어은편용")


_COMPOUND_BEFORE = re.compile(r"\b(?:wool|cotton|leather|silk|butter|chicken|paneer|veg|beef|pork|fish|tea|coffee|"
                              r"the|a|an|my|your|our|their|this|that|some|any|of)\s+$")
"""A word a lower-case candidate name would form a compound or noun phrase with ("wool poncho", "butter masala",
"the bots")."""


def _inflected(key: str, common: frozenset[str]) -> bool:
    """An English inflection of a common word: "logins", "maxed", "hosting"."""
    return any(key.endswith(suffix) and key[: -len(suffix)] + add in common
               for suffix, add in (("s", ""), ("es", ""), ("ed", ""), ("ed", "e"), ("ing", ""), ("ing", "e"),
                                   ("er", ""), ("ers", "")))


def _casual(text: str) -> bool:
    """A message typed in lower case (chat): at least five Latin words, nine in ten of them lower case."""
    words = re.findall(r"[^\W\d_]+", text)
    latin = [w for w in words if w.isascii() or all(ord(c) < 0x250 for c in w)]
    return len(latin) >= 5 and sum(w.islower() for w in latin) >= 0.9 * len(latin)


def _signoff_name(name: str) -> bool:
    """Han or Hangul words that close a message and read as a person's name: a common surname first (Chinese,
    Japanese or Korean), and no closing ("谢谢", "감사합니다") or Korean sentence ending."""
    if name in _CJK_CLOSINGS:
        return False
    if "\uac00" <= name[0] <= "\ud7af":  # Korean names are mostly three syllables
        return len(name) == 3 and name[0] in _HANGUL_SURNAMES and not name.endswith(_HANGUL_ENDINGS) \
            and name not in _HANGUL_WORDS
    # two Han characters are as often a word ("北京", "高铁") as a name: only three or four
    return len(name) >= 3 and (name[0] in _HAN_SURNAMES or name[:2] in _JA_SURNAMES)


# A name in a script without spaces between words: 2-4 Han characters, a kana or Hangul word.
_CJK_NAME = re.compile(r"[\u4e00-\u9fff]{2,3}(?=[^\u4e00-\u9fff]|$)|[\u30a0-\u30ff]+(?:[ 　・][\u30a0-\u30ff]+)?"
                       r"|[\u3040-\u309f]{2,4}(?=ちゃん|さん|くん|様|さま)|[\uac00-\ud7af]{2,4}(?=[이가은는님씨]|\s|$)"
                       r"|[\u0e00-\u0e7f]+(?: [\u0e00-\u0e7f]+)?(?= |\d|$)")
_CUED_WORDS = re.compile(rf"{_LET}++(?:['’\-.]{_LET}++)*(?: {_LET}++(?:['’\-.]{_LET}++)*){{0,3}}")
_NO_SPACES = re.compile(r"[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u9fff\uf900-\ufaff]")
_INITIALS = re.compile(r"(?<![\w.])(?:[A-Z]\.\s?){1,3}(?:(?:de|van|von|da|di|le|la|del|der|den|ten|ter|dos|du)\s+){0,2}"
                       r"(?P<s>[A-Z][^\W\d_]+(?:['’\-][^\W\d_]+)*)")
_PLACE_HEADS = frozenset("mt mount lake cape saint san santa são port fort isla wadi jebel gunung monte lago "
                         "playa praia ponte piazza plaza rio río cabo capo cap ilha isola île ile sierra serra pico "
                         "punta ponta bahía baía golfo val valle costa cerro volcán volcan cala castillo castelo "
                         "castello schloss château chateau palacio palácio palazzo torre puerta porta praça parque "
                         "parc jardin jardim giardino museo museu musée igreja iglesia chiesa église basilica "
                         "catedral cattedrale cathédrale duomo mercado mercato marché ciudad cidade città vila villa "
                         "bad burg dorf kloster hotel hostel fontana mosteiro monasterio monastère mosteiro templo "
                         "masai sharm chichen jemaa pura wat aeroporto aeropuerto aéroport aeroport airport "
                         "flughafen havalimanı estação estacion estación gare bahnhof stazione station stadium "
                         "estadio stade universidad université university universidade hospital avenida rua calle "
                         "ulica via jalan jl đường duong".split())
def _after_place_word(text: str, start: int) -> bool:
    """A word before ``start`` that makes what follows a place's name ("đường Nguyễn Huệ", "musée Picasso")."""
    before = _PREV_WORD.search(text, max(0, start - 30), start)
    return before is not None and before.group(1).casefold() in _PLACE_BEFORE


# Words before a name that make it a place's: "musée Picasso", "đường Nguyễn Huệ", "aeroporto Humberto Delgado".
_PLACE_BEFORE = frozenset("aeroporto aeropuerto aéroport aeroport airport flughafen gare bahnhof stazione estação "
                          "estación estacion station musée museo museu museum avenida rua calle ulica via jalan jl "
                          "đường duong phố pho boulevard bd avenue rue strada viale piazza plaza praça parque parc "
                          "jardin jardim universidad université universidade".split())
_NICKNAMED = re.compile(r"\b([A-ZÀ-Þ][^\W\d_]+)\s+[\"“'‘][A-ZÀ-Þ][^\W\d_]+[\"”'’]\s+[A-ZÀ-Þ][^\W\d_]+"
                        r"(?:[ -][A-ZÀ-Þ][^\W\d_]+)?")


def _fold_viet(word: str) -> str:
    """A Vietnamese word without its tones and marks ("tuấn" -> "tuan", "đức" -> "duc")."""
    return "".join(c for c in unicodedata.normalize("NFKD", word.replace("đ", "d").replace("Đ", "D"))
                   if not unicodedata.combining(c))


# Surnames that open most Vietnamese names ("Trần Văn Minh"): a capitalised run starting with one is a name.
_VIET_SURNAMES = frozenset("nguyễn trần lê phạm hoàng huỳnh phan vũ võ đặng bùi đỗ hồ ngô dương lý đinh trương "
                           "lâm mai cao tạ quách lương".split())
# The same surnames without tones, and given-name syllables they are followed by (not "chi": "Ho Chi Minh").
_VIET_PLAIN = frozenset("nguyen tran le pham hoang huynh phan vu vo dang bui do ho ngo duong ly dinh truong lam cao "
                        "luong".split())
_VIET_GIVEN = frozenset("van thi minh duc anh hoang thanh thu ngoc quang huy tuan hung linh lan mai hoa huong phuong "
                        "trang hai long nam son dung khoa bao vy tam trung kim hieu hanh thao nhung quoc khanh dat "
                        "duy hoai thuy yen nga hang tien thang vinh phuc loc tai nhan my ha giang diep xuan cuong".split())
# Joins between names in a list: "Kemi and Tobi", "Hodan & Farhiya", "Minh, Khoa y Lan".
_COORD = re.compile(r"\s*(?:,\s*(?:and\s+|&\s+)?|\s(?:and|&|\+|y|e|und|et|và|и|ve)\s+)|['\"’”]\s+not\s+|\s*\((?=[^()]{2,40}\))")
_CONJUNCTIONS = frozenset({"and", "y", "e", "und", "et", "và", "и", "ve"})
_SHIP_CUE = re.compile(r"\b(?:send|ship|deliver|post|mail)(?: it| them| this| that)? to\s*$")
_GREETING = re.compile(
    r"(?:\bhi|\bhello|\bhey|\bdear|\bthanks|\bthank you|\bcheers|\bbest|\blove|\bxoxo|\bbye)[,!]?\s*$"
)
# Words before a quotation that is text to print or write, where a quoted name is a person's.
_TEXT_TO_PRINT = re.compile(r"(?i)\b(?:named?|engrav\w*|personali[sz]\w*|monogram\w*|sign\w*|write|written|say|says|"
                            r"saying|read|reads|card|note|message|letters?|print\w*|embroider\w*)\b")
# Words before a place, not a person: "fly Sydney", "flights to Florence", "from Paris".
_TRAVEL_BEFORE = re.compile(r"(?i)\b(?:fly|flying|flew|flight|flights|to|from|in|at|via|into|near|visit|visiting|around|"
                            r"leave|leaving|arrive|arriving|land|landing|reach|stay|staying|trip|tour|hotel|hotels)\s+$")
_BOOKED_FOR = re.compile(r"(?i)\b(?:booking|booked|reservation|reserved|reserve|table|room|ticket|tickets|seat|seats)"
                         r"\s+(?:is\s+|was\s+|are\s+)?(?:for|under|in the name of)\s+")
_PLACE_TAILS = frozenset("tor platz kirche brücke turm markt kulesi camii sarayı köprüsü meydanı mosque masjid "
                         "mahal palace cathedral museum gallery square station airport stadium university hospital "
                         "street road avenue boulevard allee straße strasse gasse damm ufer gatan vägen vej memorial "
                         "monument mausoleum".split())
"""Words after a name that make it a place's ("Sheikh Zayed Grand Mosque", "Picasso Museum"); not the ones that are
surnames too ("Park", "Church", "Temple", "Bridge")."""
# One hyphenated word that is a street or a square: "Karl-Marx-Allee", "Friedrich-Ebert-Straße", "Olof-Palme-Platz".
_STREET_WORD = re.compile(r"(?i)-(?:allee|straße|strasse|str\.?|platz|gasse|weg|ring|damm|ufer|brücke|gatan|vägen|vej)$")
_PREV_WORD = re.compile(r"([^\W\d_]+)\s+$")
# Product and model nouns of other languages before a model's name ("la chaqueta Lucía", "die Jacke Emil").
_MODEL_NOUNS = frozenset("""
model modelo modèle modell modello style colour color shade scent edition line collection colección collection
kollektion collezione coleção
vestido chaqueta bolso falda camisa abrigo zapatos zapatillas sandalias botas perfume colonia sofá lámpara silla
mesa cama bolsa blusa jersey
robe sac veste jupe manteau chemise pull blouse chaussures sandales bottes baskets parfum canapé lampe chaise
fauteuil lit table
jacke kleid tasche rock mantel hose schuhe stiefel bluse pullover sessel lampe stuhl tisch bett duft
vestito borsa gonna giacca cappotto scarpe camicia maglione divano poltrona sedia letto profumo
mala saia casaco sapatos camisola vestido poltrona cadeira
jurk tas jas rok schoenen trui bank stoel
sukienka torebka kurtka spódnica buty płaszcz sweter sofa krzesło
платье сумка куртка юбка пальто туфли кроссовки свитер диван духи
elbise çanta ceket etek ayakkabı kazak koltuk parfüm
""".split())
# A name the message speaks to: at its start or after an @handle, before a request ("Tom pls show…").
_VOCATIVE_BEFORE = re.compile(r"(?:^|@\w+\s+|^(?:omg|ok|okay|yes|yay|wow|hey|hi|hello|ayy|oh)\s*,?\s*)$")
_VOCATIVE_AFTER = re.compile(r"(?i:\s*,?\s*(?:pls|plz|please|can you|could you|can u|could u|show|that colou?r|"
                             r"you look|ur|your|you're|youre|is that)\b)")
_SURNAME_CUE = re.compile(r"(?i)nachname|surname|last name|family name|apellido|cognome|sobrenome|achternaam")
_LISTED_AFTER = re.compile(r"\s+(?:and|&|or)\s+[A-Z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?")
# A self-introduction or signature: what follows is a name even when it is also a place ("I'm Austin").
_SELF_CUE = re.compile(r"(?:\bmy name is|\bname is|\bname's|\bname:|\bi'm|\bi am|\bim|\bcall me|\bregards,?|"
                       r"\bsincerely,?|\bsigned,?|\bunder the name(?: of)?)\s*$")
_PLACE_WORDS = r"(?P<w>[A-ZÀ-Þ][^\W\d_]+(?:[ -][A-ZÀ-Þ][^\W\d_]+)?)"
_PLACE_JOIN_AFTER = re.compile(rf"\s*(?:,|\s(?:and|or|then|to|via|&)|[-–—→>/]+)\s*{_PLACE_WORDS}")
_PLACE_JOIN_BEFORE = re.compile(rf"{_PLACE_WORDS}\s*(?:,|\s(?:and|or|then|to|via|&)|[-–—→>/]+)\s*$")
_BOUNDARY = re.compile(r"\s*(?:[.,;:!?)\]}\"'’”/]|$|\n)")


@lru_cache(maxsize=2)
def _load(name: str) -> frozenset[str]:
    text = resources.files("data_curation").joinpath("data", name).read_text(encoding="utf-8")
    words = (w for line in text.splitlines() if not line.startswith("#") for w in line.split())
    return frozenset(w.casefold() for w in words)


def first_names() -> frozenset[str]:
    return _load("first_names.txt")


def surnames() -> frozenset[str]:
    return _load("surnames.txt")


_NON_LATIN = re.compile("[^\u0000-\u024f\u0300-\u036f\u1e00-\u1eff]")


class _Tok:
    """A word of the text: ``text[start:end]``, its lookup ``key`` (case-folded, without a possessive "'s", so
    "Hannah's" looks up "hannah"), whether it is ``titled`` ("Maria", not "MARIA") and ``latin`` (Basic Latin to
    Latin Extended-B, combining accents, Latin Extended Additional for Vietnamese)."""

    __slots__ = ("caseless", "end", "key", "latin", "start", "text", "titled")

    def __init__(self, start: int, end: int, text: str) -> None:
        self.start, self.end, self.text = start, end, text
        k = text.casefold().replace("’", "'")
        self.key = k[:-2] if k.endswith("'s") else k
        self.titled = text[0].isupper() and not (len(text) > 1 and text.isupper())
        self.latin = _NON_LATIN.search(text) is None
        # a script without capitals (Han, Arabic, Devanagari…): its words carry no case to tell a name by;
        # Cyrillic, Greek or Armenian words do ("номер брони" is no name, "Анастасия" may be)
        self.caseless = not self.latin and not (text[0].isupper() or text[0].islower())

    def __repr__(self) -> str:
        return f"_Tok({self.start}, {self.end}, {self.text!r})"


class NameFinder:
    """``find(text) -> [(start, end), …]`` spans of person names.

    With a :class:`~data_curation.lexicon.Lexicon`, a capitalised run is also a name when it holds a
    *rare name* (a person name of some country that is not a common English word: "Sipho", "Aigerim",
    "Mokoena") or a word in a non-Latin script ("Дмитрий", "王伟"), unless every word of it is
    ``protected`` (the catalog's own words: brands, titles, POI names) or it is a place name. With a
    ``ner`` model, its PERSON spans are added under the same protection.
    """

    def __init__(self, first: frozenset[str] | None = None, last: frozenset[str] | None = None,
                 lexicon: Lexicon | None = None, protected: frozenset[str] = frozenset(),
                 ner: PersonModel | None = None) -> None:
        self.first = first if first is not None else first_names()
        self.last = last if last is not None else surnames()
        self.known = self.first | self.last
        self.lexicon = lexicon
        self.protected = protected
        self.ner = ner

    def find(self, text: str, taken: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
        """Name spans; ``taken`` are spans already scrubbed as another type (an address, an e-mail): words
        inside them, or inside names the rules found, do not send the text to the NER model."""
        return [(s, e) for s, e, _ in self.find_graded(text, taken)]

    def find_graded(self, text: str, taken: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int, bool]]:
        """:meth:`find`'s spans, each with whether its only evidence is the words themselves (``weak``): a word that
        is somebody's name in some country, a word of another script, a PERSON span of the NER model, with no
        cue around it ("my daughter", "name:", "thanks", a sign-off, a known first + last name). A learned tagger
        that reads the context may overrule a weak span (:class:`~data_curation.pii.Scrubber`); a cued one stands."""
        toks = [_Tok(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]
        weak: list[tuple[int, int]] = []
        spans = self._rules(text, toks, weak)
        covered = [*taken, *spans]  # the model is asked only about words no rule has explained yet
        if self.ner is not None and any(
                self._ner_worthy(t, k) and not any(a <= t.start < b for a, b in covered) for k, t in enumerate(toks)):
            ner = self._ner(text)
            weak.extend(ner)
            spans.extend(ner)
        strong = Counter(spans) - Counter(weak)  # a span found two ways is as strong as its best reason
        out = []
        for s, e in dict.fromkeys(spans):
            titled = self._with_title(text, s, e)
            cued = titled[0] != s or _TITLE_FIRST.match(text, s) is not None  # a title is a cue: "Pak Joko", "Frau Huber"
            out.append((*titled, (s, e) not in strong and not cued))
        return out

    @staticmethod
    def _with_title(text: str, start: int, end: int) -> tuple[int, int]:
        """A name span grown over the title right before it ("Mrs. Kowalczyk", "Herrn Huber", "pani Bożeny"): the
        title goes with the name, as labellers mark it, and says no more than the placeholder about the person."""
        title = _TITLE_BEFORE.search(text, max(0, start - 12), start)
        return (title.start(), end) if title is not None else (start, end)

    def propagate(self, text: str, names: set[str]) -> list[tuple[int, int]]:
        """Other occurrences of names found elsewhere in the conversation (``names``: the found spans' text),
        word for word and in the same case (a "Rose" found does not make "rose gold" a name), grown over the
        name-like words next to them ("Sky" found, "Sky Montgomery-Wells" here)."""
        lex = self.lexicon
        if lex is None:
            return []
        words = {w.group() for n in names for w in _TOKEN.finditer(n)}
        words = {w for w in words if len(w) > 1 and w.casefold() not in _NOT_NAMES and w.casefold() not in self.protected}
        toks = [_Tok(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text)]
        out = []
        for k, tok in enumerate(toks):
            if tok.text not in words:
                continue
            a = b = k
            while b + 1 < len(toks) and b - k < 3 and text[toks[b].end : toks[b + 1].start] == " " \
                    and self._joins_name(toks[b + 1]):
                b += 1
            while a > 0 and k - a < 2 and text[toks[a - 1].end : toks[a].start] == " " and self._joins_name(toks[a - 1]):
                a -= 1
            run = toks[a : b + 1]
            if (b + 1 < len(toks) and toks[b + 1].titled and text[toks[b].end : toks[b + 1].start] == " ") or (
                    a > 0 and toks[a - 1].titled and toks[a - 1].key not in _NOT_NAMES
                    and text[toks[a - 1].end : toks[a].start] == " "):
                continue  # part of another proper noun: "Paris Hilton", "Ethan Allen", "Marina Bay Sands"
            if len(run) == 1 and (lex.is_place(tok.key) or lex.is_brand_or_town(tok.key)) and (
                    self._listed_with_place(text, run) or _TRAVEL_BEFORE.search(text, max(0, tok.start - 20), tok.start)):
                continue  # "Sydney Chen" found, but "we fly Sydney–Hobart", "flights to Sydney"
            if not self._product_context(text, run):
                out.append((run[0].start, run[-1].end - (2 if run[-1].text[-2:] in ("'s", "’s") else 0)))
        return out

    def _joins_name(self, tok: _Tok) -> bool:
        """A capitalised word that may continue a name: somebody's name (every part, if hyphenated) or no
        common word, and no brand, place, colour or catalog word."""
        lex = self.lexicon
        assert lex is not None
        if not tok.titled or tok.key in _NOT_NAMES or tok.key in self.protected or tok.key in PRODUCT_WORDS:
            return False
        parts = [p for p in tok.key.split("-") if p]
        if len(parts) > 1:  # a double-barrelled name: "Montgomery-Wells" (one part may be a town too)
            return all(lex.is_name(p) and p not in lex.brands for p in parts)
        return all((lex.is_name(p) or p not in lex.common) and p not in lex.brands and not lex.is_place(p)
                   and p not in lex.frequent for p in parts)

    def _ner_worthy(self, tok: _Tok, k: int) -> bool:
        """Only texts with a word the model's PERSON spans could keep are sent to it (a PERSON span
        needs a word that is a name in the lexicon): most shopping texts have none, and skip the model."""
        if not (tok.titled or tok.caseless) or tok.key in _NOT_NAMES or tok.key in self.protected:
            return False
        return self.lexicon is None or (self.lexicon.is_name(tok.key) and not self.lexicon.is_place(tok.key))

    def tagged(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """A span the PII tagger (:mod:`data_curation.tagger`) calls a name, kept (trimmed to its name words) unless
        what the precision rules know says otherwise: a product, brand or place context, a quotation, a brand
        phrase around it ("Jack Daniel's", "Stan Smith"), a lone word that is a place, town or brand, or a
        lower-case word that is nobody's name ("wurde", "siparişi": the tagger reads text lower-cased)."""
        words = [_Tok(m.start() + start, m.end() + start, m.group()) for m in _TOKEN.finditer(text[start:end])]
        words = [w for w in words if w.key not in _NOT_NAMES and not any(c.isdigit() for c in w.text)]
        if not words or any(w.key in self.protected for w in words) or self._product_context(text, words) \
                or self._quoted(text, words):
            return None
        lex = self.lexicon
        if lex is not None:
            if self._brand_around(text, words):
                return None
            if len(words) == 1 and (self._listed_with_place(text, words) or lex.is_place(words[0].key)
                                    or lex.is_brand_or_town(words[0].key)):
                return None
            cased = [w for w in words if not w.caseless]  # Latin, Cyrillic, Greek… (not Han, Arabic, Hebrew)
            if any(w.text.islower() and not lex.is_name(w.key) and w.key not in _PARTICLES for w in cased):
                return None
            if len(cased) == len(words) and not any(
                    lex.is_name(w.key) or ("-" in w.key and any(lex.is_name(p) for p in w.key.split("-") if p))
                    for w in cased):
                return None  # a span of a cased script needs a word that is somebody's name ("Ακρόπολη" is not)
        last = words[-1]
        return words[0].start, last.end - (2 if last.text[-2:] in ("'s", "’s") else 0)

    def _brand_around(self, text: str, run: list[_Tok]) -> bool:
        """The run is part of a brand phrase with up to three words on either side ("Jack Daniel's Honey",
        "Ben & Jerry's"): possessives are read with and without their 's."""
        lex = self.lexicon
        assert lex is not None
        toks = [_Tok(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(text, max(0, run[0].start - 60),
                                                                              min(len(text), run[-1].end + 60))]
        inside = [k for k, t in enumerate(toks) if run[0].start <= t.start < run[-1].end]
        if not inside:
            return False
        a, b = inside[0], inside[-1]
        for i in range(max(0, a - 3), a + 1):
            for j in range(b, min(len(toks), b + 4)):
                keys = [t.key for t in toks[i : j + 1]]
                bare = [k[:-2] if k.endswith(("'s", "’s")) else k for k in keys]
                glued = [t.text.casefold().replace("'", "").replace("’", "") for t in toks[i : j + 1]]  # "daniels"
                if any(" ".join(ks) in lex.brands or "".join(ks) in lex.brands for ks in (keys, bare, glued)):
                    return True
        return False

    def _ner(self, text: str) -> list[tuple[int, int]]:
        out = []
        for s, e in self.ner.persons(text):  # type: ignore[union-attr]
            words = [_Tok(m.start() + s, m.end() + s, m.group()) for m in _TOKEN.finditer(text[s:e])]
            words = [w for w in words if w.key not in _NOT_NAMES]
            while words and not (words[0].titled or words[0].caseless):
                words = words[1:]  # "cuál es el horario del Museo Soumaya": a name has no lower-case words first
            if not words or all(self._ordinary(w) for w in words) or self._product_context(text, words) \
                    or self._quoted(text, words) or self._listed_with_place(text, words) \
                    or any(w.latin and w.text.islower() and w.key not in _PARTICLES for w in words):
                continue
            if self.lexicon is not None and len(words) == 1 and self.lexicon.is_brand_or_town(words[0].key):
                continue  # "Nara", "Zara": a town or a brand unless a cue says otherwise
            lex = self.lexicon
            joined = " ".join(w.key for w in words)
            prev = _PREV_WORD.search(text, max(0, words[0].start - 30), words[0].start)
            if lex is not None and ((joined.endswith("n") and lex.is_place(joined[:-1])) or (
                    prev is not None and f"{prev.group(1).casefold()} {words[0].key}" in lex.brands)):
                continue  # "Sri Lankan"; "Audemars Piguet Royal Oak" (the span began inside the brand)
            # The small model takes capitalised nouns for people ("Lieferadresse", "Sagrada Familia"):
            # a PERSON span needs a word that is somebody's name in some country.
            lex = self.lexicon
            if lex is not None and not (any(self._lexical_name(w) for w in words) or (
                    any(lex.is_name(w.key) for w in words) and not any(w.key in lex.common for w in words))):
                continue
            out.append((words[0].start, words[-1].end - (2 if words[-1].text[-2:] in ("'s", "’s") else 0)))
        return out

    def _product_context(self, text: str, run: list[_Tok]) -> bool:
        """``the Salomon boots``, ``an Eames chair``, ``Café Central``: an article before, a product or
        place noun in or after the run."""
        lex = self.lexicon
        surname = lex is not None and len(run) >= 2 and run[0].key in lex.first and run[-1].key in lex.last \
            and run[0].titled and run[-1].titled and self._person_cued(text, run)  # "please ask Emma Park"
        if any((t.key in PRODUCT_NOUNS and not (k == 0 < len(run) - 1 and lex is not None and t.key in lex.first)
                and not (surname and k == len(run) - 1))
               or (len(t.text) > 1 and t.text.isupper()) for k, t in enumerate(run)):
            return True  # "Café Central", "Bose QC Ultra" (but "River Castellanos")
        if self.lexicon is not None and (any(t.key in self.lexicon.brands for t in run) or any(
                " ".join(t.key for t in run[a : b + 1]) in self.lexicon.brands
                for a in range(len(run)) for b in range(a + 1, min(len(run), a + 4)))):
            return True  # "Adidas Sambas", "Dyson Airwraps", "Calvin Klein"
        if run[0].key in _PLACE_HEADS and len(run) > 1:
            return True  # "Mt Fuji", "Wadi Rum", "Lake Bled", "Cabo da Roca"
        if any(_STREET_WORD.search(t.text) for t in run):
            return True  # "Karl-Marx-Allee": a street named after somebody
        if _after_place_word(text, run[0].start):
            return True  # "musée Picasso", "đường Nguyễn Huệ"
        tail = re.match(r"\s+([A-Z][^\W\d_]+)", text[run[-1].end : run[-1].end + 30])
        if tail is not None and tail.group(1).casefold() in _PLACE_TAILS:
            return True  # "Sheikh Zayed Grand Mosque", "Picasso Museum": the place's word after the name
        if len(run) > 1 and ((run[0].key in _MODEL_NOUNS and not (lex is not None and lex.is_name(run[0].key)))
                             or run[-1].key in _PLACE_TAILS):
            return True  # "die Jacke Emil", "Brandenburger Tor", "Galata Kulesi"
        prev = _PREV_WORD.search(text, max(0, run[0].start - 30), run[0].start)
        if prev is not None and (prev.group(1).casefold() in PRODUCT_NOUNS or prev.group(1).casefold() in _MODEL_NOUNS) \
                and not (prev.group(1).casefold() in _CALL_VERBS
                         and _CLAUSE_START.search(text, max(0, prev.start() - 20), prev.start())):
            return True  # "la chaqueta Lucía", "das Kleid Helene", "платье Алиса", "el hotel Princesa Sofía"
            # (but "pls ring Parisa at the door": a verb opening its clause)
        if re.match(r"(?i) by night\b", text[run[-1].end :]):
            return True  # "Petra by night"
        if lex is not None and any(t.text[-2:] in ("'s", "’s") and lex.is_place(t.key) for t in run[:-1]):
            return True  # "Seville's Giralda": a place's landmark
        owner = re.search(r"([A-ZÀ-Þ][^\W\d_]+)['’]s\s+$", text[max(0, run[0].start - 30) : run[0].start])
        if owner is not None and lex is not None and lex.is_place(owner.group(1).casefold()) \
                and owner.group(1).casefold() not in _NOT_NAMES:
            return True  # "Córdoba's Mezquita": a place's landmark
        before = text[max(0, run[0].start - 16) : run[0].start].casefold()
        if before.endswith(" a ") and _BOUNDARY.match(text, run[-1].end):
            before = before[:-2]  # "per a Jordi Puig i Ferrer" (Catalan "for"), not "a Salomon jacket"
        if re.search(r"\b(?:the|a|an|this|that|these|those|some|my new|new|our|see|visit|visiting|tour|explore|"
                     r"near|around|versus|vs\.?|in|at|mt\.?|mount|lake|cape|port|fort|isla|wadi|jebel|gunung|st\.?|"
                     r"saint|san|santa|são|sainte)\s+$",
                     before):
            return True  # "see Ponte Vecchio", "in Alfama", "Mt Fuji"
        if re.match(r" (?:[A-Za-z]*\d|[A-Z]{2,}\b)", text[run[-1].end :]) and not _PHONE_AFTER.match(text, run[-1].end):
            return True  # a model name follows: "Air Max 90", "Dyson V15" (not a phone number: "Ramesh Iyer 98480 22334")
        if re.match(r"(?i) (?:(?:back )?in stock|on sale|restocked|sold out|out of stock)\b", text[run[-1].end :]):
            return True  # "do you have Patience in stock" (a game): people are not in stock
        if run[-1].text[-2:] in ("'s", "’s"):
            return False  # "Tariq's jacket": a person's
        listed = _LISTED_AFTER.match(text, run[-1].end)  # "Elsa and Anna dolls", "Sonic & Knuckles figures"
        after = listed.end() if listed is not None else run[-1].end
        nxt = _TOKEN.match(text, after + 1) if text[after : after + 1] == " " else None
        if nxt is None or self.lexicon is None:
            return False
        key = nxt.group().casefold()
        return nxt.group().islower() and (key in PRODUCT_NOUNS or key.rstrip("s") in PRODUCT_NOUNS
                                          or key in self.protected)

    @staticmethod
    def _person_cued(text: str, run: list[_Tok]) -> bool:
        """Words around a run that take a person: a cue before it ("ask", "my friend", "deliver to") or a person's
        verb after it ("will collect")."""
        before = text[max(0, run[0].start - 40) : run[0].start].casefold()
        return bool(_PERSON_OBJECT.search(before) or _STRONG.search(before) or _KIN.search(before)
                    or _PERSON_AFTER.match(text, run[-1].end)
                    or (_MODAL_BEFORE.search(before) and _ACTION_AFTER.match(text, run[-1].end)))

    def _ordinary(self, tok: _Tok) -> bool:
        """A word that is no evidence of a name on its own: catalog vocabulary, a place, a lower-case word."""
        key = tok.key
        return key in self.protected or (self.lexicon is not None and self.lexicon.is_place(key)) or \
            (not tok.titled and not tok.caseless)

    def _rules(self, text: str, toks: list[_Tok], weak: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """The rules' name spans; each found on the words' own evidence only is also added to ``weak``."""
        spans: list[tuple[int, int]] = []
        i = 0
        while i < len(toks):
            j = self._run_end(text, toks, i)
            if j == i:
                i += 1
                continue
            judged = self._judge(text, toks[i:j])
            if judged is not None:
                span = self._whole_run(toks[i:j], judged[:2])
                spans.append(span)
                if judged[2]:
                    weak.append(span)
            i = j
        if self.lexicon is not None:
            spans.extend(self._cued(text))
            spans.extend(self._signed(text))
            signed = self._signed_by_first_name(text)
            weak.extend(signed)
            spans.extend(signed)
            spans.extend(self._booked_for(text))
            spans.extend(m.span(1) if m.group(1) else m.span(2) for m in _CJK_HONORIFIC.finditer(text))
            spans.extend(m.span("name") for m in _CJK_SIGNOFF.finditer(text) if _signoff_name(m.group("name")))
            spans.extend((a, b) for a, b in self._vietnamese(toks) if not _after_place_word(text, a))
            spans.extend(self._surname_first(toks))
            spans.extend(self._nicknamed(text))
            spans.extend(self._lower_pairs(text, toks))
            spans.extend(self._initials(text))
            foreign = self._foreign_script(text, toks)
            weak.extend(foreign)
            spans.extend(foreign)
            spans.extend(self._coordinated(text, toks, spans))
        return spans

    def _lower_pairs(self, text: str, toks: list[_Tok]) -> list[tuple[int, int]]:
        """A first name then surnames in lower case, one of them a rare name: "amara okafor", "zhang wei"; a first
        name that is a common word only after a cue or before a rare surname ("grace okafor")."""
        lex = self.lexicon
        assert lex is not None

        def plain(t: _Tok) -> bool:
            return t.latin and t.text.islower() and t.key not in _NOT_NAMES and t.key not in lex.frequent \
                and t.key not in PRODUCT_WORDS and t.key not in lex.brands and t.key not in self.protected

        out, i = [], 0
        while i < len(toks) - 1:
            j = i + 1
            if plain(toks[i]) and toks[i].key in lex.first:
                while j < len(toks) and j - i < 4 and text[toks[j - 1].end : toks[j].start] == " " and plain(toks[j]) \
                        and (toks[j].key in lex.last or toks[j].key in _PARTICLES):
                    j += 1
                while j - 1 > i and toks[j - 1].key in _PARTICLES:
                    j -= 1
                run = toks[i:j]
                before = text[max(0, run[0].start - 40) : run[0].start].casefold()
                cued = bool(_LOWER_CUE.search(before) or _KIN.search(before) or _STRONG.search(before)
                            or _PERSON_AFTER.match(text, run[-1].end)
                            or (not text[: run[0].start].strip() and re.match(r"\s*(?:,|$)", text[run[-1].end :])))
                if len(run) >= 2 and any(self._lexical_name(t) for t in run) \
                        and (cued or not any(t.key in lex.common for t in run)
                             or (self._lexical_name(run[-1]) and run[-1].key not in lex.common)) \
                        and not lex.is_place(" ".join(t.key for t in run)) and not self._product_context(text, run):
                    # "amara okafor" anywhere; "bouquet delivery" (a common word) only after a cue
                    out.append((run[0].start, run[-1].end))
                    i = j
                    continue
            i += 1
        return out

    def _foreign_script(self, text: str, toks: list[_Tok]) -> list[tuple[int, int]]:
        """One to three words of another script in a message written in Latin letters, none a common word,
        place or brand: a name written as its owner writes it ("the parcel is for ნინო ბერიძე"). Not Chinese,
        Japanese, Thai, Lao, Khmer or Burmese, whose words are not separated by spaces (a "word" there is a
        phrase; their own rules apply)."""
        lex = self.lexicon
        assert lex is not None
        latin = sum(t.latin for t in toks)
        if latin < 3 or latin < 2 * (len(toks) - latin):
            return []
        out, k = [], 0
        while k < len(toks):
            if toks[k].latin:
                k += 1
                continue
            j = k
            while j < len(toks) and not toks[j].latin and j - k < 4:
                j += 1
            run = toks[k:j]
            if len(run) <= 3 and not _NO_SPACES.search(text, run[0].start, run[-1].end) \
                    and not self._product_context(text, run) and not any(
                    t.key in lex.common or t.key in lex.brands or lex.is_place(t.key) or t.key in _NOT_NAMES
                    or t.key in self.protected for t in run):
                out.append((run[0].start, run[-1].end))
            k = j
        return out

    def _surname_first(self, toks: list[_Tok]) -> list[tuple[int, int]]:
        """A surname in capitals, then the given names, as forms and East Asian usage write them ("TANAKA Hiroshi",
        "KIM Ji-woo", "NGUYỄN Văn An", "PHẠM MINH TUẤN"): a known surname in capitals and a known given name after."""
        lex = self.lexicon
        assert lex is not None
        out = []
        for i, tok in enumerate(toks[:-1]):
            if not (len(tok.text) > 1 and tok.text.isupper() and tok.latin) or tok.key in _NOT_NAMES \
                    or tok.key in lex.brands or tok.key in self.protected:
                continue
            viet = tok.key in _VIET_SURNAMES or tok.key in _VIET_PLAIN
            if not (viet or (tok.key in lex.last and tok.key not in lex.common and tok.key not in lex.frequent)):
                continue  # "I LOVE Paris", "SALE Maria collection": a common word in capitals is no surname
            j = i + 1
            while j < len(toks) and j - i < 4 and toks[j].start - toks[j - 1].end == 1 and (
                    toks[j].titled or (viet and toks[j].text.isupper())) and toks[j].key not in _NOT_NAMES:
                j += 1
            given = toks[i + 1 : j]
            if given and all(t.key in lex.first or "-" in t.key or t.key in _VIET_GIVEN or _fold_viet(t.key) in _VIET_GIVEN
                             for t in given) and not any(t.key in lex.brands for t in given):
                out.append((tok.start, toks[j - 1].end))
        return out

    def _nicknamed(self, text: str) -> list[tuple[int, int]]:
        """A name with a nickname in quotes inside it: 'Guadalupe "Lupita" Hernández', "Elizabeth 'Libby' Ferguson"."""
        lex = self.lexicon
        assert lex is not None
        return [m.span() for m in _NICKNAMED.finditer(text)
                if m.group(1).casefold() in lex.first and m.group(1).casefold() not in _NOT_NAMES]

    def _initials(self, text: str) -> list[tuple[int, int]]:
        """An initial and a surname: "D. Verhoeven", "M. de Vries-Bakker", "J.R. Okafor"."""
        lex = self.lexicon
        assert lex is not None
        out = []
        for m in _INITIALS.finditer(text):
            last = _Tok(m.start("s"), m.end("s"), m.group("s"))
            if self._lexical_name(last) and not lex.is_brand_or_town(last.key) and not lex.is_place(last.key):
                out.append((m.start(), m.end()))
        return out

    @staticmethod
    def _vietnamese(toks: list[_Tok]) -> list[tuple[int, int]]:
        out, i = [], 0
        while i < len(toks):
            if toks[i].key in _VIET_PLAIN:  # written without tones: "Tran Minh Khoa", "nguyen van thanh"
                j = i + 1
                while j < len(toks) and j - i < 4 and toks[j].key in _VIET_GIVEN and toks[j].start - toks[j - 1].end == 1 \
                        and (toks[j].titled == toks[i].titled):
                    j += 1
                if j - i >= (2 if toks[i].titled else 3):  # in lower case a whole name ("do van …" is English)
                    out.append((toks[i].start, toks[j - 1].end))
                    i = j
                    continue
            if toks[i].key in _VIET_SURNAMES and toks[i].titled:
                j = i + 1
                while j < len(toks) and j - i < 4 and toks[j].titled and toks[j].start - toks[j - 1].end == 1:
                    j += 1
                if j - i >= 2:
                    out.append((toks[i].start, toks[j - 1].end))
                i = j
            else:
                i += 1
        return out

    def _coordinated(self, text: str, toks: list[_Tok], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Names listed next to a found name: "Kemi and Tobi", "Hodan & Farhiya", "X, Y, and Z"."""
        lex = self.lexicon
        assert lex is not None
        found = sorted(spans)
        out: list[tuple[int, int]] = []

        def namey(t: _Tok, lower: bool = False) -> bool:
            if lower and t.latin and t.text.islower():  # "me, farida, yusuf and layla": a listed lower-case name
                return t.key not in _NOT_NAMES and t.key not in self.protected and t.key not in lex.brands \
                    and t.key not in PRODUCT_WORDS and t.key not in lex.common and t.key not in lex.frequent \
                    and lex.is_name(t.key) and not lex.is_place(t.key) and len(t.key) > 2
            return (t.titled or t.caseless) and t.key not in _NOT_NAMES and t.key not in self.protected \
                and t.key not in lex.brands and t.key not in PRODUCT_WORDS \
                and (not lex.is_place(t.key) or t.key in lex.top) and (lex.is_name(t.key) or t.key not in lex.common)

        for _ in range(3):
            new = []
            for s, e in found + out:
                after = _COORD.match(text, e)
                lower = text[s:e].islower()  # a name typed in lower case: its neighbours may be too
                if after is not None:
                    run = [t for t in toks if t.start >= after.end()][:6]
                    k = 0
                    while k < len(run) and (k == 0 or run[k].start - run[k - 1].end == 1) and (namey(run[k], lower) or (
                            k > 0 and run[k].key in _PARTICLES and k + 1 < len(run) and run[k].text.islower())):
                        k += 1
                    while k > 1 and run[k - 1].key in _PARTICLES:
                        k -= 1
                    place = run and run[0].key in _PLACE_HEADS and len(run) > 1 and run[1].titled  # "Wadi Rum"
                    if k and run[0].start == after.end() and not place:
                        new.append((run[0].start, run[k - 1].end))
                before = [t for t in toks if t.end <= s]
                if len(before) >= 2 and before[-1].key in _CONJUNCTIONS:
                    before = before[:-1]  # "Kemi and Tobi": the word before "and"
                if before:
                    gap = text[before[-1].end : s]
                    left = before[-1]
                    if _COORD.fullmatch(gap) and namey(left, lower) and left.key not in lex.brands and (
                            self._lexical_name(left) or left.key in lex.top or (left.titled and lex.is_name(left.key))
                            or (lower and left.text.islower())):
                        new.append((before[-1].start, before[-1].end))
            new = [n for n in new if n not in out and not any(a <= n[0] and n[1] <= b for a, b in found + out)]
            if not new:
                break
            out.extend(new)
        return out

    def _booked_for(self, text: str) -> list[tuple[int, int]]:
        """Capitalised words after "booking / reservation / table / ticket (is) for / under" that are neither common
        words, places, brands, catalog words nor a relative (:data:`_KIN`) ("Booking for Keoni Kahananui and …"; not "booking for Friday",
        "table for Lisbon")."""
        lex = self.lexicon
        assert lex is not None
        out = []
        for m in _BOOKED_FOR.finditer(text):
            words: list[_Tok] = []
            for w in _TOKEN.finditer(text, m.end(), min(len(text), m.end() + 60)):
                tok = _Tok(w.start(), w.end(), w.group())
                if words and text[words[-1].end:tok.start] != " ":
                    break
                if not tok.titled or tok.key in _NOT_NAMES or tok.key in self.protected or tok.key in PRODUCT_WORDS \
                        or lex.is_place(tok.key) or lex.is_brand_or_town(tok.key) \
                        or (tok.key in lex.common and not lex.is_name(tok.key)) or len(words) == 4:
                    break
                words.append(tok)
            if len(words) >= 2 or (words and lex.is_name(words[0].key) and not _KIN.search(f"my {words[0].key}")):
                out.append((words[0].start, words[-1].end))
        return out

    def _signed(self, text: str) -> list[tuple[int, int]]:
        """A sign-off, or a message that is only a name: 1-3 words at the very end, after a sentence end
        or a dash ("... I'm furious. Destiny Washington", "- bukola"), each a name in the lexicon."""
        m = _SIGN_OFF.search(text)
        lex = self.lexicon
        if m is None or lex is None:
            return []
        words = [_Tok(w.start() + m.start("n"), w.end() + m.start("n"), w.group()) for w in _TOKEN.finditer(m.group("n"))]
        if len(words) == 4 and not any(w.key in _PARTICLES for w in words):
            return []  # four words only with a particle: "Jan-Willem van den Heuvel"
        inner = [w for w in words[1:-1] if w.key not in _PARTICLES]  # "van den" inside a name
        words = [words[0], *inner, words[-1]] if len(words) > 2 else words
        if not words or any(w.key in _NOT_NAMES or w.key in self.protected for w in words) \
                or lex.is_place(" ".join(w.key for w in words)) or self._product_context(text, words):
            return []  # a message that is only "Jimmy Choo Bing" or "Hugo Boss Bottled" names a product
        # capitalised words: any name (or an unknown word); lower-case ones only rare names ("- bukola")
        if not all(((w.titled or w.caseless) and (lex.is_name(w.key) or w.key not in lex.common))
                   or self._lexical_name(w) for w in words):
            return []
        greeted = _GREETING.search(text[: m.start("n")]) is not None or m.group().lstrip()[:1] in "-—–~"
        thanked = m.group("thanks") is not None and m.group("thanks").casefold() not in ("love", "best")
        if len(words) == 1 and not (self._lexical_name(words[0]) or words[0].key in self.first or (
                greeted and words[0].titled and words[0].key in lex.first and words[0].key not in PRODUCT_WORDS
                and not lex.is_brand_or_town(words[0].key)) or (  # "ngā mihi, Wiremu": a word no list knows
                thanked and words[0].titled and not lex.is_name(words[0].key) and words[0].key not in lex.common
                and not lex.is_brand_or_town(words[0].key) and words[0].key not in PRODUCT_WORDS)):
            return []  # "love, Precious 💕", "— Grant"
        return [(words[0].start, words[-1].end)]

    def _signed_by_first_name(self, text: str) -> list[tuple[int, int]]:
        """One capitalised word closing a message after a sentence end, a dash or a comma, that is a first name in
        some country even if also a common word ("… не приймає. Юлія", "…, Василь"): :meth:`_signed` leaves such a
        word alone (it may be a greeting, a brand, a word), so this is weak evidence, for the tagger to confirm."""
        lex = self.lexicon
        m = _LAST_WORD.search(text)
        if m is None or lex is None:
            return []
        tok = _Tok(m.start("n"), m.end("n"), m.group("n"))
        key = tok.key
        if not tok.titled or key not in lex.first or key in _NOT_NAMES or key in self.protected \
                or key in PRODUCT_WORDS or key in lex.brands or lex.is_place(key) or lex.is_brand_or_town(key) \
                or key in lex.frequent or self._product_context(text, [tok]):
            return []
        return [(tok.start, tok.end)]

    def _whole_run(self, run: list[_Tok], span: tuple[int, int]) -> tuple[int, int]:
        """With a lexicon, a name found in part of a run takes the run's other name-like words too
        ("María José Fernández Ortega", not just the pair the lists know)."""
        lex = self.lexicon
        if lex is None:
            return span

        def weak(t: _Tok) -> bool:
            if self._lexical_name(t) or (t.titled and t.key in lex.top and t.key not in _NOT_NAMES
                                         and t.key not in self.protected):
                return False  # "Maria da Conceição Tavares": a common first name still belongs to the name
            return t.key in _NOT_NAMES or t.key in lex.common or t.key in self.protected or lex.is_place(t.key) \
                or t.key in _PARTICLES

        while run and weak(run[0]):
            run = run[1:]
        while run and weak(run[-1]):
            run = run[:-1]
        if not run:
            return span
        end = run[-1].end - (2 if run[-1].text[-2:] in ("'s", "’s") else 0)
        return min(span[0], run[0].start), max(span[1], end)

    def _cued(self, text: str) -> list[tuple[int, int]]:
        """The words right after a name cue in many languages ("收件人：王芳", "名義は ヤマモト サクラ", "नाम: …")."""
        out: list[tuple[int, int]] = []
        lex = self.lexicon
        if lex is None:
            return out
        for m in _ANY_SCRIPT_CUE.finditer(text):
            rest = text[m.end():]
            cjk = _CJK_NAME.match(rest)
            if cjk is not None:
                out.append((m.end(), m.end() + cjk.end()))
                continue
            words = _CUED_WORDS.match(rest)
            if words is None:
                continue
            toks = [w for w in _TOKEN.finditer(words.group())]
            keep: list[re.Match[str]] = []
            for w in toks:
                key = w.group().casefold()
                tok = _Tok(w.start(), w.end(), w.group())
                namey = self._lexical_name(tok) or key in self.known or (tok.titled and (
                    key not in lex.common or lex.is_name(key))) or (
                    len(tok.text) > 1 and tok.text.isupper() and key not in lex.common)  # "SHARMA PRIYA", as on a passport
                if all(k.group() in _PARTICLES for k in keep) and key in _PARTICLES and tok.text.islower() \
                        and len(toks) > 1 and _SURNAME_CUE.search(m.group()):
                    keep.append(w)  # "Nachname: von Bredow-Hagen"
                    continue
                if key in _NOT_NAMES or key in self.protected or (tok.latin and not namey):
                    break
                keep.append(w)
            while keep and keep[-1].group().casefold() in _PARTICLES:
                keep.pop()  # "nombre: de …" is no name
            if keep:
                out.append((m.end() + keep[0].start(), m.end() + keep[-1].end()))
        return out

    def _name_shaped(self, text: str, toks: list[_Tok], k: int, first_in_run: bool) -> bool:
        tok = toks[k]
        if tok.titled or (self.lexicon is not None and tok.caseless):
            return True
        # A lower-case name right after a strong cue ("my name is lena chen", "its for kwame"), a relative ("my mom
        # rosa-linda") or before a person's verb ("adebola and i", "can jun-ho sign").
        lex = self.lexicon
        if tok.key in _NOT_NAMES:
            return False
        rare = self._lexical_name(tok)
        double = lex is not None and "-" in tok.key and all(lex.is_name(p) for p in tok.key.split("-") if p)
        if len(tok.key) < 3 or not (tok.key in self.known or rare or double):
            return False  # "its wb 8830-…" is no name
        before = text[max(0, tok.start - 40) : tok.start].casefold()
        if not tok.text.islower():  # "customer name BAPTISTE ROUSSEAU", not "a kids XS"
            return len(tok.text) > 2 and bool(_STRONG.search(before)) if first_in_run else toks[k - 1].text.isupper()
        if first_in_run:
            return bool(_STRONG.search(before) or ((rare or double) and (_LOWER_CUE.search(before) or _KIN.search(before)))
                        or (rare and len(tok.key) >= 4 and "-" not in tok.key and _casual(text) and lex is not None
                            and tok.key in lex.first  # chat names people by their first names ("skincare" is a surname)
                            and not lex.is_place(tok.key) and tok.key not in lex.brands and tok.key not in lex.frequent
                            and tok.key not in PRODUCT_WORDS and tok.key not in self.protected
                            and not _inflected(tok.key, lex.common)  # "logins", "maxed"
                            and not _COMPOUND_BEFORE.search(before))
                        or ((rare or double) and lex is not None and (_PERSON_AFTER.match(text, tok.end) or (
                            _MODAL_BEFORE.search(before) and _ACTION_AFTER.match(text, tok.end)))))
        return not toks[k - 1].titled

    def _lexical_name(self, tok: _Tok) -> bool:
        """A rare name by the lexicon (for a hyphenated word, any of its parts: "Ji-woo", "Adebayo-Williams")."""
        lex = self.lexicon
        if lex is None or tok.key in self.protected:
            return False
        return lex.rare_name(tok.key) or ("-" in tok.key and any(lex.rare_name(p) for p in tok.key.split("-") if p))

    def _run_end(self, text: str, toks: list[_Tok], i: int) -> int:
        """End (exclusive) of the run starting at toks[i]; i when toks[i] cannot start one."""
        if not self._name_shaped(text, toks, i, True):
            return i
        j = i + 1
        while j < len(toks) and j - i < 12:
            gap = text[toks[j - 1].end : toks[j].start]
            if gap != " " and not (gap == ". " and len(toks[j - 1].text) <= 2 and toks[j - 1].titled
                                   and toks[j - 1].key not in _NOT_NAMES):  # "Ma. Cristina", "Md. Rahim"
                break
            p = j
            while p < len(toks) and p - j < 3 and toks[p].key in _PARTICLES and toks[p].text.islower() \
                    and p + 1 < len(toks) and text[toks[p].end : toks[p + 1].start] == " ":
                p += 1  # "van der", "de la", "dos"
            if p > j and toks[p].titled:
                j = p + 1
                continue
            if not self._name_shaped(text, toks, j, False):
                break
            j += 1
        return j

    def _judge(self, text: str, run: list[_Tok]) -> tuple[int, int, bool] | None:
        """A run's name span, if it is one, and whether only its words say so (:meth:`_lexical`: weak)."""
        while run and run[0].key in _NOT_NAMES and not self._cued_popular(text, run[0]):
            run = run[1:]
        while run and ((run[-1].key in _NOT_NAMES and not (len(run) == 1 and self._cued_popular(text, run[0])))
                       or run[-1].key in _PARTICLES):
            run = run[:-1]
        if not run:
            return None
        run = run[:4]
        before = text[max(0, run[0].start - 40) : run[0].start].casefold().replace("’", "'")
        if before.endswith("(") and text[run[-1].end : run[-1].end + 1] == ")":
            before = before[:-1]  # "my kid (Kai'lani)", "and me (Lee Dong-hyun)": the cue before the brackets
        after_boundary = bool(_BOUNDARY.match(text, run[-1].end))
        keys = [t.key for t in run if t.key not in _PARTICLES]
        end = run[-1].end - (2 if run[-1].text[-2:] in ("'s", "’s") else 0)  # "Hannah's" -> "Hannah"
        lex = self.lexicon
        if _STRONG.search(before):
            if lex is not None and lex.is_place(" ".join(keys)) and _SHIP_CUE.search(before):
                return None  # "ship to Georgia"
            if lex is not None and not _SELF_CUE.search(before) and (
                    (self._product_context(text, run) and not all(t.text.isupper() for t in run))
                    or self._brand_after_cue(before, keys)
                    or (len(keys) == 1 and lex.is_place(keys[0]) and keys[0] not in lex.top)):
                return None  # "the Dr. Martens Jadon boots", "it's Darwin in August" (but "I'm Austin")
            if len(keys) >= 2 or keys[0] in self.known or after_boundary or (lex is not None and (
                    lex.is_name(keys[0]) or keys[0] not in lex.common) and not lex.is_brand_or_town(keys[0])):
                return run[0].start, end, False  # "ask for jesús at the desk", "a neighbour called Pim at no. 9"
            return None
        if lex is not None and self._person_context(text, run, before, keys, after_boundary):
            return run[0].start, end, False
        if lex is not None and (self._quoted(text, run) or self._listed_with_place(text, run)):
            return None  # "the 'Marlowe' desk", "Lourdes then Toulouse", "Petra and Wadi Rum"
        if _GREETING.search(before) and (keys[0] in self.first or self._lexical_name(run[0]) or (
                lex is not None and keys[0] in lex.first and not lex.is_brand_or_town(keys[0]))) \
                and (len(keys) >= 2 or after_boundary):
            return run[0].start, end, False
        pair = self._pair(run)
        if pair is not None and not self._product_context(text, run):
            return *pair, False
        lexical = self._lexical(text, run)
        return None if lexical is None else (*lexical, True)

    def _brand_after_cue(self, before: str, keys: list[str]) -> bool:
        """The cue's last word and the run make a brand: "Dr. Martens", "Mr. Muscle", "Mrs. Meyer's"."""
        lex = self.lexicon
        assert lex is not None
        last = re.search(r"(\w+)\.?\s*$", before)
        return last is not None and any(" ".join([last.group(1), *keys[:n]]) in lex.brands for n in (1, 2))

    @staticmethod
    def _quoted(text: str, run: list[_Tok]) -> bool:
        """A run that is all of a quotation: a product's or a model's name ("the 'Lucia' sofa bed", "Hausschuh
        'Fritz'"), not a person's, unless a person cue stands inside the quotes."""
        a, b = run[0].start, run[-1].end
        return a > 0 and b < len(text) and text[a - 1] in "'\"‘“«„" and text[b] in "'\"’”»“" \
            and not _TEXT_TO_PRINT.search(text, max(0, a - 40), a)  # "name on it should be 'Xiomara'"

    def _listed_with_place(self, text: str, run: list[_Tok]) -> bool:
        """A run joined to a place by "and / or / then / to / -" or an arrow: a place itself ("Lourdes then
        Toulouse", "Petra and Wadi Rum", "Sydney–Hobart")."""
        lex = self.lexicon
        assert lex is not None
        if len(run) > 1:
            return False  # "Emre Kaya, Bağdat Cad. No:214": a full name before an address
        after = _PLACE_JOIN_AFTER.match(text, run[-1].end)
        before = _PLACE_JOIN_BEFORE.search(text[max(0, run[0].start - 40) : run[0].start])
        for words in (after and after.group("w"), before and before.group("w")):
            if not words:
                continue
            keys = [w.casefold() for w in words.split()]
            if keys[0] in _PLACE_HEADS and len(keys) > 1:
                return True
            if (keys[0] not in lex.top and (lex.is_place(" ".join(keys)) or lex.is_place(keys[0]))) \
                    or (keys[0] in lex.towns and not lex.is_name(keys[0])):
                return True  # but "Maria and Sofia", "Tunde & Kemi": a name is no place partner
        return False

    def _cued_popular(self, text: str, tok: _Tok) -> bool:
        """A capitalised word that is usually something else ("Will", "May") but a popular name, right after
        a cue in mid-sentence: "go to Will at the desk", "my daughter May"."""
        lex = self.lexicon
        if lex is None or not tok.titled or tok.key not in lex.top or tok.key not in lex.first:
            return False
        before = text[max(0, tok.start - 40) : tok.start].casefold().replace("’", "'")
        return bool(re.search(r"[a-z,]\s+$", before)) and bool(_STRONG.search(before) or _KIN.search(before))

    def _person_context(self, text: str, run: list[_Tok], before: str, keys: list[str], after_boundary: bool) -> bool:
        """A run that is a person by the words around it, even when its words are common ones ("my daughter
        Rose", "Grant said", "Mercedes here", "a gift for Faith", "can Sipho pick it up")."""
        lex = self.lexicon
        assert lex is not None
        head = keys[0]
        if _KIN.search(before):
            return head not in PRODUCT_WORDS or lex.is_name(head)  # "my niece Selam", "my abuela Killa Mamani"
        if _APPOSITION.match(text, run[-1].end) and lex.is_name(head) and head not in PRODUCT_WORDS \
                and head not in lex.brands and head not in self.protected:
            return True  # "Jordan, my son, wants …", "Precious, the lady at your branch, said …": even a place's name
        unknown = all(k not in lex.common for k in keys) and not lex.is_place(" ".join(keys))  # "Tāne Rangihau here"
        if not (lex.is_name(head) or head in self.known or unknown) or head in self.protected \
                or head in PRODUCT_WORDS or head in lex.brands \
                or (len(keys) == 1 and lex.is_place(head) and head not in lex.top):
            return False
        after = _PERSON_AFTER.match(text, run[-1].end)
        if self._product_context(text, run) and not (after is not None and len(after.group().split()) >= 2):
            return False  # but "Marlene hat gesagt" (German "has said", not a hat)
        if after is not None or (
                run[-1].text[-2:] in ("'s", "’s") and _PERSON_AFTER.match(text, run[-1].end - 2)):
            return True  # "Grant said", "the hamper for Tamati's birthday"
        if _MODAL_BEFORE.search(before) and _ACTION_AFTER.match(text, run[-1].end):
            return True
        if len(keys) == 1 and lex.is_brand_or_town(head):
            return False
        if _PERSON_OBJECT.search(before) and (
                not re.match(r"\s+(?:[A-Za-z]*\d|of\b|for\b|to\b|about\b)", text[run[-1].end :])
                or _PHONE_AFTER.match(text, run[-1].end)):
            return True  # "contact Ramesh Iyer 98480 22334": a phone number after the name, not a model number
        if re.search(r"\b(?:thanks|thank you|thx|ty)\s*,?\s*$", before) and re.match(r"\s+for\b", text[run[-1].end :]):
            return True  # "thanks Lily for the tips" (a livestream host)
        if _VOCATIVE_BEFORE.search(before) and _VOCATIVE_AFTER.match(text, run[-1].end) and len(keys) == 1 \
                and lex.is_name(head) and not lex.is_place(head) and (head not in lex.common or head in lex.top):
            return True  # "@host Maria can you show the back?", "Tom pls show the size chart"
        return bool((_PERSON_BEFORE.search(before) or _PERSON_BEFORE_NARROW.search(before))
                    and (after_boundary or len(keys) >= 2))

    def _lexical(self, text: str, run: list[_Tok]) -> tuple[int, int] | None:
        """A run holding a rare name or a non-Latin word, trimmed of ordinary words at its ends."""
        lex = self.lexicon
        if lex is None:
            return None
        joined = " ".join(t.key for t in run)
        if lex.is_place(joined) or all(t.key in self.protected for t in run) \
                or (joined.endswith("n") and lex.is_place(joined[:-1])):
            return None  # "Sri Lankan", "Kenyan": a people's name is not a person's

        def evidence(t: _Tok) -> bool:
            return self._lexical_name(t) and not lex.is_brand_or_town(t.key)

        if not any(evidence(t) for t in run) or self._product_context(text, run):
            return None

        def weak(t: _Tok) -> bool:
            if evidence(t) or (t.titled and lex.is_name(t.key) and t.key not in _NOT_NAMES and t.key not in PRODUCT_WORDS
                               and t.key not in lex.frequent
                               and t.key not in self.protected and t.key not in lex.brands
                               and not lex.is_place(t.key)):
                return False  # "River Castellanos", "Bogdan Popescu": a name next to a rare one is part of it
            return t.key in lex.common or t.key in self.protected or lex.is_place(t.key) or t.key in _PARTICLES

        while run and weak(run[0]):
            run = run[1:]
        while run and weak(run[-1]):
            run = run[:-1]
        if not run or (run[0].key in _PLACE_HEADS and len(run) > 1):
            return None  # "Quebec City Chateau Frontenac": what is left is a place
        end = run[-1].end - (2 if run[-1].text[-2:] in ("'s", "’s") else 0)
        return run[0].start, end

    def _pair(self, run: list[_Tok]) -> tuple[int, int] | None:
        """A known first name followed by a known surname (and any further surnames)."""
        for a in range(len(run) - 1):
            if run[a].key in self.first and run[a].titled and run[a + 1].key in self.last and run[a + 1].titled:
                b = a + 2
                while b < len(run) and (run[b].key in self.last or run[b].key in _PARTICLES):
                    b += 1
                return run[a].start, run[b - 1].end
        return None
