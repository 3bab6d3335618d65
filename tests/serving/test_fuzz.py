"""Schemathesis fuzzing of the live REST API, and one regression test per bug the fuzzing found.

The fuzz loads ``/openapi.json`` from a real uvicorn server on 127.0.0.1 (the tiny trained agent, all
three apps, admin routes on) and runs schemathesis' engine over every operation: boundary and
invalid values (coverage phase), generated valid and invalid requests (fuzzing phase) and inferred
session workflows (stateful phase). It asserts no 5xx, that status codes, content types and bodies
match the schema, and that every operation answered both accepted and rejected requests. Admin
routes run once without the key (401) and once with it (200). Everything is bounded: 20 examples a
phase and operation, 8 output tokens per model call, deadline off; about two minutes here.

Run: .venv/bin/python -m pytest tests/serving/test_fuzz.py -q -m integration
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from schemathesis.engine import StopReason, events, from_schema

from apps.serve import build_server
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import ServeConfig

pytestmark = pytest.mark.integration

API_KEY = "fuzz-key"
MAX_NEW_TOKENS = 8
MODELS = ["sidekick", "sidekick:shopping", "sidekick:livestream", "sidekick:travel"]


@pytest.fixture(scope="module")
def fuzz_url(tiny_agent: Path, worlds: dict[str, Path]) -> Iterator[str]:
    """One live server for the module: the tiny agent, the three apps, an admin key, 8 tokens per model call."""
    config = ServeConfig(api_key=API_KEY, max_new_tokens=MAX_NEW_TOKENS, worker_threads=4)
    server = build_server(tiny_agent, [worlds[a] for a in ("shopping", "livestream", "travel")], config)
    with BackgroundServer(create_app(server)) as url:
        yield url


# ------------------------------------------------------------------------------------------------ the fuzz
@dataclass
class FuzzOutcome:
    failures: list[str] = field(default_factory=list)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)  # "METHOD /path" -> status -> count
    urls: set[str] = field(default_factory=set)
    stop: StopReason | None = None

    def summary(self) -> str:
        return "\n".join(f"{op}: {dict(sorted(c.items()))}" for op, c in sorted(self.statuses.items()))


def _config(url: str, streams: list[str], headers: dict[str, str] | None) -> schemathesis.Config:
    on = {"enabled": True}
    return schemathesis.Config.from_dict({
        "base-url": url, "seed": 7, "workers": 1, "request-timeout": 60,
        "suppress-health-check": ["all"], **({"headers": headers} if headers else {}),
        "generation": {"mode": "all", "max-examples": 20},  # valid and invalid requests
        "phases": {"stateful": {"max-steps": 8}},
        # no 5xx is checked in _record: schemathesis' not_a_server_error would also fail admission control's 503
        "checks": {"enabled": False, "status_code_conformance": on, "content_type_conformance": on,
                   "response_schema_conformance": on},
        # real model names and stream ids now and then, so model paths run, not only 404s
        "dictionaries": {"models": {"values": MODELS}, "streams": {"values": streams}},
        "parameters": {"body.model": {"dictionary": "models", "probability": 0.8},
                       "body.stream_id": {"dictionary": "streams", "probability": 0.5}},
    })


def fuzz(url: str, worlds: dict[str, Path], *, path_regex: str | None = None,
         headers: dict[str, str] | None = None) -> FuzzOutcome:
    """Run schemathesis' engine against the live server; collect failed checks, errors and status codes."""
    streams = [json.loads(line)["stream_id"] for line in (worlds["livestream"] / "streams.jsonl").open()]
    schema: schemathesis.BaseSchema = schemathesis.openapi.from_url(url + "/openapi.json",
                                                                    config=_config(url, streams, headers))
    if path_regex is not None:
        schema = schema.include(path_regex=path_regex)
    out = FuzzOutcome()
    for event in from_schema(schema).execute():
        if isinstance(event, events.NonFatalError | events.FatalError):
            out.failures.append(f"engine error: {event!r}")
        elif isinstance(event, events.ScenarioFinished):
            _record(event.recorder, out)
        elif isinstance(event, events.EngineFinished):
            out.stop = event.stop_reason
    return out


def _record(recorder: Any, out: FuzzOutcome) -> None:
    for case_id, interaction in recorder.interactions.items():
        case, response = recorder.cases[case_id].value, interaction.response
        status = response.status_code if response is not None else -1
        out.statuses.setdefault(f"{case.method.upper()} {case.path}", Counter())[status] += 1
        out.urls.add(interaction.request.uri)
        admission = status == 503 and response is not None and "retry-after" in response.headers
        if status >= 500 and not admission:  # a 503 with Retry-After is admission control, not a bug
            body = (interaction.request.body or b"")[:500]
            out.failures.append(f"{status} from {case.method.upper()} {interaction.request.uri} {body!r}: "
                                f"{response.content[:500] if response is not None else b''!r}")
    for checks in recorder.checks.values():
        for check in checks:
            if check.failure_info is not None:
                info = check.failure_info
                message = str(info.failure.message)[:800]
                out.failures.append(f"{recorder.label}: {check.name}: {info.failure.title}: {message}\n"
                                    f"{info.code_sample[:2000]}")


def test_fuzzing_the_openapi_schema_finds_no_5xx(fuzz_url: str, worlds: dict[str, Path]) -> None:
    out = fuzz(fuzz_url, worlds)
    assert out.stop == StopReason.COMPLETED, out.stop
    assert not out.failures, "\n\n".join(out.failures[:15]) + "\n\n" + out.summary()
    assert all(u.startswith(fuzz_url + "/") for u in out.urls)  # stayed on the loopback server
    operations = set(httpx.get(fuzz_url + "/openapi.json").json()["paths"])
    assert operations <= {op.split(" ", 1)[1] for op in out.statuses}, out.summary()
    for op in ("POST /v1/shopping/sessions", "POST /v1/livestream/answer", "POST /v1/travel/plan",
               "POST /v1/chat/completions", "POST /v1/shopping/sessions/{session_id}/turns"):
        codes = out.statuses[op]
        assert any(200 <= c < 300 for c in codes) and codes[422] > 0, (op, codes)  # accepted and rejected
    assert out.statuses["GET /admin/stats"].keys() == {401} and out.statuses["POST /admin/reload"].keys() == {401}


def test_fuzzing_admin_routes_with_the_key(fuzz_url: str, worlds: dict[str, Path]) -> None:
    out = fuzz(fuzz_url, worlds, path_regex="^/admin/", headers={"X-API-Key": API_KEY})
    assert out.stop == StopReason.COMPLETED and not out.failures, "\n\n".join(out.failures[:15])
    assert out.statuses["GET /admin/stats"][200] > 0 and out.statuses["POST /admin/reload"][200] > 0, out.summary()


# ------------------------------------------------------------------------------------------------ regressions
def _post(client: httpx.Client, path: str, raw: str) -> httpx.Response:
    """POST a raw body: Python's JSON reader (FastAPI's) accepts NaN and Infinity, which httpx would not send."""
    return client.post(path, content=raw.encode(), headers={"content-type": "application/json"})


@pytest.mark.parametrize(("path", "raw", "field_name"), [
    ("/v1/shopping/sessions", '{"message": "boots", "budget_ms": NaN}', "budget_ms"),
    ("/v1/shopping/sessions", '{"constraints": {"price_max": Infinity}}', "price_max"),
    ("/v1/shopping/sessions", '{"constraints": {"price_max": 1e999}}', "price_max"),  # standard JSON, parses to inf
    ("/v1/livestream/answer", '{"question": "price?", "ts_offset_s": Infinity}', "ts_offset_s"),
    ("/v1/chat/completions", '{"model": "sidekick", "messages": [{"role": "user", "content": "hi"}], '
                             '"temperature": NaN}', "temperature"),
])
def test_nan_and_infinity_are_a_422_naming_the_field(fuzz_url: str, path: str, raw: str, field_name: str) -> None:
    """Was a 500: the 422 body echoed NaN, which JSON cannot carry (or, for Infinity, a 201 that stored it)."""
    with httpx.Client(base_url=fuzz_url, timeout=60) as client:
        r = _post(client, path, raw)
    assert r.status_code == 422, r.text
    assert field_name in r.text and "finite" in r.text


@pytest.mark.parametrize(("path", "raw", "field_name"), [
    ("/v1/shopping/sessions", '{"message": "boots\\u0000\\ud800"}', "message"),
    ("/v1/shopping/sessions", '{"message": "boots", "constraints": {"attributes": {"colour": "red\\ud800"}}}',
     "colour"),
    ("/v1/livestream/answer", '{"question": "price?", "stream_id": "\\ud800"}', "stream_id"),
])
def test_lone_surrogates_are_a_422_naming_the_field(fuzz_url: str, path: str, raw: str, field_name: str) -> None:
    """Was a 500 or a reset connection: the 422 body echoed a string UTF-8 cannot encode."""
    with httpx.Client(base_url=fuzz_url, timeout=60) as client:
        r = _post(client, path, raw)
    assert r.status_code == 422, r.text
    assert field_name in r.text and "\\\\ud800" in r.text  # the input comes back escaped


@pytest.mark.parametrize(("constraints", "message"), [
    ('{"day": "monday", "start": NaN}', "'start': numbers must be finite"),
    ('{"pace": {"walk": 1e999}}', "'pace.walk': numbers must be finite"),
    ('{"city": "\\udfff"}', "'city': not valid Unicode"),
    ('{"stops": ' + "[" * 900 + "]" * 900 + "}", "nested deeper than 32 levels"),
])
def test_free_form_constraints_must_be_plain_json(fuzz_url: str, constraints: str, message: str) -> None:
    """Was a 200 that stored NaN or Infinity, a 500 for a lone surrogate, a 500 (RecursionError) for deep nesting."""
    with httpx.Client(base_url=fuzz_url, timeout=60) as client:
        r = _post(client, "/v1/travel/plan", f'{{"request": "a museum day", "constraints": {constraints}}}')
    assert r.status_code == 422, r.text
    error = r.json()["detail"][0]
    assert error["loc"] == ["body", "constraints"] and message in error["msg"]


def test_a_price_range_no_item_can_meet_is_a_422(fuzz_url: str) -> None:
    """Was a 201 with a degraded reply (and a logged traceback): price_min above price_max."""
    with httpx.Client(base_url=fuzz_url, timeout=60) as client:
        r = client.post("/v1/shopping/sessions", json={"constraints": {"price_min": 50, "price_max": 10}})
        assert r.status_code == 422 and "price_min (50) is above price_max (10)" in r.text, r.text
        session = client.post("/v1/shopping/sessions", json={"constraints": {"price_min": 50}})
        assert session.status_code == 201, session.text
        turn = client.post(f"/v1/shopping/sessions/{session.json()['session_id']}/turns",
                           json={"message": "cheaper", "constraints": {"price_max": 10}})
        assert turn.status_code == 422 and "merged with the session's" in turn.json()["detail"], turn.text


def test_seed_outside_64_bits_is_a_422(fuzz_url: str) -> None:
    """Was a 500: torch cannot seed a generator with an integer over 64 bits."""
    with httpx.Client(base_url=fuzz_url, timeout=60) as client:
        r = client.post("/v1/chat/completions", json={"model": "sidekick", "temperature": 1.0, "seed": 2**64,
                                                      "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 422 and "seed" in r.json()["error"]["message"], r.text


def test_the_servers_token_ceiling_holds_for_raw_completions(fuzz_url: str) -> None:
    """``max_tokens`` above the server's ``max_new_tokens`` used to be honoured up to 4096 tokens."""
    with httpx.Client(base_url=fuzz_url, timeout=120) as client:
        r = client.post("/v1/chat/completions", json={"model": "sidekick", "temperature": 1.0, "seed": 3,
                                                      "max_tokens": 4096,
                                                      "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] <= MAX_NEW_TOKENS


def test_error_statuses_and_metrics_are_documented(fuzz_url: str) -> None:
    """The fuzz's schema checks failed on undocumented 400/401/404/413/503 and on /metrics' text/plain."""
    paths = httpx.get(fuzz_url + "/openapi.json").json()["paths"]
    assert {"400", "404", "413", "422", "503"} <= set(paths["/v1/shopping/sessions/{session_id}/turns"]["post"]
                                                      ["responses"])
    assert {"401", "403"} <= set(paths["/admin/stats"]["get"]["responses"])
    assert "text/plain" in paths["/metrics"]["get"]["responses"]["200"]["content"]
