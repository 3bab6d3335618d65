"""What one serving process holds: the apps' agent loops, the batching engine front, sessions, metrics.

:class:`AgentServer` is framework-free (the FastAPI routes in :mod:`serving.app` call it), so the same
object can be driven by tests and benchmarks in-process. Turns run in worker threads; every model
call goes through one :class:`~serving.batcher.BatchingEngine`, which gathers concurrent sessions'
requests into batches, so the event loop never waits on model compute.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.agent import AgentLoop, AppSpec, Grounder, LoopConfig, ModelAccess, TurnResult
from harness.budget import Budget
from harness.session import MemorySessionStore, RedisSessionStore, SessionState, SessionStore
from infra.engines import EngineSettings
from serving.admission import Admission
from serving.batcher import BatchingEngine
from serving.lending import Lender, LendingConfig, SlotFactory
from serving.metrics import Metrics


class ServeConfig(BaseModel):
    """Serving knobs. Budgets are per app defaults; a request's ``budget_ms`` overrides them."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field("sidekick", description="The id /v1/models lists and chat requests name.")
    engine: EngineSettings = Field(default_factory=EngineSettings, description="The engine the agent's model runs "
                                   "on (backend hf | vllm, dtype, vLLM memory); its max_batch_size is max_batch.")
    max_batch: int = Field(16, ge=1, description="Most sequences the batcher puts in one engine call.")
    gather_ms: float = Field(5.0, ge=0, description="How long the batcher waits to fill a batch, ms; 0 = no wait.")
    batch_wait_ms: float = Field(80.0, ge=0, description="While fewer calls are gathered than turns are in flight, "
                                 "the batcher waits up to this long for them (and at most a fifth of the most urgent "
                                 "request's time left): fuller batches under load; a lone turn never waits. 0 = off.")
    batching: bool = Field(True, description="False = one request at a time (the no-batching baseline).")
    max_new_tokens: int = Field(192, ge=1, description="Ceiling on output tokens per model call.")
    max_prompt_tokens: int = Field(4096, ge=64, description="Prompt token limit; the oldest messages after "
                                   "the first user message are dropped to fit.")
    max_body_bytes: int = Field(256 * 1024, ge=1024, description="Larger request bodies get 413.")
    worker_threads: int = Field(64, ge=1, description="Turns running at once (the rest queue).")
    torch_threads: int = Field(0, ge=0, description="Torch intra-op threads of the engine; 0 = every core but one "
                               "(at least 1): the event loop and the turn threads need a core of their own to answer "
                               "on time.")
    switch_interval_ms: float = Field(1.0, gt=0, description="Python's thread switch interval (sys.setswitchinterval): "
                                      "how long a busy thread may hold the GIL while the event loop waits; Python's "
                                      "default is 5 ms.")
    engine_nice: int = Field(10, ge=0, le=19, description="Nice value added to the engine worker thread (Linux): "
                             "the event loop and clients on the same machine get the CPU first; 0 = off.")
    fallback_threads: int = Field(4, ge=1, description="Threads that write fallback answers (kept apart from the "
                                  "turns' threads so a cut turn's answer never waits behind them).")
    answer_reserve_ms: float = Field(100.0, ge=0, description="The end of every budget kept for answering: the model "
                                     "must be done by budget - reserve; then the turn is cut and the fallback answers "
                                     "(degraded: timeout), so the reply leaves within the budget.")
    overload: Literal["reject", "degrade"] = Field("reject", description="A turn admission predicts to miss its "
                                                   "budget: 'reject' = 503 with Retry-After at once, 'degrade' = "
                                                   "the fallback answers at once (degraded: overload).")
    session_ttl_s: float = Field(1800.0, gt=0, description="Sessions expire this long after their last turn.")
    max_sessions: int = Field(10_000, ge=1, description="In-memory store: least recently used go beyond this.")
    max_session_messages: int = Field(40, ge=4, description="Messages a session keeps (first intent + latest).")
    redis_url: str | None = Field(None, description="redis://host:port/db for shared sessions; None = in memory.")
    api_key: str | None = Field(None, description="Key for admin routes (header X-API-Key); None = admin off.")
    model_apps: list[str] | None = Field(None, description="The apps whose turns the model answers; every other "
                                         "served app answers from its fallback only (degraded: no_model), e.g. "
                                         "an app the agent was measured to lose on. None = the apps the agent "
                                         "directory's model_apps.json names (a several-app cascade writes it: where "
                                         "the agent beat the fallback on held-out tasks), else every app.")
    follow_measurement: bool = Field(True, description="With model_apps None: follow the agent directory's "
                                     "model_apps.json. False = the model answers every app.")
    lending: LendingConfig = Field(default_factory=LendingConfig, description="Idle capacity lent to RL rollout "
                                   "(serving/lending.py); the admin routes /admin/lending turn it on and off.")

    @model_validator(mode="after")
    def _lending_needs_admin(self) -> ServeConfig:
        if self.lending.enabled and self.api_key is None:
            raise ValueError("lending.enabled needs api_key: the RL controller reaches a lending replica through "
                             "its admin routes (set SIDEKICK_API_KEY or api_key)")
        return self


class Overloaded(Exception):
    """The request cannot be answered within its budget: answer 503 with Retry-After."""

    def __init__(self, predicted_ms: float, budget_ms: float, what: str = "estimated wait") -> None:
        super().__init__(f"server busy: {what} {predicted_ms:.0f} ms exceeds the request's budget of "
                         f"{budget_ms:.0f} ms; retry later")
        self.retry_after_s = max(1, math.ceil(max(0.0, predicted_ms - budget_ms) / 1000.0))


class ModelAppsError(ValueError):
    """``model_apps`` names an app this server does not serve."""


class UnknownApp(LookupError):
    """The server was not started with this app."""


@dataclass
class ServedApp:
    spec: AppSpec
    loop: AgentLoop


class SessionLocks:
    """One :class:`asyncio.Lock` per session id in use: a session's turns, cart changes and deletion run one at a
    time in this process. A turn works on a copy of the session and saves it at its end, so without this a cart
    change (or a second turn) made meanwhile was lost when the turn saved; now it waits for the turn (at most the
    turn's budget). Replicas sharing sessions through Redis do not see each other's locks. Use from the event loop.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # session id -> (lock, holders + waiters)

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users <= 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class AgentServer:
    """The apps, engine front, session store and metrics of one serving process."""

    def __init__(self, apps: dict[str, AppSpec], model: ModelAccess | None, config: ServeConfig | None = None,
                 *, store: SessionStore | None = None, metrics: Metrics | None = None) -> None:
        self.config = config or ServeConfig()
        self.metrics = metrics or Metrics()
        self.admission = Admission(learn_curve=self.config.batching)  # one at a time: Little's law is exact
        self.front: BatchingEngine | None = None
        self.model: ModelAccess | None = None
        if model is not None:
            self.front = BatchingEngine(model.engine, max_batch=self.config.max_batch,
                                        gather_ms=self.config.gather_ms, batching=self.config.batching,
                                        on_batch=self.metrics.observe_batch, nice=self.config.engine_nice,
                                        expected=lambda: self.admission.in_flight,
                                        wait_ms=self.config.batch_wait_ms)
            self.model = ModelAccess(engine=self.front, tokenizer=model.tokenizer, sid=model.sid)
        self.store = store or self._make_store()
        self.session_locks = SessionLocks()
        c = self.config
        loop_cfg = LoopConfig(max_new_tokens=c.max_new_tokens, max_prompt_tokens=c.max_prompt_tokens)
        sid_map = self.model.sid.sid_map if self.model and self.model.sid else None
        if c.model_apps is not None and set(c.model_apps) - set(apps):
            raise ModelAppsError(f"model_apps names {sorted(set(c.model_apps) - set(apps))}, not served here "
                             f"(served: {sorted(apps)})")
        self.apps = {name: ServedApp(spec, AgentLoop(spec, self._model_for(name), self._grounder(spec, sid_map),
                                                     loop_cfg))
                     for name, spec in apps.items()}
        if self.model is not None:  # what the apps' tools load on first use is loaded now, not in a request's budget
            for spec in apps.values():
                warm = getattr(spec.resources, "warm", None)
                if callable(warm):
                    warm()
        self.metrics.set_queue_depth_source(lambda: self.front.queue_depth if self.front else 0)
        self._lock = threading.Lock()
        self.reload: Callable[[], int] | None = None
        """Set by the launcher: reloads the agent's weights into the engine, returns the new version."""
        self.lender: Lender | None = None

    def start_lending(self, make_slot: SlotFactory) -> Lender:
        """Hold a rollout slot beside the served agent (off until ``config.lending.enabled`` or the admin API
        turns it on): the launcher gives the factory that builds an RL run's environment worker."""
        if self.lender is None:
            self.lender = Lender(self.config.lending, make_slot, self.serving_busy, registry=self.metrics.registry)
        return self.lender

    def serving_busy(self) -> bool:
        """A turn is running or a model call waits for the serving engine."""
        return self.admission.in_flight > 0 or (self.front is not None and self.front.queue_depth > 0)

    def _serving_work(self) -> None:
        if self.lender is not None:
            self.lender.preempt()

    def _model_for(self, app: str) -> ModelAccess | None:
        """The model for ``app``'s turns: None (fallback only) for an app ``config.model_apps`` leaves out."""
        wanted = self.config.model_apps
        return self.model if wanted is None or app in wanted else None

    @staticmethod
    def _grounder(spec: AppSpec, sid_map: Any) -> Grounder:
        return Grounder(spec.catalog, sid_map, spec.item_check, require_stock=spec.require_stock)

    def _make_store(self) -> SessionStore:
        c = self.config
        if c.redis_url:
            return RedisSessionStore(c.redis_url, ttl_s=c.session_ttl_s, max_messages=c.max_session_messages)
        return MemorySessionStore(ttl_s=c.session_ttl_s, max_sessions=c.max_sessions,
                                  max_messages=c.max_session_messages)

    # ------------------------------------------------------------------------------------------ admission
    def app(self, name: str) -> ServedApp:
        served = self.apps.get(name)
        if served is None:
            raise UnknownApp(f"app {name!r} is not served here; serving: {', '.join(self.apps) or 'nothing'}")
        return served

    def budget_ms(self, app: str, requested: float | None) -> float:
        return float(requested) if requested is not None else self.app(app).spec.default_budget_ms

    def new_budget(self, app: str, budget_ms: float, start: float | None = None) -> Budget:
        """The turn's hard budget, counted from ``start`` (the request's arrival, ``time.monotonic()``). Every turn
        starts here, so lent rollout is cut here too."""
        self._serving_work()
        return Budget(budget_ms, max_steps=self.app(app).spec.max_steps, reserve_ms=self.config.answer_reserve_ms,
                      start=time.monotonic() if start is None else start, hard=True)

    def admit(self, app: str, budget: Budget, sure: Callable[[], bool] | None = None) -> bool:
        """Whether the model should try this turn: False (``overload: degrade``) means answer from the fallback
        at once; raises :class:`Overloaded` (``overload: reject``) when admission predicts the turn would miss
        its budget. A server without a model admits everything (its answers are the fallback's anyway); any server
        admits a turn that ``sure()`` (asked only when it would refuse) says the app answers itself before any model
        call (the livestream reader's sure answers: they cost no model time, so load is no reason to refuse them)."""
        if self.model is None:
            return True
        predicted = self.admission.forecast(app).predicted_ms
        usable = budget.remaining_ms() - self.config.answer_reserve_ms
        if predicted <= usable or (sure is not None and sure()):
            return True
        self.metrics.count_rejection()
        if self.config.overload == "degrade":
            return False
        reserve = self.config.answer_reserve_ms
        raise Overloaded(predicted + reserve, budget.budget_ms,
                         f"predicted turn time {predicted:.0f} ms + answer reserve {reserve:.0f} ms =")

    def admit_call(self, budget_ms: float) -> None:
        """For a raw model call (no turn): raise :class:`Overloaded` when the engine queue alone would eat the
        whole budget."""
        if self.front is None:
            return
        self._serving_work()
        wait = self.front.estimated_wait_ms()
        if wait > budget_ms:
            self.metrics.count_rejection()
            raise Overloaded(wait, budget_ms)

    # ------------------------------------------------------------------------------------------ turns
    def run_turn(self, app: str, session: SessionState, text: str | None, budget_ms: float | Budget,
                 constraints: dict[str, Any] | None = None) -> TurnResult:
        """One turn, recorded in the metrics (blocking). Does not save the session."""
        budget = budget_ms if isinstance(budget_ms, Budget) else self.new_budget(app, budget_ms)
        result = self.model_turn(app, session, text, budget, constraints)
        self.record_turn(app, result, budget.elapsed_ms(), budget.budget_ms)
        return result

    def model_turn(self, app: str, session: SessionState, text: str | None, budget: Budget,
                   constraints: dict[str, Any] | None = None) -> TurnResult:
        """One turn through the agent loop (blocking: call from a worker thread); records nothing."""
        return self.app(app).loop.run_turn(session, text, budget=budget, constraints=constraints)

    def fallback_turn(self, app: str, session: SessionState, reason: str, budget: Budget,
                      constraints: dict[str, Any] | None = None) -> TurnResult:
        """A degraded answer without the model (a turn cut at its deadline, or refused by admission); records
        nothing. ``latency_ms`` is the real time since the request arrived."""
        served = self.app(app)
        from harness.agent import TurnContext

        ctx = TurnContext(app=served.spec, session=session, constraints={**session.constraints, **(constraints or {})},
                          budget=budget, model=None)
        final = served.loop.fallback(ctx, reason)
        return TurnResult(final=final, degraded=True, reason=reason, latency_ms=budget.elapsed_ms())

    def record_turn(self, app: str, result: TurnResult, latency_ms: float, budget_ms: float) -> None:
        """Count one answered turn in the metrics: its real wall time, whether it met its budget, why degraded."""
        self.metrics.observe_turn(app, latency_ms / 1000.0, degraded_reason=result.reason if result.degraded
                                  else None, grounding_failures=result.grounding_failures,
                                  tokens=result.output_tokens, within_budget=latency_ms <= budget_ms)

    def ready(self) -> bool:
        return self.front is None or self.front.alive

    def close(self) -> None:
        if self.lender is not None:
            self.lender.close()
        if self.front is not None:
            self.front.close()


ModelFactory = Callable[[], ModelAccess]
