"""Fixtures of the serving tests: three small worlds, a briefly trained tiny agent, and live servers.

Run: .venv/bin/python -m pytest tests/serving -q -m integration
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apps.livestream.world import LivestreamWorldConfig, generate_livestream_world
from apps.serve import build_server
from apps.shopping.world import ShoppingWorldConfig, generate_shopping_world
from apps.travel.world import TravelWorldConfig, generate_travel_world
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import AgentServer, ServeConfig


@pytest.fixture(scope="session")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 300-item shopping world, a 4-stream livestream world and a 60-POI travel city."""
    root = tmp_path_factory.mktemp("serve-worlds")
    generate_shopping_world(ShoppingWorldConfig(items=300, tasks=80, sessions=0, customers=1), root / "shopping")
    generate_livestream_world(LivestreamWorldConfig(streams=4, questions=40, viewers=10), root / "livestream")
    generate_travel_world(TravelWorldConfig(pois=60, requests=20, travellers=5), root / "travel")
    return {"shopping": root / "shopping", "livestream": root / "livestream", "travel": root / "travel"}


@pytest.fixture(scope="session")
def tiny_agent(worlds: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
               make_sid_dir: Callable[[Path, Path], Path]) -> Path:
    """A tiny SID-aware agent after a few SFT steps on the shopping world (a real agent directory)."""
    from training.sft import SFTConfig, train_sft

    root = tmp_path_factory.mktemp("serve-agent")
    sid = make_sid_dir(worlds["shopping"], root / "sid")
    cfg = SFTConfig.model_validate({
        "base": "tiny", "world": worlds["shopping"], "sid": sid, "out": root / "sft", "cache_dir": root / "cache",
        "max_steps": 4, "batch_size": 4, "max_seq_len": 128, "align_items": 20, "warmup_steps": 1, "eval_every": 0,
        "save_every": 0, "precision": "fp32", "threads": 1, "log_every": 1})
    result = train_sft(cfg)
    assert result.final_dir is not None
    return result.final_dir


ServerFactory = Callable[..., tuple[str, AgentServer]]


@pytest.fixture
def live_server(worlds: dict[str, Path]) -> Iterator[ServerFactory]:
    """``start(agent_dir, apps, **ServeConfig fields) -> (base_url, AgentServer)``; all are stopped after."""
    running: list[BackgroundServer] = []

    def start(agent_dir: Path | None, apps: tuple[str, ...] = ("shopping", "livestream", "travel"),
              **config: object) -> tuple[str, AgentServer]:
        server = build_server(agent_dir, [worlds[a] for a in apps], ServeConfig.model_validate(config))
        background = BackgroundServer(create_app(server))
        running.append(background)
        return background.start(), server

    yield start
    for background in running:
        background.stop()
