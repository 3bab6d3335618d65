"""Metrics: observations appear in the rendered Prometheus exposition text with the right values.

Run: .venv/bin/python -m pytest tests/serving/test_metrics.py -q
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from serving.batcher import BatchReport
from serving.metrics import Metrics

Labels = tuple[tuple[str, str], ...]


def samples(metrics: Metrics) -> dict[tuple[str, Labels], float]:
    """Every sample of the rendered text: (name, sorted labels) -> value."""
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain") and "version=" in content_type
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def test_request_latency_histogram_by_route_and_status() -> None:
    m = Metrics()
    turns = "/v1/shopping/sessions/{session_id}/turns"
    for seconds in (0.004, 0.03, 0.7, 45.0):
        m.observe_request(turns, 200, seconds)
    m.observe_request(turns, 503, 0.001)
    s = samples(m)

    def bucket(le: str, status: str = "200") -> tuple[str, Labels]:
        return "sidekick_request_latency_seconds_bucket", (("le", le), ("route", turns), ("status", status))

    assert s[bucket("0.01")] == 1 and s[bucket("0.05")] == 2 and s[bucket("1.0")] == 3 and s[bucket("30.0")] == 3
    assert s[bucket("+Inf")] == 4 and s[bucket("0.01", "503")] == 1
    ok = (("route", turns), ("status", "200"))
    assert s[("sidekick_request_latency_seconds_count", ok)] == 4
    assert abs(s[("sidekick_request_latency_seconds_sum", ok)] - 45.734) < 1e-9


def test_turns_record_latency_budget_tokens_degradation_and_grounding() -> None:
    m = Metrics()
    m.observe_turn("livestream", 0.2, tokens=30)
    m.observe_turn("livestream", 1.7, degraded_reason="budget", grounding_failures=2, tokens=12, within_budget=False)
    m.observe_turn("shopping", 3.0, grounding_failures={"unknown": 1, "out_of_stock": 2, "constraint": 0})
    s = samples(m)
    live = (("app", "livestream"),)
    assert s[("sidekick_turn_latency_seconds_bucket", (("app", "livestream"), ("le", "0.25")))] == 1
    assert s[("sidekick_turn_latency_seconds_bucket", (("app", "livestream"), ("le", "2.5")))] == 2
    assert s[("sidekick_turn_latency_seconds_count", live)] == 2
    assert s[("sidekick_turns_total", (("app", "livestream"), ("within_budget", "true")))] == 1
    assert s[("sidekick_turns_total", (("app", "livestream"), ("within_budget", "false")))] == 1
    assert s[("sidekick_turn_output_tokens_total", live)] == 42
    assert s[("sidekick_degraded_replies_total", (("app", "livestream"), ("reason", "budget")))] == 1
    assert s[("sidekick_grounding_failures_total", (("app", "livestream"), ("reason", "unspecified")))] == 2
    assert s[("sidekick_grounding_failures_total", (("app", "shopping"), ("reason", "out_of_stock")))] == 2
    assert s[("sidekick_grounding_failures_total", (("app", "shopping"), ("reason", "unknown")))] == 1
    assert ("sidekick_grounding_failures_total", (("app", "shopping"), ("reason", "constraint"))) not in s
    assert ("sidekick_degraded_replies_total", (("app", "shopping"), ("reason", "budget"))) not in s


def test_counters_by_reason_and_rejections() -> None:
    m = Metrics()
    m.count_degraded("shopping", "budget")
    m.count_degraded("shopping", "budget")
    m.count_degraded("travel", "max_steps")
    m.count_grounding_failure("shopping", "unknown", n=3)
    m.count_rejection()
    m.rejected.inc()
    s = samples(m)
    assert s[("sidekick_degraded_replies_total", (("app", "shopping"), ("reason", "budget")))] == 2
    assert s[("sidekick_degraded_replies_total", (("app", "travel"), ("reason", "max_steps")))] == 1
    assert s[("sidekick_grounding_failures_total", (("app", "shopping"), ("reason", "unknown")))] == 3
    assert s[("sidekick_admission_rejections_total", ())] == 2


def test_engine_batches_tokens_and_queue_depth_read_at_scrape_time() -> None:
    m = Metrics()
    depth = [0]
    m.set_queue_depth_source(lambda: depth[0])
    m.observe_batch(BatchReport(requests=3, sequences=3, tokens=40, latency_ms=20.0, ok=True))
    m.observe_batch(BatchReport(requests=12, sequences=24, tokens=100, latency_ms=80.0, ok=True))
    m.observe_batch(BatchReport(requests=2, sequences=2, tokens=0, latency_ms=1.0, ok=False))
    depth[0] = 7
    s = samples(m)
    assert s[("sidekick_engine_queue_depth", ())] == 7
    assert s[("sidekick_engine_batch_size_bucket", (("le", "2.0"),))] == 1
    assert s[("sidekick_engine_batch_size_bucket", (("le", "4.0"),))] == 2
    assert s[("sidekick_engine_batch_size_bucket", (("le", "16.0"),))] == 3
    assert s[("sidekick_engine_batch_size_sum", ())] == 17
    assert s[("sidekick_tokens_generated_total", ())] == 140
    assert s[("sidekick_engine_failed_batches_total", ())] == 1
    depth[0] = 2
    assert samples(m)[("sidekick_engine_queue_depth", ())] == 2


def test_each_instance_has_its_own_registry() -> None:
    a, b = Metrics(), Metrics()  # no "duplicated timeseries" error from a shared global registry
    a.count_rejection()
    assert samples(a)[("sidekick_admission_rejections_total", ())] == 1
    assert samples(b)[("sidekick_admission_rejections_total", ())] == 0
