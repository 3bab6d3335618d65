"""Fixtures of the serving tests: live servers (the worlds and the tiny agent are in tests/conftest.py).

Run: .venv/bin/python -m pytest tests/serving -q -m integration
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from apps.serve import build_server
from serving.app import create_app
from serving.background import BackgroundServer
from serving.server import AgentServer, ServeConfig

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
