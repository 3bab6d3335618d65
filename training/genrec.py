"""SID generative recommendation: a sequence model that reads a user's items as semantic IDs and writes the next
item's SID, one code at a time.

    model = SidRec(codes, SidRecConfig())                 # codes: (N, D) int, one SID per item (row = item index)
    info = fit_sid_rec(model, train_rows, valid, cfg)     # rows: item indices per user, oldest first
    scores = model.item_log_probs(histories)              # (B, N): log p(SID of item | history), every item

The model (in the line of TIGER, Rajput et al. 2023, and RPG, Hou et al. 2025, with an item-level encoder):

- **input**: an item is the sum of its codes' embeddings, ``x_t = sum_l E_l[c_l(i_t)] + P_t``: the model never
  sees an item id, only codes, so items that share a code prefix share what was learnt about it;
- **encoder**: a causal Transformer over the last ``context_items`` items (post-LN, GELU, the width / depth /
  dropout of RecBole's SASRec by default), ``h_t`` the state after item ``t``;
- **decoder** (``head="autoregressive"``, default): the next SID code by code,
  ``p(c_l | h, c_<l) = softmax(W_l · LN(h + sum_{j<l} D_j[c_j]))``, so
  ``log p(item | h) = sum_l log p(c_l(item) | h, c_<l(item))``; ``head="parallel"`` predicts every code from
  ``h`` alone (RPG's multi-token prediction), ``log p = sum_l log softmax(W_l · h)[c_l]``.
- **training**: teacher-forced cross-entropy of every code of every next item in the window (each position
  predicts the item after it), Adam, dropout; the epoch with the best validation NDCG@10 is kept.
- **decoding**: exact by default: every item's SID log-probability is computed (one pass over the distinct
  SID prefixes of each level, ``sum_l U_l`` rows for ``U_l`` distinct prefixes of length ``l``), which is what
  trie-constrained beam search approximates; ``beam_size > 0`` runs that beam search instead (level by level,
  keep the best ``beam_size`` prefixes that lead to an allowed item).

Items to leave out (a user's history) are masked before the top ``k``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from sid.cooccurrence import cooccurrence_embeddings

Progress = Callable[[str], None]


class SidRecError(ValueError):
    """Codes, sequences or settings the SID recommender cannot use."""


class SidRecConfig(BaseModel):
    """The SID recommender's model, training and decoding."""

    model_config = ConfigDict(extra="forbid")

    head: Literal["autoregressive", "parallel"] = Field(
        default="autoregressive", description="autoregressive: code l given the history and codes < l (default); "
        "parallel: every code from the history alone (RPG).")
    context_items: int = Field(default=20, ge=1, description="Most recent items the encoder reads (default 20).")
    hidden: int = Field(default=64, ge=8, description="Embedding and hidden width (default 64, SASRec's).")
    inner: int = Field(default=256, ge=8, description="Feed-forward width (default 256).")
    layers: int = Field(default=2, ge=1, le=12, description="Transformer layers (default 2).")
    heads: int = Field(default=2, ge=1, description="Attention heads (default 2).")
    dropout: float = Field(default=0.2, ge=0, lt=1, description="Dropout of embeddings, attention and "
                           "feed-forward (default 0.2, as the SASRec baseline).")
    stride: int = Field(default=10, ge=1, description="Training windows end every `stride` items of a sequence; "
                        "each next item is a target once, with at least context_items - stride items before it "
                        "(except at the start of a sequence). Default 10.")
    targets: Literal["window", "last"] = Field(
        default="window", description="window: every next item in a window is a target, windows end every "
        "`stride` items (default); last: a window ends at every item of a sequence (stride ignored) and only its "
        "last position is a target, each with up to context_items items before it: SASRec's (RecBole's) "
        "prefix augmentation, ~context_items / 2 times the encoder work per epoch.")
    epochs: int = Field(default=60, ge=1, description="Most passes over the training windows (default 60).")
    patience: int = Field(default=10, ge=1, description="Stop after this many validations without a better "
                          "NDCG@10 (default 10).")
    batch_size: int = Field(default=32, ge=1, description="Windows per step (default 32: ~340 targets a step, "
                            "close to SASRec's 256; 128 windows learnt slower per epoch and no better).")
    lr: float = Field(default=1e-3, gt=0, description="Adam learning rate (default 1e-3).")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay (default 0).")
    decoder_inner: int = Field(default=256, ge=0, description="Width of each level's residual GELU MLP between "
                               "the history + prefix state and the code logits; 0 = none (the prefix then only "
                               "shifts the logits, the same for every history). Default 256.")
    tie: bool = Field(default=True, description="Code logits use the input code embeddings as weights (SASRec ties "
                      "its item embeddings the same way).")
    item_dropout: float = Field(default=0.0, ge=0, lt=1, description="In training, each input item's embedding "
                                "is zeroed with this probability (its position stays): a sequence augmentation "
                                "that makes the model predict from partial histories. Default 0.")
    item_input: bool = Field(default=False, description="Add a per-item embedding to the input's code sum (the "
                             "output is still the SID, code by code). Default false.")
    horizon: int = Field(default=1, ge=1, description="Each position learns the next `horizon` items, not only the "
                         "next one (1 = next item only, default).")
    horizon_weight: float = Field(default=1.0, ge=0, description="Loss weight of each item after the next "
                                  "(the next one weighs 1). Default 1.")
    lr_schedule: Literal["constant", "cosine"] = Field(default="constant", description="constant (default) or "
                                                       "cosine decay to 0 over `epochs` epochs after a linear "
                                                       "warm-up of `warmup_steps`.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear learning-rate warm-up steps (default 0).")
    trie_softmax: bool = Field(default=False, description="Each level's softmax runs only over the codes that "
                               "continue the item's prefix to some item, in training and decoding, so no "
                               "probability goes to code paths no item has. Default false (all codes).")
    ema: float = Field(default=0.0, ge=0, lt=1, description="Decay of an exponential moving average of the weights "
                       "(per step, warmed up as min(ema, (1 + t) / (10 + t))); the average is what is validated and "
                       "kept. 0 = off (default).")
    beam_size: int = Field(default=0, ge=0, description="0 = exact decoding over every item (default); > 0 = "
                           "trie-constrained beam search with this many beams.")
    seed: int = Field(default=0, ge=0)


class SidRec(nn.Module):
    """Encoder over code-composed item embeddings + a code-by-code (or parallel) SID decoder."""

    codes: torch.Tensor  # (N, D) buffer: the SID of every item

    def __init__(self, codes: np.ndarray, cfg: SidRecConfig) -> None:
        super().__init__()
        codes = np.asarray(codes)
        if codes.ndim != 2 or len(codes) == 0 or codes.dtype.kind not in "iu" or (codes < 0).any():
            raise SidRecError(f"codes must be a non-empty (N, D) array of non-negative ints, got {codes.shape} "
                              f"{codes.dtype}")
        if len({tuple(r) for r in codes.tolist()}) != len(codes):
            raise SidRecError("two items share a SID: add a collision suffix (sid.quantize.add_collision_suffix)")
        if cfg.trie_softmax and cfg.head != "autoregressive":
            raise SidRecError("trie_softmax needs the autoregressive head (a parallel level sees no prefix)")
        self.cfg = cfg
        self.sizes = [int(codes[:, lv].max()) + 1 for lv in range(codes.shape[1])]
        d = cfg.hidden
        self.register_buffer("codes", torch.as_tensor(codes, dtype=torch.long), persistent=True)  # (N, D)
        self.code_emb = nn.ModuleList(nn.Embedding(k, d) for k in self.sizes)
        self.item_emb = nn.Embedding(len(codes), d) if cfg.item_input else None
        self.pos_emb = nn.Embedding(cfg.context_items, d)
        self.emb_norm = nn.LayerNorm(d)
        self.drop = nn.Dropout(cfg.dropout)
        layer = nn.TransformerEncoderLayer(d, cfg.heads, cfg.inner, cfg.dropout, activation="gelu",
                                           batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, cfg.layers, enable_nested_tensor=False)
        self.prefix_emb = nn.ModuleList(nn.Embedding(k, d) for k in self.sizes[:-1])
        self.level_norm = nn.ModuleList(nn.LayerNorm(d) for _ in self.sizes)
        self.level_mlp = nn.ModuleList(
            nn.Sequential(nn.Linear(d, cfg.decoder_inner), nn.GELU(), nn.Dropout(cfg.dropout),
                          nn.Linear(cfg.decoder_inner, d))
            for _ in self.sizes) if cfg.decoder_inner else None
        self.out = nn.ModuleList(nn.Linear(d, k) for k in self.sizes)
        self.apply(self._init)
        self._prefixes = _prefix_tables(codes)
        # trie_softmax: valid[l] (U_l, K_l), the codes that continue each distinct prefix of length l to some item
        self._valid: list[torch.Tensor] = []
        self._inverse: list[torch.Tensor] = []
        self._prefix_row: list[dict[tuple[int, ...], int]] = []
        if cfg.trie_softmax:
            for lv, (uniq, inverse) in enumerate(self._prefixes):
                v = np.zeros((len(uniq), self.sizes[lv]), bool)
                v[inverse, codes[:, lv]] = True
                self._valid.append(torch.as_tensor(v))
                self._inverse.append(torch.as_tensor(inverse))
                self._prefix_row.append({tuple(r): i for i, r in enumerate(uniq.tolist())})

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def warm_start(self, init: SidInit) -> None:
        """Start from the item-id model: its encoder (positions, input norm, layers) and its output head (norm and
        MLP) for level 1, and each level's code embeddings from that level's centroids (the suffix level keeps
        its init). Only weights of the same shape are copied: the item-id model must share this encoder's
        settings."""
        own = self.state_dict()
        shared = ("pos_emb.", "emb_norm.", "encoder.", "level_norm.0.", "level_mlp.0.")
        for key, value in init.item_model.items():
            if key.startswith(shared) and key in own:
                if own[key].shape != value.shape:
                    raise SidRecError(f"warm start: {key} is {tuple(value.shape)} in the item-id model, "
                                      f"{tuple(own[key].shape)} here")
                own[key] = value.clone()
        for lv, c in enumerate(init.centroids[:len(self.sizes)]):
            weight = own[f"code_emb.{lv}.weight"]
            if c.shape[1] != weight.shape[1]:
                raise SidRecError(f"warm start: level {lv} centroids are {c.shape[1]}-d, embeddings "
                                  f"{weight.shape[1]}-d")
            weight[:] = torch.as_tensor(c[:weight.shape[0]])
        self.load_state_dict(own)

    # ------------------------------------------------------------------------------------------- encoder
    def encode(self, items: torch.Tensor) -> torch.Tensor:
        """items (B, T) item rows, oldest first, right-padded with -1: causal hidden states (B, T, d).

        Right padding: a real position never attends to a pad (they come after it), so no key mask is needed and
        no softmax row is empty; states at pad positions are junk and never read."""
        t = items.shape[1]
        if t > self.cfg.context_items:
            raise SidRecError(f"{t} items > context_items {self.cfg.context_items}")
        pad = items < 0
        c = self.codes[items.clamp(min=0)]  # (B, T, D)
        x = sum(emb(c[..., lv]) for lv, emb in enumerate(self.code_emb))  # (B, T, d)
        if self.item_emb is not None:
            x = x + self.item_emb(items.clamp(min=0))
        if self.training and self.cfg.item_dropout > 0:
            x = x.masked_fill(torch.rand(x.shape[:2], device=x.device)[..., None] < self.cfg.item_dropout, 0.0)
        x = x + self.pos_emb(torch.arange(t, device=items.device))[None]
        x = self.drop(self.emb_norm(x)).masked_fill(pad[..., None], 0.0)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=items.device), diagonal=1)
        return self.encoder(x, mask=causal)  # (B, T, d)

    def last_state(self, histories: Sequence[Sequence[int]]) -> torch.Tensor:
        """The state after each history's last item (its last ``context_items``): (B, d). An empty history reads
        the state of a lone pad."""
        t = self.cfg.context_items
        x = torch.full((len(histories), t), -1, dtype=torch.long)
        last = torch.zeros(len(histories), dtype=torch.long)
        for b, hist in enumerate(histories):
            tail = list(hist)[-t:]
            if tail:
                x[b, :len(tail)] = torch.as_tensor(tail)
                last[b] = len(tail) - 1
        h = self.encode(x.to(self.codes.device))
        return h[torch.arange(len(histories)), last.to(h.device)]

    # ------------------------------------------------------------------------------------------- decoder
    def _level_logits(self, h: torch.Tensor, prefix: torch.Tensor | None, level: int) -> torch.Tensor:
        """h (..., d); prefix (..., level) codes of the levels before (autoregressive head): logits (..., K_l)."""
        g = h
        if self.cfg.head == "autoregressive" and level > 0:
            assert prefix is not None and prefix.shape[-1] == level, "prefix must hold one code per earlier level"
            g = g + sum(self.prefix_emb[j](prefix[..., j]) for j in range(level))
        g = self.level_norm[level](g)
        if self.level_mlp is not None:
            g = g + self.level_mlp[level](g)
        if self.cfg.tie:
            out, emb = self.out[level], self.code_emb[level]
            assert isinstance(out, nn.Linear) and isinstance(emb, nn.Embedding)
            return F.linear(g, emb.weight, out.bias)
        return self.out[level](g)

    def code_loss(self, h: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """h (M, d) states, target (M,) item rows: mean over rows of -log p(SID of target | h) / D (nats per code)."""
        c = self.codes[target]  # (M, D)
        loss = h.new_zeros(())
        for lv in range(len(self.sizes)):
            logits = self._level_logits(h, c[:, :lv], lv)
            if self.cfg.trie_softmax:
                logits = logits.masked_fill(~self._valid[lv][self._inverse[lv][target.cpu()]].to(h.device),
                                            -math.inf)
            loss = loss + F.cross_entropy(logits, c[:, lv])
        return loss / len(self.sizes)

    def item_log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """h (B, d) -> (B, N): log p(SID of every item | h), exactly (sum over levels of the code log-probs)."""
        n = self.codes.shape[0]
        total = h.new_zeros((h.shape[0], n))
        for lv, (uniq, inverse) in enumerate(self._prefixes):
            if self.cfg.head == "autoregressive" and lv > 0:
                u = torch.as_tensor(uniq, device=h.device)  # (U_l, l) distinct prefixes of length l
                logits = self._level_logits(h[:, None, :], u[None].expand(h.shape[0], -1, -1), lv)
                if self.cfg.trie_softmax:
                    logits = logits.masked_fill(~self._valid[lv][None].to(h.device), -math.inf)
                logp = F.log_softmax(logits, -1)
                # (B, U_l, K_l): item n reads row inverse[n] at its own code
                rows = torch.as_tensor(inverse, device=h.device)
                total = total + logp[:, rows, self.codes[:, lv]]
            else:
                logits = self._level_logits(h, None, lv)  # (B, K_l)
                if self.cfg.trie_softmax:  # level 0: the one empty prefix
                    logits = logits.masked_fill(~self._valid[0][0].to(h.device), -math.inf)
                logp = F.log_softmax(logits, -1)
                total = total + logp[:, self.codes[:, lv]]
        return total

    def beam_log_probs(self, h: torch.Tensor, allowed: torch.Tensor, beam: int) -> torch.Tensor:
        """Trie-constrained beam search, level by level: (B, N) log-probs of the items it reached, -inf elsewhere.

        ``allowed`` (B, N) bool: the items a user may be recommended (prefixes leading to none are dropped)."""
        bsz, n = allowed.shape
        out = h.new_full((bsz, n), -math.inf)
        codes = self.codes
        for b in range(bsz):
            live = torch.nonzero(allowed[b]).flatten()  # item rows still reachable
            if live.numel() == 0:
                continue
            # A beam is a prefix (tuple of codes) with its log-prob; start from the empty prefix.
            beams: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
            for lv in range(len(self.sizes)):
                cand: list[tuple[tuple[int, ...], float]] = []
                pre = torch.tensor([p for p, _ in beams], dtype=torch.long).reshape(len(beams), lv)
                logits = self._level_logits(h[b].expand(len(beams), -1), pre if lv else None, lv)
                if self.cfg.trie_softmax:
                    rows = [self._prefix_row[lv][p] for p, _ in beams]
                    logits = logits.masked_fill(~self._valid[lv][rows].to(h.device), -math.inf)
                logp = F.log_softmax(logits, -1)  # (beams, K_l)
                for j, (p, s) in enumerate(beams):
                    match = live
                    for i, code in enumerate(p):
                        match = match[codes[match, i] == code]
                    for code in torch.unique(codes[match, lv]).tolist():
                        cand.append(((*p, int(code)), s + float(logp[j, code])))
                cand.sort(key=lambda x: -x[1])
                beams = cand[:beam]
            index = {tuple(r): i for i, r in enumerate(codes[live].tolist())}
            for p, s in beams:
                out[b, live[index[p]]] = s
        return out


def _prefix_tables(codes: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per level l: (distinct prefixes of length l as a (U_l, l) array, each item's row in it (N,))."""
    out = []
    for lv in range(codes.shape[1]):
        if lv == 0:
            out.append((np.zeros((1, 0), np.int64), np.zeros(len(codes), np.int64)))
            continue
        uniq, inverse = np.unique(codes[:, :lv], axis=0, return_inverse=True)
        out.append((uniq.astype(np.int64), inverse.reshape(-1).astype(np.int64)))
    return out


# ----------------------------------------------------------------------------------------------- data
def windows(rows: Sequence[Sequence[int]], context: int, stride: int,
            last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Training windows: for each sequence, windows of up to ``context + 1`` items ending every ``stride`` items
    from its end. Returns ``inputs`` and ``targets``, both (W, context), right-padded with -1; target -1 = no
    loss there. Each next item of a sequence is a target exactly once: a window keeps only its last ``stride``
    targets (the earlier ones belong to the window before it), except the first window of the sequence.

    ``last``: a window ends at every item from the second on (``stride`` ignored) and only its last position
    is a target, so each next item is a target once, read after up to ``context`` items (SASRec's prefixes)."""
    if last:
        return _last_windows(rows, context)
    if stride > context:
        raise SidRecError(f"stride {stride} > context {context}: some items would never be a target")
    ins: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    for seq in rows:
        s = np.asarray(seq, np.int64)
        end = len(s)
        while end >= 2:
            start = max(0, end - context - 1)
            w = s[start:end]
            x = np.full(context, -1, np.int64)
            y = np.full(context, -1, np.int64)
            x[:len(w) - 1] = w[:-1]
            y[:len(w) - 1] = w[1:]
            if start > 0:
                y[:len(w) - 1 - stride] = -1
            ins.append(x)
            outs.append(y)
            if start == 0:
                break
            end -= stride
    if not ins:
        return np.zeros((0, context), np.int64), np.zeros((0, context), np.int64)
    return np.stack(ins), np.stack(outs)


def _last_windows(rows: Sequence[Sequence[int]], context: int) -> tuple[np.ndarray, np.ndarray]:
    ins: list[np.ndarray] = []
    outs: list[np.ndarray] = []
    for seq in rows:
        s = np.asarray(seq, np.int64)
        for end in range(len(s), 1, -1):  # the window s[start:end] predicts s[end - 1] from the items before it
            w = s[max(0, end - context - 1):end]
            x = np.full(context, -1, np.int64)
            y = np.full(context, -1, np.int64)
            x[:len(w) - 1] = w[:-1]
            y[len(w) - 2] = w[-1]
            ins.append(x)
            outs.append(y)
    if not ins:
        return np.zeros((0, context), np.int64), np.zeros((0, context), np.int64)
    return np.stack(ins), np.stack(outs)


def future_targets(rows: Sequence[Sequence[int]], context: int, stride: int, horizon: int) -> np.ndarray:
    """(W, context, horizon): for the windows of :func:`windows` (same order), the item ``k + 1`` positions after
    each input position (``[..., 0]`` is :func:`windows`' targets), -1 where the sequence has ended or the position
    is not a target of this window."""
    _, y1 = windows(rows, context, stride)
    out = np.full((*y1.shape, horizon), -1, np.int64)
    w = 0
    for seq in rows:
        s = np.asarray(seq, np.int64)
        end = len(s)
        while end >= 2:
            start = max(0, end - context - 1)
            for k in range(horizon):
                pos = np.arange(context) + start + 1 + k  # sequence index of the (k+1)-th item after input j
                ok = (pos < len(s)) & (y1[w] >= 0)
                out[w, ok, k] = s[pos[ok]]
            w += 1
            if start == 0:
                break
            end -= stride
    return out


# ----------------------------------------------------------------------------------------------- training
def scores(model: SidRec, histories: Sequence[Sequence[int]], exclude: Sequence[Sequence[int]] | None = None,
           batch_size: int = 256) -> np.ndarray:
    """(B, N) float32 log p(item | history) for every item (exact, or beam search when ``cfg.beam_size``);
    ``exclude[b]`` items get -inf. Eval mode, no grad."""
    was = model.training
    model.eval()
    out = np.empty((len(histories), model.codes.shape[0]), np.float32)
    try:
        with torch.no_grad():
            for s in range(0, len(histories), batch_size):
                hs = histories[s:s + batch_size]
                h = model.last_state(hs)
                allowed = torch.ones((len(hs), model.codes.shape[0]), dtype=torch.bool)
                if exclude is not None:
                    for b, ex in enumerate(exclude[s:s + batch_size]):
                        allowed[b, list(ex)] = False
                if model.cfg.beam_size:
                    lp = model.beam_log_probs(h, allowed, model.cfg.beam_size)
                else:
                    lp = model.item_log_probs(h).masked_fill(~allowed, -math.inf)
                out[s:s + len(hs)] = lp.numpy()
    finally:
        model.train(was)
    return out


def ndcg_at(score_rows: np.ndarray, targets: Sequence[int], k: int = 10) -> np.ndarray:
    """Per row NDCG@k of one relevant item: 1 / log2(rank + 2) when its rank (0-based, ties against it) < k; a
    target scored -inf (masked, e.g. in its own history) gets 0."""
    t = np.asarray(targets)
    own = score_rows[np.arange(len(t)), t]
    rank = (score_rows > own[:, None]).sum(1)
    return np.where(np.isfinite(own) & (rank < k), 1.0 / np.log2(rank + 2.0), 0.0)


def fit_sid_rec(model: SidRec, train_rows: Sequence[Sequence[int]],
                valid: tuple[Sequence[Sequence[int]], Sequence[int]] | None, progress: Progress | None = None,
                time_limit_s: float = 0.0) -> dict[str, Any]:
    """Train on the windows of ``train_rows``; after each epoch score ``valid`` = (histories, targets) by NDCG@10
    (history items excluded) and keep the best epoch's weights; stop after ``patience`` epochs without a better
    one, after ``epochs``, or once ``time_limit_s`` (> 0) has passed. Returns what happened."""
    cfg = model.cfg
    x, y = windows(train_rows, cfg.context_items, cfg.stride, last=cfg.targets == "last")
    if cfg.horizon > 1:
        if cfg.targets == "last":
            raise SidRecError("horizon > 1 needs targets 'window' (a 'last' window has one target)")
        y = future_targets(train_rows, cfg.context_items, cfg.stride, cfg.horizon)
    if len(x) == 0:
        raise SidRecError("no training windows: every sequence has fewer than 2 items")
    rng = np.random.default_rng(cfg.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    total_steps = cfg.epochs * math.ceil(len(x) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: _lr_factor(step, total_steps, cfg))
    best: tuple[float, int, dict[str, torch.Tensor] | None] = (-1.0, -1, None)
    curve: list[dict[str, float]] = []
    # EMA of the floating-point weights: live views into the model's tensors beside their averages
    live = [v for v in model.state_dict().values() if v.is_floating_point()] if cfg.ema else []
    avg = [v.detach().clone() for v in live]
    step = 0
    t0 = time.perf_counter()
    model.train()
    for epoch in range(cfg.epochs):
        order = torch.as_tensor(rng.permutation(len(x)))
        losses = []
        for s in range(0, len(x), cfg.batch_size):
            idx = order[s:s + cfg.batch_size]
            h = model.encode(xt[idx])  # (B, T, d)
            tgt = yt[idx]
            if cfg.horizon == 1:
                keep = tgt >= 0
                loss = model.code_loss(h[keep], tgt[keep])
            else:  # next item weight 1, each later one horizon_weight; a mean over the weights used
                loss, wsum = h.new_zeros(()), 0.0
                for k in range(cfg.horizon):
                    keep = tgt[..., k] >= 0
                    if keep.any():
                        wk = 1.0 if k == 0 else cfg.horizon_weight
                        loss = loss + wk * model.code_loss(h[keep], tgt[..., k][keep])
                        wsum += wk
                loss = loss / wsum
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if cfg.ema:
                decay = min(cfg.ema, (1 + step) / (10 + step))
                with torch.no_grad():
                    torch._foreach_mul_(avg, decay)
                    torch._foreach_add_(avg, live, alpha=1 - decay)
            step += 1
            losses.append(float(loss.detach()))
        row: dict[str, float] = {"epoch": epoch + 1, "loss": round(float(np.mean(losses)), 4),
                                 "s": round(time.perf_counter() - t0, 1)}
        if valid is not None:
            hist, tg = valid
            with _swapped(live, avg):
                nd = float(ndcg_at(scores(model, hist, hist), tg).mean())
                if nd > best[0]:
                    best = (nd, epoch + 1, {k: v.detach().clone() for k, v in model.state_dict().items()})
            row["valid_ndcg@10"] = round(nd, 5)
        curve.append(row)
        if progress is not None:
            progress("sid-rec epoch " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "epoch")
                     + f" ({epoch + 1}/{cfg.epochs})")
        if valid is not None and epoch + 1 - best[1] >= cfg.patience:
            break
        if time_limit_s and time.perf_counter() - t0 > time_limit_s:
            break
    if best[2] is not None:
        model.load_state_dict(best[2])
    elif cfg.ema:
        with torch.no_grad():
            torch._foreach_copy_(live, avg)
    model.eval()
    return {"windows": len(x), "epochs_run": len(curve), "best_epoch": best[1], "valid_ndcg@10": best[0],
            "train_s": round(time.perf_counter() - t0, 1), "curve": curve}


@contextlib.contextmanager
def _swapped(live: list[torch.Tensor], other: list[torch.Tensor]) -> Iterator[None]:
    """Within the block the model's tensors ``live`` hold ``other``'s values (nothing to do when empty)."""
    if not live:
        yield
        return
    saved = [v.clone() for v in live]
    with torch.no_grad():
        torch._foreach_copy_(live, other)
    try:
        yield
    finally:
        with torch.no_grad():
            torch._foreach_copy_(live, saved)


def _lr_factor(step: int, total: int, cfg: SidRecConfig) -> float:
    """The learning rate's multiplier at ``step`` (0-based) of ``total``: linear warm-up over
    ``cfg.warmup_steps``, then 1 (constant) or a cosine from 1 to 0 over the remaining steps."""
    if cfg.warmup_steps and step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.lr_schedule == "constant":
        return 1.0
    done = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, done)))


# ----------------------------------------------------------------------------------------------- the codes
class SidCodesConfig(BaseModel):
    """Where the items' semantic IDs come from: an embedding per item, quantised by residual k-means."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["learned", "cooccurrence", "text", "item"] = Field(
        default="learned", description="learned (default): the item table of a sequence model with one code per "
        "item (an item-id SASRec-like model with this encoder and tied embeddings, trained on the same training "
        "split and stopped on the same validation); cooccurrence: top eigenvectors of the items' PPMI "
        "co-occurrence within `window` positions of the training sequences; text: MiniLM of the item texts; "
        "item: no semantic ID at all, one code per item (the model is then an item-id recommender: the reference "
        "for what sharing codes gains or costs).")
    levels: int = Field(default=2, ge=1, le=8, description="Residual k-means levels (a collision-suffix level is "
                        "added). Default 2.")
    codebook_size: int = Field(default=64, ge=2, le=4096, description="Codes per level (default 64).")
    balanced: bool = Field(default=True, description="Capacity-constrained assignment (default true).")
    unique_leaves: bool = Field(default=False, description="The last level gives each item of a prefix its own "
                                "code (a minimum-cost assignment to that level's centroids), so items collide "
                                "only where a prefix holds more items than codes, instead of sharing their last "
                                "code and being told apart by a collision suffix that means nothing. Default false: "
                                "on MovieLens (2 x 64, where the suffix tells apart 49 % of the items) it lowered "
                                "validation NDCG@10 (learned codes 0.117 vs 0.124 by epoch 14, text codes 0.114 vs "
                                "0.118 by epoch 19): the assignment moves items off the code their residual "
                                "matches, and the suffix costs less than that.")
    pretrain_epochs: int = Field(default=20, ge=1, description="Most epochs of the `learned` source's item-id model "
                                 "(early stopping after 5 without a better validation NDCG@10). Default 20.")
    warm_start: bool = Field(default=False, description="`learned` only: the SID model starts from the item-id "
                             "model's encoder, and each level's code embeddings from that level's k-means "
                             "centroids, so an item's input (the sum of its codes) starts as its quantised item-id "
                             "embedding. Default false.")
    dim: int = Field(default=64, ge=2, description="Dimensions of the `cooccurrence` eigenvectors and the width of "
                     "the `learned` source's item-id model (its feed-forward 4x that, no weight average), whatever "
                     "the SID model's own width; with warm_start that model has the SID model's settings instead "
                     "(default 64).")
    window: int = Field(default=10, ge=1, description="Co-occurrence window of `cooccurrence` (default 10).")
    init: Literal["random", "cooccurrence"] = Field(
        default="random", description="`learned` only: where the item-id model's item table starts. random "
        "(default): N(0, 0.02); cooccurrence: the `cooccurrence` eigenvectors (`dim`, `window`), each row scaled "
        "to the norm of a random row, so an item seen in few training sequences starts where its co-occurrences "
        "put it (MovieLens: validation NDCG@10 of the SID model 0.1280 vs 0.1189, test 0.0904 vs 0.0971).")
    attributes: list[str] = Field(default_factory=list, description="Item attributes joined to the embedding "
                                  "before quantising (any source but `item`): a number becomes a one-hot of "
                                  "`attribute_bins` quantile bins over the items, a string or a list of strings a "
                                  "multi-hot of its values; missing = zeros. Empty = none (default).")
    attribute_weight: float = Field(default=1.0, ge=0, description="Distance an attribute puts between two items "
                                    "with different single values, next to their unit-length embeddings (whose "
                                    "distance is 0-2; default 1): each attribute's part has length weight / "
                                    "sqrt(2).")
    attribute_bins: int = Field(default=16, ge=2, le=1024, description="Quantile bins of a numeric attribute "
                                "(default 16; equal values always share a bin).")


def attribute_features(attributes: Sequence[Mapping[str, Any]], names: Sequence[str], weight: float,
                       bins: int) -> np.ndarray:
    """(N, F) float32: per name, the items' values as a one-hot (numbers: quantile bins over the items that have
    one, equal values in one bin) or a multi-hot (strings, lists of strings), scaled to length ``weight /
    sqrt(2)`` (so two different single values are ``weight`` apart; a multi-hot of m values has ``weight /
    sqrt(2 m)`` in each); an item without the attribute gets zeros there."""
    parts = []
    for name in names:
        values = [a.get(name) for a in attributes]
        present = [v for v in values if v is not None and v != "" and v != []]
        if not present:
            raise SidRecError(f"sid_codes.attributes: no item has attribute {name!r}")
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
            nums = np.asarray(present, np.float64)
            edges = np.unique(np.quantile(nums, np.linspace(0, 1, bins + 1)[1:-1]))
            f = np.zeros((len(values), len(edges) + 1), np.float32)
            for i, v in enumerate(values):
                if v is not None and v != "":
                    f[i, int(np.searchsorted(edges, float(v), side="right"))] = weight / math.sqrt(2)
        else:
            vocab: dict[str, int] = {}
            rows = [[str(t) for t in (v if isinstance(v, list) else [v])] if v not in (None, "", []) else []
                    for v in values]
            for r in rows:
                for t in r:
                    vocab.setdefault(t, len(vocab))
            f = np.zeros((len(values), len(vocab)), np.float32)
            for i, r in enumerate(rows):
                for t in set(r):
                    f[i, vocab[t]] = weight / math.sqrt(2 * len(set(r)))
        parts.append(f)
    return np.concatenate(parts, 1)


@dataclass
class SidInit:
    """Where a SID model can start (:meth:`SidRec.warm_start`): the item-id model's weights, and each SID level's
    k-means centroids in that model's item-embedding space."""

    item_model: dict[str, torch.Tensor]
    centroids: list[np.ndarray]


def learned_embeddings(rows: Sequence[Sequence[int]], n_items: int,
                       valid: tuple[Sequence[Sequence[int]], Sequence[int]] | None, model_cfg: SidRecConfig,
                       epochs: int, progress: Progress | None = None,
                       state: dict[str, torch.Tensor] | None = None,
                       init: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """Train the model with one code per item (``codes = [[0], [1], …]``: an item-id sequential recommender with
    this model's encoder, tied embeddings, parallel head) and return its item table ``(n_items, hidden)`` (with
    tied embeddings the input and output tables are one), plus its training info. ``state``, when given, receives
    the trained model's weights. ``init`` (n_items, hidden), when given, is where the item table starts."""
    cfg = model_cfg.model_copy(update={"head": "parallel", "tie": True, "epochs": epochs, "patience": 5,
                                       "beam_size": 0})
    torch.manual_seed(cfg.seed)
    model = SidRec(np.arange(n_items)[:, None], cfg)
    table = model.code_emb[0]
    assert isinstance(table, nn.Embedding)
    if init is not None:
        if init.shape != (n_items, cfg.hidden):
            raise SidRecError(f"item table init is {init.shape}, the model's table ({n_items}, {cfg.hidden})")
        with torch.no_grad():
            table.weight.copy_(torch.as_tensor(init, dtype=torch.float32))
    info = fit_sid_rec(model, rows, valid, progress)
    x = table.weight.detach().numpy().astype(np.float32)
    if state is not None:
        state.update({k: v.detach().clone() for k, v in model.state_dict().items()})
    return np.ascontiguousarray(x), info


def quantise(x: np.ndarray, cfg: SidCodesConfig, seed: int, popularity: np.ndarray | None = None,
             centroids: list[np.ndarray] | None = None) -> np.ndarray:
    """(N, levels + 1) codes: balanced residual k-means of ``x`` plus a collision suffix (the most popular item of
    a group of equal codes gets suffix 0). ``centroids``, when given, receives each level's (K_l, D) centroids."""
    from sid.quantize import ResidualKMeans, RQKMeansConfig, add_collision_suffix, unique_last_level

    size = min(cfg.codebook_size, len(x))
    q = ResidualKMeans(RQKMeansConfig(levels=cfg.levels, codebook_size=size, balanced=cfg.balanced, seed=seed))
    codes = q.fit(x).encode(x)
    if cfg.unique_leaves:
        codes = unique_last_level(q, x, codes)
    if centroids is not None:
        centroids.extend(np.asarray(c, np.float32) for c in q.centroids)
    order = None if popularity is None else -np.asarray(popularity, np.float64)
    return add_collision_suffix(codes, order)


def build_codes(train_rows: Sequence[Sequence[int]], n_items: int,
                valid: tuple[Sequence[Sequence[int]], Sequence[int]] | None, model_cfg: SidRecConfig,
                codes_cfg: SidCodesConfig, seed: int, item_texts: Callable[[], list[str]] | None = None,
                cache_dir: Any = None, progress: Progress | None = None,
                item_attributes: Callable[[], Sequence[Mapping[str, Any]]] | None = None
                ) -> tuple[np.ndarray, dict[str, Any], SidInit | None]:
    """Every item's SID from ``codes_cfg.source``: (N, levels + 1) codes (N, 1 for ``item``), what was done, and
    where the SID model starts (``codes_cfg.warm_start`` with the ``learned`` source; else None). ``item_texts``
    gives the items' texts in row order (``text`` only; MiniLM, cached in ``cache_dir``)."""
    if codes_cfg.warm_start and codes_cfg.source != "learned":
        raise SidRecError(f"sid_codes.warm_start needs source 'learned' (the item-id model), not "
                          f"{codes_cfg.source!r}")
    t0 = time.perf_counter()
    info: dict[str, Any] = {}
    state: dict[str, torch.Tensor] = {}
    centroids: list[np.ndarray] = []
    popularity = np.bincount(np.concatenate([np.asarray(r, np.int64) for r in train_rows] or [np.zeros(0, np.int64)]),
                             minlength=n_items)
    if codes_cfg.source == "item":
        codes = np.arange(n_items)[:, None]
    else:
        if codes_cfg.source == "learned":
            # the SID model's own settings where it starts from this model (warm_start), else codes_cfg.dim wide
            item_cfg = model_cfg if codes_cfg.warm_start else model_cfg.model_copy(update={
                "hidden": codes_cfg.dim, "inner": 4 * codes_cfg.dim, "ema": 0.0,
                "decoder_inner": 4 * codes_cfg.dim if model_cfg.decoder_inner else 0})
            start = None
            if codes_cfg.init == "cooccurrence":  # unit rows scaled to a N(0, 0.02) row's expected norm
                start = cooccurrence_embeddings(train_rows, n_items, item_cfg.hidden, codes_cfg.window, seed)
                start *= 0.02 * math.sqrt(item_cfg.hidden)
            x, pre = learned_embeddings(train_rows, n_items, valid, item_cfg, codes_cfg.pretrain_epochs, progress,
                                        state, start)
            info["pretrain"] = {**{k: v for k, v in pre.items() if k != "curve"}, "dim": int(x.shape[1])}
        elif codes_cfg.source == "cooccurrence":
            x = cooccurrence_embeddings(train_rows, n_items, codes_cfg.dim, codes_cfg.window, seed)
        else:
            if item_texts is None:
                raise SidRecError("sid_codes.source 'text' needs the items' texts (item_texts)")
            from infra.text_encoder import encode_cached

            x = encode_cached(item_texts(), cache_dir)
        if codes_cfg.attributes:
            if item_attributes is None:
                raise SidRecError("sid_codes.attributes needs the items' attributes (item_attributes)")
            if codes_cfg.warm_start:
                raise SidRecError("sid_codes.attributes cannot be used with warm_start (the centroids would not "
                                  "be in the item-id model's space)")
            norms = np.linalg.norm(x, axis=1, keepdims=True)
            unit = np.divide(x, norms, out=np.zeros_like(x, dtype=np.float32), where=norms > 0)
            feats = attribute_features(item_attributes(), codes_cfg.attributes, codes_cfg.attribute_weight,
                                       codes_cfg.attribute_bins)
            if len(feats) != n_items:
                raise SidRecError(f"item_attributes gave {len(feats)} items, expected {n_items}")
            x = np.concatenate([unit, feats], 1)
        codes = quantise(np.ascontiguousarray(x, np.float32), codes_cfg, seed, popularity, centroids)
    info["sids"] = {"source": codes_cfg.source, "shape": list(codes.shape),
                    "levels": [int(codes[:, lv].max()) + 1 for lv in range(codes.shape[1])],
                    "collision_rate": round(float((codes[:, -1] > 0).mean()), 4) if codes.shape[1] > 1 else 0.0,
                    "max_suffix": int(codes[:, -1].max()) if codes.shape[1] > 1 else 0,
                    "seconds": round(time.perf_counter() - t0, 1)}
    return codes, info, (SidInit(state, centroids) if codes_cfg.warm_start else None)
