"""Phrasing packs: the wordings viewers use for each livestream question, grouped into families.

A family is one way of talking (a register, a language, a habit of naming products); each is a JSON
file. The world draws every question's wording from one family, records it in ``meta["family"]`` and
keeps the **training** families (``apps/livestream/phrasings/train/``, plus ``base``: the templates in
:mod:`apps.livestream.vocab`) apart from the **held-out** ones (``apps/livestream/phrasings/heldout/``),
which only ever write the world's held-out questions: a held-out question shares no template with any
training question. ``apps/livestream/phrasings/dev/`` holds a first outside author's families, which the
reader (:mod:`apps.livestream.reader`) was improved against and which are never trained on. The three
directories were written by different authors, none of whom read the agent's rules.

Pack format (every key but ``family`` and ``lang`` optional; a slot a family lacks is never drawn from it)::

    {
      "family": "es-casual",                    # unique id, [a-z0-9-]+
      "lang": "es",                             # en | es | de | fr | mixed
      "ordinals": ["primer", "segundo", ...],   # 12 words for {ord}: position 1..12 in show order
      "refs": {                                 # how the viewer names the product ({ref} in questions)
        "this_one": ["este", "esto de aquí"],   # the product on screen; may use {leaf}, {this}
        "previous": ["el de antes"],            # the product shown just before the one on screen
        "ordinal": ["el {ord}", "el número {n}"],  # {ord} (from "ordinals") or {n} (1-based position)
        "named": ["el {leaf} de {brand}"],      # {brand} and {leaf}
        "brand": ["lo de {brand}"],             # brand alone: used only when the brand is unique on the stream
        "leaf": ["los {leaf}"]                  # noun alone: used only when the noun is unique on the stream
      },
      "price": ["cuánto cuesta {ref}?", "precio??"],
      "stock": ["quedan {ref}?"],
      "value": {"shipping_days": ["cuánto tarda el envío de {ref}?"], ...},   # keys: VALUE_KEYS
      "bool": {"vegan": ["{ref} es vegano?"], ...},                          # keys: BOOL_KEYS
      "member": {"colours": ["lo tienes en {probe}?"], ...},                 # keys: MEMBER_KEYS; {probe}
      "threshold": {"shipping_days": ["llega en {x} días?"], ...},           # keys: THRESHOLD_KEYS; {x}
      "comparison": {"price": ["qué es más barato, {a} o {b}?"], ...},       # keys: COMPARISON_KEYS; {a} {b}
      "unanswerable": ["cuándo vuelve a haber {ref}?"],   # about the product but never on a fact sheet
      "off_topic": ["de dónde eres {host}?"]              # not about the products; may use {host}
    }

Placeholders: ``{ref}`` — the product as named by one of the family's ``refs`` (a question template
without ``{ref}`` is used only for the product on screen, the viewer meaning "this"); ``{leaf}`` — the
product's noun in English, lower case ("earbuds", "yoga mat"); ``{this}`` / ``{that}`` — "this"/"these", "that"/"those";
``{brand}`` — "Voltix"; ``{probe}`` — the colour / size / ingredient / allergen / device / skin or hair
type asked about, as the fact sheet writes it ("pink", "M", "shea butter", "Alexa", "dry skin");
``{x}`` — a number (days, hours, years of age); ``{a}``, ``{b}`` — two products named by refs;
``{host}`` — the host's first name. Anything else between braces is an error; write a literal brace as
``{{``.

    .venv/bin/python -m apps.livestream.phrasings          # check every pack, print coverage
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from apps.livestream.vocab import (
    BOOL_Q,
    COMPARISONS,
    MEMBER_Q,
    NAMED_REFS,
    OFF_TOPIC_Q,
    ORDINAL_REFS,
    ORDINALS,
    PRICE_Q,
    STOCK_Q,
    THIS_ONE_REFS,
    THRESHOLDS,
    UNANSWERABLE_Q,
    UNIQUE_LEAF_REFS,
    VALUE_Q,
)
from infra.recordio import RecordError, read_json_model

HERE = Path(__file__).parent / "phrasings"
TRAIN_DIR = HERE / "train"
HELDOUT_DIR = HERE / "heldout"
DEV_DIR = HERE / "dev"
DEV2_DIR = HERE / "dev2"
DEV3_DIR = HERE / "dev3"
DEV4_DIR = HERE / "dev4"
DEV5_DIR = HERE / "dev5"
HELDOUT2_DIR = HERE / "heldout2"
VALUE_KEYS = tuple(sorted(VALUE_Q))
BOOL_KEYS = tuple(sorted(BOOL_Q))
MEMBER_KEYS = tuple(sorted(MEMBER_Q))
THRESHOLD_KEYS = tuple(sorted(THRESHOLDS))
COMPARISON_KEYS = tuple(sorted(COMPARISONS))
REF_KINDS = ("this_one", "previous", "ordinal", "named", "brand", "leaf")

_REF_SLOTS: dict[str, frozenset[str]] = {
    "this_one": frozenset({"leaf", "this", "that"}), "previous": frozenset({"leaf", "this", "that"}),
    "ordinal": frozenset({"ord", "n"}), "named": frozenset({"brand", "leaf", "this", "that"}),
    "brand": frozenset({"brand"}), "leaf": frozenset({"leaf", "this", "that"}),
}
_QUESTION_SLOTS = {
    "price": frozenset({"ref"}), "stock": frozenset({"ref"}), "value": frozenset({"ref"}),
    "bool": frozenset({"ref"}), "member": frozenset({"ref", "probe"}), "threshold": frozenset({"ref", "x"}),
    "comparison": frozenset({"a", "b"}), "unanswerable": frozenset({"ref"}), "off_topic": frozenset({"host"}),
}
_REQUIRED = {"member": "probe", "threshold": "x", "comparison": ("a", "b")}


class PhrasingError(ValueError):
    """A phrasing pack that does not load: names the file and the field."""


def placeholders(template: str) -> set[str]:
    """The ``{names}`` of a template (``{{`` is a literal brace)."""
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


class PhrasingPack(BaseModel):
    """One family of wordings (see the module docstring for the format)."""

    model_config = ConfigDict(extra="forbid")

    family: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    lang: str = Field(pattern=r"^(en|es|de|fr|mixed)$")
    note: str = ""
    ordinals: list[str] = Field(default_factory=list)
    refs: dict[str, list[str]] = Field(default_factory=dict)
    price: list[str] = Field(default_factory=list)
    stock: list[str] = Field(default_factory=list)
    value: dict[str, list[str]] = Field(default_factory=dict)
    bool: dict[str, list[str]] = Field(default_factory=dict)
    member: dict[str, list[str]] = Field(default_factory=dict)
    threshold: dict[str, list[str]] = Field(default_factory=dict)
    comparison: dict[str, list[str]] = Field(default_factory=dict)
    unanswerable: list[str] = Field(default_factory=list)
    off_topic: list[str] = Field(default_factory=list)

    @field_validator("ordinals")
    @classmethod
    def _twelve(cls, v: list[str]) -> list[str]:
        if v and len(v) != len(ORDINALS):
            raise ValueError(f"ordinals: {len(v)} words, need {len(ORDINALS)} (positions 1..{len(ORDINALS)})")
        return v

    @model_validator(mode="after")
    def _slots(self) -> PhrasingPack:
        problems: list[str] = []
        keys = {"value": VALUE_KEYS, "bool": BOOL_KEYS, "member": MEMBER_KEYS, "threshold": THRESHOLD_KEYS,
                "comparison": COMPARISON_KEYS}
        for kind, templates in self.refs.items():
            if kind not in REF_KINDS:
                problems.append(f"refs.{kind}: unknown reference kind (one of {', '.join(REF_KINDS)})")
                continue
            for t in templates:
                bad = placeholders(t) - _REF_SLOTS[kind]
                if bad:
                    problems.append(f"refs.{kind}: {t!r} uses {sorted(bad)} (allowed {sorted(_REF_SLOTS[kind])})")
                if "ord" in placeholders(t) and not self.ordinals:
                    problems.append(f"refs.{kind}: {t!r} uses {{ord}} but the pack has no ordinals")
        for slot, path, t in self.templates():
            group = slot.split(".")[0]
            try:
                names = placeholders(t)
            except ValueError as e:
                problems.append(f"{path}: {t!r}: {e}")
                continue
            bad = names - _QUESTION_SLOTS[group]
            if bad:
                problems.append(f"{path}: {t!r} uses {sorted(bad)} (allowed {sorted(_QUESTION_SLOTS[group])})")
            need = _REQUIRED.get(group)
            for name in (need,) if isinstance(need, str) else need or ():
                if name not in names:
                    problems.append(f"{path}: {t!r} lacks {{{name}}}")
            if not t.strip():
                problems.append(f"{path}: empty template")
        for group, allowed in keys.items():
            for key in getattr(self, group):
                if key not in allowed:
                    problems.append(f"{group}.{key}: unknown fact (one of {', '.join(allowed)})")
        if problems:
            raise ValueError("; ".join(problems[:8]) + (f" (+{len(problems) - 8} more)" if len(problems) > 8 else ""))
        return self

    def templates(self) -> Iterable[tuple[str, str, str]]:
        """``(slot, path, template)`` for every question template: slot is ``price``, ``value.brand``, …"""
        for group in ("price", "stock", "unanswerable", "off_topic"):
            for i, t in enumerate(getattr(self, group)):
                yield group, f"{group}[{i}]", t
        for group in ("value", "bool", "member", "threshold", "comparison"):
            for key, templates in getattr(self, group).items():
                for i, t in enumerate(templates):
                    yield f"{group}.{key}", f"{group}.{key}[{i}]", t

    def slot(self, slot: str) -> list[str]:
        """The templates of ``slot`` (``price``, ``value.brand``, ``refs.named``, …); [] when the pack lacks it."""
        group, _, key = slot.partition(".")
        field = getattr(self, group, None)
        if isinstance(field, dict):
            return list(field.get(key, []))
        return list(field) if isinstance(field, list) and not key else []

    def ordinal(self, position: int) -> str:
        """The word for show position ``position`` (1-based), in the pack's language."""
        return (self.ordinals or list(ORDINALS))[position - 1]


def base_pack() -> PhrasingPack:
    """The templates of :mod:`apps.livestream.vocab` as the ``base`` training family."""
    return PhrasingPack(
        family="base", lang="en", note="apps/livestream/vocab.py", ordinals=list(ORDINALS),
        refs={"this_one": list(THIS_ONE_REFS), "ordinal": list(ORDINAL_REFS), "named": list(NAMED_REFS),
              "leaf": list(UNIQUE_LEAF_REFS)},
        price=list(PRICE_Q), stock=list(STOCK_Q), value={k: list(v) for k, v in VALUE_Q.items()},
        bool={k: list(v) for k, v in BOOL_Q.items()}, member={k: list(v) for k, v in MEMBER_Q.items()},
        threshold={k: list(r.questions) for k, r in THRESHOLDS.items()},
        comparison={k: list(r.questions) for k, r in COMPARISONS.items()},
        unanswerable=list(UNANSWERABLE_Q), off_topic=list(OFF_TOPIC_Q),
    )


def load_pack(path: Path) -> PhrasingPack:
    """One pack file; :class:`PhrasingError` naming the file (and line of a JSON error) and the field."""
    try:
        return read_json_model(path, PhrasingPack)
    except RecordError as e:
        raise PhrasingError(str(e)) from None


def load_packs(paths: Sequence[Path]) -> list[PhrasingPack]:
    """Packs from files and directories (every ``*.json`` in a directory, sorted); family ids must be unique."""
    files = [f for p in paths for f in (sorted(Path(p).glob("*.json")) if Path(p).is_dir() else [Path(p)])]
    packs = [load_pack(f) for f in files]
    seen: dict[str, Path] = {}
    for pack, f in zip(packs, files, strict=True):
        if pack.family in seen:
            raise PhrasingError(f"{f}: family {pack.family!r} is also in {seen[pack.family]}")
        seen[pack.family] = f
    return packs


@cache
def train_packs() -> tuple[PhrasingPack, ...]:
    """``base`` plus every pack in ``apps/livestream/phrasings/train/``."""
    return (base_pack(), *load_packs([TRAIN_DIR] if TRAIN_DIR.is_dir() else []))


@cache
def dev_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/dev/``: a first outside author's families, which the reader was
    improved against (never trained on; ``bench/livestream.py`` reports them apart from the held-out ones)."""
    return tuple(load_packs([DEV_DIR] if DEV_DIR.is_dir() else []))


@cache
def dev2_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/dev2/``: a third outside author's families (2026-12-06), the
    second development set (never trained on; scored once before the reader was improved against it)."""
    return tuple(load_packs([DEV2_DIR] if DEV2_DIR.is_dir() else []))


@cache
def dev3_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/dev3/``: a fourth outside author's families (2026-12-06, teen,
    Indian and terse English, Rioplatense Spanish, Austrian German, Belgian French), the third development set:
    never trained on and never read by the reader's author; what the model-and-reader agent was designed on."""
    return tuple(load_packs([DEV3_DIR] if DEV3_DIR.is_dir() else []))


@cache
def dev4_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/dev4/``: a fifth outside author's families (2026-12-06, Australian,
    voice-typed and bargain-hunter English, Chilean Spanish, German and French youth texting), written as more
    training wordings for the livestream student, with many chit-chat lines; the reader was never tuned on them."""
    return tuple(load_packs([DEV4_DIR] if DEV4_DIR.is_dir() else []))


@cache
def dev5_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/dev5/``: a seventh outside author's families (2026-12-06, Irish,
    Filipino and sceptical English, Colombian Spanish, Bavarian German, West African French), written as more
    training wordings for the livestream student with many chit-chat lines and questions no fact sheet answers;
    the reader was never tuned on them."""
    return tuple(load_packs([DEV5_DIR] if DEV5_DIR.is_dir() else []))


@cache
def heldout_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/heldout/`` (none of them is ever trained on)."""
    return tuple(load_packs([HELDOUT_DIR] if HELDOUT_DIR.is_dir() else []))


@cache
def heldout2_packs() -> tuple[PhrasingPack, ...]:
    """Every pack in ``apps/livestream/phrasings/heldout2/``: a sixth outside author's families (2026-12-06,
    Nigerian, US-Southern and Singapore English, Peruvian Spanish, Berlin German, Swiss French), who read no other
    pack and no rule of the agent: a second held-out set, never tuned or trained on."""
    return tuple(load_packs([HELDOUT2_DIR] if HELDOUT2_DIR.is_dir() else []))


PACK_SETS: dict[str, Callable[[], tuple[PhrasingPack, ...]]] = {
    "train": train_packs, "dev": dev_packs, "dev2": dev2_packs, "dev3": dev3_packs, "dev4": dev4_packs,
    "dev5": dev5_packs, "heldout": heldout_packs, "heldout2": heldout2_packs}
"""Each question set of a livestream world -> the families that word it."""


def template_key(template: str) -> str:
    """A template with its placeholders and punctuation stripped, lower case: two families sharing a wording
    share this key (used to check that held-out wordings never occur in training families)."""
    text = re.sub(r"\{[a-z]+\}", " ", template.lower())
    return " ".join(re.findall(r"[^\W\d_]+", text))


def template_id(pack: PhrasingPack, qtype: str, key: str, index: int) -> str:
    """The id a task records of the template that worded it (``meta["template"]``; :func:`pack_template` reads it
    back): ``<family>/<qtype>:<key>:<index>``, without the family for ``base``."""
    return f"{qtype}:{key}:{index}" if pack.family == "base" else f"{pack.family}/{qtype}:{key}:{index}"


def pack_template(packs: Iterable[PhrasingPack], recorded: str) -> str | None:
    """The template a task's ``meta["template"]`` names (``dev3-en-terse/value:discount_percent:0``,
    ``price:price:2`` for ``base``, ``unanswerable:warranty_months:1`` for a value or yes/no template asked of a
    product without that fact); None when no pack of ``packs`` has it."""
    family, _, rest = recorded.rpartition("/")
    pack = next((p for p in packs if p.family == (family or "base")), None)
    qtype, _, tail = rest.partition(":")
    key, _, index = tail.rpartition(":")
    if pack is None or not index.isdigit():
        return None
    if qtype in ("price", "stock", "off_topic") or (qtype == "unanswerable" and key == "generic"):
        templates = pack.slot(qtype)
    elif qtype == "unanswerable":
        templates = pack.slot(f"value.{key}") or pack.slot(f"bool.{key}")
    else:
        templates = pack.slot(f"{qtype}.{key}")
    return templates[int(index)] if int(index) < len(templates) else None


def main() -> None:
    for name, packs in PACK_SETS.items():
        for p in packs():
            n = sum(1 for _ in p.templates())
            refs = sum(len(v) for v in p.refs.values())
            print(f"{name:8s} {p.family:24s} {p.lang:5s} {n:4d} question templates, {refs:3d} refs")
    train = {template_key(t) for p in train_packs() for _, _, t in p.templates()}
    shared = [(p.family, t) for p in (*heldout_packs(), *heldout2_packs()) for _, _, t in p.templates()
              if template_key(t) in train]
    print(f"held-out templates also in a training family: {len(shared)}")
    for family, t in shared[:20]:
        print(f"  {family}: {t!r}")
    shared_dev = [p.family for name, packs in PACK_SETS.items() if name.startswith("dev") for p in packs()
                  for _, _, t in p.templates()
                  if template_key(t) in train]
    print(f"dev templates also in a training family: {len(shared_dev)}")


if __name__ == "__main__":
    main()
