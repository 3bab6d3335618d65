"""`BatchingEngine`: one not-thread-safe `Engine` shared by many request threads, with dynamic batching.

Serving handles each request on its own thread, and the harness loop calls ``engine.generate`` with one
request per step. The wrapped engine (e.g. :class:`infra.engines.hf.HFEngine`) is not thread-safe and is
fastest when it sees many requests at once, so callers put their requests on a queue and block on a
future; ONE worker thread owns the engine. It takes the first waiting job, gathers more for up to
``gather_ms`` or until ``max_batch`` sequences, makes one ``engine.generate`` call for all of them (the
engine groups equal sampling params itself) and hands each caller its own completions. Weight updates
and sleep/wake go through the same queue, so they never overlap a generate call.

``batching=False`` is the no-batching baseline of the serving benchmark: the same worker runs each
caller's call on its own, in arrival order, with no gathering.

A request that is aborted (its ``deadline`` passed or its ``cancel`` event set) while it waits never reaches
the engine: its caller gets empty completions with finish ``"abort"`` at once. :meth:`BatchingEngine.forecast`
tells a turn how long its next call would wait and what it would cost at the batch size it would join, from
the engine's measured :class:`~infra.engines.base.SpeedProfile`, so the turn caps its tokens to fit its budget.

Run its tests: ``.venv/bin/python -m pytest tests/serving/test_batcher.py -q``
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from infra.engines.base import CallCost, Completion, Engine, EngineError, GenerationRequest, Measured

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    """One call of the wrapped engine's ``generate``: sizes, generated tokens and wall time."""

    requests: int
    sequences: int  # requests x n (or x num_beams): the rows the engine ran
    tokens: int  # completion tokens generated (0 when the call failed)
    latency_ms: float
    ok: bool
    aborted: int = 0  # requests whose rows left the call early (deadline or cancel), or never entered it


@dataclass(frozen=True)
class BatcherStats:
    """Counters since construction; ``ema_batch_ms`` is None before the first batch."""

    batches: int
    requests: int
    mean_batch_size: float  # requests per engine call
    max_batch_size: int
    ema_batch_ms: float | None
    queue_depth: int
    failed_batches: int


@dataclass
class _Job:
    """A caller's generate call (``requests``) or a control call (``action``), and the future it waits on."""

    future: Future[Any]
    requests: Sequence[GenerationRequest] = ()
    action: Callable[[], Any] | None = None

    @property
    def sequences(self) -> int:
        return sum(max(r.params.n, r.params.num_beams) for r in self.requests)


_STOP = object()  # wakes the worker when the engine closes


class BatchingEngine:
    """A thread-safe :class:`~infra.engines.base.Engine` over one engine that is not, batching concurrent calls.

    ``max_batch``: most sequences (requests x n, or x num_beams) per engine call; a single larger call still
    runs, alone. ``gather_ms``: how long the worker waits for more requests after the first one arrives.
    ``batching=False``: run each caller's call alone, in arrival order (the no-batching baseline).
    ``ema_alpha``: weight of the newest batch in the moving average of batch latency.
    ``on_batch``: called on the worker after every engine call (e.g. to feed :class:`serving.metrics.Metrics`);
    its exceptions are logged and ignored. ``nice``: raise the worker thread's nice value by this much (Linux), so
    the event loop that answers requests, and any client on the same machine, get the CPU before the model
    does; 0 = leave it.

    ``expected`` / ``wait_ms``: a batch pays a large fixed cost (a tiny model's call of 1 row costs half of one of
    16 here), so while fewer calls are gathered than ``expected()`` callers are active (a server's turns in
    flight: each will call soon), the worker keeps gathering for up to ``wait_ms`` past the first call it took,
    and never longer than a fifth of the time its most urgent request has left. A lone caller is never kept
    waiting, nor one whose request could then no longer afford two batches of the recent mean length before its
    deadline. None / 0 = off.
    """

    def __init__(self, engine: Engine, *, max_batch: int = 32, gather_ms: float = 5.0, batching: bool = True,
                 ema_alpha: float = 0.2, on_batch: Callable[[BatchReport], None] | None = None,
                 nice: int = 0, expected: Callable[[], int] | None = None, wait_ms: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        if gather_ms < 0:
            raise ValueError(f"gather_ms must be >= 0, got {gather_ms}")
        if not 0.0 < ema_alpha <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha}")
        self.engine, self.max_batch, self.gather_s, self.batching = engine, max_batch, gather_ms / 1000, batching
        if wait_ms < 0:
            raise ValueError(f"wait_ms must be >= 0, got {wait_ms}")
        self.ema_alpha, self.on_batch, self.nice = ema_alpha, on_batch, nice
        self.expected, self.wait_s = expected, wait_ms / 1000
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the counters below and _closed
        self._closed = False
        self._waiting = 0  # requests queued, not yet taken by the worker
        self._batch_started: float | None = None  # perf_counter of the running engine call
        self._ema_ms: float | None = None
        self._batches = self._requests = self._max_size = self._failed = 0
        self._worker = threading.Thread(target=self._run, name="batching-engine", daemon=True)
        self._worker.start()

    # --- Engine properties (read-only, safe from any thread) ------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def weights_version(self) -> int:
        return self.engine.weights_version

    @property
    def tokens_per_second(self) -> float | None:
        return self.engine.tokens_per_second

    @property
    def asleep(self) -> bool:
        return self.engine.asleep

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def alive(self) -> bool:
        """The worker is running and accepts calls (for readiness checks)."""
        return not self._closed and self._worker.is_alive()

    # --- Engine calls ----------------------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenerationRequest]) -> list[list[Completion]]:
        """One list of ``params.n`` completions per request, in request order; blocks until they are ready."""
        if not requests:
            return []
        result: list[list[Completion]] = self._submit(_Job(Future(), requests=list(requests))).result()
        return result

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """The wrapped engine's ``update_weights``, run between two engine calls (never during one)."""
        self._call(lambda: self.engine.update_weights(state_dict, version))

    def sleep(self, level: int = 1) -> None:
        """The wrapped engine's ``sleep``, after the calls queued before it."""
        self._call(lambda: self.engine.sleep(level))

    def wake(self) -> None:
        """The wrapped engine's ``wake``, after the calls queued before it."""
        self._call(self.engine.wake)

    def _call(self, action: Callable[[], Any]) -> None:
        self._submit(_Job(Future(), action=action)).result()

    def _submit(self, job: _Job) -> Future[Any]:
        with self._lock:
            if self._closed:
                raise EngineError("the batching engine is closed")
            self._waiting += len(job.requests)
            self._queue.put(job)
        return job.future

    # --- load ------------------------------------------------------------------------------------------------

    @property
    def queue_depth(self) -> int:
        """Requests waiting for the worker (the running batch not included)."""
        return self._waiting

    def estimated_wait_ms(self) -> float:
        """How long a request sent now would wait before its batch starts: 0 before the first batch.

        ``ceil(queue_depth / per_batch) * ema_batch_ms`` plus what is left of the running batch, where
        ``per_batch`` is ``max_batch`` (or 1 without batching; requests are counted, not sequences).
        """
        with self._lock:
            ema, depth, started = self._ema_ms, self._waiting, self._batch_started
        if ema is None:
            return 0.0
        per_batch = self.max_batch if self.batching else 1
        running = max(0.0, ema - (time.perf_counter() - started) * 1000) if started is not None else 0.0
        return math.ceil(depth / per_batch) * ema + running

    def forecast(self) -> tuple[float, CallCost | None]:
        """``(wait_ms, cost)`` for a call sent now: :meth:`estimated_wait_ms`, and the wrapped engine's measured
        cost at the rows of the batch it would join (the waiting requests plus itself, up to ``max_batch``;
        one without batching). ``cost`` is None when the engine measures nothing or has not run yet."""
        rows = min(self.max_batch, self._waiting + 1) if self.batching else 1
        cost = self.engine.speed.cost(rows) if isinstance(self.engine, Measured) else None
        return self.estimated_wait_ms(), cost

    def stats(self) -> BatcherStats:
        """Batches, requests, mean and max batch size, EMA batch latency, queue depth, failed batches."""
        with self._lock:
            mean = self._requests / self._batches if self._batches else 0.0
            return BatcherStats(batches=self._batches, requests=self._requests, mean_batch_size=mean,
                                max_batch_size=self._max_size, ema_batch_ms=self._ema_ms, queue_depth=self._waiting,
                                failed_batches=self._failed)

    # --- lifecycle -------------------------------------------------------------------------------------------

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the worker after its running batch; queued and later callers get an :class:`EngineError`."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout_s)

    def __enter__(self) -> BatchingEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the worker ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        """Worker loop: take a batch of jobs, run it, repeat until closed; then fail whatever is still queued."""
        if self.nice:
            _renice(self.nice)
        jobs: list[_Job] = []
        carry: _Job | None = None
        try:
            while True:
                jobs, carry = self._gather(carry)
                if not jobs or self._closed:
                    break
                if jobs[0].action is not None:
                    self._run_action(jobs[0])
                else:
                    self._run_batch(jobs)
        finally:  # also when the engine raised something that is not an Exception: nobody may wait forever
            self._drain([*jobs, *([carry] if carry is not None else [])])

    def _gather(self, carry: _Job | None) -> tuple[list[_Job], _Job | None]:
        """The next unit of work: one control job, or generate jobs up to ``max_batch`` sequences.

        Returns ``(jobs, carry)``: ``carry`` is a job taken off the queue that did not fit (a control
        call, or a generate call over the sequence budget) and starts the next unit. ``jobs == []``: stop.
        """
        first = carry if carry is not None else self._take(None)
        if first is None:
            return [], None
        if first.action is not None or not self.batching:
            return [first], None
        jobs, size = [first], first.sequences
        start = time.perf_counter()
        deadline = start + self.gather_s
        while size < self.max_batch:
            job = self._take(max(deadline, self._patience(jobs, start)))
            if job is None:
                break
            if job.action is not None or size + job.sequences > self.max_batch:
                return jobs, job
            jobs.append(job)
            size += job.sequences
        return jobs, None

    def _patience(self, jobs: list[_Job], start: float) -> float:
        """Until when (perf_counter) to wait for callers expected soon; ``start`` when the gathering did."""
        if not self.wait_s or self.expected is None:
            return 0.0
        try:
            if len(jobs) >= self.expected():
                return 0.0
        except Exception:  # a broken counter must not stop the worker
            log.exception("batcher: the expected-callers count failed; not waiting")
            self.expected = None
            return 0.0
        now_mono = time.monotonic()
        left = [r.deadline - now_mono for j in jobs for r in j.requests if r.deadline is not None]
        with self._lock:
            batch_s = (self._ema_ms or 0.0) / 1000
        # never so long that the batch could not run twice in the time the most urgent request has left
        wait = min([self.wait_s, *(min(0.2 * t, t - 2 * batch_s) for t in left)])
        return start + max(0.0, wait)

    def _take(self, deadline: float | None) -> _Job | None:
        """The next queued job; None at the deadline or on the stop mark (which is put back for the loop)."""
        try:
            if deadline is None:
                item = self._queue.get()
            else:
                item = self._queue.get(timeout=max(0.0, deadline - time.perf_counter()))
        except queue.Empty:
            return None
        if item is _STOP:
            self._queue.put(_STOP)  # _run sees it again as "no job" once the current unit is done
            return None
        with self._lock:
            self._waiting -= len(item.requests)
        job: _Job = item
        return job

    def _run_action(self, job: _Job) -> None:
        try:
            job.future.set_result(job.action() if job.action is not None else None)
        except Exception as e:
            job.future.set_exception(e)

    def _run_batch(self, jobs: list[_Job]) -> None:
        """One engine call for all jobs; if it fails and holds several jobs, each job runs alone so the error
        reaches only the caller whose request caused it. Jobs whose requests were all aborted while they waited
        are answered at once without the engine."""
        now = time.monotonic()
        live = [job for job in jobs if not all(r.aborted(now) for r in job.requests)]
        dropped = [job for job in jobs if job not in live]
        for job in dropped:
            job.future.set_result([_aborted(r, self.engine.weights_version) for r in job.requests])
        if dropped and self.on_batch is not None:
            self._report(BatchReport(requests=sum(len(j.requests) for j in dropped), sequences=0, tokens=0,
                                     latency_ms=0.0, ok=True, aborted=sum(len(j.requests) for j in dropped)))
        jobs = live
        if not jobs:
            return
        try:
            results = self._generate([r for job in jobs for r in job.requests], jobs)
        except Exception as e:
            if len(jobs) == 1:
                jobs[0].future.set_exception(e)
                return
            for job in jobs:
                self._run_batch([job])
            return
        start = 0
        for job in jobs:
            job.future.set_result(results[start:start + len(job.requests)])
            start += len(job.requests)

    def _generate(self, requests: list[GenerationRequest], jobs: list[_Job]) -> list[list[Completion]]:
        """The wrapped engine's generate, timed into the stats and reported to ``on_batch``."""
        with self._lock:
            self._batch_started = time.perf_counter()
        ok, results = False, []
        try:
            results = self.engine.generate(requests)
            if len(results) != len(requests):
                raise EngineError(f"the engine returned {len(results)} results for {len(requests)} requests")
            ok = True
            return results
        finally:
            self._record(requests, sum(j.sequences for j in jobs), results if ok else [], ok)

    def _record(self, requests: list[GenerationRequest], sequences: int, results: list[list[Completion]],
                ok: bool) -> None:
        with self._lock:
            assert self._batch_started is not None, "_record without a started batch"
            ms = (time.perf_counter() - self._batch_started) * 1000
            self._batch_started = None
            self._batches += 1
            self._requests += len(requests)
            self._max_size = max(self._max_size, len(requests))
            self._failed += 0 if ok else 1
            if ok:  # a failed call's (often instant) latency says nothing about the next batch
                a = self.ema_alpha
                self._ema_ms = ms if self._ema_ms is None else (1 - a) * self._ema_ms + a * ms
        if self.on_batch is not None:
            tokens = sum(len(c.token_ids) for per_request in results for c in per_request)
            aborted = sum(any(c.finish_reason == "abort" for c in per_request) for per_request in results)
            self._report(BatchReport(requests=len(requests), sequences=sequences, tokens=tokens, latency_ms=ms,
                                     ok=ok, aborted=aborted))

    def _report(self, report: BatchReport) -> None:
        assert self.on_batch is not None
        try:
            self.on_batch(report)
        except Exception:
            log.exception("on_batch callback failed")

    def _drain(self, jobs: list[_Job]) -> None:
        """Fail ``jobs`` and every job still queued (the worker is stopping)."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                jobs.append(item)
        with self._lock:
            self._closed = True
            self._waiting = 0
        _fail(jobs, EngineError("the batching engine is closed"))


def _renice(nice: int) -> None:
    """Lower this thread's CPU priority (Linux: a thread is a task with its own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError) as e:  # not Linux, or not allowed
        log.info("could not renice the engine worker to %d: %s", nice, e)


def _aborted(request: GenerationRequest, weights_version: int) -> list[Completion]:
    """The empty ``"abort"`` completions of a request dropped before it reached the engine."""
    rows = max(request.params.n, 1)
    return [Completion(request_id=request.request_id, index=j, token_ids=[], text="", logprobs=[],
                       finish_reason="abort", prompt_tokens=0, latency_ms=0.0, weights_version=weights_version)
            for j in range(rows)]


def _fail(jobs: Sequence[_Job], error: Exception) -> None:
    for job in jobs:
        if not job.future.done():
            job.future.set_exception(error)
