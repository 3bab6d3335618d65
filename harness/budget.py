"""Latency budgets: a deadline per turn, and how many tokens and tool steps fit in what is left of it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass
class Budget:
    """A turn's deadline (``budget_ms`` from ``start``, monotonic clock) and its step cap.

    The loop asks :meth:`token_cap` before each model call: the tokens the engine can decode in the
    time left, given its measured per-sequence speed, minus ``reserve_ms`` kept for the tools and the
    fallback. Below ``min_tokens`` the loop stops calling the model and falls back.
    """

    budget_ms: float
    max_steps: int = 4
    reserve_ms: float = 50.0
    start: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        if self.budget_ms <= 0:
            raise ValueError(f"budget_ms must be > 0, got {self.budget_ms}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.start) * 1000.0

    def remaining_ms(self) -> float:
        return self.budget_ms - self.elapsed_ms()

    def expired(self) -> bool:
        return self.remaining_ms() <= 0

    def token_cap(self, tokens_per_second: float | None, ceiling: int, prefill_ms: float = 0.0) -> int:
        """Tokens that fit in the time left (at most ``ceiling``); ``ceiling`` when the speed is unknown.

        ``prefill_ms`` is the expected cost of reading the prompt, subtracted before decoding.
        """
        if tokens_per_second is None or tokens_per_second <= 0:
            return ceiling
        usable_s = (self.remaining_ms() - self.reserve_ms - prefill_ms) / 1000.0
        return max(0, min(ceiling, int(usable_s * tokens_per_second)))
