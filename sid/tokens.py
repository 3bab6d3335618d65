"""SID tokens in an LLM: the vocabulary, adding it to any HF tokenizer + model, and token id <-> code maps.

New rows are initialised from text, not at random: a token's input (and untied output) embedding
is the mean of the embeddings of the tokens of its label (e.g. ``<s1_12>`` <- "hiking boots
waterproof"), so a fresh SID token starts near the meaning of the items below it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from tokenizers import AddedToken
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sid.codebook import SidError, sid_token

TOKEN_MAP_FILE = "sid_tokens.json"
_FORMAT = "sidekick.sid_tokens/1"
_TOKEN = re.compile(r"<s(\d+)_(\d+)>")


def sid_vocabulary(sizes: Sequence[int]) -> list[str]:
    """Every SID token for codebooks of these sizes, level by level (the last size is the suffix level)."""
    return [sid_token(level, code) for level, size in enumerate(sizes, start=1) for code in range(size)]


def add_sid_tokens(tokenizer: PreTrainedTokenizerBase, model: PreTrainedModel, token_labels: Mapping[str, str],
                   special_tokens: Sequence[str] = ()) -> dict[str, int]:
    """Add SID tokens (plain added tokens) and extra special tokens; resize and initialise the model.

    ``token_labels`` maps each SID token to a label text whose tokens' mean embedding initialises
    it (unk tokens left out); an empty label (and every special token) gets the mean of all
    existing token embeddings.
    Tokens already in the vocabulary keep their id and embedding. Both the input embeddings and
    an untied output head are resized; a tied head follows the input embeddings. Returns token ->
    id for every token asked for. Raises :class:`SidError` if a SID token does not encode to
    exactly one id.
    """
    overlap = set(token_labels) & set(special_tokens)
    if overlap:
        raise ValueError(f"tokens {sorted(overlap)} are both SID tokens and special tokens")
    vocab = tokenizer.get_vocab()
    n_real = len(tokenizer)  # rows past this (padding rows some models carry) are not real tokens
    label_ids = {t: _label_ids(tokenizer, label) for t, label in token_labels.items() if t not in vocab}
    label_ids |= {t: [] for t in special_tokens if t not in vocab}
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False, lstrip=False, rstrip=False,
                                     single_word=False) for t in token_labels if t not in vocab])
    new_special = [t for t in special_tokens if t not in vocab]
    if new_special:
        tokenizer.add_special_tokens({"extra_special_tokens": new_special}, replace_extra_special_tokens=False)
    vocab = tokenizer.get_vocab()
    ids = {t: int(vocab[t]) for t in [*token_labels, *special_tokens]}
    _check_single_tokens(tokenizer, list(token_labels), ids)
    _resize_and_init(model, len(tokenizer), n_real, {ids[t]: lab for t, lab in label_ids.items()})
    return ids


def _label_ids(tokenizer: PreTrainedTokenizerBase, label: str) -> list[int]:
    """Ids of the label's tokens, minus unk (an unknown word says nothing about the item)."""
    ids = tokenizer(label, add_special_tokens=False)["input_ids"] if label.strip() else []
    return [int(i) for i in ids if i != tokenizer.unk_token_id]


def _check_single_tokens(tokenizer: PreTrainedTokenizerBase, tokens: list[str], ids: Mapping[str, int]) -> None:
    """Each SID token must survive tokenisation as one id, also when glued to text and to each other."""
    if not tokens:
        return
    got = tokenizer("x" + "".join(tokens), add_special_tokens=False)["input_ids"][-len(tokens):]
    want = [ids[t] for t in tokens]
    if got != want:
        bad = next(t for t, g, w in zip(tokens, got, want, strict=True) if g != w)
        raise SidError(f"SID token {bad!r} does not encode to its single id {ids[bad]}; got {got[:8]}…")


def _weight(module: torch.nn.Module | None) -> torch.Tensor | None:
    w = getattr(module, "weight", None)
    return w if isinstance(w, torch.Tensor) else None


@torch.no_grad()
def _resize_and_init(model: PreTrainedModel, new_len: int, n_real: int, init: Mapping[int, list[int]]) -> None:
    """Grow the embeddings to ``new_len`` rows if needed; set each new row ``i`` to the mean of rows ``init[i]``."""
    emb = _weight(model.get_input_embeddings())
    assert emb is not None, "the model has no input embedding weight"
    if new_len > emb.shape[0]:
        model.resize_token_embeddings(new_len, mean_resizing=False)  # rows are overwritten below
    emb = _weight(model.get_input_embeddings())
    head = model.get_output_embeddings()
    head_w = _weight(head)
    assert emb is not None
    weights = [emb]  # (V, H)
    if head_w is not None and head_w.data_ptr() != emb.data_ptr():
        weights.append(head_w)  # untied output head (V, H)
    for w in weights:
        fallback = w[:n_real].float().mean(dim=0)  # (H,)
        for tid, src in init.items():
            w[tid] = (w[src].float().mean(dim=0) if src else fallback).to(w.dtype)
    bias = getattr(head, "bias", None)
    if isinstance(bias, torch.Tensor):  # (V,)
        fallback_b = bias[:n_real].float().mean()
        for tid, src in init.items():
            bias[tid] = (bias[src].float().mean() if src else fallback_b).to(bias.dtype)


class SidTokenMap:
    """Token id <-> (level, code), both ways. Levels are 1-based, as in the tokens."""

    def __init__(self, token_ids: Mapping[str, int]) -> None:
        self._by_id: dict[int, tuple[int, int]] = {}
        sizes: dict[int, int] = {}
        for tok, tid in token_ids.items():
            m = _TOKEN.fullmatch(tok)
            if m is None:
                raise SidError(f"{tok!r} is not a SID token (expected e.g. <s1_12>)")
            level, code = int(m.group(1)), int(m.group(2))
            if level < 1:
                raise SidError(f"{tok!r}: levels are 1-based")
            self._by_id[int(tid)] = (level, code)
            sizes[level] = max(sizes.get(level, 0), code + 1)
        if len(self._by_id) != len(token_ids):
            raise SidError("two SID tokens share a token id")
        if sorted(sizes) != list(range(1, len(sizes) + 1)):
            raise SidError(f"SID token levels {sorted(sizes)} are not 1..L")
        self._ids = [np.full(sizes[level], -1, np.int64) for level in range(1, len(sizes) + 1)]  # per level (size,)
        for tid, (level, code) in self._by_id.items():
            self._ids[level - 1][code] = tid
        self.token_ids = {str(k): int(v) for k, v in token_ids.items()}

    @classmethod
    def from_tokenizer(cls, tokenizer: PreTrainedTokenizerBase, vocabulary: Sequence[str]) -> SidTokenMap:
        """Look up every token of ``vocabulary`` (see :func:`sid_vocabulary`); missing ones are an error."""
        vocab = tokenizer.get_vocab()
        missing = [t for t in vocabulary if t not in vocab]
        if missing:
            raise SidError(f"{len(missing)} SID tokens are not in the tokenizer, e.g. {missing[:3]}; "
                           "run add_sid_tokens first")
        return cls({t: vocab[t] for t in vocabulary})

    @property
    def depth(self) -> int:
        """Number of levels (quantiser levels + suffix)."""
        return len(self._ids)

    @property
    def sizes(self) -> list[int]:
        """Per level, 1 + the largest code with a token."""
        return [len(a) for a in self._ids]

    def level_code(self, token_id: int) -> tuple[int, int] | None:
        """(level, code) of a SID token id; None for any other id."""
        return self._by_id.get(token_id)

    def ids_for_level(self, level: int, codes: np.ndarray) -> np.ndarray:
        """Token ids (n,) of ``codes`` (n,) at 1-based ``level``, vectorised. Raises if one has no token."""
        table = self._ids[level - 1]
        if len(codes) and (codes.max() >= len(table) or (table[codes] < 0).any()):
            raise SidError(f"some of codes {codes.tolist()[:8]} at level {level} have no SID token")
        return table[codes]

    def codes_from_ids(self, ids: Sequence[int]) -> tuple[int, ...]:
        """Token ids of ``<s1_a><s2_b>…`` -> ``(a, b, …)``; a prefix is fine. Raises on any other id."""
        codes: list[int] = []
        for tid in ids:
            lc = self._by_id.get(int(tid))
            if lc is None or lc[0] != len(codes) + 1:
                raise SidError(f"token id {int(tid)} at position {len(codes) + 1} is not a level-"
                               f"{len(codes) + 1} SID token")
            codes.append(lc[1])
        return tuple(codes)

    def ids_from_codes(self, codes: Sequence[int]) -> list[int]:
        """``(a, b, …)`` -> the token ids of ``<s1_a><s2_b>…``."""
        if len(codes) > self.depth:
            raise SidError(f"SID {tuple(codes)} is deeper than the {self.depth} token levels")
        return [int(self.ids_for_level(level, np.array([c], np.int64))[0]) for level, c in enumerate(codes, 1)]

    def save(self, model_dir: Path) -> Path:
        """Write ``sid_tokens.json`` into ``model_dir`` (beside the tokenizer files)."""
        path = Path(model_dir) / TOKEN_MAP_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"format": _FORMAT, "sizes": self.sizes, "tokens": self.token_ids}, indent=1))
        return path

    @classmethod
    def load(cls, model_dir: Path) -> SidTokenMap:
        path = Path(model_dir) / TOKEN_MAP_FILE
        data = json.loads(path.read_text())
        if data.get("format") != _FORMAT:
            raise SidError(f"{path}: format {data.get('format')!r}, expected {_FORMAT!r}")
        return cls(data["tokens"])
