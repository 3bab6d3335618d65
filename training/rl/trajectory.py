"""Trajectories as training samples: one token sequence per multi-turn episode, with a mask on the model's tokens.

A rollout is **token in, token out**: the sequence the trainer sees is exactly the context the policy
had when it generated, never a re-rendering of the chat (a re-tokenised assistant message can differ
from the tokens the model actually sampled, and then the behaviour log-probs no longer line up).
:class:`SequenceBuilder` grows it step by step::

    prompt_0 | completion_0 | context_1 | completion_1 | ... | completion_n
    mask:  0 |            1 |         0 |            1 | ... |            1

``context_k`` is the chat template's rendering of what came back after step ``k-1`` (tool results,
the simulated user's answer) up to the next assistant generation prompt; the harness computes it
(:func:`harness.agent.context_delta`) and every prompt it sends extends the previous one by it.
Only completion tokens carry a loss: ``mask`` is 1 on them and 0
on prompt, tool output, user text and the eos the harness appends to a completion cut at its token cap.

:func:`pack` right-pads a list of trajectories into the (B, T) tensors the losses in
:mod:`training.rl.algorithms` take; ``logprobs``/``mask``/``chunks`` align with ``input_ids``
(entry ``t`` is about token ``t``; the trainer scores token ``t`` with the logits at ``t - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Trajectory:
    """One episode as one training sample, plus what the controller needs to schedule and log it."""

    task_id: str
    group: int = field(metadata={"help": "Group key: the G samples of one task in one round share it."})
    sample: int
    tokens: list[int]
    mask: list[int]
    logprobs: list[float]
    chunks: list[int]
    versions: list[int] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    parts: dict[str, float] = field(default_factory=dict)
    steps: int = 0
    reason: str | None = None
    degraded: bool = False
    item_ids: list[str] = field(default_factory=list)
    reply: str = ""
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def version(self) -> int:
        """The oldest policy version that generated any of its tokens (what staleness is measured by)."""
        return min(self.versions) if self.versions else -1

    @property
    def response_tokens(self) -> int:
        return int(sum(self.mask))

    def check(self) -> None:
        n = len(self.tokens)
        if not (len(self.mask) == len(self.logprobs) == len(self.chunks) == n):
            raise ValueError(f"trajectory {self.task_id}/{self.sample}: tokens {n}, mask {len(self.mask)}, "
                             f"logprobs {len(self.logprobs)}, chunks {len(self.chunks)} must align")


class SequenceBuilder:
    """Grows one episode's token sequence: context tokens (mask 0) and completion tokens (mask 1)."""

    def __init__(self, prompt: Sequence[int]) -> None:
        if not prompt:
            raise ValueError("the first prompt is empty")
        self.tokens: list[int] = [int(t) for t in prompt]
        self.mask: list[int] = [0] * len(prompt)
        self.logprobs: list[float] = [0.0] * len(prompt)
        self.chunks: list[int] = [-1] * len(prompt)
        self.versions: list[int] = []

    def add_completion(self, token_ids: Sequence[int], logprobs: Sequence[float], version: int) -> None:
        """The policy's tokens for step ``len(versions)``, with their behaviour log-probs."""
        if len(token_ids) != len(logprobs):
            raise ValueError(f"{len(token_ids)} completion tokens but {len(logprobs)} log-probs")
        step = len(self.versions)
        self.tokens.extend(int(t) for t in token_ids)
        self.mask.extend([1] * len(token_ids))
        self.logprobs.extend(float(x) for x in logprobs)
        self.chunks.extend([step] * len(token_ids))
        self.versions.append(int(version))

    def add_context(self, token_ids: Sequence[int]) -> None:
        """Tokens the policy did not choose (tool results, user text, template markup)."""
        self.tokens.extend(int(t) for t in token_ids)
        self.mask.extend([0] * len(token_ids))
        self.logprobs.extend([0.0] * len(token_ids))
        self.chunks.extend([-1] * len(token_ids))


@dataclass
class PackedBatch:
    """Right-padded tensors of B trajectories, T = the longest. ``mask`` is float (B, T), 1 on policy tokens."""

    input_ids: torch.Tensor  # (B, T) long
    attention: torch.Tensor  # (B, T) long, 1 on real tokens
    mask: torch.Tensor       # (B, T) float
    old_logp: torch.Tensor   # (B, T) float, behaviour log-probs on mask, 0 elsewhere
    chunks: torch.Tensor     # (B, T) long, step index on mask, -1 elsewhere
    rewards: torch.Tensor    # (B,) float
    group_ids: torch.Tensor  # (B,) long


def pack(trajectories: Sequence[Trajectory], pad_id: int) -> PackedBatch:
    """Right-pad ``trajectories`` into one batch (padding has attention 0, mask 0, chunk -1)."""
    if not trajectories:
        raise ValueError("cannot pack an empty batch")
    for t in trajectories:
        t.check()
    b, width = len(trajectories), max(len(t.tokens) for t in trajectories)
    ids = torch.full((b, width), pad_id, dtype=torch.long)
    attention = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.float32)
    old = torch.zeros((b, width), dtype=torch.float32)
    chunks = torch.full((b, width), -1, dtype=torch.long)
    for row, t in enumerate(trajectories):
        n = len(t.tokens)
        ids[row, :n] = torch.tensor(t.tokens, dtype=torch.long)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(t.mask, dtype=torch.float32)
        old[row, :n] = torch.tensor(t.logprobs, dtype=torch.float32)
        chunks[row, :n] = torch.tensor(t.chunks, dtype=torch.long)
    if mask[:, 0].any():
        raise ValueError("a trajectory starts with a policy token: the first token has no context to score it")
    rewards = torch.tensor([t.reward for t in trajectories], dtype=torch.float32)
    groups = torch.tensor([t.group for t in trajectories], dtype=torch.long)
    return PackedBatch(ids, attention, mask, old, chunks, rewards, groups)
