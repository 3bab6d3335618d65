"""BatchingEngine over a real HFEngine on a tiny 2-layer Llama: concurrent callers get their own completions from
fewer engine calls, errors reach only their caller, control calls are serialized, close releases waiters.

Run: .venv/bin/python -m pytest tests/serving/test_batcher.py -q
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from infra.engines.base import Completion, Engine, EngineAsleep, EngineError, GenerationRequest, SamplingParams
from infra.engines.hf import HFEngine
from serving.batcher import BatchingEngine, BatchReport

GREEDY = SamplingParams(temperature=0, max_new_tokens=5)
PROMPTS = [[5 + i, 6 + i, 7 + (i * 3) % 11][: 1 + i % 3] for i in range(8)]  # different lengths and contents


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ~40 words (the same shape as the engine tests' one)."""
    words = ["<unk>", "<pad>", "<s>", "</s>", *(f"w{i}" for i in range(40))]
    backend = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>")


def make_llama(vocab_size: int, seed: int = 0) -> LlamaForCausalLM:
    """A 2-layer, 32-wide Llama with seeded random weights; eos = 3."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, bos_token_id=2, eos_token_id=3, pad_token_id=1)
    return LlamaForCausalLM(config).eval()


class Recording:
    """An Engine that forwards to another and records each generate call's size; ``gate`` can hold calls."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()  # set when a generate call has started

    tokenizer = property(lambda self: self.inner.tokenizer)
    weights_version = property(lambda self: self.inner.weights_version)
    tokens_per_second = property(lambda self: self.inner.tokens_per_second)
    asleep = property(lambda self: self.inner.asleep)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        self.calls.append(len(requests))
        self.entered.set()
        assert self.gate.wait(10), "test gate never opened"
        return self.inner.generate(requests)

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        self.inner.update_weights(state_dict, version)

    def sleep(self, level: int = 1) -> None:
        self.inner.sleep(level)

    def wake(self) -> None:
        self.inner.wake()


@pytest.fixture
def hf() -> HFEngine:
    tok = make_tokenizer()
    return HFEngine(make_llama(len(tok)), tok, dtype="fp32")


@pytest.fixture
def rec(hf: HFEngine) -> Recording:
    return Recording(hf)


def request(i: int, params: SamplingParams = GREEDY, **extra: Any) -> GenerationRequest:
    return GenerationRequest(prompt=PROMPTS[i % len(PROMPTS)], params=params, request_id=f"req-{i}", **extra)


def concurrently(fn: Callable[[int], Any], n: int) -> list[Future[Any]]:
    """Run fn(0..n-1) on n threads released together; returns their futures (all done)."""
    barrier = threading.Barrier(n)

    def call(i: int) -> Any:
        barrier.wait(5)
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(call, i) for i in range(n)]
    return futures


def hold(rec: Recording, batcher: BatchingEngine) -> Future[Any]:
    """Close the gate and start one generate call that the worker is stuck in until the gate opens."""
    rec.gate.clear()
    rec.entered.clear()
    pool = ThreadPoolExecutor(1)
    held = pool.submit(batcher.generate, [request(99)])
    pool.shutdown(wait=False)
    assert rec.entered.wait(5), "the worker never called the engine"
    return held


def wait_for(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "condition not reached in time"
        time.sleep(0.005)


def test_concurrent_callers_get_their_own_completions_from_fewer_engine_calls(hf: HFEngine, rec: Recording) -> None:
    direct = [hf.generate([request(i)])[0][0].token_ids for i in range(8)]
    with BatchingEngine(rec, gather_ms=100) as batcher:
        futures = concurrently(lambda i: batcher.generate([request(i)]), 8)
        stats = batcher.stats()
    results = [f.result() for f in futures]
    assert [r[0][0].request_id for r in results] == [f"req-{i}" for i in range(8)]
    assert [r[0][0].token_ids for r in results] == direct
    assert len(rec.calls) < 8 and sum(rec.calls) == 8, rec.calls
    assert stats.batches == len(rec.calls) and stats.requests == 8 and stats.mean_batch_size > 1
    assert stats.ema_batch_ms is not None and stats.ema_batch_ms > 0 and stats.queue_depth == 0


def test_multi_request_calls_and_n_samples_keep_their_order(hf: HFEngine, rec: Recording) -> None:
    sampled = SamplingParams(temperature=1.0, n=3, seed=7, max_new_tokens=4)
    with BatchingEngine(rec, gather_ms=100) as batcher:
        futures = concurrently(lambda i: batcher.generate([request(2 * i), request(2 * i + 1, sampled)]), 4)
    for i, f in enumerate(futures):
        greedy, samples = f.result()
        assert [c.request_id for c in greedy] == [f"req-{2 * i}"]
        assert [(c.request_id, c.index) for c in samples] == [(f"req-{2 * i + 1}", j) for j in range(3)]
        assert greedy[0].token_ids == hf.generate([request(2 * i)])[0][0].token_ids
    assert sum(rec.calls) == 8 and len(rec.calls) < 4


def test_an_error_reaches_only_its_caller_and_the_worker_keeps_running(hf: HFEngine, rec: Recording) -> None:
    def broken() -> Any:
        raise ValueError("constraint factory exploded")

    def call(i: int) -> list[list[Completion]]:
        return batcher.generate([request(i, constraint=broken if i == 3 else None)])

    with BatchingEngine(rec, gather_ms=100) as batcher:
        futures = concurrently(call, 6)
        with pytest.raises(ValueError, match="exploded"):
            futures[3].result()
        for i, f in enumerate(futures):
            if i != 3:
                assert f.result()[0][0].token_ids == hf.generate([request(i)])[0][0].token_ids
        assert batcher.generate([request(0)])[0][0].request_id == "req-0"  # still serving
        assert batcher.stats().failed_batches >= 1


def test_weight_updates_and_sleep_are_serialized_through_the_worker(hf: HFEngine, rec: Recording) -> None:
    other = make_llama(len(hf.tokenizer), seed=1).state_dict()
    with BatchingEngine(rec) as batcher:
        assert isinstance(batcher, Engine)
        before = batcher.generate([request(1)])[0][0]
        held = hold(rec, batcher)
        # queued behind the held call: must not touch the weights while it runs
        updater = threading.Thread(target=batcher.update_weights, args=(other, 5))
        updater.start()
        time.sleep(0.05)
        assert batcher.weights_version == 0
        rec.gate.set()
        updater.join(5)
        assert held.result()[0][0].weights_version == 0
        after = batcher.generate([request(1)])[0][0]
        assert batcher.weights_version == after.weights_version == 5 and after.token_ids != before.token_ids
        batcher.sleep()
        assert batcher.asleep
        with pytest.raises(EngineAsleep):
            batcher.generate([request(1)])
        batcher.wake()
        assert batcher.generate([request(1)])[0][0].token_ids == after.token_ids


def test_max_batch_caps_the_sequences_per_engine_call(rec: Recording) -> None:
    reports: list[BatchReport] = []
    with BatchingEngine(rec, max_batch=2, gather_ms=50, on_batch=reports.append) as batcher:
        held = hold(rec, batcher)
        pool = ThreadPoolExecutor(6)
        futures = [pool.submit(batcher.generate, [request(i)]) for i in range(6)]
        wait_for(lambda: batcher.queue_depth == 6)
        rec.gate.set()
        assert all(f.result(10)[0][0].request_id == f"req-{i}" for i, f in enumerate(futures))
        held.result(10)
        pool.shutdown()
    assert rec.calls[0] == 1 and max(rec.calls[1:]) == 2 and sum(rec.calls) == 7
    assert [r.requests for r in reports] == rec.calls and all(r.ok for r in reports)
    assert all(0 < r.tokens <= 5 * r.sequences for r in reports)


def test_the_worker_waits_for_expected_callers_but_never_keeps_a_lone_one(rec: Recording) -> None:
    active = [3]
    with BatchingEngine(rec, gather_ms=0, expected=lambda: active[0], wait_ms=2000) as batcher:
        pool = ThreadPoolExecutor(3)
        first = pool.submit(batcher.generate, [request(0)])
        time.sleep(0.15)  # three callers are active: the worker holds the first call for the other two
        assert not rec.calls
        late = [pool.submit(batcher.generate, [request(i)]) for i in (1, 2)]
        assert [f.result(10)[0][0].request_id for f in (first, *late)] == ["req-0", "req-1", "req-2"]
        assert rec.calls == [3]
        active[0] = 1  # one active caller: it runs at once
        t0 = time.perf_counter()
        batcher.generate([request(3)])
        assert rec.calls == [3, 1] and time.perf_counter() - t0 < 1.0
        # a request with 0.5 s left: the worker waits at most a fifth of it (0.1 s), then runs it alone
        active[0] = 2
        t0 = time.perf_counter()
        batcher.generate([request(4, deadline=time.monotonic() + 0.5)])
        waited = time.perf_counter() - t0
        # batches have lately taken 240 ms: 0.5 s left affords two of them with 20 ms to spare, so it waits <= 20 ms
        with batcher._lock:
            batcher._ema_ms = 240.0
        t0 = time.perf_counter()
        batcher.generate([request(5, deadline=time.monotonic() + 0.5)])
        hurried = time.perf_counter() - t0
        pool.shutdown()
    assert rec.calls == [3, 1, 1, 1] and 0.09 <= waited < 0.4 and hurried < 0.08


def test_queue_depth_and_wait_estimate_follow_the_backlog(rec: Recording) -> None:
    with BatchingEngine(rec, max_batch=2, gather_ms=1) as batcher:
        assert batcher.queue_depth == 0 and batcher.estimated_wait_ms() == 0.0  # nothing measured yet
        batcher.generate([request(0)])
        ema = batcher.stats().ema_batch_ms
        assert ema is not None and ema > 0
        held = hold(rec, batcher)
        pool = ThreadPoolExecutor(3)
        futures = [pool.submit(batcher.generate, [request(i)]) for i in range(3)]
        wait_for(lambda: batcher.queue_depth == 3)
        estimate = batcher.estimated_wait_ms()  # two batches queued + what is left of the held one
        assert 2 * ema <= estimate <= 3 * ema + 1e-6
        assert batcher.stats().queue_depth == 3
        rec.gate.set()
        for f in [held, *futures]:
            f.result(10)
        pool.shutdown()
        assert batcher.queue_depth == 0 and batcher.estimated_wait_ms() == 0.0


def test_close_finishes_the_running_batch_and_fails_the_queued_callers(rec: Recording) -> None:
    batcher = BatchingEngine(rec, gather_ms=1)
    assert batcher.alive
    held = hold(rec, batcher)
    pool = ThreadPoolExecutor(3)
    waiting = [pool.submit(batcher.generate, [request(i)]) for i in range(3)]
    wait_for(lambda: batcher.queue_depth == 3)
    batcher.close(timeout_s=0.05)  # the worker is stuck in the engine: close does not wait for it
    rec.gate.set()
    assert held.result(10)[0][0].request_id == "req-99"
    for f in waiting:
        with pytest.raises(EngineError, match="closed"):
            f.result(10)
    pool.shutdown()
    with pytest.raises(EngineError, match="closed"):
        batcher.generate([request(0)])
    batcher._worker.join(5)
    assert not batcher._worker.is_alive() and batcher.closed and not batcher.alive and batcher.queue_depth == 0
    batcher.close()  # idempotent


def test_serial_mode_runs_each_call_alone_in_arrival_order(hf: HFEngine, rec: Recording) -> None:
    with BatchingEngine(rec, batching=False, gather_ms=100) as batcher:
        futures = concurrently(lambda i: batcher.generate([request(i)]), 4)
        stats = batcher.stats()
    assert rec.calls == [1, 1, 1, 1] and stats.max_batch_size == 1 and stats.batches == 4
    assert [f.result()[0][0].token_ids for f in futures] == [hf.generate([request(i)])[0][0].token_ids
                                                           for i in range(4)]


def test_arguments_are_validated(rec: Recording) -> None:
    for bad in ({"max_batch": 0}, {"gather_ms": -1.0}, {"ema_alpha": 0.0}, {"wait_ms": -1.0}):
        with pytest.raises(ValueError):
            BatchingEngine(rec, **bad)
    with BatchingEngine(rec) as batcher:
        assert batcher.generate([]) == []
