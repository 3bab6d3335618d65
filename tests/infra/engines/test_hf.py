"""HFEngine on a tiny random Llama: greedy/logprob parity with plain forward passes, batching, sampling, stops,
constraints, weight updates, sleep/wake; plus the vLLM module's behaviour without vLLM and make_engine.

Run: .venv/bin/python -m pytest tests/infra/engines -q
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines import make_engine
from infra.engines.base import (
    Completion,
    Engine,
    EngineAsleep,
    EngineError,
    EngineUnavailable,
    GenerationRequest,
    SamplingParams,
    WeightsMissing,
)
from infra.engines.hf import HFEngine

GREEDY = SamplingParams(temperature=0, max_new_tokens=6)
PROMPTS = [[5, 6], [7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20]]  # different lengths: padding matters
EOS = 3


def run(engine: HFEngine, prompt: str | list[int], params: SamplingParams = GREEDY) -> Completion:
    return engine.generate([GenerationRequest(prompt=prompt, params=params)])[0][0]


def manual_greedy(model: LlamaForCausalLM, prompt: list[int], steps: int) -> list[int]:
    """Argmax of a full forward pass per step (no KV cache, no padding)."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def forward_logprobs(model: LlamaForCausalLM, prompt: list[int], generated: list[int]) -> torch.Tensor:
    """log_softmax of one forward pass at each generated token: (G,)."""
    ids = torch.tensor([prompt + generated])  # (1, P + G)
    with torch.no_grad():
        logp = model(ids).logits[0].log_softmax(-1)  # (P + G, V)
    p = len(prompt)
    return logp[p - 1:p - 1 + len(generated)].gather(1, torch.tensor(generated)[:, None])[:, 0]


class AllowOnly:
    """A test constraint: only these token ids may be generated (vLLM's per-request signature)."""

    def __init__(self, allowed: set[int]) -> None:
        self.allowed = sorted(allowed)

    def __call__(self, prompt_token_ids: list[int], output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        keep = torch.full_like(logits, float("-inf"))
        keep[self.allowed] = 0.0
        return logits + keep


class EosAfter:
    """Force the eos token once ``k`` tokens are out."""

    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, prompt_token_ids: list[int], output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if len(output_token_ids) < self.k:
            logits[EOS] = float("-inf")
            return logits
        forced = torch.full_like(logits, float("-inf"))
        forced[EOS] = 0.0
        return forced


def test_greedy_equals_manual_argmax_loop(engine: HFEngine, model: LlamaForCausalLM) -> None:
    for prompt in PROMPTS:
        out = run(engine, prompt)
        assert out.finish_reason == "length" and len(out.token_ids) == GREEDY.max_new_tokens
        assert out.token_ids == manual_greedy(model, prompt, GREEDY.max_new_tokens)
        assert out.prompt_tokens == len(prompt)


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=1.0, seed=0, max_new_tokens=8),
    SamplingParams(temperature=0.7, top_k=5, top_p=0.9, repetition_penalty=1.3, seed=1, max_new_tokens=8),
    SamplingParams(temperature=0, max_new_tokens=8),
])
def test_logprobs_are_raw_log_softmax_of_a_forward_pass(engine: HFEngine, model: LlamaForCausalLM,
                                                        params: SamplingParams) -> None:
    """Whatever the sampling params, logprobs are the temperature-1 model log-probs of the chosen tokens."""
    prompt = PROMPTS[1]
    out = run(engine, prompt, params)
    assert len(out.logprobs) == len(out.token_ids)
    torch.testing.assert_close(torch.tensor(out.logprobs), forward_logprobs(model, prompt, out.token_ids),
                               atol=1e-5, rtol=1e-5)


def test_batched_equals_unbatched_with_left_padding(engine: HFEngine) -> None:
    alone = [run(engine, p) for p in PROMPTS]
    together = engine.generate([GenerationRequest(prompt=p, params=GREEDY) for p in PROMPTS])
    for a, [t] in zip(alone, together, strict=True):
        assert a.token_ids == t.token_ids
        torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(t.logprobs), atol=1e-4, rtol=1e-4)


def test_batches_are_split_at_max_batch_size(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    small = HFEngine(model, tokenizer, dtype="fp32", max_batch_size=2)
    big = HFEngine(model, tokenizer, dtype="fp32", max_batch_size=32)
    requests = [GenerationRequest(prompt=p, params=GREEDY) for p in PROMPTS * 2]
    assert [c[0].token_ids for c in small.generate(requests)] == [c[0].token_ids for c in big.generate(requests)]


def test_seeded_samples_are_reproducible_distinct_and_batch_independent(engine: HFEngine) -> None:
    params = SamplingParams(temperature=1.0, n=4, seed=123, max_new_tokens=8)
    first = [c.token_ids for c in run_all(engine, PROMPTS[0], params)]
    again = [c.token_ids for c in run_all(engine, PROMPTS[0], params)]
    assert first == again
    assert len({tuple(t) for t in first}) > 1, "the n samples should differ"
    other = params.model_copy(update={"seed": 7})
    batched = engine.generate([GenerationRequest(prompt=PROMPTS[2], params=other),
                               GenerationRequest(prompt=PROMPTS[0], params=params)])
    assert [c.token_ids for c in batched[1]] == first
    assert [c.index for c in batched[1]] == [0, 1, 2, 3]


def run_all(engine: HFEngine, prompt: list[int], params: SamplingParams) -> list[Completion]:
    return engine.generate([GenerationRequest(prompt=prompt, params=params)])[0]


def test_stop_string_truncates_text_and_sets_finish_reason(engine: HFEngine,
                                                           tokenizer: PreTrainedTokenizerFast) -> None:
    free = run(engine, PROMPTS[1], GREEDY)
    words = [str(tokenizer.decode([t])) for t in free.token_ids]
    k = next(i for i in range(1, len(words)) if words[i] not in words[:i])  # a word first seen at position k
    out = run(engine, PROMPTS[1], GREEDY.model_copy(update={"stop": (words[k], "never-generated")}))
    assert out.finish_reason == "stop"
    assert out.token_ids == free.token_ids[:k + 1]  # the token that completed the stop is kept ...
    assert out.logprobs == free.logprobs[:k + 1]
    assert out.text == tokenizer.decode(free.token_ids[:k + 1])[:-len(words[k])]  # ... but not its text
    assert words[k] not in out.text


def test_beam_search_cuts_stop_strings_afterwards(engine: HFEngine, tokenizer: PreTrainedTokenizerFast) -> None:
    params = SamplingParams(temperature=0, num_beams=3, n=1, max_new_tokens=5)
    [free] = run_all(engine, PROMPTS[1], params)
    word = str(tokenizer.decode([free.token_ids[2]]))
    k = next(i for i, t in enumerate(free.token_ids) if str(tokenizer.decode([t])) == word)
    [cut] = run_all(engine, PROMPTS[1], params.model_copy(update={"stop": (word,)}))
    assert cut.finish_reason == "stop" and cut.token_ids == free.token_ids[:k + 1] and word not in cut.text


def test_mixed_params_in_one_call_keep_request_order(engine: HFEngine) -> None:
    short, long = SamplingParams(temperature=0, max_new_tokens=2), SamplingParams(temperature=0, max_new_tokens=5)
    out = engine.generate([GenerationRequest(prompt=PROMPTS[0], params=long, request_id="a"),
                           GenerationRequest(prompt=PROMPTS[1], params=short, request_id="b"),
                           GenerationRequest(prompt=PROMPTS[2], params=long, request_id="c")])
    assert [c[0].request_id for c in out] == ["a", "b", "c"]
    assert [len(c[0].token_ids) for c in out] == [5, 2, 5]
    assert out[1][0].token_ids == run(engine, PROMPTS[1], long).token_ids[:2]


def test_requests_differing_only_in_max_new_tokens_share_one_model_call(engine: HFEngine,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = engine._model.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["input_ids"].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(engine._model, "generate", counted)
    caps = [3, 4, 5, 6]  # the loop caps each turn's tokens from its own remaining budget
    out = engine.generate([GenerationRequest(prompt=PROMPTS[i % len(PROMPTS)],
                                             params=SamplingParams(temperature=0, max_new_tokens=c))
                           for i, c in enumerate(caps)])
    assert calls == [4]  # one batch of four rows, not four calls
    assert [len(c[0].token_ids) for c in out] == caps and all(c[0].finish_reason == "length" for c in out)


def test_max_new_tokens_gives_length(engine: HFEngine) -> None:
    out = run(engine, PROMPTS[0], SamplingParams(temperature=0, max_new_tokens=3))
    assert out.finish_reason == "length" and len(out.token_ids) == 3


def test_eos_ends_the_completion(engine: HFEngine) -> None:
    request = GenerationRequest(prompt=PROMPTS[0], params=GREEDY, constraint=lambda: EosAfter(2))
    [[out]] = engine.generate([request])
    assert out.finish_reason == "eos"
    assert len(out.token_ids) == 3 and out.token_ids[-1] == EOS and EOS not in out.token_ids[:2]
    assert "</s>" not in out.text and len(out.logprobs) == 3


def test_chat_prompt_uses_the_chat_template(engine: HFEngine, tokenizer: PreTrainedTokenizerFast) -> None:
    messages = [{"role": "user", "content": "find me cheap boots"}]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "user find me cheap boots assistant"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    chat = run(engine, messages)  # type: ignore[arg-type]
    assert chat.prompt_tokens == len(ids) == 6
    assert chat.token_ids == run(engine, ids).token_ids


def test_chat_prompt_without_template_is_a_clear_error(model: LlamaForCausalLM,
                                                       tokenizer: PreTrainedTokenizerFast) -> None:
    tokenizer.chat_template = None
    with pytest.raises(EngineError, match="chat template"):
        run(HFEngine(model, tokenizer, dtype="fp32"), [{"role": "user", "content": "boots"}])  # type: ignore[list-item]


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, n=3, seed=5, max_new_tokens=6),
                                    SamplingParams(temperature=0, num_beams=3, n=2, max_new_tokens=6)])
def test_constraint_applies_to_its_own_request_only(engine: HFEngine, params: SamplingParams) -> None:
    plain = [c.token_ids for c in run_all(engine, PROMPTS[2], params)]
    out = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=params, constraint=lambda: AllowOnly({5, 6})),
                           GenerationRequest(prompt=PROMPTS[2], params=params)])
    assert all(set(c.token_ids) <= {5, 6} for c in out[0])
    assert [c.token_ids for c in out[1]] == plain


class EosThenNothing(EosAfter):
    """Like EosAfter, but allows no token at all once the eos is out (finished rows must not be asked)."""

    def __call__(self, prompt_token_ids: list[int], output_token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        if EOS in output_token_ids:
            return torch.full_like(logits, float("-inf"))
        return super().__call__(prompt_token_ids, output_token_ids, logits)


def test_finished_rows_are_not_constrained(engine: HFEngine) -> None:
    """A row past its eos keeps being padded while others run; its constraint is not consulted there."""
    out = engine.generate([GenerationRequest(prompt=PROMPTS[0], params=GREEDY, constraint=lambda: EosThenNothing(1)),
                           GenerationRequest(prompt=PROMPTS[1], params=GREEDY)])
    assert out[0][0].finish_reason == "eos" and len(out[0][0].token_ids) == 2
    assert len(out[1][0].token_ids) == GREEDY.max_new_tokens


def test_a_constraint_that_allows_nothing_is_an_error(engine: HFEngine) -> None:
    with pytest.raises(EngineError, match="allows no token"):
        engine.generate([GenerationRequest(prompt=PROMPTS[0], params=GREEDY, constraint=lambda: AllowOnly(set()))])


def test_beam_search_returns_n_best_with_raw_logprobs(engine: HFEngine, model: LlamaForCausalLM) -> None:
    params = SamplingParams(temperature=0, num_beams=4, n=3, max_new_tokens=5)
    beams = run_all(engine, PROMPTS[1], params)
    assert len(beams) == 3 and len({tuple(b.token_ids) for b in beams}) == 3
    for b in beams:
        torch.testing.assert_close(torch.tensor(b.logprobs), forward_logprobs(model, PROMPTS[1], b.token_ids),
                                   atol=1e-5, rtol=1e-5)
    sums = [sum(b.logprobs) for b in beams]  # equal lengths, no penalty: beam order = log-prob order
    assert sums == sorted(sums, reverse=True)
    greedy = run(engine, PROMPTS[1], SamplingParams(temperature=0, max_new_tokens=5))
    assert sums[0] >= sum(greedy.logprobs) - 1e-5


def test_update_weights_changes_outputs_and_bumps_version(engine: HFEngine, model: LlamaForCausalLM) -> None:
    before = run(engine, PROMPTS[1])
    original = {k: v.clone() for k, v in model.state_dict().items()}
    head = model.lm_head.weight
    torch.manual_seed(3)
    ptr = head.data_ptr()
    engine.update_weights({"lm_head.weight": torch.randn_like(head)}, version=1)
    assert head.data_ptr() == ptr, "weights must be copied in place"
    after = run(engine, PROMPTS[1])
    assert engine.weights_version == 1 and after.weights_version == 1 and before.weights_version == 0
    assert after.token_ids != before.token_ids
    engine.update_weights(original, version=2)
    assert run(engine, PROMPTS[1]).token_ids == before.token_ids


def test_update_weights_rejects_unknown_keys_shapes_and_old_versions(engine: HFEngine) -> None:
    with pytest.raises(KeyError, match="not in the model"):
        engine.update_weights({"nope.weight": torch.zeros(1)}, version=1)
    with pytest.raises(ValueError, match="shape mismatch"):
        engine.update_weights({"lm_head.weight": torch.zeros(2, 2)}, version=1)
    engine.update_weights({}, version=5)
    with pytest.raises(ValueError, match="older"):
        engine.update_weights({}, version=4)


def test_sleep_blocks_generate_and_wake_restores_identical_outputs(engine: HFEngine) -> None:
    before = run(engine, PROMPTS[2])
    engine.sleep()
    assert engine.asleep
    with pytest.raises(EngineAsleep):
        run(engine, PROMPTS[2])
    with pytest.raises(EngineAsleep):
        engine.update_weights({}, version=1)
    engine.wake()
    after = run(engine, PROMPTS[2])
    assert after.token_ids == before.token_ids and after.logprobs == before.logprobs


def test_level2_sleep_frees_weights_until_all_are_sent_again(engine: HFEngine, model: LlamaForCausalLM) -> None:
    before = run(engine, PROMPTS[2])
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    engine.sleep(level=2)
    assert model.lm_head.weight.numel() == 0
    engine.wake()
    with pytest.raises(WeightsMissing):
        run(engine, PROMPTS[2])
    engine.update_weights({k: v for k, v in saved.items() if k != "lm_head.weight"}, version=1)
    with pytest.raises(WeightsMissing, match="1 weight tensors"):
        run(engine, PROMPTS[2])
    engine.update_weights(saved, version=2)
    assert run(engine, PROMPTS[2]).token_ids == before.token_ids


def test_tokens_per_second_is_measured(engine: HFEngine) -> None:
    assert engine.tokens_per_second is None
    run(engine, PROMPTS[0])
    assert engine.tokens_per_second is not None and engine.tokens_per_second > 0


def test_bf16_autocast_runs_and_stays_close(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast) -> None:
    out = run(HFEngine(model, tokenizer, dtype="bf16"), PROMPTS[1])
    assert len(out.token_ids) == GREEDY.max_new_tokens
    ref = forward_logprobs(model, PROMPTS[1], out.token_ids)
    torch.testing.assert_close(torch.tensor(out.logprobs), ref, atol=0.1, rtol=0.05)


def test_sid_constraint_plugs_in_through_the_factory(tokenizer: PreTrainedTokenizerFast,
                                                     model: LlamaForCausalLM) -> None:
    """sid.decoding's vLLM-style processor is a RowLogitsProcessor: the engine yields only live SIDs."""
    from sid.decoding import VllmSidLogitsProcessor
    from sid.tokens import SidTokenMap, add_sid_tokens, sid_vocabulary
    from sid.trie import SidTrie

    codes = np.array([[0, 1, 0], [0, 2, 0], [1, 0, 0], [2, 3, 1]])
    trie = SidTrie([f"item{i}" for i in range(len(codes))], codes)
    vocab = sid_vocabulary((codes.max(axis=0) + 1).tolist())
    add_sid_tokens(tokenizer, model, {t: "" for t in vocab})
    tmap = SidTokenMap.from_tokenizer(tokenizer, vocab)
    engine = HFEngine(model, tokenizer, dtype="fp32")

    def factory() -> VllmSidLogitsProcessor:
        return VllmSidLogitsProcessor(trie, tmap, end_token_ids=[EOS])

    params = SamplingParams(temperature=1.0, n=6, seed=0, max_new_tokens=4)
    for c in engine.generate([GenerationRequest(prompt="find boots", params=params, constraint=factory)])[0]:
        assert c.finish_reason == "eos" and len(c.token_ids) == 4
        assert trie.item_at(tmap.codes_from_ids(c.token_ids[:3])) is not None


def test_params_and_requests_are_validated() -> None:
    with pytest.raises(ValueError, match="temperature=0"):
        SamplingParams(num_beams=2, temperature=1.0)
    with pytest.raises(ValueError, match="num_beams >= n"):
        SamplingParams(num_beams=2, n=3, temperature=0)
    with pytest.raises(ValueError, match="empty"):
        GenerationRequest(prompt=[])
    with pytest.raises(ValueError):
        SamplingParams(bogus=1)  # type: ignore[call-arg]


def test_make_engine_dispatches_and_satisfies_the_protocol(model: LlamaForCausalLM,
                                                           tokenizer: PreTrainedTokenizerFast) -> None:
    engine = make_engine("hf", model, tokenizer, dtype="fp32", max_batch_size=4)
    assert isinstance(engine, HFEngine) and isinstance(engine, Engine)
    with pytest.raises(ValueError, match="backend"):
        make_engine("tgi", model, tokenizer)  # type: ignore[arg-type]


def test_vllm_module_imports_without_vllm_and_says_how_to_get_it() -> None:
    import importlib.util

    from infra.engines.vllm import VllmEngine

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here; bench/engines.py --vllm exercises it")
    with pytest.raises(EngineUnavailable, match=r"sidekick\[gpu\]"):
        VllmEngine("some/model")
