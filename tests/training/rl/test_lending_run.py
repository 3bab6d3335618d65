"""An RL run on a local Ray cluster with a real lending server (uvicorn on loopback) beside its dedicated worker.

Run: ``.venv/bin/python -m pytest tests/training/rl/test_lending_run.py -m integration -q`` (about a minute)
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from apps import kit
from apps.evaluate import load_tasks
from apps.rl import env_factory
from apps.serve import build_server
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import AgentServer, ServeConfig
from training.rl.controller import RLConfig, StepStats, train_rl
from training.rl.rollout import RolloutSettings

pytestmark = pytest.mark.integration
KEY = "lend-key"
SHOPPING = kit("shopping")
STEPS, GROUPS, G = 4, 4, 4


@pytest.fixture
def lending_server(worlds: dict[str, Path], tiny_agent: Path, monkeypatch: pytest.MonkeyPatch
                   ) -> Iterator[tuple[str, AgentServer, BackgroundServer]]:
    monkeypatch.setenv("SIDEKICK_API_KEY", KEY)
    server = build_server(tiny_agent, [worlds["shopping"]],
                          ServeConfig(api_key=KEY, torch_threads=1, lending={"enabled": True, "idle_ms": 20}))
    background = BackgroundServer(create_app(server))
    url = background.start()
    yield url, server, background
    background.stop()


def _config(agent: Path, world: Path, out: Path, url: str) -> RLConfig:
    return RLConfig(agent=agent, out=out, world=world, app="shopping", steps=STEPS, groups_per_step=GROUPS,
                    group_size=G, groups_per_call=2, env_workers=1, mode="sync", dynamic_sampling=False,
                    save_every=100, seed=0, lenders=[url], rollout=RolloutSettings(max_new_tokens=48, max_turns=1))


def _tasks(world: Path) -> list[Any]:
    return [t for t in load_tasks(world) if t.kind != "bundle" and not t.hidden][:40]


def _when_holding(server: AgentServer, action: Any, timeout_s: float = 120.0, finished: int = 0) -> threading.Thread:
    """Run ``action()`` in a thread as soon as the lender holds RL episodes (having finished ``finished``)."""
    def watch() -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            lender = server.lender
            if lender is not None and lender.held() > 0 and lender.episodes >= finished:
                action()
                return
            time.sleep(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


async def _burst(url: str, texts: list[str], budget_ms: float) -> list[tuple[int, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        async def one(text: str) -> tuple[int, float]:
            t0 = time.perf_counter()
            r = await client.post("/v1/shopping/sessions", json={"message": text, "budget_ms": budget_ms})
            return r.status_code, (time.perf_counter() - t0) * 1000
        return list(await asyncio.gather(*(one(t) for t in texts)))


def test_rl_with_a_lending_server_keeps_budgets_and_loses_no_episode(
        lending_server: tuple[str, AgentServer, BackgroundServer], worlds: dict[str, Path], tiny_agent: Path,
        tmp_path: Path) -> None:
    """While the lender holds episodes a burst of turns arrives: every turn is answered within its budget and the
    lent rollout is cut or paused. Then lending is turned off with episodes still held: they are handed back
    and run by the dedicated worker. Every update trains on exactly its groups: no episode lost or doubled."""
    url, server, _ = lending_server
    world = worlds["shopping"]
    texts = [t.messages[0].content for t in _tasks(world)][:8]
    replies: list[tuple[int, float]] = []
    lender = server.lender
    assert lender is not None
    paused_held: list[int] = []

    def burst_then_off() -> None:
        replies.extend(asyncio.run(_burst(url, texts, 1500.0)))
        _when_holding(server, lambda: (paused_held.append(lender.held()), _switch(url, False)))

    watcher = _when_holding(server, burst_then_off, finished=8)
    steps: list[StepStats] = []
    result = train_rl(_config(tiny_agent, world, tmp_path / "rl", url), _tasks(world), env_factory(SHOPPING, world),
                      SHOPPING.sid, progress=steps.append)
    watcher.join(5)
    assert result.steps == STEPS
    last = result.history[-1]
    assert last.trajectories == STEPS * GROUPS * G  # every update trained on all of its groups
    assert last.generated == STEPS * GROUPS * G  # and nothing was generated twice that was kept
    assert last.lent > 0
    assert len(replies) == len(texts)
    assert all(status == 201 and ms <= 1500.0 for status, ms in replies), replies
    assert lender.preemptions["cut"] + lender.preemptions["pause"] >= 1
    if paused_held:  # lending went off while the lender held episodes: they came back and ran elsewhere
        assert lender.handed_back >= paused_held[0] > 0
        assert last.handed_back >= paused_held[0]
    assert lender.status()["enabled"] is False


def test_a_lender_that_dies_costs_no_episode(lending_server: tuple[str, AgentServer, BackgroundServer],
                                             worlds: dict[str, Path], tiny_agent: Path, tmp_path: Path) -> None:
    url, server, background = lending_server
    world = worlds["shopping"]
    killed: list[int] = []
    lender = server.lender
    assert lender is not None

    def die() -> None:  # serving turns busy first, so the held episodes cannot finish while uvicorn shuts down
        lender.busy = lambda: True
        lender.preempt()  # and the rollout call in flight is cut
        killed.append(lender.held())
        background.stop(timeout_s=5)

    _when_holding(server, die)
    result = train_rl(_config(tiny_agent, world, tmp_path / "rl", url), _tasks(world), env_factory(SHOPPING, world),
                      SHOPPING.sid)
    assert killed and killed[0] > 0
    last = result.history[-1]
    assert result.steps == STEPS and last.trajectories == STEPS * GROUPS * G
    assert last.handed_back >= killed[0]  # the episodes it held ran again on the dedicated worker


def _switch(url: str, on: bool) -> None:
    r = httpx.post(url + "/admin/lending", headers={"X-API-Key": KEY}, json={"enabled": on}, timeout=30)
    r.raise_for_status()
