"""RL advantage estimators and policy losses for LLM agents, each with its paper and formula.

Shapes: a batch of ``B`` trajectories (one training sample per trajectory), grouped ``G`` per task
(``group_ids`` (B,) says which group each row is in), tokens padded to ``T``; ``mask`` (B, T) is 1
on tokens the policy generated and 0 on prompt, tool-output and padding tokens.

Advantages (one scalar per trajectory, broadcast over its tokens, except ReBN which is per turn):

- :func:`grpo_advantages` — GRPO (Shao et al. 2024, DeepSeekMath): ``A_i = (r_i - mean_g r) / (std_g r + eps)``.
- :func:`dr_grpo_advantages` — Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"):
  ``A_i = r_i - mean_g r`` (no std division), paired with :func:`aggregate` ``"seq-sum-norm"``.
- :func:`lite_ppo_advantages` — Lite PPO (Liu et al. 2025, "Tricks or Traps? A Deep Dive into RL for
  LLM Reasoning"): group-level mean, batch-level std, ``A_i = (r_i - mean_g r) / (std_batch r + eps)``,
  with token-level loss aggregation.
- :func:`rloo_advantages` — RLOO (Ahmadian et al. 2024): ``A_i = r_i - (1 / (G - 1)) Σ_{j≠i} r_j``.
- :func:`rebn_advantages` — ReBN (GEM, Liu et al. 2025): per-turn discounted returns
  ``R_t = Σ_{k≥t} γ^{k-t} r_k`` of multi-turn episodes, normalised over every turn of the batch,
  ``A_t = (R_t - mean R) / (std R + eps)``.

Standard deviations are population (``ddof=0``) stds. Groups of one get advantage 0 under GRPO,
Dr. GRPO, Lite PPO and RLOO (no baseline can be formed from the group alone).

Ratios and losses:

- :func:`chunk_log_ratio` — chunk-level importance ratios (IPA, ROME 2025): the token log-ratios
  ``log π_θ - log π_old`` are averaged within each chunk (an interaction step) and every token of the
  chunk gets ``exp(mean)``: a geometric-mean ratio per chunk instead of one per token.
- :func:`ppo_clip_loss` — PPO clipped surrogate (Schulman et al. 2017) with clip-higher (DAPO, Yu et al.
  2025): ``-min(ρ A, clip(ρ, 1 - ε_low, 1 + ε_high) A)`` per token.
- :func:`k3_kl` — the k3 estimator of KL(π_θ || π_ref) (Schulman 2020): ``exp(l_ref - l) - (l_ref - l) - 1``.
- :func:`aggregate` — ``"token"`` mean over every valid token of the batch (DAPO / Lite PPO),
  ``"seq"`` mean per sequence then over sequences (GRPO), ``"seq-sum-norm"`` sum over tokens divided
  by ``B * T`` (Dr. GRPO's constant normaliser).
- :func:`policy_loss` — the full objective: clipped surrogate + β_KL · k3 − β_H · entropy, aggregated.
- :func:`combine_rewards` — multi-objective rewards as a weighted sum (LiveThinking: correctness,
  helpfulness, brevity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token", "seq", "seq-sum-norm"]
EPS = 1e-6


# ------------------------------------------------------------------------------------------------ group statistics
def _group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group indices 0..n_groups-1 for arbitrary ids, and the number of groups."""
    assert group_ids.dim() == 1, f"group_ids must be (B,), got {tuple(group_ids.shape)}"
    _, index = torch.unique(group_ids, return_inverse=True)
    return index, int(index.max().item()) + 1 if index.numel() else 0


def _group_mean_std(rewards: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, population std and group size, each (B,)."""
    assert rewards.shape == group_ids.shape, f"rewards {tuple(rewards.shape)} vs group_ids {tuple(group_ids.shape)}"
    index, n = _group_index(group_ids)
    r = rewards.double()
    count = torch.zeros(n, dtype=torch.float64).index_add_(0, index, torch.ones_like(r))
    mean = torch.zeros(n, dtype=torch.float64).index_add_(0, index, r) / count
    var = torch.zeros(n, dtype=torch.float64).index_add_(0, index, (r - mean[index]) ** 2) / count
    return mean[index], var[index].sqrt(), count[index]


def grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """GRPO: ``(r - mean_g) / (std_g + eps)``, (B,) float32."""
    mean, std, count = _group_mean_std(rewards, group_ids)
    adv = (rewards.double() - mean) / (std + eps)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def dr_grpo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: ``r - mean_g`` (no std), (B,) float32."""
    mean, _, count = _group_mean_std(rewards, group_ids)
    adv = rewards.double() - mean
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def lite_ppo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """Lite PPO: group mean, batch std: ``(r - mean_g) / (std_batch + eps)``, (B,) float32."""
    mean, _, count = _group_mean_std(rewards, group_ids)
    std = rewards.double().std(unbiased=False) if rewards.numel() > 1 else torch.tensor(0.0, dtype=torch.float64)
    adv = (rewards.double() - mean) / (std + eps)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO: ``r_i - mean of the other rewards of the group`` = ``G / (G - 1) · (r_i - mean_g)``, (B,) float32."""
    mean, _, count = _group_mean_std(rewards, group_ids)
    adv = (rewards.double() - mean) * count / (count - 1).clamp(min=1)
    return torch.where(count > 1, adv, torch.zeros_like(adv)).float()


def rebn_advantages(turn_rewards: Sequence[Sequence[float]], gamma: float = 1.0, eps: float = EPS
                    ) -> list[torch.Tensor]:
    """ReBN: per-turn discounted returns of each episode, normalised over all turns of the batch.

    ``turn_rewards[b]`` are episode b's per-turn rewards; returns one (turns_b,) tensor per episode.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    returns: list[torch.Tensor] = []
    for rewards in turn_rewards:
        out = torch.zeros(len(rewards), dtype=torch.float64)
        running = 0.0
        for t in range(len(rewards) - 1, -1, -1):
            running = float(rewards[t]) + gamma * running
            out[t] = running
        returns.append(out)
    flat = torch.cat(returns) if returns else torch.zeros(0, dtype=torch.float64)
    if flat.numel() == 0:
        return [r.float() for r in returns]
    mean, std = flat.mean(), flat.std(unbiased=False)
    return [((r - mean) / (std + eps)).float() for r in returns]


# ------------------------------------------------------------------------------------------------ ratios and losses
def chunk_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, chunk_ids: torch.Tensor, mask: torch.Tensor
                    ) -> torch.Tensor:
    """Chunk-level (IPA) log-ratios: every masked token gets the mean token log-ratio of its chunk, (B, T).

    ``chunk_ids`` (B, T) numbers the chunks within each row (any integers; equal = same chunk);
    unmasked tokens get 0.
    """
    assert logp.shape == old_logp.shape == chunk_ids.shape == mask.shape, "logp, old_logp, chunk_ids, mask: (B, T)"
    B = logp.shape[0]
    m = mask.to(logp.dtype)
    token = (logp - old_logp) * m  # (B, T)
    # one flat id per (row, chunk): rows never share a chunk
    _, flat = torch.unique(chunk_ids + (torch.arange(B).unsqueeze(1) * (int(chunk_ids.max().item()) + 1)),
                           return_inverse=True)
    n = int(flat.max().item()) + 1
    sums = torch.zeros(n, dtype=logp.dtype).index_add_(0, flat.reshape(-1), token.reshape(-1))
    counts = torch.zeros(n, dtype=logp.dtype).index_add_(0, flat.reshape(-1), m.reshape(-1))
    mean = sums / counts.clamp(min=1)
    return mean[flat] * m  # (B, T)


def ppo_clip_loss(log_ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float = 0.2,
                  clip_high: float = 0.28) -> torch.Tensor:
    """Per-token clipped surrogate ``-min(ρ A, clip(ρ, 1-ε_low, 1+ε_high) A)``, (B, T).

    ``advantages`` is (B,) (broadcast over tokens) or (B, T).
    """
    if clip_low < 0 or clip_high < 0:
        raise ValueError("clip ranges must be >= 0")
    adv = advantages.unsqueeze(-1) if advantages.dim() == log_ratio.dim() - 1 else advantages
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return -torch.minimum(ratio * adv, clipped * adv)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(π_θ || π_ref) per token: ``exp(l_ref - l) - (l_ref - l) - 1`` (>= 0), (B, T)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: Aggregation = "token") -> torch.Tensor:
    """Reduce per-token ``values`` (B, T) over valid tokens ``mask`` (B, T) to a scalar (see module doc)."""
    assert values.shape == mask.shape, f"values {tuple(values.shape)} vs mask {tuple(mask.shape)}"
    m = mask.to(values.dtype)
    if mode == "token":
        return (values * m).sum() / m.sum().clamp(min=1)
    if mode == "seq":
        per_seq = (values * m).sum(-1) / m.sum(-1).clamp(min=1)  # (B,)
        has = (m.sum(-1) > 0).to(values.dtype)
        return (per_seq * has).sum() / has.sum().clamp(min=1)
    if mode == "seq-sum-norm":
        return (values * m).sum() / float(values.shape[0] * values.shape[1])
    raise ValueError(f"unknown aggregation {mode!r}; expected token, seq or seq-sum-norm")


@dataclass(frozen=True)
class LossConfig:
    """Coefficients of :func:`policy_loss`. ``kl_coef`` 0 = no reference needed; ``entropy_coef`` 0 = off."""

    clip_low: float = 0.2
    clip_high: float = 0.28
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    aggregation: Aggregation = "token"


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                cfg: LossConfig | None = None, *, ref_logp: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None, chunk_ids: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, dict[str, float]]:
    """The scalar loss to minimise and its parts: clipped surrogate (+ k3 KL) (- entropy bonus), aggregated.

    ``chunk_ids`` switches the ratio to chunk level (IPA); ``ref_logp`` is required when ``kl_coef > 0``.
    """
    cfg = cfg or LossConfig()
    log_ratio = chunk_log_ratio(logp, old_logp, chunk_ids, mask) if chunk_ids is not None else logp - old_logp
    per_token = ppo_clip_loss(log_ratio, advantages, cfg.clip_low, cfg.clip_high)
    parts: dict[str, float] = {"pg": float(aggregate(per_token, mask, cfg.aggregation).detach())}
    if cfg.kl_coef:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp (the reference policy's log-probs)")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + cfg.kl_coef * kl
        parts["kl"] = float(aggregate(kl, mask, cfg.aggregation).detach())
    if cfg.entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        per_token = per_token - cfg.entropy_coef * entropy
        parts["entropy"] = float(aggregate(entropy, mask, cfg.aggregation).detach())
    ratio = torch.exp(log_ratio)
    clipped = ((ratio < 1 - cfg.clip_low) | (ratio > 1 + cfg.clip_high)).to(logp.dtype)
    parts["clip_fraction"] = float(aggregate(clipped, mask, "token").detach())
    return aggregate(per_token, mask, cfg.aggregation), parts


def combine_rewards(parts: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Weighted sum of reward parts; a weight naming no part is an error (a typo would silently weigh 0)."""
    missing = sorted(set(weights) - set(parts))
    if missing:
        raise KeyError(f"reward weights name parts that are not computed: {missing}; parts: {sorted(parts)}")
    return float(sum(weights[k] * parts[k] for k in weights))


def zero_variance_groups(rewards: torch.Tensor, group_ids: torch.Tensor, tol: float = 1e-9) -> torch.Tensor:
    """Dynamic sampling (DAPO): a (B,) bool mask of rows whose group's rewards are all equal (to drop)."""
    _, std, _ = _group_mean_std(rewards, group_ids)
    return std <= tol
