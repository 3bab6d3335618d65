"""Admission's forecast against hand-computed values, on a fake clock.

Run: .venv/bin/python -m pytest tests/serving/test_admission.py -q
"""

from __future__ import annotations

import pytest

from serving.admission import Admission, LatencyCurve


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_an_idle_engine_always_admits_and_before_min_samples_turns_queue_one_after_another() -> None:
    clock = Clock()
    adm = Admission(min_samples=3, clock=clock)
    assert adm.forecast("shop").predicted_ms == 0.0  # never ran
    others = adm.start()
    clock.t += 2.0
    adm.finish("shop", 2000.0, others=others, delivered=True)  # one slow first turn
    assert adm.forecast("shop").predicted_ms == 0.0  # idle: try anyway (no lock-out on a stale service time)
    adm.start()
    # one in flight, 1 completion < min_samples: as if it and the new turn ran one after the other
    assert adm.forecast("shop").predicted_ms == 4000.0
    adm.start()
    assert adm.forecast("shop").predicted_ms == 6000.0
    assert adm.capacity() is None


def test_capacity_is_completions_per_busy_second_and_the_forecast_follows_littles_law() -> None:
    clock = Clock()
    adm = Admission(window_s=10.0, min_samples=4, alpha=0.5, clock=clock)
    # 4 lone turns of 100 ms each, 1 s apart: busy 0.4 s, 4 completions -> capacity 10 / s
    for _ in range(4):
        others = adm.start()
        clock.t += 0.1
        adm.finish("shop", 100.0, others=others, delivered=True)
        clock.t += 0.9
    assert adm.capacity() == pytest.approx(10.0)
    assert adm.forecast("shop").predicted_ms == 0.0  # idle: always admitted
    for _ in range(5):  # five turns in flight: a sixth waits for (5 + 1) / 10 s
        adm.start()
    forecast = adm.forecast("shop")
    assert forecast.in_flight == 5
    # the running busy stretch adds 0 s (clock not advanced): capacity still 4 / 0.4 s
    assert forecast.predicted_ms == pytest.approx(600.0)


def test_cut_turns_are_not_completions_so_overload_tightens_admission() -> None:
    clock = Clock()
    adm = Admission(window_s=10.0, min_samples=2, clock=clock)
    for _ in range(2):
        others = adm.start()
        clock.t += 0.1
        adm.finish("shop", 100.0, others=others, delivered=True)
    assert adm.capacity() == pytest.approx(10.0)  # 2 in 0.2 s
    a, b = adm.start(), adm.start()
    clock.t += 0.2
    adm.finish("shop", 300.0, others=a, delivered=False)  # cut at its deadline
    adm.finish("shop", 300.0, others=b, delivered=False)
    assert adm.capacity() == pytest.approx(5.0)  # still 2 delivered, now in 0.4 s busy
    adm.start()
    assert adm.forecast("shop").predicted_ms == pytest.approx((1 + 1) / 5.0 * 1000)


def test_busy_with_nothing_delivered_in_the_window_assumes_turns_run_one_after_another() -> None:
    clock = Clock()
    adm = Admission(window_s=1.0, min_samples=1, alpha=1.0, clock=clock)
    others = adm.start()
    clock.t += 0.08
    adm.finish("shop", 80.0, others=others, delivered=True)
    clock.t += 5.0  # the completion leaves the window
    adm.start()
    adm.start()
    assert adm.capacity() is None
    assert adm.forecast("shop").predicted_ms == pytest.approx(3 * 80.0)


def test_latency_curve_buckets_interpolates_and_extrapolates_by_a_clipped_power_law() -> None:
    assert [LatencyCurve.bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 32, 33)] == [1, 2, 4, 4, 8, 8, 16, 32, 64]
    curve = LatencyCurve(alpha=0.5, min_samples=2)
    curve.add(1, 1.0)
    curve.add(4, 2.0)
    assert curve.slowdown(8) is None  # one sample a level is not enough
    curve.add(1, 1.0)
    assert curve.slowdown(8) is None  # one measured level is not a curve
    curve.add(4, 2.0)
    # through (1, 1) and (4, 2): power log 2 / log 4 = 0.5
    assert curve.slowdown(1) == pytest.approx(1.0)
    assert curve.slowdown(2) == pytest.approx(2.0 * (2 / 4) ** 0.5)  # 1.414
    assert curve.slowdown(16) == pytest.approx(2.0 * (16 / 4) ** 0.5)  # 4.0
    steep = LatencyCurve(min_samples=1)
    steep.add(1, 1.0)
    steep.add(2, 4.0)  # worse than one after another: the power is clipped to 1
    assert steep.slowdown(8) == pytest.approx(4.0 * 8 / 2)
    flat = LatencyCurve(min_samples=1)
    flat.add(1, 2.0)
    flat.add(4, 1.0)  # faster with more in flight (noise): clipped to 0, never below the last level's
    assert flat.slowdown(8) == pytest.approx(1.0)
    mixed = LatencyCurve(alpha=0.5, min_samples=1, spread=2.0)
    for level, slow in ((3, 2.0), (4, 4.0)):  # one bucket (3-4): the mean level, slowdown and deviation
        mixed.add(level, slow)
    mixed.add(1, 1.0)
    # deviation 0 -> 0.5 * |4 - 2| = 1; mean 2 -> 3; the point is 3 + 2 x 1 = 5 (the slow end, not the mean)
    assert mixed.points() == [(1.0, 1.0), (3.5, 5.0)]


def test_a_batching_engine_is_forecast_by_its_latency_curve_not_littles_law() -> None:
    clock = Clock()
    adm = Admission(window_s=100.0, min_samples=4, alpha=0.5, level_samples=4, clock=clock)
    for _ in range(5):  # lone turns of 100 ms: the service time (the first has none to compare with)
        others = adm.start()
        clock.t += 0.1
        adm.finish("shop", 100.0, others=others, delivered=True)
    for _ in range(4):  # turns that started with 3 others took 200 ms: slowdown 2 at level 4
        adm.start()
        clock.t += 0.2
        adm.finish("shop", 200.0, others=3, delivered=True)
    for _ in range(15):
        adm.start()
    forecast = adm.forecast("shop")
    # level 16 on the curve through (1, 1) and (4, 2): 2 * (16 / 4) ** 0.5 = 4 -> 400 ms
    assert forecast.slowdown == pytest.approx(4.0)
    assert forecast.predicted_ms == pytest.approx(400.0)
    # Little's law would have said (15 + 1) / (9 completions / 1.3 busy s) = 2311 ms and refused an 800 ms turn
    assert forecast.capacity_per_s == pytest.approx(9 / 1.3)


def test_an_engine_without_batching_fits_a_power_of_one() -> None:
    clock = Clock()
    adm = Admission(window_s=100.0, min_samples=1, alpha=1.0, level_samples=1, clock=clock)
    for latency, others in ((100.0, 0), (100.0, 0), (400.0, 3)):  # level 4 took 4 lone turns' time
        adm.start()
        adm.finish("shop", latency, others=others, delivered=True)
    for _ in range(7):
        adm.start()
    assert adm.forecast("shop").predicted_ms == pytest.approx(800.0)  # level 8: 8 x 100 ms
    alone = Admission(window_s=100.0, min_samples=1, alpha=1.0, level_samples=1, learn_curve=False, clock=clock)
    for latency, others in ((100.0, 0), (100.0, 0), (400.0, 3)):
        alone.start()
        alone.finish("shop", latency, others=others, delivered=True)
    assert alone.curve.points(clock.t) == [] and alone.forecast("shop").slowdown is None  # Little's law only


def test_cut_turns_count_double_and_old_levels_are_forgotten() -> None:
    clock = Clock()
    adm = Admission(window_s=100.0, min_samples=1, alpha=1.0, level_samples=1, curve_ttl_s=30.0, clock=clock)
    for latency, others, delivered in ((100.0, 0, True), (100.0, 0, True), (300.0, 3, False)):
        adm.start()
        adm.finish("shop", latency, others=others, delivered=delivered)
    # the cut turn at level 4 ran 300 ms before its cut: it counts as 600 (slowdown 6), so level 4 -> 600 ms
    adm.start(), adm.start(), adm.start()
    assert adm.forecast("shop").slowdown == pytest.approx(6.0)
    clock.t += 31.0  # no turn for longer than the curve's ttl: back to Little's law until levels are measured again
    assert adm.forecast("shop").slowdown is None
    assert adm.curve.points(clock.t) == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        Admission(window_s=0)
    with pytest.raises(ValueError, match="min_samples"):
        Admission(min_samples=0)
    with pytest.raises(ValueError, match="level_samples"):
        Admission(level_samples=0)
    with pytest.raises(ValueError, match="cut_penalty"):
        Admission(cut_penalty=0.5)


def test_a_turn_the_app_answered_itself_leaves_the_count_and_measures_nothing() -> None:
    clock = Clock()
    adm = Admission(window_s=10.0, min_samples=1, alpha=1.0, clock=clock)
    others = adm.start()
    clock.t += 0.3
    adm.finish("live", 300.0, others=others, delivered=True)  # one model turn: service 300 ms, capacity 1 / 0.3 s
    assert adm.capacity() == pytest.approx(1 / 0.3)
    adm.start()
    clock.t += 0.001
    adm.drop()  # a sure answer, 1 ms: busy time, but no completion and no service time
    assert adm.in_flight == 0 and (adm._service["live"], adm._completed) == (300.0, 1)
    assert adm.capacity() == pytest.approx(1 / 0.301)  # finished as a delivery it would read 2 / 0.301
    adm.start()
    adm.start()
    adm.drop()
    assert adm.in_flight == 1
    adm.drop()
    assert adm.in_flight == 0 and adm.forecast("live").predicted_ms == 0.0
