"""Per-session quality filters: each returns the reason a session is dropped, or None to keep it.

Checks run in this order and the first failing one names the reason (so every dropped session is
counted once): ``no_text``, ``too_short``, ``too_long``, ``gibberish``, ``not_english``,
``no_outcome``, ``label_leakage``. They look at the *scrubbed* user text with placeholders removed.

Heuristics (no model download):

- **gibberish** — any of: a run of ``max_char_run`` equal characters ("!!!!!!!!", "aaaaaaaaa"); a vowel
  share among latin letters outside ``vowel_ratio`` (texts with 12+ letters: keyboard mash such as
  "sdfkjh qwrtz" has almost none); character entropy below ``min_entropy_bits`` (texts of 16+ chars:
  "ababababababab"); more than half of the 4+-letter words without any vowel (3+ such words).
- **language** — text of 4+ words whose stop words vote for another language (German, French,
  Spanish, Italian, Dutch, Portuguese lists of words that are not English words) more than for
  English, or whose letters are mostly outside the Latin script. Short keyword queries
  ("northpeak tent navy") carry no stop words and pass.
- **label leakage** — for a session with a task, the task's target item ids and exact titles (10+
  characters, case and spacing folded) must not appear in the user text: a model trained on it
  would learn to copy the answer from the question.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from data_curation.config import QualityConfig
from data_curation.records import Session

REASONS = ("no_text", "too_short", "too_long", "gibberish", "not_english", "no_outcome", "label_leakage")
_PLACEHOLDER = re.compile(r"<[A-Z_]+>")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_WORD = re.compile(r"[^\W\d_]+")
_VOWELS = frozenset("aeiou")
_EN = _words("""
the a an and or is are was were for to of in on with my me i you it this that do have any some what where need
looking want please can get buy under below than from at be not no yes how much will would like just new one
good best thanks hi hello help find something there who which but so also about more less up out your our we
they he she his her them if when why all very too only again by as am has had does did
""")
_OTHER: dict[str, frozenset[str]] = {
    "de": _words("""
der das und ist nicht ich ein eine einen mit für auf sie wir bitte oder aber auch nach zu
von dem den des mein meine haben suche wie kann ist sind danke hallo
"""),
    "fr": _words("""
le la les et est une des du pour avec pas je vous nous sur dans qui que mon ma mes bonjour
merci cherche cette il elle sont avez
"""),
    "es": _words("""
el los las y es una por para con que del muy pero como busco quiero gracias hola mis estoy
tiene
"""),
    "it": _words("""
il lo gli della che è sono con una cerco vorrei grazie ciao mio mia questo
"""),
    "nl": _words("""
het een en niet ik je met voor op zijn van wij graag zoek dank heb ook maar
"""),
    "pt": _words("""
os uma não com para por que eu você obrigado procuro quero meu minha está
"""),
}


def _entropy(text: str) -> float:
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _max_run(text: str) -> int:
    best = run = 0
    prev = ""
    for ch in text:
        run = run + 1 if ch == prev and not ch.isspace() else 1
        prev = ch
        best = max(best, run)
    return best


def is_gibberish(text: str, cfg: QualityConfig) -> bool:
    if _max_run(text) >= cfg.max_char_run:
        return True
    lower = text.lower()
    letters = [c for c in lower if "a" <= c <= "z"]
    if len(letters) >= 12:
        share = sum(c in _VOWELS for c in letters) / len(letters)
        if not cfg.vowel_ratio[0] <= share <= cfg.vowel_ratio[1]:
            return True
    compact = " ".join(lower.split())
    if len(compact) >= 16 and _entropy(compact) < cfg.min_entropy_bits:
        return True
    long_words = [w for w in _WORD.findall(lower) if len(w) >= 4 and w.isascii()]
    no_vowel = [w for w in long_words if not set(w) & (_VOWELS | {"y"})]
    return len(no_vowel) >= 3 and len(no_vowel) > len(long_words) / 2


def looks_english(text: str) -> bool:
    letters = [c for c in text if c.isalpha()]
    if letters and sum(ord(c) > 0x24F for c in letters) > len(letters) / 2:
        return False
    words = [w.lower() for w in _WORD.findall(text)]
    if len(words) < 4:
        return True
    english = sum(w in _EN for w in words)
    other = max(sum(w in vocab for w in words) for vocab in _OTHER.values())
    return not (other >= 2 and other > english)


def normalise_title(text: str) -> str:
    return " ".join(text.casefold().split())


class QualityFilter:
    """``reason(session, user_text) -> str | None``; ``leakage`` maps task_id -> forbidden strings."""

    def __init__(self, cfg: QualityConfig, leakage: dict[str, Sequence[str]] | None = None) -> None:
        self.cfg = cfg
        self.leakage = leakage or {}

    def reason(self, session: Session, user_text: str) -> str | None:
        cfg = self.cfg
        text = " ".join(_PLACEHOLDER.sub(" ", user_text).split())
        if not text:
            if cfg.require_text:
                return "no_text"
        else:
            if cfg.min_chars and len(text) < cfg.min_chars:
                return "too_short"
            if cfg.max_chars and len(text) > cfg.max_chars:
                return "too_long"
            if cfg.gibberish and is_gibberish(text, cfg):
                return "gibberish"
            if cfg.english_only and not looks_english(text):
                return "not_english"
        if cfg.require_outcome and not session.has_outcome:
            return "no_outcome"
        if cfg.label_leakage and session.task_id in self.leakage:
            folded = normalise_title(user_text)
            if any(needle in folded for needle in self.leakage[session.task_id]):
                return "label_leakage"
        return None
