"""The actor-train role's work: log-probs of packed trajectories, the policy update, RFT steps, weights out.

**Shared-prefix forward.** Every trajectory of a batch starts with the same system prompt and tool
schemas (~4k tokens with the tiny tokenizer) and differs only after the first user message. The
forward pass runs that common prefix once, ``(1, P)``, repeats its key/value cache over the batch
and runs only the suffixes, ``(B, T - P)``. Gradients flow back through the repeat into the one
prefix pass, so the log-probs and gradients equal the full ``(B, T)`` pass (up to float error; a
test checks both), at ``P + B (T - P)`` tokens of work instead of ``B T``. The prefix stops before
the first policy token of any row (``mask``), so it never holds a token that carries a loss.

Run its tests: ``.venv/bin/python -m pytest tests/training/rl -q``
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import DynamicCache

from training.rl import algorithms as alg
from training.rl.trajectory import PackedBatch, Trajectory, pack

Advantage = Literal["grpo", "dr_grpo", "lite_ppo", "rloo"]
ADVANTAGES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "grpo": alg.grpo_advantages, "dr_grpo": alg.dr_grpo_advantages, "lite_ppo": alg.lite_ppo_advantages,
    "rloo": alg.rloo_advantages,
}
MIN_SHARED_PREFIX = 32
"""Below this many common tokens the batch runs as one plain forward."""


class TrainerSettings(BaseModel):
    """The policy update. Validated on construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lr: float = Field(1e-4, gt=0, description="AdamW learning rate (constant).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    advantage: Advantage = Field("grpo", description="Advantage estimator: grpo, dr_grpo, lite_ppo or rloo.")
    chunk_ratio: bool = Field(False, description="Chunk-level (IPA) importance ratios: one per model action.")
    clip_low: float = Field(0.2, ge=0, description="PPO clip below 1 (ε_low).")
    clip_high: float = Field(0.28, ge=0, description="PPO clip above 1 (ε_high; > clip_low = clip-higher).")
    kl_coef: float = Field(0.0, ge=0, description="k3 KL to the reference (the starting weights); 0 = no reference.")
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus coefficient; 0 = off.")
    aggregation: alg.Aggregation = Field("token", description="Loss aggregation: token, seq or seq-sum-norm.")
    micro_batch: int = Field(16, ge=1, description="Trajectories per forward/backward (gradients accumulate).")

    def loss_config(self) -> alg.LossConfig:
        return alg.LossConfig(clip_low=self.clip_low, clip_high=self.clip_high, kl_coef=self.kl_coef,
                              entropy_coef=self.entropy_coef, aggregation=self.aggregation)


def shared_prefix_len(batch: PackedBatch) -> int:
    """Tokens every row shares from the start, stopping before any row's first policy token or padding."""
    ids, lengths = batch.input_ids, batch.attention.sum(dim=1)
    same = (ids == ids[:1]).all(dim=0)  # (T,)
    common = int(same.long().cumprod(dim=0).sum().item())
    first_policy = [int(torch.nonzero(row).min().item()) if row.any() else int(n) for row, n in
                    zip(batch.mask, lengths, strict=True)]
    return min(common, *first_policy, int(lengths.min().item()) - 1)


OPENING = 64
"""Tokens that tell trajectories of different apps apart (their system prompts): micro-batches never mix openings."""


def micro_batches(trajs: Sequence[Trajectory], size: int) -> list[list[int]]:
    """Indices of ``trajs`` in micro-batches of at most ``size``: trajectories grouped by their first
    :data:`OPENING` tokens (first seen first), each group cut in order. A multi-app batch so keeps one app's
    system prompt per micro-batch, where the shared-prefix forward pays; a one-app batch is cut in order."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, t in enumerate(trajs):
        groups.setdefault(tuple(t.tokens[:OPENING]), []).append(i)
    return [idx[lo:lo + size] for idx in groups.values() for lo in range(0, len(idx), size)]


def token_logprobs(model: Any, batch: PackedBatch, *, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log π(token_t | tokens_<t)`` for every position ``t >= 1`` (0 at ``t = 0``), (B, T); and the entropy
    of the predictive distribution at each position if asked. Uses the shared-prefix forward when it pays."""
    ids, attn = batch.input_ids, batch.attention
    b, t = ids.shape
    p = shared_prefix_len(batch)
    if p >= MIN_SHARED_PREFIX and b > 1:
        pre = model(input_ids=ids[:1, :p], use_cache=True)
        cache = pre.cache
        layers = [(layer.keys.repeat(b, 1, 1, 1), layer.values.repeat(b, 1, 1, 1)) for layer in cache.layers]
        out = model(input_ids=ids[:, p:], attention_mask=attn,
                    position_ids=torch.arange(p, t).unsqueeze(0).expand(b, -1), cache=DynamicCache(layers))
        # logits predicting tokens p..t-1: the prefix's last position, then the suffix's all but last
        logits = torch.cat([pre.logits[:, -1:].expand(b, -1, -1), out.logits[:, :-1]], dim=1)  # (B, T-P, V)
        start = p
    else:
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]  # (B, T-1, V)
        start = 1
    assert logits.shape[:2] == (b, t - start), f"logits {tuple(logits.shape)} for batch {(b, t)} from {start}"
    logp_all = torch.log_softmax(logits.float(), dim=-1)
    picked = logp_all.gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)  # (B, T-start)
    logp = torch.cat([torch.zeros(b, start, dtype=picked.dtype), picked], dim=1)
    entropy = None
    if with_entropy:
        ent = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.cat([torch.zeros(b, start, dtype=ent.dtype), ent], dim=1)
    return logp, entropy


def trajectory_advantages(trajs: Sequence[Trajectory], estimator: Advantage) -> torch.Tensor:
    """One advantage per trajectory from its reward and group, (B,)."""
    rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float32)
    groups = torch.tensor([t.group for t in trajs], dtype=torch.long)
    return ADVANTAGES[estimator](rewards, groups)


class PolicyTrainer:
    """Owns the policy being trained (and a frozen reference when ``kl_coef > 0``) and its optimizer."""

    def __init__(self, model: torch.nn.Module, pad_id: int, settings: TrainerSettings, *,
                 reference: torch.nn.Module | None = None) -> None:
        if settings.kl_coef > 0 and reference is None:
            raise ValueError("kl_coef > 0 needs a reference model")
        self.model, self.pad_id, self.settings = model, pad_id, settings
        self.reference = reference.eval() if reference is not None else None
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.lr,
                                           weight_decay=settings.weight_decay)
        self.version = 0

    def rl_step(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """One policy-gradient update on ``trajs`` (their groups complete); returns the loss parts. A batch without
        a policy token (every episode answered before any model call: livestream's reader when sure, or the
        fallback) leaves the weights as they are and still counts as an update (``version`` + 1, so weight syncs
        stay in step); its parts say ``no_policy_tokens``."""
        s = self.settings
        adv = trajectory_advantages(trajs, s.advantage)
        tokens = sum(t.response_tokens for t in trajs)
        if tokens == 0:
            self.version += 1
            return {"no_policy_tokens": 1.0, "grad_norm": 0.0}
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        sums: dict[str, float] = {}
        for idx in micro_batches(trajs, s.micro_batch):
            part = [trajs[i] for i in idx]
            batch = pack(part, self.pad_id)
            logp, entropy = token_logprobs(self.model, batch, with_entropy=s.entropy_coef > 0)
            ref = None
            if self.reference is not None:
                with torch.no_grad():
                    ref, _ = token_logprobs(self.reference, batch)
            a = adv[idx].unsqueeze(1).expand_as(batch.mask)  # (B, T)
            loss, parts = alg.policy_loss(logp, batch.old_logp, a, batch.mask, s.loss_config(), ref_logp=ref,
                                          entropy=entropy, chunk_ids=batch.chunks if s.chunk_ratio else None)
            weight = self._weight(batch, tokens, len(part), len(trajs))
            (loss * weight).backward()
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + v * weight
        sums["grad_norm"] = self._step()
        return sums

    def _weight(self, batch: PackedBatch, tokens: int, rows: int, total_rows: int) -> float:
        """Share of a micro-batch in the full batch's aggregate, so accumulation equals one big batch."""
        if self.settings.aggregation == "token":
            return float(batch.mask.sum().item()) / tokens
        return rows / total_rows

    def sft_step(self, trajs: Sequence[Trajectory]) -> dict[str, float]:
        """One supervised step (rejection-sampling fine-tuning): mean NLL of the policy tokens of ``trajs``."""
        tokens = sum(t.response_tokens for t in trajs)
        if tokens == 0:
            raise ValueError("no policy tokens in the batch")
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for idx in micro_batches(trajs, self.settings.micro_batch):
            batch = pack([trajs[i] for i in idx], self.pad_id)
            logp, _ = token_logprobs(self.model, batch)
            loss = -(logp * batch.mask).sum() / tokens
            loss.backward()
            total += float(loss.detach())
        return {"nll": total, "grad_norm": self._step()}

    def _step(self) -> float:
        params = [p for p in self.model.parameters() if p.requires_grad]
        norm = torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        self.optimizer.step()
        self.version += 1
        return float(norm)

    def state_numpy(self) -> dict[str, np.ndarray]:
        """The policy's weights as numpy arrays (moving numpy between Ray actors is ~10x cheaper than tensors)."""
        return {k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()}


def state_from_numpy(state: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
