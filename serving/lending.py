"""Serving capacity lent to RL rollout, serving first (the server side; the RL side is
:mod:`training.rl.lending`).

A :class:`Lender` holds a *rollout slot* beside the served agent: an environment worker of an RL run (the
run's app over its world, and a policy engine of its own whose weights the run's trainer pushes,
versioned). A background thread steps the slot's episodes in lockstep, one batched engine call at a time,
and only while the server's own traffic leaves it idle:

* **serving goes first** — a turn that starts (or a model call queued on the serving engine) *cuts* the
  rollout call in flight at its next decode step (the call's ``cancel`` event); no episode moves and
  each keeps its request, sent again unchanged when the server is idle again. Rollout waits until
  serving has been idle ``idle_ms``; its thread runs at the lowest CPU priority (nice 19).
* **nothing is lost** — paused episodes resume where they stopped. Those paused longer than
  ``hand_back_s`` (a long burst), or held when lending is turned off, are *handed back*: the RL controller
  collects their jobs and runs them on its dedicated workers.
* **capacity** — :meth:`Lender.spare` is what the replica advertises: episodes it takes now, 0 while
  lending is off, no run has joined, or serving was busy within ``idle_ms``.

The slot itself is built by the launcher (``make_slot``: :func:`apps.serve.lending_slot`), which knows
the app table; this module only schedules it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from prometheus_client import Counter, Gauge
from pydantic import BaseModel, ConfigDict, Field

from training.rl.lending import JoinSpec
from training.rl.rollout import EpisodeJob, EpisodePool
from training.rl.trajectory import Trajectory

log = logging.getLogger(__name__)


class LendingConfig(BaseModel):
    """How a serving replica lends its idle capacity to RL rollout (``ServeConfig.lending``)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="Lend from the start (also `sidekick serve --lend`); the admin API "
                          "turns it on and off. Needs api_key: the RL controller reaches the replica through the "
                          "admin routes.")
    max_episodes: int = Field(32, ge=1, description="Most RL episodes the replica holds at once.")
    max_rows: int = Field(32, ge=1, description="Most episodes advanced in one rollout engine call (a call is cut "
                          "at its next decode step when serving arrives, whatever its size).")
    idle_ms: float = Field(50.0, ge=0, description="Serving must have been idle this long before rollout resumes.")
    hand_back_s: float = Field(2.0, gt=0, description="Episodes paused by serving longer than this are handed "
                               "back to the RL controller, which runs them on its dedicated workers.")
    max_weights_mb: int = Field(4096, ge=1, description="Largest weight push accepted (PUT /admin/lending/weights).")


class LendingRefused(Exception):
    """A lending call that does not fit the replica's state (no run joined, another run's id): HTTP 409."""


class Slot(Protocol):
    """What the lender drives: :class:`~training.rl.workers.EnvWorker` fits."""

    pool: EpisodePool

    def update_weights(self, state: dict[str, np.ndarray], version: int) -> int: ...

    def version(self) -> int: ...


SlotFactory = Callable[[JoinSpec], Slot]


class LendingMetrics:
    """The lender's Prometheus metrics, in the serving process's registry (``sidekick_lending_*``,
    ``sidekick_rollout_*``). Serving SLO attainment is ``sidekick_within_budget_ratio``."""

    def __init__(self, registry: Any, ns: str = "sidekick") -> None:
        self.enabled = Gauge("lending_enabled", "1 while this replica lends idle capacity to RL rollout.",
                             namespace=ns, registry=registry)
        self.capacity = Gauge("lending_spare_episodes", "RL episodes the replica would take now (lent capacity; "
                              "0 while serving is busy or lending is off).", namespace=ns, registry=registry)
        self.held = Gauge("lending_held_episodes", "RL episodes the replica holds (running or paused).",
                          namespace=ns, registry=registry)
        self.tokens = Counter("rollout_tokens", "Completion tokens generated for RL rollout on lent capacity.",
                              namespace=ns, registry=registry)
        self.episodes = Counter("rollout_episodes", "RL episodes finished on lent capacity.", namespace=ns,
                                registry=registry)
        self.preemptions = Counter("rollout_preemptions", "Times serving work stopped lent rollout: kind=cut (a "
                                   "rollout engine call stopped mid-way) or pause (held episodes set aside).",
                                   ["kind"], namespace=ns, registry=registry)
        self.handed_back = Counter("rollout_handed_back", "RL episodes handed back to the controller unfinished "
                                   "(lending turned off, or paused longer than hand_back_s).", namespace=ns,
                                   registry=registry)


class Lender:
    """The rollout slot and its serving-first scheduler. Thread-safe; ``close()`` stops its thread."""

    def __init__(self, config: LendingConfig, make_slot: SlotFactory, busy: Callable[[], bool], *,
                 registry: Any = None, nice: int = 19) -> None:
        self.config, self.make_slot, self.busy = config, make_slot, busy
        self.metrics = LendingMetrics(registry) if registry is not None else None
        self.enabled = config.enabled
        self.spec: JoinSpec | None = None
        self.slot: Slot | None = None
        self.finished: list[Trajectory] = []
        self.returned: list[EpisodeJob] = []
        self.preemptions = {"cut": 0, "pause": 0}
        self.tokens = self.episodes = self.handed_back = 0
        self._lock = threading.RLock()  # the state above
        self._step_lock = threading.Lock()  # one engine call or weight update at a time
        self._wake = threading.Event()
        self._cancel: threading.Event | None = None
        self._last_busy = 0.0
        self._paused_since: float | None = None
        self._closed = False
        self._nice = nice
        if self.metrics is not None:
            self.metrics.enabled.set_function(lambda: float(self.enabled))
            self.metrics.capacity.set_function(lambda: float(self.spare()))
            self.metrics.held.set_function(lambda: float(self.held()))
        self._thread = threading.Thread(target=self._run, name="lender", daemon=True)
        self._thread.start()

    # ---- what the server calls -------------------------------------------------------------------
    def preempt(self) -> None:
        """Serving work arrived: cut the rollout call in flight (cheap; call on every turn / model call)."""
        self._last_busy = time.monotonic()
        cancel = self._cancel
        if cancel is not None and not cancel.is_set():
            cancel.set()

    # ---- admin -----------------------------------------------------------------------------------
    def has_news(self) -> bool:
        """Finished or handed-back episodes wait to be collected, or nothing is held (cheap: no lock)."""
        slot = self.slot
        return bool(self.finished or self.returned) or slot is None or slot.pool.running == 0

    def held(self) -> int:
        with self._lock:
            return self.slot.pool.running if self.slot is not None else 0

    def spare(self) -> int:
        """Episodes the replica takes now."""
        with self._lock:
            if not self.enabled or self.slot is None or self._serving_recently():
                return 0
            return max(0, self.config.max_episodes - self.slot.pool.running)

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"enabled": self.enabled, "run": self.spec.run if self.spec else None,
                    "app": self.spec.app if self.spec else None,
                    "version": self.slot.version() if self.slot is not None else None,
                    "spare": self.spare(), "held": self.held(), "finished_waiting": len(self.finished),
                    "paused": self._paused_since is not None, "preemptions": dict(self.preemptions),
                    "rollout_tokens": self.tokens, "episodes": self.episodes, "handed_back": self.handed_back}

    def set_enabled(self, enabled: bool) -> dict[str, Any]:
        """Turn lending on or off; off hands back every unfinished episode (the controller runs them elsewhere)."""
        with self._lock:
            self.enabled = enabled
            if not enabled:
                self.preempt()
        if not enabled:
            with self._step_lock, self._lock:
                self._hand_back()
        self._wake.set()
        return self.status()

    def join(self, spec: JoinSpec) -> dict[str, Any]:
        """Hold ``spec``'s run in the slot (the same run again: nothing to do). Builds the run's environment and
        policy engine (seconds), then drops the previous run's slot and whatever it held."""
        with self._lock:
            if self.spec is not None and self.spec == spec and self.slot is not None:
                return self.status()
        slot = self.make_slot(spec)
        with self._step_lock, self._lock:
            self.spec, self.slot = spec, slot
            self.finished, self.returned = [], []
        log.info("lending to run %s (%s over %s)", spec.run, spec.app, spec.world)
        self._wake.set()
        return self.status()

    def update_weights(self, run: str, state: Mapping[str, np.ndarray], version: int) -> int:
        slot = self._slot_of(run)
        with self._step_lock:
            return int(slot.update_weights(dict(state), version))

    def submit(self, run: str, jobs: Sequence[EpisodeJob]) -> int:
        """Take ``jobs``; while lending is off they are handed back at once. Returns how many will run here."""
        slot = self._slot_of(run)
        with self._lock:
            if not self.enabled:
                self.returned += jobs
                self.handed_back += len(jobs)
                if self.metrics is not None:
                    self.metrics.handed_back.inc(len(jobs))
                return 0
            slot.pool.add(jobs)
        self._wake.set()
        return len(jobs)

    def reclaim(self, run: str) -> int:
        """Hand back every unfinished episode of ``run`` now (the controller has a dedicated worker idle while
        this replica is paused by serving); returns how many."""
        self._slot_of(run)
        self.preempt()
        with self._step_lock, self._lock:
            before = self.handed_back
            self._hand_back()
            self._paused_since = None
            return self.handed_back - before

    def collect(self, run: str) -> tuple[list[Trajectory], list[EpisodeJob], dict[str, Any]]:
        """Take the finished trajectories and handed-back jobs of ``run``."""
        self._slot_of(run)
        with self._lock:
            done, back = self.finished, self.returned
            self.finished, self.returned = [], []
            return done, back, self.status()

    def close(self) -> None:
        self._closed = True
        self.preempt()
        self._wake.set()
        self._thread.join(timeout=10)

    # ---- internals -------------------------------------------------------------------------------
    def _slot_of(self, run: str) -> Slot:
        with self._lock:
            if self.slot is None or self.spec is None:
                raise LendingRefused("no RL run has joined this replica (POST /admin/lending/join first)")
            if run != self.spec.run:
                raise LendingRefused(f"this replica lends to run {self.spec.run!r}, not {run!r}")
            return self.slot

    def _serving_recently(self) -> bool:
        if self.busy():
            self._last_busy = time.monotonic()
            return True
        return time.monotonic() - self._last_busy < self.config.idle_ms / 1000.0

    def _hand_back(self) -> None:
        """(Holding both locks.) Every unfinished episode goes back to the controller."""
        if self.slot is None:
            return
        jobs = self.slot.pool.pop_unfinished()
        if jobs:
            log.info("handing %d RL episodes back to the controller", len(jobs))
        self.returned += jobs
        self.handed_back += len(jobs)
        if self.metrics is not None and jobs:
            self.metrics.handed_back.inc(len(jobs))

    def _run(self) -> None:
        if self._nice:
            with contextlib.suppress(AttributeError, OSError):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._nice)
        while not self._closed:
            with self._lock:
                slot = self.slot if self.enabled else None
                work = slot is not None and slot.pool.running > 0
            if not work:
                self._paused_since = None
                self._wake.wait(1.0)  # join, submit, enable and close set it
                self._wake.clear()
                continue
            assert slot is not None
            if self._serving_recently():
                self._pause(slot)
                continue
            self._paused_since = None
            try:
                self._step(slot)
            except Exception:  # a broken episode must not take the server down: hand everything back
                log.exception("lent rollout failed; handing its episodes back")
                with self._step_lock, self._lock:
                    self._hand_back()

    def _pause(self, slot: Slot) -> None:
        now = time.monotonic()
        if self._paused_since is None:
            self._paused_since = now
            self._count("pause")
        elif now - self._paused_since >= self.config.hand_back_s:
            with self._step_lock, self._lock:
                if self.slot is slot:
                    self._hand_back()
            self._paused_since = None
        time.sleep(0.005)

    def _step(self, slot: Slot) -> None:
        cancel = threading.Event()
        self._cancel = cancel
        with self._step_lock:
            if self.slot is not slot:
                return
            before = slot.pool.tokens
            ran = slot.pool.step(cancel=cancel, max_rows=self.config.max_rows)
            self._cancel = None
            tokens = slot.pool.tokens - before
            with self._lock:
                done = slot.pool.pop_finished()
                self.finished += done
                self.tokens += tokens
                self.episodes += len(done)
        if cancel.is_set() and ran == 0:
            self._count("cut")
        if self.metrics is not None:
            self.metrics.tokens.inc(tokens)
            self.metrics.episodes.inc(len(done))

    def _count(self, kind: str) -> None:
        self.preemptions[kind] += 1
        if self.metrics is not None:
            self.metrics.preemptions.labels(kind=kind).inc()
