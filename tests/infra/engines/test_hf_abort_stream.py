"""HFEngine's abort (deadline, cancel event), token streaming and measured speed on a tiny random Llama.

Run: .venv/bin/python -m pytest tests/infra/engines/test_hf_abort_stream.py -q
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pytest

from infra.engines.base import GenerationRequest, Measured, SamplingParams
from infra.engines.hf import HFEngine
from tests.infra.engines.test_hf import EosAfter

GREEDY = SamplingParams(temperature=0, max_new_tokens=6)
PROMPTS = [[5, 6], [7, 8, 9, 10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20]]
EOS = 3


class Sink:
    """Records ``(index, token)``; sets ``cancel`` once ``after`` tokens came in (if given)."""

    def __init__(self, cancel: threading.Event | None = None, after: int = 0) -> None:
        self.got: list[tuple[int, int]] = []
        self.cancel, self.after = cancel, after

    def __call__(self, index: int, token: int) -> None:
        self.got.append((index, token))
        if self.cancel is not None and len(self.got) >= self.after:
            self.cancel.set()

    def tokens(self, index: int = 0) -> list[int]:
        return [t for i, t in self.got if i == index]


def count_calls(engine: HFEngine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows of every ``model.generate`` call the engine makes from now on."""
    rows: list[int] = []
    real = engine._model.generate

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows.append(int(kwargs["input_ids"].shape[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine._model, "generate", counted)
    return rows


def test_a_request_past_its_deadline_is_not_run(engine: HFEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(engine, monkeypatch)
    params = SamplingParams(temperature=1.0, n=2, seed=0, max_new_tokens=6)
    [out] = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=params, deadline=time.monotonic() - 1)])
    assert calls == []
    assert [(c.index, c.token_ids, c.text, c.logprobs, c.finish_reason) for c in out] == \
        [(0, [], "", [], "abort"), (1, [], "", [], "abort")]
    assert out[0].prompt_tokens == len(PROMPTS[1])


def test_a_cancelled_request_leaves_its_chunk_before_the_call(engine: HFEngine,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    alone = engine.generate([GenerationRequest(prompt=PROMPTS[2], params=GREEDY)])[0][0]
    calls = count_calls(engine, monkeypatch)
    cancelled = threading.Event()
    cancelled.set()
    out = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=GREEDY, cancel=cancelled),
                           GenerationRequest(prompt=PROMPTS[2], params=GREEDY, deadline=time.monotonic() + 3600)])
    assert calls == [1], "only the live request reaches the model"
    assert out[0][0].finish_reason == "abort" and out[0][0].token_ids == []
    assert out[1][0].token_ids == alone.token_ids and out[1][0].finish_reason == "length"


@pytest.mark.parametrize("k", [1, 3])
def test_cancel_mid_call_cuts_only_that_request(engine: HFEngine, k: int) -> None:
    params = SamplingParams(temperature=0, max_new_tokens=8)
    free = engine.generate([GenerationRequest(prompt=p, params=params) for p in PROMPTS[:2]])
    cancel = threading.Event()
    sink = Sink(cancel, after=k)  # cancels its own request once it has seen k tokens
    out = engine.generate([GenerationRequest(prompt=PROMPTS[0], params=params, cancel=cancel, stream=sink),
                           GenerationRequest(prompt=PROMPTS[1], params=params)])
    cut = out[0][0]
    assert cut.finish_reason == "abort" and len(cut.token_ids) == k  # checked at the very step the sink cancelled
    assert cut.token_ids == free[0][0].token_ids[:k] and cut.logprobs == pytest.approx(free[0][0].logprobs[:k])
    assert sink.tokens() == cut.token_ids
    assert out[1][0].token_ids == free[1][0].token_ids and out[1][0].finish_reason == "length"


def test_cancel_cuts_all_n_samples_of_a_request(engine: HFEngine) -> None:
    cancel = threading.Event()
    sink = Sink(cancel, after=4)  # 2 rows: 2 steps
    params = SamplingParams(temperature=1.0, n=2, seed=3, max_new_tokens=8)
    [out] = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=params, cancel=cancel, stream=sink)])
    assert [(c.index, len(c.token_ids), c.finish_reason) for c in out] == [(0, 2, "abort"), (1, 2, "abort")]
    assert [sink.tokens(0), sink.tokens(1)] == [out[0].token_ids, out[1].token_ids]


def test_a_row_that_ended_before_the_abort_keeps_its_ending(engine: HFEngine) -> None:
    """Request a ends by eos after 2 tokens; its cancel fires (from b's sink) after b's 4th token."""
    cancel = threading.Event()
    out = engine.generate([
        GenerationRequest(prompt=PROMPTS[0], params=GREEDY, cancel=cancel, constraint=lambda: EosAfter(1)),
        GenerationRequest(prompt=PROMPTS[1], params=GREEDY, stream=Sink(cancel, after=4))])
    assert out[0][0].finish_reason == "eos" and len(out[0][0].token_ids) == 2 and out[0][0].token_ids[-1] == EOS
    assert out[1][0].finish_reason == "length" and len(out[1][0].token_ids) == GREEDY.max_new_tokens


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0, n=3, seed=5, max_new_tokens=6),
                                    SamplingParams(temperature=0, num_beams=3, n=2, max_new_tokens=5)],
                         ids=["greedy", "sampled-n3", "beams"])
def test_streamed_tokens_equal_the_completions(engine: HFEngine, params: SamplingParams) -> None:
    sinks = [Sink(), Sink(), Sink()]
    shorter = params.model_copy(update={"max_new_tokens": 3}) if params.num_beams == 1 else params
    out = engine.generate([GenerationRequest(prompt=PROMPTS[0], params=params, stream=sinks[0]),
                           GenerationRequest(prompt=PROMPTS[1], params=shorter, stream=sinks[1]),  # own cap
                           GenerationRequest(prompt=PROMPTS[2], params=params, stream=sinks[2],
                                             constraint=lambda: EosAfter(2))])  # ends by eos; the eos is streamed
    assert out[2][0].finish_reason == "eos"
    for sink, completions in zip(sinks, out, strict=True):
        assert [sink.tokens(c.index) for c in completions] == [c.token_ids for c in completions]
        assert {i for i, _ in sink.got} == set(range(params.n))


def test_a_sink_that_raises_is_logged_once_and_dropped(engine: HFEngine, caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def broken(index: int, token: int) -> None:
        calls.append(token)
        raise RuntimeError("consumer bug")

    plain = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=GREEDY)])[0][0]
    with caplog.at_level(logging.ERROR, logger="infra.engines.hf"):
        [[out]] = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=GREEDY, stream=broken)])
    assert out.token_ids == plain.token_ids and out.finish_reason == "length"
    assert len(calls) == 1 and len([r for r in caplog.records if "stream sink" in r.getMessage()]) == 1


def test_speed_is_measured_by_rows(engine: HFEngine) -> None:
    assert isinstance(engine, Measured) and engine.speed.cost(1) is None
    engine.generate([GenerationRequest(prompt=p, params=GREEDY) for p in PROMPTS])  # 3 rows: bucket 4
    table = engine.speed.snapshot()
    assert set(table["prefill_ms"]) == {4} and set(table["step_ms"]) == {4}
    cost = engine.speed.cost(3)
    assert cost is not None and cost.prefill_ms > 0 and cost.step_ms > 0
    assert engine.tokens_per_second is not None and engine.tokens_per_second > 0


def test_the_call_ends_when_every_row_is_cut_or_at_its_own_cap(engine: HFEngine) -> None:
    """a (cap 2) and b (cap 8, cancelled at its 1st token) share a call: 2 forward passes, not 8."""
    forwards = []
    handle = engine.model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    cancel = threading.Event()
    try:
        out = engine.generate([
            GenerationRequest(prompt=PROMPTS[0], params=GREEDY.model_copy(update={"max_new_tokens": 2})),
            GenerationRequest(prompt=PROMPTS[1], params=GREEDY.model_copy(update={"max_new_tokens": 8}),
                              cancel=cancel, stream=Sink(cancel, after=1))])
    finally:
        handle.remove()
    assert [(len(c[0].token_ids), c[0].finish_reason) for c in out] == [(2, "length"), (1, "abort")]
    assert len(forwards) == 2


def test_a_stop_string_ends_the_stream_with_the_completion(engine: HFEngine, tokenizer: Any) -> None:
    free = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=GREEDY)])[0][0]
    words = [str(tokenizer.decode([t])) for t in free.token_ids]
    k = next(i for i in range(1, len(words)) if words[i] not in words[:i])  # a word first seen at position k
    sink = Sink()
    [[out]] = engine.generate([GenerationRequest(prompt=PROMPTS[1], params=GREEDY.model_copy(
        update={"stop": (words[k],)}), stream=sink)])
    assert out.finish_reason == "stop" and out.token_ids == free.token_ids[:k + 1]
    assert sink.tokens() == out.token_ids
