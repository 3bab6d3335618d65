"""The lender (serving/lending.py) with a real rollout slot: the tiny agent over the shopping world.

Run: ``.venv/bin/python -m pytest tests/serving/test_lending.py -q``
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from apps.evaluate import load_tasks
from apps.serve import ServeSetupError, build_server, lending_slot
from harness.agent import call_seed
from serving.app import create_app
from serving.background import BackgroundServer
from serving.lending import Lender, LendingConfig, LendingRefused
from serving.server import ServeConfig
from training.rl.lending import (
    JoinSpec,
    LenderClient,
    LendingError,
    job_from_json,
    job_to_json,
    trajectory_from_json,
    trajectory_to_json,
    weights_from_bytes,
    weights_to_bytes,
)
from training.rl.rollout import EpisodeJob, RolloutSettings, run_episodes

SETTINGS = RolloutSettings(max_new_tokens=24, max_turns=1, temperature=1.0)


def _spec(world: Path, agent: Path, run: str = "run-1") -> JoinSpec:
    return JoinSpec(run=run, app="shopping", world=str(world), agent=str(agent), rollout=SETTINGS)


def _jobs(world: Path, n: int, group_size: int = 4) -> list[EpisodeJob]:
    tasks = [t for t in load_tasks(world) if t.kind != "bundle"][: n // group_size]
    return [EpisodeJob(task, g, s, call_seed(7, g, s)) for g, task in enumerate(tasks) for s in range(group_size)]


class Cutter:
    """Wraps the slot's engine: the first ``cuts`` generate calls get the lender's preempt() a few ms after they
    start (as a turn arriving mid-call would), so each of them is cut mid-way."""

    def __init__(self, engine: Any, lender: Lender, cuts: int, after_s: float = 0.005) -> None:
        self.engine, self.lender, self.cuts, self.after_s = engine, lender, cuts, after_s
        self.calls = 0

    def generate(self, requests: Sequence[Any]) -> Any:
        self.calls += 1
        if self.calls <= self.cuts:
            threading.Timer(self.after_s, self.lender.preempt).start()
        return self.engine.generate(requests)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def _wait(cond: Any, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def _collect_all(lender: Lender, run: str, n: int) -> tuple[list[Any], list[EpisodeJob]]:
    done: list[Any] = []
    back: list[EpisodeJob] = []
    end = time.monotonic() + 120
    while len(done) + len(back) < n:
        assert time.monotonic() < end, f"only {len(done)} finished and {len(back)} handed back of {n}"
        got, returned, _ = lender.collect(run)
        done += got
        back += returned
        time.sleep(0.02)
    return done, back


@pytest.fixture
def make_lender() -> Iterator[Any]:
    made: list[Lender] = []

    def make(busy: Any = lambda: False, **config: Any) -> Lender:
        lender = Lender(LendingConfig(enabled=True, idle_ms=0, **config), lending_slot, busy)
        made.append(lender)
        return lender

    yield make
    for lender in made:
        lender.close()


def test_a_cut_call_loses_nothing_and_resumes_unchanged(worlds: dict[str, Path], tiny_agent: Path,
                                                        make_lender: Any) -> None:
    """Calls cut mid-way by serving work leave every episode where it was: the lent episodes end exactly as the
    same jobs run without interruption (same tokens, same rewards), none lost, none doubled."""
    world = worlds["shopping"]
    jobs = _jobs(world, 8)
    reference = run_episodes(jobs, *_bare_slot(world, tiny_agent))

    lender = make_lender()
    lender.join(_spec(world, tiny_agent))
    assert lender.slot is not None
    cutter = Cutter(lender.slot.pool.model.engine, lender, cuts=3)
    lender.slot.pool.model = lender.slot.pool.model.__class__(engine=cutter, tokenizer=lender.slot.model.tokenizer,
                                                              sid=lender.slot.model.sid)
    assert lender.submit("run-1", jobs) == len(jobs)
    done, back = _collect_all(lender, "run-1", len(jobs))
    assert back == []
    assert lender.preemptions["cut"] == 3
    assert sorted((t.group, t.sample) for t in done) == sorted((j.group, j.sample) for j in jobs)
    got = {(t.group, t.sample): t for t in done}
    for ref in reference:
        lent = got[(ref.group, ref.sample)]
        assert lent.tokens == ref.tokens
        assert lent.reward == ref.reward
    assert lender.tokens == sum(t.response_tokens for t in done) > 0
    assert lender.episodes == len(jobs)


def _bare_slot(world: Path, agent: Path) -> tuple[Any, Any, RolloutSettings]:
    slot = lending_slot(_spec(world, agent))
    return slot.app, slot.model, SETTINGS


def test_no_rollout_while_serving_is_busy_and_paused_episodes_are_handed_back(
        worlds: dict[str, Path], tiny_agent: Path, make_lender: Any) -> None:
    world = worlds["shopping"]
    busy = threading.Event()
    busy.set()
    lender = make_lender(busy=busy.is_set, hand_back_s=0.3)
    lender.join(_spec(world, tiny_agent))
    assert lender.spare() == 0  # serving is busy: no capacity advertised
    jobs = _jobs(world, 8)
    lender.submit("run-1", jobs)
    done, back = _collect_all(lender, "run-1", len(jobs))
    assert done == [] and lender.tokens == 0  # not one token generated while serving was busy
    assert sorted((j.group, j.sample) for j in back) == sorted((j.group, j.sample) for j in jobs)
    assert lender.preemptions["pause"] >= 1 and lender.handed_back == len(jobs)
    busy.clear()
    assert lender.spare() == LendingConfig().max_episodes


def test_turning_lending_off_hands_everything_back(worlds: dict[str, Path], tiny_agent: Path,
                                                   make_lender: Any) -> None:
    world = worlds["shopping"]
    busy = threading.Event()
    busy.set()  # keep the episodes paused so they are still held when lending goes off
    lender = make_lender(busy=busy.is_set)
    lender.join(_spec(world, tiny_agent))
    jobs = _jobs(world, 8)
    lender.submit("run-1", jobs)
    _wait(lambda: lender.held() == len(jobs))
    status = lender.set_enabled(False)
    assert status["enabled"] is False and status["spare"] == 0 and status["held"] == 0
    _, back, _ = lender.collect("run-1")
    assert len(back) == len(jobs)
    assert lender.submit("run-1", jobs[:2]) == 0  # while off, new jobs go straight back
    assert len(lender.collect("run-1")[1]) == 2


def test_calls_for_another_run_are_refused(worlds: dict[str, Path], tiny_agent: Path, make_lender: Any) -> None:
    lender = make_lender()
    with pytest.raises(LendingRefused, match="no RL run has joined"):
        lender.submit("run-1", [])
    lender.join(_spec(worlds["shopping"], tiny_agent))
    with pytest.raises(LendingRefused, match="lends to run 'run-1', not 'other'"):
        lender.collect("other")


def test_the_slot_names_what_is_missing(worlds: dict[str, Path], tiny_agent: Path, tmp_path: Path) -> None:
    with pytest.raises(ServeSetupError, match="no catalog"):
        lending_slot(_spec(tmp_path, tiny_agent))
    with pytest.raises(ServeSetupError, match="not an agent directory"):
        lending_slot(_spec(worlds["shopping"], tmp_path))
    with pytest.raises(ServeSetupError, match="is a travel world, not shopping"):
        lending_slot(_spec(worlds["travel"], tiny_agent))  # a travel world under the shopping app
    with pytest.raises(ServeSetupError, match="unknown app"):
        lending_slot(JoinSpec(run="r", app="cinema", world=str(worlds["shopping"]), agent=str(tiny_agent)))


def test_wire_format_round_trips(worlds: dict[str, Path]) -> None:
    job = _jobs(worlds["shopping"], 4)[1]
    assert job_from_json(job_to_json(job)) == job
    from training.rl.trajectory import Trajectory

    t = Trajectory(task_id="t", group=3, sample=1, tokens=[1, 2, 3], mask=[0, 1, 1], logprobs=[0.0, -0.5, -1.25],
                   chunks=[0, 1, 1], versions=[2, 2, 2], reward=0.5, success=True, parts={"ndcg": 0.5},
                   item_ids=["i1"], messages=[{"role": "user", "content": "hi"}])
    assert trajectory_from_json(trajectory_to_json(t)) == t
    state = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(2, dtype=np.float32)}
    back = weights_from_bytes(weights_to_bytes(state))
    assert set(back) == {"a", "b"} and np.array_equal(back["a"], state["a"])


# ------------------------------------------------------------------------------------------------ over REST
@pytest.fixture
def lending_server(worlds: dict[str, Path], tiny_agent: Path) -> Iterator[tuple[str, Any]]:
    server = build_server(tiny_agent, [worlds["shopping"]], ServeConfig(api_key="key", lending={"enabled": True}))
    with BackgroundServer(create_app(server)) as url:
        yield url, server


def test_admin_routes_over_rest(lending_server: tuple[str, Any], worlds: dict[str, Path], tiny_agent: Path) -> None:
    url, server = lending_server
    key = {"X-API-Key": "key"}
    assert httpx.get(url + "/admin/lending").status_code == 401
    assert httpx.get(url + "/admin/lending", headers={"X-API-Key": "nope"}).status_code == 401
    status = httpx.get(url + "/admin/lending", headers=key).json()
    assert status["enabled"] is True and status["run"] is None and status["spare"] == 0  # nothing joined yet
    r = httpx.post(url + "/admin/lending/episodes", headers=key, json={"run": "r", "jobs": []})
    assert r.status_code == 409 and "no RL run has joined" in r.json()["detail"]
    bad = _spec(worlds["shopping"], tiny_agent).model_dump(mode="json") | {"world": "/nowhere"}
    r = httpx.post(url + "/admin/lending/join", headers=key, json=bad, timeout=60)
    assert r.status_code == 422 and "/nowhere" in r.json()["detail"]

    client = LenderClient(url, "key")
    spec = _spec(worlds["shopping"], tiny_agent)
    assert client.join(spec)["run"] == "run-1"
    r = httpx.post(url + "/admin/lending/episodes", headers=key, json={"run": "run-1", "jobs": [{"group": 1}]})
    assert r.status_code == 422 and "jobs[0]" in r.json()["detail"]
    r = httpx.put(url + "/admin/lending/weights", headers=key, params={"run": "run-1", "version": 1},
                  content=b"not safetensors")
    assert r.status_code == 422 and "safetensors" in r.json()["detail"]
    with pytest.raises(LendingError, match="409"):
        client.collect("someone-else")

    slot = server.lender.slot
    state = {k: v.detach().numpy().copy() for k, v in slot.model.engine.model.state_dict().items()}
    assert client.push_weights(state, 5, "run-1")["version"] == 5
    assert client.status()["version"] == 5
    jobs = _jobs(worlds["shopping"], 4)
    client.submit(jobs, "run-1")
    done: list[Any] = []
    end = time.monotonic() + 60
    while len(done) < len(jobs) and time.monotonic() < end:
        done += client.collect("run-1")[0]
        time.sleep(0.05)
    assert len(done) == len(jobs) and all(set(t.versions) == {5} for t in done)
    metrics = httpx.get(url + "/metrics").text
    assert 'sidekick_lending_enabled 1.0' in metrics
    assert "sidekick_rollout_episodes_total 4.0" in metrics
    assert "sidekick_rollout_tokens_total" in metrics and "sidekick_lending_spare_episodes" in metrics
    off = client.set_enabled(False)
    assert off["enabled"] is False and "sidekick_lending_enabled 0.0" in httpx.get(url + "/metrics").text


def test_lending_needs_an_api_key() -> None:
    with pytest.raises(ValueError, match=r"lending\.enabled needs api_key"):
        ServeConfig(lending={"enabled": True})
