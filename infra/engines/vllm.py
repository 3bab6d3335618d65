"""`VllmEngine`: the `Engine` interface over ``vllm.LLM`` (GPU; the optional ``gpu`` extra).

Importing this module never imports vLLM; constructing a :class:`VllmEngine` without it raises
:class:`~infra.engines.base.EngineUnavailable`. CI has no GPU: ``python bench/engines.py --vllm`` on
a GPU machine is its check. How each part maps onto vLLM (V1 engine, the default since 0.8):

* **sampling** — ``vllm.SamplingParams(n, temperature, top_p, top_k, seed, stop, max_tokens,
  repetition_penalty, logprobs=1)``; prompts go in as token ids rendered by our tokenizer, so chat
  prompts match the HF engine exactly.
* **log-probs** — V1 returns log-probs of the raw logits, before penalties, temperature and logits
  processors (``logprobs_mode="raw_logprobs"``, passed explicitly where ``EngineArgs`` has it, >= 0.10.2):
  the same definition as the HF engine. (The removed V0 engine returned processed log-probs.)
* **constraints** — V1 dropped ``SamplingParams.logits_processors``; per-request callables are
  wrapped by a batch-level ``AdapterLogitsProcessor`` subclass registered when the ``LLM`` is built
  (vLLM >= 0.10.2), which builds each request's processor from ``SamplingParams.extra_args``. We put
  a key there and keep the factories in a process-local table, so the engine core and its single
  worker run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, one GPU, no tensor parallelism)
  and, on vLLM's Model Runner V2 (>= 0.32), the legacy V1 runner that still takes these processors is
  selected (``VLLM_USE_V2_MODEL_RUNNER=0``). Older vLLM: a constrained request raises
  ``NotImplementedError`` naming the installed version.
* **beam search** — ``LLM.beam_search`` (no logits processors and no repetition penalty there, so
  those raise ``NotImplementedError``); stop strings are applied afterwards as in the HF engine.
* **update_weights** — ``llm.collective_rpc(fn)`` with ``fn(worker)`` calling
  ``worker.model_runner.model.load_weights(weights)`` (callables in ``collective_rpc``: vLLM >= 0.8;
  in-process, so the tensors are not serialised), then ``llm.reset_prefix_cache()``: cached KV blocks
  were computed with the old weights. Names are HF checkpoint names; vLLM's loaders stack q/k/v etc.
* **sleep/wake** — ``LLM(enable_sleep_mode=True)``, ``llm.sleep(level)``, ``llm.wake_up()`` (>= 0.7.3).
  Level 1 offloads weights to host memory and drops the KV cache; level 2 discards the weights, and
  ``generate`` raises :class:`~infra.engines.base.WeightsMissing` until ``update_weights`` is called
  (vLLM cannot tell us which tensors were sent: the first update after the wake must be complete).
* **abort, streaming** — ``LLM.generate`` runs a batch to the end and returns it whole: requests already aborted
  when ``generate`` is called are dropped (no tokens, finish ``"abort"``), and ``stream`` sinks get each completion's
  tokens in order after the call. Cutting rows mid-call and streaming live need vLLM's ``AsyncLLMEngine`` (abort by
  request id, outputs as they come), which this engine does not use.
* **speed** — ``LLM.generate`` gives no per-step timing here, so ``speed`` gets coarse numbers: a call of ``T`` ms
  whose longest completion has ``G`` tokens counts as a prefill of ``T / G`` and ``G - 1`` decode steps of ``T / G``
  each (its cost for ``G`` tokens is ``T``; the prefill of long prompts is underestimated, their steps overestimated).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch

from infra.engines.base import (
    Completion,
    DecodeSpeed,
    EngineAsleep,
    EngineUnavailable,
    FinishReason,
    GenerationRequest,
    LogitsConstraint,
    RowLogitsProcessor,
    SamplingParams,
    SpeedProfile,
    WeightsMissing,
    eos_ids,
    finish,
    render_prompt,
    send_token,
)

INSTALL_HINT = "pip install 'sidekick[gpu]' on a GPU machine (vLLM is for GPUs; the HF engine is the CPU default)"
_EXTRA_KEY = "sidekick_constraint"
_FACTORIES: dict[str, LogitsConstraint] = {}
"""Constraint factories of the requests in flight, by the key in their ``extra_args`` (one process)."""
_DTYPES = {"auto": "auto", "bf16": "bfloat16", "fp32": "float32"}

log = logging.getLogger(__name__)


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise EngineUnavailable(f"vLLM is not installed: {INSTALL_HINT}") from e
    return vllm


@functools.cache
def _adapter_class() -> type | None:
    """Our ``AdapterLogitsProcessor`` subclass, or None where this vLLM has no such class (< 0.10.2)."""
    try:
        from vllm.v1.sample.logits_processor import AdapterLogitsProcessor
    except ImportError:
        return None

    class ConstraintAdapter(AdapterLogitsProcessor):
        """Builds each request's row processor from the factory its ``extra_args`` key names."""

        def is_argmax_invariant(self) -> bool:
            return False  # masking changes the argmax

        def new_req_logits_processor(self, params: Any) -> RowLogitsProcessor | None:
            key = (params.extra_args or {}).get(_EXTRA_KEY)
            return None if key is None else _FACTORIES[key]()

    return ConstraintAdapter


def _load_weights(worker: Any, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Runs inside the vLLM worker (``collective_rpc``): load HF-named tensors into the live model."""
    worker.model_runner.model.load_weights(weights=weights)


class VllmEngine:
    """The :class:`~infra.engines.base.Engine` interface over one in-process ``vllm.LLM`` on one GPU.

    ``model`` is a HF checkpoint directory (or hub name); ``tokenizer`` renders prompts and defaults
    to vLLM's own. ``max_batch_size`` is vLLM's ``max_num_seqs``.
    """

    def __init__(self, model: str, tokenizer: Any = None, *, dtype: Literal["auto", "bf16", "fp32"] = "auto",
                 max_batch_size: int = 256, gpu_memory_utilization: float = 0.85, max_model_len: int | None = None,
                 seed: int = 0, enforce_eager: bool = False) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # vLLM reads its env lazily; set it first
        vllm = _import_vllm()
        self._vllm = vllm
        self.version = str(getattr(vllm, "__version__", "unknown"))
        adapter = _adapter_class()
        if adapter is not None:
            os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")
        fields = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        extra: dict[str, Any] = {"logits_processors": [adapter]} if adapter is not None else {}
        if "logprobs_mode" in fields:
            extra["logprobs_mode"] = "raw_logprobs"
        self._llm = vllm.LLM(model=model, dtype=_DTYPES[dtype], max_num_seqs=max_batch_size,
                             gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, seed=seed,
                             enforce_eager=enforce_eager, enable_sleep_mode=True, tensor_parallel_size=1, **extra)
        self._tokenizer = tokenizer if tokenizer is not None else self._llm.get_tokenizer()
        self._constraints = adapter is not None
        self.eos = eos_ids(_generation_eos(model), self._tokenizer)
        self._version = 0
        self._speed = DecodeSpeed()
        self._profile = SpeedProfile()
        self._sleep_level = 0
        self._missing = False

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def weights_version(self) -> int:
        return self._version

    @property
    def tokens_per_second(self) -> float | None:
        """EMA of (longest completion's tokens / wall time of the ``LLM.generate`` call, prefill included)."""
        return self._speed.value

    @property
    def speed(self) -> SpeedProfile:
        """Coarse call costs by rows: each call's wall time spread evenly over its longest completion's tokens."""
        return self._profile

    @property
    def asleep(self) -> bool:
        return self._sleep_level > 0

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """One list of ``params.n`` completions per request; sampled requests go to vLLM in one call.

        Requests already aborted (cancelled or past their deadline) are not sent: ``n`` empty completions, finish
        'abort'. Stream sinks get their completions' tokens after the call.
        """
        if self.asleep:
            raise EngineAsleep(f"the engine is asleep (level {self._sleep_level}); call wake() first")
        if self._missing:
            raise WeightsMissing("the weights were discarded by sleep(level=2); call update_weights first")
        prompts = [render_prompt(self._tokenizer, r.prompt) for r in requests]
        results: list[list[Completion]] = [[] for _ in requests]
        now = time.monotonic()
        live = [i for i, r in enumerate(requests) if not r.aborted(now)]
        for i, r in enumerate(requests):
            if i not in live:
                results[i] = _aborted(r, len(prompts[i]), self._version)
        sampled = [i for i in live if requests[i].params.num_beams == 1]
        if sampled:
            for i, completions in zip(sampled, self._sample([requests[i] for i in sampled],
                                                            [prompts[i] for i in sampled]), strict=True):
                results[i] = completions
        for i in live:
            if requests[i].params.num_beams > 1:
                results[i] = self._beam(requests[i], prompts[i])
        for i in live:
            _replay(requests[i], results[i])
        return results

    def _record_speed(self, rows: int, seconds: float, tokens: int) -> None:
        """Feed ``tokens_per_second`` and ``speed``: a call of ``seconds`` whose longest completion has ``tokens``."""
        self._speed.add(tokens, seconds)
        if tokens > 0:
            per_token_ms = seconds * 1000 / tokens
            self._profile.add(rows, per_token_ms, tokens - 1, per_token_ms * (tokens - 1))

    def _sample(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]) -> list[list[Completion]]:
        keys: list[str] = []
        try:
            params = []
            for r in requests:
                extra = None
                if r.constraint is not None:
                    keys.append(self._register(r.constraint))
                    extra = {_EXTRA_KEY: keys[-1]}
                params.append(self._sampling_params(r.params, extra))
            start = time.perf_counter()
            outputs = self._llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
            seconds = time.perf_counter() - start
        finally:
            for key in keys:
                _FACTORIES.pop(key, None)
        self._record_speed(sum(r.params.n for r in requests), seconds,
                           max((len(o.token_ids) for out in outputs for o in out.outputs), default=0))
        return [[self._completion(r, len(p), j, o, seconds) for j, o in enumerate(out.outputs)]
                for r, p, out in zip(requests, prompts, outputs, strict=True)]

    def _register(self, constraint: LogitsConstraint) -> str:
        if not self._constraints:
            raise NotImplementedError(
                f"vLLM {self.version} has no per-request logits processors on its V1 engine "
                "(AdapterLogitsProcessor arrived in 0.10.2): upgrade vLLM, or use the HF engine for "
                "constrained requests")
        key = uuid.uuid4().hex
        _FACTORIES[key] = constraint
        return key

    def _sampling_params(self, p: SamplingParams, extra_args: dict[str, Any] | None) -> Any:
        kwargs: dict[str, Any] = dict(
            n=p.n, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or -1, seed=p.seed,
            stop=list(p.stop) or None, max_tokens=p.max_new_tokens, repetition_penalty=p.repetition_penalty,
            logprobs=1)
        if extra_args is not None:
            kwargs["extra_args"] = extra_args
        return self._vllm.SamplingParams(**kwargs)

    def _completion(self, request: GenerationRequest, prompt_tokens: int, index: int, out: Any,
                    seconds: float) -> Completion:
        """A ``vllm.CompletionOutput`` as a Completion: token ids, raw log-probs, finish reason."""
        token_ids = [int(t) for t in out.token_ids]
        logprobs = [float(step[t].logprob) for step, t in zip(out.logprobs, token_ids, strict=True)]
        reason: FinishReason = ("length" if out.finish_reason == "length"
                                else "stop" if isinstance(out.stop_reason, str) else "eos")
        return Completion(request_id=request.request_id, index=index, token_ids=token_ids, text=out.text,
                          logprobs=logprobs, finish_reason=reason, prompt_tokens=prompt_tokens,
                          latency_ms=seconds * 1000, weights_version=self._version)

    def _beam(self, request: GenerationRequest, prompt: list[int]) -> list[Completion]:
        p = request.params
        if request.constraint is not None or p.repetition_penalty != 1.0:
            raise NotImplementedError("vLLM's LLM.beam_search takes no logits processors or repetition penalty; "
                                      "use the HF engine for constrained or penalised beam search")
        beam_params = self._vllm.sampling_params.BeamSearchParams(beam_width=p.num_beams, max_tokens=p.max_new_tokens)
        start = time.perf_counter()
        [out] = self._llm.beam_search([{"prompt_token_ids": prompt}], beam_params)
        seconds = time.perf_counter() - start
        self._record_speed(p.num_beams, seconds, max((len(seq.tokens) - len(prompt) for seq in out.sequences),
                                                     default=0))
        completions = []
        for j, seq in enumerate(out.sequences[:p.n]):
            generated = [int(t) for t in seq.tokens[len(prompt):]]
            lps = [float(step[t].logprob) for step, t in zip(seq.logprobs, generated, strict=False)]
            ids, text, lps, reason = finish(generated, lps, self._tokenizer, p.stop, self.eos)
            completions.append(Completion(request_id=request.request_id, index=j, token_ids=ids, text=text,
                                          logprobs=lps, finish_reason=reason, prompt_tokens=len(prompt),
                                          latency_ms=seconds * 1000, weights_version=self._version))
        return completions

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Load HF-named tensors into the live vLLM model in place; drop the prefix cache; set the version."""
        if self.asleep:
            raise EngineAsleep("update_weights needs an awake engine: call wake() first")
        if version < self._version:
            raise ValueError(f"weights version {version} is older than the engine's {self._version}")
        self._llm.collective_rpc(_load_weights, args=(list(state_dict.items()),))
        self._llm.reset_prefix_cache()
        self._missing = False
        self._version = version

    def sleep(self, level: int = 1) -> None:
        """``llm.sleep(level)``: 1 offloads weights to host memory and frees the KV cache, 2 discards weights."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        if not self.asleep:
            self._llm.sleep(level=level)
            self._sleep_level = level

    def wake(self) -> None:
        """``llm.wake_up()``; after a level-2 sleep the weights must be sent again with update_weights."""
        if self.asleep:
            self._llm.wake_up()
            self._llm.reset_prefix_cache()
            self._missing = self._sleep_level == 2
            self._sleep_level = 0


def _aborted(request: GenerationRequest, prompt_tokens: int, version: int) -> list[Completion]:
    """A request aborted before the call: ``params.n`` completions with no tokens, finish 'abort'."""
    return [Completion(request_id=request.request_id, index=j, token_ids=[], text="", logprobs=[],
                       finish_reason="abort", prompt_tokens=prompt_tokens, latency_ms=0.0, weights_version=version)
            for j in range(request.params.n)]


def _replay(request: GenerationRequest, completions: Sequence[Completion]) -> None:
    """Send each completion's tokens to the request's sink, in order; a sink that raises is logged and dropped."""
    if request.stream is not None:
        all(send_token(request.stream, c.index, t, request.request_id) for c in completions for t in c.token_ids)


def _generation_eos(model: str) -> int | list[int] | None:
    """The checkpoint's generation-config eos ids, if it has a generation config."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model).eos_token_id
    except OSError:
        return None
