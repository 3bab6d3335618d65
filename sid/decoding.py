"""Constrained decoding of SIDs: a trie-backed logits processor (HF and vLLM flavours) and beam search.

Inside a SID span, only tokens that extend the codes generated so far towards a live item that
passes the request's :class:`~sid.trie.ItemFilter` keep their logit; every other logit becomes
``-inf``. After a complete SID only the end tokens are allowed. If a prefix has no allowed
continuation (a filter that excludes every item), only the end tokens are allowed and the caller
must treat the result as invalid (:func:`constrained_beam_search` drops it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import GenerationMixin, LogitsProcessor, LogitsProcessorList, PreTrainedModel, PreTrainedTokenizerBase

from sid.codebook import SidError, sid_string
from sid.tokens import SidTokenMap
from sid.trie import ItemFilter, SidTrie

_END = (-1,)  # cache key: "only end tokens"


class _SidConstraint:
    """The shared core: generated token ids -> the token ids allowed next (None = unconstrained)."""

    def __init__(self, trie: SidTrie, token_map: SidTokenMap, flt: ItemFilter | None, start_token_id: int | None,
                 end_token_ids: Sequence[int]) -> None:
        if not end_token_ids:
            raise ValueError("end_token_ids must not be empty: after a complete SID something must be allowed")
        if token_map.depth < trie.depth:
            raise SidError(f"the token map has {token_map.depth} levels but SIDs have {trie.depth}")
        pairs = zip(trie.code_sizes(), token_map.sizes[:trie.depth], strict=True)
        short = [(lvl, need, have) for lvl, (need, have) in enumerate(pairs, 1) if need > have]
        if short:
            raise SidError(f"SID codes need more tokens than the token map has: (level, needed, have) {short}")
        self.trie, self.token_map, self.flt = trie, token_map, flt
        self.start_token_id = start_token_id
        self.end_token_ids = {int(t) for t in end_token_ids}
        self._cache: dict[tuple[int, ...], torch.Tensor] = {}
        self._trie_version = trie.version

    def allowed(self, generated: Sequence[int]) -> torch.Tensor | None:
        """Allowed next ids (k,) int64 on CPU for a row whose generated tokens are ``generated``; None = any."""
        span = self._span(generated)
        if span is None:
            return None
        if self._trie_version != self.trie.version:  # the catalog changed: cached masks are stale
            self._cache.clear()
            self._trie_version = self.trie.version
        ids = self._cache.get(span)
        if ids is None:
            ids = self._cache[span] = self._compute(span)
        return ids

    def _span(self, generated: Sequence[int]) -> tuple[int, ...] | None:
        """Codes of the open SID span, ``_END`` if only end tokens may follow, None if outside any span."""
        start = 0
        if self.start_token_id is not None:
            last = next((i for i in range(len(generated) - 1, -1, -1) if generated[i] == self.start_token_id), None)
            if last is None:
                return None
            start = last + 1
        codes: list[int] = []
        for tid in generated[start:]:
            lc = self.token_map.level_code(int(tid))
            if lc is not None and lc[0] == len(codes) + 1 and len(codes) < self.trie.depth:
                codes.append(lc[1])
                continue
            if int(tid) in self.end_token_ids and self.start_token_id is not None:
                return None  # the span was closed: free text again
            return _END  # span closed without a start token, or a token that cannot be there
        return tuple(codes)

    def _compute(self, span: tuple[int, ...]) -> torch.Tensor:
        if span != _END and len(span) < self.trie.depth:
            codes = self.trie.children(span, self.flt)
            if len(codes):
                return torch.from_numpy(self.token_map.ids_for_level(len(span) + 1, np.asarray(codes)))  # (k,)
        return torch.tensor(sorted(self.end_token_ids), dtype=torch.int64)


def _mask_scores(scores: torch.Tensor, allowed: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """``scores`` (R, V) with every id not in ``allowed[r]`` set to -inf; a None row is left as is."""
    assert scores.ndim == 2 and scores.shape[0] == len(allowed), f"scores {tuple(scores.shape)} vs {len(allowed)} rows"
    keep = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device)  # (R, V)
    rows, cols = [], []
    for r, ids in enumerate(allowed):
        if ids is None:
            keep[r] = True
        else:
            rows.append(torch.full((len(ids),), r, dtype=torch.int64))
            cols.append(ids)
    if rows:
        keep[torch.cat(rows).to(scores.device), torch.cat(cols).to(scores.device)] = True
    return scores.masked_fill(~keep, float("-inf"))


class SidLogitsProcessor(LogitsProcessor):
    """HF logits processor that keeps generation inside the trie.

    ``prompt_length`` is the (padded) prompt length of ``input_ids``; generated tokens start there.
    With ``start_token_id`` the constraint applies only after that token (and until an end token
    closes the span); without it the whole generation is one SID followed by an end token.
    Allowed-id tensors are cached per prefix for the life of the processor (one request).
    """

    def __init__(self, trie: SidTrie, token_map: SidTokenMap, *, prompt_length: int, flt: ItemFilter | None = None,
                 start_token_id: int | None = None, end_token_ids: Sequence[int] = ()) -> None:
        self._core = _SidConstraint(trie, token_map, flt, start_token_id, end_token_ids)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.FloatTensor:
        # input_ids (B*beams, T), scores (B*beams, V)
        generated = input_ids[:, self.prompt_length:].tolist()
        masked = _mask_scores(scores, [self._core.allowed(row) for row in generated])
        return masked  # type: ignore[return-value]


class VllmSidLogitsProcessor:
    """The same constraint behind vLLM's per-request callable ``(prompt_ids, output_ids, logits (V,)) -> logits``.

    Does not import vLLM. Use one instance per request (it caches per prefix).
    """

    def __init__(self, trie: SidTrie, token_map: SidTokenMap, *, flt: ItemFilter | None = None,
                 start_token_id: int | None = None, end_token_ids: Sequence[int] = ()) -> None:
        self._core = _SidConstraint(trie, token_map, flt, start_token_id, end_token_ids)

    def __call__(self, prompt_token_ids: list[int], output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        # logits (V,)
        return _mask_scores(logits[None, :], [self._core.allowed(output_token_ids)])[0]


@dataclass(frozen=True)
class SidHit:
    """One retrieved item: its SID and the model's log-probability of the SID tokens given the prompt."""

    item_id: str
    sid: str
    codes: tuple[int, ...]
    score: float


def constrained_beam_search(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompt: str | list[int],
                            trie: SidTrie, token_map: SidTokenMap, *, num_beams: int = 10,
                            num_return: int | None = None, flt: ItemFilter | None = None,
                            max_new_tokens: int | None = None) -> list[SidHit]:
    """Beam-search SIDs after ``prompt``; return up to ``num_return`` distinct live items passing ``flt``.

    The whole generation is the SID then an end token (the model's eos), so ``prompt`` should end
    where a SID starts (e.g. with the SID start token the model was trained with). ``score`` is the
    sum of the SID tokens' log-probs as beam search saw them (the model's log-softmax; other
    processors from the model's generation config, such as a repetition penalty, would show in
    it); the end token's log-prob is left out. Hits come best first. Cost: one ``generate`` of
    ``depth + 1`` steps; the constraint adds ~0.3 ms per step for 10-20 beams on CPU.
    """
    if not isinstance(model, GenerationMixin):
        raise TypeError(f"{type(model).__name__} cannot generate; pass a causal LM (e.g. AutoModelForCausalLM)")
    num_return = num_return or num_beams
    if not 1 <= num_return <= num_beams:
        raise ValueError(f"num_return={num_return} must be in 1..num_beams={num_beams}")
    max_new_tokens = max_new_tokens or trie.depth + 1
    if max_new_tokens < trie.depth:
        raise ValueError(f"max_new_tokens={max_new_tokens} cannot hold a {trie.depth}-token SID")
    if not len(trie.children((), flt)):
        return []
    device = next(model.parameters()).device
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"] if isinstance(prompt, str) else torch.tensor([prompt])
    input_ids = ids.to(device)  # (1, T)
    end_ids = _end_token_ids(model, tokenizer)
    proc = SidLogitsProcessor(trie, token_map, prompt_length=input_ids.shape[1], flt=flt, end_token_ids=end_ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end_ids[0]
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                             num_beams=num_beams, num_return_sequences=num_return, max_new_tokens=max_new_tokens,
                             early_stopping=True, length_penalty=0.0, logits_processor=LogitsProcessorList([proc]),
                             eos_token_id=end_ids, pad_token_id=pad, output_scores=True, return_dict_in_generate=True)
        # transformers types `self` of this mixin method with a Protocol that PreTrainedModel does not meet
        steps = model.compute_transition_scores(  # type: ignore[misc]
            out.sequences, out.scores, out.beam_indices)  # (num_return, G) log-prob of each generated token
    generated = out.sequences[:, input_ids.shape[1]:]  # (num_return, G)
    return _collect_hits(generated, steps, trie, token_map, flt)


def _end_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> list[int]:
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("neither the model's generation config nor the tokenizer defines an eos token")
    return [int(e) for e in eos] if isinstance(eos, list) else [int(eos)]


def _collect_hits(generated: torch.Tensor, steps: torch.Tensor, trie: SidTrie, token_map: SidTokenMap,
                  flt: ItemFilter | None) -> list[SidHit]:
    """Turn beams into hits: keep complete SIDs of live items passing ``flt`` with a finite score, once each."""
    depth = trie.depth
    hits: dict[str, SidHit] = {}
    for row, step in zip(generated.tolist(), steps, strict=True):
        try:
            codes = token_map.codes_from_ids(row[:depth])
        except SidError:
            continue
        item = trie.item_at(codes, flt) if len(codes) == depth else None
        score = float(step[:depth].float().sum())
        if item is None or not np.isfinite(score) or (item in hits and hits[item].score >= score):
            continue
        hits[item] = SidHit(item_id=item, sid=sid_string(codes), codes=codes, score=score)
    return sorted(hits.values(), key=lambda h: -h.score)
