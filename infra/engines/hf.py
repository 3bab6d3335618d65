"""`HFEngine`: the `Engine` interface over a transformers causal LM (the CPU default; works on CUDA too).

Requests with equal sampling params (seed aside) are batched, left-padded, up to ``max_batch_size``
sequences per ``model.generate`` call. Sampling and greedy decoding choose tokens in our own last
logits processor (:class:`_StepProcessor`): it records each chosen token's raw log-prob on the fly
(one ``(R, V)`` tensor alive at a time instead of every step's logits) and draws each request's
tokens from its own seeded ``torch.Generator``, so a seeded request gives the same tokens whatever
else shares its batch (up to float differences from padding). Beam search is transformers' own; its
log-probs come from ``output_logits`` and ``beam_indices``.

Shared-prefix KV cache (sampling/greedy only): agent prompts share a long system prompt and tool
schemas, so prefill dominates. When a chunk's prompts share at least ``prefix_min_tokens`` leading
tokens, their KV (batch 1) is computed once, kept in a small LRU (:class:`_PrefixCache`) for the
current weights, and reused across calls: a later prefix that starts with a stored one computes
only the tokens past it. Such a chunk is laid out ``[prefix][pads][suffix_i]`` ("middle padding",
attention mask 0 on the pads) and ``generate`` gets a per-call copy of the KV repeated to the batch
as ``cache``. transformers derives position ids from the attention mask (``cumsum - 1``), so every
suffix token sits at the position it has in its unpadded prompt and the results equal uncached ones
up to float rounding.

The engine owns the model: it puts it in eval mode and replaces its generation config by one that
keeps only the special token ids, so checkpoint sampling defaults never leak into a request.

Run its tests: ``.venv/bin/python -m pytest tests/infra/engines -q``
"""

from __future__ import annotations

import gc
import inspect
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from transformers import (
    DynamicCache,
    DynamicLayer,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from infra.engines.base import (
    Completion,
    DecodeSpeed,
    EngineAsleep,
    EngineError,
    GenerationRequest,
    RowLogitsProcessor,
    SamplingParams,
    WeightsMissing,
    eos_ids,
    finish,
    render_prompt,
)
from infra.text_encoder import bf16_supported

Dtype = Literal["auto", "bf16", "fp32"]
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (keys, values), each (batch, kv_heads, T, head_dim)
PREFIX_ENTRIES = 4  # prefixes the shared-prefix cache keeps (least recently used evicted first)


class HFEngine:
    """Batched generation with raw log-probs, per-request constraints, weight updates and sleep/wake.

    ``dtype``: "fp32" runs as loaded; "bf16" runs under bf16 autocast (weights stay as loaded, so
    ``update_weights`` and checkpoints are unaffected); "auto" picks bf16 where the CPU has native
    bf16 matmuls (AVX512-BF16/AMX, see :func:`infra.text_encoder.bf16_supported`) or on CUDA.
    ``max_batch_size`` caps the sequences (prompts x n, or x num_beams) in one model call.
    ``prefix_cache`` turns the shared-prefix KV cache on (default) or off; a chunk uses it when its
    prompts share at least ``prefix_min_tokens`` leading tokens (default 256). It is on only for
    models whose cache is a plain full-attention ``DynamicCache`` (no sliding or linear layers).
    ``prefix_stats`` counts its use: ``hits`` (chunks that reused a stored prefix), ``misses``
    (chunks that computed theirs from scratch), ``reused_tokens`` and ``computed_tokens`` (prefix
    tokens taken from the store vs run through the model for it).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: Any, *, dtype: Dtype = "auto",
                 max_batch_size: int = 32, prefix_cache: bool = True, prefix_min_tokens: int = 256) -> None:
        if dtype not in ("auto", "bf16", "fp32"):
            raise ValueError(f"dtype must be auto, bf16 or fp32, got {dtype!r}")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if prefix_min_tokens < 1:
            raise ValueError(f"prefix_min_tokens must be >= 1, got {prefix_min_tokens}")
        self._model = model.eval()
        self._tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.device = next(model.parameters()).device
        self.bf16 = dtype == "bf16" or (dtype == "auto" and (self.device.type == "cuda" or bf16_supported()))
        gen = model.generation_config
        self.eos = eos_ids(gen.eos_token_id if gen is not None else None, tokenizer)
        self.pad_id = int(tokenizer.pad_token_id) if tokenizer.pad_token_id is not None else self.eos[0]
        bos = gen.bos_token_id if gen is not None else None
        model.generation_config = GenerationConfig(eos_token_id=self.eos, pad_token_id=self.pad_id, bos_token_id=bos)
        self._version = 0
        self._speed = DecodeSpeed()
        self._sleep_level = 0  # 0 = awake
        self._shapes: dict[str, torch.Size] = {}  # parameter shapes while discarded by a level-2 sleep
        self._missing: set[int] = set()  # ids of parameters a level-2 sleep discarded and no update refilled
        self._prefix = _PrefixCache(model, prefix_min_tokens) if prefix_cache and _plain_kv(model) else None
        self.prefix_stats: dict[str, int] = (self._prefix.stats if self._prefix is not None else
                                             {"hits": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0})

    # --- Engine properties -------------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    @property
    def model(self) -> PreTrainedModel:
        return self._model

    @property
    def weights_version(self) -> int:
        return self._version

    @property
    def tokens_per_second(self) -> float | None:
        """EMA of decode steps per second of one call (prefill excluded); None before any multi-token call."""
        return self._speed.value

    @property
    def asleep(self) -> bool:
        return self._sleep_level > 0

    # --- generate ----------------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """One list of ``params.n`` completions per request, in request order."""
        self._check_ready()
        prompts = [render_prompt(self._tokenizer, r.prompt) for r in requests]
        results: list[list[Completion]] = [[] for _ in requests]
        for chunk in self._plan(requests, prompts):
            done = self._run_chunk([requests[i] for i in chunk], [prompts[i] for i in chunk])
            for i, completions in zip(chunk, done, strict=True):
                results[i] = completions
        return results

    def _check_ready(self) -> None:
        if self.asleep:
            raise EngineAsleep(f"the engine is asleep (level {self._sleep_level}); call wake() first")
        if self._missing:
            raise WeightsMissing(f"{len(self._missing)} weight tensors were discarded by sleep(level=2) and not "
                                 "reloaded; call update_weights with the full state dict")

    def _plan(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]) -> list[list[int]]:
        """Request indices per model call: equal params share a call, longest prompts first (less padding)."""
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            key = r.params.batch_key()
            if key.num_beams == 1:  # rows are cut to their own max_new_tokens after the call (causal: same tokens)
                key = key.model_copy(update={"max_new_tokens": 1})
            groups.setdefault(key, []).append(i)
        chunks: list[list[int]] = []
        for params, idx in groups.items():
            per_call = max(1, self.max_batch_size // _rows_per_request(params))
            idx.sort(key=lambda i: -len(prompts[i]))
            chunks += [idx[s:s + per_call] for s in range(0, len(idx), per_call)]
        return chunks

    def _run_chunk(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]) -> list[list[Completion]]:
        """Generate for requests that share params; returns each request's completions."""
        longest = max(r.params.max_new_tokens for r in requests)
        params = requests[0].params.model_copy(update={"max_new_tokens": longest})
        beams = params.num_beams > 1
        start = time.perf_counter()
        # no_grad, not inference_mode: under inference_mode autocast does not cache its bf16 weight casts and
        # re-casts every weight at every step (measured: 26 vs 2.3 ms for a 2048x8192 linear at batch 1)
        with torch.no_grad(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            input_ids, attention_mask, cache = self._inputs(prompts, 1 if beams else params.n, beams)  # (B*n, W)
            width = input_ids.shape[1]
            constraints = _Constraints([r.constraint() if r.constraint else None for r in requests], prompts,
                                       _rows_per_request(params), width)
            stops = _StopStrings(self._tokenizer, params.stop, width) if params.stop and not beams else None
            step = None if beams else _StepProcessor(params, requests, constraints, self.eos, stops, self.device)
            clock = _Clock()
            procs: list[LogitsProcessor] = [clock, step] if step else [clock, *_beam_processors(params, constraints)]
            criteria = StoppingCriteriaList([stops] if stops else [])  # beams: stop strings are cut afterwards only
            out = self._model.generate(
                input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                generation_config=self._config(params), logits_processor=LogitsProcessorList(procs),
                stopping_criteria=criteria)
        latency_ms = (time.perf_counter() - start) * 1000
        self._speed.add(clock.calls - 1, clock.last - clock.first)
        if step is None:
            generated = out.sequences[:, width:]  # (B*n, G)
            logprobs = _beam_logprobs(out.logits, out.beam_indices, generated)  # (B*n, G)
        else:
            generated = out[:, width:]  # (B*n, G)
            logprobs = step.logprobs(generated.shape[1])  # (B*n, G)
        return self._completions(requests, prompts, generated.tolist(), logprobs.tolist(), latency_ms)

    def _inputs(self, prompts: Sequence[list[int]], n: int, beams: bool
                ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
        """``(input_ids (B*n, W), attention_mask (B*n, W), cache)``: left-padded without a shared prefix; with one
        ``[prefix][pads][suffix]`` and a fresh cache holding the prefix KV for every row (``n`` rows per prompt)."""
        prefix = [] if beams or self._prefix is None else _shared_prefix(prompts)
        kv = self._prefix.kv(prefix) if self._prefix is not None and prefix else None
        if kv is None:
            input_ids, attention_mask = _left_pad(prompts, self.pad_id, self.device)  # (B, W)
        else:
            input_ids, attention_mask = _middle_pad(prompts, len(prefix), self.pad_id, self.device)  # (B, W)
        if n > 1:  # we choose the tokens: one row per sample
            input_ids = input_ids.repeat_interleave(n, dim=0)  # (B*n, W)
            attention_mask = attention_mask.repeat_interleave(n, dim=0)
        if kv is None:
            return input_ids, attention_mask, None
        rows = input_ids.shape[0]  # DynamicCache copies (concatenates) what it is given: the stored KV stays as is
        cache = DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in kv])
        return input_ids, attention_mask, cache

    def _config(self, params: SamplingParams) -> GenerationConfig:
        beams = params.num_beams > 1
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens, do_sample=False, num_beams=params.num_beams,
            num_return_sequences=params.n if beams else 1, eos_token_id=self.eos, pad_token_id=self.pad_id,
            return_dict_in_generate=beams, output_logits=beams)

    def _completions(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]],
                     rows: list[list[int]], logprobs: list[list[float]], latency_ms: float) -> list[list[Completion]]:
        n = requests[0].params.n
        assert len(rows) == len(requests) * n, f"{len(rows)} rows for {len(requests)} requests x n={n}"
        out: list[list[Completion]] = []
        for b, (req, prompt) in enumerate(zip(requests, prompts, strict=True)):
            mine = []
            cap = req.params.max_new_tokens  # a chunk runs to its longest request's cap; each row stops at its own
            for j in range(n):
                ids, text, lps, reason = finish(rows[b * n + j][:cap], logprobs[b * n + j][:cap], self._tokenizer,
                                                req.params.stop, self.eos)
                mine.append(Completion(request_id=req.request_id, index=j, token_ids=ids, text=text, logprobs=lps,
                                       finish_reason=reason, prompt_tokens=len(prompt), latency_ms=latency_ms,
                                       weights_version=self._version))
            out.append(mine)
        return out

    # --- weights -----------------------------------------------------------------------------------------------

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy ``state_dict`` into the model's tensors in place (no reallocation); set ``weights_version``.

        Every key must name a parameter or buffer of the model with the same shape (dtype and device
        are converted); keys not given keep their values. ``version`` may not go backwards.
        """
        if self.asleep:
            raise EngineAsleep("update_weights needs an awake engine: call wake() first")
        if version < self._version:
            raise ValueError(f"weights version {version} is older than the engine's {self._version}")
        live = self._model.state_dict(keep_vars=True)
        unknown = sorted(set(state_dict) - set(live))
        if unknown:
            raise KeyError(f"{len(unknown)} keys are not in the model, e.g. {unknown[:3]}")
        wrong = [(k, tuple(v.shape), tuple(live[k].shape)) for k, v in state_dict.items() if v.shape != live[k].shape]
        if wrong:
            raise ValueError(f"shape mismatch (key, given, model): {wrong[:3]}")
        with torch.no_grad():
            for key, value in state_dict.items():
                live[key].copy_(value)
                self._missing.discard(id(live[key]))
        self._version = version
        if self._prefix is not None:
            self._prefix.clear()

    # --- sleep / wake ------------------------------------------------------------------------------------------

    def sleep(self, level: int = 1) -> None:
        """Lend the memory out until :meth:`wake`; ``generate`` and ``update_weights`` raise meanwhile.

        Level 1 keeps the weights: on CUDA they move to pinned host memory and the CUDA cache is
        emptied; on CPU they already live in host memory, so this only marks the engine asleep. Both
        levels drop the shared-prefix KV cache. Level 2 frees the parameter storage (on CPU too); after
        ``wake`` the weights are uninitialised until ``update_weights`` has sent every parameter.
        """
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        if self.asleep:
            return
        if self._prefix is not None:
            self._prefix.clear()
        params = dict(self._model.named_parameters())  # tied weights appear once
        if level == 2:
            self._shapes = {name: p.shape for name, p in params.items()}
            for p in params.values():
                p.data = torch.empty(0, dtype=p.dtype, device=p.device)
        elif self.device.type != "cpu":
            for p in params.values():
                p.data = p.data.to("cpu").pin_memory()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        gc.collect()
        self._sleep_level = level

    def wake(self) -> None:
        """Undo :meth:`sleep`: move level-1 weights back, or reallocate level-2 ones (to be refilled)."""
        if not self.asleep:
            return
        params = dict(self._model.named_parameters())
        if self._sleep_level == 2:
            for name, p in params.items():
                p.data = torch.empty(self._shapes[name], dtype=p.dtype, device=self.device)
            self._missing = {id(p) for p in params.values()}
            self._shapes = {}
        elif self.device.type != "cpu":
            for p in params.values():
                p.data = p.data.to(self.device)
        self._sleep_level = 0


def _rows_per_request(params: SamplingParams) -> int:
    return params.num_beams if params.num_beams > 1 else params.n


def _left_pad(prompts: Sequence[list[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists: ``(input_ids (B, P), attention_mask (B, P))``."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, width - len(p):] = torch.tensor(p, dtype=torch.long)
        mask[b, width - len(p):] = 1
    return ids.to(device), mask.to(device)


def _middle_pad(prompts: Sequence[list[int]], shared: int, pad_id: int, device: torch.device
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``[prefix][pads][suffix]``: the first ``shared`` tokens (equal in all rows) at the same positions in every row,
    each suffix right-aligned, the pads between masked out: ``(input_ids (B, W), attention_mask (B, W))``."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    ids[:, :shared] = torch.tensor(prompts[0][:shared], dtype=torch.long)
    mask[:, :shared] = 1
    for b, p in enumerate(prompts):
        assert len(p) > shared, f"prompt {b} has {len(p)} tokens, not more than the shared {shared}"
        ids[b, width - (len(p) - shared):] = torch.tensor(p[shared:], dtype=torch.long)
        mask[b, width - (len(p) - shared):] = 1
    return ids.to(device), mask.to(device)


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _shared_prefix(prompts: Sequence[list[int]]) -> list[int]:
    """The prompts' longest common prefix, cut so that every prompt keeps at least one token after it."""
    lo, hi = min(prompts), max(prompts)  # the common prefix of all is that of the lexicographic extremes
    shared = min(_common_length(lo, hi), min(len(p) for p in prompts) - 1)
    return prompts[0][:max(shared, 0)]


def _plain_kv(model: PreTrainedModel) -> bool:
    """Whether the model's generation cache is a DynamicCache of full-attention layers (which can be cut and copied)."""
    try:
        cache = DynamicCache(config=model.config)
    except Exception:  # a config transformers cannot map to cache layers: no prefix cache
        return False
    supports = getattr(model, "_supports_default_dynamic_cache", None)  # False for e.g. mamba-style models
    return (callable(supports) and bool(supports()) and len(cache.layers) > 0
            and all(type(layer) is DynamicLayer for layer in cache.layers))


class _PrefixCache:
    """An LRU of prompt-prefix KV (batch 1) for the model's current weights.

    ``kv(tokens)`` returns the KV of ``tokens`` (or None below ``min_tokens``): the stored entry sharing the
    longest prefix with them is cut to that shared part (causal: KV at a position depends only on the tokens up
    to it) and, if shorter, extended by one forward over the rest; the result is stored under ``tokens``. The
    store is dropped by :meth:`clear` and whenever a parameter was replaced or changed in place since it was
    filled (checked through each tensor's storage pointer and autograd version counter).
    """

    def __init__(self, model: PreTrainedModel, min_tokens: int, entries: int = PREFIX_ENTRIES) -> None:
        self.model, self.min_tokens, self.entries = model, min_tokens, entries
        self.store: OrderedDict[tuple[int, ...], KV] = OrderedDict()
        self.stats = {"hits": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0}
        self._stamp: tuple[tuple[int, int], ...] = ()
        self._keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters

    def clear(self) -> None:
        self.store.clear()

    def kv(self, tokens: Sequence[int]) -> KV | None:
        if len(tokens) < self.min_tokens:
            return None
        stamp = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        if stamp != self._stamp:
            self.store.clear()
            self._stamp = stamp
        key = tuple(tokens)
        best, reuse = None, 0
        for k in self.store:
            shared = _common_length(k, key)
            if shared > reuse:
                best, reuse = k, shared
        if best is None or reuse < self.min_tokens:
            best, reuse = None, 0
        kv = [] if best is None else [(k[:, :, :reuse], v[:, :, :reuse]) for k, v in self.store[best]]
        if reuse < len(key):
            kv = self._extend(kv, key[reuse:])
        self.stats["hits" if best is not None else "misses"] += 1
        self.stats["reused_tokens"] += reuse
        self.stats["computed_tokens"] += len(key) - reuse
        self.store[key] = kv
        self.store.move_to_end(key)
        while len(self.store) > self.entries:
            self.store.popitem(last=False)
        return kv

    def _extend(self, kv: KV, tokens: Sequence[int]) -> KV:
        """The KV of the cached tokens followed by ``tokens``: one forward, batch 1, positions after the cache."""
        device = next(self.model.parameters()).device
        cache = DynamicCache(ddp_cache_data=kv) if kv else DynamicCache()
        extra = {"logits_to_keep": 1} if self._keep_logits else {}
        out = self.model(input_ids=torch.tensor([list(tokens)], device=device), cache=cache, use_cache=True, **extra)
        cache = out.cache
        assert isinstance(cache, DynamicCache), f"the model returned a {type(cache).__name__}, not a DynamicCache"
        kv = []
        for layer in cache.layers:
            assert isinstance(layer, DynamicLayer) and layer.keys is not None and layer.values is not None, \
                "only filled full-attention DynamicLayers can be cut and copied"
            kv.append((layer.keys, layer.values))
        return kv


class _Clock(LogitsProcessor):
    """Times the decode loop: the first call comes right after prefill, the last after the last step."""

    def __init__(self) -> None:
        self.calls, self.first, self.last = 0, 0.0, 0.0

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        now = time.perf_counter()
        self.first = now if self.calls == 0 else self.first
        self.last, self.calls = now, self.calls + 1
        return scores


class _Constraints:
    """Each request's row processor on its own rows (``k`` consecutive rows per request)."""

    def __init__(self, procs: Sequence[RowLogitsProcessor | None], prompts: Sequence[list[int]], k: int,
                 prompt_width: int) -> None:
        self.procs, self.prompts, self.k, self.width = list(procs), list(prompts), k, prompt_width
        self.active = any(p is not None for p in self.procs)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, live: Sequence[bool] | None = None
                 ) -> torch.Tensor:
        # input_ids (R, P + t), scores (R, V) with R = B * k; rows not ``live`` (finished) are left alone
        if not self.active:
            return scores
        assert scores.shape[0] == len(self.procs) * self.k, f"{scores.shape[0]} rows vs {len(self.procs)}x{self.k}"
        scores = scores.clone()
        generated = input_ids[:, self.width:].tolist()
        for r, output_ids in enumerate(generated):
            proc = self.procs[r // self.k]
            if proc is not None and (live is None or live[r]):
                row = scores[r]  # (V,) a view: processors may edit it in place
                new = proc(self.prompts[r // self.k], output_ids, row)
                if new is not row:
                    scores[r] = new
        return scores


class _ConstraintProcessor(LogitsProcessor):
    """:class:`_Constraints` as an HF logits processor (for beam search, where HF chooses the tokens)."""

    def __init__(self, constraints: _Constraints) -> None:
        self.constraints = constraints

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.constraints(input_ids, scores)  # type: ignore[return-value]


def _beam_processors(params: SamplingParams, constraints: _Constraints) -> list[LogitsProcessor]:
    procs: list[LogitsProcessor] = []
    if params.repetition_penalty != 1.0:
        procs.append(RepetitionPenaltyLogitsProcessor(params.repetition_penalty))
    if constraints.active:
        procs.append(_ConstraintProcessor(constraints))
    return procs


class _StepProcessor(LogitsProcessor):
    """Chooses every row's next token (greedy or sampled) and records its raw log-prob.

    Order per step: raw log-probs; repetition penalty; constraints; then greedy argmax, or
    temperature, top-k, top-p and a draw from the request's own generator. It returns scores that
    are -inf everywhere but 0 at the chosen token, so transformers' greedy argmax takes that token.
    """

    def __init__(self, params: SamplingParams, requests: Sequence[GenerationRequest], constraints: _Constraints,
                 eos: Sequence[int], stops: _StopStrings | None, device: torch.device) -> None:
        self.params, self.constraints, self.n, self.stops = params, constraints, params.n, stops
        self.eos = torch.tensor(list(eos), device=device)
        self.request_ids = [r.request_id for r in requests]
        self.penalty = (RepetitionPenaltyLogitsProcessor(params.repetition_penalty)
                        if params.repetition_penalty != 1.0 else None)
        self.warpers: list[LogitsProcessor] = []
        if not params.greedy:
            self.warpers.append(TemperatureLogitsWarper(params.temperature))
            if params.top_k:
                self.warpers.append(TopKLogitsWarper(params.top_k))
            if params.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(params.top_p))
        self.generators = [] if params.greedy else [_generator(r.params.seed, device) for r in requests]
        self._steps: list[torch.Tensor] = []  # per step: (R,) raw log-prob of the chosen token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        # input_ids (R, P + t), scores (R, V) float32 raw logits of the last position
        raw_logp = torch.log_softmax(scores.float(), dim=-1)  # (R, V)
        processed: torch.Tensor = scores
        if self.penalty is not None:
            processed = self.penalty(input_ids, processed)
        live = self._live(input_ids)  # (R,) rows still generating: finished rows only get padding
        processed = self.constraints(input_ids, processed, live.tolist())
        dead = torch.isneginf(processed).all(dim=-1) & live  # (R,)
        if bool(dead.any()):
            row = int(dead.nonzero()[0, 0])
            raise EngineError(f"the constraint of request {self.request_ids[row // self.n]} allows no token")
        processed = processed.masked_fill(~live[:, None], 0.0)  # keep finished rows finite; HF pads them anyway
        chosen = self._choose(input_ids, processed)  # (R,)
        self._steps.append(raw_logp.gather(1, chosen[:, None])[:, 0])
        onehot = torch.full_like(scores, float("-inf"))  # (R, V)
        return onehot.scatter_(1, chosen[:, None], 0.0)  # type: ignore[return-value]

    def _live(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(R,) bool: no eos generated yet and no stop string seen."""
        width = self.constraints.width
        live = ~torch.isin(input_ids[:, width:], self.eos).any(dim=-1)  # (R,)
        if self.stops is not None and self.stops.done is not None:
            live &= ~self.stops.done
        return live

    def _choose(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        if self.params.greedy:
            return scores.argmax(dim=-1)  # (R,)
        for warper in self.warpers:
            scores = warper(input_ids, scores)
        probs = torch.softmax(scores.float(), dim=-1)  # (R, V)
        chosen = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
        for b, gen in enumerate(self.generators):  # the request's n rows draw from its generator, in order
            rows = slice(b * self.n, (b + 1) * self.n)
            chosen[rows] = torch.multinomial(probs[rows], 1, generator=gen)[:, 0]
        return chosen

    def logprobs(self, steps: int) -> torch.Tensor:
        """``(R, steps)`` raw log-probs of the chosen tokens (a deferred stop check may add a spare step)."""
        assert len(self._steps) >= steps, f"{len(self._steps)} recorded steps for {steps} generated tokens"
        if steps == 0:
            return torch.zeros((0, 0))
        return torch.stack(self._steps[:steps], dim=1).cpu()


def _generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A request's sampling generator: seeded if asked, else seeded from torch's global RNG (reproducible too)."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()).item())
    return torch.Generator(device=device).manual_seed(seed)


def _beam_logprobs(logits: Sequence[torch.Tensor], beam_indices: torch.Tensor, generated: torch.Tensor
                   ) -> torch.Tensor:
    """Raw log-probs of beam tokens: step ``t`` of row ``i`` came from row ``beam_indices[i, t]`` of ``logits[t]``."""
    # logits: G' x (B*beams, V); beam_indices (B*n, G') with -1 past a beam's end; generated (B*n, G)
    steps = generated.shape[1]
    out = torch.zeros(generated.shape, dtype=torch.float32)  # (B*n, G)
    for t in range(min(steps, len(logits), beam_indices.shape[1])):
        src = beam_indices[:, t].clamp(min=0).to(logits[t].device)  # (B*n,)
        logp = torch.log_softmax(logits[t].float(), dim=-1)[src]  # (B*n, V)
        out[:, t] = logp.gather(1, generated[:, t:t + 1].to(logp.device))[:, 0].cpu()
    return out


class _StopStrings(StoppingCriteria):
    """Stops a row once its generated text holds a stop string (checked on a tail, confirmed on the whole)."""

    def __init__(self, tokenizer: Any, stops: Sequence[str], prompt_width: int) -> None:
        self.tokenizer, self.stops, self.width = tokenizer, list(stops), prompt_width
        self.tail = max(len(s) for s in stops) + 4  # tokens: every non-empty token adds >= 1 character
        self.done: torch.Tensor | None = None  # (R,) rows that have produced a stop string so far

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        # input_ids (R, P + t)
        generated = input_ids[:, self.width:].tolist()
        done = torch.zeros(len(generated), dtype=torch.bool, device=input_ids.device)
        for r, row in enumerate(generated):
            if self.done is not None and bool(self.done[r]):
                continue
            tail = self.tokenizer.decode(row[-self.tail:], skip_special_tokens=True)
            if any(s in tail for s in self.stops):
                text = self.tokenizer.decode(row, skip_special_tokens=True)
                done[r] = any(s in text for s in self.stops)
        self.done = done if self.done is None else self.done | done
        return done  # type: ignore[return-value]
