"""Latency budgets: a deadline per turn, and how many tokens and tool steps fit in what is left of it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from infra.engines.base import CallCost


@dataclass
class Budget:
    """A turn's deadline (``budget_ms`` from ``start``, monotonic clock) and its step cap.

    ``start`` is when the request arrived (serving passes the handler's arrival time, so time spent
    waiting for a worker counts). The loop asks :meth:`tokens_for` before each model call: the tokens the
    engine can decode in the time left, from its measured cost (wait in the queue, prefill, ms per
    decode step at the current batch size), minus ``reserve_ms`` kept for the tools and the fallback.
    Below ``min_tokens`` the loop stops calling the model and falls back.

    ``hard``: the model calls carry the deadline (``start + budget_ms - reserve_ms``) and the
    :attr:`cancel` event, so the engine drops the turn's rows once it is out of time or cancelled
    (serving sets it; eval and RL leave it off so their results do not depend on the machine's load).
    """

    budget_ms: float
    max_steps: int = 4
    reserve_ms: float = 50.0
    start: float = field(default_factory=time.monotonic)
    hard: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        if self.budget_ms <= 0:
            raise ValueError(f"budget_ms must be > 0, got {self.budget_ms}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.reserve_ms < 0:
            raise ValueError(f"reserve_ms must be >= 0, got {self.reserve_ms}")

    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.start) * 1000.0

    def remaining_ms(self) -> float:
        return self.budget_ms - self.elapsed_ms()

    def expired(self) -> bool:
        return self.cancel.is_set() or self.remaining_ms() <= 0

    @property
    def deadline(self) -> float:
        """``time.monotonic()`` seconds by which the model must be done (the budget less ``reserve_ms``)."""
        return self.start + (self.budget_ms - self.reserve_ms) / 1000.0

    def token_cap(self, tokens_per_second: float | None, ceiling: int, prefill_ms: float = 0.0) -> int:
        """Tokens that fit in the time left (at most ``ceiling``); ``ceiling`` when the speed is unknown.

        ``prefill_ms`` is the expected cost of reading the prompt, subtracted before decoding. Used for
        engines that do not measure their call cost (see :meth:`tokens_for`).
        """
        if tokens_per_second is None or tokens_per_second <= 0:
            return ceiling
        usable_s = (self.remaining_ms() - self.reserve_ms - prefill_ms) / 1000.0
        return max(0, min(ceiling, int(usable_s * tokens_per_second)))

    def tokens_for(self, cost: CallCost, wait_ms: float, ceiling: int) -> int:
        """Tokens one model call can generate before the deadline (at most ``ceiling``): the time left, less
        ``reserve_ms`` and the expected wait for the engine, spent on ``cost``'s prefill, then its decode steps."""
        usable_ms = self.remaining_ms() - self.reserve_ms - max(0.0, wait_ms)
        return max(0, min(ceiling, cost.tokens_within(usable_ms)))
