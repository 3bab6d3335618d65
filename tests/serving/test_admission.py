"""Admission's forecast against hand-computed values, on a fake clock.

Run: .venv/bin/python -m pytest tests/serving/test_admission.py -q
"""

from __future__ import annotations

import pytest

from serving.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_an_idle_engine_always_admits_and_before_min_samples_the_service_time_rules() -> None:
    clock = Clock()
    adm = Admission(min_samples=3, clock=clock)
    assert adm.forecast("shop").predicted_ms == 0.0  # never ran
    others = adm.start()
    clock.t += 2.0
    adm.finish("shop", 2000.0, others=others, delivered=True)  # one slow first turn
    assert adm.forecast("shop").predicted_ms == 0.0  # idle: try anyway (no lock-out on a stale service time)
    adm.start()
    assert adm.forecast("shop").predicted_ms == 2000.0  # one in flight, 1 completion < min_samples
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


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window_s"):
        Admission(window_s=0)
    with pytest.raises(ValueError, match="min_samples"):
        Admission(min_samples=0)
