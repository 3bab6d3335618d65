"""`Admission`: predicts how long a model turn sent now would take, from measured service, to refuse at once
what cannot finish within its budget.

A serving process is a queue with batching: how long a turn takes depends on how many turns share the
engine. By Little's law the turns in flight ``N``, the rate at which they complete ``X`` and their mean
latency ``L`` obey ``N = X * L``; so a turn admitted now, with ``n`` others in flight, should take about
``(n + 1) / X``. ``X`` must be the **capacity** at that load, not the arrival rate, or an idle server
(one request a second) would predict a one-second turn: it is counted as completions per second of
*busy* time (time with at least one turn in flight), over a sliding window. A turn can never be faster
than the app's own service time (EMA of the latency of turns that had the engine to themselves), so::

    predicted_ms(app, n) = max(service_ms[app], (n + 1) / X * 1000)

Turns cut at their deadline do not count as completions: they used capacity and delivered nothing, so
when cuts rise ``X`` falls and admission tightens (the feedback that keeps goodput up under overload).
When nothing was delivered in the window the turns ahead are assumed to run one after another
(``(n + 1) * service_ms``). A server that has completed fewer than ``min_samples`` turns predicts the
app's service time alone, and an idle engine (``n == 0``) predicts 0: a turn is always tried when
nothing else runs, so admission can never lock itself out on a stale service time (one slow first
turn, say), and the turn's own deadline still bounds it.

Run its tests: ``.venv/bin/python -m pytest tests/serving/test_admission.py -q``
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Forecast:
    """What admission expects of a turn sent now."""

    predicted_ms: float
    in_flight: int  # model turns running or waiting when it was asked (this one not included)
    capacity_per_s: float | None  # completed turns per busy second over the window; None = not measured yet


class Admission:
    """Counts model turns in flight and their completions; forecasts a new turn's latency.

    ``window_s``: how far back completions count for the capacity (seconds of wall time).
    ``min_samples``: completions needed before forecasting (before that every turn is admitted).
    ``alpha``: EMA weight of the newest lone-turn latency in an app's service time.
    ``clock``: monotonic seconds (a test passes its own).
    """

    def __init__(self, *, window_s: float = 5.0, min_samples: int = 8, alpha: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {min_samples}")
        self.window_s, self.min_samples, self.alpha, self.clock = window_s, min_samples, alpha, clock
        self._lock = threading.Lock()
        self._in_flight = 0
        self._busy_since: float | None = None  # start of the current busy stretch (None: idle)
        self._busy: deque[tuple[float, float]] = deque()  # finished busy stretches (start, end) in the window
        self._done: deque[float] = deque()  # completion times of turns that delivered, in the window
        self._service: dict[str, float] = {}  # app -> EMA ms of turns that ran alone
        self._completed = 0

    # ------------------------------------------------------------------------------------------ events
    def start(self) -> int:
        """A model turn starts; returns how many others were in flight (pass it back to :meth:`finish`)."""
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = self.clock()
            self._in_flight += 1
            return self._in_flight - 1

    def finish(self, app: str, latency_ms: float, *, others: int, delivered: bool) -> None:
        """The turn is over: ``delivered`` False when it was cut at its deadline (counts as no completion).

        ``others``: what :meth:`start` returned; a turn that started alone updates the app's service time.
        """
        now = self.clock()
        with self._lock:
            self._in_flight = max(0, self._in_flight - 1)
            if self._in_flight == 0 and self._busy_since is not None:
                self._busy.append((self._busy_since, now))
                self._busy_since = None
            if delivered:
                self._done.append(now)
                self._completed += 1
                if others == 0:
                    old = self._service.get(app)
                    self._service[app] = latency_ms if old is None else (1 - self.alpha) * old + self.alpha * latency_ms
            self._trim(now)

    # ------------------------------------------------------------------------------------------ forecast
    @property
    def in_flight(self) -> int:
        return self._in_flight

    def capacity(self) -> float | None:
        """Delivered turns per second of busy time over the window; None before ``min_samples`` completions."""
        now = self.clock()
        with self._lock:
            self._trim(now)
            return self._capacity(now)

    def forecast(self, app: str) -> Forecast:
        """The expected latency of a model turn of ``app`` admitted now."""
        now = self.clock()
        with self._lock:
            self._trim(now)
            n, capacity = self._in_flight, self._capacity(now)
            service = self._service.get(app, 0.0)
        if n == 0:
            predicted = 0.0  # an idle engine: always try (a turn too slow is cut; its latency updates the service time)
        elif self._completed < self.min_samples:
            predicted = service  # nothing measured yet: the turn's own service time
        elif capacity is not None:
            predicted = max(service, (n + 1) / capacity * 1000.0)
        else:  # busy, but nothing delivered in the window: as if the turns ahead ran one after another
            predicted = (n + 1) * service
        return Forecast(predicted_ms=predicted, in_flight=n, capacity_per_s=capacity)

    def _capacity(self, now: float) -> float | None:
        if self._completed < self.min_samples or not self._done:
            return None
        start = now - self.window_s
        busy = sum(max(0.0, e - max(s, start)) for s, e in self._busy)
        if self._busy_since is not None:
            busy += now - max(self._busy_since, start)
        return len(self._done) / busy if busy > 1e-3 else None

    def _trim(self, now: float) -> None:
        start = now - self.window_s
        while self._done and self._done[0] < start:
            self._done.popleft()
        while self._busy and self._busy[0][1] < start:
            self._busy.popleft()
