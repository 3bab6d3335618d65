"""HFEngine's shared-prefix KV cache on a tiny random Llama: same tokens and log-probs as without it, reuse across
calls, invalidation on weight changes, and the plain path when prompts share no long prefix.

Run: .venv/bin/python -m pytest tests/infra/engines/test_hf_prefix.py -q
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines.base import Completion, GenerationRequest, SamplingParams
from infra.engines.hf import HFEngine

PREFIX = 300
SUFFIXES = (3, 17, 40, 9, 25)  # different lengths: the middle padding matters
GREEDY = SamplingParams(temperature=0, max_new_tokens=6)


def random_ids(n: int, seed: int, vocab: int = 50) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(4, vocab) for _ in range(n)]  # 0-3 are unk/pad/bos/eos


PROMPTS = [random_ids(PREFIX, 0) + random_ids(k, 100 + k) for k in SUFFIXES]


def requests(prompts: Sequence[list[int]], params: SamplingParams) -> list[GenerationRequest]:
    """One request per prompt; sampled ones get their own seed."""
    seeded = params.greedy or params.seed is not None
    return [GenerationRequest(prompt=p, params=params if seeded else params.model_copy(update={"seed": i}))
            for i, p in enumerate(prompts)]


def assert_same(got: list[list[Completion]], want: list[list[Completion]]) -> None:
    """Identical token ids, text and finish reasons; log-probs equal up to float rounding."""
    assert [len(g) for g in got] == [len(w) for w in want]
    for g_list, w_list in zip(got, want, strict=True):
        for g, w in zip(g_list, w_list, strict=True):
            assert (g.token_ids, g.text, g.finish_reason) == (w.token_ids, w.text, w.finish_reason)
            torch.testing.assert_close(torch.tensor(g.logprobs), torch.tensor(w.logprobs), atol=1e-4, rtol=1e-4)


@contextmanager
def forward_lengths(model: LlamaForCausalLM) -> Iterator[list[int]]:
    """Records the sequence length of every forward pass of ``model`` while open."""
    lengths: list[int] = []

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        lengths.append(int(kwargs["input_ids"].shape[1]))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield lengths
    finally:
        handle.remove()


@pytest.fixture
def plain(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> HFEngine:
    return HFEngine(model, tokenizer, dtype="fp32", prefix_cache=False)


@pytest.mark.parametrize("params", [
    GREEDY,
    SamplingParams(temperature=1.0, max_new_tokens=6),
    SamplingParams(temperature=1.0, max_new_tokens=6, n=2),
    SamplingParams(temperature=0.8, top_k=8, repetition_penalty=1.2, max_new_tokens=6, n=2),
])
def test_cached_prefix_gives_the_uncached_results(engine: HFEngine, plain: HFEngine, params: SamplingParams) -> None:
    reqs = requests(PROMPTS, params)
    assert_same(engine.generate(reqs), plain.generate(reqs))
    assert engine.prefix_stats["misses"] == 1 and engine.prefix_stats["computed_tokens"] == PREFIX
    assert plain.prefix_stats["misses"] == 0


def test_suffix_positions_are_those_of_the_unpadded_prompt(engine: HFEngine, model: LlamaForCausalLM) -> None:
    """The shortest suffix sits behind the most pads; its log-probs equal one plain forward pass of its prompt."""
    out = engine.generate(requests(PROMPTS, GREEDY))[0][0]
    ids = torch.tensor([PROMPTS[0] + out.token_ids])  # (1, P + G)
    with torch.no_grad():
        logp = model(ids).logits[0].log_softmax(-1)  # (P + G, V)
    p = len(PROMPTS[0])
    want = logp[p - 1:-1].gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(out.logprobs), want, atol=1e-4, rtol=1e-4)


def test_a_second_call_reuses_the_prefix(engine: HFEngine, plain: HFEngine, model: LlamaForCausalLM) -> None:
    reqs = requests(PROMPTS, SamplingParams(temperature=1.0, max_new_tokens=6, n=2))
    first = engine.generate(reqs)
    with forward_lengths(model) as lengths:
        second = engine.generate(reqs)
    assert max(lengths) == max(SUFFIXES), f"the prefix was run again: forward lengths {lengths}"
    assert engine.prefix_stats == {"hits": 1, "misses": 1, "reused_tokens": PREFIX, "computed_tokens": PREFIX}
    assert_same(second, first)
    assert_same(second, plain.generate(reqs))


def test_a_longer_prefix_extends_a_stored_one(engine: HFEngine, plain: HFEngine, model: LlamaForCausalLM) -> None:
    """A lone prompt caches all but its last token; a new prompt sharing the 300 tokens computes only the rest."""
    engine.generate(requests(PROMPTS, GREEDY))  # stores the 300-token prefix
    lone = [PROMPTS[2]]
    with forward_lengths(model) as lengths:
        got = engine.generate(requests(lone, GREEDY))
    assert lengths[0] == SUFFIXES[2] - 1 and max(lengths) == SUFFIXES[2] - 1, lengths
    assert engine.prefix_stats["hits"] == 1 and engine.prefix_stats["reused_tokens"] == PREFIX
    assert_same(got, plain.generate(requests(lone, GREEDY)))


def test_update_weights_drops_the_cache(engine: HFEngine, model: LlamaForCausalLM,
                                        tokenizer: PreTrainedTokenizerFast) -> None:
    reqs = requests(PROMPTS, GREEDY)
    before = engine.generate(reqs)
    key = "model.layers.0.self_attn.k_proj.weight"  # changes the prefix KV itself
    torch.manual_seed(1)
    engine.update_weights({key: torch.randn_like(model.state_dict()[key])}, version=1)
    after = engine.generate(reqs)
    assert engine.prefix_stats["misses"] == 2 and engine.prefix_stats["hits"] == 0
    assert any(abs(a[0].logprobs[0] - b[0].logprobs[0]) > 1e-3 for a, b in zip(after, before, strict=True))
    assert_same(after, HFEngine(model, tokenizer, dtype="fp32", prefix_cache=False).generate(reqs))


def test_weights_changed_in_place_outside_the_engine_drop_the_cache(engine: HFEngine, model: LlamaForCausalLM,
                                                                   tokenizer: PreTrainedTokenizerFast) -> None:
    reqs = requests(PROMPTS, GREEDY)
    engine.generate(reqs)
    with torch.no_grad():
        model.model.layers[0].self_attn.v_proj.weight.mul_(-2.0)  # e.g. an optimizer step on a shared model
    after = engine.generate(reqs)
    assert engine.prefix_stats["misses"] == 2
    assert_same(after, HFEngine(model, tokenizer, dtype="fp32", prefix_cache=False).generate(reqs))


def test_sleep_drops_the_cache(engine: HFEngine) -> None:
    reqs = requests(PROMPTS, GREEDY)
    before = engine.generate(reqs)
    engine.sleep()
    engine.wake()
    assert_same(engine.generate(reqs), before)
    assert engine.prefix_stats["misses"] == 2


def test_constraints_and_stop_strings_see_the_same_rows(engine: HFEngine, plain: HFEngine,
                                                        tokenizer: PreTrainedTokenizerFast) -> None:
    allowed = sorted(set(random_ids(12, 7)))

    def only(prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        assert prompt_ids in PROMPTS
        keep = torch.full_like(logits, float("-inf"))
        keep[allowed] = 0.0
        return logits + keep

    stop = tokenizer.decode([allowed[0]])
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, stop=[stop])
    reqs = [GenerationRequest(prompt=p, params=params.model_copy(update={"seed": i}),
                              constraint=(lambda: only) if i % 2 else None) for i, p in enumerate(PROMPTS)]
    got = engine.generate(reqs)
    assert_same(got, plain.generate(reqs))
    assert all(set(c.token_ids) <= set(allowed) for c in got[1])
    assert engine.prefix_stats["misses"] == 1


def test_without_a_long_shared_prefix_the_cache_is_not_used(engine: HFEngine, plain: HFEngine) -> None:
    short = [[*random_ids(PREFIX, 1), 5], [*random_ids(PREFIX, 2), 6, 7]]  # share (almost) nothing
    assert_same(engine.generate(requests(short, GREEDY)), plain.generate(requests(short, GREEDY)))
    beams = SamplingParams(temperature=0, num_beams=2, n=2, max_new_tokens=4)  # beam search never uses it
    assert_same(engine.generate(requests(PROMPTS[:2], beams)), plain.generate(requests(PROMPTS[:2], beams)))
    assert engine.prefix_stats == {"hits": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0}


def test_prefix_min_tokens_sets_the_threshold(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    engine = HFEngine(model, tokenizer, dtype="fp32", prefix_min_tokens=PREFIX + 1)
    engine.generate(requests(PROMPTS, GREEDY))
    assert engine.prefix_stats["misses"] == 0
    with pytest.raises(ValueError, match="prefix_min_tokens"):
        HFEngine(model, tokenizer, prefix_min_tokens=0)


def test_bf16_autocast_with_the_cache_stays_close(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    reqs = requests(PROMPTS, GREEDY)
    cached = HFEngine(model, tokenizer, dtype="bf16")
    got = cached.generate(reqs)
    want = HFEngine(model, tokenizer, dtype="bf16", prefix_cache=False).generate(reqs)
    assert cached.prefix_stats["misses"] == 1
    for g, w in zip(got, want, strict=True):
        assert len(g[0].token_ids) == GREEDY.max_new_tokens
        torch.testing.assert_close(torch.tensor(g[0].logprobs[:1]), torch.tensor(w[0].logprobs[:1]),
                                   atol=0.1, rtol=0.05)
