"""One session through the per-record stages: anonymise -> quality filters -> dedup keys.

Anonymisation comes first and covers every free-text field: all turns (user and assistant), search
queries; ``user_id`` and purchase ``order_id`` become keyed pseudonyms. Everything after it (filters,
hashes, embeddings, outputs) sees only the anonymised session.

The *user text* of a session is its user turns joined by newlines, or, for logs without turns, its
search queries; the *first text* (what selection embeds) is the first user turn or query.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from data_curation.config import CurateConfig
from data_curation.dedup import MinHasher, exact_key, normalise_text
from data_curation.pii import Detection, Scrubber
from data_curation.pseudonym import Pseudonymiser
from data_curation.quality import QualityFilter
from data_curation.records import ITEM_EVENTS, Event, Session, Turn

DetectionRow = tuple[str, int, int, str]  # field, start, end, type (positions in the original text)


def user_key(pseudonym: str) -> int:
    """A 64-bit number per pseudonymous user (what splits hash on)."""
    return int.from_bytes(hashlib.blake2b(pseudonym.encode(), digest_size=8).digest(), "little")


@dataclass
class Processed:
    """An anonymised session and what later stages need of it."""

    session: Session
    user_text: str
    first_text: str
    detections: list[DetectionRow]
    reason: str | None = None
    exact: int = 0
    minhash: np.ndarray | None = None
    placeholders: Counter[str] = field(default_factory=Counter)


class SessionProcessor:
    """``process(session) -> Processed``: pure and deterministic for a given config, key and seed."""

    def __init__(self, cfg: CurateConfig, pseudonymiser: Pseudonymiser, seed: int,
                 leakage: dict[str, Sequence[str]] | None = None, protected: frozenset[str] = frozenset()) -> None:
        self.cfg = cfg
        self.pseudo = pseudonymiser
        a = cfg.anonymise
        self.scrubber = Scrubber.configured(a.phone_regions, a.names, a.ner_model, protected, a.tagger, a.tagger_dir)
        self.quality = QualityFilter(cfg.quality, leakage)
        self.minhasher = MinHasher(cfg.dedup.num_perm, cfg.dedup.shingle_chars, seed)

    def prefetch(self, sessions: Sequence[Session]) -> None:
        """Read the texts of the sessions about to be processed in one go (the PII tagger batches them): their
        messages and their search queries."""
        self.scrubber.prefetch([t.text for s in sessions for t in s.turns]
                               + [e.query for s in sessions for e in s.events if e.query])

    def anonymise(self, s: Session) -> Processed:
        detections: list[DetectionRow] = []
        placeholders: Counter[str] = Counter()
        turns: list[Turn] = []
        # Each speaker's messages together, so a number split over two messages is found.
        scrubbed: dict[int, tuple[str, list[Detection]]] = {}
        for role in {t.role for t in s.turns}:
            idx = [i for i, t in enumerate(s.turns) if t.role == role]
            scrubbed.update(zip(idx, self.scrubber.scrub_turns([s.turns[i].text for i in idx]), strict=True))
        for i, turn in enumerate(s.turns):
            text, found = scrubbed[i]
            detections.extend((f"turns[{i}].text", d.start, d.end, d.type) for d in found)
            placeholders.update(d.type for d in found)
            turns.append(turn.model_copy(update={"text": text}))
        events: list[Event] = []
        for j, event in enumerate(s.events):
            update: dict[str, str] = {}
            if event.query:
                text, found = self.scrubber.scrub(event.query)
                detections.extend((f"events[{j}].query", d.start, d.end, d.type) for d in found)
                placeholders.update(d.type for d in found)
                update["query"] = text
            if event.order_id:
                update["order_id"] = self.pseudo.order(event.order_id)
            events.append(event.model_copy(update=update) if update else event)
        session = s.model_copy(update={"user_id": self.pseudo.user(s.user_id), "turns": turns, "events": events})
        texts = [t.text for t in turns if t.role == "user" and t.text.strip()]
        if not texts:
            texts = [e.query for e in events if e.type == "search" and e.query]
        return Processed(session, "\n".join(texts), texts[0] if texts else "", detections, placeholders=placeholders)

    def process(self, s: Session) -> Processed:
        p = self.anonymise(s)
        p.reason = self.quality.reason(p.session, p.user_text)
        if p.reason is None:
            norm = normalise_text(p.user_text)
            items = [e.item_id for e in p.session.events if e.type in ITEM_EVENTS and e.item_id]
            p.exact = exact_key(norm, items)
            p.minhash = self.minhasher.signature(norm)
        return p
