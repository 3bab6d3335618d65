"""Load an agent directory for serving: the HF engine, its tokenizer and the SID trie over the live catalog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Literal

from harness.agent import ModelAccess, SidResources
from infra.engines.base import Engine
from infra.engines.hf import HFEngine
from training.models import Agent, load_agent


def load_model(agent_dir: Path, sid: Callable[[Agent], SidResources] | None = None, *,
               dtype: Literal["auto", "bf16", "fp32"] = "auto", max_batch_size: int = 32) -> tuple[ModelAccess, Agent]:
    """The agent's model behind an :class:`HFEngine`; ``sid(agent)`` builds SID retrieval over the live catalog
    (the app decides how: e.g. ``apps.shopping.agent.sid_resources``), None = no SID retrieval."""
    agent = load_agent(Path(agent_dir))
    engine = HFEngine(agent.model, agent.tokenizer, dtype=dtype, max_batch_size=max_batch_size)
    return ModelAccess(engine=engine, tokenizer=agent.tokenizer, sid=sid(agent) if sid else None), agent


def reload_weights(agent_dir: Path, engine: Engine) -> int:
    """Read the agent directory's weights again into the live engine; returns the new weights version.

    Pass the serving front (:class:`~serving.batcher.BatchingEngine`), so the update waits for the
    batch in flight instead of overlapping it.
    """
    fresh = load_agent(Path(agent_dir))
    version = engine.weights_version + 1
    engine.update_weights(fresh.model.state_dict(), version)
    return version
