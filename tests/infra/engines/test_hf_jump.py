"""HFEngine's jump-forward loop on a tiny random Llama: a request's ``jump`` oracle names tokens that must follow,
and the engine appends them without a decode step each.

Every test compares with the generate path on the same model (fp32): an oracle that forces nothing gives its
completions exactly; an oracle that forces what greedy decoding would write anyway gives the same tokens in fewer
forward passes, alone or batched with rows of other lengths and runs (the pads between runs are holes in the cache
that must not shift any token's position or attention).

Run: .venv/bin/python -m pytest tests/infra/engines/test_hf_jump.py -q
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines.base import Completion, GenerationRequest, SamplingParams
from infra.engines.hf import HFEngine
from tests.infra.engines.test_hf_prefix import forward_lengths

GREEDY = SamplingParams(temperature=0, max_new_tokens=12)
PROMPTS = [[5, 9, 12, 7], [30, 31, 8, 8, 14, 22, 40, 6, 11], [17], [44, 4, 19, 23, 5, 5]]


def no_jump(_: list[int]) -> list[int]:
    return []


def reference(engine: HFEngine, prompt: list[int], params: SamplingParams = GREEDY) -> Completion:
    """The generate path's completion (no oracle)."""
    return engine.generate([GenerationRequest(prompt=prompt, params=params)])[0][0]


def forcing(want: Sequence[int], at: set[int], run: int) -> Callable[[list[int]], list[int]]:
    """An oracle that, once ``len(output)`` is in ``at``, forces the next ``run`` tokens of ``want``."""
    def jump(output: list[int]) -> list[int]:
        k = len(output)
        assert list(output) == list(want[:k]), f"the engine went off the reference at {k}: {output} vs {want[:k]}"
        return list(want[k:k + run]) if k in at else []
    return jump


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, seed=3, max_new_tokens=10),
                                    SamplingParams(temperature=0.7, top_k=6, top_p=0.9, seed=4, max_new_tokens=10)])
def test_an_oracle_that_forces_nothing_gives_the_generate_results(engine: HFEngine, params: SamplingParams) -> None:
    for prompt in PROMPTS:
        want = reference(engine, prompt, params)
        [[got]] = engine.generate([GenerationRequest(prompt=prompt, params=params, jump=no_jump)])
        assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, want.finish_reason)
        torch.testing.assert_close(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-5, rtol=1e-5)


def test_forced_runs_give_the_same_tokens_in_fewer_forward_passes(engine: HFEngine, model: LlamaForCausalLM) -> None:
    prompt = PROMPTS[1]
    want = reference(engine, prompt)
    assert len(want.token_ids) == 12 and want.finish_reason == "length"
    jump = forcing(want.token_ids, at={1, 6}, run=3)  # after the 1st and the 6th token: the next 3 forced
    with forward_lengths(engine.model) as lengths:
        [[got]] = engine.generate([GenerationRequest(prompt=prompt, params=GREEDY, jump=jump)])
    assert got.token_ids == want.token_ids and got.finish_reason == "length"
    # the prefill chooses token 0; tokens 1-3 and 6-8 are forced; each later pass feeds the last chosen token and
    # its run and chooses the next: 4, 5, 9, 10, 11 (the 12th token ends the row, so it is never fed)
    assert lengths == [len(prompt), 4, 1, 4, 1, 1]
    lp = got.logprobs
    assert [lp[i] for i in (1, 2, 3, 6, 7, 8)] == [0.0] * 6  # forced: no choice was made
    chosen = (0, 4, 5, 9, 10, 11)
    torch.testing.assert_close(torch.tensor([lp[i] for i in chosen]), torch.tensor([want.logprobs[i] for i in chosen]),
                               atol=1e-5, rtol=1e-5)


def test_batched_rows_with_different_runs_equal_each_row_alone(engine: HFEngine) -> None:
    """Rows of different prompt lengths with runs of different lengths at different steps: the pads between a short
    run and the longest are masked holes, and every row still gets exactly its own greedy tokens."""
    wants = [reference(engine, p) for p in PROMPTS]
    plans = [({1}, 4), ({2, 7}, 2), (set(), 0), ({0 + 1, 4, 8}, 1)]
    reqs = [GenerationRequest(prompt=p, params=GREEDY, jump=forcing(w.token_ids, at, run))
            for p, w, (at, run) in zip(PROMPTS, wants, plans, strict=True)]
    got = engine.generate(reqs)
    for [g], w in zip(got, wants, strict=True):
        assert g.token_ids == w.token_ids
        chosen = [i for i, lp in enumerate(g.logprobs) if lp != 0.0]  # forced tokens have 0.0
        assert len(chosen) < len(g.logprobs) or g is got[2][0]
        torch.testing.assert_close(torch.tensor([g.logprobs[i] for i in chosen]),
                                   torch.tensor([w.logprobs[i] for i in chosen]), atol=1e-5, rtol=1e-5)


def test_a_run_that_completes_the_stop_string_ends_the_row_without_another_pass(
        engine: HFEngine, tokenizer: PreTrainedTokenizerFast) -> None:
    prompt = PROMPTS[0]
    free = reference(engine, prompt)
    words = [str(tokenizer.decode([t])) for t in free.token_ids]
    k = next(i for i in range(3, len(words)) if words[i] not in words[:i])  # a word first seen at position k >= 3
    stop = GREEDY.model_copy(update={"stop": (words[k],)})
    want = reference(engine, prompt, stop)
    assert want.finish_reason == "stop" and len(want.token_ids) == k + 1
    jump = forcing(free.token_ids, at={k - 1}, run=5)  # the run holds the stop word and more
    with forward_lengths(engine.model) as lengths:
        [[got]] = engine.generate([GenerationRequest(prompt=prompt, params=stop, jump=jump)])
    assert (got.token_ids, got.text, got.finish_reason) == (want.token_ids, want.text, "stop")
    assert len(lengths) == k - 1  # prefill + k - 2 passes: the token chosen at k - 1 and its run are never fed


def test_a_run_is_cut_at_max_new_tokens_and_eos_is_never_followed_by_one(engine: HFEngine) -> None:
    prompt = PROMPTS[2]
    want = reference(engine, prompt)
    short = GREEDY.model_copy(update={"max_new_tokens": 4})
    [[got]] = engine.generate([GenerationRequest(prompt=prompt, params=short,
                                                 jump=forcing(want.token_ids, at={2}, run=6))])
    assert got.token_ids == want.token_ids[:4] and got.finish_reason == "length"
    eos = engine.eos[0]

    def after_eos(output: list[int]) -> list[int]:
        assert output[-1] != eos, "the oracle was asked after an eos"
        return []

    biased = SamplingParams(temperature=0, max_new_tokens=6)
    [[out]] = engine.generate([GenerationRequest(prompt=prompt, params=biased, jump=after_eos,
                                                 constraint=lambda: _force(eos))])
    assert out.token_ids == [eos] and out.finish_reason == "eos"


def _force(token: int) -> Callable[[list[int], list[int], torch.Tensor], torch.Tensor]:
    def proc(prompt: list[int], output: list[int], logits: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(logits, float("-inf"))
        out[token] = 0.0
        return out
    return proc


def test_a_cached_shared_prefix_works_with_jumps(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    cached = HFEngine(model, tokenizer, dtype="fp32", prefix_min_tokens=8)
    plain = HFEngine(model, tokenizer, dtype="fp32", prefix_cache=False)
    shared = [6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    prompts = [[*shared, 20, 21], [*shared, 30], [*shared, 40, 41, 42]]
    wants = [reference(plain, p) for p in prompts]
    reqs = [GenerationRequest(prompt=p, params=GREEDY, jump=forcing(w.token_ids, at={1, 5}, run=2))
            for p, w in zip(prompts, wants, strict=True)]
    got = cached.generate(reqs)
    assert [g[0].token_ids for g in got] == [w.token_ids for w in wants]
    assert cached.prefix_stats["misses"] == 1


def test_streams_get_every_token_and_a_cancel_cuts_only_its_row(engine: HFEngine) -> None:
    want = [reference(engine, p) for p in PROMPTS[:2]]
    streamed: list[int] = []
    cancel = threading.Event()

    def jump_then_cancel(output: list[int]) -> list[int]:
        if len(output) == 3:
            cancel.set()  # the second request is cancelled mid-call
        return []

    reqs = [GenerationRequest(prompt=PROMPTS[0], params=GREEDY, jump=forcing(want[0].token_ids, at={2}, run=3),
                              stream=lambda i, t: streamed.append(t)),
            GenerationRequest(prompt=PROMPTS[1], params=GREEDY, jump=jump_then_cancel, cancel=cancel)]
    first, second = engine.generate(reqs)
    assert first[0].token_ids == want[0].token_ids and streamed == want[0].token_ids
    assert second[0].finish_reason == "abort" and second[0].token_ids == want[1].token_ids[:3]


def test_requests_without_an_oracle_or_with_n_above_one_take_the_generate_path(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, n=2, seed=5, max_new_tokens=6)
    calls: list[int] = []

    def counting(output: list[int]) -> list[int]:
        calls.append(len(output))
        return []

    got = engine.generate([GenerationRequest(prompt=PROMPTS[0], params=params, jump=counting),
                           GenerationRequest(prompt=PROMPTS[1], params=GREEDY)])
    assert calls == []  # n = 2: the oracle is ignored
    assert [c.token_ids for c in got[0]] == [c.token_ids for c in
                                             engine.generate([GenerationRequest(prompt=PROMPTS[0], params=params)])[0]]
    assert got[1][0].token_ids == reference(engine, PROMPTS[1]).token_ids
