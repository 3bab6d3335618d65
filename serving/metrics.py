"""`Metrics`: the Prometheus metrics of one serving process, in its own registry, rendered for ``GET /metrics``.

Each :class:`Metrics` owns a ``CollectorRegistry`` instead of using prometheus_client's global one, so a
process (or a test) can build many apps without "duplicated timeseries" errors. Times are in seconds,
the Prometheus convention; latency buckets span 10 ms to 30 s (a livestream answer's sub-second budget
up to a slow multi-step shopping turn).

Run its tests: ``.venv/bin/python -m pytest tests/serving/test_metrics.py -q``
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from serving.batcher import BatchReport

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0)
LAG_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
RECENT_TURNS = 1000
UNSPECIFIED = "unspecified"
"""The ``reason`` label of grounding failures reported as a bare count."""


class Metrics:
    """Request, turn and engine metrics of one serving process, named ``{namespace}_…``.

    ``latency_buckets_s``: histogram bucket upper bounds, seconds, for request and turn latency.
    The metric objects are public attributes (e.g. ``metrics.rejected.inc()``); the methods below are
    the usual way to feed them.
    """

    def __init__(self, *, namespace: str = "sidekick", latency_buckets_s: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._setup_requests(namespace, tuple(latency_buckets_s))
        self._setup_engine(namespace)

    def _setup_requests(self, ns: str, buckets: tuple[float, ...]) -> None:
        r = self.registry
        self.request_latency = Histogram("request_latency_seconds", "HTTP request wall time by route template and "
                                         "status code.", ["route", "status"], namespace=ns, buckets=buckets, registry=r)
        self.turn_latency = Histogram("turn_latency_seconds", "Agent turn wall time (model steps and tools).",
                                      ["app"], namespace=ns, buckets=buckets, registry=r)
        self.turns = Counter("turns", "Agent turns, by whether they ended within their latency budget.",
                             ["app", "within_budget"], namespace=ns, registry=r)
        self.turn_tokens = Counter("turn_output_tokens", "Completion tokens the model generated in agent turns.",
                                   ["app"], namespace=ns, registry=r)
        self.degraded = Counter("degraded_replies", "Replies that cut corners (degraded: true), by reason.",
                                ["app", "reason"], namespace=ns, registry=r)
        self.grounding_failures = Counter("grounding_failures", "Model-named items that failed catalog grounding.",
                                          ["app", "reason"], namespace=ns, registry=r)
        self.rejected = Counter("admission_rejections", "Requests admission control refused (503, or the fallback "
                                "at once with overload: degrade) because they were predicted to miss their budget.",
                                namespace=ns, registry=r)
        self.within_budget = Gauge("within_budget_ratio", "Share of answered turns whose wall time met their budget, "
                                   "since start (window=all) and over the last 1,000 turns (window=recent).",
                                   ["app", "window"], namespace=ns, registry=r)
        self.first_token = Histogram("time_to_first_token_seconds", "Streamed chat completions: arrival to the "
                                     "first content chunk.", namespace=ns, buckets=buckets, registry=r)
        self.loop_lag = Histogram("event_loop_lag_seconds", "How late the event loop woke from a 50 ms sleep: time "
                                  "every request waits before its handler runs (GIL or CPU contention).",
                                  namespace=ns, buckets=LAG_BUCKETS_S, registry=r)
        self._recent: dict[str, deque[bool]] = {}
        self._totals: dict[str, list[int]] = {}  # app -> [within, all]

    def _setup_engine(self, ns: str) -> None:
        r = self.registry
        self.queue_depth = Gauge("engine_queue_depth", "Generation requests waiting for the engine (read at scrape).",
                                 namespace=ns, registry=r)
        self.batch_size = Histogram("engine_batch_size", "Requests per engine generate call.",
                                    namespace=ns, buckets=BATCH_SIZE_BUCKETS, registry=r)
        self.failed_batches = Counter("engine_failed_batches", "Engine generate calls that raised.",
                                      namespace=ns, registry=r)
        self.tokens_generated = Counter("tokens_generated", "Completion tokens generated by the engine.",
                                        namespace=ns, registry=r)
        self.aborted = Counter("engine_aborted_requests", "Generation requests stopped by their deadline or a "
                               "cancel (rows that left the batch early, or never entered it).", namespace=ns,
                               registry=r)

    # --- requests and turns --------------------------------------------------------------------------------------

    def observe_request(self, route: str, status: int | str, seconds: float) -> None:
        """One HTTP request: ``route`` is the route template (``/v1/shopping/sessions/{session_id}/turns``), not
        the raw path, so label values stay few; the template names the app."""
        self.request_latency.labels(route=route, status=str(status)).observe(seconds)

    def observe_turn(self, app: str, seconds: float, *, degraded_reason: str | None = None,
                     grounding_failures: int | Mapping[str, int] = 0, tokens: int = 0,
                     within_budget: bool = True) -> None:
        """One agent turn: its latency, whether it met its budget, its tokens, and why it was degraded (None: it
        was not). ``grounding_failures`` is a count by reason, or a bare count (reason ``unspecified``)."""
        self.turn_latency.labels(app=app).observe(seconds)
        self.turns.labels(app=app, within_budget=str(within_budget).lower()).inc()
        self._attainment(app, within_budget)
        if tokens:
            self.turn_tokens.labels(app=app).inc(tokens)
        if degraded_reason is not None:
            self.count_degraded(app, degraded_reason)
        by_reason = grounding_failures if isinstance(grounding_failures, Mapping) else {UNSPECIFIED: grounding_failures}
        for reason, n in by_reason.items():
            if n:
                self.count_grounding_failure(app, reason, n)

    def _attainment(self, app: str, within: bool) -> None:
        with self._lock:
            recent = self._recent.setdefault(app, deque(maxlen=RECENT_TURNS))
            recent.append(within)
            totals = self._totals.setdefault(app, [0, 0])
            totals[0] += int(within)
            totals[1] += 1
            self.within_budget.labels(app=app, window="all").set(totals[0] / totals[1])
            self.within_budget.labels(app=app, window="recent").set(sum(recent) / len(recent))

    def observe_first_token(self, seconds: float) -> None:
        """A streamed completion's time to first token (arrival to the first content chunk)."""
        self.first_token.observe(seconds)

    def count_degraded(self, app: str, reason: str) -> None:
        """One reply that said ``degraded: true``, with its reason (e.g. ``budget``, ``max_steps``)."""
        self.degraded.labels(app=app, reason=reason).inc()

    def count_grounding_failure(self, app: str, reason: str, n: int = 1) -> None:
        """``n`` items the model named that grounding refused (e.g. ``unknown``, ``out_of_stock``)."""
        self.grounding_failures.labels(app=app, reason=reason).inc(n)

    def count_rejection(self) -> None:
        """One request refused by admission control (503, or the fallback at once with overload: degrade)."""
        self.rejected.inc()

    # --- engine --------------------------------------------------------------------------------------------------

    def observe_batch(self, report: BatchReport) -> None:
        """One engine generate call; fits ``BatchingEngine(on_batch=metrics.observe_batch)``."""
        if report.sequences:  # a report of requests dropped before the engine is not a batch
            self.batch_size.observe(report.requests)
        self.tokens_generated.inc(report.tokens)
        self.aborted.inc(report.aborted)
        if not report.ok:
            self.failed_batches.inc()

    def set_queue_depth_source(self, depth: Callable[[], float]) -> None:
        """Read the queue depth from ``depth()`` at every scrape (e.g. ``lambda: batcher.queue_depth``)."""
        self.queue_depth.set_function(depth)

    def render(self) -> tuple[bytes, str]:
        """The exposition text of every metric and its content type, for the ``GET /metrics`` response."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
