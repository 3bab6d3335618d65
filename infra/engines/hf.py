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

KV cache without copies (sampling/greedy, full-attention models): transformers' ``DynamicLayer`` concatenates the
old and new KV at every decode step, copying ``(B, H, T, D)`` per layer per step, so with long prompts a batch of 32
cost as much as 32 calls of one (measured: ``aten::cat`` was 76 % of a batch-32 call with 3,300-token prompts). Each
call gets a cache of :class:`_BufferedLayer` s instead: one buffer per layer with room for the whole call (prompt
width + ``max_new_tokens``), written in place. Beam search keeps transformers' own cache (it reorders it every step).

Abort, streaming and speed (see :mod:`infra.engines.base`): a request already aborted when its chunk comes up is not
run (no tokens, finish "abort"); during the call :class:`_Abort` (a stopping criterion: one ``time.monotonic()`` per
step) cuts the rows of requests cancelled or past their deadline, which keep their tokens so far. Beam search is
aborted only before its call. ``stream`` sinks get each row's token as :class:`_StepProcessor` chooses it; beams'
sinks get their completions' tokens after the call. ``speed`` records each call's prefill (input building included,
until the first logits) and decode-step times by rows.

The engine owns the model: it puts it in eval mode and replaces its generation config by one that
keeps only the special token ids, so checkpoint sampling defaults never leak into a request.

Run its tests: ``.venv/bin/python -m pytest tests/infra/engines -q``
"""

from __future__ import annotations

import gc
import inspect
import logging
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
    SpeedProfile,
    TokenSink,
    WeightsMissing,
    eos_ids,
    finish,
    render_prompt,
    send_token,
)
from infra.text_encoder import bf16_supported

Dtype = Literal["auto", "bf16", "fp32"]
KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: (keys, values), each (batch, kv_heads, T, head_dim)
PREFIX_ENTRIES = 4  # prefixes the shared-prefix cache keeps (least recently used evicted first)

log = logging.getLogger(__name__)


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
    ``speed`` is the measured :class:`~infra.engines.base.SpeedProfile` of its model calls.
    Streaming: a sink gets every token of its completion as chosen, except that a stop string the per-step tail check
    misses (e.g. one spread over tokens that decode to nothing) is cut only after the call, so a sink may then see a
    few tokens past the completion's end: consumers stop at the stop string themselves.
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
        self._profile = SpeedProfile()
        self._sleep_level = 0  # 0 = awake
        self._shapes: dict[str, torch.Size] = {}  # parameter shapes while discarded by a level-2 sleep
        self._missing: set[int] = set()  # ids of parameters a level-2 sleep discarded and no update refilled
        plain = _plain_kv(model)
        # cache layers per call (0: not a plain full-attention cache; generate builds transformers' own)
        self._kv_layers = len(DynamicCache(config=model.config).layers) if plain else 0
        self._prefix = _PrefixCache(model, prefix_min_tokens) if prefix_cache and plain else None
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
    def speed(self) -> SpeedProfile:
        """Measured prefill (input building included) and decode-step times of this engine's calls, by rows."""
        return self._profile

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
            now = time.monotonic()
            live = [i for i in chunk if not requests[i].aborted(now)]
            for i in chunk:
                if i not in live:  # aborted before its call: the model never sees it
                    results[i] = self._aborted(requests[i], prompts[i])
            if not live:
                continue
            done = self._run_chunk([requests[i] for i in live], [prompts[i] for i in live])
            for i, completions in zip(live, done, strict=True):
                results[i] = completions
        return results

    def _aborted(self, request: GenerationRequest, prompt: list[int]) -> list[Completion]:
        """A request aborted before its model call: ``params.n`` completions with no tokens, finish 'abort'."""
        return [Completion(request_id=request.request_id, index=j, token_ids=[], text="", logprobs=[],
                           finish_reason="abort", prompt_tokens=len(prompt), latency_ms=0.0,
                           weights_version=self._version) for j in range(request.params.n)]

    def _check_ready(self) -> None:
        if self.asleep:
            raise EngineAsleep(f"the engine is asleep (level {self._sleep_level}); call wake() first")
        if self._missing:
            raise WeightsMissing(f"{len(self._missing)} weight tensors were discarded by sleep(level=2) and not "
                                 "reloaded; call update_weights with the full state dict")

    def _plan(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]) -> list[list[int]]:
        """Request indices per model call: equal params share a call, longest prompts first (less padding)."""
        groups: dict[tuple[SamplingParams, bool], list[int]] = {}
        for i, r in enumerate(requests):
            key = r.params.batch_key()
            if key.num_beams == 1:  # rows are cut to their own max_new_tokens after the call (causal: same tokens)
                key = key.model_copy(update={"max_new_tokens": 1})
            groups.setdefault((key, self._jumps(r)), []).append(i)
        chunks: list[list[int]] = []
        for (params, _), idx in groups.items():
            per_call = max(1, self.max_batch_size // _rows_per_request(params))
            idx.sort(key=lambda i: -len(prompts[i]))
            chunks += [idx[s:s + per_call] for s in range(0, len(idx), per_call)]
        return chunks

    def _jumps(self, request: GenerationRequest) -> bool:
        """Whether the request runs in the jump-forward loop: it has an oracle, one row (n = 1, no beams), no
        repetition penalty, and the model's cache is plain full attention. Otherwise its oracle is ignored."""
        p = request.params
        return (request.jump is not None and p.n == 1 and p.num_beams == 1 and p.repetition_penalty == 1.0
                and self._kv_layers > 0)

    def _run_chunk(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]) -> list[list[Completion]]:
        """Generate for requests that share params; returns each request's completions."""
        if self._jumps(requests[0]):
            return self._run_jumping(requests, prompts)
        longest = max(r.params.max_new_tokens for r in requests)
        params = requests[0].params.model_copy(update={"max_new_tokens": longest})
        beams = params.num_beams > 1
        start = time.perf_counter()
        # no_grad, not inference_mode: under inference_mode autocast does not cache its bf16 weight casts and
        # re-casts every weight at every step (measured: 26 vs 2.3 ms for a 2048x8192 linear at batch 1)
        with torch.no_grad(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            input_ids, attention_mask, cache = self._inputs(prompts, 1 if beams else params.n, beams,
                                                            longest)  # (B*n, W)
            width = input_ids.shape[1]
            k = _rows_per_request(params)
            constraints = _Constraints([r.constraint() if r.constraint else None for r in requests], prompts, k, width)
            stops = _StopStrings(self._tokenizer, params.stop, width) if params.stop and not beams else None
            # beams: stop strings are cut afterwards, aborts honoured before the call only (HF's beam search would
            # take a stopped row for a finished hypothesis)
            abort = None if beams else _Abort.watching(requests, k, width, self.device)
            step = None if beams else _StepProcessor(params, requests, constraints, self.eos, stops, abort,
                                                     self.device)
            clock = _Clock()
            procs: list[LogitsProcessor] = [clock, step] if step else [clock, *_beam_processors(params, constraints)]
            criteria: list[StoppingCriteria] = [c for c in (stops, abort) if c is not None]
            if step is not None and min(r.params.max_new_tokens for r in requests) < longest:
                criteria.append(_Caps(step.caps, width))  # a row past its own cap leaves the batch
            out = self._model.generate(
                input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                generation_config=self._config(params), logits_processor=LogitsProcessorList(procs),
                stopping_criteria=StoppingCriteriaList(criteria))
        latency_ms = (time.perf_counter() - start) * 1000
        self._record_speed(input_ids.shape[0], start, clock)
        if step is None:
            generated = out.sequences[:, width:]  # (B*n, G)
            logprobs = _beam_logprobs(out.logits, out.beam_indices, generated)  # (B*n, G)
        else:
            generated = out[:, width:]  # (B*n, G)
            logprobs = step.logprobs(generated.shape[1])  # (B*n, G)
        completions = self._completions(requests, prompts, generated.tolist(), logprobs.tolist(), latency_ms,
                                        abort.steps if abort is not None else None)
        if beams:
            _replay(requests, completions)
        return completions

    def _run_jumping(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]
                     ) -> list[list[Completion]]:
        """Our own decode loop for requests with a jump oracle (greedy or sampled, one row each).

        After each chosen token a row asks its oracle for the forced run that follows; the next forward pass feeds
        every row its chosen token plus its run, right-padded to the longest (pads masked out, so they are holes in
        the cache that no later token attends to; each token's position counts only real tokens, as in an unpadded
        prompt), and reads each row's logits at its own last real token. So a forced run costs no decode step of
        its own, and a run that completes the stop string ends the row without another forward. Forced tokens get
        log-prob 0.0 and count toward ``max_new_tokens``; eos, stop strings, deadlines, cancels and streaming work as
        in the generate path.
        """
        longest = max(r.params.max_new_tokens for r in requests)
        params = requests[0].params.model_copy(update={"max_new_tokens": longest})
        start = time.perf_counter()
        rows = len(requests)
        out_ids: list[list[int]] = [[] for _ in requests]
        out_lps: list[list[float]] = [[] for _ in requests]
        aborted_at: list[int | None] = [None] * rows
        live = [True] * rows
        procs = [r.constraint() if r.constraint else None for r in requests]
        chooser = _Chooser(params, requests, self.device)
        stops = _StopTails(self._tokenizer, params.stop)
        sinks: list[TokenSink | None] = [r.stream for r in requests]
        first = last = start
        steps = 0
        with torch.no_grad(), torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            input_ids, mask, cache = self._inputs(prompts, 1, False, longest)  # (R, W)
            assert cache is not None, "the jump-forward loop needs the buffered cache"
            positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (R, W)
            seen = mask.sum(-1).tolist()  # real tokens per row so far
            cached = cache.get_seq_length()  # a shared prefix already in the cache: only the rest is fed
            logits = self._model(input_ids=input_ids[:, cached:], attention_mask=mask,
                                 position_ids=positions[:, cached:], cache=cache, use_cache=True,
                                 logits_to_keep=1).logits[:, -1]  # (R, V)
            first = time.perf_counter()
            while True:
                scores = logits.float()  # (R, V)
                raw = torch.log_softmax(scores, dim=-1)
                for r, proc in enumerate(procs):
                    if proc is not None and live[r]:
                        row = scores[r]
                        new = proc(prompts[r], out_ids[r], row)
                        if new is not row:
                            scores[r] = new
                        if bool(torch.isneginf(scores[r]).all()):
                            raise EngineError(f"the constraint of request {requests[r].request_id} allows no token")
                chosen = chooser(scores).tolist()  # (R,)
                feeds: list[list[int]] = [[] for _ in requests]
                now = time.monotonic()
                for r, request in enumerate(requests):
                    if not live[r]:
                        continue
                    if request.aborted(now):  # out of time or cancelled: keep the tokens so far
                        live[r], aborted_at[r] = False, len(out_ids[r])
                        continue
                    token, jump = int(chosen[r]), request.jump
                    assert jump is not None
                    run = [token] if token in self.eos else [token, *jump([*out_ids[r], token])]
                    run = run[:request.params.max_new_tokens - len(out_ids[r])]
                    out_ids[r] += run
                    out_lps[r] += [float(raw[r, token])] + [0.0] * (len(run) - 1)
                    sink = sinks[r]
                    if sink is not None and not all(send_token(sink, 0, t, request.request_id) for t in run):
                        sinks[r] = None
                    ended = (token in self.eos or len(out_ids[r]) >= request.params.max_new_tokens
                             or stops.hit(out_ids[r], len(run)))
                    if ended:
                        live[r] = False
                    else:
                        feeds[r] = run
                if not any(live):
                    break
                width = max(len(f) for f in feeds)
                ids = torch.full((rows, width), self.pad_id, dtype=torch.long)
                new_mask = torch.zeros((rows, width), dtype=torch.long)
                pos = torch.zeros((rows, width), dtype=torch.long)
                lasts = []
                for r, feed in enumerate(feeds):
                    if feed:
                        ids[r, :len(feed)] = torch.tensor(feed)
                        new_mask[r, :len(feed)] = 1
                    pos[r] = seen[r] + torch.arange(width).clamp(max=max(len(feed) - 1, 0))
                    seen[r] += len(feed)
                    lasts.append(max(len(feed) - 1, 0))
                mask = torch.cat([mask, new_mask.to(self.device)], dim=1)  # (R, W + ...)
                keep = sorted(set(lasts))
                out = self._model(input_ids=ids.to(self.device), attention_mask=mask, position_ids=pos.to(self.device),
                                  cache=cache, use_cache=True,
                                  logits_to_keep=torch.tensor(keep, device=self.device))
                at = torch.tensor([keep.index(k) for k in lasts], device=self.device)
                logits = out.logits[torch.arange(rows, device=self.device), at]  # (R, V)
                steps += 1
                last = time.perf_counter()
        latency_ms = (time.perf_counter() - start) * 1000
        if steps:
            self._speed.add(steps, last - first)
        self._profile.add(rows, (first - start) * 1000, steps, (last - first) * 1000)
        return self._completions(requests, prompts, out_ids, out_lps, latency_ms, aborted_at)

    def _record_speed(self, rows: int, start: float, clock: _Clock) -> None:
        """Feed ``tokens_per_second`` and ``speed`` from one call: prefill until the first logits, then decode steps."""
        if clock.calls == 0:
            return
        self._speed.add(clock.calls - 1, clock.last - clock.first)
        self._profile.add(rows, (clock.first - start) * 1000, clock.calls - 1, (clock.last - clock.first) * 1000)

    def _inputs(self, prompts: Sequence[list[int]], n: int, beams: bool, new_tokens: int
                ) -> tuple[torch.Tensor, torch.Tensor, DynamicCache | None]:
        """``(input_ids (B*n, W), attention_mask (B*n, W), cache)``: left-padded without a shared prefix; with one
        ``[prefix][pads][suffix]`` and a cache holding the prefix KV for every row (``n`` rows per prompt).

        The cache is made of :class:`_BufferedLayer` s with room for ``W + new_tokens`` tokens; None (generate builds
        its own) for beam search and for models whose cache is not plain full attention."""
        prefix = [] if beams or self._prefix is None else _shared_prefix(prompts)
        kv = self._prefix.kv(prefix) if self._prefix is not None and prefix else None
        if kv is None:
            input_ids, attention_mask = _left_pad(prompts, self.pad_id, self.device)  # (B, W)
        else:
            input_ids, attention_mask = _middle_pad(prompts, len(prefix), self.pad_id, self.device)  # (B, W)
        if n > 1:  # we choose the tokens: one row per sample
            input_ids = input_ids.repeat_interleave(n, dim=0)  # (B*n, W)
            attention_mask = attention_mask.repeat_interleave(n, dim=0)
        if beams or not self._kv_layers:
            return input_ids, attention_mask, None
        rows, width = input_ids.shape  # W counts the prefix: the cache ends up holding W + new_tokens - 1 tokens
        return input_ids, attention_mask, _buffered_cache(self._kv_layers, width + new_tokens, kv, rows)

    def _config(self, params: SamplingParams) -> GenerationConfig:
        beams = params.num_beams > 1
        return GenerationConfig(
            max_new_tokens=params.max_new_tokens, do_sample=False, num_beams=params.num_beams,
            num_return_sequences=params.n if beams else 1, eos_token_id=self.eos, pad_token_id=self.pad_id,
            return_dict_in_generate=beams, output_logits=beams)

    def _completions(self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]],
                     rows: list[list[int]], logprobs: list[list[float]], latency_ms: float,
                     aborted_at: Sequence[int | None] | None = None) -> list[list[Completion]]:
        """Each request's completions from the raw rows; ``aborted_at[r]``: tokens row ``r`` had when it was aborted.

        An aborted row keeps those tokens and finishes 'abort', unless it had ended before (eos, stop string, its own
        ``max_new_tokens``): then that ending stands.
        """
        n = requests[0].params.n
        assert len(rows) == len(requests) * n, f"{len(rows)} rows for {len(requests)} requests x n={n}"
        out: list[list[Completion]] = []
        for b, (req, prompt) in enumerate(zip(requests, prompts, strict=True)):
            mine = []
            cap = req.params.max_new_tokens  # a chunk runs to its longest request's cap; each row stops at its own
            for j in range(n):
                r = b * n + j
                cut = aborted_at[r] if aborted_at is not None else None
                end = cap if cut is None else min(cap, cut)  # past an abort a row holds only padding
                ids, text, lps, reason = finish(rows[r][:end], logprobs[r][:end], self._tokenizer, req.params.stop,
                                                self.eos)
                if reason == "length" and end < cap:
                    reason = "abort"
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
    """Chooses every row's next token (greedy or sampled), records its raw log-prob and streams it.

    Order per step: raw log-probs; repetition penalty; constraints; then greedy argmax, or
    temperature, top-k, top-p and a draw from the request's own generator. It returns scores that
    are -inf everywhere but 0 at the chosen token, so transformers' greedy argmax takes that token.
    Rows still live (no eos, stop string or abort yet, under their request's ``max_new_tokens``) hand
    their token to their request's ``stream`` sink; a sink that raises is logged once and dropped.
    """

    def __init__(self, params: SamplingParams, requests: Sequence[GenerationRequest], constraints: _Constraints,
                 eos: Sequence[int], stops: _StopStrings | None, abort: _Abort | None, device: torch.device) -> None:
        self.constraints, self.n, self.stops, self.abort = constraints, params.n, stops, abort
        self.eos = torch.tensor(list(eos), device=device)
        self.request_ids = [r.request_id for r in requests]
        self.caps = torch.tensor([r.params.max_new_tokens for r in requests],
                                 device=device).repeat_interleave(self.n)  # (R,) each row's own token cap
        self.sinks: list[TokenSink | None] = [r.stream for r in requests]
        self.penalty = (RepetitionPenaltyLogitsProcessor(params.repetition_penalty)
                        if params.repetition_penalty != 1.0 else None)
        self.chooser = _Chooser(params, requests, device)
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
        chosen = self.chooser(processed)  # (R,)
        self._steps.append(raw_logp.gather(1, chosen[:, None])[:, 0])
        if any(sink is not None for sink in self.sinks):
            self._stream(chosen, live)
        onehot = torch.full_like(scores, float("-inf"))  # (R, V)
        return onehot.scatter_(1, chosen[:, None], 0.0)  # type: ignore[return-value]

    def _live(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(R,) bool: no eos generated yet, no stop string seen, not aborted, under its request's token cap."""
        generated = input_ids[:, self.constraints.width:]  # (R, t)
        live = ~torch.isin(generated, self.eos).any(dim=-1) & (self.caps > generated.shape[1])  # (R,)
        if self.stops is not None and self.stops.done is not None:
            live &= ~self.stops.done
        if self.abort is not None:
            live &= ~self.abort.done
        return live

    def _stream(self, chosen: torch.Tensor, live: torch.Tensor) -> None:
        """Hand each live row's token to its request's sink as ``(index within the request, token id)``."""
        # chosen (R,) token ids, live (R,) bool; finished rows only get padding: not streamed
        tokens, alive = chosen.tolist(), live.tolist()
        for b, sink in enumerate(self.sinks):
            if sink is None:
                continue
            for j in range(self.n):
                r = b * self.n + j
                if alive[r] and not send_token(sink, j, int(tokens[r]), self.request_ids[b]):
                    self.sinks[b] = None
                    break

    def logprobs(self, steps: int) -> torch.Tensor:
        """``(R, steps)`` raw log-probs of the chosen tokens (a deferred stop check may add a spare step)."""
        assert len(self._steps) >= steps, f"{len(self._steps)} recorded steps for {steps} generated tokens"
        if steps == 0:
            return torch.zeros((0, 0))
        return torch.stack(self._steps[:steps], dim=1).cpu()


class _Chooser:
    """Chooses each row's next token from its processed scores (``n`` consecutive rows per request): greedy argmax,
    or temperature, top-k, top-p and a draw from the request's own seeded generator (its rows in order)."""

    def __init__(self, params: SamplingParams, requests: Sequence[GenerationRequest], device: torch.device) -> None:
        self.greedy, self.n = params.greedy, params.n
        self.warpers: list[LogitsProcessor] = []
        if not params.greedy:
            self.warpers.append(TemperatureLogitsWarper(params.temperature))
            if params.top_k:
                self.warpers.append(TopKLogitsWarper(params.top_k))
            if params.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(params.top_p))
        self.generators = [] if params.greedy else [_generator(r.params.seed, device) for r in requests]

    def __call__(self, scores: torch.Tensor) -> torch.Tensor:
        # scores (R, V) -> (R,) token ids
        if self.greedy:
            return scores.argmax(dim=-1)
        unused = torch.zeros((scores.shape[0], 1), dtype=torch.long, device=scores.device)  # the warpers ignore ids
        for warper in self.warpers:
            scores = warper(unused, scores)
        probs = torch.softmax(scores.float(), dim=-1)  # (R, V)
        chosen = torch.empty(probs.shape[0], dtype=torch.long, device=probs.device)
        for b, gen in enumerate(self.generators):
            rows = slice(b * self.n, (b + 1) * self.n)
            chosen[rows] = torch.multinomial(probs[rows], 1, generator=gen)[:, 0]
        return chosen


class _StopTails:
    """Whether a row's tokens hold a stop string (checked on a tail, confirmed on the whole): the check of both the
    generate path (:class:`_StopStrings`) and the jump-forward loop."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer, self.stops = tokenizer, list(stops)
        self.tail = max((len(s) for s in stops), default=0) + 4  # tokens: every non-empty token adds >= 1 character

    def hit(self, row: list[int], added: int) -> bool:
        """``row`` holds a stop string (its last ``added`` tokens are new since the last check)."""
        if not self.stops:
            return False
        tail = self.tokenizer.decode(row[-(self.tail + added):], skip_special_tokens=True)
        if not any(s in tail for s in self.stops):
            return False
        text = self.tokenizer.decode(row, skip_special_tokens=True)
        return any(s in text for s in self.stops)


def _replay(requests: Sequence[GenerationRequest], completions: Sequence[Sequence[Completion]]) -> None:
    """Stream finished completions token by token, in order (beam search: tokens are final only after the call)."""
    for request, mine in zip(requests, completions, strict=True):
        sink = request.stream
        if sink is not None:
            all(send_token(sink, c.index, t, request.request_id)  # all() stops at the first failure
                for c in mine for t in c.token_ids)


class _Abort(StoppingCriteria):
    """Stops the rows of requests cancelled or past their deadline, and records how many tokens each row had then.

    Called by generate after every step: one ``time.monotonic()`` and one ``aborted(now)`` per request still
    watched. ``steps[r]``: the generated length of row ``r`` when its request was aborted (None: never). A row that
    had already ended (eos, stop string, its cap) keeps that ending: it lies within those tokens.
    """

    def __init__(self, requests: Sequence[GenerationRequest], k: int, prompt_width: int, device: torch.device) -> None:
        self.requests, self.k, self.width = list(requests), k, prompt_width
        self.watched = [b for b, r in enumerate(requests) if r.deadline is not None or r.cancel is not None]
        self.steps: list[int | None] = [None] * (len(requests) * k)
        self.done = torch.zeros(len(requests) * k, dtype=torch.bool, device=device)  # (R,) rows cut by abort

    @classmethod
    def watching(cls, requests: Sequence[GenerationRequest], k: int, prompt_width: int, device: torch.device
                 ) -> _Abort | None:
        """The criterion for these requests (``k`` consecutive rows each), or None when none can be aborted."""
        if all(r.deadline is None and r.cancel is None for r in requests):
            return None
        return cls(requests, k, prompt_width, device)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        # input_ids (R, P + t)
        new = torch.zeros_like(self.done)  # (R,)
        if self.watched:
            now = time.monotonic()
            hit = [b for b in self.watched if self.requests[b].aborted(now)]
            if hit:
                t = input_ids.shape[1] - self.width
                for b in hit:
                    new[b * self.k:(b + 1) * self.k] = True
                    for r in range(b * self.k, (b + 1) * self.k):
                        self.steps[r] = t
                self.watched = [b for b in self.watched if b not in hit]
                self.done |= new
        return new  # type: ignore[return-value]


class _Caps(StoppingCriteria):
    """Stops each row at its own request's ``max_new_tokens`` (a chunk runs to its longest request's cap)."""

    def __init__(self, caps: torch.Tensor, prompt_width: int) -> None:
        self.caps, self.width = caps, prompt_width  # caps (R,)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        return self.caps <= input_ids.shape[1] - self.width  # type: ignore[return-value]


class _BufferedLayer(DynamicLayer):
    """A full-attention cache layer that writes each update in place into a buffer with room for the whole call.

    transformers' ``DynamicLayer`` concatenates old and new KV at every step, copying ``(B, H, T, D)`` per layer per
    step. Here ``keys``/``values`` are views ``buffer[:, :, :length]`` of buffers allocated once with room for
    ``capacity`` tokens; a buffer that fills up doubles. The views hold the same values a ``DynamicLayer`` would.
    Operations that replace ``keys``/``values`` (crop, batch selection, beam reordering) copy the result back into a
    buffer, so the layer stays consistent if generate uses them.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = max(1, capacity)
        self.length = 0
        self._key_buf: torch.Tensor | None = None  # (B, H, C, D)
        self._value_buf: torch.Tensor | None = None  # (B, H, C, Dv)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        # key_states (B, H, T, D), value_states (B, H, T, Dv): they set the buffers' batch, heads, dtype and device
        self.device = key_states.device
        self._allocate(key_states, value_states, max(self.capacity, key_states.shape[-2]))
        self.length = 0
        self._expose()
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        # the signature is DynamicLayer's: the model's attention kwargs come through it and a full-attention layer
        # needs none of them. key_states (B, H, t, D), value_states (B, H, t, Dv)
        if not self.is_initialized or self.length == 0:  # (re)start: the first states fix batch, dtype, device
            self.lazy_initialization(key_states, value_states)
        assert self._key_buf is not None and self._value_buf is not None
        end = self.length + key_states.shape[-2]
        if end > self._key_buf.shape[-2]:
            self._grow(end)
            assert self._key_buf is not None and self._value_buf is not None
        self._key_buf[:, :, self.length:end].copy_(key_states)
        self._value_buf[:, :, self.length:end].copy_(value_states)
        self.length = end
        self._expose()
        assert self.keys is not None and self.values is not None
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def reset(self) -> None:
        super().reset()
        self._key_buf = self._value_buf = None
        self.length = 0

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # slices the views: they stay prefixes of the buffers
        if self.is_initialized and self.keys is not None:
            self.length = self.keys.shape[-2]

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        self._rebuffer()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self._rebuffer()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        super().reorder_cache(beam_idx)
        self._rebuffer()

    def _allocate(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        """Fresh buffers shaped like ``keys``/``values`` but ``room`` tokens long (contents undefined)."""
        self._key_buf = keys.new_empty((keys.shape[0], keys.shape[1], room, keys.shape[3]))  # (B, H, room, D)
        self._value_buf = values.new_empty((values.shape[0], values.shape[1], room, values.shape[3]))

    def _grow(self, needed: int) -> None:
        """Double the buffers (at least to ``needed`` tokens), keeping their first ``length`` tokens."""
        assert self._key_buf is not None and self._value_buf is not None
        old_keys, old_values = self._key_buf, self._value_buf
        self._allocate(old_keys, old_values, max(needed, 2 * old_keys.shape[-2]))
        assert self._key_buf is not None and self._value_buf is not None
        self._key_buf[:, :, :self.length].copy_(old_keys[:, :, :self.length])
        self._value_buf[:, :, :self.length].copy_(old_values[:, :, :self.length])

    def _rebuffer(self) -> None:
        """After ``keys``/``values`` were replaced by new tensors: copy them into fresh buffers of the same room."""
        if self._key_buf is None or self.keys is None or self.values is None or self.keys.data_ptr() == \
                self._key_buf.data_ptr():
            return
        keys, values = self.keys, self.values
        self._allocate(keys, values, max(self._key_buf.shape[-2], keys.shape[-2]))
        assert self._key_buf is not None and self._value_buf is not None
        self.length = keys.shape[-2]
        self._key_buf[:, :, :self.length].copy_(keys)
        self._value_buf[:, :, :self.length].copy_(values)
        self._expose()

    def _expose(self) -> None:
        assert self._key_buf is not None and self._value_buf is not None
        self.keys = self._key_buf[:, :, :self.length]  # (B, H, length, D) a view
        self.values = self._value_buf[:, :, :self.length]


def _buffered_cache(layers: int, capacity: int, kv: KV | None, rows: int) -> DynamicCache:
    """A cache of ``layers`` :class:`_BufferedLayer` s with room for ``capacity`` tokens; holding ``kv`` (batch 1)
    repeated to ``rows`` rows when given."""
    buffered = [_BufferedLayer(capacity) for _ in range(layers)]
    if kv is not None:
        assert len(kv) == layers, f"{len(kv)} prefix KV layers for a {layers}-layer cache"
        for layer, (k, v) in zip(buffered, kv, strict=True):
            layer.update(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1))  # (rows, H, P, D) copied in once
    cache = DynamicCache()
    cache.layers = list(buffered)
    cache.layer_class_to_replicate = None  # every layer is here: none is added lazily
    return cache


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
        self.tails, self.width = _StopTails(tokenizer, stops), prompt_width
        self.done: torch.Tensor | None = None  # (R,) rows that have produced a stop string so far

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        # input_ids (R, P + t)
        generated = input_ids[:, self.width:].tolist()
        done = torch.zeros(len(generated), dtype=torch.bool, device=input_ids.device)
        for r, row in enumerate(generated):
            if self.done is not None and bool(self.done[r]):
                continue
            done[r] = self.tails.hit(row, 1)
        self.done = done if self.done is None else self.done | done
        return done  # type: ignore[return-value]
