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
(``(n + 1) * service_ms``).

Little's law with capacity measured at the current load under-admits a batching engine: capacity grows with
the turns that share a batch, but admission that holds the load at ``n`` only ever measures capacity at
``n``. So admission also learns the **latency curve**: for each level of concurrency (the turns in flight
when a turn started, itself included; levels bucketed 1, 2, 3-4, 5-8, ...) the mean slowdown of a turn
there over the app's lone service time. A turn cut at its deadline only says its latency was longer than
the cut, so it counts ``cut_penalty`` times its latency (2): a level where turns get cut is forecast as too
slow for their budgets instead of as fast as the cut. Levels not seen for ``curve_ttl_s`` are forgotten, so
a slow spell is not held against the engine for ever. An engine that runs one turn at a time
(``learn_curve=False``: ``batching: false``) keeps Little's law alone: its capacity does not grow with load,
and there the measured capacity is the whole story. Once two
levels have ``level_samples`` turns each, a turn admitted at level ``L`` is forecast as
``service_ms * slowdown(L)``, interpolated log-log between the measured levels and extrapolated past the
highest with the power the last two give (clipped to [0, 1]: never better than flat, never worse than
turns running one after another). No batching fits a power near 1 and forecasts like Little's law; a
batching engine fits less and is allowed the concurrency its batches absorb. A level admitted on an
extrapolation that turns out slow is measured, and the forecast follows.

A server that has completed fewer than ``min_samples`` turns predicts as if the turns in flight ran one after
another (``(n + 1) * service_ms``): predicting the service time alone admitted every turn of a cold unbatched
server hit by 8 concurrent 300 ms turns, each waited behind the others past its deadline, none was delivered,
so nothing was ever measured (12 s of timeouts in the serving bench). An idle engine (``n == 0``) predicts 0: a
turn is always tried when nothing else runs, so admission can never lock itself out on a stale service time
(one slow first turn, say), and the turn's own deadline still bounds it.

Run its tests: ``.venv/bin/python -m pytest tests/serving/test_admission.py -q``
"""

from __future__ import annotations

import itertools
import math
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
    slowdown: float | None = None  # the latency curve's slowdown at this turn's level; None = Little's law used


class Admission:
    """Counts model turns in flight and their completions; forecasts a new turn's latency.

    ``window_s``: how far back completions count for the capacity (seconds of wall time).
    ``min_samples``: completions needed before forecasting from measurements (before that: turns one after
    another).
    ``alpha``: EMA weight of the newest lone-turn latency in an app's service time.
    ``clock``: monotonic seconds (a test passes its own).
    """

    def __init__(self, *, window_s: float = 5.0, min_samples: int = 8, alpha: float = 0.2, level_samples: int = 4,
                 cut_penalty: float = 2.0, curve_ttl_s: float = 30.0, learn_curve: bool = True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be > 0, got {window_s}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {min_samples}")
        if level_samples < 1:
            raise ValueError(f"level_samples must be >= 1, got {level_samples}")
        self.window_s, self.min_samples, self.alpha, self.clock = window_s, min_samples, alpha, clock
        if cut_penalty < 1:
            raise ValueError(f"cut_penalty must be >= 1, got {cut_penalty}")
        self.cut_penalty, self.learn_curve = cut_penalty, learn_curve
        self.curve = LatencyCurve(alpha=alpha, min_samples=level_samples, ttl_s=curve_ttl_s)
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
            self._leave(now)
            service = self._service.get(app)
            if service and self.learn_curve:
                self.curve.add(others + 1, latency_ms / service * (1.0 if delivered else self.cut_penalty), now)
            if delivered:
                self._done.append(now)
                self._completed += 1
                if others == 0:
                    old = self._service.get(app)
                    self._service[app] = latency_ms if old is None else (1 - self.alpha) * old + self.alpha * latency_ms
            self._trim(now)

    def drop(self) -> None:
        """The turn is over without having used the model (the app answered it itself: the livestream reader's sure
        answers): it leaves the turns in flight and measures nothing; a ~1 ms "turn" would make the service time,
        capacity and latency curve of model turns look faster than they are."""
        with self._lock:
            self._leave(self.clock())

    def _leave(self, now: float) -> None:
        self._in_flight = max(0, self._in_flight - 1)
        if self._in_flight == 0 and self._busy_since is not None:
            self._busy.append((self._busy_since, now))
            self._busy_since = None

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
        slowdown = self.curve.slowdown(n + 1, now) if n > 0 and service else None
        if n == 0:
            predicted = 0.0  # an idle engine: always try (a turn too slow is cut; its latency updates the service time)
        elif self._completed < self.min_samples:
            predicted = (n + 1) * service  # too little measured: as if the turns ahead ran one after another
        elif slowdown is not None:
            predicted = service * max(1.0, slowdown)
        elif capacity is not None:
            predicted = max(service, (n + 1) / capacity * 1000.0)
        else:  # busy, but nothing delivered in the window: as if the turns ahead ran one after another
            predicted = (n + 1) * service
        return Forecast(predicted_ms=predicted, in_flight=n, capacity_per_s=capacity, slowdown=slowdown)

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


class LatencyCurve:
    """A turn's slowdown (latency over the app's lone service time) as a function of the concurrency it started
    at, learnt per level bucket (1, 2, 3-4, 5-8, ...: EMAs of the level, of the slowdown and of its absolute
    deviation). A level's point is its mean slowdown plus ``spread`` deviations (2: about the 90th percentile
    of a normal spread), so the turns admitted at the edge of their budget still make it, not only the average
    one. A bucket not added to for ``ttl_s`` seconds starts again. Not thread-safe: :class:`Admission` calls it
    under its lock."""

    def __init__(self, alpha: float = 0.2, min_samples: int = 4, ttl_s: float = 30.0, spread: float = 1.0) -> None:
        self.alpha, self.min_samples, self.ttl_s, self.spread = alpha, min_samples, ttl_s, spread
        # bucket -> [samples, mean level, mean slowdown, last added, mean absolute deviation of the slowdown]
        self._points: dict[int, list[float]] = {}

    @staticmethod
    def bucket(level: int) -> int:
        return 1 << max(0, level - 1).bit_length()  # 1, 2, 4, 8, ...: the smallest power of two >= level

    def add(self, level: int, slowdown: float, now: float = 0.0) -> None:
        point = self._points.get(self.bucket(level))
        if point is None or now - point[3] > self.ttl_s:
            self._points[self.bucket(level)] = [1, float(level), slowdown, now, 0.0]
            return
        point[0] += 1
        a = max(self.alpha, 1.0 / point[0])  # a plain mean until 1/alpha samples, then an EMA
        point[4] += a * (abs(slowdown - point[2]) - point[4])
        point[1] += a * (level - point[1])
        point[2] += a * (slowdown - point[2])
        point[3] = now

    def points(self, now: float = 0.0) -> list[tuple[float, float]]:
        """``(level, slowdown + spread x deviation)`` of the buckets with ``min_samples`` turns added to within
        ``ttl_s``, by level."""
        return sorted((lv, max(sl + self.spread * dev, 1e-6)) for n, lv, sl, last, dev in self._points.values()
                      if n >= self.min_samples and now - last <= self.ttl_s)

    def slowdown(self, level: int, now: float = 0.0) -> float | None:
        """The forecast slowdown at ``level``; None with fewer than two measured levels."""
        pts = self.points(now)
        if len(pts) < 2:
            return None
        if level <= pts[0][0]:
            return pts[0][1]
        for (l1, s1), (l2, s2) in itertools.pairwise(pts):
            if level <= l2:
                return _power_between(l1, s1, l2, s2, level)
        (l1, s1), (l2, s2) = pts[-2], pts[-1]
        return _power_between(l1, s1, l2, s2, level)


def _power_between(l1: float, s1: float, l2: float, s2: float, level: float) -> float:
    """The power law through ``(l1, s1)`` and ``(l2, s2)`` (exponent clipped to [0, 1]) at ``level``."""
    if l2 - l1 < 1e-9:
        return max(s1, s2)
    power = min(1.0, max(0.0, math.log(s2 / s1) / math.log(l2 / l1)))
    return s2 * (level / l2) ** power
