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
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

FinishReason = Literal["stop", "length", "eos"]
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
    finish_reason: FinishReason = Field(description="'eos' (an eos id), 'stop' (a stop string), or 'length'.")
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
