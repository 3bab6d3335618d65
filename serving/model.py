"""Load an agent directory for serving: the HF engine, its tokenizer and the SID trie over the live catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np

from harness.agent import ModelAccess, SidResources
from harness.catalog import Catalog
from infra.engines.base import Engine
from infra.engines.hf import HFEngine
from sid.trie import SidTrie
from training.models import Agent, load_agent


def sid_resources(agent: Agent, catalog: Catalog) -> SidResources:
    """The trie over the agent's SIDs with the catalog's stock, price and category (items the catalog lacks
    get stock 0, so no filtered request can return them)."""
    ids = agent.sid_map.item_ids
    items = [catalog.get(i) for i in ids]
    stock = np.array([0.0 if it is None else (np.nan if it.stock is None else it.stock) for it in items], float)
    price = np.array([np.nan if it is None or it.price is None else it.price for it in items], float)
    category = [None if it is None else it.category_path for it in items]
    trie = SidTrie.from_sid_map(agent.sid_map, stock=stock, price=price, category=category)
    return SidResources(trie=trie, token_map=agent.token_map, sid_map=agent.sid_map, start_id=agent.sid_start_id,
                        end_id=agent.sid_end_id)


def load_model(agent_dir: Path, catalog: Catalog | None, *, dtype: Literal["auto", "bf16", "fp32"] = "auto",
               max_batch_size: int = 32) -> tuple[ModelAccess, Agent]:
    """The agent's model behind an :class:`HFEngine`, with SID retrieval over ``catalog`` when given."""
    agent = load_agent(Path(agent_dir))
    engine = HFEngine(agent.model, agent.tokenizer, dtype=dtype, max_batch_size=max_batch_size)
    sid = sid_resources(agent, catalog) if catalog is not None else None
    return ModelAccess(engine=engine, tokenizer=agent.tokenizer, sid=sid), agent


def reload_weights(agent_dir: Path, engine: Engine) -> int:
    """Read the agent directory's weights again into the live engine; returns the new weights version.

    Pass the serving front (:class:`~serving.batcher.BatchingEngine`), so the update waits for the
    batch in flight instead of overlapping it.
    """
    fresh = load_agent(Path(agent_dir))
    version = engine.weights_version + 1
    engine.update_weights(fresh.model.state_dict(), version)
    return version
