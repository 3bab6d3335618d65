"""Load an agent directory for serving: its engine (``engine:`` settings), tokenizer and SID retrieval."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.agent import ModelAccess, SidResources
from harness.agent_dir import Agent, agent_engine, load_agent
from infra.engines import Engine, EngineSettings


def load_model(agent_dir: Path, sid: Callable[[Agent], SidResources | None] | None = None, *,
               engine: EngineSettings | None = None) -> tuple[ModelAccess, Agent]:
    """The agent's model behind the engine ``engine`` names (default: HF); ``sid(agent)`` builds SID retrieval
    over the live catalog (the app's kit decides how), None = no SID retrieval."""
    agent = load_agent(Path(agent_dir))
    return ModelAccess(engine=agent_engine(agent, engine), tokenizer=agent.tokenizer,
                       sid=sid(agent) if sid else None), agent


def reload_weights(agent_dir: Path, engine: Engine) -> int:
    """Read the agent directory's weights again into the live engine; returns the new weights version.

    Pass the serving front (:class:`~serving.batcher.BatchingEngine`), so the update waits for the
    batch in flight instead of overlapping it.
    """
    fresh = load_agent(Path(agent_dir))
    version = engine.weights_version + 1
    engine.update_weights(fresh.model.state_dict(), version)
    return version
