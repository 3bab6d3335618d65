"""The one generation interface used by serving and RL rollout: sampling params, requests, completions, `Engine`.

Both backends (:mod:`infra.engines.hf`, :mod:`infra.engines.vllm`) implement :class:`Engine`, so a
serving replica can be lent to rollout and back. Definitions that both must agree on live here:

* **log-probs** — ``Completion.logprobs[t]`` is ``log_softmax(raw_logits_t)[token_t]``: the raw model
  logits at temperature 1, before repetition penalty, temperature, top-k/top-p and any constraint.
  That is the behaviour log-prob RL needs (the trainer recomputes the same quantity under the new
  weights), not the log-prob of the distribution the token was actually drawn from.
* **constraints** — a request may carry a :data:`LogitsConstraint`: a zero-argument factory the
  engine calls once per request and generate call, returning a :class:`RowLogitsProcessor` with
  vLLM's per-request signature ``(prompt_ids, output_ids, logits (V,)) -> logits (V,)``.
  ``sid.decoding.VllmSidLogitsProcessor`` already has that signature, so a SID-constrained request
  is ``GenerationRequest(prompt=..., constraint=lambda: VllmSidLogitsProcessor(trie, token_map, ...))``
  (or any small factory object defined above ``infra``). The per-row signature needs no padding or
  batch layout, which only the engine knows; the HF engine applies it row by row.
* **sleep levels** — level 1 keeps the weights (off the accelerator where there is one) and frees
  caches; level 2 discards the weights, and ``update_weights`` must load every tensor after ``wake``.
* **abort** — a request may carry a ``deadline`` (``time.monotonic()`` seconds) and a ``cancel`` event.
  Once either fires, its rows leave the batch at the next decode step (their tokens so far are kept,
  finish ``"abort"``); a request already aborted when its call starts returns at once with no tokens.
  This is how a serving turn that ran out of budget stops costing the engine anything.
* **streaming** — a request may carry a ``stream`` sink: the engine calls ``stream(index, token_id)`` on its
  own thread for every token it chooses for completion ``index`` (the eos included; beams and engines that
  cannot stream call it once per token after the call). It must be quick and must not raise.
* **jump-forward** — a request may carry a ``jump`` oracle (:class:`JumpOracle`): given the tokens generated so far
  it names the tokens that must come next (a fixed run of a grammar, e.g. a JSON key between two values), or none.
  An engine may append them without a decode step each (the HF engine feeds the chosen token and its forced run
  to the model in one forward pass; their log-probs are 0.0: the constraint left no choice) or ignore the oracle
  (the vLLM engine; the model then writes them itself). Under greedy decoding the completion is the same either
  way wherever the model would have written the forced run.
* **speed** — engines measure what a call costs (:class:`SpeedProfile`: prefill ms per call and ms per
  decode step, by the rows in the call), so a latency budget can be turned into a token cap.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

log = logging.getLogger(__name__)

FinishReason = Literal["stop", "length", "eos", "abort"]
ChatMessage = dict[str, Any]
Prompt = str | list[int] | list[ChatMessage]


class EngineError(RuntimeError):
    """An engine cannot serve a call as asked."""


class EngineAsleep(EngineError):
    """``generate`` or ``update_weights`` was called between ``sleep()`` and ``wake()``."""


class WeightsMissing(EngineError):
    """The engine woke from a level-2 sleep and has not been sent every weight yet."""


class EngineUnavailable(EngineError):
    """The backend's library or hardware is not present here."""


class RowLogitsProcessor(Protocol):
    """vLLM's per-request logits processor: ``(prompt_ids, output_ids, logits (V,)) -> logits (V,)``.

    Must be a function of its arguments (a cache keyed by them is fine): the engine shares one
    instance between the ``n`` samples or beams of a request. It may modify ``logits`` in place.
    """

    def __call__(self, prompt_token_ids: list[int], output_token_ids: list[int], logits: torch.Tensor, /
                 ) -> torch.Tensor: ...


LogitsConstraint = Callable[[], RowLogitsProcessor]
"""A per-request constraint: a factory called once per request per ``generate`` (fresh caches each time)."""

JumpOracle = Callable[[list[int]], list[int]]
"""``jump(output_ids) -> forced_ids``: the tokens that must follow the generated ``output_ids`` (empty: the model
chooses the next one). A function of its argument; called on the engine's thread after every chosen token."""


TokenSink = Callable[[int, int], None]
"""``stream(index, token_id)``: called by the engine for each token of completion ``index`` as it is chosen."""


def send_token(sink: TokenSink, index: int, token: int, request_id: str) -> bool:
    """``sink(index, token)``; False after logging if the sink raised (the caller then stops calling it)."""
    try:
        sink(index, token)
    except Exception:  # a consumer's bug must not break the batch it shares with others
        log.exception("the stream sink of request %s raised; it gets no more tokens", request_id)
        return False
    return True


class SamplingParams(BaseModel):
    """How to decode one request. Frozen and hashable: engines batch requests with equal params (seed aside)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_new_tokens: int = Field(256, ge=1, description="Most tokens to generate (eos and stop tokens included).")
    temperature: float = Field(1.0, ge=0.0, description="Softmax temperature; 0 = greedy (argmax).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; 1 = off. Ignored when greedy.")
    top_k: int = Field(0, ge=0, description="Keep the k most likely tokens; 0 = off. Ignored when greedy.")
    n: int = Field(1, ge=1, description="Completions per request (samples, or the n best beams).")
    stop: tuple[str, ...] = Field((), description="Stop strings: text ends before the first one; finish 'stop'.")
    seed: int | None = Field(None, description="Per-request sampling seed; None = drawn from torch's global RNG.")
    num_beams: int = Field(1, ge=1, description="Beam width; 1 = no beam search. Beams need temperature=0.")
    repetition_penalty: float = Field(1.0, gt=0.0, description="CTRL repetition penalty on seen tokens; 1 = off.")

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if any(not s for s in v):
            raise ValueError("stop strings must be non-empty")
        return v

    @model_validator(mode="after")
    def _beams_are_greedy(self) -> SamplingParams:
        if self.num_beams > 1 and self.temperature != 0:
            raise ValueError(f"beam search is deterministic: set temperature=0 (got {self.temperature}) or num_beams=1")
        if self.num_beams > 1 and self.n > self.num_beams:
            raise ValueError(f"n={self.n} best beams need num_beams >= n (got num_beams={self.num_beams})")
        return self

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def batch_key(self) -> SamplingParams:
        """The params that must be equal for two requests to share a batch (the seed is per request)."""
        return self.model_copy(update={"seed": None})


class GenerationRequest(BaseModel):
    """One prompt (text, token ids, or chat messages rendered with the tokenizer's chat template)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    prompt: Prompt = Field(description="Text, token ids, or [{'role': ..., 'content': ...}] chat messages.")
    params: SamplingParams = Field(default_factory=SamplingParams)
    constraint: LogitsConstraint | None = Field(None, description="Factory of this request's logits processor.")
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    deadline: float | None = Field(None, description="time.monotonic() seconds after which the request's rows stop "
                                   "(finish 'abort'); None = no deadline.")
    cancel: threading.Event | None = Field(None, description="Set it to stop the request's rows at the next decode "
                                           "step (finish 'abort'); None = not cancellable.")
    stream: TokenSink | None = Field(None, description="Called as stream(index, token_id) for each token as it is "
                                     "chosen, on the engine's thread; None = no streaming.")
    jump: JumpOracle | None = Field(None, description="The tokens that must follow those generated so far "
                                    "(jump-forward decoding; see the module's notes); None = every token is chosen.")

    def aborted(self, now: float | None = None) -> bool:
        """The request was cancelled or its deadline (``now``: ``time.monotonic()``) has passed."""
        if self.cancel is not None and self.cancel.is_set():
            return True
        return self.deadline is not None and (time.monotonic() if now is None else now) >= self.deadline

    @field_validator("prompt")
    @classmethod
    def _non_empty(cls, v: Prompt) -> Prompt:
        if not v:
            raise ValueError("the prompt is empty")
        if isinstance(v, list) and isinstance(v[0], dict) and not all("role" in m for m in v):
            raise ValueError("every chat message needs a 'role'")
        return v


class Completion(BaseModel):
    """One generated sequence. ``token_ids``, ``logprobs`` align one to one; ``text`` excludes a stop string."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    index: int = Field(description="Which of the request's n completions (0-based; beams best first).")
    token_ids: list[int] = Field(description="Generated ids: up to the eos (kept) or the token that completed a stop.")
    text: str = Field(description="Decoded token_ids without special tokens, cut before the first stop string.")
    logprobs: list[float] = Field(description="log_softmax of the raw temperature-1 logits at each chosen token.")
    finish_reason: FinishReason = Field(description="'eos' (an eos id), 'stop' (a stop string), 'length', or "
                                        "'abort' (cancelled or past the request's deadline).")
    prompt_tokens: int = Field(description="Prompt length in tokens (unpadded).")
    latency_ms: float = Field(description="Wall time of the batched model call that produced this completion.")
    weights_version: int = Field(description="The engine's weights_version when it was generated.")


@runtime_checkable
class Engine(Protocol):
    """Batched generation with log-probs, in-place weight updates and sleep/wake. Not thread-safe."""

    @property
    def tokenizer(self) -> Any: ...

    @property
    def weights_version(self) -> int: ...

    @property
    def tokens_per_second(self) -> float | None:
        """Moving average of the decode speed one sequence sees (tokens/s); None before the first call."""
        ...

    @property
    def asleep(self) -> bool: ...

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """One list of ``params.n`` completions per request, in request order."""
        ...

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy these tensors into the live weights in place; then ``weights_version == version``."""
        ...

    def sleep(self, level: int = 1) -> None: ...

    def wake(self) -> None: ...


def render_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids of a prompt: ids as given; text with the tokenizer's defaults; chat via its chat template."""
    if isinstance(prompt, str):
        return [int(i) for i in tokenizer(prompt)["input_ids"]]
    if isinstance(prompt[0], dict):
        if not getattr(tokenizer, "chat_template", None):
            raise EngineError("the tokenizer has no chat template: pass the prompt as text or token ids")
        text = tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False)
        return [int(i) for i in tokenizer(text, add_special_tokens=False)["input_ids"]]  # the template adds bos
    return [int(i) for i in prompt]


def eos_ids(generation_eos: int | list[int] | None, tokenizer: Any) -> list[int]:
    """The ids that end a sequence: the model's generation config if it names any, else the tokenizer's eos."""
    eos = generation_eos if generation_eos is not None else tokenizer.eos_token_id
    if eos is None:
        raise EngineError("neither the model's generation config nor the tokenizer defines an eos token")
    return [int(e) for e in eos] if isinstance(eos, list) else [int(eos)]


def finish(tokens: Sequence[int], logprobs: Sequence[float], tokenizer: Any, stops: Sequence[str],
           eos: Sequence[int]) -> tuple[list[int], str, list[float], FinishReason]:
    """Cut a raw generated row at its first stop string or eos: ``(token_ids, text, logprobs, finish_reason)``.

    A stop string wins over a later eos; its completing token is kept in ``token_ids`` (the model
    generated it, RL scores it) but the text ends before the string. Everything after an eos (the
    padding of a finished row) is dropped; the eos itself is kept.
    """
    end = next((i for i, t in enumerate(tokens) if t in eos), len(tokens))
    span = list(tokens[:end])
    text = tokenizer.decode(span, skip_special_tokens=True)
    if stops and _first_stop(text, stops) is not None:
        # the shortest prefix whose text holds a stop string (prefix texts grow with the prefix)
        lo, hi = 1, len(span)
        while lo < hi:
            mid = (lo + hi) // 2
            if _first_stop(tokenizer.decode(span[:mid], skip_special_tokens=True), stops) is None:
                lo = mid + 1
            else:
                hi = mid
        cut_text = tokenizer.decode(span[:lo], skip_special_tokens=True)
        pos = _first_stop(cut_text, stops)
        assert pos is not None, "stop-string bisection lost the stop"
        return span[:lo], cut_text[:pos], list(logprobs[:lo]), "stop"
    if end < len(tokens):
        return [*span, int(tokens[end])], text, list(logprobs[:end + 1]), "eos"
    return span, text, list(logprobs[:len(span)]), "length"


def _first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Character offset of the earliest stop string in ``text``, or None."""
    hits = [p for p in (text.find(s) for s in stops) if p >= 0]
    return min(hits) if hits else None


class DecodeSpeed:
    """Exponential moving average of per-sequence decode speed (tokens/s), from (steps, seconds) samples."""

    def __init__(self, alpha: float = 0.3) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.value: float | None = None

    def add(self, steps: int, seconds: float) -> None:
        """Record ``steps`` decode steps in ``seconds``; ignored when either is not positive."""
        if steps <= 0 or seconds <= 0:
            return
        rate = steps / seconds
        self.value = rate if self.value is None else (1 - self.alpha) * self.value + self.alpha * rate


@dataclass(frozen=True)
class CallCost:
    """What one engine call is expected to cost: reading the prompts, then each decode step (ms)."""

    prefill_ms: float
    step_ms: float

    def ms(self, tokens: int) -> float:
        """Expected wall time of a call that generates ``tokens`` tokens per row."""
        return self.prefill_ms + max(0, tokens - 1) * self.step_ms

    def tokens_within(self, ms: float) -> int:
        """Most tokens per row a call can generate in ``ms`` (0 when even the prefill does not fit)."""
        if ms < self.prefill_ms:
            return 0
        return 1 + int((ms - self.prefill_ms) / max(self.step_ms, 1e-6))


ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class SpeedProfile:
    """Measured prefill and decode cost of engine calls, by the number of rows in the call.

    Each call adds ``(rows, prefill_ms, steps, decode_ms)``; per row bucket (1, 2, 4, ... rows, a call
    counted in the smallest bucket holding it) it keeps exponential moving averages of the prefill time
    of a call and of one decode step. :meth:`cost` answers for any row count: from its bucket when that
    was measured, else the smaller of the nearest smaller bucket scaled linearly by rows (batching is never
    worse than linear) and the nearest larger bucket (more rows never cost less).
    Thread-safe.
    """

    def __init__(self, alpha: float = 0.3) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self._prefill: dict[int, float] = {}  # bucket -> EMA ms per call
        self._step: dict[int, float] = {}  # bucket -> EMA ms per decode step
        self._lock = threading.Lock()

    @staticmethod
    def bucket(rows: int) -> int:
        return next((b for b in ROW_BUCKETS if rows <= b), ROW_BUCKETS[-1])

    def add(self, rows: int, prefill_ms: float, steps: int = 0, decode_ms: float = 0.0) -> None:
        """One call: ``rows`` sequences, ``prefill_ms`` to the first token, ``steps`` more tokens in ``decode_ms``."""
        if rows < 1 or prefill_ms < 0:
            return
        b, a = self.bucket(rows), self.alpha
        with self._lock:
            old = self._prefill.get(b)
            self._prefill[b] = prefill_ms if old is None else (1 - a) * old + a * prefill_ms
            if steps > 0 and decode_ms > 0:
                step = decode_ms / steps
                old = self._step.get(b)
                self._step[b] = step if old is None else (1 - a) * old + a * step

    def cost(self, rows: int) -> CallCost | None:
        """Expected cost of a call with ``rows`` rows; None before any call was measured."""
        b = self.bucket(max(1, rows))
        with self._lock:
            prefill = self._scaled(self._prefill, b)
            step = self._scaled(self._step, b)
        if prefill is None:
            return None
        return CallCost(prefill_ms=prefill, step_ms=step if step is not None else prefill)

    @staticmethod
    def _scaled(table: dict[int, float], b: int) -> float | None:
        if b in table:
            return table[b]
        below = [k for k in table if k < b]
        above = [k for k in table if k > b]
        guesses = ([table[max(below)] * b / max(below)] if below else []) + ([table[min(above)]] if above else [])
        return min(guesses) if guesses else None  # a call never costs more than one with more rows

    def snapshot(self) -> dict[str, dict[int, float]]:
        """The measured table: ``{"prefill_ms": {bucket: ms}, "step_ms": {bucket: ms}}``."""
        with self._lock:
            return {"prefill_ms": dict(self._prefill), "step_ms": dict(self._step)}


@runtime_checkable
class Measured(Protocol):
    """An engine that measures its call costs (both backends do; test doubles need not)."""

    @property
    def speed(self) -> SpeedProfile: ...


@runtime_checkable
class Forecasting(Protocol):
    """An engine front that knows its queue (serving's batcher): the wait before a call sent now would start,
    and that call's expected cost at the batch size it would run in."""

    def forecast(self) -> tuple[float, CallCost | None]: ...


def forecast(engine: Any) -> tuple[float, CallCost | None]:
    """``(wait_ms, cost)`` of a call sent to ``engine`` now: its own forecast, or no wait and the measured cost
    of a one-row call, or ``(0, None)`` for an engine that measures nothing."""
    if isinstance(engine, Forecasting):
        return engine.forecast()
    if isinstance(engine, Measured):
        return 0.0, engine.speed.cost(1)
    return 0.0, None
